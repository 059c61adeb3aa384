#pragma once
// Scalar numerics and dtype dispatch shared by the CPU kernels (*_cpu.cpp). The CPU backend is the
// executable form of reference.py: every conversion here goes through the same c10 routines torch uses for
// `.to(dtype)`, so a kernel that computes the reference's fp32 value produces the reference's bytes.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include <ATen/Parallel.h>
#include <torch/all.h>

#include "common/checks.h"
#include "common/cpu_simd.h"

namespace fp8dk::cpu {

template <typename T>
inline constexpr bool is_fp8_v = std::is_same_v<T, c10::Float8_e4m3fn> || std::is_same_v<T, c10::Float8_e4m3fnuz>;

template <typename T>
inline float to_float(T v) {
  return static_cast<float>(v);
}

// FP8 -> fp32 through a 256-entry table of c10's own conversions (so exact): c10's bit manipulation costs more
// than the multiply-add a GEMM feeds the value to.
template <typename Fp8>
inline const std::array<float, 256>& fp8_to_float_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int bits = 0; bits < 256; ++bits) {
      t[bits] = static_cast<float>(Fp8(static_cast<uint8_t>(bits), Fp8::from_bits()));
    }
    return t;
  }();
  return table;
}

// Widens `n` contiguous elements to fp32.
template <typename T>
inline void widen(const T* src, int64_t n, float* dst) {
  if constexpr (is_fp8_v<T>) {
    const std::array<float, 256>& table = fp8_to_float_table<T>();
    for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i].x];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  }
}

// Round-to-nearest-even from fp32 (c10's conversions are the ones behind torch's `.to()`).
template <typename T>
inline T from_float(float v) {
  return static_cast<T>(v);
}

// saturate(v) then round-to-nearest-even into an FP8 flavour. The comparisons are false for NaN, so NaN passes
// through and converts to the flavour's NaN (0x7f / 0x80); +-inf saturates like any out-of-range value. The
// clamp is needed because c10's e4m3fnuz conversion maps out-of-range values to NaN rather than to +-240.
// fp8_encode (common/cpu_simd.h) is c10's conversion without branches (the tests compare it with c10's for every
// 16-bit input).
template <typename Fp8>
inline Fp8 saturate_to_fp8(float v) {
  static_assert(is_fp8_v<Fp8>);
  const float bound = static_cast<float>(std::numeric_limits<Fp8>::max());  // 448 or 240, folded
  v = v > bound ? bound : (v < -bound ? -bound : v);
  return Fp8(fp8_encode<std::is_same_v<Fp8, c10::Float8_e4m3fnuz>>(v), Fp8::from_bits());
}

// A per-tensor scale's value; check_scale (common/checks.h) guarantees one fp32 element.
inline float scale_value(const at::Tensor& scale) { return *scale.const_data_ptr<float>(); }

// The final store of the quantizing ops: with an FP8 `Out`, q = saturate(y / scale) (a true division, as the
// reference does, so the bytes match); with a 16-bit `Out`, y rounded to it. The checks guarantee an FP8 out
// comes with a scale and a 16-bit one without.
template <typename Out>
struct OutputConverter {
  float scale = 1.f;

  static OutputConverter make(const std::optional<at::Tensor>& scale) {
    OutputConverter cvt;
    if constexpr (is_fp8_v<Out>) cvt.scale = scale_value(*scale);
    return cvt;
  }

  Out operator()(float y) const {
    if constexpr (is_fp8_v<Out>) {
      return saturate_to_fp8<Out>(y / scale);
    } else {
      return from_float<Out>(y);
    }
  }
};

#if FP8DK_HAVE_AVX2_PATH
// OutputConverter on 8 lanes, for the AVX2 paths: the same division, clamp to the flavour's max keeping NaN and
// encoding, so the same bytes; a 16-bit `Out` is rounded to it.
template <typename Out>
struct OutputConverter8 {
  __m256 scale, bound;

  FP8DK_AVX2 explicit OutputConverter8(const OutputConverter<Out>& cvt)
      : scale(_mm256_set1_ps(cvt.scale)),
        bound(_mm256_set1_ps(fp8dk::fp8_max(c10::CppTypeToScalarType<Out>::value))) {}

  FP8DK_AVX2 void store(Out* p, __m256 y) const {
    if constexpr (is_fp8_v<Out>) {
      __m256 q = _mm256_div_ps(y, scale);
      q = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), bound), _mm256_min_ps(bound, q));
      avx2::store_bytes8(reinterpret_cast<uint8_t*>(p),
                         avx2::fp8_encode8<std::is_same_v<Out, c10::Float8_e4m3fnuz>>(q));
    } else {
      avx2::store8(p, y);
    }
  }
};
#endif

// sum_i float(a[i]) * float(b[i]) in fp32, accurate to about an ulp like torch's cascade sum, so RMSNorm's
// rounding of x * rsqrt(mean) rarely differs from the reference's. Fixed-width lanes of independent partial sums
// let the compiler vectorize without reassociating (no -ffast-math); the lanes restart every kBlock elements
// and fold into running totals, which keeps every sequential chain short (a single chain per lane over a
// 16384-wide row drifts by tens of ulps).
template <typename T>
inline float dot_f32(const T* a, const T* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  constexpr int64_t kBlock = 64 * kLanes;
  float total[kLanes] = {};
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    float lane[kLanes] = {};
    int64_t i = start;
    for (; i + kLanes <= end; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += to_float(a[i + l]) * to_float(b[i + l]);
    }
    for (int64_t l = 0; i < end; ++i, ++l) lane[l] += to_float(a[i]) * to_float(b[i]);
    for (int64_t l = 0; l < kLanes; ++l) total[l] += lane[l];
  }
  float sum = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) sum += total[l];
  return sum;
}

// Rows handed to one at::parallel_for task: enough rows that a task touches about GRAIN_SIZE elements, so small
// problems stay on the calling thread.
inline int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(cols, 1));
}

// Typed views of the ops' dtypes. Each calls `f` with a default-constructed value of the element type, so the
// callee is a generic lambda: `[&](auto tag) { using T = decltype(tag); ... }`. Only the types the checks in
// common/checks.h admit reach these; anything else is a bug in the caller.
template <typename F>
inline void dispatch_16bit(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kHalf: return f(c10::Half{});
    case at::kBFloat16: return f(c10::BFloat16{});
    default: TORCH_CHECK(false, "fp8dk: unexpected 16-bit dtype ", t);
  }
}

// A quantizing op's out: the 16-bit input type `In` or one of the FP8 flavours.
template <typename In, typename F>
inline void dispatch_quant_out(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat8_e4m3fn: return f(c10::Float8_e4m3fn{});
    case at::kFloat8_e4m3fnuz: return f(c10::Float8_e4m3fnuz{});
    default: return f(In{});
  }
}

// A GEMM operand: 16-bit or FP8.
template <typename F>
inline void dispatch_operand(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat8_e4m3fn: return f(c10::Float8_e4m3fn{});
    case at::kFloat8_e4m3fnuz: return f(c10::Float8_e4m3fnuz{});
    default: return dispatch_16bit(t, std::forward<F>(f));
  }
}

inline void check_cpu(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), op, ": this is the CPU build; ", name, " must be on the CPU, got ", t.device());
}

}  // namespace fp8dk::cpu
