#pragma once
// Skinny GEMM on Hopper, part 2: the copy-engine kernel. out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a *
// scale_b (+ bias), M <= 32, fed by the copy engine instead of per-thread loads. Tiling:
// skinny_gemm_tma_plan.cuh. With mma.sync, the portable kernel's contract (exact products, fp32 accumulation,
// one rounding); with wgmma (kQgmma, skinny_gemm_qgmma.cuh), sums of 32 products with fewer bits first.
//
//   producer (1 thread)   for each stage of this CTA's run: wait until the slot is free (`empty`), arm `full`
//                         with the stage's bytes, issue one 2-D box copy of weights and one of activations
//                         per warp column. The first ring's worth of weights is issued before the PDL wait
//                         (no kernel writes weights); activations only after it.
//   consumers (8 warps)   wait for `full`, multiply their rows of the stage, arrive on `empty`. No block-wide
//                         barrier in the main loop: at the end of a tile's run they leave their partial sums in
//                         shared memory (`red`, once the reducers are done with the previous run: named
//                         barrier kBarRedFree), hand them over (kBarRedFull, where the reducers wait) and go on
//                         with the next tile's run at once.
//   reducers (3 warps)    for each tile's run: add the warp columns' partial sums, give `red` back, then finish
//                         the tile or, if it is shared, meet the other CTAs' partials in the workspace
//                         (skinny_gemm_reduce.cuh's protocol), overlapped with the consumers' next run. The
//                         last run of a CTA the consumers and reducers reduce together. Without reducers
//                         (p.reducers = 0) the consumers reduce every run themselves before the next.
//   a run's end           a whole tile with one warp column: each warp finishes its accumulators' outputs
//                         itself (for_each_fragment). A tile-aligned grid (p.cluster > 1): the
//                         tile's CTAs are a cluster; each copies the rows of its partial sums that another
//                         finishes into that CTA's shared memory with the copy engine (meet_tile_in_cluster).
//
// Math (A and B swapped as in skinny_gemm_mma_nv.cuh: weight rows are the MMA's M, tokens its N): a box row
// is 128 bytes = 8 chunks of 16 bytes, stored at chunk (c ^ (row & 7)) by the 128-byte swizzle, so 8 rows
// read at the same logical chunk hit 8 different bank groups (ldmatrix and the activation loads are
// conflict-free). One ldmatrix.x4 gives a lane 4 bytes of rows g and g + 8 in chunks c and c + 1:
//   * 16-bit operands: exactly the m16n8k16 A fragment of the K step made of chunks (c, c + 1); the B
//     fragment is token g's 4 bytes at 4t of each chunk.
//   * FP8: each chunk is one K step of 16 elements under a K permutation shared by A and B (as in the
//     portable kernel): the lane's bytes 4t..4t+3 of a chunk unpack to f16 pairs (a0, a2) for row g and
//     (a1, a3) for row g + 8; token g's bytes 4t..4t+3 of the same chunk unpack to (b0, b1).
#include "common/platform.cuh"
#include "skinny_gemm/skinny_gemm_tma_plan.cuh"

#if defined(FP8DK_NVIDIA)  // nothing on ROCm: the AMD build keeps the portable kernel
#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "common/diag_trace.cuh"
#include "common/grid_dependency.cuh"
#include "common/tma.cuh"
#include "skinny_gemm/skinny_gemm_mma_nv.cuh"
#include "skinny_gemm/skinny_gemm_qgmma.cuh"
#include "skinny_gemm/skinny_gemm_reduce.cuh"

namespace fp8dk {
namespace skinny {

#if defined(FP8DK_SM90)
FP8DK_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

FP8DK_DEVICE uint32_t load_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// Byte offset of chunk `chunk` of row `row` in a box stored with the 128-byte swizzle.
FP8DK_DEVICE uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * kTmaBoxBytes + ((chunk ^ (row & 7)) << 4));
}

// One warp's share of one box: rows [row0, row0 + 16 * RB) of the weight box at `wbox` against all NT * 8
// tokens of the activation box at `abox` (shared-memory addresses).
template <class Ab, int NT, int RB>
FP8DK_DEVICE void multiply_box(float (&acc)[RB][NT][4], uint32_t wbox, uint32_t abox, int row0, int lane) {
  using Mma = typename Mma16Input<Ab>::type;
  const int g = lane / 4, t = lane % 4;
  const int ld_row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, ld_chunk = lane >> 4;
  // Two row blocks, or two n-tiles: half the K steps unrolled, which keeps these tilings within the 168
  // registers of a 12-warp CTA without spilling (fully unrolled, ptxas spilled a few bytes).
  constexpr int kUnroll = RB == 2 || NT == 2 ? 2 : kTmaBoxBytes / 32;
#pragma unroll kUnroll
  for (int pair = 0; pair < kTmaBoxBytes / 32; ++pair) {
    uint32_t w[RB][4];
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
      ldmatrix_x4(w[rb], wbox + swizzled(ld_row + rb * kRowBlock, 2 * pair + ld_chunk));
    if constexpr (Ab::kFp8) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int chunk = 2 * pair + h;
        uint32_t a[RB][4];
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          unpack_fp8x4<Ab>(w[rb][2 * h], a[rb][0], a[rb][2]);
          unpack_fp8x4<Ab>(w[rb][2 * h + 1], a[rb][1], a[rb][3]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          uint32_t b0, b1;
          unpack_fp8x4<Ab>(load_shared_u32(abox + swizzled(nt * 8 + g, chunk) + 4 * t), b0, b1);
#pragma unroll
          for (int rb = 0; rb < RB; ++rb) mma_m16n8k16(Mma{}, acc[rb][nt], a[rb], b0, b1);
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t b0 = load_shared_u32(abox + swizzled(nt * 8 + g, 2 * pair) + 4 * t);
        const uint32_t b1 = load_shared_u32(abox + swizzled(nt * 8 + g, 2 * pair + 1) + 4 * t);
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) mma_m16n8k16(Mma{}, acc[rb][nt], w[rb], b0, b1);
      }
    }
  }
}

