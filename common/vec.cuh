#pragma once
// Vendor portability layer, part 3: wide global memory access. A `Pack<BYTES>` is BYTES of raw data held
// as 32-bit words (or one 16-bit word for BYTES == 2); kernels reinterpret the words as 16-bit pairs or
// FP8 quads. Loads/stores of 16 bytes are single 128-bit instructions (LDG.E.128 / global_load_dwordx4).
//
// Three load flavours, because the hint that is right depends on the data:
//   load      plain (data the kernel also writes, e.g. the residual);
//   load_ro   read-only for the whole kernel (non-coherent path on NVIDIA);
//   load_nt   streamed once and never reused (weights of a GEMM): do not allocate it in L1.
#include "common/int_math.h"
#include "common/platform.cuh"

namespace fp8dk {

template <int BYTES>
struct alignas(BYTES < 4 ? BYTES : (BYTES > 16 ? 16 : BYTES)) Pack {
  static_assert(BYTES == 2 || BYTES == 4 || BYTES == 8 || BYTES == 16, "Pack is 2, 4, 8 or 16 bytes");
  static constexpr int kWords = BYTES / 4 > 0 ? BYTES / 4 : 1;
  uint32_t w[kWords];
};

template <>
struct alignas(2) Pack<2> {
  static constexpr int kWords = 1;
  uint16_t w[1];
};

#if defined(FP8DK_AMD)
typedef uint32_t u32x2_t __attribute__((ext_vector_type(2)));
typedef uint32_t u32x4_t __attribute__((ext_vector_type(4)));
#endif

namespace detail {

enum class Hint { kPlain, kReadOnly, kStream };

template <int BYTES, Hint H>
FP8DK_DEVICE Pack<BYTES> load(const void* p) {
  Pack<BYTES> r;
#if defined(FP8DK_NVIDIA)
  if constexpr (BYTES == 16) {
    if constexpr (H == Hint::kStream)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
                   : "l"(p));
    else if constexpr (H == Hint::kReadOnly)
      asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
                   : "l"(p));
    else
      asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
                   : "l"(p)
                   : "memory");
  } else if constexpr (BYTES == 8) {
    if constexpr (H == Hint::kPlain)
      asm volatile("ld.global.v2.u32 {%0,%1}, [%2];" : "=r"(r.w[0]), "=r"(r.w[1]) : "l"(p) : "memory");
    else
      asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(r.w[0]), "=r"(r.w[1]) : "l"(p));
  } else if constexpr (BYTES == 4) {
    r.w[0] = *static_cast<const uint32_t*>(p);
  } else {
    r.w[0] = *static_cast<const uint16_t*>(p);
  }
#else
  if constexpr (BYTES == 16) {
    const u32x4_t v = H == Hint::kStream ? __builtin_nontemporal_load(static_cast<const u32x4_t*>(p))
                                          : *static_cast<const u32x4_t*>(p);
    r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
  } else if constexpr (BYTES == 8) {
    const u32x2_t v = H == Hint::kStream ? __builtin_nontemporal_load(static_cast<const u32x2_t*>(p))
                                          : *static_cast<const u32x2_t*>(p);
    r.w[0] = v.x, r.w[1] = v.y;
  } else if constexpr (BYTES == 4) {
    r.w[0] = *static_cast<const uint32_t*>(p);
  } else {
    r.w[0] = *static_cast<const uint16_t*>(p);
  }
#endif
  return r;
}

}  // namespace detail

template <int BYTES>
FP8DK_DEVICE Pack<BYTES> load(const void* p) {
  return detail::load<BYTES, detail::Hint::kPlain>(p);
}
template <int BYTES>
FP8DK_DEVICE Pack<BYTES> load_ro(const void* p) {
  return detail::load<BYTES, detail::Hint::kReadOnly>(p);
}
template <int BYTES>
FP8DK_DEVICE Pack<BYTES> load_nt(const void* p) {
  return detail::load<BYTES, detail::Hint::kStream>(p);
}

template <int BYTES>
FP8DK_DEVICE void store(void* p, const Pack<BYTES>& v) {
#if defined(FP8DK_NVIDIA)
  if constexpr (BYTES == 16) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]),
                 "r"(v.w[3])
                 : "memory");
  } else if constexpr (BYTES == 8) {
    asm volatile("st.global.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]) : "memory");
  } else if constexpr (BYTES == 4) {
    *static_cast<uint32_t*>(p) = v.w[0];
  } else {
    *static_cast<uint16_t*>(p) = v.w[0];
  }
#else
  if constexpr (BYTES == 16) {
    u32x4_t x;
    x.x = v.w[0], x.y = v.w[1], x.z = v.w[2], x.w = v.w[3];
    *static_cast<u32x4_t*>(p) = x;
  } else if constexpr (BYTES == 8) {
    u32x2_t x;
    x.x = v.w[0], x.y = v.w[1];
    *static_cast<u32x2_t*>(p) = x;
  } else if constexpr (BYTES == 4) {
    *static_cast<uint32_t*>(p) = v.w[0];
  } else {
    *static_cast<uint16_t*>(p) = v.w[0];
  }
#endif
}

}  // namespace fp8dk
