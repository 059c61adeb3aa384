// CUDA / ROCm rms_norm and fused_add_rms_norm (torch-ext/torch_binding.h): validates, picks the
// configuration from the shape, the actual alignment and the device, and launches the kernels of
// rmsnorm_kernels.cuh on the current stream. No host sync and no allocation: CUDA-graph safe.
//
// On NVIDIA sm_90+, few long rows take the cluster kernel: each row split over a thread-block cluster of 2, 4
// or 8 CTAs (ctas_per_row below), with the same split of the row and the same sum order as the
// one-CTA-per-row kernel, so the bytes out are the same either way. Environment override, read on every
// call (tests and tuning):
//   FP8DK_RMSNORM_CLUSTER  2, 4 or 8: that many CTAs per row wherever the row has a cluster split (rows to
//                          which the one-CTA-per-row kernels give more than one warp, up to the long-row
//                          kernel's 2 chunks, i.e. 4096 slots; CTAs past the row's warps idle) and the device
//                          runs such clusters; 0 or 1: never (the one-CTA-per-row kernels); unset or empty:
//                          the heuristic. Ignored on ROCm.
//
// Also on NVIDIA, many aligned rows of up to kMaxPersistentThreads threads (hidden <= 16384) take the persistent
// kernel: a grid of the CTAs the device holds at once, each walking rows and loading the next while it
// finishes the current one, with the same split and sum order (same bytes out). Override, read on every call:
//   FP8DK_RMSNORM_PERSISTENT  0: never; 1: wherever the rows have that split, whatever their count; unset or
//                             empty: the heuristic (launch_persistent). Ignored on ROCm.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "common/checks.h"
#include "common/device_info.h"
#include "common/launch.h"
#include "rmsnorm_fp8/rmsnorm_kernels.cuh"
#include "torch-ext/torch_binding.h"