// The contributions to shared tile `tile` and this CTA's place among them: the CTAs whose unit runs
// [floor(g * U / G), floor((g + 1) * U / G)) of the shared tiles' U units reach into the tile's units
// [tile * KB, (tile + 1) * KB).
FP8DK_DEVICE void tile_contributions(const TmaPlan& p, int tile, int& index, int& count) {
  const long long units = static_cast<long long>(p.sk_tiles) * p.k_blocks, ctas = gridDim.x;
  const long long first = ((static_cast<long long>(tile) * p.k_blocks + 1) * ctas - 1) / units;
  const long long last = ((static_cast<long long>(tile) + 1) * p.k_blocks * ctas - 1) / units;
  index = static_cast<int>(blockIdx.x - first);
  count = static_cast<int>(last - first + 1);
}

// One CTA computes all of tile `tile`: a whole tile, or a shared tile that no other CTA reaches into.
FP8DK_DEVICE bool whole_tile(const TmaPlan& p, int tile) {
  if (tile >= p.sk_tiles) return true;
  int index, count;
  tile_contributions(p, tile, index, count);
  return count == 1;
}

// This CTA's units (tile, K-block) in the order it streams them (skinny_gemm_tma_plan.cuh): its share of the
// shared tiles, then its whole tiles.
struct CtaWork {
  long long sk_begin;  // first unit of the shared tiles
  int sk_count;        // units of the shared tiles
  int count;           // all units
  FP8DK_DEVICE explicit CtaWork(const TmaPlan& p) {
    const long long sk_units = static_cast<long long>(p.sk_tiles) * p.k_blocks;
    sk_begin = blockIdx.x * sk_units / gridDim.x;
    sk_count = static_cast<int>((blockIdx.x + 1) * sk_units / gridDim.x - sk_begin);
    count = sk_count + p.dp_rounds * p.k_blocks;
  }
  FP8DK_DEVICE void unit(const TmaPlan& p, int i, int& tile, int& kb) const {
    if (i < sk_count) {
      tile = static_cast<int>((sk_begin + i) / p.k_blocks);
      kb = static_cast<int>((sk_begin + i) % p.k_blocks);
    } else {
      tile = p.sk_tiles + static_cast<int>(blockIdx.x) + (i - sk_count) / p.k_blocks * static_cast<int>(gridDim.x);
      kb = (i - sk_count) % p.k_blocks;
    }
  }
  // The end of the run of units from unit i (of K-block kb) on that belong to i's tile.
  FP8DK_DEVICE int run_end(const TmaPlan& p, int i, int kb) const {
    const int end = i + p.k_blocks - kb;
    return i < sk_count && end > sk_count ? sk_count : end;
  }
  // From unit i (tile, kb) to unit i + 1 without a division: the producer's walk, whose first copies wait for
  // every instruction of its single thread.
  FP8DK_DEVICE void advance(const TmaPlan& p, int& i, int& tile, int& kb) const {
    if (++i == sk_count) {
      tile = p.sk_tiles + static_cast<int>(blockIdx.x), kb = 0;
    } else if (++kb == p.k_blocks) {
      kb = 0;
      tile += i < sk_count ? 1 : static_cast<int>(gridDim.x);
    }
  }
};
#endif

