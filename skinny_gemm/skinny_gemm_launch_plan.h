#pragma once
// skinny_gemm's launch, decided in one place. plan_skinny_gemm() takes the problem (shape, strides, how its rows
// are aligned), the device's properties, the tuning overrides and the occupancy of the compiled kernels, and
// returns the whole launch as a LaunchPlan: the kernel, its template arguments and parameters, grid, cluster,
// shared memory and workspace. The launcher (skinny_gemm.cu) gathers those inputs, plans once and launches the
// plan as it is; the host plan tests (tests/plans) and the AMD emulator (tools/amd_emu/driver.cpp) call the same
// function. No torch, no runtime calls.
//
// Which kernel:
//   * the copy-engine kernel (skinny_gemm_tma.cuh; tiling in skinny_gemm_tma_plan.cuh) on NVIDIA compute
//     capability 9.x where this build has its sm_90 code, for K > 0 and operands whose rows the copy engine can
//     read (every row 16-byte aligned), unless FP8DK_SKINNY_TMA=0 or a knob of the portable kernel is set;
//   * the portable kernel (skinny_gemm_kernels.cuh; tiling and heuristic in skinny_gemm_plan.cuh) elsewhere.
// Split-K CTAs of the portable kernel meet through a thread-block cluster on NVIDIA where the device runs all
// clusters at once (split <= 8, no workspace), otherwise, and in the stream-K grid, through a workspace and
// arrival counters that the kernel leaves zero.
#include <stdexcept>
#include <string>

#include "common/int_math.h"
#include "common/tuning.h"
#include "common/vec.cuh"
#include "skinny_gemm/skinny_gemm_plan.cuh"
#include "skinny_gemm/skinny_gemm_tma_plan.cuh"

namespace fp8dk {
namespace skinny {

enum class Vendor { kNvidia, kAmd };

struct DeviceProps {
  Vendor vendor;
  int cc_major;            // compute capability major (NVIDIA; 0 on AMD)
  int sms;                 // SMs or CUs
  int smem_per_block;      // dynamic shared memory one block may use (NVIDIA: the opt-in limit)
  bool copy_engine_code;   // this build's copy-engine kernel has its sm_90 paths for the device
};

struct Problem {
  int m, n, k;
  int elem_bytes;                            // 1 for FP8, 2 for fp16/bf16
  bool ocp_e4m3 = false;                     // the operands are OCP e4m3 (what Hopper's wgmma multiplies)
  long long a_stride, b_stride, out_stride;  // row strides in elements (a: the rows the kernel reads)
  int a_align, b_align;                      // row_alignment() of a and b
  bool waits_for_foreign_kernel = false;     // the CTAs start while another library's kernel runs and wait at the
                                             // PDL wait for its end (CUDA graphs; starts_during_foreign_kernel)
};

// The widest access, up to 16 bytes, at which every one of `rows` rows starts.
inline int row_alignment(const void* p, long long row_stride_bytes, long long rows) {
  int w = 16;
  while (w > 1 && !rows_aligned(p, row_stride_bytes, rows, w)) w /= 2;
  return w;
}

// The FP8DK_SKINNY_* tuning overrides (README "Tuning overrides").
struct Overrides {
  bool copy_engine = true;  // FP8DK_SKINNY_TMA
  TmaOverrides tma;         // FP8DK_SKINNY_TMA_WK, _RB, _BOXES, _STAGES, _WHOLE_TILES, _QGMMA, _REDUCERS, _CTAS,
                            // _WINDOW, _AHEAD, _FIRST, _AHEAD_FOREIGN, _CLUSTER
  int block_n = 0;          // FP8DK_SKINNY_BLOCK_N (0: the heuristic's)
  int split_k = 0;          // FP8DK_SKINNY_SPLIT_K (0: the heuristic's)
  int stream_k = -1;        // FP8DK_SKINNY_STREAM_K: 1 or 0 (-1: the heuristic's)
  // Any knob of the portable kernel asks for the portable kernel.
  bool portable_forced() const { return block_n != 0 || split_k != 0 || stream_k >= 0; }
};

inline Overrides read_overrides() {
  constexpr int kMost = 1 << 20;
  constexpr const char* kPositive = "a positive integer";
  auto positive = [&](const char* name) { return tuning::integer(name, 1, kMost, 0, kPositive); };
  auto tristate = [](const char* name) { return tuning::is_set(name) ? int(tuning::flag(name, false)) : -1; };
  Overrides o;
  o.copy_engine = tuning::flag("FP8DK_SKINNY_TMA", true);
  o.tma.wk = positive("FP8DK_SKINNY_TMA_WK");
  o.tma.rb = positive("FP8DK_SKINNY_TMA_RB");
  o.tma.boxes = positive("FP8DK_SKINNY_TMA_BOXES");
  o.tma.stages = positive("FP8DK_SKINNY_TMA_STAGES");
  o.tma.whole_tiles = tristate("FP8DK_SKINNY_TMA_WHOLE_TILES");
  o.tma.qgmma = tristate("FP8DK_SKINNY_TMA_QGMMA");
  o.tma.qgmma_overlap = tristate("FP8DK_SKINNY_TMA_QGMMA_OVERLAP");
  o.tma.reducers = tristate("FP8DK_SKINNY_TMA_REDUCERS");
  o.tma.ctas = positive("FP8DK_SKINNY_TMA_CTAS");
  o.tma.window = positive("FP8DK_SKINNY_TMA_WINDOW");
  o.tma.ahead = positive("FP8DK_SKINNY_TMA_AHEAD");
  o.tma.first = positive("FP8DK_SKINNY_TMA_FIRST");
  o.tma.ahead_foreign = tuning::flag("FP8DK_SKINNY_TMA_AHEAD_FOREIGN", true);
  o.tma.cluster = tristate("FP8DK_SKINNY_TMA_CLUSTER");
  o.block_n = positive("FP8DK_SKINNY_BLOCK_N");
  o.split_k = positive("FP8DK_SKINNY_SPLIT_K");
  o.stream_k = tristate("FP8DK_SKINNY_STREAM_K");
  return o;
}

// What the plan asks of the compiled kernel it picks (the portable kernel's template arguments mp and lb, the
// copy-engine kernel's plan): the launcher asks the runtime, the emulator its model of a CU, the host tests a
// made-up device.
class Occupancy {
 public:
  // CTAs with `smem` bytes of dynamic shared memory that one SM or CU runs at once.
  virtual int ctas_per_sm(int mp, int lb, int smem) const = 0;
  // Clusters of (1, split, 1) such CTAs that the device runs at once (NVIDIA; 0 where the code has none).
  virtual int clusters_at_once(int mp, int lb, int smem, int split) const = 0;
  // Clusters of p.cluster CTAs of the copy-engine kernel as `p` launches it that the device runs at once.
  virtual int copy_engine_clusters_at_once(const TmaPlan& p) const = 0;

