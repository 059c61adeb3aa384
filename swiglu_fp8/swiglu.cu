// CUDA/ROCm silu_and_mul (torch-ext/torch_binding.h): validates, picks the vector width and the launch
// shape, and launches silu_and_mul_kernel (swiglu_kernels.cuh).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <limits>

#include "common/checks.h"
#include "common/device_info.h"
#include "common/launch.h"
#include "common/row_chunk_grid.h"
#include "swiglu_fp8/swiglu_kernels.cuh"
#include "torch-ext/torch_binding.h"

namespace {

using fp8dk::swiglu::kChunk;
using fp8dk::swiglu::kMaxGridY;
using fp8dk::swiglu::kMaxThreads;

// Widest access (in elements: 8, 4, 2 or 1) that is aligned for every row of gate, up (d columns further)
// and out. Row strides only matter when there is more than one row.
int vector_width(const void* in, const void* out, int out_bytes, int64_t d, int64_t rows, int64_t in_stride,
                 int64_t out_stride) {
  for (int w = kChunk; w > 1; w /= 2) {
    const bool strides_ok = rows <= 1 || (in_stride % w == 0 && out_stride % w == 0);
    if (fp8dk::is_aligned(in, 2 * w) && fp8dk::is_aligned(out, out_bytes * w) && d % w == 0 && strides_ok) {
      return w;
    }
  }
  return 1;
}

template <class In, class Out>
void launch(const fp8dk::SiluAndMulShape& shape, const at::Tensor& out, const at::Tensor& input,
            const std::optional<at::Tensor>& scale, cudaStream_t stream) {
  const int64_t d = shape.out.cols;
  const int64_t rows = shape.in.rows;
  const auto* in_ptr = static_cast<const uint16_t*>(input.const_data_ptr());
  auto* out_ptr = static_cast<uint8_t*>(out.data_ptr());
  const int w = vector_width(in_ptr, out_ptr, fp8dk::swiglu::kOutBytes<Out>, d, rows, shape.in.row_stride,
                             shape.out.row_stride);
  const fp8dk::LaunchShape s =
      fp8dk::row_chunk_grid((d + kChunk - 1) / kChunk, rows, kMaxThreads, kMaxGridY, fp8dk::multiprocessor_count());
  const float* scale_ptr = scale.has_value() ? scale->const_data_ptr<float>() : nullptr;
  const auto run = [&](auto kernel) {
    fp8dk::launch_kernel(kernel, s, stream, in_ptr, out_ptr, scale_ptr, int(d), rows,
                         shape.in.row_stride, shape.out.row_stride);
  };
  switch (w) {
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
