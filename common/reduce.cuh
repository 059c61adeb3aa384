#pragma once
// Vendor portability layer, part 4: sums across a warp (32 lanes on NVIDIA, a 64-lane wavefront on AMD)
// and across a block. Fixed butterfly order, so results are deterministic for a given launch shape.
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

}  // namespace fp8dk
