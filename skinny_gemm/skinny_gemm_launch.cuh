#pragma once
// Host side of the skinny GEMM launch (torch, no device code): the kernels of one operand and out format behind
// one interface (Kernels): their occupancy, which the plan asks (skinny_gemm_launch_plan.h), and the launch of a
// plan as it is: the plan's template arguments picked out of the instantiated kernels, the workspace, the launch.
// Each operand format's kernels are instantiated in a translation unit of their own (skinny_gemm_<format>.cu),
// so the 72 kernels compile in parallel; skinny_gemm.cu validates, plans and calls one of them.
#include <c10/cuda/CUDAException.h>
#include <torch/all.h>

#include <map>
#include <mutex>
#include <tuple>

#include "common/device_info.h"
#include "common/launch.h"
#include "skinny_gemm/skinny_gemm_kernels.cuh"
#include "skinny_gemm/skinny_gemm_launch_plan.h"
#include "skinny_gemm/skinny_gemm_tma.cuh"

namespace fp8dk::skinny {

struct Args {
  const unsigned char* a;
  const unsigned char* b;
  uint16_t* out;
  const uint16_t* bias;
  const float* scale_a;
  const float* scale_b;
#if defined(FP8DK_NVIDIA)
  CUtensorMap map_a, map_b;  // the copy-engine kernel's view of a and b
#endif
};

// `count` arrival counters for the workspace reduction, all zero. The kernel leaves them zero (each tile's
// last CTA resets its counter), so a buffer is zeroed once, when allocated, and then serves every later launch
// that cannot overlap it: one buffer per (device, stream, CUDA-graph capture). Launches on other streams, and
// graph replays next to eager calls on the capture stream, get buffers of their own. Inside a capture the
// buffer comes from the graph's memory pool and its zeroing is a node of the graph (once per graph, not per
// call). Buffers live as long as the process (a captured graph may still use one): a few KB per stream and
// per captured graph.
inline unsigned* arrival_counters(const at::Tensor& like, cudaStream_t stream, long long count) {
  cudaStreamCaptureStatus status;
  unsigned long long capture = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture));
  if (status != cudaStreamCaptureStatusActive) capture = 0;
  static std::mutex mutex;
  static std::map<std::tuple<int, cudaStream_t, unsigned long long>, at::Tensor> buffers;
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = buffers[std::make_tuple(static_cast<int>(like.get_device()), stream, capture)];
  if (!buffer.defined() || buffer.numel() < count)
    buffer = at::zeros({count > 1024 ? count : 1024}, like.options().dtype(at::kInt));
  return static_cast<unsigned*>(buffer.data_ptr());
}

