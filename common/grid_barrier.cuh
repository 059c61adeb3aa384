#pragma once
// A barrier of every CTA of a grid, for kernels whose launcher has made sure that all their CTAs are resident
// at once (at most one CTA per SM and no more CTAs than SMs). Without that guarantee it can deadlock: never call
// it from a grid the device may run in waves.
//
// Its state is kGridBarrierWords words in global memory, zero before the first use: the arrivals of the current
// barrier and a generation count. The last CTA to arrive resets the arrivals and advances the generation, which releases
// the others; the arrivals are zero again when the barrier opens, so the state needs no memset per launch and
// serves every later grid that cannot overlap this one (on one stream, the next grid reads it only after its
// PDL wait). The generation may hold any value: each CTA waits for it to move past the value it read before
// arriving, which no other CTA can advance before this one has arrived.
//
// NVIDIA only (the copy-engine kernel's fused epilogue is its one user). One thread per CTA calls it, after a
// barrier of the CTA that follows the stores to publish, and the CTA's threads meet again after it: the stores
// are then visible to every CTA's loads past the barrier (cumulativity through the CTA barriers).
#include "common/platform.cuh"

namespace fp8dk {

#if defined(FP8DK_NVIDIA)
constexpr int kGridBarrierWords = 64;  // arrivals and generation 128 bytes apart: the polls do not hit the arrivals' line

FP8DK_DEVICE unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// `state`: kGridBarrierWords words. Release and acquire at device scope on the words themselves, no full fence:
// the arrival's release (cumulative over the CTA's stores that its barrier ordered before it) and the last
// arrival's acquire, then the generation's release and the waiters' acquire, order every CTA's stores before the
// barrier before every CTA's loads after it. (A sequentially consistent __threadfence() at each step, as
// cooperative groups' grid sync has, cost the fused GEMM epilogue several microseconds a call under the GEMM's
// memory traffic.)
FP8DK_DEVICE void grid_barrier(unsigned* state, unsigned ctas) {
  unsigned* const arrivals = state;
  unsigned* const generation = state + kGridBarrierWords / 2;
  const unsigned seen = load_acquire_gpu(generation);
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(arrivals) : "memory");
  if (old == ctas - 1) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(arrivals) : "memory");
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(generation) : "memory");
  } else {
    while (load_acquire_gpu(generation) == seen) {
    }
  }
}
#endif

}  // namespace fp8dk
