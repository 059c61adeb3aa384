// Host check of quantize_fp8's quotient (quant_fp8/quantize_kernels.cuh, ScaleDivisor): the kernels must give
// the bytes of the reference, saturate(RN(x / scale)) converted to FP8, while computing x / scale from one
// hardware reciprocal per thread. This program replays the kernel's arithmetic with C's fmaf (a true FMA,
// as __fmaf_rn and v_fma_f32 are) and checks:
//   1. the refined reciprocal is RN(1 / s) for every fp32 significand of s, whatever the hardware reciprocal
//      returns within 2 ulps of 1 / s (rcp.approx.f32 and v_rcp_f32 are specified within 1 ulp);
//   2. the corrected quotient q1 is RN(x / s) for every significand of a 16-bit input x (10 fraction bits
//      cover fp16 and bf16) against every fp32 significand of s. Both operands in [1, 2): the kernel's range
//      checks keep every case it uses q1 for free of underflow and overflow, where powers of two scale exactly;
//   3. the whole ScaleDivisor, range checks and pre-scaling included, against every fp16 and every bf16 value
//      for scales of every kind (powers of two and all-ones significands of every exponent, subnormal, zero,
//      infinite, NaN, random): the float32 quotient must be RN(x / s) wherever 2^-12 <= |x / s| <= 2^10 (where
//      FP8 values are told apart), and elsewhere give the same FP8 bytes in both flavours (NaN by position).
//
//     mkdir -p build && gcc -O2 -mfma -ffp-contract=off -o build/quotient_check tools/quotient_check.c -lm && build/quotient_check
//
// -ffp-contract=off keeps the compiler from fusing the plain products; fmaf needs no -ffast-math. About a
// minute on one core; exit status 0 when every check holds.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// ScaleDivisor's reciprocal, from a hardware reciprocal r0.
static float refined_reciprocal(float s, float r0) {
  const float r1 = fmaf(fmaf(-s, r0, 1.f), r0, r0);
  const float up = from_bits(to_bits(r1) + 1u);
  return fabsf(fmaf(-s, up, 1.f)) < fabsf(fmaf(-s, r1, 1.f)) ? up : r1;
}

typedef struct {
  float divisor, recip, pre;
  int prescale;
} Divisor;

// ScaleDivisor's constructor; `hw_error` picks the hardware reciprocal: -1, 0 or +1 ulp from RN(1 / divisor).
static Divisor make_divisor(float scale, int hw_error) {
  Divisor d;
  const float a = fabsf(scale);
  d.prescale = !(a >= 0x1p-64f && a < 0x1p64f);
  d.pre = 1.f;
  d.divisor = scale;
  if (d.prescale) {
    const int special = !(a > 0.f && a <= 0x1.fffffep127f);
    d.pre = special ? 1.f / scale : (a < 0x1p-64f ? 0x1p96f : 0x1p-64f);  // rcp of 0 / inf / NaN is exact
    d.divisor = special ? 1.f : scale * d.pre;
  }
  const float rn = 1.f / d.divisor;
  d.recip = refined_reciprocal(d.divisor, from_bits(to_bits(rn) + (uint32_t)hw_error));
  return d;
}

// ScaleDivisor::divide for one value.
static float quotient(const Divisor* d, float x) {
  if (d->prescale) x *= d->pre;
  const float q0 = x * d->recip;
  const float q1 = fmaf(fmaf(-q0, d->divisor, x), d->recip, q0);
  const float a = fabsf(q0);
  return a >= 0x1p-20f && a <= 0x1p20f ? q1 : q0;
}

// FP8 encoding of the reference: saturate, then the nearest value of the flavour, ties to the even code.
// Independent of the kernels' conversion code: a search over the flavour's finite values.
static float fp8_values[2][128];
static int fp8_count[2];

static void init_fp8(void) {
  for (int fnuz = 0; fnuz < 2; ++fnuz) {
    const int bias = fnuz ? 8 : 7;
    fp8_count[fnuz] = 0;
    for (int code = 0; code < 128; ++code) {
      if (!fnuz && code == 0x7f) continue;  // e4m3fn's NaN
      const int e = code >> 3, m = code & 7;
      fp8_values[fnuz][fp8_count[fnuz]++] = e == 0 ? ldexpf((float)m, 1 - bias - 3) : ldexpf(1.f + m / 8.f, e - bias);
    }
  }
}

