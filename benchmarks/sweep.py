#!/usr/bin/env python3
"""Latency sweep: our kernels against their PyTorch peers, in one process, on one device.

    python benchmarks/sweep.py                          # every suite, the GPU; benchmarks/results/<device>/
    python benchmarks/sweep.py --quick                  # a few shapes per suite, under two minutes
    python benchmarks/sweep.py --quick --device cpu     # what CI runs (no torch.compile peers by default)
    python benchmarks/sweep.py --suite skinny_gemm --dtype bf16 --budget-seconds 300 --out gemm-results

Peers: the pure-PyTorch references (the kernel's `reference` module), eager and torch.compile'd, for
rms_norm / fused_add_rms_norm / silu_and_mul with FP8 output; torch._scaled_mm (FP8) and F.linear (16-bit) for
skinny_gemm. Each case is checked against the reference once before it is timed; a failure is marked in every
output. On CUDA and ROCm each implementation is captured in a CUDA/HIP graph over enough rotated input sets
that the working set exceeds the last-level cache, and timed by replaying it between CUDA events (median over
replays); on CPU each call is timed with perf_counter (median). Bandwidth is reported against a
device-to-device copy measured in the same run. BENCHMARKS.md describes the method and the outputs.

Writes OUT/sweep.json (environment and every number), OUT/sweep.md (one table per op/shape family, the blog's
shape) and OUT/<suite>.png (latency and % of copy bandwidth against rows).
"""

import argparse
import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
SUITES = ("rmsnorm", "swiglu", "skinny_gemm")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
MB = 1 << 20
EPS = 1e-6
# Powers of two, so y / scale is exact and a kernel that multiplies by an approximate 1 / scale (SwiGLU's on the
# GPU) quantizes the same values as the references, which divide. With them the FP8 codes span most of the e4m3
# range.
NORM_SCALE = 2.0**-6
SWIGLU_SCALE = 2.0**-5
GEMM_SCALE_A = 1 / 16
GEMM_OUT_STD = 0.25

# Input-set rotation. torch reports the L2 only; on AMD's MI300X / MI355X a 256 MB Infinity Cache sits behind
# it, and the FP8 GEMM weights fit in it.
ROTATION_L2_MULTIPLE = 3
ROTATION_FLOOR = 128 * MB
HIP_LAST_LEVEL_CACHE = 256 * MB
CPU_LAST_LEVEL_CACHE_FALLBACK = 32 * MB
# Upper bound on input sets (and on calls per graph): keeps capture time bounded for eager peers that launch
# ~10 kernels per call. Every case still rotates more than 2x the L2 of an H100 or H200.
MAX_SETS = 4096
# A replay shorter than this lets the GPU catch up with the host's replay launches, and the events would
# time the idle gap; the graph repeats the rotation until one replay is estimated to take this long.
MIN_REPLAY_US = 1000.0
# Added to the bandwidth-bound time of a call when estimating it: a kernel launch is never free.
LAUNCH_FLOOR_US = 2.0

