#pragma once
// Division by a static FP8 scale, out = FP8(y / scale), as the reference divides: in IEEE fp32, then a
// saturating conversion. Device code for both vendors, no torch includes.
//
//   ScaleDivisor   quantize_fp8: the correctly rounded quotient for every scale (0, inf, NaN and extreme
//                  powers of two included), from one reciprocal per thread.
//   OutScale<Out>  rms_norm's FP8 output: the correctly rounded reciprocal and the same correction step,
//                  without the pre-scaling of extreme scales; a no-op for a 16-bit output.
// silu_and_mul multiplies by an approximate 1 / scale instead (swiglu_kernels.cuh; README "Op contract").
#include "common/platform.cuh"

namespace fp8dk {

// One Markstein step: with recip = RN(1 / divisor) and q0 = RN(x * recip), within an ulp of x / divisor, the
// remainder x - q0 * divisor is exact in an FMA and q0 + remainder * recip rounds to RN(x / divisor).
FP8DK_DEVICE float refine_quotient(float x, float q0, float divisor, float recip) {
  return fma_rn(fma_rn(-q0, divisor, x), recip, q0);
}

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
    const float q1 = refine_quotient(x, q0, divisor, recip);
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

// The fused kernels' static output scale (rms_norm), read once per thread, and y / scale rounded like the
// reference's division. y times the
// correctly rounded reciprocal r is within an ulp of the quotient, but not enough: a 16-bit value divided by
// a scale derived from another 16-bit value (amax / 448, say) often lands exactly on an FP8 rounding tie,
// which that ulp pushes to either side. One Markstein step fixes it: the remainder y - q * scale is exact in
// an FMA, and q + remainder * r rounds to the correctly rounded quotient (checked against IEEE division for
// every 16-bit y and thousands of scales: equal wherever FP8 can tell the quotient from zero; only bf16
// quotients below 2^-12, whose remainder underflows, may differ). The step would turn -0 into +0, a
// different e4m3fn byte, hence the copysign. An infinite or NaN
// first guess (a huge quotient, a zero scale, a NaN) is kept: it saturates or stays NaN like the reference's.
template <class Out>
struct OutScale {
  float value = 0.f, rcp = 0.f;

  // The scale as stored (FP8 out; 0 otherwise). rcp_rn waits for the value and branches on it, and the
  // machine code issues no load that comes after that wait in program order before it: an OutScale built before
  // the row's loads holds them back by the scale's latency (an L2 round trip). So a kernel may read the value
  // first and build the OutScale from it once its loads are in flight.
  static FP8DK_DEVICE float read(const float* scale) {
    if constexpr (Out::kFp8) return *scale;
    return 0.f;
  }

  FP8DK_DEVICE explicit OutScale(float scale_value) {
    if constexpr (Out::kFp8) {
      value = scale_value;
      rcp = rcp_rn(value);
    }
  }

  FP8DK_DEVICE explicit OutScale(const float* scale) : OutScale(read(scale)) {}

  FP8DK_DEVICE float divide(float y) const {
    const float q = y * rcp;
    const float corrected = refine_quotient(y, q, value, rcp);
    return is_finite(q) ? copysign_(corrected, q) : q;
  }
};

}  // namespace fp8dk
