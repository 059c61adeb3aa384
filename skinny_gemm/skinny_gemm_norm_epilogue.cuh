#pragma once
// Skinny GEMM on Hopper, part 3: skinny_gemm_add_rms_norm's epilogue. The RMSNorm that follows a GEMM (a decoder's
// O and down projections, then the residual add and the next norm) finished by the GEMM's own CTAs, from the
// accumulators, instead of by a kernel of its own after it.
//
// Where the plan allows it (skinny_gemm_tma_plan.cuh, tma_norm_fusable) every CTA owns one whole tile of
// block_n output columns for all tokens, and all CTAs are resident at once. Each CTA then:
//   1. stage the tile's residual rows in shared memory (`red`, unused by a whole tile): the producer warp copies
//      them once it has issued the stream's last copy;
//   2. form h = In(acc * alpha + bias) (the GEMM's 16-bit output, as finished() rounds it) and r = In(h +
//      residual) (fused_add_rms_norm's add, add2), keep r in registers and write it back to the residual;
//   3. add each token's squares of r over the tile in a fixed order: a thread's two rows, shuffles over the
//      warp's 8 row groups, the 8 warps in order, and publish the tile's sums to the other CTAs
//      (common/grid_exchange.cuh: slot [tile][token]);
//   4. collect every tile's sums and add each token's over the tiles in one fixed order, the same in every CTA
//      (8 threads a token, each a stride of the tiles, then shuffles), and take inv = inv_rms(sum) as rms_norm
//      does;
//   5. store y = FP8(In(weight * In(r * inv)) / scale) (rms_norm's normalize_store, element by element).
// So the residual is bitwise fused_add_rms_norm's, and the FP8 outputs are its except where the sum of squares,
// added in another order, rounds differently (one FP8 step at most, rarely; README "Op contract").
//
// Step 1 is the producer warp's; 2-5 the consumer warps'.
//
// Fragments: a consumer thread holds acc[RB][NT][4] of tokens nt * 8 + 2t + (j & 1) and rows rb * 16 + g + 8 *
// (j >> 1) of its warp's rows (lane = 4g + t): j = 2h and 2h + 1 are one row for tokens 2t and 2t + 1, a
// packed pair of the 16-bit arithmetic.
#include "common/platform.cuh"

#if defined(FP8DK_NVIDIA)
#include "common/fp8_scale.cuh"
#include "common/grid_exchange.cuh"
#include "common/numerics.cuh"
#include "common/tma.cuh"
#include "skinny_gemm/skinny_gemm_reduce.cuh"
#include "skinny_gemm/skinny_gemm_tma_plan.cuh"

