// CUDA/ROCm silu_and_mul (swiglu.h): validates, plans the launch once (swiglu_plan.h: vector width and launch
// shape), and launches silu_and_mul_kernel (swiglu_kernels.cuh).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

#include "common/checks.h"
#include "common/device_info.h"
#include "common/launch.h"
#include "swiglu_fp8/swiglu.h"
#include "swiglu_fp8/swiglu_kernels.cuh"
#include "swiglu_fp8/swiglu_plan.h"

namespace {

using fp8dk::swiglu::kChunk;

template <class In, class Out>
void launch(const fp8dk::SiluAndMulShape& shape, const at::Tensor& out, const at::Tensor& input,
            const std::optional<at::Tensor>& scale, cudaStream_t stream) {
  const int64_t d = shape.out.cols;
  const int64_t rows = shape.in.rows;
  const auto* in_ptr = static_cast<const uint16_t*>(input.const_data_ptr());
  auto* out_ptr = static_cast<uint8_t*>(out.data_ptr());
  const fp8dk::SiluAndMulPlan plan =
      fp8dk::plan_silu_and_mul(in_ptr, out_ptr, Out::kBytes, d, rows, shape.in.row_stride,
                               shape.out.row_stride, fp8dk::device_props());
  fp8dk::LaunchShape s;
  s.grid = fp8dk::to_dim3(plan.shape.grid);
  s.block = fp8dk::to_dim3(plan.shape.block);
  const float* scale_ptr = scale.has_value() ? scale->const_data_ptr<float>() : nullptr;
  const auto run = [&](auto kernel) {
    fp8dk::launch_kernel(kernel, s, stream, in_ptr, out_ptr, scale_ptr, int(d), rows,
                         shape.in.row_stride, shape.out.row_stride);
  };
  switch (plan.width) {
    case 8: run(fp8dk::silu_and_mul_kernel<In, Out, 8>); break;
    case 4: run(fp8dk::silu_and_mul_kernel<In, Out, 4>); break;
    case 2: run(fp8dk::silu_and_mul_kernel<In, Out, 2>); break;
    default: run(fp8dk::silu_and_mul_kernel<In, Out, 1>); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class In>
void dispatch_out(const fp8dk::SiluAndMulShape& shape, const at::Tensor& out, const at::Tensor& input,
                  const std::optional<at::Tensor>& scale, cudaStream_t stream) {
  switch (out.scalar_type()) {
    case at::kFloat8_e4m3fn: return launch<In, fp8dk::E4m3fn>(shape, out, input, scale, stream);
    case at::kFloat8_e4m3fnuz: return launch<In, fp8dk::E4m3fnuz>(shape, out, input, scale, stream);
    default: return launch<In, In>(shape, out, input, scale, stream);  // the checks allow only the input dtype
  }
}

}  // namespace

void silu_and_mul(torch::Tensor& out, const torch::Tensor& input, const std::optional<torch::Tensor>& scale) {
  constexpr const char* op = "silu_and_mul";
  const fp8dk::SiluAndMulShape shape = fp8dk::check_silu_and_mul_args(out, input, scale, op);
  TORCH_CHECK(input.is_cuda(), op, ": input must be a CUDA tensor, got ", input.device());
  // The kernel indexes columns with 32-bit integers.
  TORCH_CHECK(shape.in.cols <= std::numeric_limits<int>::max() - 2 * kChunk, op,
              ": input's last dimension is too large, got ", shape.in.cols);
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  if (shape.in.rows == 0) return;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (input.scalar_type() == at::kHalf) {
    dispatch_out<fp8dk::Fp16>(shape, out, input, scale, stream);
  } else {
    dispatch_out<fp8dk::Bf16>(shape, out, input, scale, stream);
  }
}

FP8DK_TRACE_EXPORT(swiglu)
