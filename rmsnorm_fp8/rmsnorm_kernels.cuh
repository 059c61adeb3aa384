#pragma once
// rms_norm and fused_add_rms_norm with optional static FP8 output: device code for NVIDIA and AMD from one
// source (no torch includes; rmsnorm_plan.h decides the launch, rmsnorm.cu validates and launches).
//
// Numerics (reference.py, transformers' LlamaRMSNorm order), per row:
//   fused:  r = In(x + residual), written back to residual       (x otherwise)
//           inv = 1 / sqrt_rn(sum(r^2) / hidden + eps)          (fp32, correctly rounded operations)
//           h = In(r * inv);  y = In(weight * h)                 (the 16-bit multiply)
//           out = y, or FP8(y / scale)                           (saturating, round to nearest even)
// Only the order of the fp32 sum of squares differs from the reference.
//
// Work layout. A row is cut into 16-byte "slots" of 8 values aligned to the input row's address: slot k holds
// columns [8k - m, 8k - m + 8), m being how many elements the row start lies past a 16-byte boundary. Whole
// slots move as single 128-bit accesses (FP8 out: 64-bit stores); the partial first slot (the peeled head)
// and last slot (the tail) go element by element, so any hidden size and row stride work without a scalar
// path for the whole row. The residual and out rows use vectors when they share the input row's
// misalignment (contiguous rows of an odd hidden size do: each row starts at another offset, the same one in
// every tensor), element by element otherwise; the weight likewise, per row.
//
// A group of `threads_per_row` (G) threads owns a row, each thread kSlots slots strided by G (lane k of the
// group: slots k, k + G, ...), so every load instruction of a warp is contiguous.
//   rms_norm_kernel<.., kAligned>  the row lives in registers between the sum of squares and the normalize
//        pass; short rows: several groups (rows) per block, a shuffle reduction; long rows: one block per
//        row, one block reduction. kAligned (the common case, checked by the launcher: hidden % 8 == 0 and
//        every row of every tensor on a vector boundary): every slot is whole, no element-wise code, 4 slots
//        per thread. Otherwise the general path above, 2 slots per thread.
//   rms_norm_long_row_kernel       rows beyond what a block holds in registers: one block per row walks
//        the row in chunks, keeping what fits in shared memory; the rest is re-read from global memory (L2).
//   rms_norm_cluster_kernel        few long rows on NVIDIA sm_90+: a row that one of the kernels above gives a
//        block of its own split over the 2-8 CTAs of a thread-block cluster (the long-row kernel's rows up to
//        4096 slots, held in registers), the warps' sums exchanged through distributed shared memory; the
//        same per-thread work and sum order as that kernel, so the same bytes.
//   rms_norm_persistent_kernel     many aligned rows of the register kernel's one-block-per-row split (NVIDIA):
//        a grid of the CTAs the device holds at once, each loading its next row while it finishes the current
//        one; the same split and sum order, so the same bytes.
// Batch invariance: the reduction order depends on the hidden size and the input row's alignment, never on
// the number of rows (nor on whether a row takes the cluster kernel).
#include "common/cluster.cuh"
#include "common/diag_trace.cuh"
#include "common/fp8_scale.cuh"
#include "common/grid_dependency.cuh"
#include "common/numerics.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "rmsnorm_fp8/rmsnorm_plan.h"  // the row split (RmsNormSplit) and its constants

