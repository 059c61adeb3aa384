#pragma once
// SwiGLU (silu_and_mul) with optional static FP8 quantization, for CUDA and ROCm from one source.
//
//   input [rows, 2d] (gate = columns [0, d), up = columns [d, 2d)), out [rows, d]
//   y   = silu(gate) * up in fp32, silu(x) = x / (1 + exp(-x))
//   out = y rounded to the input format, or quantize(y * (1 / scale)) to FP8 (saturating, RNE)
//
// Purely elementwise: no reduction ties a row to one block, so the grid is flat over rows x column chunks
// and even one row spreads over many blocks. Each thread owns one chunk of kChunk = 8 columns of a row:
// 8 gate and 8 up values (one 128-bit load each when alignment allows), 8 or 16 output bytes (one store).
// Thread layout: threadIdx.x walks the chunks of a row, threadIdx.y and the grid's y (and z) the rows, so
// there is no division to split a flat index and a short row (small d) packs several rows per block.
//
// Vector width W (elements per memory access, a power of two dividing kChunk) is a template parameter the
// launcher picks from the actual alignment of gate, up and out and of their row strides: the up half starts
// d columns after gate, so d itself must be a multiple of W. Because d % W == 0, every W-vector of a chunk
// is either wholly inside the row or wholly past its end: the row's last, partial chunk is handled by
// predicating whole vectors, never by a scalar loop.
#include "common/diag_trace.cuh"
#include "common/grid_dependency.cuh"
#include "common/numerics.cuh"
#include "common/vec.cuh"
#include "swiglu_fp8/swiglu_plan.h"  // kChunk and the block bounds the plan sizes grids with

