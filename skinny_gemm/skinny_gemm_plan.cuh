#pragma once
// Skinny GEMM, part 1: the tiling shared by the NVIDIA and AMD kernels and by the launcher, and the heuristic
// that picks it from (M, N, K) and the SM/CU count. No torch; skinny_gemm_launch_plan.h applies it, with the
// tuning overrides.
//
// Work decomposition (out[M, N] = a[M, K] @ b[N, K]^T, M <= 32, b is the weight stream):
//
//   * A warp (NVIDIA, 32 lanes) or wave (AMD, 64 lanes) owns RB row blocks of 16 weight rows. In one
//     "sub-iteration" it reads 64 contiguous bytes of each of its rows: 4 lanes per row, one 16-byte chunk
//     per lane. That is 16 rows x 64 B = 1 KB per row block on both vendors (NVIDIA: 2 rows per lane,
//     AMD: 1 row per lane). SI = 64 B / element size K-elements per sub-iteration.
//   * A CTA holds WN x WK warps: WN warps side by side along N (BN = 16 * RB * WN rows per CTA) and WK warps
//     splitting the CTA's K range. The K range is swept in blocks of WK * IPB sub-iterations; in a block the
//     WK warp columns take consecutive runs of IPB sub-iterations, so the CTA reads WK * IPB * 64 contiguous
//     bytes of every row per block. The activations of a block are staged once in shared memory (converted
//     to the MMA input type) and read by all WN warps; partial sums of the WK columns are added in shared
//     memory in a fixed order.
//   * split_k CTAs share a tile of BN rows when the tiles alone cannot fill the GPU and add their fp32
//     partials in slice order (deterministic): through distributed shared memory when they form a cluster
//     (NVIDIA sm_90+, split_k <= 8), else through a workspace [split_k, M, N] finished by the last CTA to
//     arrive (skinny_gemm_reduce.cuh).
//
// Weight bytes in flight per lane: a stage is IPB * RB * rows-per-lane chunks of 16 B (128 B on NVIDIA,
// 64 B on AMD), double-buffered in registers, so every lane has one to two stages outstanding: with 256-512
// threads per SM that is 32-128 KB per SM, the ~30 KB per SM that Little's law asks for at H200 bandwidth
// (4.8 TB/s x ~0.8 us loaded latency / 132 SMs) with room to spare.
#include "common/int_math.h"
#include "common/platform.cuh"

