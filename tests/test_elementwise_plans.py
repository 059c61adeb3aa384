"""The elementwise ops' launch plans on the host (rmsnorm_plan.h, swiglu_plan.h, quantize_plan.h), for an MI300X
and an H100: tests/plans/elementwise_plans.cpp compiles the plan headers alone with g++ (torch- and GPU-free) and
prints each plan. The checks: every row and column covered exactly once, legal blocks, shared memory within the
device's limit, the cluster and persistent kernels only on NVIDIA and only where the device runs them, the
tuning overrides honoured, and malformed override values rejected with the variable's name. A missing g++ is a
skip outside CI and a failure in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

NVIDIA, AMD = 0, 1
# vendor, SMs/CUs, warp width, dynamic shared memory a block may use (H100: the 227 KiB opt-in; MI300X: 64 KiB LDS),
# shared memory of one SM/CU, and what the runtime reserves of it per CTA
H100 = (NVIDIA, 132, 32, 232448, 233472, 1024)
MI300X = (AMD, 304, 64, 65536, 65536, 0)
CAPPED_STATIC_SMEM = 1024  # common/plan.h, kCappedStaticSmem
CLUSTER_CTAS_PER_SM = 2  # rmsnorm_plan.h, kClusterCtasPerSm
DEVICES = {"H100": H100, "MI300X": MI300X}
ALIGNED, GENERAL, LONG_ROW, CLUSTER, PERSISTENT = range(5)
HIDDEN = [1, 7, 8, 64, 100, 513, 1024, 2048, 4095, 4096, 5120, 8192, 12288, 16384, 16385, 20000, 32768, 40003,
          65536, 131072]
ROWS = [1, 2, 3, 16, 17, 33, 66, 67, 131, 132, 133, 600, 4096, 100000]


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and no C++ compiler (g++) found")
        pytest.skip("no C++ compiler (g++) found")
    exe = tmp_path_factory.mktemp("plans") / "elementwise_plans"
    subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{REPO}", "-o", str(exe),
                    str(REPO / "tests/plans/elementwise_plans.cpp")], check=True, capture_output=True, text=True)

    def run(lines: list[str]) -> list[dict]:
        out = subprocess.run([str(exe)], input="".join(line + "\n" for line in lines), check=True,
                             capture_output=True, text=True).stdout.splitlines()
        assert len(out) == len(lines)
        return [json.loads(line) for line in out]

    return run


def rms_line(dev, rows, hidden, *, in_off=0, in_stride=None, out_off=0, out_stride=None, out_bytes=2, residual=0,
             active_clusters=1, ctas_per_sm=4, cluster=-1, persistent=-1, cap=-1):
    in_stride = hidden if in_stride is None else in_stride
    out_stride = hidden if out_stride is None else out_stride
    return " ".join(map(str, ("rms", *dev, active_clusters, ctas_per_sm, cluster, persistent, cap, rows, hidden,
                              in_off, in_stride, out_off, out_stride, out_bytes, residual)))


def ctas_held(dev, smem):
    """The fewest and the most CTAs of `smem` dynamic shared memory an SM holds, over the static shared memory a
    capped kernel may declare (0 to CAPPED_STATIC_SMEM bytes)."""
    per_sm, reserved = dev[4], dev[5]
    return per_sm // (smem + reserved + CAPPED_STATIC_SMEM), per_sm // (smem + reserved)


def slots_of(hidden, aligned):
    return -(-(hidden + (0 if aligned else 7)) // 8)


def check_rms(dev, rows, hidden, p, *, aligned, cap=CLUSTER_CTAS_PER_SM):
    vendor, sms, warp, smem = dev[:4]
    where = f"{dev} rows={rows} hidden={hidden}: {p}"
    assert "error" not in p, where
    gx, gy, gz = p["grid"]
    bx, by, bz = p["block"]
    assert gy == gz == by == bz == 1 and 1 <= bx <= 1024, where
    slots = slots_of(hidden, aligned)
    if p["kernel"] == LONG_ROW:
        assert gx == rows and bx == 1024, where
        assert p["smem"] == 16 * p["staged_slots"] and 0 < p["staged_slots"] <= slots, where
        assert p["smem"] + 4 * (1024 // warp) <= max(smem, 48 * 1024), where  # with the reduction scratch
        return
    if p["kernel"] == CLUSTER and cap > 0:
        assert ctas_held(dev, p["smem"]) == (cap, cap) and p["smem"] <= smem, where  # the cap, exactly
    else:
        assert p["smem"] == 0, where
    tpr, per_block = p["threads_per_row"], p["rows_per_block"]
    if p["kernel"] in (ALIGNED, GENERAL, PERSISTENT):
        assert p["kernel"] == (GENERAL if not aligned else p["kernel"]), where
        spt = 4 if p["kernel"] != GENERAL else 2
        group = -(-slots // spt)  # threads a row needs
        assert tpr >= group and (tpr < 2 * group if tpr <= warp else tpr - warp < group), where  # no idle warp
        if per_block > 1 or tpr <= warp:
            assert tpr & (tpr - 1) == 0 and tpr <= warp, where  # a power-of-two group of lanes
            assert bx == per_block << p["group_shift"] and p["lane_mask"] == tpr - 1, where
            assert bx % warp == 0 and bx <= 256, where
        else:
            assert bx == tpr and bx % warp == 0 and per_block == 1 and p["group_shift"] == 31, where
    if p["kernel"] in (ALIGNED, GENERAL):
        assert (gx - 1) * per_block < rows <= gx * per_block, where  # every row in exactly one block
    if p["kernel"] == PERSISTENT:
        assert vendor == NVIDIA and aligned and per_block == 1 and bx <= 512 and 1 <= gx <= rows, where
    if p["kernel"] == CLUSTER:
        assert vendor == NVIDIA and p["cluster_ctas"] in (2, 4, 8), where
        assert gx == rows * p["cluster_ctas"] and bx % warp == 0 and bx <= 512, where
        # A row's warps spread evenly over the CTAs (CTAs past the row's warps idle under the override).
        assert bx == -(-(tpr // warp) // p["cluster_ctas"]) * warp, where
    else:
        assert p["cluster_ctas"] == 1, where


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_plans_cover_every_row_legally(planner, device):
    dev = DEVICES[device]
    cases = []
    for hidden in HIDDEN:
        for rows in ROWS:
            for residual in (0, 1):
                for out_bytes in (2, 1):
                    cases.append((rows, hidden, True, dict(residual=residual, out_bytes=out_bytes)))
                # A row start 2 bytes past a vector boundary: the general path.
                cases.append((rows, hidden, False, dict(residual=residual, in_off=2, in_stride=hidden + 1,
                                                        out_stride=hidden + 1)))
    plans = planner([rms_line(dev, r, h, **kw) for r, h, _, kw in cases])
    for (rows, hidden, aligned, kw), p in zip(cases, plans):
        check_rms(dev, rows, hidden, p, aligned=aligned and hidden % 8 == 0)
        if dev[0] == AMD:
            assert p["kernel"] in (ALIGNED, GENERAL, LONG_ROW), p
            assert p["cluster_queries"] == p["persistent_queries"] == 0, p


def test_rms_norm_split_is_batch_invariant(planner):
    """A row's split (threads per row, slots per thread) depends on the hidden size and alignment only."""
    for dev in DEVICES.values():
        for hidden in HIDDEN:
            plans = planner([rms_line(dev, rows, hidden, active_clusters=0, persistent=0) for rows in ROWS])
            kernels = {p["kernel"] for p in plans}
            assert len(kernels) == 1, (dev, hidden, plans)
            if kernels != {LONG_ROW}:
                rows_split = {p["threads_per_row"] for p in plans}
                assert len(rows_split) == 1, (dev, hidden, plans)