// The last CTA of a tile adds the `count` partial tiles ws[s][m][n0 .. n0 + cols) in order s = 0, 1, ...
// (K order) and finishes them. The walk over L2 is latency-bound and sits on the kernel's critical path
// after the last byte, so a thread issues 8 loads before it adds any: of one group of four columns 8 partials
// at a time, or, where a tile has at most 4 contributions, of two groups 4 partials each (8 loads in flight;
// more spill the widest consumer tiling). `tid` of `threads`.
template <class Out>
FP8DK_DEVICE void add_partials(const Epilogue& e, const float* ws, long long slice, int count, int n0, int cols,
                               int m, int n, int tid, int threads) {
  constexpr int kLoads = 8;
  const bool quads = (n % 4 == 0) && (cols % 4 == 0);
  const int width = quads ? 4 : 1, per_token = cols / width, groups = m * per_token;
  const int items = count > kLoads / 2 ? 1 : 2, parts = kLoads / items;  // per pass: items x parts loads
  for (int i0 = tid; i0 < groups; i0 += items * threads) {
    float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;  // the pass's first and second group
    for (int s0 = 0; s0 < count; s0 += parts) {
      float4 x[kLoads];
#pragma unroll
      for (int f = 0; f < kLoads; ++f) {
        const int j = f / parts, s = s0 + f % parts, i = i0 + j * threads;
        if (j < items && i < groups && s < count) {
          const float* q = ws + s * slice + static_cast<long long>(i / per_token) * n + n0 + (i % per_token) * width;
          x[f] = quads ? __ldcg(reinterpret_cast<const float4*>(q)) : make_float4(__ldcg(q), 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int f = 0; f < kLoads; ++f) {
        const int j = f / parts, s = s0 + f % parts;
        if (j == 0 && s < count) v0.x += x[f].x, v0.y += x[f].y, v0.z += x[f].z, v0.w += x[f].w;
        if (j == 1 && j < items && s < count) v1.x += x[f].x, v1.y += x[f].y, v1.z += x[f].z, v1.w += x[f].w;
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = i0 + j * threads;
      if (j >= items || i >= groups) break;
      const int r = i / per_token, c = (i % per_token) * width;
      const float4 v = j == 0 ? v0 : v1;
      if (quads) {
        finish4<Out>(e, r, n0 + c, {v.x, v.y, v.z, v.w});
      } else {
        finish<Out>(e, r, n0 + c, v.x);
      }
    }
  }
}

#if defined(FP8DK_DIAG_TIMELINE) && defined(FP8DK_SM90)
// Diagnostic builds only (NVCC_APPEND_FLAGS=-DFP8DK_DIAG_TIMELINE, benchmarks/skinny_gemm_timeline.py): each CTA
// keeps the global timer (ns) at entry (slot 0), the producer's first copy (1), the first full stage (2), warp
// 0's last stage (3), the end (4), the last consumer warp's last stage (5), the last run's reduction (6), and
// inside that reduction (7-10: reduce_run, meet_tile_in_cluster), and thread 0 prints them at its end, so a
// launch's head, stream and tail can be told apart.
static __shared__ unsigned long long diag_t[11];
#define FP8DK_DIAG_MARK(slot) (diag_t[slot] = global_timer_ns())
#define FP8DK_DIAG_MARK_IF(cond, slot) ((cond) ? (void)FP8DK_DIAG_MARK(slot) : (void)0)
#else
#define FP8DK_DIAG_MARK(slot) ((void)0)
#define FP8DK_DIAG_MARK_IF(cond, slot) ((void)0)
#endif

#if defined(FP8DK_SM90)
// Named barriers of the copy-engine kernel (0 is __syncthreads).
constexpr int kBarReduce = 1;    // among the threads of one reduce_run
constexpr int kBarLastRun = 2;   // consumers (and reducers) before they reduce a run together
constexpr int kBarRedFree = 3;   // consumers and reducers: the reducers are done with red (and the run before)
constexpr int kBarRedFull = 4;   // consumers and reducers: red holds a run's partial sums
// (Both hand-off barriers are full rendezvous, bar.sync on both sides: the reducers wait at them while idle,
// so the consumers pass at once. A non-blocking bar.arrive for the consumers would be as correct by the PTX
// memory model, which has bar.arrive synchronize with bar.sync, but compute-sanitizer's racecheck reports
// the accesses it orders as races.)

// f(token, row, value) for each element of a warp's accumulators: mma.sync m16n8 C fragments (wgmma's are laid
// out the same), token nt * 8 + 2t + (j & 1), row rb * 16 + g + 8 (j >> 1) of the warp's rows, lane = 4g + t.
template <int NT, int RB, class F>
FP8DK_DEVICE void for_each_fragment(const float (&acc)[RB][NT][4], int lane, F&& f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) f(nt * 8 + 2 * t + (j & 1), rb * kRowBlock + g + 8 * (j >> 1), acc[rb][nt][j]);
}

FP8DK_DEVICE int tile_cols(const TmaPlan& p, int n0) { return rows_in_tile(p.block_n, p.n, n0); }

// The reduction of one tile's run of this CTA: red[wk][token][row of the tile] holds the warp columns'
// partial sums. Adds them in column order and finishes the tile (alone) or meets the tile's other
// contributions in the workspace. `tid` of `threads` threads; `arrived` a shared word of theirs.
template <class Out>
FP8DK_DEVICE void reduce_run(const TmaPlan& p, const Epilogue& e, float* red, int tile,
                             float* ws, unsigned* counters, unsigned& arrived, int tid, int threads) {
  const int mp = p.nt * 8;
  const int n0 = tile * p.block_n;
  const int cols = tile_cols(p, n0);
  // Four rows of the tile per thread where the workspace rows allow 16-byte accesses (red's always do).
  const bool quads = (cols % 4 == 0) && (p.n % 4 == 0);
  const int width = quads ? 4 : 1, per_token = cols / width;
  int index = 0, count = 1;
  if (tile < p.sk_tiles) tile_contributions(p, tile, index, count);
  const long long slice = static_cast<long long>(p.m) * p.n;
  for (int i = tid; i < p.m * per_token; i += threads) {
    const int r = i / per_token, c = (i % per_token) * width;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < p.wk; ++w) {
      const float* q = red + (w * mp + r) * p.red_pitch + c;
      if (quads) {
        const float4 x = *reinterpret_cast<const float4*>(q);
        v.x += x.x, v.y += x.y, v.z += x.z, v.w += x.w;
      } else {
        v.x += *q;
      }
    }
    if (count == 1) {
      if (quads) {
        finish4<Out>(e, r, n0 + c, {v.x, v.y, v.z, v.w});
      } else {
        finish<Out>(e, r, n0 + c, v.x);
      }
    } else {
      float* dst = ws + index * slice + static_cast<long long>(r) * p.n + n0 + c;
      if (quads) {
        *reinterpret_cast<float4*>(dst) = v;
      } else {
        *dst = v.x;
      }
    }
  }
  if (count == 1) return;
  // The portable kernel's workspace protocol (skinny_gemm_reduce.cuh): partials in K order, the last CTA to
  // arrive adds them (reading L2, never L1) and resets the tile's counter.
  tma::sync_threads(threads, kBarReduce);
  FP8DK_DIAG_MARK_IF(tid == 0, 7);  // partials stored (a CTA of one run: its last run's marks 7-9)
  if (tid == 0) arrived = count_arrival(counters + tile);
  tma::sync_threads(threads, kBarReduce);
  FP8DK_DIAG_MARK_IF(tid == 0, 8);  // counted
  // (Thread 0 writes `arrived` again only after the next run's first barrier, which every reader reaches
  // after reading it here.)
  if (arrived != static_cast<unsigned>(count - 1)) return;
  if (tid == 0) counters[tile] = 0u;
  add_partials<Out>(e, ws, slice, count, n0, cols, p.m, p.n, tid, threads);
  FP8DK_DIAG_MARK_IF(tid == 0, 9);  // the last to arrive: the tile finished
}

// Tokens [meet_first_token(p, r), meet_first_token(p, r + 1)) of a cluster's tile are finished by rank r. The
// meet reads them from a table in shared memory (the kernel's meet_first), filled by meet_partial_tile's last
// warp column while the others store.
FP8DK_DEVICE int meet_first_token(const TmaPlan& p, int rank) { return rank * p.m / p.cluster; }

// The meet's mbarrier, after the ring's full and empty barriers (`full`: the first of them).
FP8DK_DEVICE uint64_t* meet_landed(const TmaPlan& p, uint64_t* full) { return full + 2 * p.stages; }

// The staging slot at rank `receiver` that rank `sender`'s rows land in: the peers' slots in rank order.
FP8DK_DEVICE int meet_slot(int sender, int receiver) { return sender < receiver ? sender : sender - 1; }

// The bytes of partial sums the peers send a rank: its tokens' rows of red, from each of the other CTAs.
FP8DK_DEVICE unsigned meet_bytes(const TmaPlan& p, int rank) {
  const int rows = meet_first_token(p, rank + 1) - meet_first_token(p, rank);
  return static_cast<unsigned>((p.cluster - 1) * rows * p.red_pitch) * sizeof(float);
}

// A cluster's first step, by the consumer warps straight from their accumulators: this CTA's partial tile (its
// warp columns added in column order) into warp column 0's rows of red, fenced to the async proxy. Column 0
// stores its fragments, then each later column in turn, after a barrier, adds its own to them: the sums
// 0 + w0 + w1 + ... of reduce_run's pass (acc is never -0, so 0 + w0 is w0), with no index arithmetic and no
// second walk over red. (A pass over red after all columns had stored took 0.5-0.7 us of thread 0 alone,
// docs/experiments/README.md, item 89.)
template <int NT, int RB>
FP8DK_DEVICE void meet_partial_tile(const TmaPlan& p, float* red, const float (&acc)[RB][NT][4], int wk, int row0,
                                    int lane, int* first_tokens) {
  float* const col0 = red + row0;
  const int pitch = p.red_pitch;
  // The meet's table, by threads that wait for column 0 anyway. (Filled at the kernel's start by thread 0, it came
  // before the producer's first copies; by the consumers there, it spilled the 1-8-token kernel.)
  if (wk == p.wk - 1 && row0 == 0 && lane <= p.cluster) first_tokens[lane] = meet_first_token(p, lane);
  if (wk == 0) for_each_fragment(acc, lane, [&](int token, int row, float v) { col0[token * pitch + row] = v; });
  for (int w = 1; w < p.wk; ++w) {
    tma::sync_threads(kTmaConsumerWarps * 32, kBarLastRun);
    if (wk != w) continue;
    // All loads before any store: the compiler cannot tell that the stores do not alias the later loads.
    float sum[RB * NT * 4];
    int k = 0;
    for_each_fragment(acc, lane, [&](int token, int row, float) { sum[k++] = col0[token * pitch + row]; });
    k = 0;
    for_each_fragment(acc, lane, [&](int token, int row, float v) { col0[token * pitch + row] = sum[k++] + v; });
  }
  fence_proxy_async_shared();
}

// A cluster per tile (p.cluster > 1: tile-aligned grid, one run per CTA, rank = its K-slice's index): the run
// met without the workspace. The sums are the workspace protocol's, bit for bit: each element is 0 plus the
// ranks' partials (their warp columns added in order) in rank order, then finish().
//   1. meet_partial_tile: this CTA's partial tile in warp column 0's rows of red, fenced to the async proxy.
//   2. Thread q sends peer q the rows of tokens that peer finishes: one bulk copy of consecutive red rows,
//      counted on the peer's `landed`, into its staging slot for this rank (slot s of the peers s != rank, in
//      rank order). Every CTA initialized and armed `landed` at its start, before the cluster barrier phase
//      whose wait comes before the copies (the consumers wait here; the producer warp before it leaves).
//   3. Every thread waits for its own peers' rows, adds its tokens' elements and finishes them, 4 at a time
//      where the tile's rows allow.
// No CTA waits for another after its own tokens: a CTA reads only its own shared memory, and stays until its
// peers' rows have landed and its copies have read red. After the last byte each step waits for single threads'
// work, so the first tokens come from the kernel's table `first_tokens`, and each thread's one division (its
// first element) comes before the waits. `tid` of `threads` (the consumers) after meet_partial_tile.
template <class Out>
FP8DK_DEVICE void meet_tile_in_cluster(const TmaPlan& p, const Epilogue& e, float* red, unsigned char* ring,
                                       const int* first_tokens, int tile, int tid, int threads) {
  // Found from the ring's base here, at the run's end: held through the main loop, they spilled.
  float* const staging = reinterpret_cast<float*>(ring + p.staging_offset);
  uint64_t* const landed = meet_landed(p, reinterpret_cast<uint64_t*>(ring + p.barrier_offset));
  const int pitch = p.red_pitch, n0 = tile * p.block_n;
  const int cols = tile_cols(p, n0);
  const int rank = static_cast<int>(cluster_rank());
  // This thread's first element (token r of the rank's, quad or row c of the tile) and the step to its next.
  const bool quads = cols % 4 == 0;
  const int width = quads ? 4 : 1, per_token = cols / width;
  int r = tid / per_token, c = tid - r * per_token;
  const int step_r = threads / per_token, step_c = threads - step_r * per_token;
  cluster_wait();
  tma::sync_threads(threads, kBarReduce);  // (also orders the first-token table's stores before these loads)
  FP8DK_DIAG_MARK_IF(tid == 0, 7);  // partial tile in red
  const int first = first_tokens[rank], rows = first_tokens[rank + 1] - first;
  if (tid < p.cluster && tid != rank) {
    const int peer_first = first_tokens[tid], peer_rows = first_tokens[tid + 1] - peer_first;
    if (peer_rows > 0)
      copy_to_cluster_shared_async(staging + meet_slot(rank, tid) * p.meet_rows * pitch, red + peer_first * pitch,
                                   static_cast<unsigned>(peer_rows * pitch) * sizeof(float),
                                   static_cast<unsigned>(tid), landed);
  }
  cluster_landed_wait(landed, 0);
  FP8DK_DIAG_MARK_IF(tid == 0, 8);  // the peers' rows landed
#pragma unroll 1
  for (; r < rows; r += step_r, c += step_c) {
    if (c >= per_token) c -= per_token, ++r;
    if (r >= rows) break;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int s = 0; s < p.cluster; ++s) {
      const float* q = s == rank ? red + (first + r) * pitch + c * width
                                 : staging + (meet_slot(s, rank) * p.meet_rows + r) * pitch + c * width;
      if (quads) {
        const float4 x = *reinterpret_cast<const float4*>(q);
        v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
      } else {
        v[0] += *q;
      }
    }
    if (quads) {
      finish4<Out>(e, first + r, n0 + c * 4, v);
    } else {
      finish<Out>(e, first + r, n0 + c, v[0]);
    }
  }
  FP8DK_DIAG_MARK_IF(tid == 0, 9);  // this thread's outputs stored
  if (tid < p.cluster) bulk_copies_read();
  FP8DK_DIAG_MARK_IF(tid == 0, 10);  // the copies have read red
}
#endif

