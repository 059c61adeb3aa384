#pragma once
// A barrier of every CTA of a grid, for kernels whose launcher has made sure that all their CTAs are resident
// at once (at most one CTA per SM and no more CTAs than SMs). Without that guarantee it can deadlock: never call
// it from a grid the device may run in waves.
//
// Its state is two words in global memory, zero before the first use: the arrivals of the current barrier and
// a generation count. The last CTA to arrive resets the arrivals and advances the generation, which releases
// the others; the arrivals are zero again when the barrier opens, so the state needs no memset per launch and
// serves every later grid that cannot overlap this one (on one stream, the next grid reads it only after its
// PDL wait). The generation may hold any value: each CTA waits for it to move past the value it read before
// arriving, which no other CTA can advance before this one has arrived.
//
// NVIDIA only (the copy-engine kernel's fused epilogue is its one user). One thread per CTA calls it, after a
// barrier of the CTA that follows the stores to publish, and the CTA's threads meet again after it: the fences
// make those stores visible to every CTA past the barrier (cumulativity through the CTA barriers), as
// cooperative groups' grid sync does.
#include "common/platform.cuh"

namespace fp8dk {

#if defined(FP8DK_NVIDIA)
FP8DK_DEVICE unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

FP8DK_DEVICE void grid_barrier(unsigned* state, unsigned ctas) {
  unsigned* const arrivals = state;
  unsigned* const generation = state + 1;
  const unsigned seen = load_acquire_gpu(generation);
  __threadfence();
  if (atomicAdd(arrivals, 1u) == ctas - 1) {
    atomicExch(arrivals, 0u);
    __threadfence();
    atomicAdd(generation, 1u);
  } else {
    while (load_acquire_gpu(generation) == seen) {
    }
  }
  __threadfence();
}
#endif

}  // namespace fp8dk
