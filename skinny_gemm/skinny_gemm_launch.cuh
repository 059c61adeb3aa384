#pragma once
// Host side of the skinny GEMM launch (torch, no device code): how split-K CTAs meet, the launch itself, and the
// dispatch of run-time choices (out format, token padding, weight access width) to kernel template arguments.
// Each operand format's kernels are instantiated in a translation unit of their own (skinny_gemm_<format>.cu),
// so the 72 kernels compile in parallel; skinny_gemm.cu validates, plans and calls one of them.
#include <c10/cuda/CUDAException.h>
#include <torch/all.h>

#include "common/launch.h"
#include "skinny_gemm/skinny_gemm_kernels.cuh"

namespace fp8dk::skinny {

struct Launch {
  Plan plan;
  dim3 grid;
  int smem;
  int mp;
  int b_access;  // LB
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

// Picks how split-K CTAs meet (the split may shrink so that all clusters run at once), allocates what that
// needs and launches.
template <class Ab, class Out, int MP, int LB>
void launch_plan(Launch l, const Args& x, const at::Tensor& like, bool split_forced, cudaStream_t stream) {
  auto* kernel = &skinny_gemm_kernel<Ab, Out, MP, LB>;
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (l.smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem));
  Plan& p = l.plan;
  p.cluster = 0;
#if defined(FP8DK_NVIDIA)
  // Clusters of the tile's split-K CTAs: (1, split, 1).
  auto clusters_at_once = [&](int split) {
    return fp8dk::max_active_clusters(fn, dim3(1, split, 1), kThreads, l.smem);
  };
  if (p.split_k > 1) {
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
  if (p.split_k > 1) {
    // One allocation from the caching allocator (stream-ordered, graph-safe): the tiles' arrival counters,
    // padded to 16 bytes, then the fp32 partials [split_k, m, n]. Only the counters need zeroing.
    const long long counter_words = (l.grid.x + 3) / 4 * 4;
    const long long words = counter_words + static_cast<long long>(p.split_k) * p.m * p.n;
    workspace = at::empty({words}, like.options().dtype(at::kInt));
    counters = static_cast<unsigned*>(workspace.data_ptr());
    ws = reinterpret_cast<float*>(counters + counter_words);
    C10_CUDA_CHECK(cudaMemsetAsync(counters, 0, l.grid.x * sizeof(unsigned), stream));
  }
  fp8dk::launch_kernel(kernel, shape, stream, x.a, x.b, x.out, x.bias, x.scale_a, x.scale_b, ws, counters, p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The run-time choices as template arguments: operand and out formats, token padding, weight access width.
struct Call {
  const Launch& l;
  const Args& x;
  const at::Tensor& like;
  bool split_forced;
  cudaStream_t stream;
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

template <class Ab>
void dispatch_out(at::ScalarType out, const Call& c) {
  if (out == at::kHalf)
    dispatch_m<Ab, fp8dk::Fp16>(c);
  else
    dispatch_m<Ab, fp8dk::Bf16>(c);
}

// One entry point per operand format, each defined in its own translation unit.
void launch_e4m3fn(at::ScalarType out, const Call& c);
void launch_e4m3fnuz(at::ScalarType out, const Call& c);
void launch_fp16(const Call& c);
void launch_bf16(const Call& c);

}  // namespace fp8dk::skinny
