// CUDA / ROCm rms_norm and fused_add_rms_norm (torch-ext/torch_binding.h): validates, picks the
// configuration from the shape, the actual alignment and the device, and launches the kernels of
// rmsnorm_kernels.cuh on the current stream. No host sync and no allocation: CUDA-graph safe.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <climits>

#include "common/checks.h"
#include "common/device_info.h"
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

// How a row is split (threads per row, slots per thread) depends on the hidden size and the alignment only,
// so a row's reduction order is the same in any batch; the row count and the SM count size the grid.
Launch configure(RmsNormParams& p, int out_elem_bytes) {
  Launch l{};
  const bool aligned = all_aligned(p, out_elem_bytes);
  // Slots per row: on the general path a row starting past a 16-byte boundary may need one more.
  const int64_t slots = ceil_div(p.hidden + (aligned ? 0 : rn::kSlotElems - 1), rn::kSlotElems);
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
    const int sms = fp8dk::multiprocessor_count();
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

template <class In, class Out, bool kResidual>
void launch(const RmsNormParams& p, const Launch& l, cudaStream_t stream) {
  switch (l.kernel) {
    case Launch::Kernel::kAligned:
      fp8dk::rms_norm_kernel<In, Out, kResidual, true><<<l.blocks, l.threads, 0, stream>>>(p);
      break;
    case Launch::Kernel::kGeneral:
      fp8dk::rms_norm_kernel<In, Out, kResidual, false><<<l.blocks, l.threads, 0, stream>>>(p);
      break;
    case Launch::Kernel::kLongRow: {
      auto* kernel = &fp8dk::rms_norm_long_row_kernel<In, Out, kResidual>;
      if (l.smem_bytes > 48 * 1024) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem_bytes));
      }
      kernel<<<l.blocks, l.threads, l.smem_bytes, stream>>>(p);
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