namespace fp8dk {
namespace skinny {

constexpr int kNormMaxTokens = 32;  // exchange slots [tile][m], m <= kNormMaxTokens
constexpr int kBarNorm = 5;         // named barrier of the consumer warps in the fused epilogue
constexpr int kBarNormStaged = 6;   // the consumer warps and the producer warp: the residual rows are staged

// skinny_gemm_add_rms_norm's arguments beyond the GEMM's (the launcher checks the layout the epilogue assumes).
struct NormArgs {
  uint16_t* residual;      // [m, n], contiguous, 16-byte aligned: updated in place to In(h + residual)
  const uint16_t* weight;  // [n], the 16-bit dtype of the residual
  uint8_t* out;            // [m, n] FP8 of the operands' flavour, rows out_stride bytes apart (a multiple of 16)
  long long out_stride;
  const float* scale;      // the FP8 output's static scale, one element
  float eps;
  // The exchange of the tiles' per-token sums of squares (common/grid_exchange.cuh): kExchangeStateWords words,
  // then [tiles][m] slots of 64 bits (room for kNormMaxTokens tokens), zero before the first use and kept from
  // launch to launch.
  unsigned* exchange;
};

#if defined(FP8DK_SM90)
// Step 1: the residual rows of tile `tile` into the staging, 16 bytes per copy, by `tid` of `threads` threads
// (the producer warp, once it has issued its last copy: the consumers then still multiply the last stages), each
// of which waits for its own copies before the barrier kBarNormStaged.
FP8DK_DEVICE void stage_residual(const NormArgs& a, unsigned char* red, const TmaPlan& p, int tile, int tid,
                                 int threads) {
  const NormStaging s(p.nt * 8, p.block_n);
  const int n0 = tile * p.block_n;
  const int chunks = (p.block_n < p.n - n0 ? p.block_n : p.n - n0) / 8;  // of 8 elements
  uint16_t* const res = reinterpret_cast<uint16_t*>(red);
  for (int i = tid; i < p.m * chunks; i += threads) {
    const int token = i / chunks, c = (i % chunks) * 8;
    tma::copy_16(res + token * s.res_pitch + c, a.residual + static_cast<long long>(token) * p.n + n0 + c);
  }
}

#if defined(FP8DK_DIAG_TIMELINE)
FP8DK_DEVICE unsigned long long norm_diag_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define FP8DK_NORM_MARK(i) (tid == 0 ? (void)(norm_t[i] = norm_diag_now()) : (void)0)
#else
#define FP8DK_NORM_MARK(i) ((void)0)
#endif

// The thread's index, read where it is used: values the epilogue derives from it are then not computed before
// the K loop and held through it (where the widest mma.sync tilings have no register to spare: they spilled).
FP8DK_DEVICE int thread_index_here() {
  int v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return v;
}

// Steps 2-5 for a whole tile, the CTA's only one (tile blockIdx.x), by the consumer warps: warp w of
// kTmaConsumerWarps holds rows [w * 16 * RB, + 16 * RB) of the tile (one warp column). The FP8 flavour of the
// output is the operands' (Ab), Out the 16-bit type of the GEMM's output and the residual.
template <class Ab, class Out, int NT, int RB>
FP8DK_DEVICE void finish_add_rms_norm(const float (&acc)[RB][NT][4], const Epilogue& e, const NormArgs& a,
                                      const TmaPlan& p, unsigned char* ring, unsigned char* red) {
  constexpr int kMP = NT * 8;
  constexpr int kThreads = kTmaConsumerWarps * 32;
  const NormStaging s(kMP, p.block_n);
  uint16_t* const res = reinterpret_cast<uint16_t*>(red);
  uint8_t* const q = red + s.q_offset;
  float* const sums = reinterpret_cast<float*>(red + s.sums_offset);
  float* const inv = reinterpret_cast<float*>(red + s.inv_offset);
  const int tid = thread_index_here(), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int row0 = warp * kRowBlock * RB;
  const int tile = static_cast<int>(blockIdx.x);
  const int n0 = tile * p.block_n;
  const int cols = p.block_n < p.n - n0 ? p.block_n : p.n - n0;
#if defined(FP8DK_DIAG_TIMELINE)
  unsigned long long norm_t[6];
#endif
  FP8DK_NORM_MARK(0);

  // The weights of this thread's rows and the output scale, in flight through the steps before they are used.
  uint32_t w[RB][2];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + rb * kRowBlock + g + 8 * h;
      const uint32_t bits = row < cols ? a.weight[n0 + row] : 0u;
      w[rb][h] = bits | (bits << 16);
    }
  const float scale_value = OutScale<Ab>::read(a.scale);
  const GridExchange exchange(a.exchange);
  __shared__ uint64_t copy_bar[1];  // the bulk copy of the exchanged sums
  if (tid == 0) {
    tma::barrier_init(copy_bar, 1);
    tma::fence_barrier_init();
  }
  tma::sync_threads(kThreads + 32, kBarNormStaged);
  FP8DK_NORM_MARK(1);

