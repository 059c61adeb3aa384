#pragma once
// Vendor portability layer, part 4: sums across a warp (32 lanes on NVIDIA, a 64-lane wavefront on AMD),
// a group of lanes, a block and a row split over a thread-block cluster. Fixed butterfly order, so results are
// deterministic for a given launch shape.
#include "common/cluster.cuh"
#include "common/platform.cuh"

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

// Sum of v over the first `threads` threads of a row split over the CTAs of a cluster (`threads` a multiple
// of the warp size; the row's thread t is thread t % blockDim.x of rank t / blockDim.x), returned to every
// thread, in block_sum's order: the warp butterfly, then the warps' sums added one by one in warp order from
// 0. A row split over a cluster thus gets the sum a single block of `threads` threads gets, bit for bit.
// Each warp writes its sum into slot `warp` of `warp_sums` in every CTA of the cluster (DSMEM stores, one
// lane per CTA); after one barrier phase every CTA holds all the sums in its own shared memory and reads
// them locally. No shared memory is touched remotely after that phase, so CTAs may exit at once.
// The caller has called cluster_arrive_relaxed() once, early in the kernel: the wait here pairs with it and
// makes sure every CTA runs (its shared memory exists) before the remote stores; it costs nothing by then.
// The phase after the stores is a release arrive: it waits for this thread's earlier memory operations, so
// the caller keeps global stores until after this returns.
FP8DK_DEVICE float cluster_row_sum(float v, int threads, float* warp_sums) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = static_cast<int>(cluster_rank() * blockDim.x + threadIdx.x) / kWarpSize;
  const int warps = threads / kWarpSize;
  v = warp_sum(v);  // every lane holds the warp's sum (a butterfly: lane order does not matter, a + b == b + a)
  cluster_wait();
  if (lane < static_cast<int>(cluster_ctas()) && warp < warps) store_cluster_shared(warp_sums + warp, lane, v);
  cluster_sync();
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
