#pragma once
// Skinny GEMM, part 4 (NVIDIA): the warp micro-kernel on mma.sync.m16n8k16 (f16 or bf16 in, fp32 out).
//
// A and B are swapped: the 16 weight rows of a row block are the MMA's M operand and the (at most 32) tokens
// its N operand, 8 per n-tile (NT = MP / 8 tiles). A dot product does not care in which order K is summed,
// so K is permuted consistently in both operands to make each lane's 16-byte weight chunk its A fragment:
// lane (g = lane / 4, t = lane % 4) loads 16 contiguous bytes at K offset t * V of rows g and g + 8 of the
// block (V = chunk elements), and MMA step q (of V / 4) takes elements [4q, 4q + 4) of those chunks:
//   a0 = row g   elements 4q, 4q+1   a2 = row g   elements 4q+2, 4q+3
//   a1 = row g+8 elements 4q, 4q+1   a3 = row g+8 elements 4q+2, 4q+3
// which is the fragment layout (a0/a2: logical k 2t..2t+1 / 2t+8..2t+9 of row g) under the bijection
// logical k -> actual K offset that is the same for every row and for B. The matching B fragment is token
// g's elements [t * V + 4q, + 4) of the same K range: one 8-byte read of the staged activations.
// FP8 chunks become f16 fragments right after the load (cvt.rn.f16x2.e4m3x2 on sm_89+, exact); on Hopper
// this is the same unpack + HMMA.16816 that ptxas emits for mma.sync e4m3 (sm_90 has no FP8 mma.sync), and
// wgmma would need the weights in shared memory for no gain: this kernel is bound by HBM, not by the MMAs.
//
// Staged activations: [token][K-block element] in the MMA input type, in 8-byte atoms of 4 elements. Within
// a sub-iteration the atoms are stored step-major: atom (q, t) = lane t's elements [t * V + 4q, + 4) sits at
// 4q + t, so for one step the 4 K-groups of a token read 32 contiguous bytes. Rows are an odd multiple of
// 32 bytes, so the 4 tokens of a half-warp start 8 banks apart: 16 lanes x 8 B hit 32 distinct banks.
#include "skinny_gemm/skinny_gemm_fp8_unpack.cuh"
#include "skinny_gemm/skinny_gemm_load.cuh"
#include "skinny_gemm/skinny_gemm_plan.cuh"

namespace fp8dk {
namespace skinny {

FP8DK_DEVICE void mma_m16n8k16(Fp16, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

FP8DK_DEVICE void mma_m16n8k16(Bf16, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Ab, int MP>
struct WarpMma {
  static constexpr int kRB = row_blocks(MP);
  static constexpr int kNT = MP / 8;
  static constexpr int kV = kChunkElems<Ab>;
  static constexpr int kSteps = kV / 4;
  static constexpr bool kFp8 = Ab::kFp8;
  static constexpr int kStagedBytes = 2;
  using Mma = typename Mma16Input<Ab>::type;
  // Factor between the accumulated and the true dot product (FP8 unpack, skinny_gemm_fp8_unpack.cuh).
  static constexpr float kProductScale = product_scale<Ab, kFp8>();
  // CTAs per SM the registers allow (__launch_bounds__). The bit-trick unpack (e4m3fnuz, or e4m3fn before
  // sm_89) needs more registers than two CTAs leave; it is the correctness path, so it runs one per SM.
  static constexpr int kCtasPerSm = kProductScale != 1.f ? 1 : ctas_per_sm(kRB);

  // Lane -> weight row within the warp's 16 * RB rows, and K-element offset of its chunk in a sub-iteration.
  static FP8DK_DEVICE int lane_row(int lane, int rb, int h) { return rb * kRowBlock + lane / 4 + 8 * h; }
  static FP8DK_DEVICE int lane_k(int lane) { return (lane % 4) * kV; }

  // Writes one chunk (16 source bytes = kV elements of token `row` starting at block element k, a multiple
  // of kV) to the staging buffer, converting FP8 to f16.
  static FP8DK_DEVICE void stage_chunk(unsigned char* buf, int pitch, int row, int k, const Chunk& c) {
    constexpr int kSI = 4 * kV;
    unsigned char* base = buf + row * pitch + (k / kSI) * kSI * 2 + ((k % kSI) / kV) * 8;
#pragma unroll
    for (int q = 0; q < kSteps; ++q) {
      uint32_t lo, hi;
      if constexpr (kFp8) {
        unpack_fp8x4<Ab>(c.w[q], lo, hi);
      } else {
        lo = c.w[2 * q], hi = c.w[2 * q + 1];
      }
      *reinterpret_cast<uint2*>(base + 32 * q) = make_uint2(lo, hi);
    }
  }

  float acc[kRB][kNT][4];
  int lane_off[kNT];  // byte offset of the lane's atoms in the token row an n-tile reads (tokens >= m read m - 1)

  FP8DK_DEVICE WarpMma(int lane, int m, int pitch) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int tok = nt * 8 + lane / 4;
      lane_off[nt] = (tok < m ? tok : m - 1) * pitch + (lane % 4) * 8;
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rb][nt][i] = 0.f;
    }
  }

  // One sub-iteration: w[rb][h] is this lane's chunk of row lane_row(rb, h); the activations of the same K
  // range start at element `ks` of the staged block.
  FP8DK_DEVICE void sub_iter(const Chunk (&w)[kRB][kRowsPerLane], const unsigned char* buf, int ks) {
    buf += ks * 2;
#pragma unroll
    for (int q = 0; q < kSteps; ++q) {
      uint32_t a[kRB][4];
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb) {
        if constexpr (kFp8) {
          unpack_fp8x4<Ab>(w[rb][0].w[q], a[rb][0], a[rb][2]);
          unpack_fp8x4<Ab>(w[rb][1].w[q], a[rb][1], a[rb][3]);
        } else {
          a[rb][0] = w[rb][0].w[2 * q], a[rb][2] = w[rb][0].w[2 * q + 1];
          a[rb][1] = w[rb][1].w[2 * q], a[rb][3] = w[rb][1].w[2 * q + 1];
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint2 b = *reinterpret_cast<const uint2*>(buf + lane_off[nt] + 32 * q);
#pragma unroll
        for (int rb = 0; rb < kRB; ++rb) mma_m16n8k16(Mma{}, acc[rb][nt], a[rb], b.x, b.y);
      }
    }
  }

  // This warp's partial sums to red[token][n] (pitch floats per token), n = n0 + row within the warp.
  FP8DK_DEVICE void store(float* red, int pitch, int n0, int lane) const {
#pragma unroll
    for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int tok = nt * 8 + 2 * (lane % 4) + (i & 1);
          red[tok * pitch + n0 + lane_row(lane, rb, i >> 1)] = acc[rb][nt][i];
        }
  }
};

}  // namespace skinny
}  // namespace fp8dk
