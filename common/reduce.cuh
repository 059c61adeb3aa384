#pragma once
// Vendor portability layer, part 4: sums across a warp (32 lanes on NVIDIA, a 64-lane wavefront on AMD),
// a group of lanes, a block and a row split over a thread-block cluster. Fixed butterfly order, so results are
// deterministic for a given launch shape.
#include "common/cluster.cuh"
#include "common/platform.cuh"
#include "common/tma.cuh"

namespace fp8dk {

FP8DK_DEVICE float warp_sum(float v) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) v += shfl_xor(v, mask);
  return v;
}

// Sum over all threads of the block, returned to every thread. `scratch` is shared memory with room for
// one float per warp (kMaxWarps); the trailing barrier lets the caller reuse it at once.
constexpr int kMaxWarps = 1024 / kWarpSize;

FP8DK_DEVICE float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  sync_block();
  float total = 0.f;
  for (int i = 0; i < warps; ++i) total += scratch[i];  // same order in every thread: identical results
  sync_block();
  return total;
}

// Sum over the `group` consecutive lanes that share a row (a power of two up to the warp size). The branch is
// uniform across the warp, so every lane takes part in each shuffle.
FP8DK_DEVICE float group_sum(float v, int group) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    if (mask < group) v += shfl_xor(v, mask);
  }
  return v;
}

// The start of a row's reduction over a cluster (cluster_row_sum), early in the kernel, by every thread: thread
// 0 initializes this CTA's mbarrier `landed`, and every thread arrives (relaxed) at the cluster barrier whose
// wait, in cluster_row_sum, makes sure that every CTA of the cluster runs (its shared memory exists) and that its
// mbarrier is initialized before anything is stored into it.
FP8DK_DEVICE void cluster_row_sum_begin(uint64_t* landed) {
#if defined(FP8DK_SM90)
  if (threadIdx.x == 0) {
    tma::barrier_init(landed, 1);
    tma::fence_barrier_init();
  }
#else
  (void)landed;
#endif
  cluster_arrive_relaxed();
}

// Sum of v over the first `threads` threads of a row split over the CTAs of a cluster (`threads` a multiple
// of the warp size; the row's thread t is thread t % blockDim.x of rank t / blockDim.x), returned to every
// thread, in block_sum's order: the warp butterfly, then the warps' sums added one by one in warp order from
// 0. A row split over a cluster thus gets the sum a single block of `threads` threads gets, bit for bit.
// Each warp stores its sum into slot `warp` of `warp_sums` in every CTA of the cluster (one lane per CTA)
// through the asynchronous proxy, which counts the bytes on that CTA's mbarrier `landed`; each CTA waits for
// the bytes of every warp of the row, then reads the sums locally. No shared memory is touched remotely after
// that, so CTAs may exit at once. The caller has called cluster_row_sum_begin(landed) once, early in the kernel.
// Why not DSMEM stores and a barrier phase: that phase's release arrive compiles to MEMBAR.ALL.GPU, which waits
// for every earlier memory operation of the thread, global stores included, and takes 0.36 us on a quiet H100 and
// 0.8 us while a young flood of weight requests fills the memory system (benchmarks/fence_under_flood.cu). This
// exchange has no fence, so the caller may store before calling it.
FP8DK_DEVICE float cluster_row_sum(float v, int threads, float* warp_sums, uint64_t* landed) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = static_cast<int>(cluster_rank() * blockDim.x + threadIdx.x) / kWarpSize;
  const int warps = threads / kWarpSize;
  v = warp_sum(v);  // every lane holds the warp's sum (a butterfly: lane order does not matter, a + b == b + a)
  cluster_wait();
#if defined(FP8DK_SM90)
  if (threadIdx.x == 0) tma::arrive_expect_bytes(landed, static_cast<unsigned>(warps) * sizeof(float));
#endif
  if (lane < static_cast<int>(cluster_ctas()) && warp < warps)
    store_cluster_shared_async(warp_sums + warp, lane, v, landed);
  cluster_landed_wait(landed, 0);
  // Every slot of warp_sums is read and the ones past the row's warps are replaced by +0, which leaves the
  // sum unchanged (it is >= +0, inf or NaN): the loads have no branches and may be merged.
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxWarps; ++i) {
    const float s = warp_sums[i];
    total += i < warps ? s : 0.f;
  }
  return total;
}

}  // namespace fp8dk
