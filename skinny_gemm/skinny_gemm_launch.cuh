#pragma once
// Host side of the skinny GEMM launch (torch, no device code): how split-K CTAs meet, the launch itself, and the
// dispatch of run-time choices (out format, token padding, weight access width) to kernel template arguments.
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
#include "skinny_gemm/skinny_gemm_tma.cuh"
#if defined(FP8DK_NVIDIA)
#include "common/tensor_map.h"
#endif

namespace fp8dk::skinny {

struct Launch {
  Plan plan;
  dim3 grid;  // split grid; a stream-K grid is sized in launch_plan from the kernel's occupancy
  int smem;
  int mp;
  int b_access;  // LB
  int sms;
};

struct Args {
  const unsigned char* a;
  const unsigned char* b;
  uint16_t* out;
  const uint16_t* bias;
  const float* scale_a;
  const float* scale_b;
};

constexpr int kMaxClusterSplit = 8;  // the portable cluster size

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

// Sizes a stream-K grid, or picks how split-K CTAs meet (the split may shrink so that all clusters run at
// once); allocates what that needs and launches.
template <class Ab, class Out, int MP, int LB>
void launch_plan(Launch l, const Args& x, const at::Tensor& like, bool split_forced, cudaStream_t stream) {
  auto* kernel = &skinny_gemm_kernel<Ab, Out, MP, LB>;
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (l.smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem));
  Plan& p = l.plan;
  p.cluster = 0;
  // Contributions per tile that meet in the workspace (0: none).
  int shared_slices = p.split_k > 1 ? p.split_k : 0;
  if (p.stream_k) {
    // One CTA per slot of the GPU, each with an equal run of units.
    const long long units = static_cast<long long>(p.tiles) * p.sub_iters;
    const long long slots = static_cast<long long>(l.sms) * fp8dk::max_active_blocks_per_sm(kernel, kThreads, l.smem);
    const long long ctas = stream_k_ctas(units, slots, p.wk * iters_per_block(row_blocks(l.mp), LB));
    l.grid = dim3(static_cast<unsigned>(ctas));
    shared_slices = tiles_unshared(units, ctas, p.sub_iters) ? 0 : max_contributions(units, ctas, p.sub_iters);
  }
#if defined(FP8DK_NVIDIA)
  // Clusters of the tile's split-K CTAs: (1, split, 1).
  auto clusters_at_once = [&](int split) {
    return fp8dk::max_active_clusters(fn, dim3(1, split, 1), kThreads, l.smem);
  };
  if (!p.stream_k && p.split_k > 1) {
    if (split_forced) {
      p.cluster = p.split_k <= kMaxClusterSplit && clusters_at_once(p.split_k) > 0;
    } else {
      // The largest split <= the planned one whose clusters all run at once.
      for (int split = p.split_k < kMaxClusterSplit ? p.split_k : kMaxClusterSplit; split > 1 && !p.cluster;
           --split) {
        if (clusters_at_once(split) >= static_cast<int>(l.grid.x)) {
          p.split_k = split;
          p.cluster = 1;
        }
      }
      l.grid.y = p.split_k;
    }
  }
#endif
  fp8dk::LaunchShape shape;
  shape.grid = l.grid;
  shape.block = dim3(kThreads);
  shape.smem_bytes = l.smem;
  if (p.cluster) {
    shape.cluster = dim3(1, l.grid.y, 1);
    fp8dk::launch_kernel(kernel, shape, stream, x.a, x.b, x.out, x.bias, x.scale_a, x.scale_b,
                         static_cast<float*>(nullptr), static_cast<unsigned*>(nullptr), p);
    return;
  }
  float* ws = nullptr;
  unsigned* counters = nullptr;
  at::Tensor workspace;
  if (shared_slices > 0) {
    // The fp32 partials [contributions, m, n] from the caching allocator (stream-ordered, graph-safe).
    workspace = at::empty({static_cast<long long>(shared_slices) * p.m * p.n}, like.options().dtype(at::kFloat));
    ws = workspace.data_ptr<float>();
    counters = arrival_counters(like, stream, p.tiles);
  }
  fp8dk::launch_kernel(kernel, shape, stream, x.a, x.b, x.out, x.bias, x.scale_a, x.scale_b, ws, counters, p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

#if defined(FP8DK_NVIDIA)
// The copy-engine kernel's launch: its plan and the tensor maps of a and b (skinny_gemm_tma.cuh).
struct TmaLaunch {
  TmaPlan plan;
  CUtensorMap map_a, map_b;
};

template <class Ab, class Out, int NT, int RB, bool kQgmma = false>
void launch_tma(const TmaLaunch& t, const Args& x, const at::Tensor& like, cudaStream_t stream) {
  auto* kernel = &skinny_gemm_tma_kernel<Ab, Out, NT, RB, kQgmma>;
  const TmaPlan& p = t.plan;
  // Per call (the attribute belongs to the current device's copy of the kernel), and always to the most any
  // plan asks (the opt-in limit less skinny_gemm.cu's reserve), so it never drops below a captured launch's.
  C10_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      fp8dk::max_shared_memory_per_block() - kTmaSmemReserve));
  float* ws = nullptr;
  unsigned* counters = nullptr;
  at::Tensor workspace;
  if (p.contributions > 1) {
    workspace = at::empty({static_cast<long long>(p.contributions) * p.m * p.n}, like.options().dtype(at::kFloat));
    ws = workspace.data_ptr<float>();
    counters = arrival_counters(like, stream, p.tiles);
  }
  fp8dk::LaunchShape shape;
  shape.grid = dim3(p.ctas);
  shape.block = dim3(kTmaThreads);
  shape.smem_bytes = p.smem_bytes;
  fp8dk::launch_kernel(kernel, shape, stream, t.map_a, t.map_b, x.out, x.bias, x.scale_a, x.scale_b, ws, counters, p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the copy-engine kernel's code for the current device has its sm_90 paths (else it only traps).
inline bool tma_kernel_available() {
  return fp8dk::launch_detail::ptx_version(reinterpret_cast<const void*>(
             &skinny_gemm_tma_kernel<fp8dk::E4m3fn, fp8dk::Bf16, 1, 1>)) >= 90;
}

template <class Ab, class Out>
void dispatch_tma(const TmaLaunch& t, const Args& x, const at::Tensor& like, cudaStream_t stream) {
  if constexpr (std::is_same_v<Ab, fp8dk::E4m3fn>) {
    if (t.plan.qgmma) {
      switch (t.plan.nt) {
        case 1: return launch_tma<Ab, Out, 1, 1, true>(t, x, like, stream);
        case 2: return launch_tma<Ab, Out, 2, 1, true>(t, x, like, stream);
        case 3: return launch_tma<Ab, Out, 3, 1, true>(t, x, like, stream);
        default: return launch_tma<Ab, Out, 4, 1, true>(t, x, like, stream);
      }
    }
  }
  const int key = t.plan.nt * 2 + t.plan.rb - 1;
  switch (key) {
    case 2: return launch_tma<Ab, Out, 1, 1>(t, x, like, stream);
    case 3: return launch_tma<Ab, Out, 1, 2>(t, x, like, stream);
    case 4: return launch_tma<Ab, Out, 2, 1>(t, x, like, stream);
    case 5: return launch_tma<Ab, Out, 2, 2>(t, x, like, stream);
    case 6: return launch_tma<Ab, Out, 3, 1>(t, x, like, stream);
    case 7: return launch_tma<Ab, Out, 3, 2>(t, x, like, stream);
    case 8: return launch_tma<Ab, Out, 4, 1>(t, x, like, stream);
    default: return launch_tma<Ab, Out, 4, 2>(t, x, like, stream);
  }
}
#else
struct TmaLaunch {};  // no copy-engine kernel on ROCm
#endif

// The run-time choices as template arguments: operand and out formats, token padding, weight access width;
// or the copy-engine kernel when `tma` is set.
struct Call {
  const Launch& l;
  const Args& x;
  const at::Tensor& like;
  bool split_forced;
  cudaStream_t stream;
  const TmaLaunch* tma;
};

template <class Ab, class Out, int MP>
void dispatch_access(const Call& c) {
  switch (c.l.b_access) {
    case 16:
      return launch_plan<Ab, Out, MP, 16>(c.l, c.x, c.like, c.split_forced, c.stream);
    case 8:
      return launch_plan<Ab, Out, MP, 8>(c.l, c.x, c.like, c.split_forced, c.stream);
    default:
      return launch_plan<Ab, Out, MP, Operand<Ab>::kBytes>(c.l, c.x, c.like, c.split_forced, c.stream);
  }
}

template <class Ab, class Out>
void dispatch_m(const Call& c) {
  switch (c.l.mp) {
    case 8:
      return dispatch_access<Ab, Out, 8>(c);
    case 16:
      return dispatch_access<Ab, Out, 16>(c);
    case 24:
      return dispatch_access<Ab, Out, 24>(c);
    default:
      return dispatch_access<Ab, Out, 32>(c);
  }
}

template <class Ab, class Out>
void dispatch_kernel(const Call& c) {
#if defined(FP8DK_NVIDIA)
  if (c.tma != nullptr) return dispatch_tma<Ab, Out>(*c.tma, c.x, c.like, c.stream);
#endif
  dispatch_m<Ab, Out>(c);
}

template <class Ab>
void dispatch_out(at::ScalarType out, const Call& c) {
  if (out == at::kHalf)
    dispatch_kernel<Ab, fp8dk::Fp16>(c);
  else
    dispatch_kernel<Ab, fp8dk::Bf16>(c);
}

// One entry point per operand format, each defined in its own translation unit.
void launch_e4m3fn(at::ScalarType out, const Call& c);
void launch_e4m3fnuz(at::ScalarType out, const Call& c);
void launch_fp16(const Call& c);
void launch_bf16(const Call& c);

}  // namespace fp8dk::skinny
