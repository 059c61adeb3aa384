"""The benchmark suite: benchmarks/sweep.py end to end on CPU, the `kernels benchmark` workloads through the
real CLI (on the GPU where there is one), the sweep's correctness guard and CUDA graph timer, and every other
measurement tool: run where it can run here, else compiled or imported (decode_step.py: tests/test_decoder.py)."""

import functools
import importlib.util
import json
import os
import platform
import runpy
import shutil
import subprocess
import sys

import pytest
import torch

from .conftest import HAS_GPU, REPO_ID, REPO_ROOT, load_kernel

BENCHMARKS = REPO_ROOT / "benchmarks"
# kernel-builder's sandbox copies tests/ without benchmarks/.
pytestmark = pytest.mark.skipif(not (BENCHMARKS / "sweep.py").is_file(), reason="no benchmarks/ in this checkout")
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# The quick CPU sweep takes well under a minute on an idle 2-core machine; the margin is for a loaded one.
SWEEP_TIMEOUT_S = 240
CLI_TIMEOUT_S = 300


@functools.cache
def sweep_module():
    spec = importlib.util.spec_from_file_location("sweep", BENCHMARKS / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def offline_env() -> dict:
    # The local build needs no network; offline mode makes an accidental Hub lookup fail fast instead of hang.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def test_quick_cpu_sweep_writes_json_markdown_and_plots(tmp_path):
    load_kernel("cpu")  # skips on a GPU machine without a CPU build; sets LOCAL_KERNELS for --repo-id
    cmd = [sys.executable, str(BENCHMARKS / "sweep.py"), "--quick", "--device", "cpu", "--repo-id", REPO_ID,
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S, env=offline_env())
    assert proc.returncode == 0, proc.stderr[-4000:]

    data = json.loads((tmp_path / "sweep.json").read_text())
    env = data["environment"]
    assert env["device_type"] == "cpu" and env["copy_bandwidth"]["gbps"] > 0
    results = data["results"]
    assert {r["suite"] for r in results} == set(sweep_module().SUITES)
    assert not [r["name"] for r in results if "skipped" in r or not r["check"]["ok"]]
    for r in results:
        assert set(r["times"]) == set(r["impls"]) and "median_us" in r["times"]["ours"], r
        assert r["gbps"]["ours"] > 0 and set(r["speedup"]) == set(r["impls"]) - {"ours"}
    # Every case shows up as a row of the Markdown: one per table row, and each suite has its section.
    markdown = (tmp_path / "sweep.md").read_text()
    assert all(f"## {suite}" in markdown for suite in sweep_module().SUITES)
    assert markdown.count("| ok |") == len(results)
    pngs = sorted(tmp_path.glob("*.png"))
    assert pngs and all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)


