"""skinny_gemm's launch plan (skinny_gemm/skinny_gemm_launch_plan.h) on the host, for H100, H200, A100 and MI300X
properties.

tests/plans/skinny_plans.cu compiles the plan header alone (no GPU): with nvcc for NVIDIA, and with clang and the
AMD emulator's HIP layer for AMD (the portable kernel's tiling depends on the wave size, a compile-time constant).
It prints every plan, and for the copy-engine kernel what walking the persistent grid's unit ranges gives (the
most CTAs any tile meets, CTAs with no work, units covered). The checks: which kernel runs (the copy-engine
kernel on Hopper where it can read the operands, the portable kernel on misaligned weights, K = 0, pre-Hopper
GPUs, ROCm, and under the knobs that ask for it); every plan fits the device, covers N and K exactly once, and
sizes its split-K / stream-K grid and workspace consistently; overrides are honoured and invalid ones rejected
with the variable's name. A missing nvcc is a skip outside CI and a failure in CI, as for the machine-code checks;
a missing clang-19 skips the AMD cases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "plans" / "skinny_plans.cu"
sys.path.insert(0, str(REPO / "tools" / "compile_check"))
import check  # noqa: E402

# vendor (0 NVIDIA, 1 AMD), compute capability major, SMs/CUs, shared memory a block may use (NVIDIA: opt-in),
# copy-engine code in the build, portable CTAs per SM, CTAs that clusters may hold at once (0: no clusters), and
# the clusters of 2..8 copy-engine CTAs (one per SM) that the device runs at once. An H100 SXM's are measured
# (cudaOccupancyMaxActiveClusters, session 41: benchmarks/results/nvidia-h100/session41-2026-11-28/clusters/): a
# GPC holds whole clusters, so not 132 / c. The H200 is taken to be the same chip; the PCIe part's are made up
# (the SXM's scaled by 114 / 132).
H100_CLUSTERS = (66, 39, 30, 22, 17, 15, 15)
NO_CLUSTERS = (0,) * 7
H100 = (0, 9, 132, 232448, 1, 2, 264, H100_CLUSTERS)
DEVICES = {"H100 SXM": H100, "H200": H100,
           "H100 PCIe": (0, 9, 114, 232448, 1, 2, 228, (57, 33, 25, 19, 14, 12, 12))}
A100 = (0, 8, 108, 166912, 0, 2, 0, NO_CLUSTERS)
MI300X = (1, 0, 304, 65536, 0, 4, 0, NO_CLUSTERS)
SMEM_RESERVE = 1024  # of the opt-in limit, kept back for the copy-engine kernel's static shared memory
SHAPES = [(2304, 16384), (16384, 2048), (13312, 16384), (16384, 6656), (10240, 8192), (8192, 28672), (6144, 4096),
          (28672, 4096), (1, 16), (17, 33), (300, 4176), (13312, 48), (4000, 1003), (129, 64 * 64 + 63)]
MAX_STAGES, CONSUMER_WARPS, BOX_BYTES = 16, 8, 128
ALIGN_SLACK = 1024  # kTmaAlignSlack: the dynamic shared memory is aligned up to the 1024-byte swizzle atom
NO_OVERRIDES = {"copy_engine": 1, "tma_wk": 0, "tma_rb": 0, "tma_boxes": 0, "tma_stages": 0, "tma_whole_tiles": -1,
                "block_n": 0, "split_k": 0, "stream_k": -1, "tma_cluster": -1, "tma_ahead": 0, "tma_ahead_foreign": 1}


def _fail_or_skip(reason):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def nvidia_planner(tmp_path_factory) -> Path:
    try:
        nvcc = check.find_nvcc()
    except check.ToolMissing as e:
        _fail_or_skip(f"nvcc is missing: {e}")
    exe = tmp_path_factory.mktemp("plans") / "skinny_plans_nvidia"
    subprocess.run([str(nvcc), "-std=c++17", f"-I{REPO}", "-o", str(exe), str(SOURCE)], check=True,
                   capture_output=True, text=True)
    return exe


@pytest.fixture(scope="module")
def amd_planner(tmp_path_factory) -> Path:
    """The same program under the ROCm build's macros and the AMD emulator's HIP layer (host code only)."""
    clang = shutil.which(os.environ.get("CLANGXX", "clang++-19"))
    if clang is None:
        pytest.skip("clang++-19 not found (bash tools/compile_check/install_tools.sh installs it)")
    exe = tmp_path_factory.mktemp("plans") / "skinny_plans_amd"
    # tools/amd_emu/build.py's macros: the ROCm build's, with the emulator's HIP layer.
    macros = ["-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DFP8DK_HIP_SHIM", "-D__HIP_DEVICE_COMPILE__=1",
              "-D__AMDGCN_WAVEFRONT_SIZE=64", "-D__gfx942__=1"]
    includes = ["-I", str(REPO / "tools" / "amd_emu"), "-I", str(REPO / "tools" / "compile_check"), "-I", str(REPO)]
    subprocess.run([clang, "-x", "c++", "-std=c++20", "-O1", "-fdeclspec", "-w", *macros, *includes, "-o", str(exe),
                    str(SOURCE)], check=True, capture_output=True, text=True)
    return exe


def plan_all(exe: Path, problems: list) -> list:
    """problems: (device tuple, m, n, k, elem_bytes, a_align, b_align, overrides dict) -> one plan dict each. The
    overrides may also say `waits_for_foreign_kernel=1`: the call starts during another library's kernel."""
    lines = []
    for device, m, n, k, eb, a_align, b_align, overrides in problems:
        o = {**NO_OVERRIDES, **overrides}
        waits = o.pop("waits_for_foreign_kernel", 0)
        lines.append(" ".join(map(str, (*device[:7], *device[7], m, n, k, eb, a_align, b_align, *o.values(), waits)))
                     + "\n")
    out = subprocess.run([str(exe)], input="".join(lines), check=True, capture_output=True,
                         text=True).stdout.splitlines()
    assert len(out) == len(problems)
    return [json.loads(line) for line in out]


