#pragma once
// Skinny GEMM, part 4 (AMD gfx942 / gfx950): the wave micro-kernel on MFMA. Compile-checked only: no AMD GPU
// was available to run it (the lane layouts follow AMD's MFMA operand layouts, checked against CK's tables).
//
// Same decomposition as the NVIDIA kernel (skinny_gemm_plan.cuh): a wave owns RB blocks of 16 weight rows;
// in a sub-iteration lane (r = lane % 16, j = lane / 16) loads the 16-byte chunk at K offset j * V of row r
// (V = chunk elements), 128-bit non-temporal loads. K is permuted identically in both operands, so a chunk is
// an MFMA operand as loaded:
//   * FP8 in the flavour the chip multiplies (e4m3fnuz on gfx942, e4m3fn on gfx950):
//     - M <= 8: v_smfmac_f32_16x16x64_fp8_fp8 (the HF blog's trick). The 2:4-sparse A operand holds the
//       tokens: sparse row 2t + p carries token t's elements at positions {2p, 2p+1} of every group of 4 along
//       K (index pattern 0x4444 / 0xEEEE), so rows 2t and 2t+1 of the result sum to token t. The dense B
//       operand is the weight chunk itself (64 K x 16 rows, one 16-byte chunk per lane). One instruction
//       covers K = 64: twice the depth of the dense instruction, no padded rows multiplied.
//     - M > 8: v_mfma_f32_16x16x32_fp8_fp8 with the weights as A (8 bytes per lane: half a chunk per step)
//       and 16 tokens per B tile.
//   * fp16 / bf16 operands, and the other FP8 flavour (unpacked to f16 exactly, skinny_gemm_fp8_unpack.cuh):
//     v_mfma_f32_16x16x16_{f16,bf16} with the weights as A, 4 elements per lane per step.
// Activations are staged in LDS as FP8 bytes or 16-bit values, rows padded by 8 bytes so that the 16 token
// rows a B fragment reads start in different banks. Register streaming (not the blog's producer/consumer
// waves through LDS): weights go straight from HBM to the matrix cores, double-buffered in VGPRs, and the
// split-K / reduction / epilogue code is the one the CUDA tests run.
#include "skinny_gemm/skinny_gemm_fp8_unpack.cuh"
#include "skinny_gemm/skinny_gemm_load.cuh"
#include "skinny_gemm/skinny_gemm_plan.cuh"

namespace fp8dk {
namespace skinny {

typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef int i32x2 __attribute__((ext_vector_type(2)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef short i16x4 __attribute__((ext_vector_type(4)));

// The FP8 flavour this device pass's matrix cores multiply.
template <class Ab>
struct AmdNativeFp8 {
  static constexpr bool value = false;
};
#if defined(FP8DK_AMD_FP8_FNUZ)
template <>
struct AmdNativeFp8<E4m3fnuz> {
  static constexpr bool value = true;
};
#elif defined(FP8DK_AMD_FP8_OCP)
template <>
struct AmdNativeFp8<E4m3fn> {
  static constexpr bool value = true;
};
#endif

FP8DK_DEVICE uint64_t pack64(uint32_t lo, uint32_t hi) { return uint64_t(lo) | (uint64_t(hi) << 32); }

FP8DK_DEVICE f32x4 mfma_16x16x16(Fp16, uint64_t a, uint64_t b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(f16x4, a), __builtin_bit_cast(f16x4, b), c,
                                               0, 0, 0);
}

FP8DK_DEVICE f32x4 mfma_16x16x16(Bf16, uint64_t a, uint64_t b, f32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(i16x4, a), __builtin_bit_cast(i16x4, b),
                                                   c, 0, 0, 0);
}

template <class Ab, int MP>
struct WarpMma {
  static constexpr int kRB = row_blocks(MP);
  static constexpr int kV = kChunkElems<Ab>;
  static constexpr bool kFp8 = Ab::kFp8;
  static constexpr bool kNative = AmdNativeFp8<Ab>::value;
  static constexpr bool kSparse = kNative && MP == 8;
  static constexpr int kTiles = kSparse ? 1 : (MP + 15) / 16;  // 16-token B tiles (one sparse A tile)
  static constexpr int kStagedBytes = kNative ? 1 : 2;
  using Mma16 = typename Mma16Input<Ab>::type;
  // Factor between the accumulated and the true dot product (FP8 unpack, skinny_gemm_fp8_unpack.cuh).
  static constexpr float kProductScale = product_scale<Ab, kFp8 && !kNative>();

  static FP8DK_DEVICE int lane_row(int lane, int rb, int) { return rb * kRowBlock + lane % 16; }
  static FP8DK_DEVICE int lane_k(int lane) { return (lane / 16) * kV; }

  static FP8DK_DEVICE uint64_t lds64(const unsigned char* p) { return *reinterpret_cast<const uint64_t*>(p); }

  // Writes one chunk (16 source bytes = kV elements of token `row` starting at block element k) to the
  // staging buffer: as is for the MFMA's own input type, FP8 of the other flavour unpacked to f16.
  static FP8DK_DEVICE void stage_chunk(unsigned char* buf, int pitch, int row, int k, const Chunk& c) {
    uint64_t* dst = reinterpret_cast<uint64_t*>(buf + row * pitch + k * kStagedBytes);
    if constexpr (kFp8 && !kNative) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t lo, hi;
        unpack_fp8x4<Ab>(c.w[u], lo, hi);
        dst[u] = pack64(lo, hi);
      }
    } else {
      dst[0] = pack64(c.w[0], c.w[1]);
      dst[1] = pack64(c.w[2], c.w[3]);
    }
  }

