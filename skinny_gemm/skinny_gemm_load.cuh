#pragma once
// Skinny GEMM, part 3: operand formats and 16-byte chunk loads from global memory.
//
// Every lane reads its operands in chunks of 16 bytes (16 FP8 or 8 fp16/bf16 elements of one row). A chunk
// is loaded with the widest access the row alignment allows (LB = 16 or 8 bytes, or element by element when
// rows are not 8-byte aligned, e.g. K = 1003 FP8), or element by element with a bound at the end of K, so
// nothing past a row's K elements is ever read (padding inside the row stride may belong to someone else).
#include "common/numerics.cuh"
#include "common/vec.cuh"

namespace fp8dk {
namespace skinny {

using Chunk = Pack<16>;

// Elements of one 16-byte chunk.
template <class Ab>
constexpr int kChunkElems = 16 / Ab::kBytes;

// A full chunk at `p` with LB-byte accesses (LB = 16 or 8, or the element size), streamed past L1: weights
// are read exactly once.
template <class Ab, int LB>
FP8DK_DEVICE Chunk load_chunk_stream(const unsigned char* p) {
  Chunk c;
  if constexpr (LB == 16) {
    c = load_nt<16>(p);
  } else if constexpr (LB == 8) {
    const Pack<8> lo = load_nt<8>(p), hi = load_nt<8>(p + 8);
    c.w[0] = lo.w[0], c.w[1] = lo.w[1], c.w[2] = hi.w[0], c.w[3] = hi.w[1];
  } else {
    static_assert(LB == Ab::kBytes, "LB is 16, 8 or the element size");
#pragma unroll
    for (int i = 0; i < 4; ++i) c.w[i] = 0;
#pragma unroll
    for (int e = 0; e < kChunkElems<Ab>; ++e) {
      const uint32_t v = LB == 1 ? uint32_t(p[e]) : uint32_t(reinterpret_cast<const uint16_t*>(p)[e]);
      c.w[e * LB / 4] |= v << (8 * ((e * LB) % 4));
    }
  }
  return c;
}

// The first `valid` elements of a chunk (0 <= valid <= chunk elements), zeros after them: the chunk that
// crosses the end of K, or a row of `a` that is not 16-byte aligned.
template <class Ab>
FP8DK_DEVICE Chunk load_chunk_masked(const unsigned char* p, int valid) {
  constexpr int eb = Ab::kBytes;
  Chunk c;
#pragma unroll
  for (int i = 0; i < 4; ++i) c.w[i] = 0;
#pragma unroll
  for (int e = 0; e < kChunkElems<Ab>; ++e) {
    if (e < valid) {
      const uint32_t v = eb == 1 ? uint32_t(p[e]) : uint32_t(reinterpret_cast<const uint16_t*>(p)[e]);
      c.w[e * eb / 4] |= v << (8 * ((e * eb) % 4));
    }
  }
  return c;
}

}  // namespace skinny
}  // namespace fp8dk
