// CPU rms_norm and fused_add_rms_norm (rmsnorm.h). Numerically reference.py's definition,
// transformers' LlamaRMSNorm followed by an optional FP8 quantization of its 16-bit result, so the 16-bit output
// matches the reference bit for bit except where a different fp32 summation order flips a rounding.
// Two paths with the same bits (common/cpu_simd.h): portable C++ and AVX2; rows are split over threads.
#include <cmath>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "common/cpu_simd.h"
#include "rmsnorm_fp8/rmsnorm.h"

namespace {

using namespace fp8dk::cpu;

// 1 / sqrt(mean(x^2) + eps) in fp32, in the reference's order: sum, divide by the hidden size, add eps.
template <typename In>
float inv_rms(const In* x, int64_t cols, float eps) {
  const float mean = dot_f32(x, x, cols) / static_cast<float>(cols);
  return 1.f / std::sqrt(mean + eps);
}

// residual <- x + residual, rounded to the input dtype like torch's `x + residual`.
template <typename In>
void add_residual(const In* x, In* residual, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) residual[i] = from_float<In>(to_float(x[i]) + to_float(residual[i]));
}

// One row of LlamaRMSNorm from element `begin` on: normed = In(x * inv_rms) and h = In(weight * normed) are both
// rounded to the input dtype (the product of two 16-bit values is exact in fp32, so In(w * normed) is torch's
// 16-bit multiply).
template <typename In, typename Out>
void norm_row(const In* x, const In* weight, int64_t begin, int64_t cols, float inv, const OutputConverter<Out>& cvt,
              Out* out) {
  for (int64_t i = begin; i < cols; ++i) {
    const In normed = from_float<In>(to_float(x[i]) * inv);
    const In h = from_float<In>(to_float(weight[i]) * to_float(normed));
    out[i] = cvt(to_float(h));
  }
}

#if FP8DK_HAVE_AVX2_PATH
// dot_f32(x, x, n) with the same 16 lanes, blocks and order: lanes 0-7 and 8-15 are two vectors.
template <typename In>
FP8DK_AVX2 float sum_squares_avx2(const In* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  constexpr int64_t kBlock = 64 * kLanes;
  __m256 total0 = _mm256_setzero_ps(), total1 = _mm256_setzero_ps();
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    __m256 lane0 = _mm256_setzero_ps(), lane1 = _mm256_setzero_ps();
    int64_t i = start;
    for (; i + kLanes <= end; i += kLanes) {
      const __m256 a = avx2::load8(x + i), b = avx2::load8(x + i + 8);
      lane0 = _mm256_add_ps(lane0, _mm256_mul_ps(a, a));
      lane1 = _mm256_add_ps(lane1, _mm256_mul_ps(b, b));
    }
    if (i < end) {
      alignas(32) float lane[kLanes];
      _mm256_store_ps(lane, lane0);
      _mm256_store_ps(lane + 8, lane1);
      for (int64_t l = 0; i < end; ++i, ++l) lane[l] += to_float(x[i]) * to_float(x[i]);
      lane0 = _mm256_load_ps(lane);
      lane1 = _mm256_load_ps(lane + 8);
    }
    total0 = _mm256_add_ps(total0, lane0);
    total1 = _mm256_add_ps(total1, lane1);
  }
  alignas(32) float total[kLanes];
  _mm256_store_ps(total, total0);
  _mm256_store_ps(total + 8, total1);
  float sum = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) sum += total[l];
  return sum;
}

template <typename In, typename Out>
FP8DK_AVX2 void norm_row_avx2(const In* x, In* residual, const In* weight, int64_t cols, float eps,
                              const OutputConverter<Out>& cvt, Out* out) {
  const int64_t vec_end = cols & ~int64_t{7};
  if (residual != nullptr) {
    for (int64_t i = 0; i < vec_end; i += 8) {
      const __m256 sum = _mm256_add_ps(avx2::load8(x + i), avx2::load8(residual + i));
      avx2::store8(residual + i, sum);
    }
    add_residual(x, residual, vec_end, cols);
    x = residual;
  }
  const float inv = 1.f / std::sqrt(sum_squares_avx2(x, cols) / static_cast<float>(cols) + eps);
  const __m256 inv8 = _mm256_set1_ps(inv);
  const OutputConverter8<Out> cvt8(cvt);
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 normed = avx2::round_to(In{}, _mm256_mul_ps(avx2::load8(x + i), inv8));
    cvt8.store(out + i, avx2::round_to(In{}, _mm256_mul_ps(avx2::load8(weight + i), normed)));
  }
  norm_row(x, weight, vec_end, cols, inv, cvt, out);
}
#endif

// `residual` is nullptr for rms_norm; for fused_add_rms_norm each row is first added into the (contiguous)
// residual, which is then the row that gets normalized.
template <typename In, typename Out>
void rms_norm_rows(const fp8dk::RmsNormShape& shape, const In* x, In* residual, const In* weight, float eps,
                   const std::optional<at::Tensor>& scale, Out* out) {
  const auto cvt = OutputConverter<Out>::make(scale);
  const int64_t cols = shape.in.cols;
  const bool avx2 = path() == Path::kAvx2;
  at::parallel_for(0, shape.in.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const In* row = x + r * shape.in.row_stride;
      In* res_row = residual != nullptr ? residual + r * cols : nullptr;
      Out* out_row = out + r * shape.out.row_stride;
#if FP8DK_HAVE_AVX2_PATH
      if (avx2) {
        norm_row_avx2(row, res_row, weight, cols, eps, cvt, out_row);
        continue;
      }
#endif
      if (res_row != nullptr) {
        add_residual(row, res_row, 0, cols);
        row = res_row;
      }
      norm_row(row, weight, 0, cols, inv_rms(row, cols, eps), cvt, out_row);
    }
  });
}

void rms_norm_cpu(torch::Tensor& out, const torch::Tensor& input, torch::Tensor* residual,
                  const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale,
                  const char* op) {
  const fp8dk::RmsNormShape shape = fp8dk::check_rms_norm_args(out, input, residual, weight, eps, scale, op);
  check_cpu(input, op, "input");
  dispatch_16bit(input.scalar_type(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_quant_out<In>(out.scalar_type(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      // eps joins the fp32 mean as an fp32 value, as in the reference's `variance + eps`.
      rms_norm_rows(shape, input.const_data_ptr<In>(), residual ? residual->data_ptr<In>() : nullptr,
                    weight.const_data_ptr<In>(), static_cast<float>(eps), scale, out.data_ptr<Out>());
    });
  });
}

}  // namespace

void rms_norm(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& weight, double eps,
              const std::optional<torch::Tensor>& scale) {
  rms_norm_cpu(out, input, nullptr, weight, eps, scale, "rms_norm");
}

void fused_add_rms_norm(torch::Tensor& out, const torch::Tensor& input, torch::Tensor& residual,
                        const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale) {
  rms_norm_cpu(out, input, &residual, weight, eps, scale, "fused_add_rms_norm");
}
