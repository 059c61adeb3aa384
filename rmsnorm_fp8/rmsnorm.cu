// CUDA / ROCm rms_norm and fused_add_rms_norm (rmsnorm.h): validates, plans the launch once
// (rmsnorm_plan.h: which kernel, grid, block, shared memory) from the shape, the actual alignment, the device
// and the tuning overrides, and launches that kernel of rmsnorm_kernels.cuh on the current stream. No host sync
// and no allocation: CUDA-graph safe.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "common/checks.h"
#include "common/device_info.h"
#include "common/launch.h"
#include "rmsnorm_fp8/rmsnorm.h"
#include "rmsnorm_fp8/rmsnorm_kernels.cuh"
#include "rmsnorm_fp8/rmsnorm_plan.h"

namespace {

using fp8dk::RmsNormKernel;
using fp8dk::RmsNormParams;
using fp8dk::RmsNormPlan;

#if defined(FP8DK_NVIDIA)
// The cluster kernel a plan names (its chunks and alignment).
template <class In, class Out, bool kResidual>
auto cluster_kernel(const RmsNormPlan& l) -> void (*)(RmsNormParams) {
  return l.chunks > 1 ? &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, false, 2>
         : l.aligned  ? &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, true, 1>
                      : &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, false, 1>;
}
#endif

// The plan for `s` on the current device: the overrides read (NVIDIA; ROCm has neither kernel they force) and
// the occupancy of the cluster and persistent kernels of these formats queried when the plan asks.
template <class In, class Out, bool kResidual>
RmsNormPlan plan(const fp8dk::RmsNormProblem& s) {
  fp8dk::RmsNormOverrides overrides;
  fp8dk::RmsNormOccupancy occupancy;
#if defined(FP8DK_NVIDIA)
  overrides = fp8dk::rms_norm_overrides();
  occupancy.active_clusters = [](const RmsNormPlan& c) {
    const auto kernel = cluster_kernel<In, Out, kResidual>(c);
    fp8dk::allow_dynamic_smem(kernel, c.smem_bytes);
    return fp8dk::max_active_clusters(reinterpret_cast<const void*>(kernel), dim3(c.cluster_ctas),
                                      static_cast<int>(c.block.x), c.smem_bytes);
  };
  occupancy.persistent_ctas_per_sm = [](int threads) {
    return fp8dk::max_active_blocks_per_sm(&fp8dk::rms_norm_persistent_kernel<In, Out, kResidual>, threads, 0);
  };
#endif
  return fp8dk::plan_rms_norm(s, fp8dk::device_props(), overrides, occupancy);
}

template <class In, class Out, bool kResidual>
void launch(RmsNormParams p, const fp8dk::RmsNormProblem& s, cudaStream_t stream) {
  const RmsNormPlan l = plan<In, Out, kResidual>(s);
  p.split = l.split;
  fp8dk::LaunchShape shape;
  shape.grid = fp8dk::to_dim3(l.grid);
  shape.block = fp8dk::to_dim3(l.block);
  shape.smem_bytes = l.smem_bytes;
  switch (l.kernel) {
    case RmsNormKernel::kAligned:
      fp8dk::launch_kernel(&fp8dk::rms_norm_kernel<In, Out, kResidual, true>, shape, stream, p);
      break;
    case RmsNormKernel::kGeneral:
      fp8dk::launch_kernel(&fp8dk::rms_norm_kernel<In, Out, kResidual, false>, shape, stream, p);
      break;
    case RmsNormKernel::kLongRow: {
      auto* kernel = &fp8dk::rms_norm_long_row_kernel<In, Out, kResidual>;
      fp8dk::allow_dynamic_smem(kernel, l.smem_bytes);
      fp8dk::launch_kernel(kernel, shape, stream, p);
      break;
    }
#if defined(FP8DK_NVIDIA)
    case RmsNormKernel::kCluster:
      shape.cluster = dim3(l.cluster_ctas);
      // (Its shared memory was allowed when the plan asked for its occupancy.)
      fp8dk::launch_kernel(cluster_kernel<In, Out, kResidual>(l), shape, stream, p);
      break;
    case RmsNormKernel::kPersistent:
      fp8dk::launch_kernel(&fp8dk::rms_norm_persistent_kernel<In, Out, kResidual>, shape, stream, p);
      break;
#else
    default:
      TORCH_CHECK(false, "rms_norm: no cluster or persistent kernel on ROCm");
#endif
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Dtypes to format tags: the input (and weight, residual) dtype, then the output's (input dtype or FP8).
template <bool kResidual, class In>
void dispatch_out(at::ScalarType out, const RmsNormParams& p, const fp8dk::RmsNormProblem& s, cudaStream_t stream) {
  switch (out) {
    case at::kFloat8_e4m3fn:
      return launch<In, fp8dk::E4m3fn, kResidual>(p, s, stream);
    case at::kFloat8_e4m3fnuz:
      return launch<In, fp8dk::E4m3fnuz, kResidual>(p, s, stream);
    default:  // check_quant_out guarantees the input dtype
      return launch<In, In, kResidual>(p, s, stream);
  }
}

void rms_norm_gpu(torch::Tensor& out, const torch::Tensor& input, torch::Tensor* residual,
                  const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale,
                  const char* op) {
  const fp8dk::RmsNormShape shape = fp8dk::check_rms_norm_args(out, input, residual, weight, eps, scale, op);
  TORCH_CHECK(input.is_cuda(), op, ": input must be a CUDA tensor");
  TORCH_CHECK(shape.in.cols < (int64_t(1) << 30), op, ": hidden size must be below 2^30, got ", shape.in.cols);
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (shape.in.rows == 0) return;

  RmsNormParams p{};
  p.input = static_cast<const uint16_t*>(input.const_data_ptr());
  p.residual = residual ? static_cast<uint16_t*>(residual->data_ptr()) : nullptr;
  p.out = out.data_ptr();
  p.weight = static_cast<const uint16_t*>(weight.const_data_ptr());
  p.scale = scale ? scale->const_data_ptr<float>() : nullptr;
  p.rows = shape.in.rows;
  p.input_stride = shape.in.row_stride;
  p.out_stride = shape.out.row_stride;
  p.hidden = static_cast<int>(shape.in.cols);
  p.eps = static_cast<float>(eps);  // joins the fp32 mean as an fp32 value, like the reference's `variance + eps`
  const fp8dk::RmsNormProblem s{p.input,  p.residual,     p.out,        p.weight,
                                p.rows,   p.input_stride, p.out_stride, p.hidden,
                                static_cast<int>(out.element_size())};

  const bool bf16 = input.scalar_type() == at::kBFloat16;
  if (residual) {
    bf16 ? dispatch_out<true, fp8dk::Bf16>(out.scalar_type(), p, s, stream)
         : dispatch_out<true, fp8dk::Fp16>(out.scalar_type(), p, s, stream);
  } else {
    bf16 ? dispatch_out<false, fp8dk::Bf16>(out.scalar_type(), p, s, stream)
         : dispatch_out<false, fp8dk::Fp16>(out.scalar_type(), p, s, stream);
  }
}

}  // namespace

void rms_norm(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& weight, double eps,
              const std::optional<torch::Tensor>& scale) {
  rms_norm_gpu(out, input, nullptr, weight, eps, scale, "rms_norm");
}

void fused_add_rms_norm(torch::Tensor& out, const torch::Tensor& input, torch::Tensor& residual,
                        const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale) {
  rms_norm_gpu(out, input, &residual, weight, eps, scale, "fused_add_rms_norm");
}

FP8DK_TRACE_EXPORT(rmsnorm)