def test_rms_norm_cluster_heuristic_on_h100(planner):
    """[rows, 16384]: 8 CTAs per row up to 16 rows, 4 up to 33, 2 up to 66, then one CTA per row (132 SMs)."""
    want = {1: 8, 16: 8, 17: 4, 33: 4, 34: 2, 66: 2, 67: 1, 1000: 1}
    plans = planner([rms_line(H100, rows, 16384, persistent=0) for rows in want])
    for (rows, ctas), p in zip(want.items(), plans):
        assert p["cluster_ctas"] == ctas and p["kernel"] == (CLUSTER if ctas > 1 else ALIGNED), (rows, p)
    # Rows below kClusterMinRowSlots (1024 slots = 8192 columns) stay on one CTA.
    assert planner([rms_line(H100, 2, 4096)])[0]["kernel"] == ALIGNED


def test_rms_norm_cluster_only_where_the_device_runs_it(planner):
    """No cluster the device cannot run (an sm_80 build, a device without clusters): the one-CTA-per-row kernel,
    never the persistent one, for rows with a cluster split; and never on AMD, whatever the override."""
    p = planner([rms_line(H100, 2, 16384, active_clusters=0)])[0]
    assert p["kernel"] == ALIGNED and p["cluster_ctas"] == 1 and p["cluster_queries"] == 1, p
    p = planner([rms_line(H100, 2, 16384, active_clusters=0, persistent=1)])[0]
    assert p["kernel"] == ALIGNED and p["persistent_queries"] == 0, p
    for cluster in (2, 4, 8):
        p = planner([rms_line(MI300X, 2, 16384, cluster=cluster, persistent=1)])[0]
        assert p["kernel"] == ALIGNED and p["cluster_queries"] == p["persistent_queries"] == 0, p


