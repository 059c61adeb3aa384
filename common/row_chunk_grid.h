#pragma once
// Launch shape of the flat elementwise kernels that give each thread one chunk of a row (swiglu_fp8, quant_fp8):
// block (chunks of a row) x (rows), grid x over a row's chunks, y over the row groups, z over further runs of
// max_grid_y row groups. Host code only, written for both vendors by hand (common/ headers reach hipcc as
// written: see device_info.h).
#include <algorithm>
#include <cstdint>

#include "common/launch.h"

namespace fp8dk {

namespace row_chunk_grid_detail {
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace row_chunk_grid_detail

// Threads over a row's chunks (block.x): the widest power of two that leaves at most 1/16 of the lanes past
// the row's end (6656 columns in 8-column chunks = 832 chunks takes 64, not 256 with 192 idle lanes). Rows
// fill the rest of the block. Small problems get smaller blocks, down to 64 threads, so that they still
// spread over the multiprocessors instead of queueing on a few (one row of 8192 columns: 16 blocks, not 4;
// the attention output of a decode step: a few rows of a few thousand columns). One chunk per thread (an exact
// grid): the block scheduler balances the tail, nothing loop-invariant can be hoisted ahead of the data
// loads, and 8 resident 256-thread blocks per multiprocessor keep 64 KB of loads in flight, about twice what
// H200's bandwidth-latency product needs per SM.
inline LaunchShape row_chunk_grid(int64_t chunks, int64_t rows, int max_threads, int max_grid_y, int sm_count) {
  using row_chunk_grid_detail::ceil_div;
  using row_chunk_grid_detail::pow2_ceil;
  constexpr int kMinThreads = 64;
  LaunchShape s;
  for (int threads = max_threads;; threads /= 2) {
    int bx = int(std::min<int64_t>(threads, pow2_ceil(chunks)));
    while (bx > 1 && (ceil_div(chunks, bx) * bx - chunks) * 16 > chunks) bx /= 2;
    const int by = int(std::min<int64_t>(threads / bx, pow2_ceil(rows)));
    const int64_t row_blocks = ceil_div(rows, by);
    s.grid = dim3(unsigned(ceil_div(chunks, bx)), unsigned(std::min<int64_t>(row_blocks, max_grid_y)),
                  unsigned(ceil_div(row_blocks, max_grid_y)));
    s.block = dim3(unsigned(bx), unsigned(by));
    if (threads <= kMinThreads || int64_t(s.grid.x) * row_blocks >= sm_count) return s;
  }
}

}  // namespace fp8dk
