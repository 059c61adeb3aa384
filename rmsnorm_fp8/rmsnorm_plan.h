#pragma once
// Which RMSNorm kernel runs, and how, decided in one place: plan_rms_norm takes the shape, the actual alignment,
// the device, the tuning overrides and two occupancy queries, and returns the kernel, its grid and block, its
// dynamic shared memory and the row split the kernel reads from RmsNormParams. The launcher (rmsnorm.cu)
// launches what the plan says; the AMD emulator and the host plan tests (tests/plans/) call the same function.
// Host code, torch- and vendor-free.
//
// The kernels (rmsnorm_kernels.cuh):
//   kAligned / kGeneral  the register kernel, one group of threads per row (several rows per block when short)
//   kLongRow             rows beyond a block's registers, walked in chunks, staged in dynamic shared memory
//   kCluster             NVIDIA sm_90+: few long rows, each split over a thread-block cluster of 2, 4 or 8 CTAs,
//                        at most kClusterCtasPerSm of them on one SM
//   kPersistent          NVIDIA: many aligned rows, a grid of the CTAs the device holds at once
// The cluster and persistent kernels keep the one-CTA-per-row kernel's split and sum order (the same bytes
// out); a row's split depends on the hidden size and the alignment only (batch invariance).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "common/int_math.h"
#include "common/plan.h"
#include "common/tuning.h"