namespace fp8dk {

// What the launcher passes; pointers are raw bits (uint16_t for 16-bit values, bytes for FP8).
struct RmsNormParams {
  const uint16_t* input;  // [rows, hidden], rows `input_stride` elements apart
  uint16_t* residual;     // fused_add_rms_norm: [rows, hidden] contiguous, updated in place; else nullptr
  void* out;              // [rows, hidden], rows `out_stride` elements apart; input dtype or FP8
  const uint16_t* weight;  // [hidden]
  const float* scale;      // FP8 out: one fp32 on the device (read here: no host sync, graph-safe)
  int64_t rows;
  int64_t input_stride;
  int64_t out_stride;
  int hidden;
  float eps;
  RmsNormSplit split;  // how the plan splits a row (rmsnorm_plan.h)
};

namespace rmsnorm {

// ------------------------------------------------------------------ slots

// How a stream is read: once (input of the register kernel), kept in cache (weight; input re-read by the
// long-row kernel), or written by this kernel too (residual: no non-coherent path).
enum class Access { kStream, kCached, kWritten };

template <Access A>
FP8DK_DEVICE Pack<16> load16(const void* p) {
  if constexpr (A == Access::kStream) return load_nt<16>(p);
  else if constexpr (A == Access::kCached) return load_ro<16>(p);
  else return load<16>(p);
}

// Columns [c0, c0 + 8) of a 16-bit row, zero outside [0, cols). `vector`: the slot is whole and 16-byte
// aligned in this stream: one 128-bit load. Otherwise, on the general path, element by element; on the
// aligned path a slot that is not whole is past the row's end (or the row is padding) and stays zero.
template <Access A, bool kAligned>
FP8DK_DEVICE Pack<16> load_slot(const uint16_t* row, int c0, int cols, bool vector) {
  if (vector) return load16<A>(row + c0);
  Pack<16> v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.w[i] = 0;
  if constexpr (!kAligned) {
#pragma unroll
    for (int i = 0; i < kSlotElems; ++i) {
      const int c = c0 + i;
      if (c >= 0 && c < cols) v.w[i / 2] |= uint32_t(row[c]) << (16 * (i % 2));
    }
  }
  return v;
}

template <bool kAligned>
FP8DK_DEVICE void store_slot(uint16_t* row, int c0, int cols, bool vector, const Pack<16>& v) {
  if (vector) return store<16>(row + c0, v);
  if constexpr (!kAligned) {
#pragma unroll
    for (int i = 0; i < kSlotElems; ++i) {
      const int c = c0 + i;
      if (c >= 0 && c < cols) row[c] = uint16_t(v.w[i / 2] >> (16 * (i % 2)));
    }
  }
}

template <bool kAligned>
FP8DK_DEVICE void store_slot(uint8_t* row, int c0, int cols, bool vector, const Pack<8>& v) {
  if (vector) return store<8>(row + c0, v);
  if constexpr (!kAligned) {
#pragma unroll
    for (int i = 0; i < kSlotElems; ++i) {
      const int c = c0 + i;
      if (c >= 0 && c < cols) row[c] = uint8_t(v.w[i / 4] >> (8 * (i % 4)));
    }
  }
}

// Elements a pointer lies past an 8-element boundary (16 bytes of 16-bit values, 8 bytes of FP8).
template <class T>
FP8DK_DEVICE int misalignment(const T* p) {
  return int(reinterpret_cast<uintptr_t>(p) / sizeof(T)) & (kSlotElems - 1);
}

// One row as a thread sees it: pointers, the input row's misalignment and which streams can use vectors.
// kAligned: the launcher checked that every row of every stream starts on a vector boundary and that the
// hidden size is a multiple of 8, so every slot is whole (or past the end) and moves as one vector.
template <class In_, class Out_, bool kResidual_, bool kAligned_>
struct Row {
  using In = In_;
  using Out = Out_;
  using OutT = typename Out::Bits;
  static constexpr bool kResidual = kResidual_;
  static constexpr bool kAligned = kAligned_;
  static constexpr int kSlots = kSlotsPerThread<kAligned>;

  const uint16_t* in;
  uint16_t* res;
  OutT* out;
  const uint16_t* weight;
  int cols;  // hidden, or 0 for a group past the last row: it then loads and stores nothing
  int head;  // m: slot k starts at column 8k - m
  bool res_vector, out_vector, weight_vector;

  FP8DK_DEVICE Row(const RmsNormParams& p, int64_t row) {
    const bool valid = row < p.rows;
    const int64_t r = valid ? row : 0;
    in = p.input + r * p.input_stride;
    res = kResidual ? p.residual + r * p.hidden : nullptr;
    out = static_cast<OutT*>(p.out) + r * p.out_stride;
    weight = p.weight;
    cols = valid ? p.hidden : 0;
    head = kAligned ? 0 : misalignment(in);
    res_vector = kAligned || misalignment(res) == head;
    out_vector = kAligned || misalignment(out) == head;
    weight_vector = kAligned || misalignment(weight) == head;
  }