static int fp8_encode(float q, int fnuz) {
  if (q != q) return fnuz ? 0x80 : 0x7f;
  const float* v = fp8_values[fnuz];
  const int n = fp8_count[fnuz];
  float a = fabsf(q);
  if (a > v[n - 1]) a = v[n - 1];
  int lo = 0, hi = n - 1;  // largest code whose value is <= a
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (v[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  int code = lo;
  if (lo + 1 < n) {
    const float below = a - v[lo], above = v[lo + 1] - a;
    if (above < below || (above == below && (lo & 1))) code = lo + 1;
  }
  if (fnuz && code == 0) return 0;  // no negative zero
  return (signbit(q) ? 0x80 : 0) | code;
}

static int check_reciprocal(void) {
  long bad = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float s = from_bits(0x3f800000u | m);
    const float rn = 1.f / s;
    for (int err = -2; err <= 2; ++err) {
      if (refined_reciprocal(s, from_bits(to_bits(rn) + (uint32_t)err)) != rn) ++bad;
    }
  }
  printf("1. reciprocal: %ld of %ld cases differ from RN(1/s)\n", bad, 5L << 23);
  return bad == 0;
}

static int check_quotient(void) {
  const uint32_t n = 1u << 23;
  float* s = malloc(sizeof(float) * n);
  float* r = malloc(sizeof(float) * n);
  for (uint32_t m = 0; m < n; ++m) {
    s[m] = from_bits(0x3f800000u | m);
    r[m] = 1.f / s[m];  // what check 1 shows the refined reciprocal to be
  }
  long bad = 0;
  for (uint32_t xm = 0; xm < 1024; ++xm) {
    const float x = from_bits(0x3f800000u | (xm << 13));
    for (uint32_t m = 0; m < n; ++m) {
      const float q0 = x * r[m];
      const float q1 = fmaf(fmaf(-q0, s[m], x), r[m], q0);
      bad += q1 != x / s[m];
    }
  }
  free(s);
  free(r);
  printf("2. quotient: %ld of %ld significand pairs differ from RN(x/s)\n", bad, 1024L * n);
  return bad == 0;
}

static float scale_case(int i) {
  static const uint32_t special[] = {0x00000000u, 0x7f800000u, 0x7fc00000u, 0x00000001u, 0x007fffffu,
                                     0x00800000u, 0x7f7fffffu, 0x1f800000u, 0x1f7fffffu, 0x5f800000u};
  const int n_special = sizeof(special) / sizeof(special[0]);
  const float sign = (i & 1) ? -1.f : 1.f;
  i /= 2;
  if (i < n_special) return sign * from_bits(special[i]);
  i -= n_special;
  if (i < 277) return sign * ldexpf(1.f, i - 149);  // every power of two
  i -= 277;
  if (i < 277) return sign * ldexpf(from_bits(0x3fffffffu), i - 149);  // all-ones significands
  const uint32_t e = (uint32_t)(rand() % 255), m = (uint32_t)rand() & 0x7fffffu;  // any exponent, subnormal too
  return sign * from_bits((e << 23) | m);
}

static int check_pipeline(int n_scales) {
  float* xs = malloc(sizeof(float) * 2 * 65536);
  int nx = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    const uint16_t hb = (uint16_t)b;
    memcpy(&h, &hb, 2);
    xs[nx++] = (float)h;
  }
  for (uint32_t b = 0; b < 65536; ++b) xs[nx++] = from_bits(b << 16);
  srand(1);
  long checked = 0, bad = 0;
  for (int i = 0; i < n_scales; ++i) {
    const float s = scale_case(i);
    for (int hw_error = -1; hw_error <= 1; ++hw_error) {
      const Divisor d = make_divisor(s, hw_error);
      for (int k = 0; k < nx; ++k) {
        const float q = quotient(&d, xs[k]), exact = xs[k] / s;
        ++checked;
        if (to_bits(q) == to_bits(exact)) continue;
        // Where FP8 can tell values apart, the quotient itself must be the reference's: a stronger check than
        // the bytes, which random scales rarely put on a rounding tie.
        if (fabsf(exact) >= 0x1p-12f && fabsf(exact) <= 0x1p10f) {
          if (bad < 10) printf("   x=%08x scale=%08x: quotient %08x, reference %08x\n", to_bits(xs[k]), to_bits(s),
                               to_bits(q), to_bits(exact));
          ++bad;
          continue;
        }
        for (int fnuz = 0; fnuz < 2; ++fnuz) {
          const int got = fp8_encode(q, fnuz), want = fp8_encode(exact, fnuz);
          const int both_nan = (q != q) && (exact != exact);
          if (got != want && !both_nan) {
            if (bad < 10) {
              printf("   x=%08x scale=%08x: quotient %08x, reference %08x, %s %02x vs %02x\n", to_bits(xs[k]),
                     to_bits(s), to_bits(q), to_bits(exact), fnuz ? "e4m3fnuz" : "e4m3fn", got, want);
            }
            ++bad;
          }
        }
      }
    }
  }
  free(xs);
  printf("3. pipeline: %ld mismatches in %ld (x, scale, hardware reciprocal) cases\n", bad, checked);
  return bad == 0;
}

int main(int argc, char** argv) {
  init_fp8();
  const int n_scales = argc > 1 ? atoi(argv[1]) : 2000;
  int ok = check_reciprocal();
  ok &= check_quotient();
  ok &= check_pipeline(n_scales);
  puts(ok ? "all checks hold" : "FAILED");
  return ok ? 0 : 1;
}