namespace fp8dk {

namespace rmsnorm {
constexpr int kSlotElems = 8;  // one 16-byte vector of 16-bit values
constexpr int kSlotBytes = 16;
constexpr int kMaxThreads = 1024;
// Slots per thread. Aligned rows: 4, i.e. 64 bytes per thread per input stream in flight (enough to cover
// DRAM latency with ~1k threads per SM) within the 64 registers a 1024-thread block allows. The general path
// spends registers on element-wise head/tail code, so it holds 2.
template <bool kAligned>
constexpr int kSlotsPerThread = kAligned ? 4 : 2;
// Largest row the register kernel takes: one block of kMaxThreads threads.
template <bool kAligned>
constexpr int kMaxRegisterSlots = kSlotsPerThread<kAligned> * kMaxThreads;
// Cluster kernel: a row's threads (at most kMaxThreads) over 2 to kMaxClusterCtas CTAs (common/plan.h), so a
// CTA has at most half of kMaxThreads. Rows of the long-row kernel are taken up to kMaxClusterChunks chunks.
constexpr int kMaxClusterCtaThreads = kMaxThreads / 2;
constexpr int kMaxClusterChunks = 2;
// Persistent kernel: a thread holds the current row, the next row's input and residual, and the weight, so
// its blocks stay at half of kMaxThreads (up to 128 registers a thread).
constexpr int kMaxPersistentThreads = kMaxThreads / 2;

// Threads of a block that holds several short rows: 8 warps (4 wavefronts on AMD).
constexpr int kRowsBlockThreads = 256;
// Rows shorter than this many slots (8192 16-bit values: 56 KB of traffic per row of the fused op) stay on one
// SM: splitting them saves less of one SM's streaming time than the cluster kernel's barrier phase costs (its
// release arrive waits for the DSMEM stores, a round trip between SMs). A first guess, to be measured.
constexpr int64_t kClusterMinRowSlots = 1024;
// Each CTA of a cluster keeps at least this many warps of the row.
constexpr int kClusterMinCtaWarps = 2;
// CTAs of the cluster kernel one SM may hold (common/plan.h, smem_for_ctas_per_sm). In a decode step the
// kernel launches while the GEMM before it still holds most SMs, and the block scheduler would stack its CTAs
// on the few SMs that GEMM has left: at batch 32 on an H100, up to 6 CTAs on each of 24-42 SMs, which ended 2-3 us
// after CTAs alone on an SM (presumably their bytes queue at the SM's one path to L2). Held to 2 they spread
// over twice the SMs: the 405B decode step ran 0.26-0.28 ms faster at batch 32 and 0.17-0.22 ms at batch 1 and
// 8; 1 or 3 were slower or level (docs/experiments/README.md, item 59).
constexpr int kClusterCtasPerSm = 2;
// The persistent kernel's heuristic takes the fused op up to this many rows per resident CTA. Measured on an
// H200 against one CTA per row: up to 7% faster at 2 to 4 rows per CTA (equal at [1024, 8192]), 1-6% slower at
// 8 to 31, where the many waves of one-CTA-per-row CTAs no longer run in step; rms_norm was faster at every
// row count measured (12-13% at 16 and 31 rows per CTA).
constexpr int64_t kPersistentMaxFusedWaves = 4;
}  // namespace rmsnorm

// The tensors as the plan sees them: addresses (only their alignment matters), row strides in elements.
struct RmsNormProblem {
  const void* input;
  const void* residual;  // fused_add_rms_norm; nullptr for rms_norm
  const void* out;
  const void* weight;
  int64_t rows;
  int64_t input_stride;
  int64_t out_stride;
  int hidden;
  int out_elem_bytes;  // 2: the input's 16-bit format, 1: FP8
};

// The tuning overrides (README, "Tuning overrides"); -1: the heuristic. NVIDIA only.
struct RmsNormOverrides {
  int cluster = -1;      // FP8DK_RMSNORM_CLUSTER: CTAs per row (0 or 1: never the cluster kernel)
  int persistent = -1;   // FP8DK_RMSNORM_PERSISTENT: 0 never, 1 wherever the rows have the persistent split
  int ctas_per_sm = -1;  // FP8DK_RMSNORM_CTAS_PER_SM: the cluster kernel's CTAs an SM may hold (0: no cap)
};

inline RmsNormOverrides rms_norm_overrides() {
  RmsNormOverrides o;
  o.cluster = tuning::choice("FP8DK_RMSNORM_CLUSTER", {0, 1, 2, 4, 8}, -1, "0, 1, 2, 4 or 8 (CTAs per row)");
  o.persistent = tuning::integer("FP8DK_RMSNORM_PERSISTENT", 0, 1, -1, "0 or 1");
  o.ctas_per_sm = tuning::integer("FP8DK_RMSNORM_CTAS_PER_SM", 0, 8, -1, "0 (no cap) to 8");
  return o;
}

enum class RmsNormKernel { kAligned, kGeneral, kLongRow, kCluster, kPersistent };

// How the kernel splits a row over threads (the RmsNormParams fields of the same names).
struct RmsNormSplit {
  int threads_per_row = 0;  // G: a power of two up to the warp size, or the whole block (one row per block)
  int group_shift = 0;      // threadIdx.x >> group_shift = the block's row; lane = threadIdx.x & lane_mask
  int lane_mask = 0;
  int rows_per_block = 0;
  int staged_slots = 0;  // long-row kernel: slots kept in dynamic shared memory
};

struct RmsNormPlan {
  RmsNormKernel kernel = RmsNormKernel::kAligned;
  Dims grid, block;
  int smem_bytes = 0;     // dynamic shared memory (kCluster: none used, the request caps its CTAs per SM)
  int cluster_ctas = 1;   // kCluster: CTAs per row, one cluster per row
  int chunks = 1;         // kCluster: chunks a thread walks (1: the register kernel's split; 2: the long-row one's)
  bool aligned = false;   // kCluster: the aligned path's split (every slot whole and vector-aligned)
  RmsNormSplit split;
};

// What only the device can answer, asked by the plan where it needs it (the launcher queries the occupancy of
// the kernel the candidate plan names; tests answer for a model device).
struct RmsNormOccupancy {
  // Clusters of `candidate` (kCluster) the device runs at once; 0 where it cannot run them.
  std::function<int(const RmsNormPlan& candidate)> active_clusters;
  // CTAs of `threads` threads of the persistent kernel one SM holds at once.
  std::function<int(int threads)> persistent_ctas_per_sm;
};

namespace rmsnorm {

// Every slot of every row whole and vector-aligned in every stream: the aligned kernel, no element code.
inline bool all_aligned(const RmsNormProblem& s) {
  return s.hidden % kSlotElems == 0 && rows_aligned(s.input, s.input_stride * 2, s.rows, kSlotBytes) &&
         rows_aligned(s.out, s.out_stride * s.out_elem_bytes, s.rows, s.out_elem_bytes * kSlotElems) &&
         is_aligned(s.weight, kSlotBytes) && (s.residual == nullptr || is_aligned(s.residual, kSlotBytes));
}

// One CTA per row (or several short rows per CTA): the register kernels, or the long-row kernel past them.
// How a row is split (threads per row, slots per thread) depends on the hidden size and the alignment only, so
// a row's reduction order is the same in any batch; the row count and the SM count size the grid.
inline RmsNormPlan one_cta_per_row(const RmsNormProblem& s, bool aligned, int64_t slots, const DeviceProps& dev) {
  RmsNormPlan p;
  RmsNormSplit& r = p.split;
  const int slots_per_thread = aligned ? kSlotsPerThread<true> : kSlotsPerThread<false>;
  if (slots > (aligned ? kMaxRegisterSlots<true> : kMaxRegisterSlots<false>)) {
    // One block per row walking it in chunks; as much of the row as the device allows stays in shared memory:
    // what a block may use (48 KB without opt-in everywhere) less the kernel's static reduction scratch (a
    // float per warp of the largest block).
    p.kernel = RmsNormKernel::kLongRow;
    p.block.x = kMaxThreads;
    p.grid.x = static_cast<unsigned>(s.rows);
    const int64_t smem =
        std::max(dev.max_smem_per_block, 48 * 1024) - int64_t(sizeof(float)) * (kMaxThreads / dev.warp_size);
    r.staged_slots = static_cast<int>(std::min(slots, smem / kSlotBytes));
    p.smem_bytes = r.staged_slots * kSlotBytes;
    return p;
  }
  p.kernel = aligned ? RmsNormKernel::kAligned : RmsNormKernel::kGeneral;
  int group = static_cast<int>(ceil_div<int64_t>(slots, slots_per_thread));
  int threads;
  if (group <= dev.warp_size) {
    // Short rows: a power-of-two group of lanes per row, several rows per block, a shuffle reduction. With
    // few rows the block shrinks (down to one warp) so the rows spread over more SMs.
    int shift = 0;
    while ((1 << shift) < group) ++shift;
    group = 1 << shift;
    threads = kRowsBlockThreads;
    while (threads > dev.warp_size && ceil_div<int64_t>(s.rows, threads >> shift) < dev.sms) threads /= 2;
    r.group_shift = shift;
    r.lane_mask = group - 1;
    r.rows_per_block = threads >> shift;
  } else {
    // Long rows: one block of whole warps per row, a block reduction.
    group = round_up(group, dev.warp_size);
    threads = group;
    r.group_shift = 31;  // threadIdx.x >> 31 == 0: every thread of the block works on its one row
    r.lane_mask = INT_MAX;
    r.rows_per_block = 1;
  }
  r.threads_per_row = group;
  const int64_t blocks = ceil_div<int64_t>(s.rows, r.rows_per_block);
  if (blocks > INT_MAX) {
    throw std::runtime_error("rms_norm: too many rows (" + std::to_string(s.rows) + ") for one launch");
  }
  p.grid.x = static_cast<unsigned>(blocks);
  p.block.x = static_cast<unsigned>(threads);
  return p;
}

// CTAs per row on the cluster kernel (1: none) for `rows` rows of `slots` slots split over `row_threads`
// threads. A row on one CTA streams all its bytes through one SM, so few rows leave most SMs idle and wait
// on one SM's bandwidth and latency; a cluster of C CTAs cuts each SM's share of a row by C. The largest C
// (a power of two, at most the portable 8) that still gives every CTA an SM of its own (rows * C <= SMs: more
// CTAs than SMs only queue, with no less work for the busiest SM) and kClusterMinCtaWarps warps of the row.
// On an H100/H200 (132 SMs), [rows, 16384] (512 threads per row): C = 8 up to 16 rows, 4 up to 33, 2 up to
// 66, then one CTA per row. FP8DK_RMSNORM_CLUSTER forces C wherever the row has a cluster split.
inline int ctas_per_row(int64_t rows, int64_t slots, int row_threads, const DeviceProps& dev, int forced) {
  if (row_threads == 0) return 1;  // no cluster split for this row
  if (forced >= 0) return forced < 2 ? 1 : forced;
  if (slots < kClusterMinRowSlots) return 1;
  const int warps = row_threads / dev.warp_size;
  int ctas = 1;
  for (int c = 2; c <= kMaxClusterCtas; c *= 2) {
    if (ceil_div(warps, c) < kClusterMinCtaWarps || rows * c > dev.sms) break;
    ctas = c;
  }
  return ctas;
}

// The cluster kernel's plan for the rows `one` (one CTA per row) splits: the same row_threads over the CTAs per
// row; `one` itself where the rows take no cluster.
inline RmsNormPlan cluster_candidate(const RmsNormProblem& s, const RmsNormPlan& one, int64_t slots, bool aligned,
                                     const DeviceProps& dev, int forced) {
  RmsNormPlan c = one;
  int row_threads;
  if (one.kernel == RmsNormKernel::kLongRow) {
    // The long-row kernel's split: kMaxThreads threads, chunks of kSlotsPerThread<false> slots per thread,
    // over the row's slots counted as on the general path (a row start past a 16-byte boundary adds a slot).
    const int64_t general_slots = ceil_div<int64_t>(s.hidden + kSlotElems - 1, kSlotElems);
    const int64_t chunks = ceil_div<int64_t>(general_slots, int64_t(kSlotsPerThread<false>) * kMaxThreads);
    if (chunks > kMaxClusterChunks) return one;
    row_threads = kMaxThreads;
    c.chunks = static_cast<int>(chunks);
    c.aligned = false;
  } else if (one.split.threads_per_row > dev.warp_size) {  // the register kernel, one block per row
    row_threads = one.split.threads_per_row;
    c.chunks = 1;
    c.aligned = aligned;
  } else {
    return one;  // short rows: several per block already
  }
  const int ctas = ctas_per_row(s.rows, slots, row_threads, dev, forced);
  if (ctas < 2 || s.rows > INT_MAX / ctas) return one;
  c.kernel = RmsNormKernel::kCluster;
  c.cluster_ctas = ctas;
  c.split.threads_per_row = row_threads;
  c.grid = Dims{static_cast<unsigned>(s.rows * ctas), 1, 1};
  c.block = Dims{static_cast<unsigned>(ceil_div(row_threads / dev.warp_size, ctas) * dev.warp_size), 1, 1};
  c.smem_bytes = 0;
  return c;
}

}  // namespace rmsnorm

// The plan for `s` on `dev`. On NVIDIA, few long rows take the cluster kernel where the device runs its
// clusters (the one-CTA-per-row kernel otherwise), and many aligned rows of the register kernel's
// one-block-per-row split (hidden <= 16384) take the persistent kernel when FP8DK_RMSNORM_PERSISTENT or the
// heuristic says so: more rows than the device holds CTAs at once (fewer leave nothing to prefetch), and for the
// fused op at most kPersistentMaxFusedWaves times as many. Throws std::runtime_error for a grid past 2^31 - 1.
inline RmsNormPlan plan_rms_norm(const RmsNormProblem& s, const DeviceProps& dev, const RmsNormOverrides& o,
                                 const RmsNormOccupancy& occupancy) {
  using namespace rmsnorm;
  const bool aligned = all_aligned(s);
  // Slots per row: on the general path a row starting past a 16-byte boundary may need one more.
  const int64_t slots = ceil_div<int64_t>(s.hidden + (aligned ? 0 : kSlotElems - 1), kSlotElems);
  const RmsNormPlan one = one_cta_per_row(s, aligned, slots, dev);
  if (dev.vendor != Vendor::kNvidia) return one;

  RmsNormPlan cluster = cluster_candidate(s, one, slots, aligned, dev, o.cluster);
  if (cluster.kernel == RmsNormKernel::kCluster) {
    cluster.smem_bytes = smem_for_ctas_per_sm(dev, o.ctas_per_sm < 0 ? kClusterCtasPerSm : o.ctas_per_sm);
    // Rows with a cluster split never take the persistent kernel, even where the device runs no such cluster.
    return occupancy.active_clusters(cluster) > 0 ? cluster : one;
  }
  const bool persistent_split = one.kernel == RmsNormKernel::kAligned && one.split.rows_per_block == 1 &&
                                one.block.x <= static_cast<unsigned>(kMaxPersistentThreads);
  if (!persistent_split || o.persistent == 0) return one;
  const int64_t resident = int64_t(occupancy.persistent_ctas_per_sm(one.block.x)) * dev.sms;
  if (resident == 0) return one;
  const bool fused = s.residual != nullptr;
  if (o.persistent < 0 && (s.rows <= resident || (fused && s.rows > kPersistentMaxFusedWaves * resident))) return one;
  RmsNormPlan p = one;
  p.kernel = RmsNormKernel::kPersistent;
  p.grid.x = static_cast<unsigned>(std::min(s.rows, resident));
  return p;
}

}  // namespace fp8dk