  FP8DK_DEVICE int slots() const { return (cols + head + kSlotElems - 1) / kSlotElems; }
  FP8DK_DEVICE int first_column(int slot) const { return slot * kSlotElems - head; }
  FP8DK_DEVICE bool whole(int slot) const {
    const int c0 = first_column(slot);
    return kAligned ? c0 < cols : c0 >= 0 && c0 + kSlotElems <= cols;
  }
};

// Issues the loads of slots slot0 + j * stride (j < N, usually R::kSlots) of the row: x into v and, for the
// fused op, the residual into res (untouched otherwise). Nothing waits on them here, so a thread has all its
// bytes in flight at once.
template <Access kInput, class R, int N>
FP8DK_DEVICE void load_inputs(const R& row, int slot0, int stride, Pack<16> (&v)[N], Pack<16> (&res)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int k = slot0 + j * stride;
    v[j] = load_slot<kInput, R::kAligned>(row.in, row.first_column(k), row.cols, row.whole(k));
  }
  if constexpr (R::kResidual) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int k = slot0 + j * stride;
      res[j] = load_slot<Access::kWritten, R::kAligned>(row.res, row.first_column(k), row.cols,
                                                        row.whole(k) && row.res_vector);
    }
  }
}

// The fused op's r = In(x + residual) in v (v stays x otherwise).
template <class R, int N>
FP8DK_DEVICE void add_residual(Pack<16> (&v)[N], const Pack<16> (&res)[N]) {
  if constexpr (R::kResidual) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[j].w[i] = add2<typename R::In>(v[j].w[i], res[j].w[i]);
    }
  }
}

// The fused op's r, slots slot0 + j * stride, back into the residual.
template <class R, int N>
FP8DK_DEVICE void store_residual(const R& row, int slot0, int stride, const Pack<16> (&v)[N]) {
  if constexpr (R::kResidual) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int k = slot0 + j * stride;
      store_slot<R::kAligned>(row.res, row.first_column(k), row.cols, row.whole(k) && row.res_vector, v[j]);
    }
  }
}

// Loads slots slot0 + j * stride (j < N) of the row into v: x, or for the fused op r = x + residual, written
// back to the residual (unless kStoreResidual is false: the caller stores it later with store_residual).
template <Access kInput, bool kStoreResidual = true, class R, int N>
FP8DK_DEVICE void load_row(const R& row, int slot0, int stride, Pack<16> (&v)[N]) {
  Pack<16> res[N];
  load_inputs<kInput>(row, slot0, stride, v, res);
  add_residual<R>(v, res);
  if constexpr (kStoreResidual) store_residual(row, slot0, stride, v);
}

template <class R, int N>
FP8DK_DEVICE void load_weight(const R& row, int slot0, int stride, Pack<16> (&w)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int k = slot0 + j * stride;
    w[j] = load_slot<Access::kCached, R::kAligned>(row.weight, row.first_column(k), row.cols,
                                                   row.whole(k) && row.weight_vector);
  }
}

// Sum of squares of N slots: one fp32 chain per slot, then a pairwise sum (short dependency chains).
template <class In, int N>
FP8DK_DEVICE float sum_squares(const Pack<16>* v) {
  float part[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float lo, hi;
      In::unpack2(v[j].w[i], lo, hi);
      s = fma_rn(lo, lo, s);
      s = fma_rn(hi, hi, s);
    }
    part[j] = s;
  }
#pragma unroll
  for (int width = N / 2; width > 0; width /= 2) {
#pragma unroll
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  }
  return part[0];
}

template <class In, int N>
FP8DK_DEVICE float sum_squares(const Pack<16> (&v)[N]) {
  return sum_squares<In, N>(&v[0]);
}

// Hides the values of v from the optimizer at this point. Placed after the reduction, it stops the compiler
// from keeping the fp32 unpacking of the sum of squares alive for the normalize pass: the row then waits in
// its packed 16-bit form (half the registers) and is unpacked again, a cheap conversion per element.
template <int N>
FP8DK_DEVICE void keep_packed(Pack<16> (&v)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if defined(FP8DK_AMD)
      asm volatile("" : "+v"(v[j].w[i]));  // "v": a vector register ("r" is a scalar one on AMDGPU)
#else
      asm volatile("" : "+r"(v[j].w[i]));
#endif
    }
  }
}