// map_a: a [m, k] in boxes [nt * 8, box_elems]; map_b: b [n, k] in boxes [block_n, box_elems], both with the
// 128-byte swizzle (host side: common/tensor_map.h). out [m, n] (row stride p.out_stride), bias [n] or null;
// FP8: scale_a / scale_b one float each, read on the device. p.ctas CTAs of tma_threads(p) threads, p.smem_bytes
// of dynamic shared memory. ws [p.contributions, m, n] and counters [p.tiles] (zero on entry, left zero) when
// p.contributions > 1. kQgmma: the warpgroups multiply with wgmma (skinny_gemm_qgmma.cuh; e4m3fn, RB = 1, a
// warpgroup's 4 warps are 4 consecutive warp rows: p.wn is 4 or 8), else each warp with mma.sync.
template <class Ab, class Out, int NT, int RB, bool kQgmma = false>
__global__ void __launch_bounds__(kTmaThreads, 1)
    skinny_gemm_tma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                           uint16_t* __restrict__ out, const uint16_t* __restrict__ bias,
                           const float* __restrict__ scale_a, const float* __restrict__ scale_b, float* ws,
                           unsigned* counters, const TmaPlan p) {
#if defined(FP8DK_SM90)
  constexpr int kMP = NT * 8;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = tma::shared_address(smem_raw);
  unsigned char* const ring = smem_raw + (((raw + kTmaAlignSlack - 1) & ~(kTmaAlignSlack - 1u)) - raw);
  float* const red = reinterpret_cast<float*>(ring + p.stages * p.stage_bytes);
  uint64_t* const full = reinterpret_cast<uint64_t*>(ring + p.barrier_offset);
  uint64_t* const empty = full + p.stages;
  __shared__ unsigned arrived;
  __shared__ int meet_first[kMaxClusterCtas + 1];  // p.cluster > 1: meet_first_token(p, 0 .. p.cluster)
  FP8DK_TRACE_BEGIN();
#if defined(FP8DK_DIAG_TIMELINE)
  if (threadIdx.x == 0) {
    for (int s = 1; s < 11; ++s) diag_t[s] = 0;
    FP8DK_DIAG_MARK(0);
  }
#endif

  constexpr int consumers = kTmaConsumerWarps;  // = p.wn * p.wk
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      tma::barrier_init(full + s, 1);
      tma::barrier_init(empty + s, consumers);
    }
    if (p.cluster > 1) tma::barrier_init(meet_landed(p, full), 1);
    tma::fence_barrier_init();
    if (p.cluster > 1)
      tma::arrive_expect_bytes(meet_landed(p, full), meet_bytes(p, static_cast<int>(cluster_rank())));
  }
  __syncthreads();
  // Every thread of the cluster arrives once, here: a CTA's peers copy into it only after the wait that
  // follows, once its `landed` is initialized.
  if (p.cluster > 1) cluster_arrive_relaxed();

  const CtaWork work(p);
  const int run = work.count;
  // With reducers: the threads of the hand-off barriers, and of the last run's reduction (nothing else is left
  // to overlap it with, and it is on the kernel's critical path).
  constexpr int finishers = (consumers + kTmaReducerWarps) * 32;

  if (warp == consumers) {
    // ---- producer
    if (lane == 0) {
      const uint64_t policy = tma::evict_first_policy();
      tma::prefetch_map(&map_a);
      tma::prefetch_map(&map_b);
      // Boxes of a stage that hold some of K (a box wholly past K is neither copied nor multiplied): fewer
      // only in the last K-block.
      const int last_boxes = (p.k - (p.k_blocks - 1) * p.boxes * p.box_elems + p.box_elems - 1) / p.box_elems;
      const int box_bytes = p.weight_box_bytes + p.act_box_bytes;
      auto copy = [&](int slot, int tile, int kb, bool weights, bool activations) {
        const int boxes = kb == p.k_blocks - 1 ? last_boxes : p.boxes;
        unsigned char* stage = ring + slot * p.stage_bytes;
        uint64_t* bar = full + slot;
        if (weights) tma::arrive_expect_bytes(bar, boxes * box_bytes);
        for (int w = 0; w < boxes; ++w) {
          const int k0 = (kb * p.boxes + w) * p.box_elems;
          if (weights) tma::copy_2d(stage + w * box_bytes, &map_b, k0, tile * p.block_n, bar, policy);
          if (activations) tma::copy_2d(stage + w * box_bytes + p.weight_box_bytes, &map_a, k0, 0, bar);
        }
      };
      // Before the wait for the previous kernel: the weights of the first `ahead` units (they depend on nothing).
      // After it: their activations, then whole units until `first_units` are requested (the rest of the ring).
      const int ahead = run < p.ahead ? run : p.ahead;
      const int first = run < p.first_units ? run : p.first_units;
      int i = 0, tile = 0, kb = 0;
      if (run > 0) work.unit(p, 0, tile, kb);
      const int tile0 = tile, kb0 = kb;
      FP8DK_DIAG_MARK(1);
      for (; i < ahead; work.advance(p, i, tile, kb)) copy(i, tile, kb, true, false);
      wait_for_prior_grid();
      for (int j = 0, t = tile0, b = kb0; j < ahead; work.advance(p, j, t, b)) copy(j, t, b, false, true);
      for (; i < first; work.advance(p, i, tile, kb)) copy(i, tile, kb, true, true);
      // Unit i takes slot i % stages, on the slot's (i / stages)-th fill: its `full` phase has parity
      // (i / stages) & 1, and the fill waits for the consumers to have emptied the slot's previous one. With a
      // window below the ring, unit i also waits until unit i - window has landed.
      int slot = first % p.stages, round = first / p.stages;
      const int landed_unit = first > p.window ? first - p.window : 0;  // unit i - window, for i = first
      int landed_slot = landed_unit % p.stages, landed_round = landed_unit / p.stages;
      for (; i < run; work.advance(p, i, tile, kb)) {
        if (round > 0) tma::wait(empty + slot, (round & 1) ^ 1);
        if (p.window < p.stages) {
          tma::wait(full + landed_slot, landed_round & 1);
          if (++landed_slot == p.stages) landed_slot = 0, ++landed_round;
        }
        copy(slot, tile, kb, true, true);
        if (++slot == p.stages) slot = 0, ++round;
      }
    }
    allow_next_grid();
    if (p.cluster > 1) {
      __syncwarp();
      cluster_wait();  // the phase every thread of the cluster arrived at after the barrier inits
    }
    return;
  }

  wait_for_prior_grid();  // consumers: before the first activations; reducers: before writing out, ws, counters
  FP8DK_TRACE_WAITED();
  // Each thread's epilogue in registers: the scales are read now, off the critical path, and the rest comes
  // from the kernel's parameters when a run ends. (A struct in shared memory, read at each output, was
  // reloaded behind each output's store, which might alias it: 2.1 us of a whole tile's tail at 32 tokens,
  // benchmarks/skinny_gemm_timeline.py, session 15.)
  float alpha = 1.f;
  if constexpr (Ab::kFp8) alpha = *scale_a * *scale_b * product_scale<Ab, true>();
  const auto epilogue = [&] {
    Epilogue e;
    e.alpha = alpha, e.bias = bias, e.out = out, e.out_stride = p.out_stride;
    e.out_quads = p.out_stride % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
    return e;
  };

  if (warp > consumers) {
    // ---- reducers (p.reducers)
    const int tid = threadIdx.x - (consumers + 1) * 32;
    const Epilogue e = epilogue();
    for (int i = 0; i < run;) {
      int tile, kb;
      work.unit(p, i, tile, kb);
      i = work.run_end(p, i, kb);
      tma::sync_threads(finishers, kBarRedFree);
      if (i < run) {
        tma::sync_threads(finishers, kBarRedFull);
        reduce_run<Out>(p, e, red, tile, ws, counters, arrived, tid, kTmaReducerWarps * 32);
      } else {
        tma::sync_threads(finishers, kBarLastRun);
        reduce_run<Out>(p, e, red, tile, ws, counters, arrived, consumers * 32 + tid, finishers);
      }
    }
    return;
  }

  // ---- consumers
  const int wn = warp % p.wn, wk = warp / p.wn;
  const int row0 = wn * kRowBlock * RB;
  [[maybe_unused]] const int group_row0 = (wn & ~3) * kRowBlock;  // wgmma: the warpgroup's first of 64 rows
  const uint32_t ring_addr = tma::shared_address(ring);
  const int box_bytes = p.weight_box_bytes + p.act_box_bytes;
  int stage = 0;
  unsigned phase = 0;
  for (int i = 0; i < run;) {
    int run_tile, kb0;  // held through the run, not looked up again at its end (64-bit divisions in every tail)
    work.unit(p, i, run_tile, kb0);
    const int end = work.run_end(p, i, kb0), kb1 = kb0 + end - i;
    i = end;
    float acc[RB][NT][4];
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[rb][nt][j] = 0.f;

    for (int kb = kb0; kb < kb1; ++kb) {
      tma::wait(full + stage, phase);
      FP8DK_TRACE_MARK_FIRST(2);
#if defined(FP8DK_DIAG_TIMELINE)
      if (threadIdx.x == 0 && diag_t[2] == 0) FP8DK_DIAG_MARK(2);
#endif
      // wgmma on a full stage whose two boxes per warpgroup overlap (p.qgmma_overlap), else box by box.
      bool overlapped = false;
      if constexpr (kQgmma) {
#if defined(FP8DK_QGMMA)
        overlapped = p.qgmma_overlap && (kb + 1) * p.boxes * p.box_elems < p.k + p.box_elems;
        if (overlapped) {
          const uint32_t wbox = ring_addr + stage * p.stage_bytes + wk * box_bytes;
          qgmma_two_boxes<NT>(acc[0], wbox + group_row0 * kTmaBoxBytes, wbox + p.weight_box_bytes, p.wk * box_bytes);
        }
#endif
      }
      for (int box = wk; !overlapped && box < p.boxes && (kb * p.boxes + box) * p.box_elems < p.k; box += p.wk) {
        const uint32_t wbox = ring_addr + stage * p.stage_bytes + box * box_bytes;
        if constexpr (kQgmma) {
#if defined(FP8DK_QGMMA)
          static_assert(RB == 1 && std::is_same_v<Ab, E4m3fn>, "wgmma: OCP e4m3, one row block per warp");
          qgmma_box<NT>(acc[0], wbox + group_row0 * kTmaBoxBytes, wbox + p.weight_box_bytes);
#else
          __trap();
#endif
        } else {
          multiply_box<Ab, NT, RB>(acc, wbox, wbox + p.weight_box_bytes, row0, lane);
        }
      }
      __syncwarp();
      if (lane == 0) tma::arrive(empty + stage);
      if (++stage == p.stages) stage = 0, phase ^= 1;
    }
    if (i >= run) allow_next_grid();
    if (i >= run) FP8DK_TRACE_MARK(3);
#if defined(FP8DK_DIAG_TIMELINE)
    if (threadIdx.x == 0 && i >= run) FP8DK_DIAG_MARK(3);
    if (lane == 0 && i >= run) atomicMax(&diag_t[5], global_timer_ns());  // the last consumer warp's stream end
#endif
    if (p.wk == 1 && !p.reducers && whole_tile(p, run_tile)) {
      // One warp column, one CTA: each warp's accumulators are its rows' outputs. Finished from registers,
      // with no trip through shared memory and no barrier (bitwise as reduce_run's: acc is never -0, so
      // its 0 + acc is acc).
#if defined(FP8DK_DIAG_TIMELINE)
      if (threadIdx.x == 0 && i >= run) FP8DK_DIAG_MARK(6);
#endif
      const Epilogue e = epilogue();
      const int rows0 = run_tile * p.block_n + row0;
      for_each_fragment(acc, lane, [&](int token, int row, float v) {
        if (token < p.m && rows0 + row < p.n) finish<Out>(e, token, rows0 + row, v);
      });
      continue;
    }

    if (p.cluster > 1) {  // the one run of a CTA in a cluster: met below
      FP8DK_DIAG_MARK_IF(threadIdx.x == 0, 6);
      meet_partial_tile<NT, RB>(p, red, acc, wk, row0, lane, meet_first);
      break;
    }
    // Partial sums of the warp columns, red[wk][token][row of the tile], once the reducers are done with it.
    if (p.reducers) tma::sync_threads(finishers, kBarRedFree);
    float* mine = red + wk * kMP * p.red_pitch;
    for_each_fragment(acc, lane, [&](int token, int row, float v) { mine[token * p.red_pitch + row0 + row] = v; });
    if (p.reducers && i < run) {
      tma::sync_threads(finishers, kBarRedFull);
      continue;
    }
    // The consumers reduce the run themselves: the last one with the reducers, or every one without them.
    const int threads = p.reducers ? finishers : consumers * 32;
    tma::sync_threads(threads, kBarLastRun);
#if defined(FP8DK_DIAG_TIMELINE)
    if (threadIdx.x == 0 && i >= run) FP8DK_DIAG_MARK(6);
#endif
    reduce_run<Out>(p, epilogue(), red, run_tile, ws, counters, arrived, threadIdx.x, threads);
    if (i < run) tma::sync_threads(threads, kBarLastRun);  // red and `arrived` are reused by the next run
  }
  // Out of the loop, with the tile found again from the CTA's index (CTAs c * t .. c * t + c - 1 stream tile t):
  // met inside it, with the run's tile and the pointers it needs held there, one kernel spilled.
  if (p.cluster > 1)
    meet_tile_in_cluster<Out>(p, epilogue(), red, ring, meet_first, blockIdx.x / p.cluster, threadIdx.x,
                              consumers * 32);
  FP8DK_TRACE_END(kSkinnyGemm, p.n, p.k, p.m);