def test_rms_norm_cluster_override(planner):
    for ctas in (2, 4, 8):
        # Forced wherever the row has a cluster split: one-block rows of more than one warp, long rows of up to two
        # chunks (the general path's 4096 slots); many rows too.
        for rows, hidden, extra in ((1000, 16384, {}), (3, 2048, {}),
                                    (2, 16385, dict(in_off=2, in_stride=16386, out_stride=16386))):
            p = planner([rms_line(H100, rows, hidden, cluster=ctas, **extra)])[0]
            assert p["kernel"] == CLUSTER and p["cluster_ctas"] == ctas, (ctas, rows, hidden, p)
            check_rms(H100, rows, hidden, p, aligned=not extra)
        # Short rows (several per block) and rows past two chunks have no cluster split.
        assert planner([rms_line(H100, 2, 64, cluster=ctas)])[0]["kernel"] == ALIGNED
        assert planner([rms_line(H100, 2, 40003, cluster=ctas)])[0]["kernel"] == LONG_ROW
    for off in (0, 1):
        p = planner([rms_line(H100, 2, 16384, cluster=off)])[0]
        assert p["kernel"] == ALIGNED and p["cluster_queries"] == 0, p


def test_rms_norm_cluster_ctas_per_sm(planner):
    """The cluster kernel asks for the shared memory that holds an SM to kClusterCtasPerSm of its CTAs (or to
    FP8DK_RMSNORM_CTAS_PER_SM, 0: no request), within what a block may use; without the device's figures, none."""
    for cap in (-1, 0, 1, 2, 3, 4, 8):
        for rows in (1, 8, 32, 66):
            p = planner([rms_line(H100, rows, 16384, cap=cap)])[0]
            assert p["kernel"] == CLUSTER, (cap, rows, p)
            check_rms(H100, rows, 16384, p, aligned=True, cap=CLUSTER_CTAS_PER_SM if cap < 0 else cap)
    assert planner([rms_line(H100, 32, 16384, cap=0)])[0]["smem"] == 0
    unknown = H100[:4] + (0, 0)
    assert planner([rms_line(unknown, 32, 16384)])[0]["smem"] == 0
    # Other kernels ask for none (the long-row kernel: what it stages).
    for rows, hidden in ((1000, 16384), (2, 64), (100000, 8192)):
        p = planner([rms_line(H100, rows, hidden, cap=1)])[0]
        assert p["kernel"] != CLUSTER and p["smem"] == 0, p


