#pragma once
// Static per-tensor FP8 quantization (quantize_fp8) for CUDA and ROCm from one source.
//
//   input [rows, d] (16-bit, any row stride, unit column stride), out [rows, d] FP8 (its own row stride)
//   out = saturate(input / scale) rounded to nearest even, NaN kept (reference.quantize_fp8)
//
// The reference's bytes, for every input and scale (only a NaN may come out with the other sign bit). This op
// is nothing but that division, and it is memory-bound, so it spends a few FMAs per element on the correctly
// rounded fp32 quotient for any scale (ScaleDivisor, common/fp8_scale.cuh: also how rms_norm divides, without
// the extreme scales) and converts that with the shared saturating conversion (quantize4, common/numerics.cuh).
//
// Purely elementwise, so the grid is flat over rows x column chunks (swiglu_kernels.cuh's layout): threadIdx.x
// walks the chunks of a row, threadIdx.y and the grid's y (and z) the rows. Each thread owns one chunk of
// kChunk = 16 columns: 32 input bytes (two 128-bit loads) and 16 FP8 bytes (one 128-bit store) when the
// pointers and row strides allow. Template parameter W is the store width in bytes (= columns), chosen by the
// launcher from the actual alignment; loads take min(W, 8) columns (16 bytes at most). Only the row's last
// chunk can be partial (d need not be a multiple of anything): it is read and written column by column under
// predicates, so every other chunk keeps the full-width accesses.
#include "common/fp8_scale.cuh"
#include "common/diag_trace.cuh"
#include "common/grid_dependency.cuh"
#include "common/numerics.cuh"
#include "common/vec.cuh"
#include "quant_fp8/quantize_plan.h"  // kChunk and the block bounds the plan sizes grids with

namespace fp8dk {

namespace quant {

// Second __launch_bounds__ argument: resident blocks per SM on CUDA (8 x 256 threads = 2048, the SM's maximum,
// so at most 32 registers), waves per SIMD on HIP (8, so at most 64 VGPRs). Full occupancy keeps enough loads
// in flight for a kernel that is all memory traffic.
constexpr int kMinResident = 8;

// A whole chunk as 16-bit pairs (memory order), read in accesses of W columns; read once, so kept out of L1.
template <int W>
FP8DK_DEVICE void load_chunk(const uint16_t* p, uint32_t (&raw)[kChunk / 2]) {
  static_assert(W == 1 || W == 2 || W == 4 || W == 8, "a load is 2, 4, 8 or 16 bytes");
#pragma unroll
  for (int v = 0; v < kChunk / W; ++v) {
    const Pack<2 * W> pk = load_nt<2 * W>(p + v * W);
    if constexpr (W == 1) {
      if (v % 2 == 0) raw[v / 2] = pk.w[0];
      else raw[v / 2] |= uint32_t(pk.w[0]) << 16;
    } else {
#pragma unroll
      for (int j = 0; j < W / 2; ++j) raw[v * (W / 2) + j] = pk.w[j];
    }
  }
}

// The row's last chunk when it is partial: `valid` < kChunk columns, each read on its own; the rest stays 0
// and is never stored.
FP8DK_DEVICE void load_partial_chunk(const uint16_t* p, int valid, uint32_t (&raw)[kChunk / 2]) {
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) raw[i] = 0;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    if (i < valid) raw[i / 2] |= uint32_t(p[i]) << (16 * (i % 2));
  }
}

// A whole chunk of FP8 bytes (four per word, memory order) in stores of W bytes.
template <int W>
FP8DK_DEVICE void store_chunk(uint8_t* p, const uint32_t (&q)[kChunk / 4]) {
  static_assert(W == 1 || W == 2 || W == 4 || W == 8 || W == 16, "a store is 1, 2, 4, 8 or 16 bytes");
#pragma unroll
  for (int v = 0; v < kChunk / W; ++v) {
    if constexpr (W == 1) {
      p[v] = uint8_t(q[v / 4] >> (8 * (v % 4)));
    } else if constexpr (W == 2) {
      Pack<2> pk;
      pk.w[0] = uint16_t(q[v / 2] >> (16 * (v % 2)));
      store<2>(p + 2 * v, pk);
    } else {
      Pack<W> pk;
#pragma unroll
      for (int j = 0; j < W / 4; ++j) pk.w[j] = q[v * (W / 4) + j];
      store<W>(p + W * v, pk);
    }
  }
}

FP8DK_DEVICE void store_partial_chunk(uint8_t* p, int valid, const uint32_t (&q)[kChunk / 4]) {
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    if (i < valid) p[i] = uint8_t(q[i / 4] >> (8 * (i % 4)));
  }
}

}  // namespace quant

// Block: (blockDim.x chunks of a row) x (blockDim.y rows), at most quant::kMaxThreads threads. Grid: x covers
// ceil(d / kChunk) chunks, y the row groups, z the further runs of kMaxGridY row groups (gridDim.y is then
// kMaxGridY; the constant avoids a division on AMD, where gridDim is derived from the grid size). One chunk per
// thread, no loop. `out` is raw FP8 bytes of flavour Out; strides are in elements; W: see the file comment.
template <class In, class Out, int W>
__global__ void __launch_bounds__(quant::kMaxThreads, quant::kMinResident)
    quantize_fp8_kernel(const uint16_t* __restrict__ in, uint8_t* __restrict__ out, const float* __restrict__ scale,
                        int d, int64_t rows, int64_t in_row_stride, int64_t out_row_stride) {
  using namespace quant;
  FP8DK_TRACE_BEGIN();
  constexpr int kLoadElems = W < kMaxLoadElems ? W : kMaxLoadElems;
  const int col = int(blockIdx.x * blockDim.x + threadIdx.x) * kChunk;
  const int64_t row = (int64_t(blockIdx.z) * kMaxGridY + blockIdx.y) * blockDim.y + threadIdx.y;
  if (col >= d || row >= rows) return;
  const bool whole = d - col >= kChunk;
  const uint16_t* src = in + row * in_row_stride + col;
  uint32_t raw[kChunk / 2];
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  if (whole) {
    load_chunk<kLoadElems>(src, raw);
  } else {
    load_partial_chunk(src, d - col, raw);
  }
  // Read after the data loads are issued, so that the latencies overlap.
  const ScaleDivisor divisor(*scale);
  float y[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) In::unpack2(raw[i], y[2 * i], y[2 * i + 1]);
  divisor.divide(y);
  uint32_t q[kChunk / 4];
#pragma unroll
  for (int i = 0; i < kChunk / 4; ++i) q[i] = quantize4<Out>(y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);
  uint8_t* dst = out + row * out_row_stride + col;
  if (whole) {
    store_chunk<W>(dst, q);
  } else {
    store_partial_chunk(dst, d - col, q);
  }
  FP8DK_TRACE_END(kQuantize, d, rows, 0);
}

}  // namespace fp8dk