#if defined(FP8DK_DIAG_TAIL_SPIN)
  // Diagnostic builds only (NVCC_APPEND_FLAGS="-DFP8DK_DIAG_TAIL_SPIN=ns -DFP8DK_DIAG_TAIL_SPIN_N=n"): every CTA
  // of the launches with p.n == n stays FP8DK_DIAG_TAIL_SPIN ns longer, so the launch completes that much later
  // while the next kernel's programmatic launch is unchanged: what a longer tail costs the decode step.
  if (threadIdx.x == 0 && p.n == FP8DK_DIAG_TAIL_SPIN_N) {
    const unsigned long long t0 = global_timer_ns();
    while (global_timer_ns() - t0 < FP8DK_DIAG_TAIL_SPIN) {
    }
  }
#endif
#if defined(FP8DK_DIAG_TIMELINE)
  if (threadIdx.x == 0) {
    FP8DK_DIAG_MARK(4);
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    printf("FP8DK_TL %d %d %d %d %d %u %llu %llu %llu %llu %llu %llu %llu %u %llu %llu %llu %llu\n", p.n, p.k, p.m,
           gridDim.x, blockIdx.x, static_cast<unsigned>(reinterpret_cast<uintptr_t>(out)), diag_t[0], diag_t[1],
           diag_t[2], diag_t[3], diag_t[4], diag_t[5], diag_t[6], smid, diag_t[7], diag_t[8], diag_t[9], diag_t[10]);
  }
#endif
#else
  __trap();  // the launcher takes this kernel only where the device code has sm_90 paths
#endif
}

}  // namespace skinny
}  // namespace fp8dk
#endif
