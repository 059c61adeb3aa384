#pragma once
// Programmatic dependent launch (PDL), device side. A kernel launched with PDL (common/launch.h) may start
// while the kernel before it on the stream is still running, so every kernel of this project follows two
// rules:
//   wait_for_prior_grid()  before its first access to global memory that a previous kernel may touch (reading
//                          an input, which may be that kernel's output; writing an output, which that kernel
//                          may still read). It returns once the previous grid has completed and its memory
//                          operations are visible.
//   allow_next_grid()      once every CTA of the grid has called it (or exited), the next kernel on the stream
//                          may start its CTAs, which run up to their own wait. It only moves the next launch
//                          earlier; correctness never depends on where it sits. The elementwise kernels call it
//                          at entry, before their own wait: the GEMM after them then starts as soon as SMs free
//                          up and streams its first weights while the GEMM before them is still finishing (a
//                          decode step's GEMM -> RMSNorm / SwiGLU / quantize -> GEMM; session 12: 405B TP8 decode
//                          step 1.00 -> 1.03x at batch 32, 1.06 -> 1.10x at batch 8 on an H100). The GEMMs call it
//                          once their last loads are issued.
// Before the wait a kernel may compute addresses and prefetch into L2 what no kernel writes (weights; see
// skinny_gemm_kernels.cuh). Not its inputs: a prefetch of rows the previous kernel was still writing, issued
// before the wait, made later loads read stale bytes on an H200 (docs/experiments/README.md, item 9), although
// L2 is where writes become coherent. Both are no-ops before sm_90, on AMD
// and in a launch without the attribute (griddepcontrol, PTX ISA 7.8).
#include "common/platform.cuh"

namespace fp8dk {

FP8DK_DEVICE void wait_for_prior_grid() {
#if defined(FP8DK_SM90)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

FP8DK_DEVICE void allow_next_grid() {
#if defined(FP8DK_SM90)
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Brings global bytes [p, p + bytes) into L2 without waiting (p and bytes multiples of 16). A hint: no
// result, no ordering, nothing to wait for.
FP8DK_DEVICE void prefetch_l2(const void* p, unsigned bytes) {
#if defined(FP8DK_SM90)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace fp8dk
