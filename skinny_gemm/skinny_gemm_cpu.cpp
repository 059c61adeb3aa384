// CPU skinny_gemm (skinny_gemm.h): out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias)
// with M <= 32, accumulated in fp32 on operands widened to fp32 (FP8 dequantizes exactly).
// Two paths (common/cpu_simd.h): portable C++ and AVX2 + FMA, which register-blocks 4 rows of a x 3 rows of b.
#include <vector>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "common/cpu_simd.h"
#include "skinny_gemm/skinny_gemm.h"

namespace {

using namespace fp8dk::cpu;

// The whole of `a` (at most 32 rows) is widened once and stays in cache; threads split the N rows of `b`, the
// large operand, so it is streamed from memory exactly once and each of its rows serves all M rows of `a`.
template <typename Ab, typename Out>
void skinny_gemm_rows(const fp8dk::SkinnyGemmShape& s, const Ab* a, const Ab* b, float alpha, const Out* bias,
                      Out* out) {
  std::vector<float> a_f(s.m * s.k);
  for (int64_t i = 0; i < s.m; ++i) widen(a + i * s.a_row_stride, s.k, a_f.data() + i * s.k);
  at::parallel_for(0, s.n, row_grain(s.k), [&](int64_t begin, int64_t end) {
    std::vector<float> b_row(s.k);
    for (int64_t j = begin; j < end; ++j) {
      widen(b + j * s.b_row_stride, s.k, b_row.data());
      const float add = bias != nullptr ? to_float(bias[j]) : 0.f;
      for (int64_t i = 0; i < s.m; ++i) {
        const float acc = dot_f32(a_f.data() + i * s.k, b_row.data(), s.k);
        out[i * s.out_row_stride + j] = from_float<Out>(acc * alpha + add);
      }
    }
  });
}

#if FP8DK_HAVE_AVX2_PATH
constexpr int64_t kMR = 4;  // rows of a per register block
constexpr int64_t kNR = 3;  // rows of b per register block: 12 accumulators + 3 b + 1 a = 16 ymm registers

// 8 elements of an operand as fp32.
template <typename Ab>
FP8DK_AVX2 inline __m256 load_b8(const Ab* p) {
  if constexpr (is_fp8_v<Ab>) {
    return avx2::fp8_decode8<std::is_same_v<Ab, c10::Float8_e4m3fnuz>>(reinterpret_cast<const uint8_t*>(p));
  } else {
    return avx2::load8(p);
  }
}

// n elements (a multiple of 8) to fp32.
template <typename Ab>
FP8DK_AVX2 void widen_avx2(const Ab* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(dst + i, load_b8(src + i));
}

FP8DK_AVX2 inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// acc[i][j] = sum_k a[i][k] * b[j][k] over k8 (a multiple of 8) for MR rows of a and kNR rows of b.
template <int64_t MR>
FP8DK_AVX2 void micro_kernel(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k8,
                             float acc_out[kMR][kNR]) {
  __m256 acc[MR][kNR];
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < kNR; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k8; k += 8) {
    const __m256 b0 = _mm256_loadu_ps(b + k), b1 = _mm256_loadu_ps(b + ldb + k), b2 = _mm256_loadu_ps(b + 2 * ldb + k);
    for (int64_t i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_loadu_ps(a + i * lda + k);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(ai, b2, acc[i][2]);
    }
  }
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < kNR; ++j) acc_out[i][j] = hsum(acc[i][j]);
}

// out[i0.., j0..] of one register block: acc * alpha + bias, rounded once.
template <typename Out>
void store_block(const fp8dk::SkinnyGemmShape& s, int64_t i0, int64_t j0, const float acc[kMR][kNR], float alpha,
                 const Out* bias, Out* out) {
  for (int64_t i = 0; i < std::min(kMR, s.m - i0); ++i) {
    for (int64_t j = 0; j < kNR && j0 + j < s.n; ++j) {
      const float add = bias != nullptr ? to_float(bias[j0 + j]) : 0.f;
      out[(i0 + i) * s.out_row_stride + j0 + j] = from_float<Out>(acc[i][j] * alpha + add);
    }
  }
}

// For M <= kMR: b's rows are widened in registers as they are read (each element is used by one block of a only),
// the K % 8 tail in scalar code. acc += a[i][k] * b[j][k] for kNR rows of b starting at j0 (rows past N read row
// j0 again; their sums are dropped).
template <int64_t MR, typename Ab>
FP8DK_AVX2 void direct_kernel(const float* a, int64_t lda, const fp8dk::SkinnyGemmShape& s, const Ab* b, int64_t j0,
                              float acc_out[kMR][kNR]) {
  const Ab* rows[kNR];
  for (int64_t j = 0; j < kNR; ++j) rows[j] = b + (j0 + j < s.n ? j0 + j : j0) * s.b_row_stride;
  __m256 acc[MR][kNR];
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < kNR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t k_vec = s.k & ~int64_t{7};
  for (int64_t k = 0; k < k_vec; k += 8) {
    const __m256 b0 = load_b8(rows[0] + k), b1 = load_b8(rows[1] + k), b2 = load_b8(rows[2] + k);
    for (int64_t i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_loadu_ps(a + i * lda + k);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(ai, b2, acc[i][2]);
    }
  }
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t j = 0; j < kNR; ++j) {
      float sum = hsum(acc[i][j]);
      for (int64_t k = k_vec; k < s.k; ++k) sum += a[i * lda + k] * to_float(rows[j][k]);
      acc_out[i][j] = sum;
    }
  }
}