namespace fp8dk {
namespace skinny {

constexpr int kThreads = 256;                           // threads per CTA on both vendors
constexpr int kWarps = kThreads / kWarpSize;            // 8 warps (NVIDIA) or 4 waves (AMD)
constexpr int kRowBlock = 16;                           // weight rows per MMA tile
constexpr int kLanesPerRow = 4;                         // lanes sharing a weight row in a sub-iteration
constexpr int kChunkBytes = 16;                         // bytes of one row a lane loads per sub-iteration
constexpr int kSubIterBytes = kLanesPerRow * kChunkBytes;        // 64 B of each row per sub-iteration
constexpr int kRowsPerLane = kRowBlock * kLanesPerRow / kWarpSize;  // 2 (NVIDIA) or 1 (AMD)
constexpr int kMaxStageChunks = 2;  // activation chunks (16 B of source) a thread stages per K-block
constexpr int kRedPad = 4;          // floats of padding per row of the partial-sum tile (bank spread)
constexpr int kPrefetchBlocks = 2;  // K-blocks of weights a CTA prefetches into L2 before its PDL wait

// Tokens padded to the MMA's token granularity (8 on both vendors' host view; AMD rounds to 16 inside).
FP8DK_HOST_DEVICE constexpr int padded_m(int m) { return (m + 7) / 8 * 8; }
// Row blocks per warp: two once the accumulators of one are small next to the stage registers, so the
// activation fragments read from shared memory serve two row blocks (halves shared-memory traffic at M > 16).
FP8DK_HOST_DEVICE constexpr int row_blocks(int mp) { return mp > 16 ? 2 : 1; }
// Sub-iterations per warp per K-block (IPB): a stage holds 4 chunks per row of a lane when b's rows allow
// 8- or 16-byte accesses (LB), one otherwise (every element of a narrow chunk is a separate load and
// register).
FP8DK_HOST_DEVICE constexpr int iters_per_block(int rb, int lb) { return lb >= 8 ? 4 / rb : 1; }
// Registers bound the CTAs an SM runs: 2 with RB = 1 (<= 128 registers), 1 with RB = 2 (<= 255).
FP8DK_HOST_DEVICE constexpr int ctas_per_sm(int rb) { return rb == 1 ? 2 : 1; }
// K elements per sub-iteration.
FP8DK_HOST_DEVICE constexpr int sub_iter_elems(int elem_bytes) { return kSubIterBytes / elem_bytes; }

// Everything the kernel needs to know about the launch (passed by value).
struct Plan {
  int m, n, k;
  long long a_stride, b_stride, out_stride;  // row strides in elements
  int wn, wk;               // warps per CTA along N and along K (wn * wk == kWarps)
  int block_n;              // weight rows per CTA = 16 * RB * wn
  int tiles;                // ceil(n / block_n)
  int stream_k;             // the grid's CTAs share the tiles x sub_iters units evenly (else: split grid)
  int split_k;              // split grid: CTAs per tile along K (grid.y)
  int cluster;              // split grid, split_k > 1: the tile's CTAs form a cluster and reduce through DSMEM
  int sub_iters;            // ceil(k / SI): sub-iterations along the whole K
  int block_elems;          // K elements per K-block = wk * IPB * SI
  int chunk_shift;          // log2(block_elems / chunk elements): staged chunks per token row
  int act_buf_bytes;        // bytes of one of the two activation staging buffers (rows of a: 16-byte aligned)
};

// Shared memory the kernel needs: two activation buffers, reused at the end as the partial-sum tile
// [wk][mp][block_n + kRedPad] fp32.
FP8DK_HOST_DEVICE constexpr int smem_bytes(int act_buf_bytes, int wk, int mp, int block_n) {
  const int act = 2 * act_buf_bytes;
  const int red = wk * mp * (block_n + kRedPad) * 4;
  return act > red ? act : red;
}

// Bytes of one row of a staged activation block of `block_elems` elements (a multiple of 32). NVIDIA stages
// f16/bf16, rows an odd multiple of 32 B so that 4 consecutive token rows start 8 banks apart
// (skinny_gemm_mma_nv.cuh); AMD stages FP8 bytes or 16-bit values (the host does not know which: it sizes
// for 16-bit), rows padded by 8 B so that 16 consecutive token rows start in different banks.
FP8DK_HOST_DEVICE constexpr int act_pitch(int block_elems, int staged_bytes) {
#if defined(FP8DK_AMD)
  return block_elems * staged_bytes + 8;
#else
  return block_elems * staged_bytes + 32;
#endif
}

// ------------------------------------------------------------------ the heuristic (host)
//
// 1. MP = M rounded up to 8, RB and IPB from MP (above).
// 2. BN: the smallest power-of-two WN with BN = 16 * RB * WN >= 4 * M, so a CTA's staged activations are at
//    most a quarter of its weight bytes (activations are re-read once per N tile, from L2) and a K-block's
//    activations are at most kMaxStageChunks chunks per thread. Then, while there are more tiles than the GPU
//    runs at once (SMs * CTAs per SM) and WN < kWarps, double WN: one wave of equally sized CTAs, since a
//    tail wave of a few CTAs cannot keep HBM busy.
// 3. split_k: fill the CTA slots of the GPU (SMs * CTAs per SM), not just the SMs: one CTA per SM streams the
//    weights 20-35% slower than several (stream_ceiling.cu, the kernel's walk at QKV), and the split that fills
//    the slots is faster (405B QKV at M = 8-16 13-16%, 8B/70B shapes up to 33%, nothing slower:
//    docs/experiments/README.md item 8). So
//    split_k = round(slots / tiles), at least 1, at most what still runs as one wave (slots / tiles), at most
//    one K-block per split, and small enough that the fp32 partials (split_k * M * N * 4 B, written and read
//    once) stay under ~1/8 of the weight bytes. With tiles >= SMs there is no split: a second wave of short
//    slices costs more than it hides.
// 4. (NVIDIA) with split_k > 1, the largest split <= min(split_k, 8) whose clusters the device runs
//    all at once (cudaOccupancyMaxActiveClusters); the workspace path when none does.
// 5. Stream-K instead (one CTA per slot, each an equal run of the tiles x sub-iterations, the narrowest block
//    of step 2) when the split grid of 2.-3. leaves more than 10% of the slots of its last wave idle, weight
//    rows are at least kStreamKMinRowBytes long and every stream-K CTA gets at least kStreamKMinBlocks
//    K-blocks. Each segment a CTA starts (a new tile) costs a pipeline fill and a reduction, so stream-K pays
//    only where the runs are long. On an H100 (benchmarks/results/nvidia-h100/session7-2026-11-21/): 1.01-1.04x
//    the split grid at 405B gate_up M <= 8 (208 tiles on 264 slots) and 1.10-1.12x at M = 24-32, 0.98x at M = 16;
//    but 0.7-0.9x at 8B gate_up M = 24-32 (4 KB rows), QKV M >= 8 (4-9 K-blocks per CTA) and down (256 tiles
//    on 264 slots). On an H200 (benchmarks/results/nvidia-h200/stream-k-2026-11-21/) the 405B gate_up choice is
//    1.06-1.09x at M >= 16 and 0.94-1.01x at M <= 8. An empirical rule from those two sweeps.
// FP8DK_SKINNY_BLOCK_N, FP8DK_SKINNY_SPLIT_K and FP8DK_SKINNY_STREAM_K override 2., 3. and 5. (tuning, tests);
// steps 4 and 5's grid, and the overrides, are applied in skinny_gemm_launch_plan.h.

struct Shape {
  int m, n, k;
  int elem_bytes;  // bytes of an operand element (1 for FP8, 2 for fp16/bf16)
};

// CTAs the GPU runs at once with row-block count rb: the slots steps 2 and 3 fill.
inline int cta_slots(int rb, int sms) { return sms * ctas_per_sm(rb); }

// The first rule of step 2: the narrowest block whose staged activations are at most a quarter of its weights.
inline int min_wn(const Shape& s) {
  const int rows_per_warp = kRowBlock * row_blocks(padded_m(s.m));
  int wn = 1;
  while (wn < kWarps && rows_per_warp * wn < 4 * s.m) wn *= 2;
  return wn;
}

inline int default_wn(const Shape& s, int sms) {
  const int rb = row_blocks(padded_m(s.m));
  const int rows_per_warp = kRowBlock * rb;
  int wn = min_wn(s);
  const int slots = cta_slots(rb, sms);
  while (wn < kWarps && ceil_div<long long>(s.n, rows_per_warp * wn) > slots) wn *= 2;
  return wn;
}

inline int max_split_k(const Shape& s, int wn, int lb) {
  const int rb = row_blocks(padded_m(s.m));
  const int block_elems = (kWarps / wn) * iters_per_block(rb, lb) * sub_iter_elems(s.elem_bytes);
  const int blocks = ceil_div(s.k, block_elems);
  return blocks > 1 ? blocks : 1;
}

inline int default_split_k(const Shape& s, int wn, int lb, int sms) {
  const int rb = row_blocks(padded_m(s.m));
  const int tiles = ceil_div<long long>(s.n, kRowBlock * rb * wn);
  if (tiles >= sms || s.k == 0) return 1;
  const int slots = cta_slots(rb, sms);
  int split = (slots + tiles / 2) / tiles;
  const int one_wave = slots / tiles;
  const long long partial_cap = static_cast<long long>(s.k) * s.elem_bytes / (64LL * s.m);
  if (split > one_wave) split = one_wave;
  if (split > partial_cap) split = static_cast<int>(partial_cap);
  const int most = max_split_k(s, wn, lb);
  if (split > most) split = most;
  return split > 1 ? split : 1;
}

constexpr int kStreamKMinBlocks = 16;
constexpr int kStreamKMinRowBytes = 8192;

// Step 5: whether stream-K beats the split grid (wn, split) of steps 2-3.
inline bool prefer_stream_k(const Shape& s, int wn, int split, int lb, int sms) {
  if (static_cast<long long>(s.k) * s.elem_bytes < kStreamKMinRowBytes) return false;
  const int rb = row_blocks(padded_m(s.m)), slots = cta_slots(rb, sms);
  const long long ctas = ceil_div<long long>(s.n, kRowBlock * rb * wn) * split;
  const long long waves = (ctas + slots - 1) / slots;
  if (10 * ctas >= 9 * waves * slots) return false;  // the split grid fills its slots
  const int stream_wn = min_wn(s);
  const long long units = ceil_div<long long>(s.n, kRowBlock * rb * stream_wn) *
                          ceil_div(s.k, sub_iter_elems(s.elem_bytes));
  const int block_units = (kWarps / stream_wn) * iters_per_block(rb, lb);
  return units >= static_cast<long long>(kStreamKMinBlocks) * block_units * slots;
}

// Stream-K: CTAs of the persistent grid and the most contributions one tile can have. One CTA per slot, but
// at least one K-block (`block_units` units) per CTA, so that small problems are not cut into partial sums
// of a few sub-iterations. CTA g takes units [floor(g * U / G), floor((g + 1) * U / G)), at least
// floor(U / G) of them, so a tile of S units meets at most ceil(S / floor(U / G)) + 1 CTAs.
inline long long stream_k_ctas(long long units, long long slots, int block_units) {
  const long long most = units / block_units > 1 ? units / block_units : 1;
  return most < slots ? most : slots;
}
inline int max_contributions(long long units, long long ctas, int sub_iters) {
  const long long shortest = units / ctas;
  const long long most = (sub_iters + shortest - 1) / shortest + 1;
  return static_cast<int>(most < ctas ? most : ctas);
}
// Whether every tile is computed by one CTA (the CTAs' ranges are whole, equal runs of tiles).
inline bool tiles_unshared(long long units, long long ctas, int sub_iters) {
  return units % ctas == 0 && (units / ctas) % sub_iters == 0;
}

}  // namespace skinny
}  // namespace fp8dk
