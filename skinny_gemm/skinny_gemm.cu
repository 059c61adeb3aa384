// CUDA/ROCm skinny_gemm (skinny_gemm.h): validates the call, gathers what the plan needs, plans once and
// launches the plan.
//   * skinny_gemm_launch_plan.h decides the launch: the kernel (the copy-engine kernel on Hopper, the portable
//     kernel elsewhere), its tiling, grid, split-K or stream-K, clusters and workspace;
//   * skinny_gemm_launch.cuh launches a plan as it is.
// Knobs (FP8DK_SKINNY_*, read once per process): README "Tuning overrides".
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "common/checks.h"
#include "common/device_info.h"
#include "skinny_gemm.h"
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too
#if defined(FP8DK_NVIDIA)
#include "common/tensor_map.h"
#endif

namespace {

using namespace fp8dk::skinny;

const Kernels& kernels_for(at::ScalarType ab, at::ScalarType out) {
  switch (ab) {
    case at::kFloat8_e4m3fn:
      return kernels_e4m3fn(out);
    case at::kFloat8_e4m3fnuz:
      return kernels_e4m3fnuz(out);
    case at::kHalf:
      return kernels_fp16();
    default:
      return kernels_bf16();
  }
}

DeviceProps device_props(const Kernels& kernels) {
  DeviceProps d;
#if defined(FP8DK_NVIDIA)
  d.vendor = Vendor::kNvidia;
  d.cc_major = fp8dk::device_attribute(cudaDevAttrComputeCapabilityMajor);
  // Asked only where the plan can use it: the query loads the copy-engine kernel's code.
  d.copy_engine_code = d.cc_major == 9 && kernels.copy_engine_code();
#else
  d.vendor = Vendor::kAmd;
  d.cc_major = 0;
  d.copy_engine_code = false;
#endif
  d.sms = fp8dk::multiprocessor_count();
  d.smem_per_block = fp8dk::max_shared_memory_per_block();
  return d;
}

}  // namespace

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias) {
  constexpr const char* op = "skinny_gemm";
  const fp8dk::SkinnyGemmShape s = fp8dk::check_skinny_gemm_args(out, a, b, scale_a, scale_b, bias, op);
  TORCH_CHECK(a.is_cuda(), op, ": input must be a CUDA tensor");
  const c10::cuda::OptionalCUDAGuard guard(a.device());
  if (s.m == 0 || s.n == 0) return;
  TORCH_CHECK(s.n < (1LL << 31) && s.k < (1LL << 30), op, ": N must be < 2^31 and K < 2^30, got N = ", s.n,
              ", K = ", s.k);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  // The kernel reads rows of `a` as 16-byte chunks. `a` is at most 32 x K: a view whose rows are not 16-byte
  // aligned (rare: odd strides, offset views) is copied first into a row-padded buffer, on the stream.
  const int eb = s.fp8 ? 1 : 2;
  at::Tensor a_rows = a;
  if (!fp8dk::is_aligned(a.data_ptr(), 16) || (s.a_row_stride * eb) % 16 != 0) {
    const int64_t per_chunk = 16 / eb;
    a_rows = at::empty({s.m, (s.k + per_chunk - 1) / per_chunk * per_chunk}, a.options()).narrow(1, 0, s.k);
    a_rows.copy_(a);
  }

  Problem q;
  q.m = static_cast<int>(s.m), q.n = static_cast<int>(s.n), q.k = static_cast<int>(s.k), q.elem_bytes = eb;
  q.ocp_e4m3 = a.scalar_type() == at::kFloat8_e4m3fn;
  q.a_stride = a_rows.stride(0), q.b_stride = s.b_row_stride, q.out_stride = s.out_row_stride;
  q.a_align = row_alignment(a_rows.data_ptr(), q.a_stride * eb, s.m);
  // b's stride counts even for one row: its access width picks the portable kernel's K-block, and a weight of
  // one row is tiled like any other.
  q.b_align = row_alignment(b.data_ptr(), s.b_row_stride * eb, std::max<int64_t>(s.n, 2));
  // launch_kernel asks the stream's capture state again, not from here: the workspace's counters may be zeroed
  // on the stream in between (the first call of a capture), and the launch must follow that node.
  q.waits_for_foreign_kernel = fp8dk::starts_during_foreign_kernel(stream);
  const Kernels& kernels = kernels_for(a.scalar_type(), out.scalar_type());
  const LaunchPlan plan = plan_skinny_gemm(q, device_props(kernels), read_overrides(), kernels);

  Args x;
  x.a = static_cast<const unsigned char*>(a_rows.data_ptr());
  x.b = static_cast<const unsigned char*>(b.data_ptr());
  x.out = static_cast<uint16_t*>(out.data_ptr());
  x.bias = bias ? static_cast<const uint16_t*>(bias->data_ptr()) : nullptr;
  x.scale_a = s.fp8 ? scale_a->data_ptr<float>() : nullptr;
  x.scale_b = s.fp8 ? scale_b->data_ptr<float>() : nullptr;
#if defined(FP8DK_NVIDIA)
  if (plan.kernel == Kernel::kCopyEngine) {
    const TmaPlan& p = plan.copy_engine;
    x.map_a = fp8dk::tensor_map_2d(x.a, s.m, s.k, plan.a_map_stride_bytes, eb, p.nt * 8, p.box_elems, false);
    x.map_b = fp8dk::tensor_map_2d(x.b, s.n, s.k, s.b_row_stride * eb, eb, p.block_n, p.box_elems, true);
  }
#endif
  kernels.launch(plan, x, a, stream);
}
