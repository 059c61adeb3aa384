#pragma once
// Vendor portability layer, part 2: number formats. Device code carries 16-bit activations as raw
// uint16_t bits and FP8 as raw bytes, so it needs neither cuda_fp16.h nor hip_fp16.h; every conversion is a
// named function with one implementation per vendor and a bit-exact software fallback.
//
// Rounding is round-to-nearest-even everywhere. FP8 quantization saturates at the flavour's largest finite
// value (+-inf included) and keeps NaN as NaN, like the reference's clamp followed by torch's conversion.
#include "common/platform.cuh"

namespace fp8dk {

// ------------------------------------------------------------------ format tags
// Each tag names one storage format: its bytes per element (kBytes), its raw storage type (Bits), whether it
// is an FP8 flavour (kFp8), and its conversions.

// ------------------------------------------------------------------ 16-bit activation formats

struct Bf16 {
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  using Bits = uint16_t;

  static FP8DK_DEVICE float to_float(uint16_t bits) { return uint_as_float(uint32_t(bits) << 16); }

  static FP8DK_DEVICE uint16_t from_float(float f) {
#if defined(FP8DK_NVIDIA)
    uint16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    uint32_t u = float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet the NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
#endif
  }

  // Two values packed in one 32-bit word, low half first (memory order).
  static FP8DK_DEVICE void unpack2(uint32_t w, float& lo, float& hi) {
    lo = uint_as_float(w << 16);
    hi = uint_as_float(w & 0xffff0000u);
  }

  static FP8DK_DEVICE uint32_t pack2(float lo, float hi) {
#if defined(FP8DK_NVIDIA)
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return uint32_t(from_float(lo)) | (uint32_t(from_float(hi)) << 16);
#endif
  }
};

struct Fp16 {
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  using Bits = uint16_t;

  static FP8DK_DEVICE float to_float(uint16_t bits) {
#if defined(FP8DK_NVIDIA)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#else
    return float(__builtin_bit_cast(_Float16, bits));
#endif
  }

  static FP8DK_DEVICE uint16_t from_float(float f) {
#if defined(FP8DK_NVIDIA)
    uint16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    return __builtin_bit_cast(uint16_t, static_cast<_Float16>(f));
#endif
  }

  static FP8DK_DEVICE void unpack2(uint32_t w, float& lo, float& hi) {
    lo = to_float(uint16_t(w & 0xffffu));
    hi = to_float(uint16_t(w >> 16));
  }

