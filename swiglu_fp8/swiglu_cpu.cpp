// CPU silu_and_mul (swiglu.h): input [..., 2*d] (gate, then up) -> out [..., d] with
// y = silu(gate) * up in fp32, rounded to the input dtype or quantized straight from fp32 (reference.py).
// Two paths with the same bits (common/cpu_simd.h): portable C++ and AVX2; rows are split over threads.
#include <cmath>

#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "common/cpu_simd.h"
#include "swiglu_fp8/swiglu.h"

namespace {

using namespace fp8dk::cpu;

// silu(g) = g / (1 + exp(-g)), torch's formula; exp_f32 may differ from torch's vectorized exp in the last bit,
// which the tests' 1-ulp tolerance covers.
template <typename In, typename Out>
void silu_and_mul_row(const In* x, int64_t begin, int64_t d, const OutputConverter<Out>& cvt, Out* out) {
  const In* up = x + d;
  for (int64_t i = begin; i < d; ++i) {
    const float g = to_float(x[i]);
    const float silu = g / (1.f + exp_f32(-g));
    out[i] = cvt(silu * to_float(up[i]));
  }
}

#if FP8DK_HAVE_AVX2_PATH
template <typename In, typename Out>
FP8DK_AVX2 void silu_and_mul_row_avx2(const In* x, int64_t d, const OutputConverter<Out>& cvt, Out* out) {
  const In* up = x + d;
  const int64_t vec_end = d & ~int64_t{7};
  const OutputConverter8<Out> cvt8(cvt);
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 g = avx2::load8(x + i);
    const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    cvt8.store(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)), avx2::load8(up + i)));
  }
  silu_and_mul_row(x, vec_end, d, cvt, out);
}
#endif

template <typename In, typename Out>
void silu_and_mul_rows(const fp8dk::SiluAndMulShape& shape, const In* x, const std::optional<at::Tensor>& scale,
                       Out* out) {
  const auto cvt = OutputConverter<Out>::make(scale);
  const int64_t d = shape.out.cols;
  const bool avx2 = path() == Path::kAvx2;
  at::parallel_for(0, shape.in.rows, row_grain(shape.in.cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const In* row = x + r * shape.in.row_stride;
      Out* out_row = out + r * shape.out.row_stride;
#if FP8DK_HAVE_AVX2_PATH
      if (avx2) {
        silu_and_mul_row_avx2(row, d, cvt, out_row);
        continue;
      }
#endif
      silu_and_mul_row(row, 0, d, cvt, out_row);
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