// Launches `kernel` as planned, with the workspace the plan asks for. `params`: the kernel's Plan or TmaPlan.
template <class Fn, class Operand, class Params>
void launch_planned(Fn* kernel, const LaunchPlan& l, const Operand& a, const Operand& b, const Args& x,
                    const Params& params, const at::Tensor& like, cudaStream_t stream) {
  if (l.smem_opt_in > 0) fp8dk::allow_dynamic_smem(kernel, l.smem_opt_in);
  float* ws = nullptr;
  unsigned* counters = nullptr;
  at::Tensor workspace;
  if (l.workspace_slices > 0) {
    // The fp32 partials [contributions, m, n] from the caching allocator (stream-ordered, graph-safe).
    workspace = at::empty({static_cast<long long>(l.workspace_slices) * params.m * params.n},
                          like.options().dtype(at::kFloat));
    ws = workspace.data_ptr<float>();
    counters = arrival_counters(like, stream, params.tiles);
  }
  fp8dk::LaunchShape shape;
  shape.grid = dim3(l.grid_x, l.grid_y);
  shape.block = dim3(l.threads);
  shape.smem_bytes = l.smem;
  shape.cluster = dim3(l.cluster_x, l.cluster_y, 1);
  fp8dk::launch_kernel(kernel, shape, stream, a, b, x.out, x.bias, x.scale_a, x.scale_b, ws, counters, params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The portable kernel for the plan's template arguments: tokens padded to MP, b read LB bytes at a time.
template <class Ab, class Out, int MP>
auto portable_kernel_mp(int lb) {
  switch (lb) {
    case 16: return &skinny_gemm_kernel<Ab, Out, MP, 16>;
    case 8: return &skinny_gemm_kernel<Ab, Out, MP, 8>;
    default: return &skinny_gemm_kernel<Ab, Out, MP, Ab::kBytes>;
  }
}
template <class Ab, class Out>
auto portable_kernel(int mp, int lb) {
  switch (mp) {
    case 8: return portable_kernel_mp<Ab, Out, 8>(lb);
    case 16: return portable_kernel_mp<Ab, Out, 16>(lb);
    case 24: return portable_kernel_mp<Ab, Out, 24>(lb);
    default: return portable_kernel_mp<Ab, Out, 32>(lb);
  }
}

#if defined(FP8DK_NVIDIA)
// The copy-engine kernel for the plan's template arguments: NT n-tiles of 8 tokens, RB row blocks per warp,
// and whether its warpgroups multiply with wgmma (OCP e4m3, RB = 1).
template <class Ab, class Out>
auto copy_engine_kernel(int nt, int rb, bool qgmma) {
  if constexpr (std::is_same_v<Ab, fp8dk::E4m3fn>) {
    if (qgmma) {
      switch (nt) {
        case 1: return &skinny_gemm_tma_kernel<Ab, Out, 1, 1, true>;
        case 2: return &skinny_gemm_tma_kernel<Ab, Out, 2, 1, true>;
        case 3: return &skinny_gemm_tma_kernel<Ab, Out, 3, 1, true>;
        default: return &skinny_gemm_tma_kernel<Ab, Out, 4, 1, true>;
      }
    }
  }
  switch (nt * 2 + rb - 1) {
    case 2: return &skinny_gemm_tma_kernel<Ab, Out, 1, 1>;
    case 3: return &skinny_gemm_tma_kernel<Ab, Out, 1, 2>;
    case 4: return &skinny_gemm_tma_kernel<Ab, Out, 2, 1>;
    case 5: return &skinny_gemm_tma_kernel<Ab, Out, 2, 2>;
    case 6: return &skinny_gemm_tma_kernel<Ab, Out, 3, 1>;
    case 7: return &skinny_gemm_tma_kernel<Ab, Out, 3, 2>;
    case 8: return &skinny_gemm_tma_kernel<Ab, Out, 4, 1>;
    default: return &skinny_gemm_tma_kernel<Ab, Out, 4, 2>;
  }
}
#endif

// The kernels of one operand and out format, as the plan and the launcher see them.
class Kernels : public Occupancy {
 public:
  // Whether this build's copy-engine kernel has its sm_90 paths for the current device (else it only traps).
  virtual bool copy_engine_code() const = 0;
  virtual void launch(const LaunchPlan& l, const Args& x, const at::Tensor& like, cudaStream_t stream) const = 0;

 protected:
  ~Kernels() = default;
};

template <class Ab, class Out>
class KernelsOf final : public Kernels {
 public:
  int ctas_per_sm(int mp, int lb, int smem) const override {
    auto* kernel = portable_kernel<Ab, Out>(mp, lb);
    fp8dk::allow_dynamic_smem(kernel, smem);
    return fp8dk::max_active_blocks_per_sm(kernel, kThreads, smem);
  }

  int clusters_at_once(int mp, int lb, int smem, int split) const override {
#if defined(FP8DK_NVIDIA)
    auto* kernel = portable_kernel<Ab, Out>(mp, lb);
    fp8dk::allow_dynamic_smem(kernel, smem);
    return fp8dk::max_active_clusters(reinterpret_cast<const void*>(kernel), dim3(1, split, 1), kThreads, smem);
#else
    return 0;
#endif
  }

  int copy_engine_clusters_at_once(const TmaPlan& p) const override {
#if defined(FP8DK_NVIDIA)
    auto* kernel = copy_engine_kernel<Ab, Out>(p.nt, p.rb, p.qgmma != 0);
    fp8dk::allow_dynamic_smem(kernel, p.smem_bytes);
    return fp8dk::max_active_clusters(reinterpret_cast<const void*>(kernel), dim3(p.cluster, 1, 1), tma_threads(p),
                                      p.smem_bytes);
#else
    (void)p;
    return 0;
#endif
  }

  bool copy_engine_code() const override {
#if defined(FP8DK_NVIDIA)
    return fp8dk::launch_detail::ptx_version(reinterpret_cast<const void*>(copy_engine_kernel<Ab, Out>(1, 1, false))) >= 90;
#else
    return false;
#endif
  }

  void launch(const LaunchPlan& l, const Args& x, const at::Tensor& like, cudaStream_t stream) const override {
#if defined(FP8DK_NVIDIA)
    if (l.kernel == Kernel::kCopyEngine) {
      const TmaPlan& p = l.copy_engine;
      return launch_planned(copy_engine_kernel<Ab, Out>(p.nt, p.rb, p.qgmma != 0), l, x.map_a, x.map_b, x, p, like, stream);
    }
#endif
    launch_planned(portable_kernel<Ab, Out>(l.mp, l.b_access), l, x.a, x.b, x, l.portable, like, stream);
  }
};

// The kernels of an operand format for an out format (16-bit operands: out has their format); each defined in
// the format's own translation unit.
const Kernels& kernels_e4m3fn(at::ScalarType out);
const Kernels& kernels_e4m3fnuz(at::ScalarType out);
const Kernels& kernels_fp16();
const Kernels& kernels_bf16();

template <class Ab>
const Kernels& fp8_kernels(at::ScalarType out) {
  static const KernelsOf<Ab, fp8dk::Fp16> to_fp16;
  static const KernelsOf<Ab, fp8dk::Bf16> to_bf16;
  if (out == at::kHalf) return to_fp16;
  return to_bf16;
}

}  // namespace fp8dk::skinny
