// CUDA/ROCm skinny_gemm (torch-ext/torch_binding.h): validates, picks the kernel and its tiling, and launches.
// Two kernels:
//   * Hopper (compute capability 9.x, NVIDIA): the copy-engine kernel (skinny_gemm_tma.cuh, plan in
//     skinny_gemm_tma_plan.cuh) wherever the copy engine can read b: base address and row stride multiples
//     of 16 bytes. `a` is made so below.
//   * everywhere else (pre-Hopper, ROCm, rows of b not 16-byte aligned): the portable kernel
//     (skinny_gemm_kernels.cuh, plan in skinny_gemm_plan.cuh).
// Environment overrides, read on every call (tuning and tests):
//   FP8DK_SKINNY_TMA      0: never the copy-engine kernel (unset or 1: wherever it can run)
//   FP8DK_SKINNY_TMA_WK, _RB, _BOXES, _STAGES   its warp columns along K (1, 2, 4, 8), row blocks per warp
//                         (1, 2), K-boxes of 128 bytes per stage (a multiple of WK) and ring depth (>= 2;
//                         capped by shared memory)
//   FP8DK_SKINNY_TMA_WHOLE_TILES  1: one CTA per tile whenever the tiles fit in one wave, 0: stream-K always
//                         (unset: one CTA per tile only where that leaves at most 10% of the SMs idle)
//   FP8DK_SKINNY_TMA_QGMMA 1: multiply with wgmma where the operands are OCP e4m3 (skinny_gemm_qgmma.cuh),
//                         0: with mma.sync (unset: the plan's choice)
// and for the portable kernel (any of them set selects it):
//   FP8DK_SKINNY_BLOCK_N  weight rows per CTA: 16 * RB * WN with WN a power of two <= warps per CTA
//                         (RB = 1 for M <= 16, 2 above), i.e. 16..128 (M <= 16) or 32..256 (M > 16) on NVIDIA
//   FP8DK_SKINNY_SPLIT_K  CTAs per tile along K (>= 1; capped at one K-block per CTA): a split grid
//   FP8DK_SKINNY_STREAM_K 1: stream-K grid, 0: split grid (unset: the heuristic's choice)
// Split-K CTAs of a tile meet through a thread-block cluster on sm_90+ when split_k <= 8 (no workspace),
// otherwise, and in the stream-K grid, through a workspace and arrival counters that the kernel leaves zero
// (skinny_gemm_launch.cuh).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>

#include "common/checks.h"
#include "common/device_info.h"
#include "skinny_gemm_launch.cuh"  // beside the .cu, so that hipify converts it too
#include "torch-ext/torch_binding.h"

namespace {

using namespace fp8dk::skinny;

// A positive integer from the environment, or 0 when the variable is unset or empty.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TORCH_CHECK(*end == '\0' && x > 0 && x <= (1 << 20), "skinny_gemm: ", name, " must be a positive integer, got '",
              v, "'");
  return static_cast<int>(x);
}

// 0 or 1 from the environment; `unset` when the variable is unset or empty.
bool env_flag(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  TORCH_CHECK((v[0] == '0' || v[0] == '1') && v[1] == '\0', "skinny_gemm: ", name, " must be 0 or 1, got '", v, "'");
  return v[0] == '1';
}

