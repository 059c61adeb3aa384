// Host program for tests/test_plans.py: prints, for every problem on its stdin ("m n k elem_bytes sms
// smem_limit" per line), the copy-engine kernel's plan (skinny_gemm_tma_plan.cuh) and, by walking the
// persistent grid's unit ranges exactly as the kernel does, the most contributions any tile meets. No GPU.
#include <cstdio>

#include "skinny_gemm/skinny_gemm_tma_plan.cuh"

using fp8dk::skinny::TmaOverrides;
using fp8dk::skinny::TmaPlan;

int main() {
  int m, n, k, eb, sms, smem;
  while (std::scanf("%d %d %d %d %d %d", &m, &n, &k, &eb, &sms, &smem) == 6) {
    TmaPlan p;
    if (!fp8dk::skinny::plan_tma(m, n, k, eb, eb == 1, sms, smem, TmaOverrides{}, p)) {
      std::printf("{\"planned\": false}\n");
      continue;
    }
    // CTA g takes units [g * U / G, (g + 1) * U / G); count, per tile, the CTAs whose range reaches into it.
    const long long units = static_cast<long long>(p.tiles) * p.k_blocks;
    int most = 0, empty_ctas = 0;
    long long covered = 0;
    for (int tile = 0; tile < p.tiles; ++tile) {
      int count = 0;
      for (long long g = 0; g < p.ctas; ++g) {
        const long long begin = g * units / p.ctas, end = (g + 1) * units / p.ctas;
        if (begin < (tile + 1LL) * p.k_blocks && end > static_cast<long long>(tile) * p.k_blocks) ++count;
      }
      most = count > most ? count : most;
    }
    for (long long g = 0; g < p.ctas; ++g) {
      const long long begin = g * units / p.ctas, end = (g + 1) * units / p.ctas;
      empty_ctas += end <= begin;
      covered += end - begin;
    }
    std::printf(
        "{\"planned\": true, \"nt\": %d, \"rb\": %d, \"wn\": %d, \"wk\": %d, \"block_n\": %d, \"tiles\": %d, "
        "\"boxes\": %d, \"k_blocks\": %d, \"box_elems\": %d, \"stages\": %d, \"stage_bytes\": %d, "
        "\"weight_box_bytes\": %d, \"act_box_bytes\": %d, \"red_pitch\": %d, \"barrier_offset\": %d, "
        "\"smem_bytes\": %d, \"ctas\": %d, \"contributions\": %d, \"most_contributions\": %d, "
        "\"empty_ctas\": %d, \"covered_units\": %lld, \"units\": %lld}\n",
        p.nt, p.rb, p.wn, p.wk, p.block_n, p.tiles, p.boxes, p.k_blocks, p.box_elems, p.stages, p.stage_bytes,
        p.weight_box_bytes, p.act_box_bytes, p.red_pitch, p.barrier_offset, p.smem_bytes, p.ctas, p.contributions,
        most, empty_ctas, covered, units);
  }
  return 0;
}
