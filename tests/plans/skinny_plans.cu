// Host program for tests/test_plans.py: prints, for every problem on its stdin, skinny_gemm's launch plan
// (skinny_gemm/skinny_gemm_launch_plan.h) as one JSON line, or the error the plan throws. No GPU: nvcc compiles it
// for NVIDIA, clang (with the AMD emulator's HIP layer) for AMD. A line is
//   vendor(0 NVIDIA, 1 AMD) cc_major sms smem_per_block copy_engine_code ctas_per_sm cluster_slots
//   copy_engine_clusters[2..8]
//   m n k elem_bytes a_align b_align
//   copy_engine tma_wk tma_rb tma_boxes tma_stages tma_whole_tiles block_n split_k stream_k tma_cluster
//   tma_ahead tma_ahead_foreign waits_for_foreign_kernel
// The made-up occupancy: `ctas_per_sm` CTAs of the portable kernel per SM, and clusters of `split` CTAs up to
// `cluster_slots` CTAs in all (0: no clusters); of the copy-engine kernel (one CTA per SM), copy_engine_clusters[c]
// clusters of c CTAs. For the copy-engine kernel the program also walks the persistent
// grid's unit ranges exactly as the kernel does: the most CTAs any tile meets, CTAs with no work, units covered.
// `skinny_plans overrides` prints instead the overrides the launcher reads from this process's environment.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "skinny_gemm/skinny_gemm_launch_plan.h"

using namespace fp8dk::skinny;

namespace {

constexpr int kMostClusterCtas = 8;

class MadeUpOccupancy final : public Occupancy {
 public:
  MadeUpOccupancy(int ctas_per_sm, int cluster_slots, const int* copy_engine_clusters)
      : ctas_per_sm_(ctas_per_sm), cluster_slots_(cluster_slots), copy_engine_clusters_(copy_engine_clusters) {}
  int ctas_per_sm(int, int, int) const override { return ctas_per_sm_; }
  int clusters_at_once(int, int, int, int split) const override { return cluster_slots_ / split; }
  int copy_engine_clusters_at_once(const TmaPlan& p) const override {
    if (p.cluster < 2 || p.cluster > kMostClusterCtas) throw std::logic_error("no clusters of that size");
    return copy_engine_clusters_[p.cluster];
  }