ROWS_FULL = tuple(1 << i for i in range(13))  # 1, 2, 4, ..., 4096
LLAMA_405B_TP8 = "Llama-3.1-405B TP8"
# (layer, N, K): b is the [N, K] weight of nn.Linear.
GEMM_SHAPES_FULL = {
    LLAMA_405B_TP8: (("qkv", 2304, 16384), ("gate_up", 13312, 16384), ("down", 16384, 6656)),
    "Llama-3.1-8B": (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)),
    "Llama-3.1-70B TP8": (("qkv", 1280, 8192), ("o", 8192, 1024), ("gate_up", 7168, 8192), ("down", 8192, 3584)),
}
# The decode GEMM targets (the 405B TP8 shard's four projections, 70B and 8B unsharded): `--gemm-shapes targets`.
GEMM_SHAPES_TARGETS = {
    LLAMA_405B_TP8: (("qkv", 2304, 16384), ("o", 16384, 2048), ("gate_up", 13312, 16384), ("down", 16384, 6656)),
    "Llama-3.1-70B": (("qkv", 10240, 8192), ("down", 8192, 28672)),
    "Llama-3.1-8B": (("qkv", 6144, 4096), ("gate_up", 28672, 4096)),
}
LLAMA_405B_TP8_SMALL = "Llama-3.1-405B TP8, N and K / 16"
# The 16-bit weight path is timed in bf16, the dtype unquantized Llama checkpoints ship in.
GEMM16_DTYPES = ("bf16",)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The shapes of one sweep."""

    fused_rows: tuple
    rms_rows: tuple
    hidden: tuple
    swiglu_rows: tuple
    swiglu_d: tuple
    gemm_shapes: dict
    gemm_m: tuple
    gemm16_models: tuple  # models whose GEMMs are also timed with 16-bit weights (against F.linear)


FULL = Plan(
    fused_rows=ROWS_FULL,
    rms_rows=(1, 32, 256, 4096),
    hidden=(16384, 8192),
    swiglu_rows=ROWS_FULL,
    swiglu_d=(8192, 16384, 6656),  # 8192: the blog's [rows, 16384] input; 6656: 405B's MLP at TP8
    gemm_shapes=GEMM_SHAPES_FULL,
    gemm_m=(1, 2, 4, 8, 16, 24, 32),
    gemm16_models=(LLAMA_405B_TP8,),
)
QUICK_GPU = Plan(
    fused_rows=(1, 32, 256, 2048),
    rms_rows=(32,),
    hidden=(16384,),
    swiglu_rows=(1, 32, 256, 2048),
    swiglu_d=(8192,),  # the blog's table: a [rows, 16384] input
    gemm_shapes={LLAMA_405B_TP8: GEMM_SHAPES_FULL[LLAMA_405B_TP8]},
    gemm_m=(1, 8, 32),
    gemm16_models=(LLAMA_405B_TP8,),
)
# CI's smoke run: the same families at sizes a 2-core machine times in seconds.
QUICK_CPU = Plan(
    fused_rows=(1, 16, 128),
    rms_rows=(16,),
    hidden=(2048,),
    swiglu_rows=(1, 16, 128),
    swiglu_d=(1024,),
    gemm_shapes={LLAMA_405B_TP8_SMALL: tuple((layer, n // 16, k // 16)
                                             for layer, n, k in GEMM_SHAPES_FULL[LLAMA_405B_TP8])},
    gemm_m=(1, 32),
    gemm16_models=(LLAMA_405B_TP8_SMALL,),
)


# ---------------------------------------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", nargs="+", choices=SUITES, default=list(SUITES), help="suites to run")
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["fp16", "bf16"],
                        help="activation dtypes (for FP8 GEMMs: the output dtype)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when a GPU is visible (also on ROCm), else cpu")
    parser.add_argument("--quick", action="store_true", help="a few shapes per suite and fewer repetitions")
    parser.add_argument("--gemm-shapes", choices=("default", "targets"), default="default",
                        help="skinny_gemm shapes: the plan's (default), or the decode GEMM targets (405B TP8 "
                             "qkv/o/gate_up/down, 70B qkv/down, 8B qkv/gate_up) at M = 1..32")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="time torch.compile'd references (default: on, except --quick on CPU, where "
                             "compiling takes longer than the whole sweep)")
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="stop starting cases after this long; each suite gets an equal share, and time a "
                             "suite leaves unused passes to the next. Skipped cases are listed in the outputs")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: "
                        "benchmarks/results/<device-slug>/)")
    parser.add_argument("--repo-id", default=None,
                        help="load with kernels.get_kernel(REPO_ID, version=VERSION) instead of the local build; "
                             "LOCAL_KERNELS=REPO_ID=PATH points that at a local checkout")
    parser.add_argument("--version", type=int, default=1, help="kernel version for --repo-id (default 1)")
    parser.add_argument("--pdl-baseline", action="store_true",
                        help="also time our kernels launched without programmatic dependent launch "
                             "(FP8DK_PDL=0) as the peer 'ours, no PDL': what PDL gains, in the same run")
    parser.add_argument("--env-baseline", action="append", default=[], metavar="KEY=VALUE",
                        help="also time our kernels with the environment variable KEY=VALUE set (a launcher "
                             "override such as FP8DK_RMSNORM_PERSISTENT=0) as the peer 'ours, KEY=VALUE', in "
                             "the same run; repeatable")
    parser.add_argument("--baseline-build", type=Path, default=None, metavar="REPO_DIR",
                        help="also time the kernels of another checkout's local build (e.g. the revision before a "
                             "change, built there with tools/build.py) as the peer 'ours, baseline build', on "
                             "the same inputs in the same run")
    args = parser.parse_args(argv)
    for setting in args.env_baseline:
        if "=" not in setting or not setting.split("=", 1)[0]:
            parser.error(f"--env-baseline {setting!r}: expected KEY=VALUE")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU")
    if args.compile is None:
        args.compile = not (args.quick and args.device == "cpu")
    return args


def load_kernel(args):
    """The kernel as users load it: through `kernels`, from the local build or by repo id. A CPU sweep on a
    GPU machine asks for the CPU variant explicitly."""
    import kernels

    backend = "cpu" if args.device == "cpu" else None
    if args.repo_id:
        return kernels.get_kernel(args.repo_id, version=args.version, backend=backend)
    return kernels.get_local_kernel(REPO, backend=backend)


# ---------------------------------------------------------------------------------------------- environment


def git_revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_last_level_cache() -> int:
    """Size of the largest cache of CPU 0 from sysfs (Linux), else a typical server L3."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=CPU_LAST_LEVEL_CACHE_FALLBACK)


def describe_device(device: str) -> dict:
    if device == "cpu":
        return {"name": cpu_name(), "threads": torch.get_num_threads(), "last_level_cache_bytes":
                cpu_last_level_cache()}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {"name": props.name, "sm_count": props.multi_processor_count, "l2_cache_bytes": props.L2_cache_size,
            "memory_bytes": props.total_memory}
    if torch.version.hip:
        info["gcn_arch"] = props.gcnArchName
    else:
        info["compute_capability"] = f"{props.major}.{props.minor}"
    return info


