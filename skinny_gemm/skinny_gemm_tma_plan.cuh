#pragma once
// Skinny GEMM on Hopper, part 1: the tiling of the copy-engine kernel (skinny_gemm_tma.cuh) and the plan that
// picks it from (M, N, K), the SM count and the shared memory the device offers. No torch, no device code.
//
//   * A CTA = `consumers` (8) consumer warps + 1 producer warp (+ 3 reducer warps where p.reducers), one CTA per
//     SM, persistent.
//   * A stage of the shared-memory ring holds `boxes` consecutive K-boxes: each a box of the weights
//     [block_n rows x 128 bytes of K] and one of the activations [MP tokens x 128 bytes of the same K], both
//     copied by the copy engine with the 128-byte swizzle. Several boxes per stage make each weight row's
//     run per stage longer than 128 bytes. The WN x WK consumer warps split a stage: warp (wn, wk)
//     multiplies rows [wn * 16 * RB, + 16 * RB) of boxes wk, wk + WK, ...
//   * The work is tiles x K-blocks units (a K-block = one stage). Of the tiles, `sk_tiles` are shared: CTA g
//     of G takes their units [floor(g * U / G), floor((g + 1) * U / G)) (stream-K), and the CTAs that share
//     a tile add their fp32 partials in K order (deterministic). The others follow, `dp_rounds` whole tiles
//     per CTA. Every CTA streams the same number of bytes (to a unit).
//   * Ring depth: as many stages as the shared memory holds (3-6 on an H100: 160-200 KB in flight per SM,
//     against the ~25-40 KB that Little's law asks at 3-4.8 TB/s and ~1 us). The bytes alone are not enough:
//     with 2 stages the producer refills one only after the consumers have read all of it; small problems ran
//     6-17% faster with 4-6 (session 13, the tiling comments below).
//   * Stages in flight (requested, not landed): the ring's, or 2 where a CTA's first flood would be most of its
//     stream or, at few tokens, 25 MB over the device, or 3 for wgmma's tilings with shared tiles (`window`,
//     below).
#include "common/plan.h"
#include "skinny_gemm/skinny_gemm_plan.cuh"

