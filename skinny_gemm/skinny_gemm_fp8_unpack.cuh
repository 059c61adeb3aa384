#pragma once
// Skinny GEMM, part 2: FP8 -> f16 for the matrix units that take 16-bit operands (every NVIDIA path, and
// the AMD path for the FP8 flavour the chip does not multiply natively).
//
// Two ways, both exact (every e4m3 value is an f16 value up to a power-of-two factor):
//   * hardware: cvt.rn.f16x2.e4m3x2 (sm_89+, e4m3fn only), product scale 1;
//   * bit trick (sm_80, e4m3fnuz on NVIDIA, non-native flavours on AMD): the f16 with the byte's sign in bit
//     15 and its 7 exponent+mantissa bits in bits 7..13 has the FP8 value times 2^-(15 - bias), for normals
//     and subnormals alike (f16 subnormals line up with e4m3 subnormals). Both operands carry the factor, so
//     the accumulated dot product is scaled by kProductScale = 2^(2 * (15 - bias)), exactly (power of two,
//     far from fp32's under/overflow); the epilogue multiplies it back into the scale. NaN bytes are
//     rewritten to an f16 NaN (the trick alone would make them finite).
#include "common/numerics.cuh"

namespace fp8dk {
namespace skinny {

// The format an operand reaches a 16-bit matrix instruction in: FP8 unpacked to f16 (below), the 16-bit
// formats as they are.
template <class Ab, bool kFp8 = Ab::kFp8>
struct Mma16Input {
  using type = Ab;
};
template <class Ab>
struct Mma16Input<Ab, true> {
  using type = Fp16;
};

template <class F>
constexpr bool kNvHardwareUnpack =
#if defined(FP8DK_NV_FP8_CVT)
    !kIsFnuz<F>;
#else
    false;
#endif

// Factor by which the accumulated dot product exceeds the true one when both operands of format T went
// through unpack_fp8x4 (kUnpacked), else 1.
template <class T, bool kUnpacked>
FP8DK_HOST_DEVICE constexpr float product_scale() {
  if constexpr (!kUnpacked) {
    return 1.f;
  } else if constexpr (kNvHardwareUnpack<T>) {
    return 1.f;
  } else {
    return static_cast<float>(1u << (2 * (15 - T::kBias)));
  }
}

// Bit 7 of each byte set where that byte is a NaN of flavour F (e4m3fn: 0x7f/0xff; e4m3fnuz: 0x80).
template <class F>
FP8DK_DEVICE uint32_t fp8x4_nan_bits(uint32_t w) {
  if constexpr (kIsFnuz<F>) {
    const uint32_t v = w ^ 0x80808080u;                                 // NaN bytes become 0
    const uint32_t nonzero = ((v & 0x7f7f7f7fu) + 0x7f7f7f7fu) | v;  // bit 7: byte != 0 (no carries)
    return ~nonzero & 0x80808080u;
  } else {
    return ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;  // bit 7: low 7 bits all ones
  }
}

// The bit trick on two bytes already placed in the high byte of each 16-bit half.
FP8DK_DEVICE uint32_t fp8x2_hi_bytes_to_f16x2(uint32_t x) {
  return (x & 0x80008000u) | ((x >> 1) & 0x3f803f80u);
}

// Four FP8 bytes (first in the low byte) to two f16x2 words, lo = bytes 0,1 and hi = bytes 2,3 (low half
// first), scaled as described above; NaN stays NaN.
template <class F>
FP8DK_DEVICE void unpack_fp8x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
#if defined(FP8DK_NVIDIA)
  if constexpr (kNvHardwareUnpack<F>) {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    return;
  }
#endif
  lo = fp8x2_hi_bytes_to_f16x2(((w & 0xffu) << 8) | ((w & 0xff00u) << 16));
  hi = fp8x2_hi_bytes_to_f16x2(((w & 0xff0000u) >> 8) | (w & 0xff000000u));
  // The trick maps NaN encodings to finite values: overwrite those halves with an f16 NaN (branch-free).
  const uint32_t nan = fp8x4_nan_bits<F>(w);
  const uint32_t m_lo = ((nan >> 7) & 1u) * 0xffffu | ((nan >> 15) & 1u) * 0xffff0000u;
  const uint32_t m_hi = ((nan >> 23) & 1u) * 0xffffu | ((nan >> 31) & 1u) * 0xffff0000u;
  lo = (lo & ~m_lo) | (0x7e007e00u & m_lo);
  hi = (hi & ~m_hi) | (0x7e007e00u & m_hi);
}

}  // namespace skinny
}  // namespace fp8dk