def test_rms_norm_persistent_heuristic_and_override(planner):
    resident = 4 * 132  # ctas_per_sm = 4 in the model
    for rows, residual, want in ((resident, 0, False), (resident + 1, 0, True), (100000, 0, True),
                                 (4 * resident, 1, True), (4 * resident + 1, 1, False), (600, 1, True)):
        p = planner([rms_line(H100, rows, 8192, residual=residual)])[0]
        assert (p["kernel"] == PERSISTENT) == want, (rows, residual, p)
        if want:
            assert p["grid"][0] == min(rows, resident) and p["threads_per_row"] == p["block"][0] == 256, p
    assert planner([rms_line(H100, 100000, 8192, persistent=0)])[0]["kernel"] == ALIGNED
    p = planner([rms_line(H100, 2, 8192, persistent=1, cluster=0)])[0]
    assert p["kernel"] == PERSISTENT and p["grid"][0] == 2, p
    # No resident CTA, a block too large for the persistent kernel (hidden 16385+ aligned is 513+ threads... here
    # 16384 is 512, the largest), the general path, or short rows: the one-CTA-per-row kernel.
    assert planner([rms_line(H100, 100000, 8192, ctas_per_sm=0)])[0]["kernel"] == ALIGNED
    assert planner([rms_line(H100, 100000, 16384, persistent=1)])[0]["kernel"] == PERSISTENT
    assert planner([rms_line(H100, 100000, 8192, persistent=1, in_off=2)])[0]["kernel"] == GENERAL
    assert planner([rms_line(H100, 100000, 64, persistent=1)])[0]["kernel"] == ALIGNED