int largest_access(const void* p, long long row_stride_bytes, int elem_bytes) {
  for (int w : {16, 8})
    if (fp8dk::is_aligned(p, w) && row_stride_bytes % w == 0) return w;
  return elem_bytes;
}
Launch plan_launch(const fp8dk::SkinnyGemmShape& s, const at::Tensor& b) {
  const int eb = s.fp8 ? 1 : 2;
  const Shape shape{static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), eb};
  const int sms = fp8dk::multiprocessor_count();
  const int mp = padded_m(shape.m), rb = row_blocks(mp), rows_per_warp = kRowBlock * rb;
  const int lb = largest_access(b.data_ptr(), s.b_row_stride * eb, eb);

  const int split_wn = default_wn(shape, sms);
  const int forced = env_int("FP8DK_SKINNY_SPLIT_K");
  const bool stream_k =
      shape.k > 0 && !forced &&
      env_flag("FP8DK_SKINNY_STREAM_K",
               prefer_stream_k(shape, split_wn, default_split_k(shape, split_wn, lb, sms), lb, sms));
  int wn = stream_k ? min_wn(shape) : split_wn;
  if (const int block_n = env_int("FP8DK_SKINNY_BLOCK_N")) {
    wn = block_n / rows_per_warp;
    TORCH_CHECK(block_n % rows_per_warp == 0 && wn >= 1 && wn <= kWarps && (wn & (wn - 1)) == 0, "skinny_gemm: ",
                "FP8DK_SKINNY_BLOCK_N must be ", rows_per_warp, " times a power of two <= ", kWarps, " for M = ",
                s.m, ", got ", block_n);
  }
  int split_k = stream_k ? 1 : default_split_k(shape, wn, lb, sms);
  if (forced) {
    const int most = max_split_k(shape, wn, lb);
    split_k = forced < most ? forced : most;
  }
  if (shape.k == 0) split_k = 1;

  Launch l;
  Plan& p = l.plan;
  p.m = shape.m, p.n = shape.n, p.k = shape.k;
  p.a_stride = s.a_row_stride, p.b_stride = s.b_row_stride, p.out_stride = s.out_row_stride;
  p.wn = wn, p.wk = kWarps / wn;
  p.block_n = rows_per_warp * wn;
  p.tiles = ceil_div(shape.n, p.block_n);
  p.stream_k = stream_k;
  p.split_k = split_k;
  p.sub_iters = ceil_div(shape.k, sub_iter_elems(eb));
  p.block_elems = p.wk * iters_per_block(rb, lb) * sub_iter_elems(eb);
  p.chunk_shift = 0;
  while ((kChunkBytes / eb) << (p.chunk_shift + 1) <= p.block_elems) ++p.chunk_shift;
  p.act_buf_bytes = shape.m * act_pitch(p.block_elems, 2);  // staged as 16-bit at most

  const int stage_chunks = ceil_div(static_cast<long long>(shape.m) * p.block_elems * eb / kChunkBytes, kThreads);
  TORCH_CHECK(stage_chunks <= kMaxStageChunks, "skinny_gemm: FP8DK_SKINNY_BLOCK_N = ", p.block_n,
              " is too narrow for M = ", s.m, " (activation staging exceeds ", kMaxStageChunks,
              " chunks per thread); use a larger block");
  l.grid = dim3(p.tiles, p.split_k);
  l.smem = smem_bytes(p.act_buf_bytes, p.wk, mp, p.block_n);
  TORCH_CHECK(l.smem <= fp8dk::max_shared_memory_per_block(), "skinny_gemm: the tiling needs ", l.smem,
              " bytes of shared memory, more than the device offers");
  l.mp = mp;
  l.b_access = lb;
  l.sms = sms;
  return l;
}