namespace fp8dk {
namespace skinny {

constexpr int kTmaBoxBytes = 128;        // K bytes of a box row: the span of the 128-byte swizzle
// Weights requested and not landed, over the device, below which a cap on the stages in flight does not go:
// 2.8 us of an H100's copy bandwidth. With 2 stages a CTA, 405B o on 128 CTAs keeps 8-16 MiB in flight and was
// level alone; 8B qkv on 96 CTAs kept 6 MiB and was 8% slower (session 16, the window rule below).
constexpr long long kTmaMinBytesInFlight = 8LL << 20;
constexpr int kTmaConsumerWarps = 8;
// 12 warps in all: 3 per SM sub-partition, whose 16K registers then allow 168 per thread (a 13th warp would
// cut that to 128 and spill).
constexpr int kTmaReducerWarps = 3;
constexpr int kTmaThreads = (kTmaConsumerWarps + 1 + kTmaReducerWarps) * 32;  // consumers, producer, reducers
constexpr int kTmaMaxStages = 16;        // ring barriers reserved in shared memory
// A CTA streams at least this many bytes of weights (small problems): 4 stages of 4 boxes of 128 rows, or of 8
// boxes of 64. 3 such stages instead was 4-27% slower on 8B qkv (session 12, benchmarks/results/nvidia-h100/
// session12-2026-11-26/experiments/tune-ctas-*.log): on 96 CTAs each streams exactly half a tile; on 128, CTAs
// straddle two tiles and every tile meets 3 contributions. Counted in bytes, not stages, so that the grid does
// not grow when a tiling's stages shrink to deepen the ring.
constexpr int kTmaMinWeightBytesPerCta = 256 << 10;
constexpr int kTmaAlignSlack = 1024;     // dynamic shared memory is aligned up to the swizzle atom in the kernel
constexpr int kTmaSmemReserve = 1024;    // of the opt-in limit, kept for the kernel's static shared memory

struct TmaPlan {
  int m, n, k;
  long long out_stride;  // elements
  int nt, rb;            // n-tiles of 8 tokens (template), 16-row blocks per warp (template)
  int wn, wk;            // consumer warps along N and along K
  int block_n;           // weight rows per tile = wn * 16 * rb
  int tiles;             // ceil(n / block_n)
  int boxes;             // K-boxes per stage (a multiple of wk)
  int k_blocks;          // stages along K = ceil(k * elem_bytes / (boxes * 128))
  int box_elems;         // K elements of a box row = 128 / elem_bytes
  int stages;            // ring depth
  int window;            // stages in flight (issued, not yet landed) at most: stages, or fewer (FP8DK_SKINNY_TMA_WINDOW)
  int ahead;             // stages whose weights are requested before the wait for the previous kernel: the window,
                         // the ring where that kernel is a foreign one, or 1 up to the ring (FP8DK_SKINNY_TMA_AHEAD)
  int first_units;       // units requested before the main loop's window waits: the ring, or fewer but at least the
                         // window and `ahead` (FP8DK_SKINNY_TMA_FIRST)
  int weight_box_bytes;  // block_n * 128
  int act_box_bytes;     // nt * 8 * 128
  int stage_bytes;       // boxes * (weight_box_bytes + act_box_bytes)
  int red_pitch;         // floats per token row of the partial-sum tile [wk][nt * 8][red_pitch]
  int barrier_offset;    // bytes from the aligned base to the full/empty barriers
  int smem_bytes;        // dynamic shared memory to request (alignment slack included)
  int ctas;              // persistent grid
  int sk_tiles;          // tiles 0 .. sk_tiles - 1 are shared by stream-K (their K-blocks split among the CTAs)
  int dp_rounds;         // then each CTA g computes tiles sk_tiles + g + j * ctas, j < dp_rounds, alone
  int contributions;     // most CTAs one tile meets (1: every tile computed by one CTA, no workspace)
  int qgmma;             // 1: warpgroups multiply with wgmma (skinny_gemm_qgmma.cuh), 0: warps with mma.sync
  int qgmma_overlap;     // qgmma: 1 where a warpgroup's share of a full stage is two boxes, overlap their
                         // instructions with the adds (qgmma_two_boxes); 0 box by box (qgmma_box)
  int reducers;          // 1: reducer warps take each finished run's partial sums (threads kTmaThreads); 0: the
                         // consumers reduce each run themselves before the next (kTmaThreads - the reducers')
  int cluster;           // > 1: a tile-aligned grid whose tiles' `cluster` CTAs form a thread-block cluster and
                         // add their partial sums through distributed shared memory (no workspace); 1: none
  int meet_rows;         // cluster > 1: tokens each rank finishes at most, ceil(m / cluster); else 0
  int staging_offset;    // cluster > 1: bytes from the aligned base to the peers' partials [cluster - 1][meet_rows]
                         // [red_pitch] fp32 (the meet's mbarrier `landed` follows the full/empty barriers)
};

// Overrides (tuning and tests; 0 = the plan's choice).
struct TmaOverrides {
  int wk = 0, rb = 0, boxes = 0, stages = 0;
  int whole_tiles = -1;  // 1: one CTA per tile whenever the tiles fit in one wave, and whole tiles last at any
                         // token count; 0: never (every tile shared by stream-K); -1: the plan's rule
  int qgmma = -1;        // 1: wgmma (OCP e4m3 only), 0: mma.sync, -1: the plan's choice
  int qgmma_overlap = -1;  // 0: wgmma box by box (the per-box wait before session 43), else overlapped wherever it can
  int reducers = -1;     // 1: reducer warps, 0: none, -1: the plan's choice
  int ctas = 0;          // this many CTAs, at most one per SM and one unit each (0: the plan's)
  int window = 0;        // at most this many stages in flight (0: the ring's)
  int ahead = 0;         // this many stages' weights before the PDL wait, at most the ring (0: the plan's)
  bool ahead_foreign = true;  // false: the window's weights before the wait even for a foreign kernel
  int first = 0;         // this many units requested before the main loop, at most the ring (0: the ring)
  int cluster = -1;      // 0: never a cluster per tile, 1: wherever the grid is tile-aligned, -1: the plan's rule
                         // (as 1 here; the launch plan drops clusters the device cannot run all at once)
};

// Threads of a CTA of plan p.
inline int tma_threads(const TmaPlan& p) { return kTmaThreads - (p.reducers ? 0 : kTmaReducerWarps * 32); }

// `smem_limit`: dynamic shared memory a block may opt in to; `ocp_e4m3`: the operands are OCP e4m3 (what
// wgmma multiplies); `waits_for_foreign_kernel`: the CTAs start while another library's kernel runs and wait at the
// PDL wait for its end. Returns false (p untouched) where the kernel cannot run the problem: then the portable
// kernel does.
inline bool plan_tma(int m, int n, int k, int elem_bytes, bool ocp_e4m3, bool waits_for_foreign_kernel, int sms,
                     int smem_limit, const TmaOverrides& o, TmaPlan& out) {
  if (m < 1 || m > 32 || n < 1 || k < 1) return false;
  TmaPlan p{};
  p.m = m, p.n = n, p.k = k;
  p.nt = (m + 7) / 8;
  const int mp = p.nt * 8;
  // mma.sync tilings: per token count, the best of a tuning grid on an H100 (benchmarks/results/nvidia-h100/
  // session8-2026-11-25/tune-*.json: 405B qkv, gate_up, down at M = 1..32): 512-1024 contiguous bytes of each
  // weight row per stage (4-8 boxes) beat 128-256 by 6-10% at every shape; above 8 tokens, tiles of 64 rows
  // with the boxes shared among 2-4 warp columns; above 16, two row blocks per warp (the activation fragments
  // and their FP8 unpack then serve 32 rows). Above 8 tokens, where tiles of 128 rows come out at one per SM
  // (N = 16384 on 132 SMs: 405B down and o), those with 2 boxes per stage instead: no tile is shared
  // (1.08-1.13x, down M = 16-32). At 8 tokens or fewer, small problems (under twice the minimum of weights
  // a CTA on every SM) whose 128-row tiles do not come out at one per SM take tiles of 64 rows and 2 warp
  // columns too: stages of 4 boxes of 64 rows, a ring of 6 instead of 3 (session 13, benchmarks/results/
  // nvidia-h100/session13-2026-11-26/tune/tune-wk2-*.log: 8B qkv 15-17% faster alone and 15-21% after a
  // quantization, 405B qkv 9-10% alone and -2% to +1% after it; 405B o, one 128-row tile per SM, 3-7%
  // slower, and 70B qkv, not small, within 2%).
  //
  // wgmma (OCP e4m3 above 8 tokens, session 9: benchmarks/results/nvidia-h100/session9-2026-11-25/
  // tune-qgmma.json, the 8 decode shapes at M = 1..32): the warpgroups split 4 boxes along K over 64-row
  // tiles, or, for whole tiles, stand side by side over 128 rows with 2 boxes. At M = 16-32 it beat the
  // mma.sync tilings by up to 1.3x (8B qkv M = 32) and lost nowhere by more than the noise; at M <= 8 both run
  // the same speed, and mma.sync's exact accumulation stays.
  // At most one tile per SM, idling at most a tenth of them.
  const auto about_one_per_sm = [sms](long long tiles) { return tiles <= sms && 10 * tiles >= 9 * sms; };
  const int sm_tiles = ceil_div(n, 8 * kRowBlock);  // tiles of 128 rows
  const bool tile_per_sm = about_one_per_sm(sm_tiles);
  const bool whole_tiles = p.nt >= 2 && tile_per_sm;
  const bool small = static_cast<long long>(n) * k * elem_bytes < 2LL * kTmaMinWeightBytesPerCta * sms;
  // At 8 tokens or fewer, a problem that is not small and whose 128-row tiles leave SMs idle but whose 64-row
  // tiles cover them (405B gate_up: 104 tiles or 208; 70B qkv: 80 or 160; 70B down: 64 or 128) takes 64-row
  // tiles in stages of 8 boxes: the tiles then outnumber the CTAs (or come out at one per SM), so each CTA ends
  // its run on a whole tile of its own, and a stage still carries 1 KB of each weight row (64 KB, as 4 boxes of
  // 128 rows did). Measured on an H100 (benchmarks/results/nvidia-h100/session23-2026-11-26/tune/, sweep-*/):
  // 405B gate_up at 1-8 tokens 2.7-3.1 us faster alone and after a quantization (98-102% of the copy bandwidth,
  // from 95-98%; 64-row tiles in stages of 4 boxes gained 0.9-2.3 us), and the decode step 0.36 / 0.46 ms faster
  // at batch 1 / 8; 70B down 0.8-2.4 us faster; 70B qkv level (within 0.35 us; 0.5% slower in the sweep).
  const bool half_tiles_cover = !small && !tile_per_sm && sm_tiles < sms && 20LL * sm_tiles >= 9LL * sms;
  p.qgmma = ocp_e4m3 && (o.qgmma >= 0 ? o.qgmma == 1 : p.nt >= 2) ? 1 : 0;
  int default_wk, default_rb, default_boxes;
  bool eight_box_stages = false;
  if (p.qgmma) {
    default_wk = p.nt == 1 || whole_tiles ? 1 : 2;
    default_rb = 1;
    // Shared tiles of 64 rows: stages of 4 boxes, not 8. A stage of 8 is 80-96 KB at 16-32 tokens, and the
    // ring then holds 2: the producer refills a stage only once the consumers have read all of it. With 4 the
    // ring holds 4-5 (session 13, benchmarks/results/nvidia-h100/session13-2026-11-26/tune/: 8B qkv on the
    // same 96 CTAs 13-16% faster alone and 6-9% after a quantization; 405B qkv on its tile-aligned grid below
    // 6-10% alone and -3% to +22% after it; 70B qkv and 8B gate_up had 4 since session 12). Session 12's
    // finding that 4 were slower on the two qkv shapes came from grids of twice as many units, whose CTAs
    // straddled tiles.
    default_boxes = whole_tiles ? 2 : 4;
  } else {
    const bool wk2_at_few_tokens = (small && !tile_per_sm) || half_tiles_cover;
    default_wk = whole_tiles ? 2 : p.nt == 1 ? (wk2_at_few_tokens ? 2 : 1) : p.nt == 2 ? 2 : 4;
    default_rb = whole_tiles || p.nt >= 3 ? 2 : 1;
    // 8 boxes on the 64-row tiles only: a forced wk of 1 makes 128-row tiles, whose 8-box stages would not fit twice.
    eight_box_stages = p.nt == 1 && half_tiles_cover && (o.wk ? o.wk : default_wk) == 2;
    default_boxes = whole_tiles ? 2 : p.nt == 2 || eight_box_stages ? 8 : 4;
  }
  p.rb = o.rb ? o.rb : default_rb;
  p.wk = o.wk ? o.wk : default_wk;
  p.boxes = o.boxes ? o.boxes : (default_boxes + p.wk - 1) / p.wk * p.wk;
  if ((p.rb != 1 && p.rb != 2) || kTmaConsumerWarps % p.wk != 0 || p.boxes % p.wk != 0) return false;
  // A wgmma warpgroup is 4 warps along N of one row block each: tilings forced otherwise keep mma.sync.
  if (p.rb != 1 || p.wk > 2) p.qgmma = 0;
  // A run's last stages are multiplied after the last byte: 0.7-1.4 us of every GEMM on an H100, 3 us of 405B
  // gate_up at 32 tokens. Overlapped, their boxes keep the tensor cores busy through the adds
  // (qgmma_two_boxes): up to 0.4 us a GEMM at 16-32 tokens, 0.18 ms a decode step at batch 32
  // (docs/experiments/README.md, items 107-109).
  p.qgmma_overlap = p.qgmma && p.boxes == 2 * p.wk && o.qgmma_overlap != 0 ? 1 : 0;
  p.wn = kTmaConsumerWarps / p.wk;
  p.block_n = p.wn * kRowBlock * p.rb;
  p.tiles = ceil_div(n, p.block_n);
  p.box_elems = kTmaBoxBytes / elem_bytes;
  p.k_blocks = ceil_div(static_cast<long long>(k) * elem_bytes, static_cast<long long>(p.boxes) * kTmaBoxBytes);
  p.weight_box_bytes = p.block_n * kTmaBoxBytes;
  p.act_box_bytes = mp * kTmaBoxBytes;
  p.stage_bytes = p.boxes * (p.weight_box_bytes + p.act_box_bytes);
  p.red_pitch = p.block_n + kRedPad;
  const int red_bytes = p.wk * mp * p.red_pitch * 4;
  // The full/empty barriers (and the cluster meet's, then its staging area) follow the ring's stages and red.
  const auto barrier_offset = [&](int stages) { return stages * p.stage_bytes + red_bytes; };
  const int fixed = red_bytes + 2 * kTmaMaxStages * 8 + kTmaAlignSlack;
  int stages = (smem_limit - fixed) / p.stage_bytes;
  if (stages > kTmaMaxStages) stages = kTmaMaxStages;
  if (o.stages) stages = o.stages < stages ? o.stages : stages;
  if (stages < 2) return false;
  p.stages = stages;
  p.barrier_offset = barrier_offset(stages);
  p.smem_bytes = p.barrier_offset + 2 * stages * 8 + kTmaAlignSlack;
  const long long units = static_cast<long long>(p.tiles) * p.k_blocks;
  const long long unit_bytes = static_cast<long long>(p.boxes) * p.weight_box_bytes;
  const long long min_units = (kTmaMinWeightBytesPerCta + unit_bytes - 1) / unit_bytes;
  long long ctas = o.ctas ? (o.ctas < units ? o.ctas : units) : units / min_units;
  if (ctas > sms) ctas = sms;
  if (ctas < 1) ctas = 1;
  // Nearly one tile per SM: one CTA per tile, no shared tiles. A few idle SMs cost less than the partial
  // sums' round trip through L2 and the consumers' stall while they reduce.
  const bool one_per_tile =
      o.whole_tiles >= 0 ? o.whole_tiles == 1 && p.tiles <= sms : about_one_per_sm(p.tiles);
  if (one_per_tile) ctas = p.tiles;
  // Fewer tiles than CTAs and short runs (under twice the minimum of weights a CTA): the grid of whole splits
  // of the tiles, tiles x floor(CTAs / tiles), where it keeps 4/5 of the CTAs. CTA g's units [g * U / G,
  // (g + 1) * U / G) then lie within one tile, so each CTA meets one reduction, at its end. Session 12
  // (benchmarks/results/nvidia-h100/session12-2026-11-26/experiments/tune-aligned-*.log, sweep-ccb9fcc/): 405B
  // qkv at 8 tokens or fewer (18 tiles, 4-5 units a CTA) on 126 CTAs 5-7% faster alone and 0-3% after a small
  // kernel, on 120, which straddle tiles, 1-2% slower; 70B down (64 tiles, 27-28 units a CTA: long runs) on 128
  // 0.5-1% slower than on 132. Session 13 (the stage comments above): 405B qkv in 64-row tiles (36) on 108
  // CTAs, with 4-box stages, 6-10% faster alone than on 132 above 8 tokens.
  const bool short_runs = units * unit_bytes < 2LL * kTmaMinWeightBytesPerCta * ctas;
  bool aligned_grid = false;
  if (p.tiles < ctas && short_runs && !o.ctas) {
    const long long aligned = p.tiles * (ctas / p.tiles);
    if (5 * aligned >= 4 * ctas) ctas = aligned, aligned_grid = true;
  }
  // Whole tiles last. Where the tiles outnumber the CTAs, each CTA first streams its share of the shared
  // tiles, then computes dp_rounds tiles alone: the shared tiles' reductions fall mid-run, and every run ends
  // on a tile that waits for no other CTA (no round trips through L2 after the last byte). The shared part
  // keeps at least one unit per CTA, so that every CTA between a tile's first and last contributor
  // contributes to it. At 8 tokens or fewer always (session 10, benchmarks/results/nvidia-h100/
  // session10-2026-11-25/tune/tune-4-*, tune-5-*: 8B gate_up 4% faster at 1 token, in two runs). Above 8
  // tokens only where the shared part still gives each CTA the minimum of weights: 405B gate_up
  // (9 units each in stages of 8 boxes, as then; 18 now) was 2-5% faster at 16 and 32 tokens in two runs, each
  // timing it alone and after a small kernel (session 11, benchmarks/results/nvidia-h100/session11-2026-11-26/
  // tune/); where the shared part is 1-2 units a CTA (70B qkv, 8B gate_up) it was level or up to 2% slower.
  p.dp_rounds = 0;
  if (o.whole_tiles != 0 && p.tiles >= ctas) {
    int rounds = static_cast<int>(p.tiles / ctas);
    long long shared_units = (p.tiles - rounds * ctas) * static_cast<long long>(p.k_blocks);
    if (shared_units > 0 && shared_units < ctas) --rounds, shared_units += ctas * p.k_blocks;
    const bool long_shared_runs = shared_units >= min_units * ctas;
    if (p.nt == 1 || p.tiles == ctas || o.whole_tiles == 1 || long_shared_runs) p.dp_rounds = rounds;
  }
  // Balanced stream-K above 8 tokens: where the units do not divide evenly among the CTAs, the most CTAs (at
  // least 15/16 of them) that divide them exactly. A CTA's share is then exact rather than one unit more or
  // less than its neighbours', and the idle SMs' bandwidth goes to the others (one SM alone reads at 1.5-2x
  // its share). Session 11: 70B qkv and 8B gate_up at 16-32 tokens (1280 and 1792 units of 8 boxes on 128 of 132 SMs)
  // 1-8% faster in both contexts of the tuning runs; at 8 tokens or fewer level or mixed, so not there.
  if (p.nt >= 2 && p.dp_rounds == 0 && !aligned_grid && !o.ctas) {
    for (long long c = ctas; 16 * c >= 15 * ctas; --c) {
      if (units % c == 0) {
        ctas = c;
        break;
      }
    }
  }
  p.ctas = static_cast<int>(ctas);
  p.sk_tiles = static_cast<int>(p.tiles - p.dp_rounds * ctas);
  // Two stages in flight, not the ring, where each CTA streams one whole tile and the ring holds at least half
  // of it (405B o: 4-8 K-blocks on 3-6 stages), as long as two stages a CTA still keep kTmaMinBytesInFlight of
  // weights requested. Every CTA's first flood lands at once (docs/experiments/README.md, item 28), so with the
  // whole ring in flight the consumers idle for most of such a call and then find all of it. Measured on 405B o
  // (H100, 128 CTAs, 8-16 MiB in flight with two stages) in the decode step (session 15, benchmarks/results/
  // nvidia-h100/session15-2026-11-26/experiments/window/; session 16, .../session16-2026-11-26/experiments/
  // knobs/ and window-ab/): 0.10-0.14 ms faster at batch 8 and 32, 0.04-0.09 ms at batch 1; alone level after a
  // quantization and up to 4% slower after another GEMM. 8B qkv (96 CTAs: 6 MiB with two stages) was 8% slower
  // alone (window-ab/sweep-05c7060/); 405B down (13-26 K-blocks a CTA) was 0.16 ms slower in the step with 3.
  //
  // Two stages too for the 64-row tiles in 8-box stages at 8 tokens or fewer (half_tiles_cover above): their ring
  // of 3 stages of 64 KB puts 25 MB of weights in flight at once over 132 CTAs (405B gate_up), about 8 us of the
  // copy bandwidth. In the decode step that flood starts as o's CTAs exit, while the RMSNorm between o and gate_up
  // runs, and the RMSNorm took 3.7 us longer there than the PyTorch build's at batch 1 (docs/experiments/
  // README.md, item 55); two stages keep 17 MB requested. Measured on an H100 (session 24, benchmarks/results/
  // nvidia-h100/session24-2026-11-27/experiments/gate_up-window/): the decode step 0.12 ms faster at batch 1 and
  // 0.05 ms at batch 8, and alone after a quantization within 0.4 us (405B gate_up, 70B qkv and down).
  const bool flood_is_the_stream = p.sk_tiles == 0 && p.dp_rounds == 1 && 2 * p.stages >= p.k_blocks;
  const bool eight_box_flood = eight_box_stages && p.boxes == 8;
  //
  // Three stages, not the ring (4-5), for wgmma's tilings with shared tiles (above 8 tokens: 405B qkv's
  // tile-aligned grid and gate_up's stream-K, 70B qkv, 8B gate_up), as long as they keep kTmaMinBytesInFlight
  // requested: 96 KB of weights a CTA, 10-13 MB over the device. In the decode step both 405B GEMMs follow an
  // RMSNorm, and their streams keep the bandwidth with the smaller window. Measured on an H100 in the step
  // (session 29, benchmarks/results/nvidia-h100/session29-2026-11-27/window/, window-rule/): at batch 32 qkv's
  // window alone 0.10 ms faster, gate_up's 0.09, both 0.20 ms (two rounds); at batch 16 0.07 ms. o with more than
  // its 2 stages was 0.01-0.02 ms slower, down with fewer than its 5 0.04-0.11 ms, gate_up with 2 0.17 ms. The
  // mma.sync tilings (16-bit operands, e4m3fnuz) keep their rings: not measured in the step.
  const auto keep_min_in_flight = [&](int stages) { return stages * unit_bytes * ctas >= kTmaMinBytesInFlight; };
  constexpr int kSharedWgmmaWindow = 3;
  const bool shared_wgmma = p.qgmma && p.sk_tiles > 0 && keep_min_in_flight(kSharedWgmmaWindow);
  const int window = o.window ? o.window
                     : keep_min_in_flight(2) && (flood_is_the_stream || eight_box_flood) ? 2
                     : shared_wgmma ? kSharedWgmmaWindow
                                    : p.stages;
  p.window = window < p.stages ? window : p.stages;
  // Reducer warps only when asked for (FP8DK_SKINNY_TMA_REDUCERS=1). With the plan as it is now they were 1-3%
  // faster only on 8B gate_up at 1-4 tokens and 2-13% slower on the qkv shapes (session 12, benchmarks/results/
  // nvidia-h100/session12-2026-11-26/tune/tune-reducers-*.log). (Their one-ulp reruns of session 11 were the
  // epilogue's rounding, since fixed: docs/experiments/README.md, item 19.)
  p.reducers = o.reducers >= 0 ? o.reducers : 0;
  const long long sk_units = static_cast<long long>(p.sk_tiles) * p.k_blocks;
  p.contributions = p.sk_tiles == 0 || tiles_unshared(sk_units, ctas, p.k_blocks)
                        ? 1
                        : max_contributions(sk_units, ctas, p.k_blocks);
  // A tile-aligned grid: CTAs c * t .. c * t + c - 1 stream tile t's K-blocks in order, one run each, and all
  // end together, so the last to count itself in the workspace protocol waits on two L2 round trips after its
  // last byte (store, fence and count; load the others' partials). As a cluster they meet in shared memory
  // instead, adding the partials in the same order. Session 15 (benchmarks/results/nvidia-h100/
  // session15-2026-11-26/experiments/cluster/), 405B qkv (36 tiles x 3 CTAs) after a quantization: 9-10% faster
  // at 1 and 8 tokens, level at 16, 11% slower at 32, so clusters were the rule at 8 tokens or fewer. Since
  // session 32 each peer's rows move in one bulk copy, and since session 33 the meet's first pass adds four
  // floats at a time above 8 tokens (.../session33-2026-11-27/quad-pass-short/): alone 0.4-0.5 us faster than
  // the workspace at 16-32 tokens, the decode step at batch 32 0.15 ms faster. So wherever the grid is aligned.
  // (Session 34's meet has no pass: 0.4-0.8 us faster again, .../session34-2026-11-27/lean-meet/.) The launch
  // plan then keeps the clusters only where the device runs them all at once (plan_copy_engine).
  const int per_tile = static_cast<int>(ctas / p.tiles);
  p.cluster = 1;
  p.meet_rows = p.staging_offset = 0;
  if (o.cluster != 0 && aligned_grid && !p.reducers && p.dp_rounds == 0 &&
      per_tile * p.tiles == ctas && per_tile >= 2 && per_tile <= kMaxClusterCtas && p.k_blocks >= per_tile) {
    // The meet (skinny_gemm_tma.cuh, meet_tile_in_cluster): rank r finishes tokens [r * m / c, (r + 1) * m / c)
    // of the tile, and each peer's partial sums of those rows land in its own shared memory, beside the ring and
    // red (not in the ring: a peer that ends its stream first sends before this CTA has read its last stage).
    // Room for them comes off the ring where the smem left over does not hold them.
    const int meet_rows = ceil_div(m, per_tile);
    const int staging_bytes = (per_tile - 1) * meet_rows * p.red_pitch * 4;
    const auto staging_offset = [&](int stages) {
      return (barrier_offset(stages) + (2 * stages + 1) * 8 + 15) / 16 * 16;
    };
    int stages_left = p.stages;
    while (stages_left > 2 && staging_offset(stages_left) + staging_bytes + kTmaAlignSlack > smem_limit) --stages_left;
    if (staging_offset(stages_left) + staging_bytes + kTmaAlignSlack <= smem_limit) {
      p.cluster = per_tile;
      p.meet_rows = meet_rows;
      p.stages = stages_left;
      p.window = p.window < p.stages ? p.window : p.stages;
      p.barrier_offset = barrier_offset(p.stages);
      p.staging_offset = staging_offset(p.stages);
      p.smem_bytes = p.staging_offset + staging_bytes + kTmaAlignSlack;
    }
  }
  // Before the wait for the previous kernel the producer requests the weights of the window's units: fewer
  // (1 or 2 stages) made the decode step 0.44-0.61 ms slower at batch 32, the ring's 0.17 ms
  // (docs/experiments/README.md, item 93). After the wait it requests their activations and then fills the rest
  // of the ring at once: unit `window` would otherwise wait until unit 0 has landed, and unit 0's activations
  // queue behind the window's weights. Measured in the decode step on an H100 (session 36, benchmarks/results/
  // nvidia-h100/session36-2026-11-27/first-ring/): batch 1 0.084 and 0.087 ms faster, batch 8 and 32 level
  // (-0.011, -0.018 ms). FP8DK_SKINNY_TMA_FIRST requests that many units instead (at least the window).
  // Where the CTAs start during a foreign kernel (under capture, at its launch completion: o during SDPA), they
  // wait at the PDL wait for all of it: then the whole ring's weights before the wait. In the decode step on an
  // H100 (session 39, benchmarks/results/nvidia-h100/session39-2026-11-28/ahead-foreign/): batch 32 0.151 ms and
  // batch 1 0.117 ms faster than the window's. After our own kernels, which let the next start near their end,
  // the ring's was 0.17 ms slower at batch 32 (item 93).
  const int plan_ahead = waits_for_foreign_kernel && o.ahead_foreign ? p.stages : p.window;
  p.ahead = o.ahead == 0 ? plan_ahead : o.ahead < p.stages ? o.ahead : p.stages;
  p.first_units = o.first == 0 ? p.stages : o.first > p.window ? o.first : p.window;
  p.first_units = p.ahead > p.first_units ? p.ahead : p.first_units;
  p.first_units = p.first_units < p.stages ? p.first_units : p.stages;
  out = p;
  return true;
}

}  // namespace skinny
}  // namespace fp8dk