  // Step 2, and each thread's share of step 3: the squares of its rows per token (tokens 2t and 2t + 1 of each
  // n-tile), rows in order.
  uint32_t r[RB][NT][2];
  float sq[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) sq[nt][0] = sq[nt][1] = 0.f;
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + rb * kRowBlock + g + 8 * h;
      const bool in_tile = row < cols;
      const float bias = e.bias != nullptr && in_tile ? Out::to_float(e.bias[n0 + row]) : -0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int token = nt * 8 + 2 * t;
        uint16_t* const r0 = res + token * s.res_pitch + row;
        uint16_t* const r1 = r0 + s.res_pitch;
        const uint32_t hp = Out::pack2(fma_rn(acc[rb][nt][2 * h], e.alpha, bias),
                                       fma_rn(acc[rb][nt][2 * h + 1], e.alpha, bias));
        const uint32_t rp = add2<Out>(hp, static_cast<uint32_t>(*r0) | (static_cast<uint32_t>(*r1) << 16));
        r[rb][nt][h] = rp;
        *r0 = static_cast<uint16_t>(rp);
        *r1 = static_cast<uint16_t>(rp >> 16);
        if (in_tile) {
          float lo, hi;
          Out::unpack2(rp, lo, hi);
          sq[nt][0] = fma_rn(lo, lo, sq[nt][0]);
          sq[nt][1] = fma_rn(hi, hi, sq[nt][1]);
        }
      }
    }
  // Over the warp's row groups g (lanes 4, 8, 16 apart: every lane ends with the same sum), then the warps.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float v = sq[nt][k];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (g == 0) sums[warp * kMP + nt * 8 + 2 * t + k] = v;
    }
  tma::sync_threads(kThreads, kBarNorm);
  if (tid < p.m) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < kTmaConsumerWarps; ++k) v += sums[k * kMP + tid];
    exchange.publish(tile * p.m + tid, v);
  }
  FP8DK_NORM_MARK(2);
  // The updated residual rows, 16 bytes a store.
  const int chunks = cols / 8;
  for (int i = tid; i < p.m * chunks; i += kThreads) {
    const int token = i / chunks, c = (i % chunks) * 8;
    *reinterpret_cast<uint4*>(a.residual + static_cast<long long>(token) * p.n + n0 + c) =
        *reinterpret_cast<const uint4*>(res + token * s.res_pitch + c);
  }

  // Step 4: once one warp has seen every tile's last token published, one bulk copy brings all slots [tile][token]
  // into the ring (free by now: 8-byte loads of them by every thread of every CTA took 3 us a call at 32 tokens,
  // bound by the L2's requests). Then warp w adds tiles w, w + 8, ... of token `lane`, in order, and the warps'
  // sums are added in warp order: the same order in every CTA.
  const int tiles = static_cast<int>(gridDim.x);
  if (warp == 0) exchange.wait_for(p.m - 1, p.m, tiles, lane);
  tma::sync_threads(kThreads, kBarNorm);
  const unsigned long long* const copied = reinterpret_cast<const unsigned long long*>(ring);
  if (tid == 0) {
    const unsigned bytes = static_cast<unsigned>((tiles * p.m + 1) / 2 * 16);  // whole 16-byte units
    tma::arrive_expect_bytes(copy_bar, bytes);
    tma::copy_bulk(ring, exchange.slots, bytes, copy_bar);
  }
  tma::wait(copy_bar, 0);
  FP8DK_NORM_MARK(3);
  {
    float total = 0.f;
    if (lane < p.m) {
      for (int tl = warp; tl < tiles; tl += kTmaConsumerWarps)
        total += exchange.value_of(copied[tl * p.m + lane], tl * p.m + lane);
    }
    if (lane < kMP) sums[warp * kMP + lane] = total;
    tma::sync_threads(kThreads, kBarNorm);
    if (tid < p.m) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kTmaConsumerWarps; ++k) sum += sums[k * kMP + tid];
      inv[tid] = inv_rms(sum, p.n, a.eps);
    }
  }
  if (tid == 0) exchange.retire(gridDim.x);  // after its own collects: the others compare with their own tag
  tma::sync_threads(kThreads, kBarNorm);
  FP8DK_NORM_MARK(4);

  // Step 5: into the staging, then 16 bytes a store.
  const OutScale<Ab> scale(scale_value);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int token = nt * 8 + 2 * t;
    const float inv0 = inv[token], inv1 = inv[token + 1];
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + rb * kRowBlock + g + 8 * h;
        float lo, hi;
        Out::unpack2(r[rb][nt][h], lo, hi);
        const uint32_t y = mul2<Out>(w[rb][h], Out::pack2(lo * inv0, hi * inv1));
        Out::unpack2(y, lo, hi);
        const uint32_t bytes = quantize2<Ab>(scale.divide(lo), scale.divide(hi));
        q[token * s.q_pitch + row] = static_cast<uint8_t>(bytes);
        q[(token + 1) * s.q_pitch + row] = static_cast<uint8_t>(bytes >> 8);
      }
  }
  tma::sync_threads(kThreads, kBarNorm);
  const int out_chunks = cols / 16;
  for (int i = tid; i < p.m * out_chunks; i += kThreads) {
    const int token = i / out_chunks, c = (i % out_chunks) * 16;
    *reinterpret_cast<uint4*>(a.out + token * a.out_stride + n0 + c) =
        *reinterpret_cast<const uint4*>(q + token * s.q_pitch + c);
  }
#if defined(FP8DK_DIAG_TIMELINE)
  FP8DK_NORM_MARK(5);
  if (tid == 0)
    printf("FP8DK_NORM %d %d %u %llu %llu %llu %llu %llu %llu\n", p.m, tile, exchange.tag, norm_t[0], norm_t[1],
           norm_t[2], norm_t[3], norm_t[4], norm_t[5]);
#endif
}
#endif

}  // namespace skinny
}  // namespace fp8dk
#endif
