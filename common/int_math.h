#pragma once
// Integer and address helpers every plan uses. Host and device; no vendor headers, so torch-free host code,
// nvcc, hipcc and the AMD emulator all include it as written.
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

// Whether `p` lies on a `bytes` boundary (`bytes` a power of two).
FP8DK_INT_MATH_QUALIFIERS inline bool is_aligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & uintptr_t(bytes - 1)) == 0;
}

// Whether every row of a matrix, the first at `p`, rows `row_stride_bytes` apart, starts on a `bytes` boundary
// (the stride does not matter for a single row): whether accesses of `bytes` reach every row.
FP8DK_INT_MATH_QUALIFIERS inline bool rows_aligned(const void* p, long long row_stride_bytes, long long rows,
                                                   int bytes) {
  return is_aligned(p, bytes) && (rows <= 1 || row_stride_bytes % bytes == 0);
}

// The widest access, a power of two from `widest` down to 1 (elements or bytes, as `fits` counts), that
// `fits`: what a launcher vectorizes a kernel's loads and stores by.
template <typename Fits>
inline int widest_access(int widest, Fits fits) {
  for (int w = widest; w > 1; w /= 2) {
    if (fits(w)) return w;
  }
  return 1;
}

}  // namespace fp8dk