  f32x4 acc[kRB][kTiles];
  int lane_j;
  int row_off[kTiles];  // byte offset of the token row a tile reads (tokens >= m read token m - 1)
  // Sparse: lane r holds sparse row r = token r / 2 with elements {2p, 2p+1} (p = r % 2) of each group of 4.
  uint32_t sparse_sel;  // v_perm selector picking those bytes from two words
  int sparse_idx;       // their 2-bit positions within each group, 4 groups

  FP8DK_DEVICE WarpMma(int lane, int m, int pitch)
      : lane_j(lane / 16),
        sparse_sel(lane % 2 ? 0x07060302u : 0x05040100u),
        sparse_idx(lane % 2 ? 0xEEEE : 0x4444) {
    const int lane_r = lane % 16;
#pragma unroll
    for (int tt = 0; tt < kTiles; ++tt) {
      const int tok = kSparse ? lane_r / 2 : tt * 16 + lane_r;
      row_off[tt] = (tok < m ? tok : m - 1) * pitch;
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb) acc[rb][tt] = f32x4{0.f, 0.f, 0.f, 0.f};
    }
  }

  // One sub-iteration: w[rb][0] is this lane's chunk of row lane_row(rb); the activations of the same K range
  // start at element `ks` of the staged block.
  FP8DK_DEVICE void sub_iter(const Chunk (&w)[kRB][kRowsPerLane], const unsigned char* buf, int ks) {
    const unsigned char* col = buf + (ks + lane_j * kV) * kStagedBytes;
    if constexpr (kSparse) {
      // This lane's token, its kept elements compressed to 8 bytes (one v_perm_b32 per word).
      const uint64_t x0 = lds64(col + row_off[0]), x1 = lds64(col + row_off[0] + 8);
      const i32x2 a = {int(__builtin_amdgcn_perm(uint32_t(x0 >> 32), uint32_t(x0), sparse_sel)),
                       int(__builtin_amdgcn_perm(uint32_t(x1 >> 32), uint32_t(x1), sparse_sel))};
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb) {
        const i32x4 b = {int(w[rb][0].w[0]), int(w[rb][0].w[1]), int(w[rb][0].w[2]), int(w[rb][0].w[3])};
        acc[rb][0] = __builtin_amdgcn_smfmac_f32_16x16x64_fp8_fp8(a, b, acc[rb][0], sparse_idx, 0, 0);
      }
    } else if constexpr (kNative) {
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int tt = 0; tt < kTiles; ++tt) {
          const long b = static_cast<long>(lds64(col + row_off[tt] + 8 * s));
#pragma unroll
          for (int rb = 0; rb < kRB; ++rb) {
            const long a = static_cast<long>(pack64(w[rb][0].w[2 * s], w[rb][0].w[2 * s + 1]));
            acc[rb][tt] = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, acc[rb][tt], 0, 0, 0);
          }
        }
    } else {
      uint32_t h[kRB][kV / 2];  // the chunk as 16-bit pairs
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if constexpr (kFp8) {
            unpack_fp8x4<Ab>(w[rb][0].w[u], h[rb][2 * u], h[rb][2 * u + 1]);
          } else {
            h[rb][u] = w[rb][0].w[u];
          }
        }
      }
#pragma unroll
      for (int s = 0; s < kV / 4; ++s)
#pragma unroll
        for (int tt = 0; tt < kTiles; ++tt) {
          const uint64_t b = lds64(col + row_off[tt] + 4 * s * kStagedBytes);
#pragma unroll
          for (int rb = 0; rb < kRB; ++rb)
            acc[rb][tt] = mfma_16x16x16(Mma16{}, pack64(h[rb][2 * s], h[rb][2 * s + 1]), b, acc[rb][tt]);
        }
    }
  }

  // This wave's partial sums to red[token][n] (pitch floats per token), n = n0 + row within the wave.
  FP8DK_DEVICE void store(float* red, int pitch, int n0, int lane) const {
#pragma unroll
    for (int rb = 0; rb < kRB; ++rb) {
      if constexpr (kSparse) {
        // Result rows 4j..4j+3 are sparse rows: tokens 2j (rows 4j, 4j+1) and 2j + 1; column = weight row.
        const int n = n0 + rb * kRowBlock + lane % 16, tok = 2 * lane_j;
        red[tok * pitch + n] = acc[rb][0][0] + acc[rb][0][1];
        red[(tok + 1) * pitch + n] = acc[rb][0][2] + acc[rb][0][3];
      } else {
        // Result rows 4j..4j+3 are weight rows, column = token.
#pragma unroll
        for (int tt = 0; tt < kTiles; ++tt) {
          const int tok = tt * 16 + lane % 16;
          if (tok < MP) {
#pragma unroll
            for (int i = 0; i < 4; ++i) red[tok * pitch + n0 + rb * kRowBlock + 4 * lane_j + i] = acc[rb][tt][i];
          }
        }
      }
    }
  }
};

}  // namespace skinny
}  // namespace fp8dk