 protected:
  ~Occupancy() = default;
};

enum class Kernel { kPortable, kCopyEngine };

struct LaunchPlan {
  Kernel kernel = Kernel::kPortable;
  Plan portable{};                    // the portable kernel's parameters
  int mp = 0, b_access = 0;           // and its template arguments: tokens padded to 8, b's access width (LB)
  TmaPlan copy_engine{};              // the copy-engine kernel's parameters (template arguments nt, rb)
  long long a_map_stride_bytes = 0;   // copy engine: the row stride of a's tensor map
  int grid_x = 1, grid_y = 1;
  int cluster_y = 1;                  // CTAs of a cluster along y (1: no clusters)
  int cluster_x = 1;                  // ... along x (the copy-engine kernel's clusters of a tile)
  int threads = 0;
  int smem = 0;                       // dynamic shared memory per CTA
  int smem_opt_in = 0;                // the limit to raise the kernel's to before launching (0: the default)
  int workspace_slices = 0;           // fp32 partials [slices, m, n] plus an arrival counter per tile (0: none)
};

namespace plan_detail {

[[noreturn]] inline void reject(const std::string& what) { throw std::invalid_argument("skinny_gemm: " + what); }

// The copy-engine kernel's launch, or false where the portable kernel runs.
inline bool plan_copy_engine(const Problem& q, const DeviceProps& d, const Overrides& o, const Occupancy& occ,
                             LaunchPlan& l) {
  if (!o.copy_engine || o.portable_forced()) return false;
  if (q.k == 0 || q.b_align < 16) return false;
  if (d.vendor != Vendor::kNvidia || d.cc_major != 9 || !d.copy_engine_code) return false;
  const int smem_limit = d.smem_per_block - kTmaSmemReserve;
  TmaPlan& p = l.copy_engine;
  const auto plan = [&](const TmaOverrides& tma) {
    return plan_tma(q.m, q.n, q.k, q.elem_bytes, q.ocp_e4m3, q.waits_for_foreign_kernel, d.sms, smem_limit, tma,
                    p);
  };
  if (!plan(o.tma)) {
    if (o.tma.wk || o.tma.rb || o.tma.boxes || o.tma.stages)
      reject("FP8DK_SKINNY_TMA_WK must divide " + std::to_string(kTmaConsumerWarps) +
             ", FP8DK_SKINNY_TMA_BOXES be a multiple of it, FP8DK_SKINNY_TMA_RB be 1 or 2, and the ring hold 2 "
             "stages");
    return false;
  }
  // Clusters only where the device runs all of them at once. A GPC holds whole clusters, so an H100 runs 30 of 4
  // CTAs (120), 22 of 5 (110) and 15 of 8 (120) at one CTA per SM, not 132 / c: grids of 32 tiles x 4 CTAs,
  // 24 x 5 and 16 x 8 ran their last clusters in a second wave, 1.19-1.32x slower than the same grids without
  // clusters and slower than torch._scaled_mm (docs/experiments/README.md, item 104). Without clusters the tile's
  // CTAs meet in the workspace. FP8DK_SKINNY_TMA_CLUSTER=1 keeps them anyway.
  if (p.cluster > 1 && o.tma.cluster < 0 &&
      static_cast<long long>(occ.copy_engine_clusters_at_once(p)) * p.cluster < p.ctas) {
    TmaOverrides unclustered = o.tma;
    unclustered.cluster = 0;
    if (!plan(unclustered)) return false;
  }
  p.out_stride = q.out_stride;
  if (q.a_align < 16) return false;
  // One row's stride is never used: give the copy engine a legal one.
  l.a_map_stride_bytes = q.m == 1 ? round_up(static_cast<long long>(q.k) * q.elem_bytes, 16LL)
                                  : q.a_stride * q.elem_bytes;
  l.kernel = Kernel::kCopyEngine;
  l.grid_x = p.ctas;
  l.threads = tma_threads(p);
  l.smem = p.smem_bytes;
  // Always the most any plan asks, so that the kernel's limit never drops below a captured launch's.
  l.smem_opt_in = smem_limit;
  l.cluster_x = p.cluster;
  l.workspace_slices = p.contributions > 1 && p.cluster == 1 ? p.contributions : 0;
  return true;
}

// Steps 1-3 and 5 of the heuristic (skinny_gemm_plan.cuh) with the overrides: the portable kernel's tiling and
// its split grid or stream-K.
inline void plan_tiling(const Problem& q, const DeviceProps& d, const Overrides& o, LaunchPlan& l) {
  const Shape shape{q.m, q.n, q.k, q.elem_bytes};
  const int eb = q.elem_bytes, sms = d.sms;
  const int mp = padded_m(shape.m), rb = row_blocks(mp), rows_per_warp = kRowBlock * rb;
  const int lb = q.b_align >= 8 ? q.b_align : eb;

  const int split_wn = default_wn(shape, sms);
  const bool stream_k =
      shape.k > 0 && !o.split_k &&
      (o.stream_k >= 0 ? o.stream_k == 1
                       : prefer_stream_k(shape, split_wn, default_split_k(shape, split_wn, lb, sms), lb, sms));
  int wn = stream_k ? min_wn(shape) : split_wn;
  if (o.block_n) {
    wn = o.block_n / rows_per_warp;
    if (o.block_n % rows_per_warp != 0 || wn > kWarps || !is_pow2(wn))
      reject("FP8DK_SKINNY_BLOCK_N must be " + std::to_string(rows_per_warp) + " times a power of two <= " +
             std::to_string(kWarps) + " for M = " + std::to_string(q.m) + ", got " + std::to_string(o.block_n));
  }
  int split_k = stream_k ? 1 : default_split_k(shape, wn, lb, sms);
  if (o.split_k) {
    const int most = max_split_k(shape, wn, lb);
    split_k = o.split_k < most ? o.split_k : most;
  }
  if (shape.k == 0) split_k = 1;

  Plan& p = l.portable;
  p.m = shape.m, p.n = shape.n, p.k = shape.k;
  p.a_stride = q.a_stride, p.b_stride = q.b_stride, p.out_stride = q.out_stride;
  p.wn = wn, p.wk = kWarps / wn;
  p.block_n = rows_per_warp * wn;
  p.tiles = static_cast<int>(ceil_div<long long>(shape.n, p.block_n));
  p.stream_k = stream_k;
  p.split_k = split_k;
  p.cluster = 0;
  p.sub_iters = ceil_div(shape.k, sub_iter_elems(eb));
  p.block_elems = p.wk * iters_per_block(rb, lb) * sub_iter_elems(eb);
  p.chunk_shift = 0;
  while ((kChunkBytes / eb) << (p.chunk_shift + 1) <= p.block_elems) ++p.chunk_shift;
  p.act_buf_bytes = shape.m * act_pitch(p.block_elems, 2);  // staged as 16-bit at most

  const long long stage_bytes = static_cast<long long>(shape.m) * p.block_elems * eb;
  if (ceil_div(stage_bytes / kChunkBytes, static_cast<long long>(kThreads)) > kMaxStageChunks)
    reject("FP8DK_SKINNY_BLOCK_N = " + std::to_string(p.block_n) + " is too narrow for M = " + std::to_string(q.m) +
           " (activation staging exceeds " + std::to_string(kMaxStageChunks) +
           " chunks per thread); use a larger block");
  l.mp = mp;
  l.b_access = lb;
  l.threads = kThreads;
  l.smem = smem_bytes(p.act_buf_bytes, p.wk, mp, p.block_n);
  if (l.smem > d.smem_per_block)
    reject("the tiling needs " + std::to_string(l.smem) + " bytes of shared memory, more than the device offers");
  l.smem_opt_in = l.smem > 48 * 1024 ? l.smem : 0;
}

// The portable kernel's grid: a stream-K grid sized from the kernel's occupancy, or the split grid, whose split
// CTAs meet in a cluster where the device runs all the clusters at once (the split may shrink for that: step 4).
inline void plan_grid(const DeviceProps& d, bool split_forced, const Occupancy& occ, LaunchPlan& l) {
  Plan& p = l.portable;
  int shared_slices = p.split_k > 1 ? p.split_k : 0;  // contributions per tile that meet in the workspace
  l.grid_x = p.tiles;
  l.grid_y = p.split_k;
  if (p.stream_k) {
    // One CTA per slot of the GPU, each with an equal run of units.
    const long long units = static_cast<long long>(p.tiles) * p.sub_iters;
    const long long slots = static_cast<long long>(d.sms) * occ.ctas_per_sm(l.mp, l.b_access, l.smem);
    const long long ctas = stream_k_ctas(units, slots, p.wk * iters_per_block(row_blocks(l.mp), l.b_access));
    l.grid_x = static_cast<int>(ctas);
    shared_slices = tiles_unshared(units, ctas, p.sub_iters) ? 0 : max_contributions(units, ctas, p.sub_iters);
  } else if (d.vendor == Vendor::kNvidia && p.split_k > 1) {
    auto clusters_at_once = [&](int split) { return occ.clusters_at_once(l.mp, l.b_access, l.smem, split); };
    if (split_forced) {
      p.cluster = p.split_k <= kMaxClusterCtas && clusters_at_once(p.split_k) > 0;
    } else {
      // The largest split <= the planned one whose clusters all run at once.
      for (int split = p.split_k < kMaxClusterCtas ? p.split_k : kMaxClusterCtas; split > 1 && !p.cluster;
           --split) {
        if (clusters_at_once(split) >= l.grid_x) {
          p.split_k = split;
          p.cluster = 1;
        }
      }
      l.grid_y = p.split_k;
    }
  }
  l.cluster_y = p.cluster ? l.grid_y : 1;
  l.workspace_slices = p.cluster ? 0 : shared_slices;
}

}  // namespace plan_detail

// The launch of out[m, n] = a[m, k] @ b[n, k]^T. Throws std::invalid_argument for overrides the problem cannot
// take (the message names the variable).
inline LaunchPlan plan_skinny_gemm(const Problem& q, const DeviceProps& d, const Overrides& o,
                                   const Occupancy& occ) {
  if ((d.vendor == Vendor::kAmd) != (kWarpSize == 64))
    throw std::logic_error("skinny_gemm: the plan was compiled for the other vendor's warp size");
  LaunchPlan l;
  if (plan_detail::plan_copy_engine(q, d, o, occ, l)) return l;
  l = LaunchPlan{};
  plan_detail::plan_tiling(q, d, o, l);
  plan_detail::plan_grid(d, o.split_k > 0, occ, l);
  return l;
}

}  // namespace skinny
}  // namespace fp8dk