// a is widened once into an [M, K8] fp32 buffer (K8 = K rounded up to 8, zero-padded); each task widens kNR rows
// of b at a time into a [kNR, K8] buffer (rows past N are zeros) and multiplies them with every block of kMR rows
// of a. Each output is one thread's sum in a fixed order: deterministic for any thread count.
template <typename Ab, typename Out>
FP8DK_AVX2 void widen_a_avx2(const fp8dk::SkinnyGemmShape& s, const Ab* a, int64_t k8, float* a_f) {
  const int64_t k_vec = s.k & ~int64_t{7};
  for (int64_t i = 0; i < s.m; ++i) {
    const Ab* src = a + i * s.a_row_stride;
    float* dst = a_f + i * k8;
    widen_avx2(src, k_vec, dst);
    widen(src + k_vec, s.k - k_vec, dst + k_vec);
  }
}

template <typename Ab, typename Out>
FP8DK_AVX2 void gemm_group_avx2(const fp8dk::SkinnyGemmShape& s, const float* a_f, const Ab* b, int64_t k8,
                                int64_t j0, float alpha, const Out* bias, float* b_buf, Out* out) {
  float acc[kMR][kNR];
  if (s.m <= kMR) {
    switch (s.m) {
      case 4: direct_kernel<4>(a_f, k8, s, b, j0, acc); break;
      case 3: direct_kernel<3>(a_f, k8, s, b, j0, acc); break;
      case 2: direct_kernel<2>(a_f, k8, s, b, j0, acc); break;
      default: direct_kernel<1>(a_f, k8, s, b, j0, acc); break;
    }
    store_block(s, 0, j0, acc, alpha, bias, out);
    return;
  }
  const int64_t k_vec = s.k & ~int64_t{7};
  for (int64_t j = 0; j < kNR; ++j) {
    float* dst = b_buf + j * k8;
    if (j0 + j < s.n) {
      const Ab* src = b + (j0 + j) * s.b_row_stride;
      widen_avx2(src, k_vec, dst);
      widen(src + k_vec, s.k - k_vec, dst + k_vec);
    } else {
      std::fill(dst, dst + k8, 0.f);
    }
  }
  for (int64_t i0 = 0; i0 < s.m; i0 += kMR) {
    const float* a_blk = a_f + i0 * k8;
    switch (std::min(kMR, s.m - i0)) {
      case 4: micro_kernel<4>(a_blk, k8, b_buf, k8, k8, acc); break;
      case 3: micro_kernel<3>(a_blk, k8, b_buf, k8, k8, acc); break;
      case 2: micro_kernel<2>(a_blk, k8, b_buf, k8, k8, acc); break;
      default: micro_kernel<1>(a_blk, k8, b_buf, k8, k8, acc); break;
    }
    store_block(s, i0, j0, acc, alpha, bias, out);
  }
}

template <typename Ab, typename Out>
void skinny_gemm_avx2(const fp8dk::SkinnyGemmShape& s, const Ab* a, const Ab* b, float alpha, const Out* bias,
                      Out* out) {
  const int64_t k8 = (s.k + 7) & ~int64_t{7};
  std::vector<float> a_f(s.m * k8, 0.f);
  widen_a_avx2<Ab, Out>(s, a, k8, a_f.data());
  const int64_t groups = (s.n + kNR - 1) / kNR;
  // About GRAIN_SIZE multiply-adds of work per task before a second thread is worth waking.
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, kNR * k8 * s.m));
  at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> b_buf(kNR * k8, 0.f);
    for (int64_t g = begin; g < end; ++g) {
      gemm_group_avx2(s, a_f.data(), b, k8, g * kNR, alpha, bias, b_buf.data(), out);
    }
  });
}
#endif

}  // namespace

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias) {
  constexpr const char* op = "skinny_gemm";
  const fp8dk::SkinnyGemmShape shape = fp8dk::check_skinny_gemm_args(out, a, b, scale_a, scale_b, bias, op);
  check_cpu(a, op, "a");
  // 16-bit operands take no scales: alpha = 1 leaves the product unchanged.
  const float alpha = shape.fp8 ? scale_value(*scale_a) * scale_value(*scale_b) : 1.f;
  if (shape.m == 0 || shape.n == 0) return;
  dispatch_operand(a.scalar_type(), [&](auto ab_tag) {
    using Ab = decltype(ab_tag);
    dispatch_16bit(out.scalar_type(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      const Ab* a_ptr = a.const_data_ptr<Ab>();
      const Ab* b_ptr = b.const_data_ptr<Ab>();
      const Out* bias_ptr = bias ? bias->const_data_ptr<Out>() : nullptr;
#if FP8DK_HAVE_AVX2_PATH
      if (path() == Path::kAvx2) {
        skinny_gemm_avx2(shape, a_ptr, b_ptr, alpha, bias_ptr, out.data_ptr<Out>());
        return;
      }
#endif
      skinny_gemm_rows(shape, a_ptr, b_ptr, alpha, bias_ptr, out.data_ptr<Out>());
    });
  });
}
