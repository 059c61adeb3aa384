#pragma once
// Skinny GEMM for decode: out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias), M <= 32, fp32
// accumulation, one rounding to fp16/bf16. Memory-bound: the kernel streams the weight b once, at HBM speed.
//
//   skinny_gemm_plan.cuh        tiling shared by both vendors + the launch heuristic
//   skinny_gemm_load.cuh        operand formats, 16-byte chunk loads (aligned / narrow / masked at K)
//   skinny_gemm_fp8_unpack.cuh  exact FP8 -> f16 for 16-bit matrix units
//   skinny_gemm_mma_nv.cuh      NVIDIA warp micro-kernel (mma.sync m16n8k16)
//   skinny_gemm_mfma_amd.cuh    AMD wave micro-kernel (MFMA fp8 / 2:4-sparse SMFMAC / f16 / bf16)
//   skinny_gemm_reduce.cuh      deterministic split-K reduction + epilogue
//
// One CTA = WN x WK warps on a tile of BN weight rows and one K-slice (skinny_gemm_plan.cuh). Per K-block:
//   1. every warp issues the loads of its next stage of weight chunks (registers, double-buffered) and every
//      thread the loads of its share of the next block's activations;
//   2. the warps multiply the current stage against the staged activations of the current block;
//   3. the next block's activations are converted and written to the other shared-memory buffer; one barrier.
// So a warp always has the next stage of weights in flight while it computes, and the only barrier per block
// also publishes the next block's activations.
#include "common/grid_dependency.cuh"
#include "skinny_gemm/skinny_gemm_load.cuh"
#include "skinny_gemm/skinny_gemm_plan.cuh"
#include "skinny_gemm/skinny_gemm_reduce.cuh"
#if defined(FP8DK_AMD)
#include "skinny_gemm/skinny_gemm_mfma_amd.cuh"
#define FP8DK_SKINNY_LAUNCH_BOUNDS(AB, MP) __launch_bounds__(::fp8dk::skinny::kThreads)
#else
#include "skinny_gemm/skinny_gemm_mma_nv.cuh"
#define FP8DK_SKINNY_LAUNCH_BOUNDS(AB, MP) \
  __launch_bounds__(::fp8dk::skinny::kThreads, ::fp8dk::skinny::WarpMma<AB, MP>::kCtasPerSm)
#endif

namespace fp8dk {
namespace skinny {

// The activations of one K-block, [m][block_elems] of `a`, through registers into shared memory. Thread i
// handles chunks i, i + kThreads, ... (chunk = 16 source bytes of one token row).
template <class Ab, class Mma>
struct ActStager {
  static constexpr int kV = kChunkElems<Ab>;
  static constexpr int kEb = Ab::kBytes;
  Chunk c[kMaxStageChunks];

  // Block elements [k0, k0 + block_elems) (rows of `a` are 16-byte aligned); elements at or past k_end are
  // zero. kWhole: k_end is a multiple of the chunk and >= one chunk, so a chunk lies entirely before or after
  // it; then the loads are unconditional (clamped addresses, zeros selected afterwards): no branch between
  // them and the weight loads (see step() in the kernel).
  template <bool kWhole>
  FP8DK_DEVICE void load(const unsigned char* a, const Plan& p, int k0, int k_end) {
    const int total = p.m << p.chunk_shift, mask = (1 << p.chunk_shift) - 1;
#pragma unroll
    for (int r = 0; r < kMaxStageChunks; ++r) {
      const int i = threadIdx.x + r * kThreads;
      const int k = k0 + (i & mask) * kV;
      if constexpr (kWhole) {
        const int row = i < total ? i >> p.chunk_shift : 0;
        const Chunk v = load_ro<16>(a + (row * p.a_stride + (k < k_end ? k : k_end - kV)) * kEb);
        c[r] = k < k_end ? v : Chunk{};
      } else if (i < total) {
        const unsigned char* src = a + ((i >> p.chunk_shift) * p.a_stride + k) * kEb;
        c[r] = k_end - k >= kV ? load_ro<16>(src) : load_chunk_masked<Ab>(src, k_end - k);
      }
    }
  }

