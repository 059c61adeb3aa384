// CPU rms_norm and fused_add_rms_norm (torch-ext/torch_binding.h). Numerically reference.py's definition,
// transformers' LlamaRMSNorm followed by an optional FP8 quantization of its 16-bit result, so the 16-bit output
// matches the reference bit for bit except where a different fp32 summation order flips a rounding.
#include <cmath>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "torch-ext/torch_binding.h"

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
void add_residual(const In* x, In* residual, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) residual[i] = from_float<In>(to_float(x[i]) + to_float(residual[i]));
}

// One row of LlamaRMSNorm: normed = In(x * inv_rms) and h = In(weight * normed) are both rounded to the input
// dtype (the product of two 16-bit values is exact in fp32, so In(w * normed) is torch's 16-bit multiply).
template <typename In, typename Out>
void norm_row(const In* x, const In* weight, int64_t cols, float eps, const OutputConverter<Out>& cvt, Out* out) {
  const float inv = inv_rms(x, cols, eps);
  for (int64_t i = 0; i < cols; ++i) {
    const In normed = from_float<In>(to_float(x[i]) * inv);
    const In h = from_float<In>(to_float(weight[i]) * to_float(normed));
    out[i] = cvt(to_float(h));
  }
}

// `residual` is nullptr for rms_norm; for fused_add_rms_norm each row is first added into the (contiguous)
// residual, which is then the row that gets normalized.
template <typename In, typename Out>
void rms_norm_rows(const fp8dk::RmsNormShape& shape, const In* x, In* residual, const In* weight, float eps,
                   const std::optional<at::Tensor>& scale, Out* out) {
  const auto cvt = OutputConverter<Out>::make(scale);
  const int64_t cols = shape.in.cols;
  at::parallel_for(0, shape.in.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const In* row = x + r * shape.in.row_stride;
      if (residual != nullptr) {
        In* res_row = residual + r * cols;
        add_residual(row, res_row, cols);
        row = res_row;
      }
      norm_row(row, weight, cols, eps, cvt, out + r * shape.out.row_stride);
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