namespace {

using fp8dk::RmsNormParams;
namespace rn = fp8dk::rmsnorm;

// Threads of a block that holds several short rows: 8 warps (4 wavefronts on AMD).
constexpr int kRowsBlockThreads = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Launch {
  enum class Kernel { kAligned, kGeneral, kLongRow } kernel;
  int blocks;
  int threads;
  int smem_bytes;
  // The cluster kernel, tried first when `cluster` > 1 (NVIDIA): a row over `cluster` CTAs of
  // `cluster_threads` threads, split over `row_threads` threads like the kernel above would split it, in
  // `chunks` chunks (1: the register kernel's split, on the aligned path or not; 2: the long-row kernel's).
  int cluster = 1;
  int cluster_threads = 0;
  int row_threads = 0;
  int chunks = 0;
  bool cluster_aligned = false;
  // The persistent kernel may take the rows (NVIDIA; launch_persistent decides from the device's occupancy).
  bool persistent = false;
};

// Whether rows `stride` elements apart, the first at `p`, all start on a `bytes` boundary.
bool rows_aligned(const void* p, int64_t stride, int64_t rows, int bytes, int elem_bytes) {
  return fp8dk::is_aligned(p, bytes) && (rows == 1 || (stride * elem_bytes) % bytes == 0);
}

// Every slot of every row whole and vector-aligned in every stream: the aligned kernel, no element code.
bool all_aligned(const RmsNormParams& p, int out_elem_bytes) {
  constexpr int kVec = rn::kSlotElems;
  return p.hidden % kVec == 0 && rows_aligned(p.input, p.input_stride, p.rows, 2 * kVec, 2) &&
         rows_aligned(p.out, p.out_stride, p.rows, out_elem_bytes * kVec, out_elem_bytes) &&
         fp8dk::is_aligned(p.weight, 2 * kVec) && (p.residual == nullptr || fp8dk::is_aligned(p.residual, 2 * kVec));
}

#if defined(FP8DK_NVIDIA)
// Rows shorter than this many slots (8192 16-bit values: 56 KB of traffic per row of the fused op) stay on one
// SM: splitting them saves less of one SM's streaming time than the cluster kernel's barrier phase costs (its
// release arrive waits for the DSMEM stores, a round trip between SMs). A first guess, to be measured.
constexpr int64_t kClusterMinRowSlots = 1024;
// Each CTA of a cluster keeps at least this many warps of the row.
constexpr int kClusterMinCtaWarps = 2;

// FP8DK_RMSNORM_CLUSTER (top of the file): the CTAs per row it asks for, or -1 when unset or empty.
int cluster_override() {
  const char* v = std::getenv("FP8DK_RMSNORM_CLUSTER");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TORCH_CHECK(*end == '\0' && (x == 0 || x == 1 || x == 2 || x == 4 || x == 8),
              "rms_norm: FP8DK_RMSNORM_CLUSTER must be 0, 1, 2, 4 or 8 (CTAs per row), got '", v, "'");
  return static_cast<int>(x);
}

// CTAs per row on the cluster kernel (1: none) for `rows` rows of `slots` slots split over `row_threads`
// threads. A row on one CTA streams all its bytes through one SM, so few rows leave most SMs idle and wait
// on one SM's bandwidth and latency; a cluster of C CTAs cuts each SM's share of a row by C. The largest C
// (a power of two, at most the portable 8) that still gives every CTA an SM of its own (rows * C <= SMs: more
// CTAs than SMs only queue, with no less work for the busiest SM) and kClusterMinCtaWarps warps of the row.
// On an H100/H200 (132 SMs), [rows, 16384] (512 threads per row): C = 8 up to 16 rows, 4 up to 33, 2 up to
// 66, then one CTA per row.
int ctas_per_row(int64_t rows, int64_t slots, int row_threads, int sms) {
  if (row_threads == 0) return 1;  // no cluster split for this row
  const int forced = cluster_override();
  if (forced >= 0) return forced < 2 ? 1 : forced;
  if (slots < kClusterMinRowSlots) return 1;
  const int warps = row_threads / fp8dk::kWarpSize;
  int ctas = 1;
  for (int c = 2; c <= rn::kMaxClusterCtas; c *= 2) {
    if (ceil_div(warps, c) < kClusterMinCtaWarps || rows * c > sms) break;
    ctas = c;
  }
  return ctas;
}

// The cluster kernel's plan for a row that `l` (one CTA per row) splits as configure() decided: the same
// row_threads, then the CTAs per row.
void plan_cluster(const RmsNormParams& p, int64_t slots, bool aligned, int sms, Launch& l) {
  if (l.kernel == Launch::Kernel::kLongRow) {
    // The long-row kernel's split: kMaxThreads threads, chunks of kSlotsPerThread<false> slots per thread,
    // over the row's slots counted as on the general path (a row start past a 16-byte boundary adds a slot).
    const int64_t general_slots = ceil_div(p.hidden + rn::kSlotElems - 1, rn::kSlotElems);
    const int64_t chunks = ceil_div(general_slots, int64_t(rn::kSlotsPerThread<false>) * rn::kMaxThreads);
    if (chunks > rn::kMaxClusterChunks) return;
    l.row_threads = rn::kMaxThreads;
    l.chunks = static_cast<int>(chunks);
    l.cluster_aligned = false;
  } else if (p.threads_per_row > fp8dk::kWarpSize) {  // the register kernel, one block per row
    l.row_threads = p.threads_per_row;
    l.chunks = 1;
    l.cluster_aligned = aligned;
  } else {
    return;  // short rows: several per block already
  }
  const int ctas = ctas_per_row(p.rows, slots, l.row_threads, sms);
  if (ctas < 2 || p.rows > INT_MAX / ctas) return;
  l.cluster = ctas;
  l.cluster_threads = static_cast<int>(ceil_div(l.row_threads / fp8dk::kWarpSize, ctas)) * fp8dk::kWarpSize;
}

// The persistent kernel's heuristic takes the fused op up to this many rows per resident CTA. Measured on an
// H200 against one CTA per row: up to 7% faster at 2 to 4 rows per CTA (equal at [1024, 8192]), 1-6% slower at
// 8 to 31, where the many waves of one-CTA-per-row CTAs no longer run in step; rms_norm was faster at every
// row count measured (12-13% at 16 and 31 rows per CTA).
constexpr int64_t kPersistentMaxFusedWaves = 4;

// FP8DK_RMSNORM_PERSISTENT (top of the file): 0 or 1, or -1 when unset or empty.
int persistent_override() {
  const char* v = std::getenv("FP8DK_RMSNORM_PERSISTENT");
  if (v == nullptr || *v == '\0') return -1;
  TORCH_CHECK((v[0] == '0' || v[0] == '1') && v[1] == '\0', "rms_norm: FP8DK_RMSNORM_PERSISTENT must be 0 or 1, got '",
              v, "'");
  return v[0] - '0';
}
#endif

// How a row is split (threads per row, slots per thread) depends on the hidden size and the alignment only,
// so a row's reduction order is the same in any batch; the row count and the SM count size the grid (and
// whether the cluster kernel, which keeps the split, takes the rows).
Launch configure_one_cta(RmsNormParams& p, bool aligned, int64_t slots, int sms) {
  Launch l{};
  const int slots_per_thread = aligned ? rn::kSlotsPerThread<true> : rn::kSlotsPerThread<false>;
  if (slots > (aligned ? rn::kMaxRegisterSlots<true> : rn::kMaxRegisterSlots<false>)) {
    // One block per row walking it in chunks; as much of the row as the device allows stays in shared memory.
    l.kernel = Launch::Kernel::kLongRow;
    l.threads = rn::kMaxThreads;
    l.blocks = static_cast<int>(p.rows);
    // What a block may use (48 KB without opt-in everywhere) less the kernel's static reduction scratch.
    const int64_t smem = std::max(fp8dk::max_shared_memory_per_block(), 48 * 1024) - sizeof(float) * fp8dk::kMaxWarps;
    const int64_t smem_slots = smem / sizeof(fp8dk::Pack<16>);
    p.staged_slots = static_cast<int>(std::min(slots, smem_slots));
    l.smem_bytes = p.staged_slots * static_cast<int>(sizeof(fp8dk::Pack<16>));
    return l;
  }
  l.kernel = aligned ? Launch::Kernel::kAligned : Launch::Kernel::kGeneral;
  int group = static_cast<int>(ceil_div(slots, slots_per_thread));
  if (group <= fp8dk::kWarpSize) {
    // Short rows: a power-of-two group of lanes per row, several rows per block, a shuffle reduction. With
    // few rows the block shrinks (down to one warp) so the rows spread over more SMs.
    int shift = 0;
    while ((1 << shift) < group) ++shift;
    group = 1 << shift;
    l.threads = kRowsBlockThreads;
    while (l.threads > fp8dk::kWarpSize && ceil_div(p.rows, l.threads >> shift) < sms) l.threads /= 2;
    p.group_shift = shift;
    p.lane_mask = group - 1;
    p.rows_per_block = l.threads >> shift;
  } else {
    // Long rows: one block of whole warps per row, a block reduction.
    group = static_cast<int>(ceil_div(group, fp8dk::kWarpSize)) * fp8dk::kWarpSize;
    l.threads = group;
    p.group_shift = 31;  // threadIdx.x >> 31 == 0: every thread of the block works on its one row
    p.lane_mask = INT_MAX;
    p.rows_per_block = 1;
  }
  p.threads_per_row = group;
  const int64_t blocks = ceil_div(p.rows, p.rows_per_block);
  TORCH_CHECK(blocks <= INT_MAX, "rms_norm: too many rows (", p.rows, ") for one launch");
  l.blocks = static_cast<int>(blocks);
  return l;
}

Launch configure(RmsNormParams& p, int out_elem_bytes) {
  const bool aligned = all_aligned(p, out_elem_bytes);
  // Slots per row: on the general path a row starting past a 16-byte boundary may need one more.
  const int64_t slots = ceil_div(p.hidden + (aligned ? 0 : rn::kSlotElems - 1), rn::kSlotElems);
  const int sms = fp8dk::multiprocessor_count();
  Launch l = configure_one_cta(p, aligned, slots, sms);
#if defined(FP8DK_NVIDIA)
  plan_cluster(p, slots, aligned, sms, l);
  l.persistent = l.cluster == 1 && l.kernel == Launch::Kernel::kAligned && p.rows_per_block == 1 &&
                 l.threads <= rn::kMaxPersistentThreads;
#endif
  return l;
}

#if defined(FP8DK_NVIDIA)
// The cluster kernel for l's plan; false (nothing launched) where the device or the build cannot run it.
template <class In, class Out, bool kResidual>
bool launch_cluster(const RmsNormParams& p, const Launch& l, cudaStream_t stream) {
  void (*kernel)(RmsNormParams) = l.chunks > 1        ? &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, false, 2>
                                  : l.cluster_aligned ? &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, true, 1>
                                                      : &fp8dk::rms_norm_cluster_kernel<In, Out, kResidual, false, 1>;
  const dim3 cluster(l.cluster);
  if (fp8dk::max_active_clusters(reinterpret_cast<const void*>(kernel), cluster, l.cluster_threads, 0) == 0)
    return false;
  RmsNormParams q = p;
  q.threads_per_row = l.row_threads;
  fp8dk::LaunchShape shape;
  shape.grid = dim3(static_cast<int>(p.rows) * l.cluster);
  shape.block = dim3(l.cluster_threads);
  shape.cluster = cluster;
  fp8dk::launch_kernel(kernel, shape, stream, q);
  return true;
}

// The persistent kernel for l's rows (l.persistent: aligned, one block per row) when FP8DK_RMSNORM_PERSISTENT
// or the heuristic says so: more rows than the device holds CTAs at once (fewer leave nothing to prefetch), and
// for the fused op at most kPersistentMaxFusedWaves times as many. False (nothing launched) otherwise.
template <class In, class Out, bool kResidual>
bool launch_persistent(const RmsNormParams& p, const Launch& l, cudaStream_t stream) {
  const int forced = persistent_override();
  if (!l.persistent || forced == 0) return false;
  auto* kernel = &fp8dk::rms_norm_persistent_kernel<In, Out, kResidual>;
  const int64_t resident =
      int64_t(fp8dk::max_active_blocks_per_sm(kernel, l.threads, 0)) * fp8dk::multiprocessor_count();
  if (resident == 0) return false;
  if (forced < 0 && (p.rows <= resident || (kResidual && p.rows > kPersistentMaxFusedWaves * resident))) return false;
  fp8dk::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(std::min(p.rows, resident)));
  shape.block = dim3(l.threads);
  fp8dk::launch_kernel(kernel, shape, stream, p);
  return true;
}
#endif

