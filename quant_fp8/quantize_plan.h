#pragma once
// quantize_fp8's launch, decided once per call from the actual alignment and the device: the store width of
// quantize_fp8_kernel (quantize_kernels.cuh) and its grid. Host code, torch- and vendor-free: the launcher
// (quantize.cu), the host plan tests (tests/plans/) and the AMD emulator all call plan_quantize_fp8.
#include <algorithm>
#include <cstdint>

#include "common/int_math.h"
#include "common/plan.h"
#include "common/row_chunk_grid.h"

namespace fp8dk {

namespace quant {
constexpr int kChunk = 16;          // columns per thread
constexpr int kMaxLoadElems = 8;    // 16-bit columns per load: 16 bytes, the widest access
constexpr int kMaxThreads = 256;    // threads per block, upper bound (the plan may use fewer)
constexpr int kMaxGridY = 65535;    // the grid's y limit; row groups past it continue in z
}  // namespace quant

struct QuantizeFp8Plan {
  int width;  // FP8 bytes (= columns) per store: 16, 8, 4, 2 or 1 (the kernel's W)
  RowChunkGrid shape;
};

// out[r, :d] = FP8(in[r, :d] / scale) for `rows` rows `in_stride` / `out_stride` elements apart.
inline QuantizeFp8Plan plan_quantize_fp8(const void* in, const void* out, int64_t d, int64_t rows, int64_t in_stride,
                                         int64_t out_stride, const DeviceProps& dev) {
  QuantizeFp8Plan p;
  // The widest store such that the stores and the loads that go with them (min(W, 8) 16-bit columns) are
  // aligned in every row. Chunks start at multiples of kChunk columns, so the base pointers and row strides
  // decide; the row length does not (a row's partial last chunk is accessed column by column).
  p.width = widest_access(quant::kChunk, [&](int w) {
    const int load_elems = std::min(w, quant::kMaxLoadElems);
    return rows_aligned(in, in_stride * 2, rows, 2 * load_elems) && rows_aligned(out, out_stride, rows, w);
  });
  p.shape = row_chunk_grid(ceil_div<int64_t>(d, quant::kChunk), rows, quant::kMaxThreads, quant::kMaxGridY,
                           dev.sms);
  return p;
}

}  // namespace fp8dk