FP8DK_DEVICE float inv_rms(float sum_sq, int hidden, float eps) {
  return rcp_rn(sqrt_rn(div_rn(sum_sq, float(hidden)) + eps));
}

// y = In(weight * In(r * inv)) for slot k, stored as the input dtype or quantized to FP8.
template <class R>
FP8DK_DEVICE void normalize_store(const R& row, int k, const Pack<16>& r, const Pack<16>& w, float inv,
                                  const OutScale<typename R::Out>& scale) {
  using In = typename R::In;
  Pack<16> y;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float lo, hi;
    In::unpack2(r.w[i], lo, hi);
    y.w[i] = mul2<In>(w.w[i], In::pack2(lo * inv, hi * inv));
  }
  const bool vector = row.whole(k) && row.out_vector;
  if constexpr (R::Out::kFp8) {
    Pack<8> q;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float a, b, c, d;
      In::unpack2(y.w[2 * i], a, b);
      In::unpack2(y.w[2 * i + 1], c, d);
      q.w[i] = quantize4<typename R::Out>(scale.divide(a), scale.divide(b), scale.divide(c), scale.divide(d));
    }
    store_slot<R::kAligned>(row.out, row.first_column(k), row.cols, vector, q);
  } else {
    store_slot<R::kAligned>(row.out, row.first_column(k), row.cols, vector, y);
  }
}

}  // namespace rmsnorm

// Rows of up to kMaxRegisterSlots slots: the row stays in registers from load to store. Rows map to groups of
// p.split.threads_per_row lanes: several per block for short rows, one block per row for long ones.
template <class In, class Out, bool kResidual, bool kAligned>
__global__ void __launch_bounds__(rmsnorm::kMaxThreads) rms_norm_kernel(const RmsNormParams p) {
  FP8DK_TRACE_BEGIN();
  using namespace rmsnorm;
  using R = Row<In, Out, kResidual, kAligned>;
  __shared__ float scratch[kMaxWarps];
  const int lane = threadIdx.x & p.split.lane_mask;
  const R row(p, int64_t(blockIdx.x) * p.split.rows_per_block + (threadIdx.x >> p.split.group_shift));
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  const float scale_value = OutScale<Out>::read(p.scale);  // OutScale after the loads (OutScale::read)

  Pack<16> v[R::kSlots], w[R::kSlots];
  load_row<Access::kStream>(row, lane, p.split.threads_per_row, v);
  const float sum = sum_squares<In>(v);
  const int group = p.split.threads_per_row;
  const float total = group > kWarpSize ? block_sum(sum, scratch) : group_sum(sum, group);
  // The weight (an L2 hit: every row reads it) is loaded after the reduction, its latency overlapping the
  // inv computation: loaded earlier, the compiler hoists it above the residual stores and the x, residual
  // and weight registers together exceed the 64 a 1024-thread block allows.
  load_weight(row, lane, p.split.threads_per_row, w);
  keep_packed(v);
  const OutScale<Out> scale(scale_value);
  const float inv = inv_rms(total, p.hidden, p.eps);
#pragma unroll
  for (int j = 0; j < R::kSlots; ++j) normalize_store(row, lane + j * p.split.threads_per_row, v[j], w[j], inv, scale);
  FP8DK_TRACE_END(kRmsNorm, p.hidden, p.rows, 0);
}

