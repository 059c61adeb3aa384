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
//                         barrier in the main loop; at the end of a tile's run, the partial sums meet in
//                         shared memory (named barrier of the consumers only, so the producer keeps filling
//                         the ring for the next tile meanwhile) and, if the tile is shared, in the workspace.
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
#pragma unroll
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

// The contributions to `tile` and this CTA's place among them: the CTAs whose unit runs
// [floor(g * U / G), floor((g + 1) * U / G)) reach into the tile's units [tile * KB, (tile + 1) * KB).
FP8DK_DEVICE void tile_contributions(const TmaPlan& p, int tile, int& index, int& count) {
  const long long units = static_cast<long long>(p.tiles) * p.k_blocks, ctas = gridDim.x;
  const long long first = ((static_cast<long long>(tile) * p.k_blocks + 1) * ctas - 1) / units;
  const long long last = ((static_cast<long long>(tile) + 1) * p.k_blocks * ctas - 1) / units;
  index = static_cast<int>(blockIdx.x - first);
  count = static_cast<int>(last - first + 1);
}
#endif

// The last CTA of a tile adds the `count` partial tiles ws[s][m][n0 .. n0 + cols) in order s = 0, 1, ...
// (K order) and finishes them. Four columns per thread and up to 8 partials in flight per thread: the sum
// of many partials is a latency-bound walk over L2 otherwise.
template <class Out>
FP8DK_DEVICE void add_partials(const Epilogue& e, const float* ws, long long slice, int count, int n0, int cols,
                               int m, int n, int threads) {
  constexpr int kInFlight = 8;
  const bool quads = (n % 4 == 0) && (cols % 4 == 0);
  const int width = quads ? 4 : 1;
  const int groups = m * (cols / width);
  for (int i = threadIdx.x; i < groups; i += threads) {
    const int r = i / (cols / width), c = (i % (cols / width)) * width;
    const float* src = ws + static_cast<long long>(r) * n + n0 + c;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = 0; s0 < count; s0 += kInFlight) {
      float4 x[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        if (s0 + j < count) {
          const float* q = src + (s0 + j) * slice;
          x[j] = quads ? __ldcg(reinterpret_cast<const float4*>(q)) : make_float4(__ldcg(q), 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        if (s0 + j < count) v[0] += x[j].x, v[1] += x[j].y, v[2] += x[j].z, v[3] += x[j].w;
      }
    }
#pragma unroll
    for (int w = 0; w < 4; ++w)
      if (w < width) finish<Out>(e, r, n0 + c + w, v[w]);
  }
}

// map_a: a [m, k] in boxes [nt * 8, box_elems]; map_b: b [n, k] in boxes [block_n, box_elems], both with the
// 128-byte swizzle (host side: common/tensor_map.h). out [m, n] (row stride p.out_stride), bias [n] or null;
// FP8: scale_a / scale_b one float each, read on the device. p.ctas CTAs of kTmaThreads threads, p.smem_bytes
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

  const int consumers = p.wn * p.wk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      tma::barrier_init(full + s, 1);
      tma::barrier_init(empty + s, consumers);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const long long units = static_cast<long long>(p.tiles) * p.k_blocks;
  const long long u_begin = blockIdx.x * units / gridDim.x, u_end = (blockIdx.x + 1) * units / gridDim.x;
  const int run = static_cast<int>(u_end - u_begin);

  if (warp == consumers) {
    // ---- producer
    if (lane == 0) {
      const uint64_t policy = tma::evict_first_policy();
      tma::prefetch_map(&map_a);
      tma::prefetch_map(&map_b);
      // Boxes of stage i that hold some of K (a box wholly past K is neither copied nor multiplied).
      auto boxes = [&](int i) {
        const int k0 = static_cast<int>((u_begin + i) % p.k_blocks) * p.boxes * p.box_elems;
        const int b = (p.k - k0 + p.box_elems - 1) / p.box_elems;
        return b < p.boxes ? b : p.boxes;
      };
      auto copy = [&](int i, bool weights, bool activations) {
        const int tile = static_cast<int>((u_begin + i) / p.k_blocks);
        const int kb = static_cast<int>((u_begin + i) % p.k_blocks);
        unsigned char* stage = ring + (i % p.stages) * p.stage_bytes;
        uint64_t* bar = full + i % p.stages;
        const int n = boxes(i);
        for (int w = 0; w < n; ++w) {
          unsigned char* dst = stage + w * (p.weight_box_bytes + p.act_box_bytes);
          const int k0 = (kb * p.boxes + w) * p.box_elems;
          if (weights) tma::copy_2d(dst, &map_b, k0, tile * p.block_n, bar, policy);
          if (activations) tma::copy_2d(dst + p.weight_box_bytes, &map_a, k0, 0, bar);
        }
      };
      const int first = run < p.stages ? run : p.stages;
      for (int i = 0; i < first; ++i) {
        tma::arrive_expect_bytes(full + i, boxes(i) * (p.weight_box_bytes + p.act_box_bytes));
        copy(i, true, false);
      }
      wait_for_prior_grid();
      for (int i = 0; i < first; ++i) copy(i, false, true);
      for (int i = first; i < run; ++i) {
        const int s = i % p.stages;
        tma::wait(empty + s, ((i / p.stages) & 1) ^ 1);
        tma::arrive_expect_bytes(full + s, boxes(i) * (p.weight_box_bytes + p.act_box_bytes));
        copy(i, true, true);
      }
    }
    allow_next_grid();
    return;
  }

  // ---- consumers
  const int wn = warp % p.wn, wk = warp / p.wn;
  const int row0 = wn * kRowBlock * RB;
  wait_for_prior_grid();
  Epilogue e;
  e.alpha = 1.f;
  if constexpr (Ab::kFp8) e.alpha = *scale_a * *scale_b * product_scale<Ab, true>();
  e.bias = bias;
  e.out = out;
  e.out_stride = p.out_stride;

  const uint32_t ring_addr = tma::shared_address(ring);
  const int box_bytes = p.weight_box_bytes + p.act_box_bytes;
  const int threads = consumers * 32;
  int stage = 0;
  unsigned phase = 0;
  for (long long u = u_begin; u < u_end;) {
    const int tile = static_cast<int>(u / p.k_blocks);
    const int kb0 = static_cast<int>(u % p.k_blocks);
    const int kb1 = u_end - u < p.k_blocks - kb0 ? kb0 + static_cast<int>(u_end - u) : p.k_blocks;
    float acc[RB][NT][4];
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rb][nt][i] = 0.f;

    for (int kb = kb0; kb < kb1; ++kb) {
      tma::wait(full + stage, phase);
      for (int box = wk; box < p.boxes && (kb * p.boxes + box) * p.box_elems < p.k; box += p.wk) {
        const uint32_t wbox = ring_addr + stage * p.stage_bytes + box * box_bytes;
        if constexpr (kQgmma) {
#if defined(FP8DK_QGMMA)
          static_assert(RB == 1 && std::is_same_v<Ab, E4m3fn>, "wgmma: OCP e4m3, one row block per warp");
          const int group_row0 = (wn & ~3) * kRowBlock;  // the warpgroup's first of 64 rows
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
    u += kb1 - kb0;
    if (u >= u_end) allow_next_grid();

    // Partial sums of the warp columns: red[wk][token][row of the tile].
    float* mine = red + wk * kMP * p.red_pitch;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          mine[(nt * 8 + 2 * t + (i & 1)) * p.red_pitch + row0 + rb * kRowBlock + g + 8 * (i >> 1)] = acc[rb][nt][i];
    tma::sync_threads(threads);

    const int n0 = tile * p.block_n;
    const int cols = p.block_n < p.n - n0 ? p.block_n : p.n - n0;
    const int items = p.m * cols;
    auto cta_sum = [&](int r, int c) {
      float v = 0.f;
      for (int w = 0; w < p.wk; ++w) v += red[(w * kMP + r) * p.red_pitch + c];
      return v;
    };
    int index, count;
    tile_contributions(p, tile, index, count);
    if (count == 1) {
      for (int i = threadIdx.x; i < items; i += threads)
        finish<Out>(e, i / cols, n0 + i % cols, cta_sum(i / cols, i % cols));
    } else {
      // Same protocol as the portable kernel's workspace reduction (skinny_gemm_reduce.cuh): partials in K
      // order, the last CTA to arrive adds them and resets the tile's counter.
      const long long slice = static_cast<long long>(p.m) * p.n;
      for (int i = threadIdx.x; i < items; i += threads) {
        const int r = i / cols, c = i % cols;
        ws[index * slice + static_cast<long long>(r) * p.n + n0 + c] = cta_sum(r, c);
      }
      fence_device();
      tma::sync_threads(threads);
      if (threadIdx.x == 0) arrived = atomic_add_device(counters + tile, 1u);
      tma::sync_threads(threads);
      if (arrived == static_cast<unsigned>(count - 1)) {
        if (threadIdx.x == 0) counters[tile] = 0u;
        fence_device();
        add_partials<Out>(e, ws, slice, count, n0, cols, p.m, p.n, threads);
      }
    }
    tma::sync_threads(threads);  // red and `arrived` are reused by the next tile
  }
#else
  __trap();  // the launcher takes this kernel only where the device code has sm_90 paths
#endif
}

}  // namespace skinny
}  // namespace fp8dk
#endif
