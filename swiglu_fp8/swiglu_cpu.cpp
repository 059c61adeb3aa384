// CPU silu_and_mul (torch-ext/torch_binding.h): input [..., 2*d] (gate, then up) -> out [..., d] with
// y = silu(gate) * up in fp32, rounded to the input dtype or quantized straight from fp32 (reference.py).
#include <cmath>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "torch-ext/torch_binding.h"

namespace {

using namespace fp8dk::cpu;

// silu(g) = g / (1 + exp(-g)), torch's formula; exp may differ from torch's vectorized exp in the last bit,
// which the tests' 1-ulp tolerance covers.
template <typename In, typename Out>
void silu_and_mul_row(const In* x, int64_t d, const OutputConverter<Out>& cvt, Out* out) {
  const In* up = x + d;
  for (int64_t i = 0; i < d; ++i) {
    const float g = to_float(x[i]);
    const float silu = g / (1.f + std::exp(-g));
    out[i] = cvt(silu * to_float(up[i]));
  }
}

template <typename In, typename Out>
void silu_and_mul_rows(const fp8dk::SiluAndMulShape& shape, const In* x, const std::optional<at::Tensor>& scale,
                       Out* out) {
  const auto cvt = OutputConverter<Out>::make(scale);
  const int64_t d = shape.out.cols;
  at::parallel_for(0, shape.in.rows, row_grain(shape.in.cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      silu_and_mul_row(x + r * shape.in.row_stride, d, cvt, out + r * shape.out.row_stride);
    }
  });
}

}  // namespace

void silu_and_mul(torch::Tensor& out, const torch::Tensor& input, const std::optional<torch::Tensor>& scale) {
  constexpr const char* op = "silu_and_mul";
  const fp8dk::SiluAndMulShape shape = fp8dk::check_silu_and_mul_args(out, input, scale, op);
  check_cpu(input, op, "input");
  dispatch_16bit(input.scalar_type(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_quant_out<In>(out.scalar_type(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      silu_and_mul_rows(shape, input.const_data_ptr<In>(), scale, out.data_ptr<Out>());
    });
  });
}
