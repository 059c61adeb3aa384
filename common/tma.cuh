#pragma once
// Hopper's asynchronous copy engine, device side (NVIDIA sm_90+ only; empty elsewhere): shared-memory
// mbarriers and 2-D bulk tensor copies (TMA) described by a tensor map (host side: common/tensor_map.h).
//
// A ring of shared-memory stages fed by one producer thread and read by consumer warps needs two barriers
// per stage: `full` (the producer arms it with the bytes it expects; the copy engine completes it as they
// land) and `empty` (each consumer warp arrives once it has read the stage). Phases alternate 0, 1, 0, ...:
// the n-th use of a stage waits for phase parity (n & 1). A freshly initialized barrier counts its phase
// "-1" (parity 1) as complete, so the producer's first pass over `empty` waits for parity 1 and returns at
// once (PTX ISA, mbarrier.try_wait.parity).
#include "common/platform.cuh"

namespace fp8dk {
namespace tma {

#if defined(FP8DK_SM90)
FP8DK_DEVICE uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// One thread initializes; the block barrier after fence_barrier_init() publishes it to the copy engine too.
FP8DK_DEVICE void barrier_init(uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
FP8DK_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The producer's arrival: the phase completes once this arrival and `bytes` of copies have landed.
FP8DK_DEVICE void arrive_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}

FP8DK_DEVICE void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}

namespace detail {
// Spins until the phase of parity `parity` of this CTA's mbarrier has completed, with acquire semantics at CTA
// scope or, kCluster, at cluster scope.
template <bool kCluster>
FP8DK_DEVICE void wait_parity(uint64_t* bar, unsigned parity) {
  const uint32_t addr = shared_address(bar);
  uint32_t done = 0;
  do {
    if constexpr (kCluster) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    }
  } while (!done);
}
}  // namespace detail

// Blocks until the phase of parity `parity` has completed (acquire: the stage's bytes are visible after it).
FP8DK_DEVICE void wait(uint64_t* bar, unsigned parity) { detail::wait_parity<false>(bar, parity); }

// The same with acquire at cluster scope: what other CTAs of the cluster stored into this CTA's shared memory
// and counted on `bar` (st.async, common/cluster.cuh) is visible after it.
FP8DK_DEVICE void wait_cluster(uint64_t* bar, unsigned parity) { detail::wait_parity<true>(bar, parity); }

// L2 policy for data read exactly once (a GEMM's weights): evicted first, so it does not push out the
// activations and partial sums that are re-read.
FP8DK_DEVICE uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Fetches a tensor map (a __grid_constant__ parameter) into the descriptor cache ahead of its first copy.
FP8DK_DEVICE void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// The box of `map` whose first element is (x = c0, y = c1) into shared memory at `dst` (aligned as the
// map's swizzle requires: 1024 bytes for 128-byte swizzle); elements outside the tensor arrive as zeros and
// count towards the bytes all the same. Completes on `bar`.
FP8DK_DEVICE void copy_2d(void* dst, const void* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(shared_address(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(bar))
      : "memory");
}
FP8DK_DEVICE void copy_2d(void* dst, const void* map, int c0, int c1, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%2, %3}], [%4], %5;" ::"r"(shared_address(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(bar)), "l"(policy)
      : "memory");
}

// Named barrier `id` (1..15) among `threads` threads (whole warps) that all call it: some roles' warps of a
// warp-specialized block (barrier 0 is __syncthreads, which the other roles would never reach).
FP8DK_DEVICE void sync_threads(int threads, int id = 1) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

}  // namespace tma
}  // namespace fp8dk
