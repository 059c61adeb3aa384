#pragma once
// Static per-tensor FP8 quantization (quantize_fp8) for CUDA and ROCm from one source.
//
//   input [rows, d] (16-bit, any row stride, unit column stride), out [rows, d] FP8 (its own row stride)
//   out = saturate(input / scale) rounded to nearest even, NaN kept (reference.quantize_fp8)
//
// The reference's bytes, for every input and scale (only a NaN may come out with the other sign bit). The fused
// kernels multiply by an approximate 1/scale and may land one FP8 step off where the quotient sits on a
// rounding tie (README "Op contract"); this op is nothing but that division, and it is memory-bound, so it
// spends a few FMAs per element on the correctly rounded fp32 quotient (ScaleDivisor) and converts that with
// the shared saturating conversion (quantize4, common/numerics.cuh).
//
// Purely elementwise, so the grid is flat over rows x column chunks (swiglu_kernels.cuh's layout): threadIdx.x
// walks the chunks of a row, threadIdx.y and the grid's y (and z) the rows. Each thread owns one chunk of
// kChunk = 16 columns: 32 input bytes (two 128-bit loads) and 16 FP8 bytes (one 128-bit store) when the
// pointers and row strides allow. Template parameter W is the store width in bytes (= columns), chosen by the
// launcher from the actual alignment; loads take min(W, 8) columns (16 bytes at most). Only the row's last
// chunk can be partial (d need not be a multiple of anything): it is read and written column by column under
// predicates, so every other chunk keeps the full-width accesses.
#include "common/grid_dependency.cuh"
#include "common/numerics.cuh"
#include "common/vec.cuh"

namespace fp8dk {

namespace quant {

constexpr int kChunk = 16;          // columns per thread
constexpr int kMaxLoadElems = 8;    // 16-bit columns per load: 16 bytes, the widest access
constexpr int kMaxThreads = 256;    // threads per block, upper bound (the launcher may use fewer)
constexpr int kMaxGridY = 65535;    // the grid's y limit; row groups past it continue in z
// Second __launch_bounds__ argument: resident blocks per SM on CUDA (8 x 256 threads = 2048, the SM's maximum,
// so at most 32 registers), waves per SIMD on HIP (8, so at most 64 VGPRs). Full occupancy keeps enough loads
// in flight for a kernel that is all memory traffic.
constexpr int kMinResident = 8;

FP8DK_DEVICE float abs_(float x) { return uint_as_float(float_as_uint(x) & 0x7fffffffu); }

// x / scale rounded to nearest even in fp32, bit for bit the reference's division, from one reciprocal.
//
// For 2^-64 <= |scale| < 2^64 (every real scale; a calibrated one is amax / 448):
//  - recip = RN(1 / scale): the hardware reciprocal (within 1 ulp) refined by one Newton step is RN(1/scale)
//    except for an all-ones significand, where it lands one ulp low (Markstein's exception); the upper
//    neighbour is taken when its exact residual |1 - scale * r| (one FMA) is the smaller.
//  - per value, q0 = RN(x * recip) is within an ulp of x / scale, and one correction with the exact remainder,
//    q1 = RN(q0 + RN(x - q0 * scale) * recip), is RN(x / scale) (Markstein's theorem: recip = RN(1/scale), no
//    underflow or overflow). tools/quotient_check.c replays this arithmetic on the host: both steps for every
//    fp32 significand of scale (with any hardware reciprocal within 2 ulps) against every significand of a
//    16-bit input, and the whole divisor for every fp16 and bf16 value against scales of every kind.
//  - q1 is used where |q0| lies in [2^-20, 2^20], inside the theorem's range for such scales. Outside it FP8
//    cannot tell q0 from the exact quotient: below 2^-12 everything rounds to +-0 (q0 has the quotient's sign,
//    -0 / scale included, which the correction would turn into +0), above 448 everything saturates (and q0 is
//    +-inf where x is, which the correction would turn into inf - inf = NaN).
// Any other scale is brought into that range by a power of two applied to both operands first, x / scale =
// (x * pre) / (scale * pre): pre = 2^96 below 2^-64 (subnormal scales included; x * 2^96 is exact or overflows
// where the quotient saturates anyway) and 2^-64 from 2^64 on (x * 2^-64 is exact or so small that the
// quotient rounds to +-0 in FP8, with its sign). For 0, +-inf and NaN, pre = 1 / scale (exact: +-inf, +-0,
// NaN) and the divisor is 1, so x * pre is the IEEE quotient itself (x / 0 = +-inf, 0 / 0 = NaN, ...).
// That pre-scaling is a uniform branch a real scale never takes.
struct ScaleDivisor {
  float divisor;  // scale, or scale * pre
  float recip;    // RN(1 / divisor)
  float pre;      // 1 for a scale in [2^-64, 2^64)
  bool prescale;

  FP8DK_DEVICE explicit ScaleDivisor(float scale) {
    const float a = abs_(scale);
    prescale = !(a >= 0x1p-64f && a < 0x1p64f);  // NaN too
    pre = 1.f;
    divisor = scale;
    if (prescale) {
      const bool special = !(a > 0.f && a <= 0x1.fffffep127f);  // 0, inf or NaN
      pre = special ? rcp_approx(scale) : (a < 0x1p-64f ? 0x1p96f : 0x1p-64f);
      divisor = special ? 1.f : scale * pre;
    }
    const float r0 = rcp_approx(divisor);
    const float r1 = fma_rn(fma_rn(-divisor, r0, 1.f), r0, r0);
    const float up = uint_as_float(float_as_uint(r1) + 1u);  // next value away from zero
    recip = abs_(fma_rn(-divisor, up, 1.f)) < abs_(fma_rn(-divisor, r1, 1.f)) ? up : r1;
  }

  FP8DK_DEVICE float quotient(float x) const {
    const float q0 = x * recip;
    const float q1 = fma_rn(fma_rn(-q0, divisor, x), recip, q0);
    const float a = abs_(q0);
    return a >= 0x1p-20f && a <= 0x1p20f ? q1 : q0;  // false for NaN: q0 (NaN) is kept
  }

  template <int N>
  FP8DK_DEVICE void divide(float (&y)[N]) const {
    if (prescale) {
#pragma unroll
      for (int i = 0; i < N; ++i) y[i] *= pre;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) y[i] = quotient(y[i]);
  }
};

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
  constexpr int kLoadElems = W < kMaxLoadElems ? W : kMaxLoadElems;
  const int col = int(blockIdx.x * blockDim.x + threadIdx.x) * kChunk;
  const int64_t row = (int64_t(blockIdx.z) * kMaxGridY + blockIdx.y) * blockDim.y + threadIdx.y;
  if (col >= d || row >= rows) return;
  const bool whole = d - col >= kChunk;
  const uint16_t* src = in + row * in_row_stride + col;
  uint32_t raw[kChunk / 2];
  wait_for_prior_grid();
  if (whole) {
    load_chunk<kLoadElems>(src, raw);
  } else {
    load_partial_chunk(src, d - col, raw);
  }
  allow_next_grid();
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
}

}  // namespace fp8dk