def test_rms_norm_long_rows_stage_what_the_device_allows(planner):
    for dev in DEVICES.values():
        for hidden in (40003, 131072, 1 << 20):
            p = planner([rms_line(dev, 2, hidden)])[0]
            assert p["kernel"] == LONG_ROW, p
            limit = max(dev[3], 48 * 1024) - 4 * (1024 // dev[2])
            assert p["staged_slots"] == min(slots_of(hidden, hidden % 8 == 0), limit // 16), (dev, hidden, p)


def test_rms_norm_too_many_rows_is_an_error(planner):
    p = planner([rms_line(H100, 1 << 31, 8192, persistent=0)])[0]
    assert "too many rows" in p["error"], p


@pytest.mark.parametrize("name,bad", [("FP8DK_RMSNORM_CLUSTER", b) for b in ("3", "16", "-1", "two", "2x")]
                         + [("FP8DK_RMSNORM_PERSISTENT", b) for b in ("2", "-1", "10", "yes")]
                         + [("FP8DK_RMSNORM_CTAS_PER_SM", b) for b in ("9", "-1", "two")])
def test_invalid_override_is_rejected(planner, name, bad):
    p = planner([f"overrides {name} {bad}"])[0]
    assert p.get("error", "").startswith(f"{name} must be ") and f"got '{bad}'" in p["error"], p


def test_valid_overrides_are_read(planner):
    plans = planner(["overrides FP8DK_RMSNORM_CLUSTER 4", "overrides FP8DK_RMSNORM_PERSISTENT 0",
                     "overrides FP8DK_RMSNORM_CTAS_PER_SM 3", "overrides FP8DK_RMSNORM_CLUSTER -",
                     "overrides FP8DK_RMSNORM_PERSISTENT -", "overrides FP8DK_RMSNORM_CTAS_PER_SM -"])
    assert [(p["cluster"], p["persistent"], p["ctas_per_sm"]) for p in plans] == [
        (4, -1, -1), (4, 0, -1), (4, 0, 3), (-1, 0, 3), (-1, -1, 3), (-1, -1, -1)]


def aligned_rows(offset, stride_bytes, rows, width_bytes):
    return offset % width_bytes == 0 and (rows <= 1 or stride_bytes % width_bytes == 0)


ELEMENTWISE_SHAPES = [(1, 1), (7, 3), (8, 1), (100, 5), (2048, 1), (4096, 4), (6656, 3), (14336, 8), (14336, 256),
                      (28672, 1), (64, 100000), (16, 5000000), (3, 70000)]


def check_grid(p, chunk, d, rows, sms, where):
    gx, gy, gz = p["grid"]
    bx, by, bz = p["block"]
    chunks = -(-d // chunk)
    assert bz == 1 and 1 <= bx * by <= 256 and bx & (bx - 1) == 0 and by & (by - 1) == 0, where
    assert (gx - 1) * bx < chunks <= gx * bx, where  # every chunk of a row in exactly one block column
    row_blocks = -(-rows // by)
    assert gy <= 65535 and gy * gz >= row_blocks and (gz - 1) * 65535 < row_blocks, where


@pytest.mark.parametrize("device", DEVICES)
def test_silu_and_mul_plans(planner, device):
    sms = DEVICES[device][1]
    cases = []
    for d, rows in ELEMENTWISE_SHAPES:
        for out_bytes in (2, 1):
            # Offsets and padding in elements.
            for in_off, in_pad, out_off in ((0, 0, 0), (2, 0, 0), (0, 2, 0), (0, 0, 2), (1, 1, 1), (0, 0, 8)):
                cases.append((d, rows, 2 * in_off, 2 * d + in_pad, out_bytes * out_off, d + in_pad, out_bytes))
    plans = planner([" ".join(map(str, ("swiglu", sms, *c))) for c in cases])
    for (d, rows, in_off, in_stride, out_off, out_stride, out_bytes), p in zip(cases, plans):
        where = f"{device} d={d} rows={rows} offsets={in_off},{out_off} strides={in_stride},{out_stride}: {p}"
        check_grid(p, 8, d, rows, sms, where)

        def fits(w):
            return d % w == 0 and aligned_rows(in_off, 2 * in_stride, rows, 2 * w) and \
                aligned_rows(out_off, out_bytes * out_stride, rows, out_bytes * w)

        w = p["width"]
        assert w in (1, 2, 4, 8) and fits(w) and (w == 8 or not fits(2 * w)), where  # the widest that fits


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_fp8_plans(planner, device):
    sms = DEVICES[device][1]
    cases = []
    for d, rows in ELEMENTWISE_SHAPES:
        # Offsets and padding in elements.
        for in_off, in_pad, out_off, out_pad in ((0, 0, 0, 0), (4, 0, 0, 0), (0, 0, 4, 0), (1, 1, 0, 0),
                                                 (0, 0, 1, 3), (0, 4, 0, 8)):
            cases.append((d, rows, 2 * in_off, d + in_pad, out_off, d + out_pad))
    plans = planner([" ".join(map(str, ("quant", sms, *c))) for c in cases])
    for (d, rows, in_off, in_stride, out_off, out_stride), p in zip(cases, plans):
        where = f"{device} d={d} rows={rows} offsets={in_off},{out_off} strides={in_stride},{out_stride}: {p}"
        check_grid(p, 16, d, rows, sms, where)

        def fits(w):
            load = min(w, 8)
            return aligned_rows(in_off, 2 * in_stride, rows, 2 * load) and aligned_rows(out_off, out_stride, rows, w)

        w = p["width"]
        assert w in (1, 2, 4, 8, 16) and fits(w) and (w == 16 or not fits(2 * w)), where