// Many aligned rows of the register kernel's one-block-per-row split: a persistent grid (the CTAs the device
// holds at once), each CTA walking rows blockIdx.x, blockIdx.x + gridDim.x, ... It issues the next row's loads
// before it adds, reduces, normalizes and stores the current one, so they stay in flight through that math.
// With a CTA per row instead, the CTAs of a wave reduce and convert at about the same time while none of them
// has a load in flight (BENCHMARKS.md, "What moving the same bytes costs"). The weight, the same for every
// row, is loaded once and stays in registers. The split of a row, the per-thread sums and block_sum's order
// are rms_norm_kernel's: the bytes out are the same.
template <class In, class Out, bool kResidual>
__global__ void __launch_bounds__(rmsnorm::kMaxPersistentThreads) rms_norm_persistent_kernel(const RmsNormParams p) {
  FP8DK_TRACE_BEGIN();
  using namespace rmsnorm;
  using R = Row<In, Out, kResidual, true>;
  __shared__ float scratch[kMaxWarps];
  const int t = threadIdx.x, threads = blockDim.x;
  int64_t index = blockIdx.x;
  R row(p, index);
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  const float scale_value = OutScale<Out>::read(p.scale);  // OutScale after the loads (OutScale::read)

  Pack<16> x[R::kSlots], res[R::kSlots], w[R::kSlots];
  load_inputs<Access::kStream>(row, t, threads, x, res);
  load_weight(row, t, threads, w);
  const OutScale<Out> scale(scale_value);
  for (;;) {
    Pack<16> v[R::kSlots];
#pragma unroll
    for (int j = 0; j < R::kSlots; ++j) v[j] = x[j];
    add_residual<R>(v, res);
    const int64_t next_index = index + gridDim.x;
    const R next(p, next_index);  // past the last row: loads nothing
    load_inputs<Access::kStream>(next, t, threads, x, res);
    store_residual(row, t, threads, v);
    const float total = block_sum(sum_squares<In>(v), scratch);
    keep_packed(v);
    const float inv = inv_rms(total, p.hidden, p.eps);
#pragma unroll
    for (int j = 0; j < R::kSlots; ++j) normalize_store(row, t + j * threads, v[j], w[j], inv, scale);
    if (next_index >= p.rows) break;
    index = next_index;
    row = next;
  }
  FP8DK_TRACE_END(kRmsNorm, p.hidden, p.rows, 0);
}

// Rows longer than a block holds in registers (any alignment): one block per row, which walks it in chunks
// of kSlots slots per thread. The first pass keeps r in dynamic shared memory (p.split.staged_slots slots, what the
// device allows); the second pass reads it back, or re-reads the slots beyond that from global memory: the
// residual this thread just wrote, or the input. Each thread only reads back its own slots, so the staging
// needs no barrier.
template <class In, class Out, bool kResidual>
__global__ void __launch_bounds__(rmsnorm::kMaxThreads) rms_norm_long_row_kernel(const RmsNormParams p) {
  FP8DK_TRACE_BEGIN();
  using namespace rmsnorm;
  using R = Row<In, Out, kResidual, false>;
  extern __shared__ Pack<16> staged[];
  __shared__ float scratch[kMaxWarps];
  const R row(p, blockIdx.x);
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  const float scale_value = OutScale<Out>::read(p.scale);  // OutScale after the first pass
  const int threads = blockDim.x, chunk = threads * R::kSlots;

  float sum = 0.f;
  for (int slot0 = threadIdx.x; slot0 < row.slots(); slot0 += chunk) {
    Pack<16> v[R::kSlots];
    load_row<Access::kCached>(row, slot0, threads, v);
    sum += sum_squares<In>(v);
#pragma unroll
    for (int j = 0; j < R::kSlots; ++j) {
      const int k = slot0 + j * threads;
      if (k < p.split.staged_slots) staged[k] = v[j];
    }
  }
  const float inv = inv_rms(block_sum(sum, scratch), p.hidden, p.eps);
  const OutScale<Out> scale(scale_value);

  for (int slot0 = threadIdx.x; slot0 < row.slots(); slot0 += chunk) {
    Pack<16> v[R::kSlots], w[R::kSlots];
#pragma unroll
    for (int j = 0; j < R::kSlots; ++j) {
      const int k = slot0 + j * threads;
      if (k < p.split.staged_slots) {
        v[j] = staged[k];
      } else if constexpr (kResidual) {
        v[j] = load_slot<Access::kWritten, false>(row.res, row.first_column(k), row.cols,
                                                  row.whole(k) && row.res_vector);
      } else {
        v[j] = load_slot<Access::kCached, false>(row.in, row.first_column(k), row.cols, row.whole(k));
      }
    }
    load_weight(row, slot0, threads, w);
#pragma unroll
    for (int j = 0; j < R::kSlots; ++j) normalize_store(row, slot0 + j * threads, v[j], w[j], inv, scale);
  }
  FP8DK_TRACE_END(kRmsNorm, p.hidden, p.rows, 0);
}