template <class In, class Out, bool kResidual>
void launch(const RmsNormParams& p, const Launch& l, cudaStream_t stream) {
#if defined(FP8DK_NVIDIA)
  if (l.cluster > 1 && launch_cluster<In, Out, kResidual>(p, l, stream)) return;
  if (launch_persistent<In, Out, kResidual>(p, l, stream)) return;
#endif
  fp8dk::LaunchShape shape;
  shape.grid = dim3(l.blocks);
  shape.block = dim3(l.threads);
  switch (l.kernel) {
    case Launch::Kernel::kAligned:
      fp8dk::launch_kernel(&fp8dk::rms_norm_kernel<In, Out, kResidual, true>, shape, stream, p);
      break;
    case Launch::Kernel::kGeneral:
      fp8dk::launch_kernel(&fp8dk::rms_norm_kernel<In, Out, kResidual, false>, shape, stream, p);
      break;
    case Launch::Kernel::kLongRow: {
      auto* kernel = &fp8dk::rms_norm_long_row_kernel<In, Out, kResidual>;
      if (l.smem_bytes > 48 * 1024) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem_bytes));
      }
      shape.smem_bytes = l.smem_bytes;
      fp8dk::launch_kernel(kernel, shape, stream, p);
      break;
    }
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Dtypes to format tags: the input (and weight, residual) dtype, then the output's (input dtype or FP8).
template <bool kResidual, class In>
void dispatch_out(at::ScalarType out, const RmsNormParams& p, const Launch& l, cudaStream_t stream) {
  switch (out) {
    case at::kFloat8_e4m3fn:
      return launch<In, fp8dk::E4m3fn, kResidual>(p, l, stream);
    case at::kFloat8_e4m3fnuz:
      return launch<In, fp8dk::E4m3fnuz, kResidual>(p, l, stream);
    default:  // check_quant_out guarantees the input dtype
      return launch<In, In, kResidual>(p, l, stream);
  }
}

