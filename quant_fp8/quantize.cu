// CUDA/ROCm quantize_fp8 (quantize.h): validates, plans the launch once (quantize_plan.h: store width and
// launch shape), and launches quantize_fp8_kernel (quantize_kernels.cuh) on the current stream. No host sync,
// no allocation: CUDA-graph safe (the scale is read by the kernel).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

#include "common/checks.h"
#include "common/device_info.h"
#include "common/launch.h"
#include "quant_fp8/quantize.h"
#include "quant_fp8/quantize_kernels.cuh"
#include "quant_fp8/quantize_plan.h"

namespace {

using fp8dk::quant::kChunk;

template <class In, class Out>
void launch(const fp8dk::QuantizeFp8Shape& shape, const at::Tensor& out, const at::Tensor& input,
            const at::Tensor& scale, cudaStream_t stream) {
  const int64_t d = shape.in.cols;
  const int64_t rows = shape.in.rows;
  const auto* in_ptr = static_cast<const uint16_t*>(input.const_data_ptr());
  auto* out_ptr = static_cast<uint8_t*>(out.data_ptr());
  const fp8dk::QuantizeFp8Plan plan = fp8dk::plan_quantize_fp8(in_ptr, out_ptr, d, rows, shape.in.row_stride,
                                                               shape.out.row_stride, fp8dk::device_props());
  fp8dk::LaunchShape s;
  s.grid = fp8dk::to_dim3(plan.shape.grid);
  s.block = fp8dk::to_dim3(plan.shape.block);
  const float* scale_ptr = scale.const_data_ptr<float>();
  const auto run = [&](auto kernel) {
    fp8dk::launch_kernel(kernel, s, stream, in_ptr, out_ptr, scale_ptr, int(d), rows,
                         shape.in.row_stride, shape.out.row_stride);
  };
  switch (plan.width) {
    case 16: run(fp8dk::quantize_fp8_kernel<In, Out, 16>); break;
    case 8: run(fp8dk::quantize_fp8_kernel<In, Out, 8>); break;
    case 4: run(fp8dk::quantize_fp8_kernel<In, Out, 4>); break;
    case 2: run(fp8dk::quantize_fp8_kernel<In, Out, 2>); break;
    default: run(fp8dk::quantize_fp8_kernel<In, Out, 1>); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class In>
void dispatch_out(const fp8dk::QuantizeFp8Shape& shape, const at::Tensor& out, const at::Tensor& input,
                  const at::Tensor& scale, cudaStream_t stream) {
  if (out.scalar_type() == at::kFloat8_e4m3fnuz) {
    launch<In, fp8dk::E4m3fnuz>(shape, out, input, scale, stream);
  } else {  // the checks allow only the two FP8 flavours
    launch<In, fp8dk::E4m3fn>(shape, out, input, scale, stream);
  }
}

}  // namespace

void quantize_fp8(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& scale) {
  constexpr const char* op = "quantize_fp8";
  const fp8dk::QuantizeFp8Shape shape = fp8dk::check_quantize_fp8_args(out, input, scale, op);
  TORCH_CHECK(input.is_cuda(), op, ": input must be a CUDA tensor, got ", input.device());
  // The kernel indexes columns with 32-bit integers.
  TORCH_CHECK(shape.in.cols <= std::numeric_limits<int>::max() - kChunk, op,
              ": input's last dimension is too large, got ", shape.in.cols);
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  if (shape.in.rows == 0 || shape.in.cols == 0) return;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (input.scalar_type() == at::kHalf) {
    dispatch_out<fp8dk::Fp16>(shape, out, input, scale, stream);
  } else {
    dispatch_out<fp8dk::Bf16>(shape, out, input, scale, stream);
  }
}

FP8DK_TRACE_EXPORT(quantize)