def test_kernels_benchmark_cli_verifies_every_workload(tmp_path):
    """`kernels benchmark <repo root>`: the runner loads build/ itself (the GPU variant on a GPU machine),
    runs each workload's verify (allclose, fatal on mismatch) and writes the JSON payload."""
    load_kernel(None)  # the same build the CLI will pick, or a skip/fail with the build hint
    script_names = {p.name for p in BENCHMARKS.glob("benchmark*.py")}
    assert script_names == {"benchmark_rmsnorm.py", "benchmark_swiglu.py", "benchmark_skinny_gemm.py",
                            "benchmark_quant_fp8.py"}
    output = tmp_path / "results.json"
    cmd = [sys.executable, "-c", "import sys; from kernels.cli import main; sys.exit(main())", "benchmark",
           str(REPO_ROOT), "--iterations", "2", "--warmup", "1", "--output", str(output)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=offline_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(output.read_text())["results"]
    workloads = sum(p.read_text().count("    def benchmark_") for p in BENCHMARKS.glob("benchmark*.py"))
    assert len(results) == workloads and all(r.get("verified") is True for r in results), results


@pytest.mark.parametrize("dtype", FP8_DTYPES, ids=("e4m3fn", "e4m3fnuz"))
def test_fp8_positions_count_steps_between_neighbours(dtype):
    sweep = sweep_module()
    codes = torch.arange(256, dtype=torch.uint8).view(dtype)
    values = codes.float()
    finite = ~values.isnan()
    positions = sweep.fp8_positions(codes)[finite][values[finite].argsort()]
    steps = positions.diff()
    # Sorted by value, positions climb by one per representable value; only +0 and -0 (e4m3fn) share one.
    assert steps.min() >= 0 and steps.max() == 1
    assert (steps == 0).sum() == (1 if dtype == torch.float8_e4m3fn else 0)


def test_fp8_check_allows_one_step_and_no_more():
    sweep = sweep_module()
    # Finite e4m3fn codes of either sign, with room for two steps up in magnitude.
    magnitude = torch.randint(0, 0x70, (64, 64), dtype=torch.uint8)
    ref_bytes = magnitude | (torch.randint(0, 2, (64, 64), dtype=torch.uint8) << 7)
    ref = ref_bytes.view(torch.float8_e4m3fn)
    out_bytes = ref_bytes.clone()
    out = out_bytes.view(torch.float8_e4m3fn)
    out_bytes[3, 5] += 1
    assert sweep.check_fp8(out, ref) == (True, "max 1 FP8 step (0.0244% of elements differ)")
    out_bytes[7, 9] += 2
    assert sweep.check_fp8(out, ref) == (False, "max 2 FP8 steps (0.0488% of elements differ)")
    assert not sweep.check_fp8(torch.full_like(ref, float("nan")), ref)[0]
    assert not sweep.check_fp8(ref.to(torch.float8_e4m3fnuz), ref)[0]


def test_rel_norm_check():
    sweep = sweep_module()
    ref = torch.randn(8, 256).to(torch.bfloat16)
    assert sweep.check_rel_norm(ref.clone(), ref)[0]
    assert not sweep.check_rel_norm(ref * 1.1, ref)[0]
    assert not sweep.check_rel_norm(torch.full_like(ref, float("nan")), ref)[0]


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")
def test_cuda_graph_timer_replays_the_rotation():
    sweep = sweep_module()
    sets = [torch.randn(1 << 20, device="cuda") for _ in range(8)]
    calls = [functools.partial(torch.mul, s, 2.0) for s in sets]
    timing = sweep.CudaGraphTimer(quick=True).time(calls, est_us=5.0)
    # Every set once per round, and enough rounds for a replay of MIN_REPLAY_US at the estimated time.
    assert timing["calls_per_replay"] % len(calls) == 0
    assert timing["calls_per_replay"] * 5.0 >= sweep.MIN_REPLAY_US
    assert 0 < timing["min_us"] <= timing["median_us"] < 1000


def test_pdl_baseline_follows_ours_and_turns_pdl_off(monkeypatch):
    sweep = sweep_module()
    seen = []

    def ours(inputs):
        seen.append(os.environ.get("FP8DK_PDL"))

    shared = {"ours": ours, "eager": print}  # one family's cases share their impls dict
    cases = [sweep.Case(suite="s", name=f"c{i}", table="t", panel="p", series="", label={}, x=i, nbytes=1,
                        make_inputs=dict, impls=shared, check=lambda i: (True, "")) for i in range(2)]
    monkeypatch.setenv("FP8DK_PDL", "1")
    sweep.add_baselines(cases, sweep.baselines(sweep.parse_args(["--pdl-baseline"])), load_kernel(None))
    for case in cases:
        assert list(case.impls) == ["ours", "ours, no PDL", "eager"]
        case.impls["ours, no PDL"]({})
        case.impls["ours"]({})
    assert seen == ["0", "1", "0", "1"] and os.environ["FP8DK_PDL"] == "1"


def test_env_baseline_sets_its_variable_per_call(monkeypatch):
    sweep = sweep_module()
    seen = []
    shared = {"ours": lambda inputs: seen.append(os.environ.get("FP8DK_RMSNORM_PERSISTENT")), "eager": print}
    cases = [sweep.Case(suite="s", name="c", table="t", panel="p", series="", label={}, x=0, nbytes=1,
                        make_inputs=dict, impls=shared, check=lambda i: (True, ""))]
    monkeypatch.delenv("FP8DK_RMSNORM_PERSISTENT", raising=False)
    args = sweep.parse_args(["--env-baseline", "FP8DK_RMSNORM_PERSISTENT=0"])
    sweep.add_baselines(cases, sweep.baselines(args), load_kernel(None))
    assert list(cases[0].impls) == ["ours", "ours, FP8DK_RMSNORM_PERSISTENT=0", "eager"]
    cases[0].impls["ours, FP8DK_RMSNORM_PERSISTENT=0"]({})
    cases[0].impls["ours"]({})
    assert seen == ["0", None] and "FP8DK_RMSNORM_PERSISTENT" not in os.environ
    with pytest.raises(SystemExit):
        sweep.parse_args(["--env-baseline", "FP8DK_RMSNORM_PERSISTENT"])


# ------------------------------------------------- the measurement tools that only a GPU runs: CI builds them


@pytest.mark.parametrize("tool", ["stream_ceiling.cu", "fence_under_flood.cu", "cluster_occupancy.cu"])
def test_cuda_tool_compiles(tmp_path, tool):
    """benchmarks/stream_ceiling.cu (BENCHMARKS.md's stream ceiling), fence_under_flood.cu (docs/experiments
    item 60) and cluster_occupancy.cu (item 104) run only on an H100/H200; stream_ceiling is built on the kernels'
    own load, PDL, unpack and MMA headers. Each is compiled here for sm_90a, so a change that breaks one fails CI
    instead of the next GPU session."""
    from .test_compile_check import check, require_tools

    require_tools("sm_90a")
    cmd = [str(check.find_nvcc()), "-O3", "-std=c++20", f"-I{REPO_ROOT}", "-gencode", "arch=compute_90a,code=sm_90a",
           "-c", str(BENCHMARKS / tool), "-o", str(tmp_path / "tool.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() != "x86_64",
                    reason="tools/quotient_check.c is built with gcc -mfma (x86-64)")
def test_quotient_check_compiles(tmp_path):
    """tools/quotient_check.c (the host replay of quantize_fp8's quotient; a minute to run, so CI only builds
    it), with the command its header gives."""
    cmd = ["gcc", "-O2", "-mfma", "-ffp-contract=off", "-o", str(tmp_path / "quotient_check"),
           str(REPO_ROOT / "tools" / "quotient_check.c"), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.parametrize("script", ["tests/sanitizer_quant_fp8.py", "tests/sanitizer_rmsnorm.py",
                                    "tests/sanitizer_skinny_gemm.py", "tests/sanitizer_swiglu.py",
                                    "tests/stress_skinny_gemm_determinism.py", "tools/demo.py"])
def test_gpu_scripts_import(script):
    """The compute-sanitizer scripts (tools/gpu_session.sh runs them on a GPU), the determinism stress and the
    demo (scripts/demo.sh): everything they import resolves, here without running their main."""
    runpy.run_path(str(REPO_ROOT / script), run_name="imported_by_ci")


def test_tune_skinny_gemm(tmp_path):
    """benchmarks/tune_skinny_gemm.py: its options anywhere; on a GPU one small grid, through the kernel's
    tuning_overrides."""
    script = [sys.executable, str(BENCHMARKS / "tune_skinny_gemm.py")]
    proc = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=60, env=offline_env())
    assert proc.returncode == 0 and "--env" in proc.stdout, proc.stderr[-4000:]
    if not HAS_GPU:
        return
    load_kernel(None)
    out = tmp_path / "tune.json"
    proc = subprocess.run([*script, "--layers", "8b_qkv", "--m", "1", "--env", "FP8DK_SKINNY_STREAM_K=0",
                           "--out", str(out)], capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          env=offline_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    configs = {row["config"] for row in json.loads(out.read_text())["rows"]}
    assert {"default", "no PDL", "FP8DK_SKINNY_STREAM_K=0"} <= configs


def test_skinny_gemm_timeline_parses_the_reduction_marks(tmp_path):
    """benchmarks/skinny_gemm_timeline.py --parse: lines of the diagnostic build, with and without the session-32
    columns (SM and the reduction's marks t7..t10), group into one launch each; the reduction's steps are the gaps
    from t_epilogue through the marks a CTA reached to its end."""
    def line(cta, marks=None):
        t0 = 1_000_000
        times = [t0 + cta, t0 + 1000, t0 + 5000, t0 + 15000, t0 + 20000 + 100 * cta, t0 + 15100, t0 + 15300]
        extra = f" {7 + cta} " + " ".join(map(str, marks)) if marks else ""
        return f"FP8DK_TL 2304 16384 32 3 {cta} 99 " + " ".join(map(str, times)) + extra
    t0 = 1_000_000
    log = tmp_path / "timeline.log"
    log.write_text("\n".join([
        "CASE qkv M=32 new quant+gemm",
        line(0, [t0 + 15800, t0 + 16800, 0, 0]),  # the workspace protocol: stored, counted
        line(1, [t0 + 15800, t0 + 16900, 0, 0]),
        line(2, [t0 + 15900, t0 + 17000, t0 + 18000, 0]),  # ... and the last to arrive finished the tile
        "CASE qkv M=32 old quant+gemm",
        line(0), line(1), line(2), ""]))
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "skinny_gemm_timeline.py"), "--parse", str(log)],
                          capture_output=True, text=True, timeout=60, env=offline_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    new, old = proc.stdout.splitlines()
    assert new.startswith("qkv M=32 new quant+gemm [0] ctas   3") and old.startswith("qkv M=32 old quant+gemm [0]")
    # The CTA that ended last (2): 15.3 -> 15.9 -> 17.0 -> 18.0 -> its end at 20.2 us.
    assert "reduction steps: last CTA 0.60/1.10/1.00/2.20, median of 1 0.60/1.10/1.00/2.20" in new, new
    assert "reduction steps" not in old and "epilogue  4.80" in old, old
    # The stream's end and the tail come from the stage marks alone, with reduction marks or without (the summary
    # of session 32 printed the reduction's steps there).
    for row in (new, old):
        assert "stream-end  15.00/ 15.00/ 15.00 end  20.20 tail  5.20" in row, row


def test_cpu_vs_eager_runs_a_case():
    load_kernel("cpu")
    cmd = [sys.executable, str(BENCHMARKS / "cpu_vs_eager.py"), "--filter", "layer rms_norm", "--budget", "0.01"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=offline_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "layer rms_norm bf16 [8, 256]" in proc.stdout


def test_routing_tables_follow_their_sweeps(kernel_cpu):
    """routing.py's tables are what benchmarks/routing_table.py draws from the sweeps they cite (the H100 table
    from session 23's three runs, the H200 table from session 22's two runs averaged, and the rows of the shapes
    whose tiling session 23 changed from that session's two), except the H200's four 405B shapes, which follow the
    decode step's measurement instead (routing.py says why)."""
    spec = importlib.util.spec_from_file_location("routing_table", BENCHMARKS / "routing_table.py")
    routing_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(routing_table)
    results = BENCHMARKS / "results"

    def derived(*runs):
        reports = [json.loads((results / run).read_text()) for run in runs]
        return {shape: set(routing_table.routed_m(m)) for shape, m in routing_table.speedups(reports).items()}

    routing = kernel_cpu.routing
    h100 = derived(*(f"nvidia-h100/session23-2026-11-26/sweep-targets-1af49a8-{run}/sweep.json" for run in "abc"))
    assert h100 == {shape: set(m) for shape, m in routing._SM90_SLOWER_M.items()}
    h200 = derived("nvidia-h200/session22-2026-11-26/sweep-a-1c6381b/sweep.json",
                   "nvidia-h200/session22-2026-11-26/sweep-b-1c6381b/sweep-from-log.json")
    replanned = {(13312, 16384), (10240, 8192), (8192, 28672)}  # 405B gate_up, 70B qkv and down at M <= 8
    h200 |= {shape: m for shape, m in derived("nvidia-h200/session23-2026-11-26/sweep-a-31c8fa5/sweep.json",
                                              "nvidia-h200/session23-2026-11-26/sweep-b-31c8fa5/sweep.json").items()
             if shape in replanned}
    for shape in routing._H200_STEP_OURS_SHAPES:  # 405B's four, ours at every M by the decode step
        h200[shape] = set()
    assert h200 == {shape: set(m) for shape, m in routing._H200_SLOWER_M.items()}
