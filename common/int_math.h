#pragma once
// Integer helpers every plan uses. Host and device; no vendor headers, so torch-free host code, nvcc, hipcc and
// the AMD emulator all include it as written.
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FP8DK_INT_MATH_QUALIFIERS __host__ __device__
#else
#define FP8DK_INT_MATH_QUALIFIERS
#endif

namespace fp8dk {

// a / b rounded up, for a >= 0 and b > 0.
template <typename T>
FP8DK_INT_MATH_QUALIFIERS constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// a rounded up to a multiple of b, for a >= 0 and b > 0.
template <typename T>
FP8DK_INT_MATH_QUALIFIERS constexpr T round_up(T a, T b) {
  return ceil_div(a, b) * b;
}

// The smallest power of two >= n (1 for n <= 1).
template <typename T>
FP8DK_INT_MATH_QUALIFIERS constexpr T pow2_ceil(T n) {
  T p = 1;
  while (p < n) p *= 2;
  return p;
}

template <typename T>
FP8DK_INT_MATH_QUALIFIERS constexpr bool is_pow2(T n) {
  return n > 0 && (n & (n - 1)) == 0;
}

}  // namespace fp8dk
