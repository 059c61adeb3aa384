#pragma once
// silu_and_mul's launch, decided once per call from the shape, the actual alignment and the device: the vector
// width of silu_and_mul_kernel (swiglu_kernels.cuh) and its grid. Host code, torch- and vendor-free: the
// launcher (swiglu.cu), the host plan tests (tests/plans/) and the AMD emulator all call plan_silu_and_mul.
#include <cstdint>

#include "common/int_math.h"
#include "common/plan.h"
#include "common/row_chunk_grid.h"

namespace fp8dk {

namespace swiglu {
constexpr int kChunk = 8;          // columns per thread
constexpr int kMaxThreads = 256;   // threads per block, upper bound (the plan may use fewer)
constexpr int kMaxGridY = 65535;   // the grid's y limit; row groups past it continue in z
}  // namespace swiglu

struct SiluAndMulPlan {
  int width;  // columns per access: 8, 4, 2 or 1 (the kernel's W)
  RowChunkGrid shape;
};

// out[r, :d] = silu(in[r, :d]) * in[r, d:2d] for `rows` rows `in_stride` / `out_stride` elements apart;
// `out_bytes`: bytes per output element (2: the input's 16-bit format, 1: FP8).
inline SiluAndMulPlan plan_silu_and_mul(const void* in, const void* out, int out_bytes, int64_t d, int64_t rows,
                                        int64_t in_stride, int64_t out_stride, const DeviceProps& dev) {
  SiluAndMulPlan p;
  // The widest access aligned for every row of gate, up (d columns further) and out.
  p.width = widest_access(swiglu::kChunk, [&](int w) {
    return d % w == 0 && rows_aligned(in, in_stride * 2, rows, 2 * w) &&
           rows_aligned(out, out_stride * out_bytes, rows, out_bytes * w);
  });
  p.shape = row_chunk_grid(ceil_div<int64_t>(d, swiglu::kChunk), rows, swiglu::kMaxThreads, swiglu::kMaxGridY,
                           dev.sms);
  return p;
}

}  // namespace fp8dk