namespace fp8dk {

namespace swiglu {

// Second __launch_bounds__ argument: CUDA reads it as resident blocks per SM (8 x 256 threads = 2048, the
// most an SM holds: at most 32 registers), HIP as waves per SIMD (8 of the 8 possible: at most 64 VGPRs).
// Either way full occupancy, which is what keeps enough loads in flight at large batch.
constexpr int kMinResident = 8;

// 2^x and 1/x on the special-function unit without the subnormal fix-ups of exp2_approx / rcp_approx
// (on NVIDIA, their non-.ftz forms cost 3 and 6 extra instructions around each MUFU). silu() gets the same
// values without them: a subnormal exp2 operand (tiny x) flushed to 0 still gives 2^0 = 1, a subnormal result
// (x > 87.3) flushed to 0 is lost anyway when 1 is added to it, and the reciprocal's operand lies in
// [0.25, 2^126] with a normal result. AMD's v_exp_f32 and v_rcp_f32 are already the bare instructions.
FP8DK_DEVICE float exp2_ftz(float x) {
#if defined(FP8DK_AMD)
  return exp2_approx(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

FP8DK_DEVICE float rcp_ftz(float x) {
#if defined(FP8DK_AMD)
  return rcp_approx(x);
#else
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// silu(x) = x / (1 + exp(-x)) with exp(-x) = 2^(-x log2 e) and one reciprocal. The reciprocal is taken of a
// quarter of the denominator, and x is quartered to match (both scalings are exact, also for subnormal
// bf16 x): for -88.7 < x < -87.3 the plain 1 / (1 + e) would be subnormal, which v_rcp_f32 flushes to zero,
// while 4 / (1 + e) is normal for every finite e. Where exp(-x) overflows (x < -88.72, as in the
// reference's fp32 exp) 1 + e = inf and the result is x * 0 = -0, the reference's x / inf. Special values
// match the reference: silu(+inf) = inf, silu(-inf) = -inf * 0 = NaN (reference: -inf / inf), NaN stays NaN.
// e * 0.25f + 0.25f rounds once whether or not it is contracted into an FMA, since e * 0.25f is exact.
// Error against the exact value: docs/swiglu_accuracy.md.
FP8DK_DEVICE float silu(float x) {
  constexpr float kNegLog2e = -1.44269504088896341f;
  const float e = exp2_ftz(x * kNegLog2e);
  const float quarter_recip = rcp_ftz(e * 0.25f + 0.25f);
  return (x * 0.25f) * quarter_recip;
}

// One chunk of a row's gate or up half as raw 16-bit pairs (memory order). Vectors at or past `valid`
// columns are not read: they stay zero and their results are never stored.
template <int W>
FP8DK_DEVICE void load_chunk(const uint16_t* p, int valid, uint32_t (&raw)[kChunk / 2]) {
  constexpr int kBytes = 2 * W;
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) raw[i] = 0;
#pragma unroll
  for (int v = 0; v < kChunk / W; ++v) {
    if (v * W < valid) {
      const Pack<kBytes> pk = load_nt<kBytes>(p + v * W);  // read exactly once: keep it out of L1
      if constexpr (W == 1) {
        raw[v / 2] |= uint32_t(pk.w[0]) << (16 * (v % 2));
      } else {
#pragma unroll
        for (int j = 0; j < W / 2; ++j) raw[v * (W / 2) + j] = pk.w[j];
      }
    }
  }
}

// Writes one chunk of results: rounded to the 16-bit format Out (2 bytes per column), or quantized to
// FP8 after multiplying by inv_scale (1 byte per column, four per packed conversion).
template <class Out, int W>
FP8DK_DEVICE void store_chunk(uint8_t* p, int valid, const float (&y)[kChunk], float inv_scale) {
  constexpr int kBytes = W * Out::kBytes;
  constexpr int kWords = kChunk * Out::kBytes / 4;
  uint32_t raw[kWords];
  if constexpr (Out::kFp8) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      raw[i] = quantize4<Out>(y[4 * i] * inv_scale, y[4 * i + 1] * inv_scale, y[4 * i + 2] * inv_scale,
                              y[4 * i + 3] * inv_scale);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i) raw[i] = Out::pack2(y[2 * i], y[2 * i + 1]);
  }
#pragma unroll
  for (int v = 0; v < kChunk / W; ++v) {
    if (v * W < valid) {
      uint8_t* dst = p + v * kBytes;
      if constexpr (kBytes == 1) {
        *dst = uint8_t(raw[v / 4] >> (8 * (v % 4)));
      } else if constexpr (kBytes == 2) {
        Pack<2> pk;
        pk.w[0] = uint16_t(raw[v / 2] >> (16 * (v % 2)));
        store<2>(dst, pk);
      } else {
        Pack<kBytes> pk;
#pragma unroll
        for (int j = 0; j < kBytes / 4; ++j) pk.w[j] = raw[v * (kBytes / 4) + j];
        store<kBytes>(dst, pk);
      }
    }
  }
}

}  // namespace swiglu

// Block: (blockDim.x chunks of a row) x (blockDim.y rows), at most swiglu::kMaxThreads threads. Grid:
// x covers ceil(d / kChunk) chunks, y the row groups, and z the further runs of kMaxGridY row groups when
// there are more (gridDim.y is then kMaxGridY; using the constant avoids a division on AMD, where gridDim
// is derived from the grid size). One chunk per thread, no loop. `out` is raw bytes (FP8 or 16-bit bits);
// strides are in elements; `scale` is read only for FP8 out.
template <class In, class Out, int W>
__global__ void __launch_bounds__(swiglu::kMaxThreads, swiglu::kMinResident)
    silu_and_mul_kernel(const uint16_t* __restrict__ in, uint8_t* __restrict__ out,
                        const float* __restrict__ scale, int d, int64_t rows, int64_t in_row_stride,
                        int64_t out_row_stride) {
  static_assert(W == 1 || W == 2 || W == 4 || W == 8, "vector width must divide the chunk");
  using namespace swiglu;
  FP8DK_TRACE_BEGIN();
  const int col = int(blockIdx.x * blockDim.x + threadIdx.x) * kChunk;
  const int64_t row = (int64_t(blockIdx.z) * kMaxGridY + blockIdx.y) * blockDim.y + threadIdx.y;
  if (col >= d || row >= rows) return;
  const int valid = d - col;
  const uint16_t* gate = in + row * in_row_stride + col;
  uint32_t g[kChunk / 2], u[kChunk / 2];
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  load_chunk<W>(gate, valid, g);
  load_chunk<W>(gate + d, valid, u);
  // Read after the data loads are issued, so that the three latencies overlap; a branch-free reciprocal
  // (an IEEE division's slow-path branch made ptxas hold the data loads until the scale had arrived).
  // Multiplying by a reciprocal taken once instead of dividing each value is at most one FP8 step away from
  // the reference's division, on a tiny fraction of values (within the contract's tolerance).
  float inv_scale = 1.f;
  if constexpr (Out::kFp8) inv_scale = rcp_approx(*scale);
  float y[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) {
    float g0, g1, u0, u1;
    In::unpack2(g[i], g0, g1);
    In::unpack2(u[i], u0, u1);
    y[2 * i] = silu(g0) * u0;
    y[2 * i + 1] = silu(g1) * u1;
  }
  store_chunk<Out, W>(out + (row * out_row_stride + col) * Out::kBytes, valid, y, inv_scale);
  FP8DK_TRACE_END(kSwiglu, d, rows, 0);
}

}  // namespace fp8dk
