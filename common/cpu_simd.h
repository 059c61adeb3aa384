#pragma once
// The CPU kernels' two code paths and the primitives both are built from.
//
// Every CPU kernel has a portable path (plain C++, any CPU) and an AVX2 path (x86-64 with AVX2, FMA and F16C:
// Intel Haswell / AMD Zen and newer). The AVX2 code is compiled with a function-level target attribute, so the
// library is built for baseline x86-64 and runs on any x86-64 CPU; nothing uses AVX-512. Which path runs follows
// ATen's own CPU capability (the one torch.backends.cpu.get_cpu_capability() reports, which
// ATEN_CPU_CAPABILITY=default|avx2|avx512 overrides), so one switch selects the baseline code in ATen and here,
// and the tests can run both paths on one machine (scripts/test.sh does).
//
// The elementwise primitives give the same bits on both paths (same operations in the same order, no FMA), so
// the paths differ only in speed; the GEMM's AVX2 path accumulates with FMA (a different rounding of the
// same fp32 sum, within the op's contract).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <ATen/Version.h>
#include <torch/all.h>

#if defined(__x86_64__) || defined(_M_X64)
#define FP8DK_HAVE_AVX2_PATH 1
#include <immintrin.h>
#define FP8DK_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define FP8DK_HAVE_AVX2_PATH 0
#endif

namespace fp8dk::cpu {

enum class Path { kPortable, kAvx2 };

// Decided once per process, like ATen's capability (which reads ATEN_CPU_CAPABILITY once).
inline Path path() {
  static const Path chosen = [] {
#if FP8DK_HAVE_AVX2_PATH
    const std::string aten = at::get_cpu_capability();  // "DEFAULT", "AVX2" or "AVX512"
    if ((aten == "AVX2" || aten == "AVX512") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      return Path::kAvx2;
    }
#endif
    return Path::kPortable;
  }();
  return chosen;
}

inline std::string path_name() { return path() == Path::kAvx2 ? "avx2" : "default"; }

inline uint32_t f32_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// exp(x) in fp32 without libm, so that the portable and the AVX2 path compute the same bits: x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact enough), a degree-6 polynomial for e^r (the classic Cephes
// coefficients, about 1 ulp), and 2^n applied as two exact power-of-two factors so that n may reach 128.
// Overflows to inf above 88.72, underflows to 0 below -103.9; NaN stays NaN.
namespace exp_consts {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kMax = 88.7228394f;
constexpr float kMin = -103.972084f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace exp_consts

inline float exp_f32(float x) {
  using namespace exp_consts;
  if (!(x < kMax)) return x != x ? x : INFINITY;  // NaN or overflow
  if (x < kMin) return 0.f;
  const float n = std::nearbyint(x * kLog2e);
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * r2 + r;
  p = p + 1.f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni / 2;  // 2^n = 2^half * 2^(n - half), both factors within the exponent range
  p = p * f32_from_bits(static_cast<uint32_t>(half + 127) << 23);
  return p * f32_from_bits(static_cast<uint32_t>(ni - half + 127) << 23);
}

// FP8 <- fp32, round to nearest even, for a value already clamped to the flavour's range (or NaN): the bits c10's
// conversion gives (the tests compare every 16-bit input), without its branches. e4m3fn: bias 7, subnormals
// below 2^-6, NaN 0x7f with the sign kept. e4m3fnuz: bias 8, subnormals below 2^-7, NaN 0x80, no -0.
template <bool kFnuz>
inline uint8_t fp8_encode(float v) {
  const uint32_t bits = f32_bits(v);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t abs = bits ^ sign;
  if (abs > 0x7f800000u) return kFnuz ? 0x80 : static_cast<uint8_t>(0x7f | (sign >> 24));
  const uint32_t min_normal = kFnuz ? (120u << 23) : (121u << 23);
  const uint32_t denorm_magic = kFnuz ? (140u << 23) : (141u << 23);
  uint32_t code;
  if (abs < min_normal) {
    // Adding 2^13 (fnuz) / 2^14 leaves the value's multiple of the subnormal step in the low mantissa bits.
    code = f32_bits(f32_from_bits(abs) + f32_from_bits(denorm_magic)) - denorm_magic;
    if (kFnuz && code == 0) return 0;
  } else {
    const uint32_t rebias = kFnuz ? static_cast<uint32_t>(8 - 127) << 23 : static_cast<uint32_t>(7 - 127) << 23;
    code = (abs + rebias + 0x7ffffu + ((abs >> 20) & 1u)) >> 20;
  }
  return static_cast<uint8_t>(code | (sign >> 24));
}

#if FP8DK_HAVE_AVX2_PATH
namespace avx2 {

FP8DK_AVX2 inline __m256 load8(const c10::BFloat16* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
FP8DK_AVX2 inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
FP8DK_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

// fp32 -> bf16 bits, round to nearest even; NaN -> 0x7fc0 (c10's choice), in the low half of each 32-bit lane.
FP8DK_AVX2 inline __m256i bf16_bits(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}

// v rounded to the 16-bit type and widened back: the value a 16-bit intermediate holds.
FP8DK_AVX2 inline __m256 round_to(c10::BFloat16, __m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16));
}
FP8DK_AVX2 inline __m256 round_to(c10::Half, __m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

FP8DK_AVX2 inline void store8(c10::BFloat16* p, __m256 v) {
  const __m256i b = bf16_bits(v);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
FP8DK_AVX2 inline void store8(c10::Half* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// fp8_encode on 8 lanes: the same integer recipe, lane by lane.
template <bool kFnuz>
FP8DK_AVX2 inline __m256i fp8_encode8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i abs = _mm256_xor_si256(bits, sign);
  const int min_normal = kFnuz ? (120 << 23) : (121 << 23);
  const int denorm_magic = kFnuz ? (140 << 23) : (141 << 23);
  const __m256i sub = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(abs), _mm256_castsi256_ps(_mm256_set1_epi32(denorm_magic)))),
      _mm256_set1_epi32(denorm_magic));
  const int rebias = kFnuz ? static_cast<int>(static_cast<uint32_t>(8 - 127) << 23)
                           : static_cast<int>(static_cast<uint32_t>(7 - 127) << 23);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(abs, 20), _mm256_set1_epi32(1));
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(abs, _mm256_set1_epi32(rebias + 0x7ffff)), odd), 20);
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(min_normal), abs);
  __m256i code = _mm256_blendv_epi8(normal, sub, is_sub);
  __m256i sign8 = _mm256_srli_epi32(sign, 24);
  if constexpr (kFnuz) {  // no -0: a zero code keeps no sign
    sign8 = _mm256_andnot_si256(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()), sign8);
  }
  code = _mm256_or_si256(code, sign8);
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i nan = kFnuz ? _mm256_set1_epi32(0x80) : _mm256_or_si256(_mm256_set1_epi32(0x7f), sign8);
  return _mm256_blendv_epi8(code, nan, is_nan);
}

