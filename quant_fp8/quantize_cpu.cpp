// CPU quantize_fp8 (quantize.h): out = saturate(input / scale) in the out's FP8 flavour, rounded
// to nearest even, NaN kept: the same fp32 division and conversion as reference.quantize_fp8, so the same bytes.
// Two paths with the same bits (common/cpu_simd.h): portable C++ and AVX2; rows are split over threads.
#include "common/checks.h"
#include "common/cpu_numerics.h"
#include "common/cpu_simd.h"
#include "quant_fp8/quantize.h"

namespace {

using namespace fp8dk::cpu;

#if FP8DK_HAVE_AVX2_PATH
template <typename In, typename Out>
FP8DK_AVX2 void quantize_row_avx2(const In* src, int64_t d, const OutputConverter<Out>& cvt, Out* dst) {
  const int64_t vec_end = d & ~int64_t{7};
  const OutputConverter8<Out> cvt8(cvt);
  for (int64_t i = 0; i < vec_end; i += 8) cvt8.store(dst + i, avx2::load8(src + i));
  for (int64_t i = vec_end; i < d; ++i) dst[i] = cvt(to_float(src[i]));
}
#endif

template <typename In, typename Out>
void quantize_rows(const fp8dk::QuantizeFp8Shape& shape, const In* x, const at::Tensor& scale, Out* out) {
  const auto cvt = OutputConverter<Out>::make(scale);
  const int64_t d = shape.in.cols;
  const bool avx2 = path() == Path::kAvx2;
  at::parallel_for(0, shape.in.rows, row_grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const In* src = x + r * shape.in.row_stride;
      Out* dst = out + r * shape.out.row_stride;
#if FP8DK_HAVE_AVX2_PATH
      if (avx2) {
        quantize_row_avx2(src, d, cvt, dst);
        continue;
      }
#endif
      for (int64_t i = 0; i < d; ++i) dst[i] = cvt(to_float(src[i]));
    }
  });
}

}  // namespace

void quantize_fp8(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& scale) {
  constexpr const char* op = "quantize_fp8";
  const fp8dk::QuantizeFp8Shape shape = fp8dk::check_quantize_fp8_args(out, input, scale, op);
  check_cpu(input, op, "input");
  dispatch_16bit(input.scalar_type(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_quant_out<In>(out.scalar_type(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      // The checks admit FP8 out only; the 16-bit case of the shared dispatch is never taken.
      if constexpr (is_fp8_v<Out>) {
        quantize_rows(shape, input.const_data_ptr<In>(), scale, out.data_ptr<Out>());
      }
    });
  });
}
