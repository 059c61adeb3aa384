#pragma once
// Launch shape of the flat elementwise kernels that give each thread one chunk of a row (swiglu_fp8, quant_fp8):
// block (chunks of a row) x (rows), grid x over a row's chunks, y over the row groups, z over further runs of
// max_grid_y row groups. Host code only, torch- and vendor-free (the plan headers of both ops include it).
#include <algorithm>
#include <cstdint>

#include "common/int_math.h"
#include "common/plan.h"

namespace fp8dk {

struct RowChunkGrid {
  Dims grid, block;
};

// Threads over a row's chunks (block.x): the widest power of two that leaves at most 1/16 of the lanes past
// the row's end (6656 columns in 8-column chunks = 832 chunks takes 64, not 256 with 192 idle lanes). Rows
// fill the rest of the block. Small problems get smaller blocks, down to 64 threads, so that they still
// spread over the multiprocessors instead of queueing on a few (one row of 8192 columns: 16 blocks, not 4;
// the attention output of a decode step: a few rows of a few thousand columns). One chunk per thread (an exact
// grid): the block scheduler balances the tail, nothing loop-invariant can be hoisted ahead of the data
// loads, and 8 resident 256-thread blocks per multiprocessor keep 64 KB of loads in flight, about twice what
// H200's bandwidth-latency product needs per SM.
inline RowChunkGrid row_chunk_grid(int64_t chunks, int64_t rows, int max_threads, int max_grid_y, int sm_count) {
  constexpr int kMinThreads = 64;
  RowChunkGrid s;
  for (int threads = max_threads;; threads /= 2) {
    int bx = int(std::min<int64_t>(threads, pow2_ceil(chunks)));
    while (bx > 1 && (ceil_div<int64_t>(chunks, bx) * bx - chunks) * 16 > chunks) bx /= 2;
    const int by = int(std::min<int64_t>(threads / bx, pow2_ceil(rows)));
    const int64_t row_blocks = ceil_div<int64_t>(rows, by);
    s.grid = Dims{unsigned(ceil_div<int64_t>(chunks, bx)), unsigned(std::min<int64_t>(row_blocks, max_grid_y)),
                  unsigned(ceil_div<int64_t>(row_blocks, max_grid_y))};
    s.block = Dims{unsigned(bx), unsigned(by), 1};
    if (threads <= kMinThreads || int64_t(s.grid.x) * row_blocks >= sm_count) return s;
  }
}

}  // namespace fp8dk