  static FP8DK_DEVICE uint32_t pack2(float lo, float hi) {
#if defined(FP8DK_NVIDIA)
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return uint32_t(from_float(lo)) | (uint32_t(from_float(hi)) << 16);
#endif
  }
};

// ------------------------------------------------------------------ FP8 flavours

// OCP e4m3fn (NVIDIA, gfx950): exponent bias 7, max 448 = 0x7e, NaN = 0x7f, has -0.
struct E4m3fn {
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  using Bits = uint8_t;
  static constexpr float kMax = 448.f;
  static constexpr int kBias = 7;
  static constexpr uint32_t kMaxBits = 0x7e;
};

// e4m3fnuz (gfx942 / MI300X): exponent bias 8, max 240 = 0x7f, NaN = 0x80, no -0.
struct E4m3fnuz {
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  using Bits = uint8_t;
  static constexpr float kMax = 240.f;
  static constexpr int kBias = 8;
  static constexpr uint32_t kMaxBits = 0x7f;
};

template <class F>
constexpr bool kIsFnuz = F::kBias == 8;

// Whether F is bfloat16 (whose packed arithmetic some devices lack).
template <class F>
inline constexpr bool kIsBf16 = false;
template <>
inline constexpr bool kIsBf16<Bf16> = true;

// Bit-exact software quantization of one float to an FP8 byte (saturating, RNE). Used where the device has
// no instruction for the flavour: NVIDIA before sm_89, e4m3fnuz on NVIDIA, e4m3fn on gfx942.
template <class F>
FP8DK_DEVICE uint32_t quantize1_soft(float x) {
  const uint32_t u = float_as_uint(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return kIsFnuz<F> ? 0x80u : (sign | 0x7fu);  // NaN
  const float ax = uint_as_float(mag);
  if (ax >= F::kMax) return sign | F::kMaxBits;  // saturate, +-inf included
  uint32_t bits;
  // Smallest normal is 2^(1 - bias); below it the spacing is fixed at 2^(-2 - bias).
  const float min_normal = uint_as_float(uint32_t(127 + 1 - F::kBias) << 23);
  if (ax < min_normal) {
    const float steps = ax * uint_as_float(uint32_t(127 + 2 + F::kBias) << 23);  // exact power-of-2 scale
    bits = uint32_t(round_even(steps));  // RNE; 8 steps is the smallest normal, whose bits are 0x08
  } else {
    // Keep 3 mantissa bits of the fp32 pattern, rounding to nearest even; a carry bumps the exponent.
    const uint32_t rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
    bits = (((rounded >> 23) - 127u + uint32_t(F::kBias)) << 3) | ((rounded >> 20) & 7u);
    if (bits > F::kMaxBits) bits = F::kMaxBits;
  }
  if (kIsFnuz<F> && bits == 0) return 0;  // fnuz has no -0
  return sign | bits;
}

// Clamp to +-max keeping NaN (the hardware conversions on AMD do not saturate by themselves). e4m3fnuz has no
// -0, and what gfx942's v_cvt_pk_fp8_f32 writes for -0 or a negative value that rounds to zero is not
// documented (0x00, or 0x80, which is NaN in e4m3fnuz): values of magnitude up to 2^-11 (half the smallest
// subnormal, 2^-10; 2^-11 itself ties to even, 0) become +0 first, so the byte is the reference's 0x00 under
// either answer (issue 19; tests/test_amd_emulator.py runs both). One compare and one select per value.
template <class F>
FP8DK_DEVICE float saturate_keep_nan(float x) {
  const float c = fmin_(fmax_(x, -F::kMax), F::kMax);
  if constexpr (kIsFnuz<F>) {
    const bool rounds_to_zero = uint_as_float(float_as_uint(x) & 0x7fffffffu) <= 0x1p-11f;  // false for NaN
    return x != x ? x : (rounds_to_zero ? 0.f : c);
  }
  return x != x ? x : c;
}

// Two values to two FP8 bytes (lo in the low byte), saturating, RNE.
template <class F>
FP8DK_DEVICE uint32_t quantize2(float lo, float hi) {
#if defined(FP8DK_NV_FP8_CVT)
  if constexpr (!kIsFnuz<F>) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
  }
#elif defined(FP8DK_AMD_FP8_FNUZ) || defined(FP8DK_AMD_FP8_OCP)
#if defined(FP8DK_AMD_FP8_FNUZ)
  constexpr bool native = kIsFnuz<F>;
#else
  constexpr bool native = !kIsFnuz<F>;
#endif
  if constexpr (native) {
    return uint32_t(__builtin_amdgcn_cvt_pk_fp8_f32(saturate_keep_nan<F>(lo), saturate_keep_nan<F>(hi), 0,
                                                    false)) &
           0xffffu;
  }
#endif
  return quantize1_soft<F>(lo) | (quantize1_soft<F>(hi) << 8);
}

// Four values to four FP8 bytes in one word (first value in the low byte), saturating, RNE.
template <class F>
FP8DK_DEVICE uint32_t quantize4(float a, float b, float c, float d) {
#if defined(FP8DK_AMD_FP8_FNUZ) || defined(FP8DK_AMD_FP8_OCP)
#if defined(FP8DK_AMD_FP8_FNUZ)
  constexpr bool native = kIsFnuz<F>;
#else
  constexpr bool native = !kIsFnuz<F>;
#endif
  if constexpr (native) {
    // v_cvt_pk_fp8_f32 writes bytes 0-1 or, with word_sel, bytes 2-3 of the same register.
    int w = __builtin_amdgcn_cvt_pk_fp8_f32(saturate_keep_nan<F>(a), saturate_keep_nan<F>(b), 0, false);
    w = __builtin_amdgcn_cvt_pk_fp8_f32(saturate_keep_nan<F>(c), saturate_keep_nan<F>(d), w, true);
    return uint32_t(w);
  }
#endif
  return quantize2<F>(a, b) | (quantize2<F>(c, d) << 16);
}

// ------------------------------------------------------------------ packed 16-bit arithmetic

#if defined(FP8DK_AMD)
typedef _Float16 f16x2_t __attribute__((ext_vector_type(2)));
#endif

// In(a + b) on two packed pairs. The exact sum rounded once equals the reference's fp32 add then rounding:
// double rounding through fp32 is innocuous when 24 >= 2p + 2 (p = 11 for fp16, 8 for bf16).
template <class In>
FP8DK_DEVICE uint32_t add2(uint32_t a, uint32_t b) {
#if defined(FP8DK_NVIDIA)
  uint32_t r;
  if constexpr (kIsBf16<In>) {
#if defined(FP8DK_SM90)
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
#else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(0x3f803f80u), "r"(b));  // a * 1 + b
#endif
  } else {
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
#else
  if constexpr (kIsBf16<In>) {  // gfx942 has no packed bf16 add
    float alo, ahi, blo, bhi;
    In::unpack2(a, alo, ahi);
    In::unpack2(b, blo, bhi);
    return In::pack2(alo + blo, ahi + bhi);
  } else {
    return __builtin_bit_cast(uint32_t, __builtin_bit_cast(f16x2_t, a) + __builtin_bit_cast(f16x2_t, b));
  }
#endif
}

// In(a * b) on two packed pairs: the product of two 16-bit values is exact in fp32, so the correctly rounded
// 16-bit multiply is the reference's fp32 multiply then rounding.
template <class In>
FP8DK_DEVICE uint32_t mul2(uint32_t a, uint32_t b) {
#if defined(FP8DK_NVIDIA)
  uint32_t r;
  if constexpr (kIsBf16<In>) {
#if defined(FP8DK_SM90)
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
#else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));  // a * b + -0
#endif
  } else {
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
#else
  if constexpr (kIsBf16<In>) {
    float alo, ahi, blo, bhi;
    In::unpack2(a, alo, ahi);
    In::unpack2(b, blo, bhi);
    return In::pack2(alo * blo, ahi * bhi);
  } else {
    return __builtin_bit_cast(uint32_t, __builtin_bit_cast(f16x2_t, a) * __builtin_bit_cast(f16x2_t, b));
  }
#endif
}

}  // namespace fp8dk
