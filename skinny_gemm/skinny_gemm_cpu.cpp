// CPU skinny_gemm (torch-ext/torch_binding.h): out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias)
// with M <= 32, accumulated in fp32 on operands widened to fp32 (FP8 dequantizes exactly).
#include <vector>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "torch-ext/torch_binding.h"

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

}  // namespace

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias) {
  constexpr const char* op = "skinny_gemm";
  const fp8dk::SkinnyGemmShape shape = fp8dk::check_skinny_gemm_args(out, a, b, scale_a, scale_b, bias, op);
  check_cpu(a, op, "a");
  // 16-bit operands take no scales: alpha = 1 leaves the product unchanged.
  const float alpha = shape.fp8 ? scale_value(*scale_a) * scale_value(*scale_b) : 1.f;
  dispatch_operand(a.scalar_type(), [&](auto ab_tag) {
    using Ab = decltype(ab_tag);
    dispatch_16bit(out.scalar_type(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      skinny_gemm_rows(shape, a.const_data_ptr<Ab>(), b.const_data_ptr<Ab>(), alpha,
                       bias ? bias->const_data_ptr<Out>() : nullptr, out.data_ptr<Out>());
    });
  });
}