// Few long rows on NVIDIA sm_90+: each row split over the CTAs of a thread-block cluster (one cluster per
// row), so that its bytes move through that many SMs instead of one. The launcher plans the split of a row
// exactly as the one-CTA-per-row kernel of that row does: p.split.threads_per_row threads T, slot k with thread
// k % T; the cluster supplies the T threads (rank r runs threads r * blockDim.x .., those past T idle).
//   kChunks == 1: rms_norm_kernel's split (rows with T > warp size threads), R::kSlots slots per thread;
//   kChunks == 2: rms_norm_long_row_kernel's split (T = kMaxThreads, chunks of 2 slots whose sums are added
//     one after the other) of general-path rows of up to 2 * 2 * kMaxThreads slots, held in registers here.
// The per-thread sums are those kernels' and cluster_row_sum adds them in block_sum's order, so every output
// is bitwise the one of the kernel the row would take otherwise: batch invariance holds across the paths.
// Differences that do not touch the numbers:
//   - the weight is loaded up front with the row (CTAs of at most 512 threads have the registers), so its
//     latency overlaps the row's instead of following the reduction; the FP8 scale too (OutScale::read);
//   - the row's sums meet through asynchronous stores counted on an mbarrier, with no fence (cluster_row_sum),
//     so the residual is stored before the reduction.
// Without clusters (cluster_ctas() == 1) this is a one-CTA-per-row kernel of the same split; a launch whose
// cluster does not supply T threads traps rather than compute a wrong row.
template <class In, class Out, bool kResidual, bool kAligned, int kChunks>
__global__ void __launch_bounds__(rmsnorm::kMaxClusterCtaThreads) rms_norm_cluster_kernel(const RmsNormParams p) {
  FP8DK_TRACE_BEGIN();
  using namespace rmsnorm;
  static_assert(kChunks == 1 || (!kAligned && kChunks <= kMaxClusterChunks),
                "the long-row kernel's split (kChunks > 1) runs on the general path");
  using R = Row<In, Out, kResidual, kAligned>;
  constexpr int kSlots = R::kSlots * kChunks;
  __shared__ float warp_sums[kMaxWarps];
  __shared__ uint64_t sums_landed;
  cluster_row_sum_begin(&sums_landed);
  const int threads = p.split.threads_per_row;
  if (static_cast<int>(blockDim.x * cluster_ctas()) < threads) trap();
  const int t = static_cast<int>(cluster_rank() * blockDim.x + threadIdx.x);
  const R row(p, t < threads ? int64_t(cluster_index()) : p.rows);  // an idle thread gets no row
  allow_next_grid();
  wait_for_prior_grid();
  FP8DK_TRACE_WAITED();
  const float scale_value = OutScale<Out>::read(p.scale);

  Pack<16> v[kSlots], w[kSlots];
  load_weight(row, t, threads, w);
  load_row<Access::kStream, false>(row, t, threads, v);
  float sum = sum_squares<In, R::kSlots>(&v[0]);
#pragma unroll
  for (int c = 1; c < kChunks; ++c) sum += sum_squares<In, R::kSlots>(&v[c * R::kSlots]);
  store_residual(row, t, threads, v);  // before the reduction: it has no fence that would wait for these stores
  const float total = cluster_row_sum(sum, threads, warp_sums, &sums_landed);
  keep_packed(v);
  const OutScale<Out> scale(scale_value);
  const float inv = inv_rms(total, p.hidden, p.eps);
#pragma unroll
  for (int j = 0; j < kSlots; ++j) normalize_store(row, t + j * threads, v[j], w[j], inv, scale);
  FP8DK_TRACE_DRAIN();
  FP8DK_TRACE_END(kRmsNorm, p.hidden, p.rows, 0);
}

}  // namespace fp8dk