 private:
  int ctas_per_sm_, cluster_slots_;
  const int* copy_engine_clusters_;
};

void print_copy_engine(const LaunchPlan& l) {
  const TmaPlan& p = l.copy_engine;
  // CTA g takes units [g * U / G, (g + 1) * U / G) of the shared tiles (U = sk_tiles * k_blocks), then whole
  // tiles sk_tiles + g + j * G, j < dp_rounds. Count, per shared tile, the CTAs whose range reaches into it,
  // and compare with the kernel's closed form (skinny_gemm_tma.cuh, tile_contributions).
  const long long units = static_cast<long long>(p.tiles) * p.k_blocks;
  const long long sk_units = static_cast<long long>(p.sk_tiles) * p.k_blocks;
  int most = 0, empty_ctas = 0, empty_sk_ctas = 0, formula_mismatches = 0;
  long long covered = 0;
  for (int tile = 0; tile < p.sk_tiles; ++tile) {
    int count = 0;
    for (long long g = 0; g < p.ctas; ++g) {
      const long long begin = g * sk_units / p.ctas, end = (g + 1) * sk_units / p.ctas;
      if (begin < (tile + 1LL) * p.k_blocks && end > static_cast<long long>(tile) * p.k_blocks) ++count;
    }
    const long long first = ((static_cast<long long>(tile) * p.k_blocks + 1) * p.ctas - 1) / sk_units;
    const long long last = ((static_cast<long long>(tile) + 1) * p.k_blocks * p.ctas - 1) / sk_units;
    formula_mismatches += last - first + 1 != count;
    most = count > most ? count : most;
  }
  if (p.dp_rounds > 0 && most < 1) most = 1;
  for (long long g = 0; g < p.ctas; ++g) {
    const long long begin = g * sk_units / p.ctas, end = (g + 1) * sk_units / p.ctas;
    empty_sk_ctas += p.sk_tiles > 0 && end <= begin;
    empty_ctas += end - begin + static_cast<long long>(p.dp_rounds) * p.k_blocks <= 0;
    covered += end - begin + static_cast<long long>(p.dp_rounds) * p.k_blocks;
  }
  std::printf(
      "\"nt\": %d, \"rb\": %d, \"wn\": %d, \"wk\": %d, \"block_n\": %d, \"tiles\": %d, \"boxes\": %d, "
      "\"k_blocks\": %d, \"box_elems\": %d, \"stages\": %d, \"stage_bytes\": %d, \"weight_box_bytes\": %d, "
      "\"act_box_bytes\": %d, \"red_pitch\": %d, \"barrier_offset\": %d, \"smem_bytes\": %d, \"ctas\": %d, "
      "\"sk_tiles\": %d, \"dp_rounds\": %d, \"contributions\": %d, \"most_contributions\": %d, "
      "\"empty_ctas\": %d, \"empty_sk_ctas\": %d, \"formula_mismatches\": %d, \"covered_units\": %lld, "
      "\"units\": %lld, \"a_map_stride_bytes\": %lld, \"qgmma\": %d, \"qgmma_overlap\": %d, \"window\": %d, "
      "\"ahead\": %d, \"first_units\": %d, \"meet_rows\": %d, \"staging_offset\": %d",
      p.nt, p.rb, p.wn, p.wk, p.block_n, p.tiles, p.boxes, p.k_blocks, p.box_elems, p.stages, p.stage_bytes,
      p.weight_box_bytes, p.act_box_bytes, p.red_pitch, p.barrier_offset, p.smem_bytes, p.ctas, p.sk_tiles,
      p.dp_rounds, p.contributions, most, empty_ctas, empty_sk_ctas, formula_mismatches, covered, units,
      l.a_map_stride_bytes, p.qgmma, p.qgmma_overlap, p.window, p.ahead, p.first_units, p.meet_rows, p.staging_offset);
}

void print_portable(const LaunchPlan& l) {
  const Plan& p = l.portable;
  std::printf(
      "\"mp\": %d, \"b_access\": %d, \"wn\": %d, \"wk\": %d, \"block_n\": %d, \"tiles\": %d, \"stream_k\": %d, "
      "\"split_k\": %d, \"cluster\": %d, \"sub_iters\": %d, \"block_elems\": %d, \"act_buf_bytes\": %d",
      l.mp, l.b_access, p.wn, p.wk, p.block_n, p.tiles, p.stream_k, p.split_k, p.cluster, p.sub_iters,
      p.block_elems, p.act_buf_bytes);
}

int print_overrides() {
  try {
    const Overrides o = read_overrides();
    std::printf(
        "{\"copy_engine\": %d, \"tma_wk\": %d, \"tma_rb\": %d, \"tma_boxes\": %d, \"tma_stages\": %d, "
        "\"tma_whole_tiles\": %d, \"block_n\": %d, \"split_k\": %d, \"stream_k\": %d, \"tma_cluster\": %d, "
        "\"tma_ahead\": %d, \"tma_ahead_foreign\": %d}\n",
        o.copy_engine, o.tma.wk, o.tma.rb, o.tma.boxes, o.tma.stages, o.tma.whole_tiles, o.block_n, o.split_k,
        o.stream_k, o.tma.cluster, o.tma.ahead, int(o.tma.ahead_foreign));
  } catch (const std::invalid_argument& e) {
    std::printf("{\"error\": \"%s\"}\n", e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "overrides") return print_overrides();
  int vendor, copy_engine_code, ctas_per_sm, cluster_slots, copy_engine;
  int copy_engine_clusters[kMostClusterCtas + 1] = {};
  DeviceProps d;
  Problem q;
  Overrides o;
  int ahead_foreign, waits_for_foreign_kernel;
  auto read_device = [&] {
    if (std::scanf("%d %d %d %d %d %d %d", &vendor, &d.cc_major, &d.sms, &d.smem_per_block, &copy_engine_code,
                   &ctas_per_sm, &cluster_slots) != 7)
      return false;
    for (int c = 2; c <= kMostClusterCtas; ++c)
      if (std::scanf("%d", &copy_engine_clusters[c]) != 1) return false;
    return true;
  };
  while (read_device() &&
         std::scanf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", &q.m, &q.n, &q.k, &q.elem_bytes,
                    &q.a_align, &q.b_align, &copy_engine, &o.tma.wk, &o.tma.rb, &o.tma.boxes, &o.tma.stages,
                    &o.tma.whole_tiles, &o.block_n, &o.split_k, &o.stream_k, &o.tma.cluster, &o.tma.ahead,
                    &ahead_foreign, &waits_for_foreign_kernel) == 19) {
    d.vendor = vendor ? Vendor::kAmd : Vendor::kNvidia;
    d.copy_engine_code = copy_engine_code != 0;
    o.copy_engine = copy_engine != 0;
    o.tma.ahead_foreign = ahead_foreign != 0;
    q.waits_for_foreign_kernel = waits_for_foreign_kernel != 0;
    q.a_stride = q.b_stride = q.k;
    q.out_stride = q.n;
    q.ocp_e4m3 = q.elem_bytes == 1;  // FP8 problems as OCP e4m3: the copy engine's wgmma plans are planned too
    LaunchPlan l;
    try {
      l = plan_skinny_gemm(q, d, o, MadeUpOccupancy(ctas_per_sm, cluster_slots, copy_engine_clusters));
    } catch (const std::invalid_argument& e) {
      std::printf("{\"error\": \"%s\"}\n", e.what());
      continue;
    }
    const bool copy_engine_kernel = l.kernel == Kernel::kCopyEngine;
    std::printf(
        "{\"kernel\": \"%s\", \"grid_x\": %d, \"grid_y\": %d, \"cluster_x\": %d, \"cluster_y\": %d, "
        "\"threads\": %d, \"smem\": %d, \"smem_opt_in\": %d, \"workspace_slices\": %d, ",
        copy_engine_kernel ? "copy_engine" : "portable", l.grid_x, l.grid_y, l.cluster_x, l.cluster_y, l.threads,
        l.smem, l.smem_opt_in, l.workspace_slices);
    if (copy_engine_kernel)
      print_copy_engine(l);
    else
      print_portable(l);
    std::printf("}\n");
  }
  return 0;
}