def device_slug(device_info: dict, device: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", device_info["name"].lower()).strip("-")
    return f"cpu-{slug}" if device == "cpu" else slug


def rotation_bytes(device: str, device_info: dict, quick: bool) -> int:
    """Bytes each implementation's calls touch before an input set comes round again: several times the
    last-level cache, so that every call reads from memory as it would in a model."""
    if device == "cpu":
        target = ROTATION_L2_MULTIPLE * device_info["last_level_cache_bytes"]
        # --quick on CPU is CI's smoke run: it exercises the pipeline, and generating 3x a server L3 of
        # random inputs per case would be most of its time.
        return min(target, 8 * MB) if quick else target
    cache = device_info["l2_cache_bytes"]
    if torch.version.hip:
        cache = max(cache, HIP_LAST_LEVEL_CACHE)
    return max(ROTATION_L2_MULTIPLE * cache, ROTATION_FLOOR)


# ---------------------------------------------------------------------------------------------- timing


def median_summary(per_call_us: list, **extra) -> dict:
    per_call_us = sorted(per_call_us)
    return {"median_us": statistics.median(per_call_us), "min_us": per_call_us[0], **extra}


class CudaGraphTimer:
    """One CUDA (HIP on ROCm) graph per implementation holding one call per input set, the rotation repeated
    until a replay lasts MIN_REPLAY_US; replays timed with CUDA events; the median replay over its calls.
    The graph removes the host's launch overhead, as a serving engine's graphs do."""

    def __init__(self, quick: bool):
        self.target_ms = 30.0 if quick else 100.0
        self.min_reps, self.max_reps = (5, 200) if quick else (10, 1000)

    def time(self, calls: list, est_us: float) -> dict:
        rounds = max(1, math.ceil(MIN_REPLAY_US / (len(calls) * est_us)))
        rounds = min(rounds, max(1, MAX_SETS // len(calls)))
        sequence = calls * rounds
        self.warm_up(calls)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for call in sequence:
                    call()
            replay_ms = statistics.median(self.replay_ms(graph, 3))  # also warms the replays themselves
            reps = min(self.max_reps, max(self.min_reps, math.ceil(self.target_ms / replay_ms)))
            times_ms = self.replay_ms(graph, reps)
        finally:
            del graph  # and with it the graph's memory pool, before the next implementation captures
            torch.cuda.empty_cache()
        return median_summary([t * 1e3 / len(sequence) for t in times_ms], replays=reps,
                              calls_per_replay=len(sequence))

    @staticmethod
    def warm_up(calls: list) -> None:
        """Runs outside the capture, on a side stream as torch.cuda.graph asks: compiles torch.compile'd
        functions, creates cuBLAS handles and workspaces, and loads the kernels' modules."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for call in calls[:2]:
                call()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()

    @staticmethod
    def replay_ms(graph, reps: int) -> list:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]


class CpuTimer:
    """perf_counter around each call, walking the rotation; median over calls."""

    def __init__(self, quick: bool):
        self.target_s = 0.05 if quick else 0.5
        self.min_reps, self.max_reps = (3, 200) if quick else (10, 2000)

    def time(self, calls: list, est_us: float) -> dict:
        for call in calls[:2]:  # first touch of the outputs, lazy initialisation, torch.compile
            call()
        samples = []
        deadline = time.perf_counter() + self.target_s
        while len(samples) < self.min_reps or (len(samples) < self.max_reps and time.perf_counter() < deadline):
            call = calls[len(samples) % len(calls)]
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1e6)
        return median_summary(samples, calls=len(samples))


def synced_ms(fn: Callable[[], object], count: int, device, warmup: int) -> list:
    """Milliseconds of `count` calls of fn on the host clock, a GPU synchronized around each, after `warmup`
    calls: eager latency, launches included (decode_step.py's eager steps, tools/demo.py's op table)."""
    device = torch.device(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(count):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def copy_bandwidth(device: str, quick: bool) -> dict:
    """Device-to-device copy of a buffer far larger than any cache: bytes read plus written over the median
    time. The ceiling the bandwidth columns are relative to."""
    nbytes = (256 if quick else 1024) * MB
    if device == "cpu":
        nbytes //= 4
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    if device == "cpu":
        timing = CpuTimer(quick).time([lambda: dst.copy_(src)], est_us=0.0)
    else:
        dst.copy_(src)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
        for start, end in events:
            start.record()
            dst.copy_(src)
            end.record()
        torch.cuda.synchronize()
        timing = median_summary([start.elapsed_time(end) * 1e3 for start, end in events])
    return {"bytes": nbytes, "median_us": timing["median_us"], "gbps": 2 * nbytes / timing["median_us"] / 1e3}


# ---------------------------------------------------------------------------------------------- correctness


def fp8_positions(q: torch.Tensor) -> torch.Tensor:
    """Signed position of each FP8 code on the FP8 number line: the low 7 bits order an e4m3 magnitude (both
    flavours), the top bit is the sign. Adjacent values differ by one, so differences count FP8 steps."""
    bits = q.view(torch.uint8).to(torch.int32)
    magnitude = bits & 0x7F
    return torch.where(bits >= 0x80, -magnitude, magnitude)


def check_fp8(out: torch.Tensor, ref: torch.Tensor) -> tuple:
    """At most one FP8 step apart (one ulp of e4m3, relative to the value), NaN exactly where the reference
    has NaN. One step is allowed because a last-bit difference in an fp32 sum or exp legitimately moves a
    value across a rounding boundary."""
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return False, f"got {out.dtype} {tuple(out.shape)}, expected {ref.dtype} {tuple(ref.shape)}"
    out_nan, ref_nan = out.float().isnan(), ref.float().isnan()
    if not torch.equal(out_nan, ref_nan):
        return False, "NaN where the reference has none (or the reverse)"
    steps = (fp8_positions(out) - fp8_positions(ref)).abs().masked_fill(ref_nan, 0)
    worst = int(steps.max()) if steps.numel() else 0
    detail = f"max {worst} FP8 step{'s' if worst != 1 else ''}"
    if worst:
        detail += f" ({100 * (steps > 0).float().mean().item():.3g}% of elements differ)"
    return worst <= 1, detail


def check_rel_norm(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-2) -> tuple:
    """||out - ref|| / ||ref|| against a float64 reference."""
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return False, f"got {out.dtype} {tuple(out.shape)}, expected {ref.dtype} {tuple(ref.shape)}"
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    return err < tol, f"rel err {err:.1e}"  # NaN compares False


def guarded(check: Callable) -> Callable:
    """A check that reports our kernel raising as a failure of the case instead of ending the sweep."""

    @functools.wraps(check)
    def run(inputs: dict) -> tuple:
        try:
            return check(inputs)
        except Exception as e:  # noqa: BLE001 -- any error of the op under test is a result
            return False, f"{type(e).__name__}: {e}".splitlines()[0]

    return run


# ---------------------------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Case:
    suite: str
    name: str              # one line for the progress output
    table: str             # the Markdown table it is a row of
    panel: str             # the plot panel it is a point of
    series: str            # its line within the panel ("" when the panel has one)
    label: dict            # the table's leading columns
    x: int                 # rows (M for a GEMM): the plots' x axis
    nbytes: int            # fewest bytes a call moves: each input read once, each output written once
    make_inputs: Callable  # () -> dict of tensors: one input set
    impls: dict            # name -> fn(inputs); "ours" first, then the peers
    check: Callable        # (inputs) -> (ok, detail): ours against the reference, once
    compile_group: Optional[str] = None  # cases sharing torch.compile'd peers


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype) or str(dtype).removeprefix("torch.float8_")


def norm_bytes(rows: int, hidden: int, itemsize: int, fused: bool) -> int:
    """x read and the FP8 out written per element, plus the residual read and written when fused; the
    weight once."""
    per_element = itemsize + 1 + (2 * itemsize if fused else 0)
    return rows * hidden * per_element + hidden * itemsize


def swiglu_bytes(rows: int, d: int, itemsize: int) -> int:
    return rows * (2 * d * itemsize + d)


def gemm_bytes(m: int, n: int, k: int, a_size: int, b_size: int, out_size: int) -> int:
    return n * k * b_size + m * k * a_size + m * n * out_size


def reference_peers(ref_fn: Callable, call: Callable, compile_peers: bool) -> dict:
    """The elementwise ops' peers: the reference as written (eager) and under torch.compile as users get it
    (default mode, dynamic rows after the first recompile; our graphs stand in for its reduce-overhead mode).
    call(fn, inputs) applies either to an input set. One compiled function per shape family."""
    impls = {"eager": functools.partial(call, ref_fn)}
    if compile_peers:
        impls["compile"] = functools.partial(call, torch.compile(ref_fn))
    return impls


def rmsnorm_cases(k, plan: Plan, device: str, dtypes: list, compile_peers: bool):
    fp8 = k.native_fp8_dtype(torch.device(device))
    ref = k.reference
    scale = torch.tensor([NORM_SCALE], device=device)

    def inputs(rows, hidden, dtype, fused):
        x = torch.randn(rows, hidden, device=device, dtype=dtype)
        made = {"x": x, "weight": (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)}
        if fused:
            # ours adds x into the residual on every timed call; a few thousand calls of unit normals keep it
            # far inside fp16's range, and the normalized output's distribution does not change.
            made["residual"] = torch.randn_like(x)
        return made

    def fused_ours(i):
        return k.fused_add_rms_norm(i["x"], i["residual"], i["weight"], EPS, scale, fp8)

    def fused_ref(fn, i):
        return fn(i["x"], i["residual"], i["weight"], EPS, scale, fp8)

    def fused_check(i):
        residual = i["residual"].clone()  # ours updates it in place; the reference needs the original
        out = k.fused_add_rms_norm(i["x"], residual, i["weight"], EPS, scale, fp8)
        ref_out, ref_residual = fused_ref(ref.fused_add_rms_norm_ref, i)
        if not torch.equal(residual, ref_residual):
            return False, "residual != x + residual"
        return check_fp8(out, ref_out)

    def rms_ours(i):
        return k.rms_norm(i["x"], i["weight"], EPS, scale, fp8)

    def rms_ref(fn, i):
        return fn(i["x"], i["weight"], EPS, scale, fp8)

    def rms_check(i):
        return check_fp8(rms_ours(i), rms_ref(ref.rms_norm_ref, i))

    ops = (("fused_add_rms_norm", True, plan.fused_rows, ref.fused_add_rms_norm_ref, fused_ref, fused_ours,
            fused_check),
           ("rms_norm", False, plan.rms_rows, ref.rms_norm_ref, rms_ref, rms_ours, rms_check))
    for op, fused, rows_list, ref_fn, ref_call, ours, check in ops:
        for dname in dtypes:
            dtype = DTYPES[dname]
            for hidden in plan.hidden:
                impls = {"ours": ours, **reference_peers(ref_fn, ref_call, compile_peers)}
                for rows in rows_list:
                    yield Case(
                        suite="rmsnorm",
                        name=f"{op} {dname} [{rows}, {hidden}] -> {dtype_name(fp8)}",
                        table=f"{op}, [rows, {hidden}] {dname} -> {dtype_name(fp8)}",
                        panel=f"{op}, {dname} -> {dtype_name(fp8)}",
                        series=f"hidden {hidden}",
                        label={"rows": rows},
                        x=rows,
                        nbytes=norm_bytes(rows, hidden, dtype.itemsize, fused),
                        make_inputs=functools.partial(inputs, rows, hidden, dtype, fused),
                        impls=impls,
                        check=guarded(check),
                        compile_group=f"{op}/{dname}/{hidden}",
                    )


def swiglu_cases(k, plan: Plan, device: str, dtypes: list, compile_peers: bool):
    fp8 = k.native_fp8_dtype(torch.device(device))
    ref = k.reference
    scale = torch.tensor([SWIGLU_SCALE], device=device)

    def inputs(rows, d, dtype):
        return {"x": torch.randn(rows, 2 * d, device=device, dtype=dtype)}

    def ours(i):
        return k.silu_and_mul(i["x"], scale, fp8)

    def ref_call(fn, i):
        return fn(i["x"], scale, fp8)

    def check(i):
        return check_fp8(ours(i), ref_call(ref.silu_and_mul_ref, i))

    for dname in dtypes:
        dtype = DTYPES[dname]
        for d in plan.swiglu_d:
            impls = {"ours": ours, **reference_peers(ref.silu_and_mul_ref, ref_call, compile_peers)}
            for rows in plan.swiglu_rows:
                yield Case(
                    suite="swiglu",
                    name=f"silu_and_mul {dname} [{rows}, 2 x {d}] -> {dtype_name(fp8)}",
                    table=f"silu_and_mul, [rows, 2 x {d}] {dname} -> {dtype_name(fp8)}",
                    panel=f"silu_and_mul, {dname} -> {dtype_name(fp8)}",
                    series=f"d {d}",
                    label={"rows": rows},
                    x=rows,
                    nbytes=swiglu_bytes(rows, d, dtype.itemsize),
                    make_inputs=functools.partial(inputs, rows, d, dtype),
                    impls=impls,
                    check=guarded(check),
                    compile_group=f"silu_and_mul/{dname}/{d}",
                )


def gemm_cases(k, plan: Plan, device: str, dtypes: list, compile_peers: bool):
    """FP8 x FP8 with fp16/bf16 out against torch._scaled_mm, and 16-bit weights against F.linear (torch's
    GEMMs are the peers, so compile_peers does not apply). The scales bring the outputs to a standard
    deviation of 1/4, so the relative-norm check sees rounding, not overflow."""
    fp8 = k.native_fp8_dtype(torch.device(device))
    ref = k.reference
    scale_a = torch.tensor([GEMM_SCALE_A], device=device)

    def fp8_inputs(m, n, kdim):
        # Unit-normal operands use the FP8 range; the K-term sum has a spread of sqrt(K), which the scales
        # bring down to GEMM_OUT_STD.
        scale_b = GEMM_OUT_STD / (math.sqrt(kdim) * GEMM_SCALE_A)
        return {"a": torch.randn(m, kdim, device=device).to(fp8), "b": torch.randn(n, kdim, device=device).to(fp8),
                "scale_b": torch.tensor([scale_b], device=device)}

    def fp8_ours(out_dtype, i):
        return k.skinny_gemm(i["a"], i["b"], scale_a, i["scale_b"], out_dtype=out_dtype)

    def scaled_mm(out_dtype, i):
        # _scaled_mm wants b as a column-major [K, N]: the transpose of the row-major [N, K] weight.
        return torch._scaled_mm(i["a"], i["b"].t(), scale_a, i["scale_b"], out_dtype=out_dtype)

    def fp8_check(out_dtype, i):
        expected = ref.skinny_gemm_ref(i["a"], i["b"], scale_a, i["scale_b"], out_dtype=out_dtype)
        return check_rel_norm(fp8_ours(out_dtype, i), expected)

    def w16_inputs(m, n, kdim, dtype):
        b = torch.randn(n, kdim, device=device) * (GEMM_OUT_STD / math.sqrt(kdim))
        return {"a": torch.randn(m, kdim, device=device, dtype=dtype), "b": b.to(dtype)}

    def w16_ours(i):
        return k.skinny_gemm(i["a"], i["b"])

    def linear(i):
        return F.linear(i["a"], i["b"])

    def w16_check(i):
        return check_rel_norm(w16_ours(i), ref.skinny_gemm_ref(i["a"], i["b"]))

    def case(model, config, layer, n, kdim, m, nbytes, make_inputs, impls, check):
        return Case(
            suite="skinny_gemm",
            name=f"{model} {layer} {config} M={m} (N={n}, K={kdim})",
            table=f"{model}, {config}",
            panel=f"{model}, {config}",
            series=layer,
            label={"layer": layer, "N": n, "K": kdim, "M": m},
            x=m,
            nbytes=nbytes,
            make_inputs=make_inputs,
            impls=impls,
            check=guarded(check),
        )

    for model, layers in plan.gemm_shapes.items():
        for dname in dtypes:
            out_dtype = DTYPES[dname]
            config = f"{dtype_name(fp8)} -> {dname}"
            for layer, n, kdim in layers:
                for m in plan.gemm_m:
                    yield case(model, config, layer, n, kdim, m, gemm_bytes(m, n, kdim, 1, 1, out_dtype.itemsize),
                               functools.partial(fp8_inputs, m, n, kdim),
                               {"ours": functools.partial(fp8_ours, out_dtype),
                                "torch._scaled_mm": functools.partial(scaled_mm, out_dtype)},
                               functools.partial(fp8_check, out_dtype))
        if model not in plan.gemm16_models:
            continue
        for dname in (d for d in dtypes if d in GEMM16_DTYPES):
            dtype = DTYPES[dname]
            for layer, n, kdim in layers:
                for m in plan.gemm_m:
                    size = dtype.itemsize
                    yield case(model, f"{dname} weights", layer, n, kdim, m, gemm_bytes(m, n, kdim, size, size, size),
                               functools.partial(w16_inputs, m, n, kdim, dtype),
                               {"ours": w16_ours, "F.linear": linear}, w16_check)


SUITE_CASES = {"rmsnorm": rmsnorm_cases, "swiglu": swiglu_cases, "skinny_gemm": gemm_cases}


# ---------------------------------------------------------------------------------------------- running


def run_case(case: Case, timer, rotation: int, copy_gbps: float) -> dict:
    first = case.make_inputs()
    ok, detail = case.check(first)
    n_sets = min(MAX_SETS, max(1, math.ceil(rotation / case.nbytes)))
    input_sets = [first] + [case.make_inputs() for _ in range(n_sets - 1)]
    est_us = case.nbytes / (copy_gbps * 1e3) + LAUNCH_FLOOR_US
    times = {}
    for impl, fn in case.impls.items():
        try:
            times[impl] = timer.time([functools.partial(fn, inputs) for inputs in input_sets], est_us)
        except Exception as e:  # noqa: BLE001 -- a peer that cannot run here is a result, not the end
            times[impl] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    return summarize(case, ok, detail, n_sets, times, copy_gbps)


def summarize(case: Case, ok: bool, detail: str, n_sets: int, times: dict, copy_gbps: float) -> dict:
    record = {**case_fields(case), "check": {"ok": ok, "detail": detail}, "input_sets": n_sets,
              "working_set_bytes": n_sets * case.nbytes, "times": times, "speedup": {}, "gbps": {},
              "pct_copy_bw": {}}
    for impl, t in times.items():
        if "median_us" in t:
            record["gbps"][impl] = case.nbytes / t["median_us"] / 1e3
            record["pct_copy_bw"][impl] = 100 * record["gbps"][impl] / copy_gbps
    ours = times.get("ours", {}).get("median_us")
    for impl, t in times.items():
        if impl != "ours" and ours and "median_us" in t:
            record["speedup"][impl] = t["median_us"] / ours
    return record


def case_fields(case: Case) -> dict:
    return {"suite": case.suite, "name": case.name, "table": case.table, "panel": case.panel,
            "series": case.series, "label": case.label, "x": case.x, "bytes": case.nbytes,
            "impls": list(case.impls)}


def progress_line(index: int, total: int, elapsed_s: float, record: dict) -> str:
    head = f"[{index:>{len(str(total))}}/{total} {elapsed_s:4.0f} s] {record['suite']}: {record['name']}"
    if "skipped" in record:
        return f"{head}: skipped ({record['skipped']})"
    parts = []
    for impl, t in record["times"].items():
        if "error" in t:
            parts.append(f"{impl} error: {t['error']}")
            continue
        speedup = record["speedup"].get(impl)
        parts.append(f"{impl} {t['median_us']:.2f} us" + (f" ({speedup:.2f}x)" if speedup else ""))
    if "ours" in record["pct_copy_bw"]:
        parts.append(f"{fmt_gbps(record['gbps']['ours'])} GB/s = {record['pct_copy_bw']['ours']:.0f}% of copy")
    parts.append("ok" if record["check"]["ok"] else f"CHECK FAILED: {record['check']['detail']}")
    return f"{head}: " + " | ".join(parts)


def with_environment(fn: Callable, values: dict, k) -> Callable:
    """fn(inputs) with the environment variables `values` set through the kernel's tuning_overrides, which makes
    the kernels read their overrides (FP8DK_*) again, so a graph captured through this runs the launch they
    pick."""

    def run(inputs):
        with k.tuning_overrides(values):
            return fn(inputs)

    return run


def baselines(args) -> dict:
    """Peer label -> environment of our kernels timed beside 'ours' (--pdl-baseline, --env-baseline)."""
    peers = {"ours, no PDL": {"FP8DK_PDL": "0"}} if args.pdl_baseline else {}
    for setting in args.env_baseline:
        key, value = setting.split("=", 1)
        peers[f"ours, {key}={value}"] = {key: value}
    return peers


def put_after_ours(case, peers: dict) -> None:
    """Puts the implementations `peers` right after 'ours' in the case (cases of one family may share an impls
    dict: the case gets a new one)."""
    others = {name: fn for name, fn in case.impls.items() if name != "ours"}
    case.impls = {"ours": case.impls["ours"], **peers, **others}


def add_baselines(cases: list, peers: dict, k) -> None:
    """Puts our kernels (those of the kernel module `k`) under each environment of `peers` right after 'ours' in
    every case."""
    for case in cases:
        put_after_ours(case, {label: with_environment(case.impls["ours"], env, k) for label, env in peers.items()})


def add_build_baseline(cases: list, baseline_cases: list) -> None:
    """Puts another build's 'ours' (the same suites built on a second kernel module, so case for case the same
    shapes and input layout) right after 'ours' in every case, as 'ours, baseline build'."""
    for case, other in zip(cases, baseline_cases, strict=True):
        assert case.name == other.name, (case.name, other.name)
        put_after_ours(case, {"ours, baseline build": other.impls["ours"]})


def run_suites(args, k, plan: Plan, timer, rotation: int, copy_gbps: float) -> list:
    cases = {suite: list(SUITE_CASES[suite](k, plan, args.device, args.dtype, args.compile))
             for suite in args.suite}
    add_baselines([c for suite_cases in cases.values() for c in suite_cases], baselines(args), k)
    if args.baseline_build is not None:
        import kernels

        k_old = kernels.get_local_kernel(args.baseline_build, backend="cpu" if args.device == "cpu" else None)
        # Python imports a module name once: a baseline whose build carries our module name (the same git
        # revision, e.g. an export of this checkout without its own .git) would silently be our build again.
        if k_old.__name__ == k.__name__:
            raise SystemExit(f"--baseline-build {args.baseline_build}: its build has this build's module name "
                             f"({k.__name__}), so Python would load this build twice; give the baseline its own "
                             "git revision (e.g. git init and commit it) and rebuild it")
        for suite in args.suite:
            add_build_baseline(cases[suite], list(SUITE_CASES[suite](k_old, plan, args.device, args.dtype, False)))
    total = sum(len(c) for c in cases.values())
    start = time.monotonic()
    records, index, group = [], 0, None
    for n, suite in enumerate(args.suite, 1):
        # Each suite may run until its share of the budget is spent, counting from the sweep's start, so an
        # early suite that finishes quickly leaves its time to the next.
        deadline = start + args.budget_seconds * n / len(args.suite) if args.budget_seconds else math.inf
        for case in cases[suite]:
            index += 1
            if time.monotonic() > deadline:
                record = {**case_fields(case), "skipped": "time budget"}
            else:
                if case.compile_group != group:
                    # A fresh start per shape family: one static and one dynamic-rows compile each, and
                    # never the recompile limit, past which dynamo would silently fall back to eager.
                    torch._dynamo.reset()
                    group = case.compile_group
                record = run_case(case, timer, rotation, copy_gbps)
            records.append(record)
            print(progress_line(index, total, time.monotonic() - start, record), file=sys.stderr, flush=True)
    return records


# ---------------------------------------------------------------------------------------------- reports


def fmt_us(t: Optional[dict]) -> str:
    if t is None:
        return ""
    return "error" if "error" in t else f"{t['median_us']:.2f}"


def fmt_gbps(gbps: float) -> str:
    return f"{gbps:.0f}" if gbps >= 10 else f"{gbps:.2g}"


def markdown_table(records: list) -> list:
    """The blog's shape: one row per size, ours and the peers in us, our speedup over each peer, and our
    bandwidth. A failed check marks the row; its speedup and bandwidth are left out."""
    label_cols = list(records[0]["label"])
    peer_names = [impl for impl in records[0]["impls"] if impl != "ours"]
    header = ([*label_cols, "ours (us)", *(f"{p} (us)" for p in peer_names), *(f"vs {p}" for p in peer_names),
               "ours GB/s", "% of copy BW", "check"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        ok = r["check"]["ok"]
        ours = fmt_us(r["times"].get("ours")) + ("" if ok else " ✗")
        speedups = [f"{r['speedup'][p]:.2f}x" if ok and p in r["speedup"] else "—" for p in peer_names]
        gbps = fmt_gbps(r["gbps"]["ours"]) if ok and "ours" in r["gbps"] else "—"
        pct = f"{r['pct_copy_bw']['ours']:.0f}%" if ok and "ours" in r["pct_copy_bw"] else "—"
        check = "ok" if ok else f"**FAIL**: {r['check']['detail']}"
        cells = [*(str(v) for v in r["label"].values()), ours, *(fmt_us(r["times"].get(p)) for p in peer_names),
                 *speedups, gbps, pct, check]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def environment_lines(env: dict) -> list:
    dev = env["device"]
    lines = [f"- device: {dev['name']} ({env['device_type']})"]
    if env["device_type"] == "cuda":
        runtime = f"HIP {env['hip']}" if env["hip"] else f"CUDA {env['cuda']}"
        lines.append(f"- {runtime}, {dev['sm_count']} SMs/CUs, L2 {dev['l2_cache_bytes'] / MB:.0f} MB")
    else:
        lines.append(f"- {dev['threads']} threads, last-level cache {dev['last_level_cache_bytes'] / MB:.0f} MB")
    copy = env["copy_bandwidth"]
    lines += [f"- torch {env['torch']}, Python {env['python']}, kernel `{env['kernel']}`",
              f"- copy bandwidth (read + write, {copy['bytes'] / MB:.0f} MB buffer): {copy['gbps']:.0f} GB/s",
              f"- inputs rotated over >= {env['rotation_bytes'] / MB:.0f} MB (up to {MAX_SETS} input sets)",
              f"- {env['date']}, git {env['git_revision']}, {'quick' if env['quick'] else 'full'} sweep"]
    return lines


def write_markdown(path: Path, env: dict, records: list) -> None:
    lines = ["# Sweep results", "", *environment_lines(env), ""]
    for suite in env["suites"]:
        lines += [f"## {suite}", ""]
        done = [r for r in records if r["suite"] == suite and "skipped" not in r]
        skipped = sum(1 for r in records if r["suite"] == suite and "skipped" in r)
        for table in dict.fromkeys(r["table"] for r in done):
            lines += [f"### {table}", "", *markdown_table([r for r in done if r["table"] == table]), ""]
        if skipped:
            lines += [f"{skipped} case(s) not run: time budget spent.", ""]
        if not done:
            lines += ["No case of this suite ran.", ""]
    path.write_text("\n".join(lines))


IMPL_STYLES = {"ours": ("-", "o"), "ours, no PDL": ("-", "."), "eager": ("--", "s"), "compile": (":", "^"), "torch._scaled_mm": ("--", "s"),
               "F.linear": ("--", "s")}


def plot_suite(path: Path, suite: str, env: dict, records: list) -> bool:
    """Latency against rows (log-log) and % of copy bandwidth against rows, one row of panels per panel key;
    colour by series (hidden size, layer), line style by implementation. False when nothing ran."""
    done = [r for r in records if r["suite"] == suite and "skipped" not in r and r["check"]["ok"]]
    if not done:
        return False
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or the GPU machines
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    panels = list(dict.fromkeys(r["panel"] for r in done))
    fig, axes = plt.subplots(len(panels), 2, figsize=(13, 3.6 * len(panels)), squeeze=False)
    for (ax_time, ax_bw), panel in zip(axes, panels):
        rows = [r for r in done if r["panel"] == panel]
        series = list(dict.fromkeys(r["series"] for r in rows))
        for s_index, name in enumerate(series):
            points = [r for r in rows if r["series"] == name]
            for impl in points[0]["impls"]:
                xs = [r["x"] for r in points if "median_us" in r["times"].get(impl, {})]
                ys = [r["times"][impl]["median_us"] for r in points if "median_us" in r["times"].get(impl, {})]
                bw = [r["pct_copy_bw"][impl] for r in points if impl in r["pct_copy_bw"]]
                if not xs:
                    continue
                style, marker = IMPL_STYLES.get(impl, ("-.", "x"))
                label = f"{impl}, {name}" if name else impl
                kw = {"linestyle": style, "marker": marker, "color": f"C{s_index}", "label": label,
                      "markersize": 4}
                ax_time.plot(xs, ys, **kw)
                ax_bw.plot(xs, bw, **kw)
        ax_time.set(xscale="log", yscale="log", xlabel="rows (M)", ylabel="median latency (us)", title=panel)
        ax_bw.set(xscale="log", xlabel="rows (M)", ylabel="% of measured copy bandwidth", title=panel, ylim=(0, None))
        xs = sorted({r["x"] for r in rows})
        for ax in (ax_time, ax_bw):
            ax.set_xticks(xs, [str(x) for x in xs])  # the measured sizes, not powers of ten
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
        ax_time.legend(fontsize=7, ncol=2)
    copy = env["copy_bandwidth"]["gbps"]
    fig.suptitle(f"{suite} on {env['device']['name']} (copy bandwidth {copy:.0f} GB/s), torch {env['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    args = parse_args(argv)
    # "ours" is the kernel alone: the wrapper's hand-off of some FP8 GEMMs to torch._scaled_mm (routing.py) is
    # off unless asked for (--env-baseline FP8DK_SKINNY_ROUTE=1 times the routed wrapper as a peer).
    os.environ.setdefault("FP8DK_SKINNY_ROUTE", "0")
    torch.manual_seed(0)
    # A recompile past the limit must raise, not silently time eager code under the "compile" label.
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    k = load_kernel(args)
    device_info = describe_device(args.device)
    out_dir = args.out or REPO / "benchmarks" / "results" / device_slug(device_info, args.device)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = (QUICK_CPU if args.device == "cpu" else QUICK_GPU) if args.quick else FULL
    if args.gemm_shapes == "targets":
        plan = dataclasses.replace(plan, gemm_shapes=GEMM_SHAPES_TARGETS, gemm_m=FULL.gemm_m, gemm16_models=())

    copy = copy_bandwidth(args.device, args.quick)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "device_type": args.device,
        "device": device_info,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "python": platform.python_version(),
        "kernel": k.__name__,
        "copy_bandwidth": copy,
        "rotation_bytes": rotation_bytes(args.device, device_info, args.quick),
        "quick": args.quick,
        "compile_peers": args.compile,
        "suites": args.suite,
        "dtypes": args.dtype,
        "budget_seconds": args.budget_seconds,
        "pdl_baseline": args.pdl_baseline,
        "env_baselines": args.env_baseline,
        "baseline_build": str(args.baseline_build) if args.baseline_build else None,
    }
    print(f"sweep on {device_info['name']}: copy bandwidth {copy['gbps']:.0f} GB/s, writing to {out_dir}",
          file=sys.stderr, flush=True)
    timer = CudaGraphTimer(args.quick) if args.device == "cuda" else CpuTimer(args.quick)
    started = time.monotonic()
    records = run_suites(args, k, plan, timer, env["rotation_bytes"], copy["gbps"])
    env["elapsed_seconds"] = round(time.monotonic() - started, 1)

    (out_dir / "sweep.json").write_text(json.dumps({"environment": env, "results": records}, indent=1) + "\n")
    write_markdown(out_dir / "sweep.md", env, records)
    plots = [suite for suite in args.suite if plot_suite(out_dir / f"{suite}.png", suite, env, records)]
    failed = [r["name"] for r in records if "check" in r and not r["check"]["ok"]]
    print(f"wrote {out_dir}/sweep.json, sweep.md" + "".join(f", {s}.png" for s in plots)
          + f" in {env['elapsed_seconds']} s", file=sys.stderr)
    if failed:
        print(f"{len(failed)} case(s) FAILED the correctness check: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