// The low byte of each 32-bit lane -> 8 consecutive bytes.
FP8DK_AVX2 inline void store_bytes8(uint8_t* p, __m256i codes) {
  const __m256i shuffle = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                           0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(codes, shuffle),
                                                    _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(bytes));
}

// 8 FP8 codes -> fp32, exactly (subnormals through an integer conversion, so flush-to-zero modes do not matter).
template <bool kFnuz>
FP8DK_AVX2 inline __m256 fp8_decode8(const uint8_t* p) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
  // Exponent and mantissa moved into fp32's fields and the exponent rebiased by an integer add (a float multiply
  // would see fp32 subnormals for the FP8 subnormals, which cost a microcode assist on many CPUs).
  const __m256i normal_bits = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32((kFnuz ? 119 : 120) << 23));
  const __m256 normal = _mm256_castsi256_ps(normal_bits);
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(kFnuz ? 0x1p-10f : 0x1p-9f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
  __m256 v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(is_sub));
  v = _mm256_or_ps(v, _mm256_castsi256_ps(sign));
  const __m256i is_nan = kFnuz ? _mm256_cmpeq_epi32(x, _mm256_set1_epi32(0x80))
                               : _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
  return _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_castsi256_ps(is_nan));
}

// exp_f32 on 8 lanes, operation for operation.
FP8DK_AVX2 inline __m256 exp8(__m256 x) {
  using namespace exp_consts;
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(kMax), _CMP_GE_OQ);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kMin), _CMP_LT_OQ);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kMax)), _mm256_set1_ps(kMin));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP1));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP2));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP3));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP4));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP5));
  p = _mm256_add_ps(_mm256_mul_ps(p, r2), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  // n / 2 rounded toward zero, as C++'s integer division: (n + (n < 0)) >> 1.
  const __m256i half = _mm256_srai_epi32(_mm256_sub_epi32(ni, _mm256_srai_epi32(ni, 31)), 1);
  const __m256i bias = _mm256_set1_epi32(127);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23)));
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23)));
  p = _mm256_blendv_ps(p, _mm256_setzero_ps(), under);
  p = _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), over);
  return _mm256_blendv_ps(p, x, is_nan);
}

}  // namespace avx2
#endif  // FP8DK_HAVE_AVX2_PATH

}  // namespace fp8dk::cpu
