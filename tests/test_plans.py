"""The copy-engine GEMM's plan (skinny_gemm/skinny_gemm_tma_plan.cuh) on the host, for Hopper's properties.

tests/plans/tma_plans.cu compiles the plan header alone (nvcc, host code only: no GPU needed) and prints every
plan together with what walking the persistent grid's unit ranges gives (the most CTAs any tile meets, CTAs
with no work, units covered). The checks: every decode shape and odd shape at every M = 1..32 gets a plan that
fits the device (shared memory, box and swizzle alignment, barrier slots), covers N and K exactly once, gives
every CTA work, and sizes the workspace for the most contributions a tile really meets. A missing nvcc is a
skip outside CI and a failure in CI, as for the machine-code checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "compile_check"))
import check  # noqa: E402

# (SMs, dynamic shared memory a block may opt in to, less the 1 KB the launcher keeps back).
DEVICES = {"H100 SXM": (132, 232448 - 1024), "H200": (132, 232448 - 1024), "H100 PCIe": (114, 232448 - 1024)}
SHAPES = [(2304, 16384), (16384, 2048), (13312, 16384), (16384, 6656), (10240, 8192), (8192, 28672), (6144, 4096),
          (28672, 4096), (1, 16), (17, 33), (300, 4176), (13312, 48), (4000, 1003), (129, 64 * 64 + 63)]
MAX_STAGES, CONSUMER_WARPS, BOX_BYTES = 16, 8, 128


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict:
    try:
        nvcc = check.find_nvcc()
    except check.ToolMissing as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and nvcc is missing: {e}")
        pytest.skip(str(e))
    exe = tmp_path_factory.mktemp("plans") / "tma_plans"
    subprocess.run([str(nvcc), "-std=c++17", f"-I{REPO}", "-o", str(exe), str(REPO / "tests/plans/tma_plans.cu")],
                   check=True, capture_output=True, text=True)
    problems = [(m, n, k, eb, sms, smem) for sms, smem in DEVICES.values() for n, k in SHAPES
                for m in range(1, 33) for eb in (1, 2)]
    out = subprocess.run([str(exe)], input="".join(" ".join(map(str, p)) + "\n" for p in problems),
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == len(problems)
    return {p: json.loads(line) for p, line in zip(problems, out)}


def test_every_problem_planned_and_legal(plans):
    for (m, n, k, eb, sms, smem), p in plans.items():
        where = f"M={m} N={n} K={k} elem={eb} SMs={sms}: {p}"
        assert p["planned"], where
        assert p["nt"] * 8 >= m > (p["nt"] - 1) * 8, where
        assert p["wn"] * p["wk"] == CONSUMER_WARPS and p["boxes"] % p["wk"] == 0, where
        assert p["block_n"] == p["wn"] * 16 * p["rb"] <= 256, where  # a box has at most 256 rows
        assert p["box_elems"] * eb == BOX_BYTES, where
        # Every box starts on the 1024-byte swizzle atom; the barriers are 8-byte aligned and fit.
        for key in ("weight_box_bytes", "act_box_bytes", "stage_bytes"):
            assert p[key] % 1024 == 0, (key, where)
        assert 2 <= p["stages"] <= MAX_STAGES and p["barrier_offset"] % 8 == 0, where
        assert p["barrier_offset"] >= p["stages"] * p["stage_bytes"] + p["red_pitch"] * 4 * 8 * p["nt"], where
        assert p["smem_bytes"] <= smem, where
        # N and K covered exactly: tiles of block_n rows, K-blocks of `boxes` boxes.
        assert (p["tiles"] - 1) * p["block_n"] < n <= p["tiles"] * p["block_n"], where
        kb_elems = p["boxes"] * p["box_elems"]
        assert (p["k_blocks"] - 1) * kb_elems < k <= p["k_blocks"] * kb_elems, where
        # The persistent grid: at most one CTA per SM, each with work, every unit once; the workspace holds
        # the most contributions any tile meets (1: no workspace at all).
        assert 1 <= p["ctas"] <= sms and p["empty_ctas"] == 0, where
        assert p["covered_units"] == p["units"], where
        assert p["most_contributions"] <= p["contributions"], where


def test_decode_shapes_fill_the_gpu(plans):
    """Large decode shapes use every SM, or one CTA per tile where that leaves at most 10% of them idle."""
    for (m, n, k, eb, sms, smem), p in plans.items():
        if n * k * eb >= (32 << 20):
            assert p["ctas"] == sms or (p["ctas"] == p["tiles"] and 10 * p["tiles"] >= 9 * sms), (m, n, k, eb, p)