#if defined(FP8DK_NVIDIA)
// The copy-engine launch for this call, or false where the portable kernel runs.
bool plan_tma_launch(const fp8dk::SkinnyGemmShape& s, const at::Tensor& a_rows, const at::Tensor& b, TmaLaunch& t) {
  if (!env_flag("FP8DK_SKINNY_TMA", true)) return false;
  if (env_int("FP8DK_SKINNY_BLOCK_N") || env_int("FP8DK_SKINNY_SPLIT_K") ||
      std::getenv("FP8DK_SKINNY_STREAM_K") != nullptr)
    return false;  // the portable kernel's knobs ask for the portable kernel
  const int eb = s.fp8 ? 1 : 2;
  if (s.k == 0 || !fp8dk::is_aligned(b.data_ptr(), 16) || (s.b_row_stride * eb) % 16 != 0) return false;
  if (fp8dk::device_attribute(cudaDevAttrComputeCapabilityMajor) != 9 || !tma_kernel_available()) return false;
  TmaOverrides o;
  o.wk = env_int("FP8DK_SKINNY_TMA_WK");
  o.rb = env_int("FP8DK_SKINNY_TMA_RB");
  o.boxes = env_int("FP8DK_SKINNY_TMA_BOXES");
  o.stages = env_int("FP8DK_SKINNY_TMA_STAGES");
  if (std::getenv("FP8DK_SKINNY_TMA_WHOLE_TILES") != nullptr)
    o.whole_tiles = env_flag("FP8DK_SKINNY_TMA_WHOLE_TILES", false) ? 1 : 0;
  if (std::getenv("FP8DK_SKINNY_TMA_QGMMA") != nullptr)
    o.qgmma = env_flag("FP8DK_SKINNY_TMA_QGMMA", false) ? 1 : 0;
  const int smem = fp8dk::max_shared_memory_per_block() - kTmaSmemReserve;
  const bool planned = plan_tma(static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), eb,
                                b.scalar_type() == at::kFloat8_e4m3fn, fp8dk::multiprocessor_count(), smem, o,
                                t.plan);
  TORCH_CHECK(planned || (o.wk == 0 && o.rb == 0 && o.boxes == 0 && o.stages == 0), "skinny_gemm: ",
              "FP8DK_SKINNY_TMA_WK must divide ", kTmaConsumerWarps, ", FP8DK_SKINNY_TMA_BOXES be a multiple of it, ",
              "FP8DK_SKINNY_TMA_RB be 1 or 2, and the ring hold 2 stages");
  if (!planned) return false;
  t.plan.out_stride = s.out_row_stride;
  const TmaPlan& p = t.plan;
  // One row's stride is never used: give the copy engine a legal one.
  const long long a_stride_bytes = s.m == 1 ? (s.k * eb + 15) / 16 * 16 : a_rows.stride(0) * eb;
  if (!fp8dk::is_aligned(a_rows.data_ptr(), 16) || a_stride_bytes % 16 != 0) return false;
  t.map_a = fp8dk::tensor_map_2d(a_rows.data_ptr(), s.m, s.k, a_stride_bytes, eb, p.nt * 8, p.box_elems, false);
  t.map_b = fp8dk::tensor_map_2d(b.data_ptr(), s.n, s.k, s.b_row_stride * eb, eb, p.block_n, p.box_elems, true);
  return true;
}
#endif

}  // namespace

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias) {
  constexpr const char* op = "skinny_gemm";
  const fp8dk::SkinnyGemmShape s = fp8dk::check_skinny_gemm_args(out, a, b, scale_a, scale_b, bias, op);
  TORCH_CHECK(a.is_cuda(), op, ": input must be a CUDA tensor");
  const c10::cuda::OptionalCUDAGuard guard(a.device());
  if (s.m == 0 || s.n == 0) return;
  TORCH_CHECK(s.n < (1LL << 31) && s.k < (1LL << 30), op, ": N must be < 2^31 and K < 2^30, got N = ", s.n,
              ", K = ", s.k);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  // The kernel reads rows of `a` as 16-byte chunks. `a` is at most 32 x K: a view whose rows are not 16-byte
  // aligned (rare: odd strides, offset views) is copied first into a row-padded buffer, on the stream.
  const int eb = s.fp8 ? 1 : 2;
  at::Tensor a_rows = a;
  if (!fp8dk::is_aligned(a.data_ptr(), 16) || (s.a_row_stride * eb) % 16 != 0) {
    const int64_t per_chunk = 16 / eb;
    a_rows = at::empty({s.m, (s.k + per_chunk - 1) / per_chunk * per_chunk}, a.options()).narrow(1, 0, s.k);
    a_rows.copy_(a);
  }
  fp8dk::SkinnyGemmShape shape = s;
  shape.a_row_stride = a_rows.stride(0);
  // One plan per call: the copy-engine kernel's where it runs, the portable kernel's otherwise.
  const TmaLaunch* tma = nullptr;
#if defined(FP8DK_NVIDIA)
  TmaLaunch tma_launch;
  if (plan_tma_launch(shape, a_rows, b, tma_launch)) tma = &tma_launch;
#endif
  const Launch l = tma != nullptr ? Launch{} : plan_launch(shape, b);

  Args x;
  x.a = static_cast<const unsigned char*>(a_rows.data_ptr());
  x.b = static_cast<const unsigned char*>(b.data_ptr());
  x.out = static_cast<uint16_t*>(out.data_ptr());
  x.bias = bias ? static_cast<const uint16_t*>(bias->data_ptr()) : nullptr;
  x.scale_a = s.fp8 ? scale_a->data_ptr<float>() : nullptr;
  x.scale_b = s.fp8 ? scale_b->data_ptr<float>() : nullptr;
  const Call c{l, x, a, env_int("FP8DK_SKINNY_SPLIT_K") > 0, stream, tma};

  switch (a.scalar_type()) {
    case at::kFloat8_e4m3fn:
      return launch_e4m3fn(out.scalar_type(), c);
    case at::kFloat8_e4m3fnuz:
      return launch_e4m3fnuz(out.scalar_type(), c);
    case at::kHalf:
      return launch_fp16(c);
    default:
      return launch_bf16(c);
  }
}