  FP8DK_DEVICE void store(unsigned char* buf, int pitch, const Plan& p) const {
    const int total = p.m << p.chunk_shift, mask = (1 << p.chunk_shift) - 1;
#pragma unroll
    for (int r = 0; r < kMaxStageChunks; ++r) {
      const int i = threadIdx.x + r * kThreads;
      if (i < total) Mma::stage_chunk(buf, pitch, i >> p.chunk_shift, (i & mask) * kV, c[r]);
    }
  }
};

// The part of one tile a CTA computes: sub-iterations [si_begin, si_end) of tile `tile`, contribution `index`
// of the `count` that make up the tile (added in index order, which is K order).
struct Segment {
  int tile, si_begin, si_end, index, count;
};

// The segment that starts at unit u (units: the flattened sequence tile * sub_iters + sub-iteration) of a CTA
// whose work ends at unit u_end.
FP8DK_DEVICE Segment segment_at(const Plan& p, long long u, long long u_end) {
  Segment s;
  if (!p.stream_k) {  // one segment per CTA: slice blockIdx.y of tile blockIdx.x (K may be 0)
    s.tile = blockIdx.x;
    s.si_begin = static_cast<int>(static_cast<long long>(blockIdx.y) * p.sub_iters / p.split_k);
    s.si_end = static_cast<int>(static_cast<long long>(blockIdx.y + 1) * p.sub_iters / p.split_k);
    s.index = blockIdx.y;
    s.count = p.split_k;
    return s;
  }
  s.tile = static_cast<int>(u / p.sub_iters);
  s.si_begin = static_cast<int>(u - static_cast<long long>(s.tile) * p.sub_iters);
  const long long end = s.si_begin + (u_end - u);
  s.si_end = end < p.sub_iters ? static_cast<int>(end) : p.sub_iters;
  // CTA g starts at unit floor(g * units / G). The CTAs that reach into the tile [t * S, (t + 1) * S) are those
  // from the last g starting at or before t * S to the last g starting before (t + 1) * S; the last g with
  // floor(g * units / G) <= x is floor(((x + 1) * G - 1) / units).
  const long long units = static_cast<long long>(p.tiles) * p.sub_iters, ctas = gridDim.x;
  const long long first = ((static_cast<long long>(s.tile) * p.sub_iters + 1) * ctas - 1) / units;
  const long long last = ((static_cast<long long>(s.tile) + 1) * p.sub_iters * ctas - 1) / units;
  s.index = static_cast<int>(blockIdx.x - first);
  s.count = static_cast<int>(last - first + 1);
  return s;
}

// a: [m, k] (row stride p.a_stride), b: [n, k] (p.b_stride), out: [m, n] (p.out_stride), bias: [n] or null;
// FP8: scale_a/scale_b one float each, read here (no host sync). kThreads threads, smem_bytes() of dynamic
// shared memory. Two ways to share the work (skinny_gemm_plan.cuh):
//   * split: grid (tiles, split_k), CTA (x, y) computes slice y of tile x; with p.cluster, clusters of
//     (1, split_k, 1), otherwise, when split_k > 1, ws [split_k, m, n] fp32 and counters [tiles];
//   * stream-K (p.stream_k): grid (G), CTA g computes units [floor(g * U / G), floor((g + 1) * U / G)) of the
//     U = tiles * sub_iters units, a run of segments of consecutive tiles; ws [max contributions, m, n] and
//     counters [tiles] (unless every tile has one CTA).
// The counters are zero on entry and are left zero (skinny_gemm_reduce.cuh).
// LB: access width for b (16, 8, or the element size when rows are not 8-byte aligned).
template <class Ab, class Out, int MP, int LB>
__global__ void FP8DK_SKINNY_LAUNCH_BOUNDS(Ab, MP)
    skinny_gemm_kernel(const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                       uint16_t* __restrict__ out, const uint16_t* __restrict__ bias,
                       const float* __restrict__ scale_a, const float* __restrict__ scale_b, float* ws,
                       unsigned* counters, const Plan p) {
  using Mma = WarpMma<Ab, MP>;
  constexpr int kRB = Mma::kRB, kIPB = iters_per_block(kRB, LB), kEb = Ab::kBytes;
  constexpr int kSI = sub_iter_elems(kEb);
  using Stage = Chunk[kIPB][kRB][kRowsPerLane];

  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* const buf0 = smem;
  unsigned char* const buf1 = smem + p.act_buf_bytes;

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int wn = warp % p.wn, wk = warp / p.wn;
  const int per_block = p.wk * kIPB;
  const int pitch = act_pitch(p.block_elems, Mma::kStagedBytes);
  const int lane_k = Mma::lane_k(lane);

  // Stream-K: this CTA's units [u, u_end). Split grid: one segment (u = u_end = 0 ends the loop after it).
  long long u = 0, u_end = 0;
  if (p.stream_k) {
    const long long units = static_cast<long long>(p.tiles) * p.sub_iters;
    u = blockIdx.x * units / gridDim.x;
    u_end = (blockIdx.x + 1) * units / gridDim.x;
  }

  // The first K-blocks of a segment's weight rows start moving into L2 ahead of the loads: before the PDL
  // wait for the first segment (no kernel this launch may overlap writes the weights), before the previous
  // segment's reduction for the others. One bulk prefetch per weight row of the tile.
  auto prefetch_segment = [&](const Segment& sg) {
    if constexpr (LB == 16) {
      const int si_stop = sg.si_begin + kPrefetchBlocks * per_block;
      const int si_full = sg.si_end < p.k / kSI ? sg.si_end : p.k / kSI;
      const int si_prefetch_end = si_stop < si_full ? si_stop : si_full;
      const int row = sg.tile * p.block_n + static_cast<int>(threadIdx.x);
      if (static_cast<int>(threadIdx.x) < p.block_n && row < p.n && si_prefetch_end > sg.si_begin)
        prefetch_l2(b + (row * p.b_stride + static_cast<long long>(sg.si_begin) * kSI) * kEb,
                    static_cast<unsigned>((si_prefetch_end - sg.si_begin) * kSubIterBytes));
    }
  };

  Segment sg = segment_at(p, u, u_end);
  prefetch_segment(sg);
  wait_for_prior_grid();

  for (;;) {
    const int n0 = sg.tile * p.block_n;
    // This segment's sub-iterations [si_begin, si_end); the main loop runs the whole ones, [si_begin, si_full).
    const int si_begin = sg.si_begin, si_end = sg.si_end;
    const int si_full = si_end < p.k / kSI ? si_end : p.k / kSI;
    const int blocks = si_full > si_begin ? (si_full - si_begin + per_block - 1) / per_block : 0;
    u += si_end - si_begin;
    const bool last_segment = u >= u_end;

    // This lane's weight rows (rows past n re-read row n - 1; their results are never stored).
    const unsigned char* wrow[kRB][kRowsPerLane];
#pragma unroll
    for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
      for (int h = 0; h < kRowsPerLane; ++h) {
        const int row = n0 + wn * kRowBlock * kRB + Mma::lane_row(lane, rb, h);
        wrow[rb][h] = b + ((row < p.n ? row : p.n - 1) * p.b_stride + lane_k) * kEb;
      }

    // Weight chunks of this warp's sub-iterations of block j (whole sub-iterations only: no bound at K). Those
    // past si_full (last block only; never multiplied) re-read sub-iteration si_full - 1, so the loads need no
    // branch.
    auto load_stage = [&](Stage& s, int j) {
      const int si0 = si_begin + j * per_block + wk * kIPB;
#pragma unroll
      for (int i = 0; i < kIPB; ++i) {
        const int si = si0 + i < si_full ? si0 + i : si_full - 1;
        const long long off = static_cast<long long>(si) * kSI * kEb;
#pragma unroll
        for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
          for (int h = 0; h < kRowsPerLane; ++h) s[i][rb][h] = load_chunk_stream<Ab, LB>(wrow[rb][h] + off);
      }
    };

    Mma mma(lane, p.m, pitch);
    ActStager<Ab, Mma> act;
    Stage s0, s1;
    const int k_full = si_full * kSI;

    if (blocks > 0) {
      load_stage(s0, 0);
      act.template load<false>(a, p, si_begin * kSI, k_full);
      act.store(buf0, pitch, p);
    }
    sync_block();

    // Block j: cur holds its weights; nxt receives block j + 1's, the activations of block j + 1 go to the
    // other buffer. AMD waits for loads in issue order: a branch around the loads makes it wait for all of
    // them before the MMAs, so there they are issued unconditionally (after the last block they re-read clamped
    // addresses and fill a buffer nobody reads). NVIDIA tracks each load and skips them (fewer registers live).
    auto step = [&](const Stage& cur, Stage& nxt, int j) {
#if defined(FP8DK_AMD)
      constexpr bool more = true;
#else
      const bool more = j + 1 < blocks;
#endif
      if (more) {
        // Activations first: they are needed first (the store below).
        act.template load<true>(a, p, (si_begin + (j + 1) * per_block) * kSI, k_full);
        load_stage(nxt, j + 1);
      }
      const unsigned char* buf = (j & 1) ? buf1 : buf0;
      const int si0 = si_begin + j * per_block + wk * kIPB;
#pragma unroll
      for (int i = 0; i < kIPB; ++i)
        if (si0 + i < si_full) mma.sub_iter(cur[i], buf, (wk * kIPB + i) * kSI);
      if (more) act.store((j & 1) ? buf0 : buf1, pitch, p);
      sync_block();
    };
    for (int j = 0; j < blocks; j += 2) {
      step(s0, s1, j);
      if (j + 1 < blocks) step(s1, s0, j + 1);
    }
    if (last_segment) {
      allow_next_grid();
    } else {
      const Segment next = segment_at(p, u, u_end);
      prefetch_segment(next);
    }

    // The sub-iteration that crosses the end of K (last slice of a tile only), loaded element by element up to
    // K, by the first warp column.
    if (si_end > si_full) {
      act.template load<false>(a, p, k_full, p.k);
      act.store(buf0, pitch, p);
      sync_block();
      if (wk == 0) {
        Chunk tail[kRB][kRowsPerLane];
#pragma unroll
        for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
          for (int h = 0; h < kRowsPerLane; ++h)
            tail[rb][h] =
                load_chunk_masked<Ab>(wrow[rb][h] + static_cast<long long>(k_full) * kEb, p.k - k_full - lane_k);
        mma.sub_iter(tail, buf0, 0);
      }
      sync_block();
    }

    // Partial sums of the warp columns, [wk][MP][block_n + kRedPad], in the (now free) staging buffers.
    float* red = reinterpret_cast<float*>(smem);
    const int red_pitch = p.block_n + kRedPad;
    mma.store(red + wk * MP * red_pitch, red_pitch, wn * kRowBlock * kRB, lane);
    sync_block();

    Epilogue e;
    e.alpha = 1.f;
    if constexpr (Ab::kFp8) e.alpha = *scale_a * *scale_b * Mma::kProductScale;
    e.bias = bias;
    e.out = out;
    e.out_stride = p.out_stride;
    e.out_quads = false;  // (finish4 is the copy-engine kernel's)
    TileArgs t;
    t.red_pitch = red_pitch, t.mp = MP, t.wk = p.wk, t.block_n = p.block_n, t.n0 = n0, t.m = p.m, t.n = p.n;
    t.tile = sg.tile, t.count = sg.count, t.index = sg.index, t.ws = ws, t.counters = counters;
    const Meet meet = sg.count == 1 ? Meet::kAlone : p.cluster ? Meet::kCluster : Meet::kWorkspace;
    reduce_tile<Out>(red, t, meet, e);
    if (last_segment) return;
    sync_block();  // the next segment's staging overwrites red
    sg = segment_at(p, u, u_end);
  }
}

}  // namespace skinny
}  // namespace fp8dk