void rms_norm_gpu(torch::Tensor& out, const torch::Tensor& input, torch::Tensor* residual,
                  const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale,
                  const char* op) {
  const fp8dk::RmsNormShape shape = fp8dk::check_rms_norm_args(out, input, residual, weight, eps, scale, op);
  TORCH_CHECK(input.is_cuda(), op, ": input must be a CUDA tensor");
  TORCH_CHECK(shape.in.cols < (int64_t(1) << 30), op, ": hidden size must be below 2^30, got ", shape.in.cols);
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (shape.in.rows == 0) return;

  RmsNormParams p{};
  p.input = static_cast<const uint16_t*>(input.const_data_ptr());
  p.residual = residual ? static_cast<uint16_t*>(residual->data_ptr()) : nullptr;
  p.out = out.data_ptr();
  p.weight = static_cast<const uint16_t*>(weight.const_data_ptr());
  p.scale = scale ? scale->const_data_ptr<float>() : nullptr;
  p.rows = shape.in.rows;
  p.input_stride = shape.in.row_stride;
  p.out_stride = shape.out.row_stride;
  p.hidden = static_cast<int>(shape.in.cols);
  p.eps = static_cast<float>(eps);  // joins the fp32 mean as an fp32 value, like the reference's `variance + eps`
  const Launch l = configure(p, static_cast<int>(out.element_size()));

  const bool bf16 = input.scalar_type() == at::kBFloat16;
  if (residual) {
    bf16 ? dispatch_out<true, fp8dk::Bf16>(out.scalar_type(), p, l, stream)
         : dispatch_out<true, fp8dk::Fp16>(out.scalar_type(), p, l, stream);
  } else {
    bf16 ? dispatch_out<false, fp8dk::Bf16>(out.scalar_type(), p, l, stream)
         : dispatch_out<false, fp8dk::Fp16>(out.scalar_type(), p, l, stream);
  }
}

}  // namespace

void rms_norm(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& weight, double eps,
              const std::optional<torch::Tensor>& scale) {
  rms_norm_gpu(out, input, nullptr, weight, eps, scale, "rms_norm");
}

void fused_add_rms_norm(torch::Tensor& out, const torch::Tensor& input, torch::Tensor& residual,
                        const torch::Tensor& weight, double eps, const std::optional<torch::Tensor>& scale) {
  rms_norm_gpu(out, input, &residual, weight, eps, scale, "fused_add_rms_norm");
}