def plan_one(exe, device, m, n, k, eb=1, a_align=16, b_align=16, **overrides) -> dict:
    return plan_all(exe, [(device, m, n, k, eb, a_align, b_align, overrides)])[0]


# ------------------------------------------------------------------------------------------ the copy-engine kernel


@pytest.fixture(scope="module")
def copy_engine_plans(nvidia_planner) -> dict:
    problems = [(device, m, n, k, eb, 16, 16, {}) for device in DEVICES.values() for n, k in SHAPES
                for m in range(1, 33) for eb in (1, 2)]
    return {(d[2], m, n, k, eb, d[3]): p for (d, m, n, k, eb, *_), p in
            zip(problems, plan_all(nvidia_planner, problems))}


def test_copy_engine_plans_legal(copy_engine_plans):
    for (sms, m, n, k, eb, smem), p in copy_engine_plans.items():
        where = f"M={m} N={n} K={k} elem={eb} SMs={sms}: {p}"
        assert p["kernel"] == "copy_engine", where
        assert p["nt"] * 8 >= m > (p["nt"] - 1) * 8, where
        assert p["wn"] * p["wk"] == CONSUMER_WARPS and p["boxes"] % p["wk"] == 0, where
        assert p["block_n"] == p["wn"] * 16 * p["rb"] <= 256, where  # a box has at most 256 rows
        assert p["box_elems"] * eb == BOX_BYTES, where
        # Every box starts on the 1024-byte swizzle atom; the barriers are 8-byte aligned and fit.
        for key in ("weight_box_bytes", "act_box_bytes", "stage_bytes"):
            assert p[key] % 1024 == 0, (key, where)
        assert 2 <= p["stages"] <= MAX_STAGES and p["barrier_offset"] % 8 == 0, where
        # The producer: the window's weights before the PDL wait, then the rest of the ring at once (session 36).
        assert 1 <= p["window"] <= p["stages"] and p["ahead"] == p["window"], where
        assert p["first_units"] == p["stages"], where
        assert p["barrier_offset"] >= p["stages"] * p["stage_bytes"] + p["red_pitch"] * 4 * 8 * p["nt"], where
        # Shared memory within the opt-in limit less the reserve, and the kernel's limit raised to exactly that.
        assert p["smem"] == p["smem_bytes"] <= smem - SMEM_RESERVE == p["smem_opt_in"], where
        # N and K covered exactly: tiles of block_n rows, K-blocks of `boxes` boxes.
        assert (p["tiles"] - 1) * p["block_n"] < n <= p["tiles"] * p["block_n"], where
        kb_elems = p["boxes"] * p["box_elems"]
        assert (p["k_blocks"] - 1) * kb_elems < k <= p["k_blocks"] * kb_elems, where
        # The persistent grid: at most one CTA per SM, each with work, every unit once; the workspace holds
        # the most contributions any tile meets (none at all where every tile has one CTA).
        assert p["grid_x"] == p["ctas"] and p["grid_y"] == 1 and p["cluster_y"] == 1, where
        assert 1 <= p["ctas"] <= sms and p["empty_ctas"] == 0, where
        assert p["covered_units"] == p["units"], where
        # Shared tiles first, then whole tiles: every CTA takes part in the shared tiles (so that the kernel's
        # closed form of a tile's contributors counts only CTAs that contribute), and at 8 tokens or fewer
        # whole tiles exist wherever the tiles outnumber the CTAs by a round.
        assert p["sk_tiles"] + p["dp_rounds"] * p["ctas"] == p["tiles"] and p["dp_rounds"] >= 0, where
        assert p["empty_sk_ctas"] == 0 and p["formula_mismatches"] == 0, where
        # No reducer warps unless asked for (FP8DK_SKINNY_TMA_REDUCERS=1).
        assert p["threads"] == 9 * 32, where
        if p["nt"] == 1:
            assert p["dp_rounds"] >= p["tiles"] // p["ctas"] - 1, where
        assert p["most_contributions"] <= p["contributions"], where
        if p["cluster_x"] > 1:
            # A cluster per tile: a tile-aligned grid, one run per CTA, each tile met by its cluster's CTAs
            # alone; they add their partials through distributed shared memory, with no workspace.
            assert p["ctas"] == p["tiles"] * p["cluster_x"] and p["cluster_x"] <= 8, where
            assert p["dp_rounds"] == 0 and p["k_blocks"] >= p["cluster_x"] == p["most_contributions"], where
            assert p["workspace_slices"] == 0, where
            # The meet's staging area (meet_tile_in_cluster): each rank's share of the tokens from each of the
            # other ranks, 16-byte aligned for the bulk copies, after the full, empty and `landed` barriers.
            c = p["cluster_x"]
            assert p["meet_rows"] == -(-m // c) and p["staging_offset"] % 16 == 0, where
            assert p["staging_offset"] >= p["barrier_offset"] + (2 * p["stages"] + 1) * 8, where
            staging_bytes = (c - 1) * p["meet_rows"] * p["red_pitch"] * 4
            assert p["smem_bytes"] == p["staging_offset"] + staging_bytes + ALIGN_SLACK, where
        else:
            assert p["workspace_slices"] == (p["contributions"] if p["contributions"] > 1 else 0), where
            assert p["meet_rows"] == 0 and p["staging_offset"] == 0, where
        # a's tensor map: the real stride, or for one row any legal one.
        assert p["a_map_stride_bytes"] == (k * eb if m > 1 else -(-k * eb // 16) * 16), where
        # wgmma (the FP8 problems here are OCP e4m3) above 8 tokens, with warpgroups of 4 warps of one row block
        # side by side (wn = 4 or 8); mma.sync, exact, at 8 tokens or fewer and for 16-bit operands.
        assert p["qgmma"] == (eb == 1 and m > 8), where
        if p["qgmma"]:
            assert p["rb"] == 1 and p["wn"] in (4, 8), where
        # A warpgroup's share of a stage is two boxes in every wgmma tiling the plan picks: all overlapped.
        assert p["qgmma_overlap"] == p["qgmma"] and (not p["qgmma"] or p["boxes"] == 2 * p["wk"]), where


def test_decode_shapes_fill_the_gpu(copy_engine_plans):
    """Large decode shapes use every SM, or one CTA per tile where that leaves at most 10% of them idle, or
    above 8 tokens at least 15/16 of them where that divides the stream-K units exactly, or at least 4/5 of them
    where that splits every tile among the same number of CTAs."""
    for (sms, m, n, k, eb, smem), p in copy_engine_plans.items():
        if n * k * eb >= (32 << 20):
            most = 16 * p["ctas"] >= 15 * sms
            balanced = m > 8 and p["dp_rounds"] == 0 and p["units"] % p["ctas"] == 0 and most
            aligned = p["ctas"] % p["tiles"] == 0 and 5 * p["ctas"] >= 4 * sms
            assert (p["ctas"] == sms or (p["ctas"] == p["tiles"] and 10 * p["tiles"] >= 9 * sms) or balanced
                    or aligned), (m, n, k, eb, p)


def test_balanced_stream_k_and_whole_tiles_above_8_tokens(nvidia_planner):
    """Above 8 tokens: 70B qkv (2560 units) on 128 CTAs of 20 units rather than 132 of 19-20; 405B gate_up, whose
    shared part leaves each CTA 18 units, ends on whole tiles."""
    for m in (16, 32):
        p = plan_one(nvidia_planner, H100, m, 10240, 8192)
        assert (p["ctas"], p["dp_rounds"], p["units"] % p["ctas"]) == (128, 0, 0), p
        q = plan_one(nvidia_planner, H100, m, 13312, 16384)
        assert q["dp_rounds"] == 1 and q["ctas"] == 132, q
        assert plan_one(nvidia_planner, H100, m, 10240, 8192, tma_whole_tiles=0)["ctas"] == 128
    assert plan_one(nvidia_planner, H100, 8, 10240, 8192)["ctas"] == 132  # 8 tokens or fewer: every SM


def test_tile_aligned_grid(nvidia_planner):
    """Fewer tiles than SMs, short runs: 405B qkv (36 tiles of 64 rows) on 36 x 3 = 108 CTAs, each streaming
    within one tile, and with 128-row tiles (forced) on 18 x 7 = 126; 70B qkv and down with 128-row tiles
    (forced; 80 and 64 tiles at 8 tokens or fewer) keep every SM, since 80 x 1 would idle 40% of them and 70B
    down's runs (27 units a CTA) are long."""
    for m in (1, 8, 16, 24, 32):
        p = plan_one(nvidia_planner, H100, m, 2304, 16384)
        assert (p["tiles"], p["ctas"], p["dp_rounds"]) == (36, 108, 0), p
    for m in (1, 8):
        p = plan_one(nvidia_planner, H100, m, 2304, 16384, tma_wk=1)
        assert (p["tiles"], p["ctas"]) == (18, 126), p
        assert plan_one(nvidia_planner, H100, m, 10240, 8192, tma_wk=1)["ctas"] == 132
        assert plan_one(nvidia_planner, H100, m, 8192, 28672, tma_wk=1)["ctas"] == 132


def test_small_problems_stream_at_least_256_kib_a_cta(nvidia_planner):
    """The grid stops growing at 256 KiB of weights a CTA, whatever a stage holds: 8B qkv (24 MiB) on 96 CTAs,
    one whole 64-row tile each (stages of 4 boxes of 64 rows: 8 units), and with 128-row tiles (forced, 8
    tokens or fewer) half a tile each (stages of 4 boxes of 128 rows: 4 units)."""
    for m in (1, 8, 16, 32):
        p = plan_one(nvidia_planner, H100, m, 6144, 4096)
        assert (p["ctas"], p["tiles"], p["dp_rounds"]) == (96, 96, 1), p
    for m in (1, 8):
        p = plan_one(nvidia_planner, H100, m, 6144, 4096, tma_wk=1)
        assert (p["ctas"], p["tiles"], p["dp_rounds"]) == (96, 48, 0), p


def test_64_row_tiles_at_few_tokens(nvidia_planner):
    """At 8 tokens or fewer mma.sync takes 64-row tiles (2 warp columns) for small problems (405B and 8B qkv:
    stages of 4 boxes) and where 128-row tiles leave SMs idle and 64-row tiles cover them (405B gate_up, 70B qkv
    and down: stages of 8 boxes, and every CTA ends on a whole tile of its own); 128-row tiles in stages of 4
    boxes where those come out at one per SM (405B o and down) or outnumber the SMs (8B gate_up)."""
    for m in (1, 8):
        for (n, k), (wk, boxes) in {(2304, 16384): (2, 4), (6144, 4096): (2, 4), (16384, 2048): (1, 4),
                                    (16384, 6656): (1, 4), (28672, 4096): (1, 4), (10240, 8192): (2, 8),
                                    (13312, 16384): (2, 8), (8192, 28672): (2, 8)}.items():
            p = plan_one(nvidia_planner, H100, m, n, k)
            assert (p["qgmma"], p["wk"], p["block_n"], p["boxes"]) == (0, wk, 128 // wk, boxes), (m, n, k, p)
            assert p["dp_rounds"] >= 1 or wk == 2 and boxes == 4, (m, n, k, p)


def test_wgmma_stage_depth(nvidia_planner):
    """Above 8 tokens wgmma over shared 64-row tiles streams stages of 4 boxes (a ring of 4-5 stages; 8 boxes
    would leave 2), whole tiles (N = 16384) stages of 2."""
    for m in (16, 32):
        for (n, k), boxes in {(10240, 8192): 4, (28672, 4096): 4, (13312, 16384): 4, (2304, 16384): 4,
                              (6144, 4096): 4, (16384, 6656): 2}.items():
            p = plan_one(nvidia_planner, H100, m, n, k)
            assert p["qgmma"] == 1 and p["boxes"] == boxes, (m, n, k, p)


def test_whole_tiles_last(nvidia_planner):
    """Where the tiles outnumber the CTAs (Llama-3.1-8B gate_up, 28672 x 4096), each CTA ends its run on whole
    tiles of its own; FP8DK_SKINNY_TMA_WHOLE_TILES=0 shares every tile by stream-K instead."""
    for m in (1, 8):
        p = plan_one(nvidia_planner, H100, m, 28672, 4096)
        assert p["dp_rounds"] >= 1 and p["sk_tiles"] + p["dp_rounds"] * p["ctas"] == p["tiles"], p
        q = plan_one(nvidia_planner, H100, m, 28672, 4096, tma_whole_tiles=0)
        assert q["dp_rounds"] == 0 and q["sk_tiles"] == q["tiles"] and q["contributions"] > 1, q
    for m in (16, 32):  # not measured faster above 8 tokens
        assert plan_one(nvidia_planner, H100, m, 28672, 4096)["dp_rounds"] == 0


def test_cluster_per_tile_where_the_grid_is_tile_aligned(nvidia_planner):
    """405B qkv's tile-aligned grid (36 tiles x 3 CTAs on 132 SMs) meets as a cluster per tile, with no workspace,
    at every token count (measured faster at 1-8 tokens since session 15, at 16-32 since session 33); never with
    FP8DK_SKINNY_TMA_CLUSTER=0."""
    for m in (1, 8, 16, 24, 32):
        p = plan_one(nvidia_planner, H100, m, 2304, 16384)
        assert p["cluster_x"] == 3 and p["ctas"] == 108 and p["workspace_slices"] == 0, p
        assert plan_one(nvidia_planner, H100, m, 2304, 16384, tma_cluster=0)["cluster_x"] == 1
    # Not tile-aligned (405B gate_up: 132 CTAs over 104 or 208 tiles): no cluster, asked for or not.
    assert plan_one(nvidia_planner, H100, 32, 13312, 16384, tma_cluster=1)["cluster_x"] == 1
    # The grids of test_skinny_gemm_gpu.py's test_cluster_meet_warp_columns: (warp columns, m, n) -> cluster.
    for (wk, m, n), ctas in {(1, 8, 2304): 7, (1, 8, 2047): 8, (2, 5, 4096): 2, (4, 8, 2048): 2,
                             (4, 32, 2047): 2}.items():
        p = plan_one(nvidia_planner, H100, m, n, 16384, tma_wk=wk, tma_cluster=1)
        assert p["kernel"] == "copy_engine" and p["wk"] == wk and p["cluster_x"] == ctas, (wk, m, n, p)


def test_clusters_only_where_the_device_runs_them_all(nvidia_planner):
    """A cluster per tile only where the device runs all the clusters at once (an H100 runs 30 of 4 CTAs and 15 of
    8): grids of 32 tiles x 4 CTAs, 24 x 5 and 16 x 8 ran their last clusters in a second wave, 1.19-1.32x slower
    than the same grids meeting in the workspace (session 41). FP8DK_SKINNY_TMA_CLUSTER=1 keeps them anyway."""
    problems = [(d, m, n, k, eb, 16, 16, {}) for d in DEVICES.values() for n in range(64, 4097, 64)
                for k in (16384, 32768) for m in (1, 8, 32) for eb in (1, 2)]
    sizes = set()
    for (d, m, n, k, eb, *_), p in zip(problems, plan_all(nvidia_planner, problems)):
        if p["kernel"] == "copy_engine" and p["cluster_x"] > 1:
            sizes.add(p["cluster_x"])
            assert d[7][p["cluster_x"] - 2] * p["cluster_x"] >= p["ctas"], (d, m, n, k, eb, p)
    assert sizes >= {2, 3, 4, 8}, sizes  # the rule keeps every size somewhere
    for n, forced in ((1024, 8), (1536, 5), (2048, 4)):  # the grids measured in session 41, FP8
        for m in (1, 32):
            p = plan_one(nvidia_planner, H100, m, n, 32768)
            assert p["cluster_x"] == 1 and p["workspace_slices"] == p["contributions"] > 1, p
            assert p["ctas"] == plan_one(nvidia_planner, H100, m, n, 32768, tma_cluster=0)["ctas"], p
            assert plan_one(nvidia_planner, H100, m, n, 32768, tma_cluster=1)["cluster_x"] == forced
    # 24 tiles x 4 CTAs (96 of the 120 the H100 runs in clusters of 4) keep theirs, as does 405B qkv (36 x 3).
    assert plan_one(nvidia_planner, H100, 1, 1536, 16384)["cluster_x"] == 4


def test_window_where_the_first_flood_is_the_stream(nvidia_planner):
    """Two stages in flight where each CTA streams one whole tile that its ring holds at least half of and two
    stages a CTA still keep 8 MiB requested (405B o on 128 CTAs, measured faster in the decode step, session 16),
    and for the 64-row tiles in 8-box stages at 8 tokens or fewer (405B gate_up, 70B qkv and down: a ring of 3
    puts 25 MB in flight; session 24); the whole ring elsewhere (8B qkv: 96 CTAs, 6 MiB with two stages, slower
    alone; 405B down: runs of 13-26 K-blocks; 405B qkv: shared tiles; the 8-box shapes above 8 tokens, and with
    a forced 4-box stage). 3 stages of the ring's 4-5 where wgmma's tiling shares tiles (OCP e4m3 above 8 tokens:
    405B qkv and gate_up, 70B qkv; session 29, the 405B GEMMs after an RMSNorm at 32 tokens); the mma.sync tilings
    (16-bit operands here) keep their rings."""
    for m in (1, 8, 16, 32):
        o = plan_one(nvidia_planner, H100, m, 16384, 2048)
        assert o["dp_rounds"] == 1 and o["sk_tiles"] == 0 and o["window"] == 2 < o["stages"], o
        for n, k in ((6144, 4096), (16384, 6656)):
            p = plan_one(nvidia_planner, H100, m, n, k)
            assert p["window"] == p["stages"], p
        qkv = plan_one(nvidia_planner, H100, m, 2304, 16384)
        assert qkv["sk_tiles"] > 0 and qkv["window"] == (qkv["stages"] if m <= 8 else 3), qkv
        for n, k in ((13312, 16384), (10240, 8192), (8192, 28672)):
            p = plan_one(nvidia_planner, H100, m, n, k)
            shared = p["sk_tiles"] > 0
            if m <= 8:
                assert p["boxes"] == 8 and p["window"] == 2 < p["stages"], (m, n, k, p)
            else:
                assert p["window"] == (3 if shared else p["stages"]) and 3 < p["stages"], (m, n, k, p)
            four_boxes = plan_one(nvidia_planner, H100, m, n, k, tma_boxes=4)
            four_shared = m > 8 and four_boxes["sk_tiles"] > 0
            assert four_boxes["window"] == (3 if four_shared else four_boxes["stages"]), (m, n, k, four_boxes)
        if m > 8:
            bf16 = plan_one(nvidia_planner, H100, m, 13312, 16384, eb=2)
            assert not bf16["qgmma"] and bf16["sk_tiles"] > 0 and bf16["window"] == bf16["stages"], bf16


def test_ring_before_the_wait_for_a_foreign_kernel(nvidia_planner):
    """A call whose CTAs start during another library's kernel (o during SDPA, under capture) and so wait at the
    PDL wait for all of it requests its whole ring's weights before that wait; after our own kernels, the window's
    (session 39). FP8DK_SKINNY_TMA_AHEAD_FOREIGN=0 keeps the window's; FP8DK_SKINNY_TMA_AHEAD wins over both."""
    for m in (1, 8, 16, 32):
        for n, k in ((16384, 2048), (2304, 16384), (13312, 16384), (6144, 4096), (17, 33)):
            own = plan_one(nvidia_planner, H100, m, n, k)
            foreign = plan_one(nvidia_planner, H100, m, n, k, waits_for_foreign_kernel=1)
            where = (m, n, k, own, foreign)
            assert own["ahead"] == own["window"] and foreign["ahead"] == foreign["stages"], where
            assert {**foreign, "ahead": own["ahead"]} == own, where  # nothing else changes
            assert foreign["first_units"] == foreign["stages"], where
            off = plan_one(nvidia_planner, H100, m, n, k, waits_for_foreign_kernel=1, tma_ahead_foreign=0)
            assert off == own, where
            forced = plan_one(nvidia_planner, H100, m, n, k, waits_for_foreign_kernel=1, tma_ahead=1)
            assert forced["ahead"] == 1, where
    o = plan_one(nvidia_planner, H100, 32, 16384, 2048, waits_for_foreign_kernel=1)
    assert o["window"] == 2 < o["ahead"] == o["stages"], o  # 405B o at 32 tokens: 2 stages become its 5


# ------------------------------------------------------------------------------------------ which kernel

KERNEL_CHOICE = [  # (what, device, m, n, k, a_align, b_align, overrides, kernel)
    ("aligned rows on Hopper", H100, 8, 2304, 16384, 16, 16, {}, "copy_engine"),
    ("rows of b 8 bytes apart", H100, 8, 2304, 16384, 16, 8, {}, "portable"),
    ("rows of a 8 bytes apart", H100, 8, 2304, 16384, 8, 16, {}, "portable"),
    ("K = 0", H100, 8, 2304, 0, 16, 16, {}, "portable"),
    ("pre-Hopper", A100, 8, 2304, 16384, 16, 16, {}, "portable"),
    ("no sm_90 code in the build", H100[:4] + (0,) + H100[5:], 8, 2304, 16384, 16, 16, {}, "portable"),
    ("Blackwell", (0, 10, 148, 232448, 1, 2, 296, NO_CLUSTERS), 8, 2304, 16384, 16, 16, {}, "portable"),
    ("FP8DK_SKINNY_TMA=0", H100, 8, 2304, 16384, 16, 16, {"copy_engine": 0}, "portable"),
    ("FP8DK_SKINNY_BLOCK_N", H100, 8, 2304, 16384, 16, 16, {"block_n": 64}, "portable"),
    ("FP8DK_SKINNY_SPLIT_K", H100, 8, 2304, 16384, 16, 16, {"split_k": 2}, "portable"),
    ("FP8DK_SKINNY_STREAM_K=0", H100, 8, 2304, 16384, 16, 16, {"stream_k": 0}, "portable"),
    ("FP8DK_SKINNY_TMA_WHOLE_TILES=0", H100, 8, 2304, 16384, 16, 16, {"tma_whole_tiles": 0}, "copy_engine"),
    ("a ring of 2 stages does not fit", H100[:3] + (40 * 1024,) + H100[4:], 32, 2304, 16384, 16, 16, {}, "portable"),
]


@pytest.mark.parametrize("what,device,m,n,k,a_align,b_align,overrides,kernel", KERNEL_CHOICE,
                         ids=[c[0] for c in KERNEL_CHOICE])
def test_kernel_choice(nvidia_planner, what, device, m, n, k, a_align, b_align, overrides, kernel):
    p = plan_one(nvidia_planner, device, m, n, k, 1, a_align, b_align, **overrides)
    assert p["kernel"] == kernel, p


def test_amd_runs_the_portable_kernel(amd_planner):
    for m in (1, 8, 9, 32):
        assert plan_one(amd_planner, MI300X, m, 2304, 16384)["kernel"] == "portable"


# ------------------------------------------------------------------------------------------ the portable kernel

PORTABLE_DEVICES = {  # name -> (planner fixture, device, warps per CTA)
    "H100": ("nvidia_planner", H100, 8), "A100": ("nvidia_planner", A100, 8), "MI300X": ("amd_planner", MI300X, 4)}
PORTABLE_OVERRIDES = [{}, {"stream_k": 0}, {"stream_k": 1}, {"split_k": 3}, {"split_k": 13}]


def check_portable(p, device, warps, m, n, k, eb, where):
    sms, smem_limit, ctas_per_sm, cluster_slots = device[2], device[3], device[5], device[6]
    assert p["kernel"] == "portable" and p["threads"] == 256, where
    assert p["mp"] == (m + 7) // 8 * 8, where
    rb = 2 if p["mp"] > 16 else 1
    assert p["wn"] * p["wk"] == warps and p["block_n"] == 16 * rb * p["wn"], where
    assert 0 < p["smem"] <= smem_limit and p["smem_opt_in"] == (p["smem"] if p["smem"] > 48 * 1024 else 0), where
    # N once: tiles of block_n rows; K once: sub-iterations of 64 bytes, K-blocks of block_elems.
    assert (p["tiles"] - 1) * p["block_n"] < n <= p["tiles"] * p["block_n"], where
    si = 64 // eb
    assert (p["sub_iters"] - 1) * si < k <= p["sub_iters"] * si or k == p["sub_iters"] == 0, where
    k_blocks = max(-(-k // p["block_elems"]), 1)
    if p["stream_k"]:
        # One CTA per slot at most, each with at least one K-block; the tiles' partial sums meet in the workspace.
        assert k > 0 and p["split_k"] == 1 and p["grid_y"] == 1 and p["cluster_y"] == 1, where
        assert 1 <= p["grid_x"] <= sms * ctas_per_sm, where
        assert p["grid_x"] * p["block_elems"] // si <= max(p["tiles"] * p["sub_iters"], p["block_elems"] // si), where
    else:
        assert (p["grid_x"], p["grid_y"]) == (p["tiles"], p["split_k"]), where
        assert 1 <= p["split_k"] <= k_blocks, where
        if p["cluster"]:
            # A cluster per tile (NVIDIA): its CTAs reduce through distributed shared memory, no workspace.
            assert device[0] == 0 and cluster_slots > 0 and 2 <= p["split_k"] <= 8, where
            assert p["cluster_y"] == p["split_k"] and p["workspace_slices"] == 0, where
        else:
            assert p["cluster_y"] == 1, where
            assert p["workspace_slices"] == (p["split_k"] if p["split_k"] > 1 else 0), where


@pytest.mark.parametrize("name", list(PORTABLE_DEVICES))
def test_portable_plans_legal(request, name):
    fixture, device, warps = PORTABLE_DEVICES[name]
    planner = request.getfixturevalue(fixture)
    problems = [(device, m, n, k, eb, 16, b_align, {"copy_engine": 0, **o}) for n, k in SHAPES + [(300, 0)]
                for m in (1, 4, 8, 9, 16, 17, 24, 32) for eb in (1, 2) for b_align in (16, 8, 1)
                for o in PORTABLE_OVERRIDES]
    for (d, m, n, k, eb, _, b_align, o), p in zip(problems, plan_all(planner, problems)):
        where = f"{name} M={m} N={n} K={k} elem={eb} b_align={b_align} {o}: {p}"
        assert "error" not in p, where
        check_portable(p, device, warps, m, n, k, eb, where)
        assert p["b_access"] == (b_align if b_align >= 8 else eb), where
        # Overrides honoured: a forced split (capped at one K-block per CTA) is a split grid; STREAM_K picks.
        if o.get("split_k"):
            cap = max(-(-k // p["block_elems"]), 1)
            assert not p["stream_k"] and p["split_k"] <= min(o["split_k"], cap), where
            assert p["split_k"] == min(o["split_k"], cap), where  # a forced split is never shrunk for clusters
        if o.get("stream_k") == 0 or k == 0:
            assert not p["stream_k"], where
        if o.get("stream_k") == 1 and k > 0:
            assert p["stream_k"], where


def test_clusters_shrink_the_split_until_they_all_run(nvidia_planner):
    """The heuristic's split on Hopper: the largest split <= min(split, 8) whose clusters the device runs at once
    (the cluster count comes from the occupancy the launcher asks the runtime for)."""
    free = plan_one(nvidia_planner, H100, 8, 2304, 16384, stream_k=0)
    assert free["cluster"] and free["split_k"] <= 8
    tight = plan_one(nvidia_planner, H100[:6] + (free["tiles"] * 2, H100_CLUSTERS), 8, 2304, 16384, stream_k=0)
    assert tight["cluster"] and tight["split_k"] == 2 and tight["cluster_y"] == 2
    none = plan_one(nvidia_planner, H100[:6] + (0, H100_CLUSTERS), 8, 2304, 16384, stream_k=0)
    assert not none["cluster"] and none["workspace_slices"] == none["split_k"] > 1


def test_forced_block_n(nvidia_planner, amd_planner):
    for planner, device, rows in ((nvidia_planner, H100, 8), (amd_planner, MI300X, 4)):
        for m, block_n in ((1, 16), (1, 32), (4, 16 * rows), (16, 64), (32, 32 * rows)):
            p = plan_one(planner, device, m, 1000, 4096 + 64, copy_engine=0, block_n=block_n, split_k=3)
            assert p["block_n"] == block_n and p["split_k"] == 3, p
        assert plan_one(planner, device, 4, 1000, 4096, block_n=16 * rows)["wk"] == 1


# ------------------------------------------------------------------------------------------ invalid overrides

INVALID = [  # (m, overrides, message)
    (32, {"block_n": 48}, "FP8DK_SKINNY_BLOCK_N must be 32 times a power of two <= 8 for M = 32, got 48"),
    (8, {"block_n": 24}, "FP8DK_SKINNY_BLOCK_N must be 16 times a power of two"),
    (32, {"block_n": 32}, "FP8DK_SKINNY_BLOCK_N = 32 is too narrow for M = 32"),
    (8, {"tma_wk": 3}, "FP8DK_SKINNY_TMA_WK must divide 8"),
    (8, {"tma_rb": 3}, "FP8DK_SKINNY_TMA_RB be 1 or 2"),
    (8, {"tma_wk": 2, "tma_boxes": 3}, "FP8DK_SKINNY_TMA_BOXES be a multiple of it"),
]


@pytest.mark.parametrize("m,overrides,message", INVALID, ids=[m for *_, m in INVALID])
def test_invalid_overrides_rejected(nvidia_planner, m, overrides, message):
    p = plan_one(nvidia_planner, H100, m, 2304, 16384, **overrides)
    assert message in p.get("error", ""), p


def read_overrides(exe, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FP8DK_")}
    out = subprocess.run([str(exe), "overrides"], env={**environ, **env}, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def test_overrides_read_from_the_environment(nvidia_planner):
    assert read_overrides(nvidia_planner) == NO_OVERRIDES
    assert read_overrides(nvidia_planner, FP8DK_SKINNY_TMA="", FP8DK_SKINNY_SPLIT_K="") == NO_OVERRIDES
    env = {"FP8DK_SKINNY_TMA": "0", "FP8DK_SKINNY_TMA_WK": "2", "FP8DK_SKINNY_TMA_RB": "1",
           "FP8DK_SKINNY_TMA_BOXES": "4", "FP8DK_SKINNY_TMA_STAGES": "3", "FP8DK_SKINNY_TMA_WHOLE_TILES": "0",
           "FP8DK_SKINNY_BLOCK_N": "64", "FP8DK_SKINNY_SPLIT_K": "5", "FP8DK_SKINNY_STREAM_K": "1",
           "FP8DK_SKINNY_TMA_CLUSTER": "1", "FP8DK_SKINNY_TMA_AHEAD": "3", "FP8DK_SKINNY_TMA_AHEAD_FOREIGN": "0"}
    assert read_overrides(nvidia_planner, **env) == {
        "copy_engine": 0, "tma_wk": 2, "tma_rb": 1, "tma_boxes": 4, "tma_stages": 3, "tma_whole_tiles": 0,
        "block_n": 64, "split_k": 5, "stream_k": 1, "tma_cluster": 1, "tma_ahead": 3, "tma_ahead_foreign": 0}


@pytest.mark.parametrize("variable,value,expected", [
    ("FP8DK_SKINNY_TMA", "on", "0 or 1"), ("FP8DK_SKINNY_STREAM_K", "yes", "0 or 1"),
    ("FP8DK_SKINNY_TMA_WHOLE_TILES", "2", "0 or 1"), ("FP8DK_SKINNY_TMA_CLUSTER", "2", "0 or 1"),
    ("FP8DK_SKINNY_TMA_AHEAD_FOREIGN", "yes", "0 or 1"),
    ("FP8DK_SKINNY_SPLIT_K", "two", "a positive integer"),
    ("FP8DK_SKINNY_SPLIT_K", "0", "a positive integer"), ("FP8DK_SKINNY_BLOCK_N", "-32", "a positive integer"),
    ("FP8DK_SKINNY_TMA_STAGES", "4x", "a positive integer")])
def test_invalid_override_values_rejected(nvidia_planner, variable, value, expected):
    assert read_overrides(nvidia_planner, **{variable: value}) == {
        "error": f"{variable} must be {expected}, got '{value}'"}
