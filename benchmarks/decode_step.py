"""One full decode step of a static-FP8 Llama, through our kernels and through PyTorch's own ops.

    python tools/build.py                                   # once: the local build this script loads
    python benchmarks/decode_step.py                        # Llama-3.1-405B, per-GPU shard of TP8, batch 1 8 32
    python benchmarks/decode_step.py --model llama-3.1-8b   # the whole 8B model on one GPU
    python benchmarks/decode_step.py --quick                # a few layers, for a smoke run
    torchrun --nproc-per-node 2 benchmarks/decode_step.py --tp 2 [--check --layers 4]
    python benchmarks/decode_step.py --device cpu --layers 2 --hidden 256 --heads 16 --kv-heads 8 \\
        --head-dim 64 --intermediate 2048 --kv-len 64 --batch 1 4 --no-compile     # CPU smoke

Each layer: fused_add_rms_norm (FP8 out) -> QKV GEMM -> RoPE + KV-cache write + SDPA -> FP8 quantize -> O GEMM
[-> all-reduce] -> fused_add_rms_norm (FP8 out) -> gate_up GEMM -> silu_and_mul (FP8 out) -> down GEMM
[-> all-reduce]; then the final RMSNorm (no LM head). Two builds of that model share the weights and KV caches:
"ours" runs that model (benchmarks/decoder.py, on the kernel's convert modules) with the package's ops
(convert.KERNEL_OPS), "torch" the same modules with torch._scaled_mm for the GEMMs and torch.compile'd
reference.py functions for the elementwise ops (eager with --no-compile). Attention is torch SDPA in both.
Weights are random FP8 generated on the device; activation scales are fixed.

Shapes: --model gives the full model; each GPU runs the per-GPU shard of a TP-S deployment (--shard-of S,
default 8 for 405B as in the blog, else --tp): heads, KV heads and intermediate size divided by S. With
--tp N > 1 (torchrun, one process per GPU) the ranks hold N such shards of one model and all-reduce after O
and down, so 405B --tp 2 measures TP8 per-GPU compute with a 2-GPU all-reduce. --check compares the TP=N step
with the unsharded step of the same seeded weights on rank 0, for both builds (every layer's attention and
MLP output and the final output, against a noise floor measured on the spot), and exits: 1 on failure.

Reported per batch and build: the step latency (median over --replays CUDA-graph replays in each of two process
states, fast and slow, that change a graph's launch gaps (STATES below); eager steps on CPU or with --no-graph)
and a torch.profiler breakdown of the kernel time of eager steps into GEMM, RMSNorm,
SwiGLU, quant, attention, communication and other, with "idle" = latency - kernel time (launch gaps); and
the relative difference of our output from the torch build's next to its noise floor (the torch build's own
output moved by a half-ulp random perturbation of its input).
Written to --out (default benchmarks/results/<device>/decode/) as Markdown, JSON and a PNG chart.
"""

import os

# This machine's rule for NCCL: no NVLink multicast or symmetric memory (they can take shared GPUs down).
# Set before torch.distributed initializes NCCL, and inherited by anything it spawns.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_name, _value)

import argparse  # noqa: E402
import datetime  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import asdict, dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Dict, List, Optional, Tuple  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import decoder  # noqa: E402
from sweep import CudaGraphTimer, describe_device, device_slug, git_revision, load_kernel, synced_ms  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a Llama model (or of one shard of it: heads, kv_heads and intermediate divided)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: int
    rope_theta: float = 500000.0
    eps: float = 1e-5


MODELS = {
    "llama-3.1-405b": ModelShape(hidden=16384, heads=128, kv_heads=8, head_dim=128, intermediate=53248, layers=126),
    "llama-3.1-8b": ModelShape(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, layers=32),
}
# The blog's deployment: 405B on a node of 8 GPUs. The 8B model fits one GPU whole.
DEFAULT_SHARD_OF = {"llama-3.1-405b": 8, "llama-3.1-8b": 1}
QUICK_LAYERS = 4

# Activation amax the static scales are set from (scale = amax / fp8_max): the normed inputs of QKV and
# gate_up are ~N(0, 1), SDPA's output averages values ~N(0, 1), silu(gate) * up of N(0, 1) stays well below 16.
NORMED_AMAX, ATTENTION_AMAX, SWIGLU_AMAX = 8.0, 4.0, 16.0
# Random FP8 weights are N(0, 16^2) codes; a weight scale of 1 / (16 sqrt(K)) keeps each GEMM output ~N(0, 1).
WEIGHT_CODE_STD = 16.0

CATEGORIES = ("GEMM", "RMSNorm", "SwiGLU", "quant", "attention", "communication", "other")
LABELS = {category: f"decode/{category}" for category in CATEGORIES}
CATEGORY_OF_LABEL = {label: category for category, label in LABELS.items()}
STEP_LABEL = "decode/step"
PATHS = ("ours", "torch")
# The TP=N step differs from the TP=1 step by one extra 16-bit rounding of each rank's O and down partial sums.
# The next static FP8 quantization turns such last-bit differences into whole FP8 steps (6-12%) wherever a
# value sits near a rounding boundary, and layers compound them: a few layers reach several % relative error
# from roundings alone. So the check measures that noise floor, the TP=1 step's response to a half-ulp random
# perturbation of its input, and allows a small multiple of it; a sharding mistake errs by ~100%.
CHECK_NOISE_FACTOR = 3.0
CHECK_MIN_TOLERANCE = 1e-2


# ---------------------------------------------------------------- setup


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="llama-3.1-405b")
    p.add_argument("--shard-of", type=int, help="TP degree whose per-GPU shard each GPU runs "
                   "(default: 8 for 405B, else --tp)")
    p.add_argument("--layers", type=int, help="number of decoder layers (default: the model's)")
    for dim in ("hidden", "heads", "kv-heads", "head-dim", "intermediate"):
        p.add_argument(f"--{dim}", type=int, help=f"override the full model's {dim.replace('-', ' ')}")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="decode batch sizes")
    p.add_argument("--kv-len", type=int, default=1024, help="keys each sequence attends to, the new one included")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="16-bit activation dtype")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (launch with torchrun)")
    p.add_argument("--check", action="store_true", help="compare TP=--tp with TP=1 on the same weights and exit")
    p.add_argument("--replays", type=int, default=50, help="timed steps per measurement (>= 30 on a GPU)")
    p.add_argument("--profile-steps", type=int, default=1, help="eager steps profiled for the breakdown")
    p.add_argument("--no-compile", action="store_true", help="run the torch build's elementwise ops eagerly")
    p.add_argument("--no-graph", action="store_true", help="time eager steps instead of CUDA-graph replays")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_LAYERS} layers unless --layers is given")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="output folder (default benchmarks/results/<device>/decode/)")
    p.add_argument("--repo-id", help="load with kernels.get_kernel(REPO_ID, version=VERSION) instead of the "
                   "local build (as benchmarks/sweep.py)")
    p.add_argument("--version", type=int, default=1, help="kernel version for --repo-id (default 1)")
    p.add_argument("--one-process", action="store_true",
                   help="time every batch size in this process (default on a GPU with one rank: a child process "
                   "per batch size, see STATES)")
    args = p.parse_args(argv)
    if args.replays < 30 and args.device == "cuda":
        p.error("--replays must be at least 30 on a GPU")
    if args.check and args.tp < 2:
        p.error("--check compares TP=--tp against TP=1: give --tp 2 or more (and launch with torchrun)")
    if args.shard_of is None:
        args.shard_of = max(DEFAULT_SHARD_OF[args.model], args.tp)
    if args.shard_of % args.tp != 0:
        p.error(f"--shard-of ({args.shard_of}) must be a multiple of --tp ({args.tp})")
    return args


def full_shape(args) -> ModelShape:
    shape = MODELS[args.model]
    overrides = {name: getattr(args, name) for name in ("hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                                        "layers") if getattr(args, name) is not None}
    if args.quick and args.layers is None:
        overrides["layers"] = QUICK_LAYERS
    return replace(shape, **overrides)


def split_shape(shape: ModelShape, parts: int) -> ModelShape:
    """One of `parts` tensor-parallel shards: attention heads, KV heads and MLP columns divided."""
    for name in ("heads", "kv_heads", "intermediate"):
        if getattr(shape, name) % parts != 0:
            raise SystemExit(f"{name} ({getattr(shape, name)}) is not divisible into {parts} shards")
    return replace(shape, heads=shape.heads // parts, kv_heads=shape.kv_heads // parts,
                   intermediate=shape.intermediate // parts)


@dataclass
class Dist:
    """This process's place in the tensor-parallel group (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1
    all_reduce: Optional[Callable[[torch.Tensor], None]] = None


def init_distributed(args) -> Dist:
    if args.tp == 1:
        return Dist()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != args.tp:
        raise SystemExit(f"--tp {args.tp} needs {args.tp} processes: launch with "
                         f"`torchrun --nproc-per-node {args.tp} {sys.argv[0]} ...` (WORLD_SIZE is {world})")
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        # "nccl" is RCCL on ROCm builds of torch.
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    return Dist(dist.get_rank(), world, functools.partial(dist.all_reduce, op=dist.ReduceOp.SUM))


def device_of(args) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")


# ---------------------------------------------------------------- weights


@dataclass
class Scales:
    """Static per-tensor scales, the same on every rank (a weight's scale belongs to the unsharded tensor)."""

    qkv_in: float
    o_in: float
    gate_up_in: float
    down_in: float
    qkv_w: float
    o_w: float
    gate_up_w: float
    down_w: float


def make_scales(group: ModelShape, fp8_max: float) -> Scales:
    def weight_scale(k: int) -> float:
        return 1.0 / (WEIGHT_CODE_STD * k ** 0.5)

    return Scales(qkv_in=NORMED_AMAX / fp8_max, o_in=ATTENTION_AMAX / fp8_max, gate_up_in=NORMED_AMAX / fp8_max,
                  down_in=SWIGLU_AMAX / fp8_max, qkv_w=weight_scale(group.hidden),
                  o_w=weight_scale(group.heads * group.head_dim), gate_up_w=weight_scale(group.hidden),
                  down_w=weight_scale(group.intermediate))


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor


def take_blocks(t: torch.Tensor, blocks, dim: int = 0) -> torch.Tensor:
    """The (start, size) blocks of `t` along `dim`, concatenated into a contiguous copy."""
    return torch.cat([t.narrow(dim, start, size) for start, size in blocks], dim=dim)


def random_fp8(shape, blocks, dim: int, generator, device, fp8_dtype) -> torch.Tensor:
    """The `blocks` (see take_blocks) of a random FP8 matrix of `shape`: N(0, WEIGHT_CODE_STD^2) codes, cut
    while still bf16 (fewer bytes to convert, and no FP8 cat)."""
    codes = torch.randn(shape, generator=generator, device=device, dtype=torch.bfloat16)
    codes = take_blocks(codes, blocks, dim).mul_(WEIGHT_CODE_STD)
    bound = torch.finfo(fp8_dtype).max
    return codes.clamp_(-bound, bound).to(fp8_dtype)


def make_layer(group: ModelShape, rank: int, world: int, index: int, seed: int, cache_batch: int, kv_len: int,
               device, dtype, fp8_dtype) -> LayerWeights:
    """Layer `index` of the model `group` (what the TP group holds together), generated from the seed on the
    device, then rank `rank`'s column/row-parallel shard of it (the whole layer for world == 1)."""
    g = torch.Generator(device).manual_seed(seed * 1_000_003 + index)
    h = group.hidden
    q_cols, kv_cols, inter = group.heads * group.head_dim, group.kv_heads * group.head_dim, group.intermediate
    rq, rkv, ri = q_cols // world, kv_cols // world, inter // world

    def norm_weight():
        return (1 + 0.1 * torch.randn(h, generator=g, device=device)).to(dtype)

    def cache():
        full = torch.randn(cache_batch, group.kv_heads, kv_len, group.head_dim, generator=g, device=device,
                           dtype=dtype)
        return take_blocks(full, [(rank * group.kv_heads // world, group.kv_heads // world)], dim=1)

    input_norm, post_norm = norm_weight(), norm_weight()
    # Column-parallel QKV and gate_up: this rank's q, k and v heads, its gate and up columns.
    # Row-parallel O and down: the matching input columns, so each rank's output is a partial sum.
    qkv = random_fp8((q_cols + 2 * kv_cols, h),
                     [(rank * rq, rq), (q_cols + rank * rkv, rkv), (q_cols + kv_cols + rank * rkv, rkv)], 0,
                     g, device, fp8_dtype)
    o = random_fp8((h, q_cols), [(rank * rq, rq)], 1, g, device, fp8_dtype)
    gate_up = random_fp8((2 * inter, h), [(rank * ri, ri), (inter + rank * ri, ri)], 0, g, device, fp8_dtype)
    down = random_fp8((h, inter), [(rank * ri, ri)], 1, g, device, fp8_dtype)
    return LayerWeights(input_norm, post_norm, qkv, o, gate_up, down, cache(), cache())


def layer_bytes(shard: ModelShape, cache_batch: int, kv_len: int, act_bytes: int) -> int:
    """Device memory one layer keeps: FP8 weights (1 byte each) and the K and V caches."""
    d = shard.head_dim
    weights = shard.hidden * ((shard.heads + 2 * shard.kv_heads) * d + shard.heads * d + 3 * shard.intermediate)
    return weights + 2 * cache_batch * shard.kv_heads * kv_len * d * act_bytes


def check_memory(args, shard: ModelShape, group: ModelShape, dist_ctx: Dist, device: torch.device) -> None:
    """Fail early, with the number of layers that would fit, rather than run out of memory mid-generation."""
    if device.type != "cuda":
        return
    act_bytes = 2
    per_layer = layer_bytes(shard, max(args.batch), args.kv_len, act_bytes)
    if args.check and dist_ctx.rank == 0:
        per_layer += layer_bytes(group, max(args.batch), args.kv_len, act_bytes)
    # Generation holds the largest unsharded matrix (gate_up) as bf16 codes and this rank's blocks of it as
    # bf16 and FP8; 2 GiB more for activations, graph pools and library workspaces.
    fixed = 5 * 2 * group.intermediate * group.hidden + (2 << 30)
    free = torch.cuda.mem_get_info(device)[0]
    if fixed + shard.layers * per_layer > free:
        fit = max(0, (free - fixed) // per_layer)
        raise SystemExit(f"{shard.layers} layers need {(fixed + shard.layers * per_layer) / 2**30:.1f} GiB, "
                         f"{free / 2**30:.1f} GiB free: pass --layers {fit} or fewer")


# ---------------------------------------------------------------- the two builds


def annotated(fn: Callable, category: str) -> Callable:
    """fn inside a profiler range named for its category, which the breakdown attributes kernels by."""
    label = LABELS[category]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return wrapper


def annotated_ops(convert, ops):
    return convert.DecodeOps(annotated(ops.add_rms_norm, "RMSNorm"), annotated(ops.silu_and_mul, "SwiGLU"),
                             annotated(ops.gemm, "GEMM"), annotated(ops.quantize, "quant"))


def torch_ops(convert, reference, compile_elementwise: bool):
    """The peer build: torch._scaled_mm (cuBLASLt / hipBLASLt) for the GEMMs and reference.py's definitions,
    torch.compile'd (one fused kernel each, recompiled per batch size), for the elementwise ops."""

    def add_rms_norm(x, residual, weight, eps, scale, out_dtype):
        out, new_residual = reference.fused_add_rms_norm_ref(x, residual, weight, eps, scale, out_dtype)
        residual.copy_(new_residual)
        return out

    def gemm(a, b, scale_a, scale_b, bias, out_dtype):
        return torch._scaled_mm(a, b.t(), scale_a, scale_b, bias=bias, out_dtype=out_dtype)

    def maybe_compile(fn):
        return torch.compile(fn, dynamic=False) if compile_elementwise else fn

    return convert.DecodeOps(maybe_compile(add_rms_norm), maybe_compile(reference.silu_and_mul_ref), gemm,
                             maybe_compile(reference.quantize_fp8))


def build_model(convert, layers: List[LayerWeights], final_norm: torch.Tensor, shard: ModelShape, scales: Scales,
                ops, all_reduce, dtype, kv_len: int, gemm_of: Optional[Dict[str, Callable]] = None,
                attention: Optional[Callable] = None):
    """The decoder over shared weights, running `ops`, with profiler ranges around every op category; its FP8
    modules from the kernel's `convert`. `gemm_of` (GEMM class "qkv", "o", "gate_up" or "down" -> function with
    ops.gemm's signature) replaces ops.gemm for those classes, and `attention` torch SDPA: the variants of
    benchmarks/decode_attribution.py."""
    ops = annotated_ops(convert, ops)
    attention = annotated(attention or decoder.SdpaDecodeAttention(shard.heads, shard.kv_heads, shard.head_dim),
                          "attention")
    reduce = None if all_reduce is None else annotated(all_reduce, "communication")

    def linear(gemm, weight, weight_scale, input_scale):
        own_gemm = (gemm_of or {}).get(gemm)
        gemm_ops = ops if own_gemm is None else ops._replace(gemm=annotated(own_gemm, "GEMM"))
        return convert.Fp8Linear(weight, weight_scale, input_scale, None, dtype, gemm_ops)

    blocks = [
        decoder.Fp8DecoderLayer(
            w.input_norm, w.post_norm, shard.eps,
            linear("qkv", w.qkv, scales.qkv_w, scales.qkv_in), linear("o", w.o, scales.o_w, scales.o_in),
            convert.Fp8LlamaMLP(linear("gate_up", w.gate_up, scales.gate_up_w, scales.gate_up_in),
                                linear("down", w.down, scales.down_w, scales.down_in), ops),
            attention, reduce, ops)
        for w in layers
    ]
    rope = decoder.rope_tables(kv_len, shard.head_dim, shard.rope_theta, dtype, final_norm.device)
    return decoder.Fp8Decoder(blocks, final_norm, shard.eps, rope, ops)


def caches_for(layers: List[LayerWeights], batch: int):
    """The first `batch` sequences of every layer's cache (views: the builds share the caches)."""
    return [decoder.KVCache(w.key_cache[:batch], w.value_cache[:batch]) for w in layers]


# ---------------------------------------------------------------- timing and profiling

WARMUP_STEPS = 3


def capture_graph(step: Callable[[], torch.Tensor]) -> torch.cuda.CUDAGraph:
    """One decode step captured as a CUDA graph, after the sweep's warm-up (side stream, as capture requires:
    library handles, NCCL communicators and compiled kernels must exist first)."""
    CudaGraphTimer.warm_up([step])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


# The same graph replays at different speeds depending on what the process launched eagerly before it
# (docs/experiments/README.md, items 51-52; H100, 405B TP8 shard, batch 32: ours 25.5 / 26.1 ms, the torch
# build's 26.8 / 28.1 ms). An eager launch with programmatic dependent launch (PDL; ours, and some cuBLAS
# kernels) leaves the "fast" state; the model's attention (RoPE, cache write, SDPA) the "slow" one; most other
# launches, and graph replays, leave it as it was. The graph's kernels take as long in both; the launch gaps
# between them differ. Which state a server is in depends on the eager work between its replays, so a fair
# comparison times both builds in the same state: decode_step.py times every build in both.
STATES = ("fast", "slow")
# The state probe (ProcessState.probe_ms): a graph of PROBE_LAUNCHES one-element adds. A fast-state probe must be
# this much shorter than the slow-state one for the fast figures to count as taken in the fast state (item 53:
# 1.003-1.013 against 1.185-1.193 ms on an H100, 15% apart).
PROBE_LAUNCHES = 1000
FAST_PROBE_MAX_RATIO = 0.95
# Setter launches tried before a fast-state timing goes ahead with a probe that says slow (item 53: in one run the
# torch build's setter missed where ours, the next in the same process, took hold).
SETTER_TRIES = 3


def timing_states(args) -> tuple:
    """The process states decode steps are timed in: both on a GPU with CUDA graphs, else one ("eager")."""
    return STATES if args.device == "cuda" and not args.no_graph else ("eager",)


class ProcessState:
    """Eager launches that put the process in one of STATES before a graph is timed: a PDL launch of our
    quantize_fp8 on 16 values (fast; FP8DK_PDL=0 would turn it into a plain launch), or the attention of one
    layer on a private cache (slow). Both are on the current stream, which the replays use."""

    def __init__(self, setup: "Setup", batch: int, kv_len: int, device: torch.device):
        shard, dtype = setup.shard, setup.dtype
        self.kernel = setup.kernel
        self.values = torch.ones(1, 16, device=device, dtype=dtype)
        self.scale = torch.ones((), device=device)
        self.attention = decoder.SdpaDecodeAttention(shard.heads, shard.kv_heads, shard.head_dim)
        self.qkv = torch.zeros(batch, (shard.heads + 2 * shard.kv_heads) * shard.head_dim, device=device,
                               dtype=dtype)
        cache_shape = (batch, shard.kv_heads, kv_len, shard.head_dim)
        self.cache = decoder.KVCache(torch.zeros(cache_shape, device=device, dtype=dtype),
                                     torch.zeros(cache_shape, device=device, dtype=dtype))
        self.pos = kv_len - 1
        rope = decoder.rope_tables(kv_len, shard.head_dim, shard.rope_theta, dtype, device)
        self.rope = decoder.Rope(rope.cos[self.pos], rope.sin[self.pos])

        self.probe_counter = torch.zeros(1, device=device)  # kept: the probe's replays write it
        self.probe_graph = capture_graph(lambda: [self.probe_counter.add_(1) for _ in range(PROBE_LAUNCHES)])
        self.enter("slow")
        self.slow_probe_ms = self.probe_ms()  # the reference a fast setter's probe is held against

    def enter(self, state: str) -> None:
        if state == "fast":
            self.kernel.quantize_fp8(self.values, self.scale)
        elif state == "slow":
            self.attention(self.qkv, self.cache, self.pos, self.rope)
        else:
            raise ValueError(f"ProcessState: state must be one of {STATES}, got {state!r}")
        torch.cuda.synchronize()

    def probe_ms(self) -> float:
        """Which state the process is in, read off a graph of PROBE_LAUNCHES one-element adds: the median of 3
        replays, which leave the state as they found it (H100: about 1.0 ms fast, 1.19 ms slow; item 53). A
        setter does not always take hold (item 52's second condition), so each timing keeps its probe."""
        return statistics.median(CudaGraphTimer.replay_ms(self.probe_graph, 3))

    def enter_checked(self, state: str) -> Tuple[float, int]:
        """enter_with_probe with this process's setters, probe and slow-state reference."""
        return enter_with_probe(self.enter, self.probe_ms, state, self.slow_probe_ms)


def enter_with_probe(enter: Callable[[str], None], probe_ms: Callable[[], float], state: str,
                     slow_probe_ms: float) -> Tuple[float, int]:
    """enter(state), then the probe; for the fast state, again while the probe is above FAST_PROBE_MAX_RATIO
    times the slow reference, up to SETTER_TRIES setters in all. Returns the last probe's milliseconds and the
    setters run."""
    for tries in range(1, SETTER_TRIES + 1):
        enter(state)
        probe = probe_ms()
        if probe_shows(state, probe, slow_probe_ms):
            break
    return probe, tries


def probe_shows(state: str, probe_ms: float, slow_probe_ms: float) -> bool:
    """Whether a probe read right after `state`'s setter shows that state: for the fast state, at most
    FAST_PROBE_MAX_RATIO times the slow reference; the slow state is what a missed setter leaves, so any probe."""
    return state != "fast" or probe_ms <= FAST_PROBE_MAX_RATIO * slow_probe_ms


def replay_ms_in_state(graph: torch.cuda.CUDAGraph, count: int, states: ProcessState,
                       state: str) -> Tuple[List[float], float, int]:
    """Milliseconds of `count` timed replays of `graph` after `state`'s setter (ProcessState.enter_checked), the
    state probe and WARMUP_STEPS replays; the probe's milliseconds; and the setters run."""
    probe, tries = states.enter_checked(state)
    CudaGraphTimer.replay_ms(graph, WARMUP_STEPS)
    return CudaGraphTimer.replay_ms(graph, count), probe, tries


def fast_state_reached(latency_ms: Dict[str, Dict[str, float]]) -> bool:
    """Whether a build's fast-state timing ran in the fast state, by its probes (True without probes)."""
    fast, slow = (latency_ms.get(state, {}).get("probe_ms") for state in STATES)
    return fast is None or slow is None or probe_shows("fast", fast, slow)


def category_of(event) -> str:
    """The category of the innermost decode/* profiler range around a CPU event, "other" outside all."""
    while event is not None:
        if event.name in CATEGORY_OF_LABEL:
            return CATEGORY_OF_LABEL[event.name]
        event = event.cpu_parent
    return "other"


@dataclass
class Breakdown:
    time_us: Dict[str, float]  # per step, by category
    calls: Dict[str, float]  # kernels (GPU) or op calls (CPU) per step, by category
    top_kernels: List[dict]  # the largest kernels, for checking the categorization by eye

    @property
    def busy_us(self) -> float:
        return sum(self.time_us.values())


def kernel_breakdown(events, steps: int) -> Breakdown:
    """GPU kernel time by category: each kernel belongs to the CPU op that launched it (the profiler's
    correlation), and that op to the innermost decode/* range around it."""
    time_us, calls, per_kernel = Counter(), Counter(), Counter()
    for event in events:
        if event.device_type != DeviceType.CPU:
            continue
        # A profiler range's GPU-side span (a user annotation of the same name) is linked to it like a kernel.
        kernels = [k for k in event.kernels if not (event.is_user_annotation and k.name == event.name)]
        if kernels:
            category = category_of(event)
            for k in kernels:
                time_us[category] += k.duration
                calls[category] += 1
                per_kernel[(category, k.name)] += k.duration
    device_total = sum(e.device_time_total for e in events
                       if e.device_type != DeviceType.CPU and not e.is_user_annotation)
    # Kernels the profiler linked to no CPU op (if any) count as "other".
    time_us["other"] += max(0.0, device_total - sum(time_us.values()))
    top = [{"category": c, "kernel": name, "us_per_step": us / steps} for (c, name), us in per_kernel.most_common(25)]
    return Breakdown({c: time_us[c] / steps for c in CATEGORIES}, {c: calls[c] / steps for c in CATEGORIES}, top)


def cpu_breakdown(events, steps: int) -> Breakdown:
    """On CPU every op runs synchronously inside its range: the ranges' host time is the op time."""
    time_us, calls = Counter(), Counter()
    for event in events:
        category = CATEGORY_OF_LABEL.get(event.name)
        if category is not None:
            time_us[category] += event.cpu_time_total
            calls[category] += 1
    step_total = sum(e.cpu_time_total for e in events if e.name == STEP_LABEL)
    time_us["other"] += max(0.0, step_total - sum(time_us.values()))
    return Breakdown({c: time_us[c] / steps for c in CATEGORIES}, {c: calls[c] / steps for c in CATEGORIES}, [])


def profile_breakdown(step: Callable[[], object], steps: int, device: torch.device, kernel) -> Breakdown:
    """Per-category time of eager steps. Eager, because kernels replayed from a CUDA graph have no CPU op to
    attribute them to. Without programmatic dependent launch (FP8DK_PDL=0 for the profiled steps): a kernel
    launched with PDL starts while its predecessor still runs and waits for it on the GPU, so its profiled
    duration would include that wait (a 1.4 us SwiGLU showed as 1.8 ms a step). Without PDL each kernel's
    duration is its own."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with kernel.tuning_overrides({"FP8DK_PDL": "0"}), torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP_LABEL):
                step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events = prof.events()
    breakdown = kernel_breakdown(events, steps) if device.type == "cuda" else cpu_breakdown(events, steps)
    if breakdown.busy_us > 0 and breakdown.time_us["other"] == breakdown.busy_us:
        print("warning: the profiler attributed no kernel to a decode/* range; the breakdown is all 'other'",
              file=sys.stderr)
    return breakdown


@dataclass
class Measurement:
    path: str
    batch: int
    latency_ms: Dict[str, Dict[str, float]]  # per state (timing_states): median, p10, p90 over the timed steps
    breakdown: Breakdown
    rel_diff_vs_torch: float
    # The torch build's own output moved by a half-ulp random perturbation of its input: how far two runs
    # that differ only in roundings drift apart over these layers (random FP8 weights amplify it).
    noise_floor: float = 0.0

    def idle_us(self, state: str) -> float:
        return max(0.0, self.latency_ms[state]["median"] * 1e3 - self.breakdown.busy_us)


def summarize(samples: List[float]) -> Dict[str, float]:
    q = statistics.quantiles(samples, n=10)
    return {"median": statistics.median(samples), "p10": q[0], "p90": q[-1], "steps": len(samples)}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in float32."""
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def measure(model, caches, x: torch.Tensor, pos: int, args, device: torch.device, barrier,
            states: Optional[ProcessState]) -> tuple:
    """One build at one batch size: its output and latency per process state (timing_states). On a GPU the
    step is captured once and its replays timed after each state's setter."""
    def step():
        return model(x, caches, pos)

    out = step().clone()  # the first call compiles the torch build's functions
    barrier()
    latency = {}
    if device.type == "cuda" and not args.no_graph:
        graph = capture_graph(step)
        for state in timing_states(args):
            samples, probe, tries = replay_ms_in_state(graph, args.replays, states, state)
            latency[state] = {**summarize(samples), "probe_ms": probe, "setter_tries": tries}
    else:
        latency["eager"] = summarize(synced_ms(step, args.replays, device, WARMUP_STEPS))
    barrier()
    return out, latency


# ---------------------------------------------------------------- runs


@dataclass
class Setup:
    """Everything built once per run: the kernel, shapes and weights."""

    kernel: object
    shard: ModelShape
    group: ModelShape
    scales: Scales
    layers: List[LayerWeights]
    final_norm: torch.Tensor
    dtype: torch.dtype
    fp8_dtype: torch.dtype


def make_setup(args, dist_ctx: Dist, device: torch.device) -> Setup:
    kernel = load_kernel(args)
    full = full_shape(args)
    shard = split_shape(full, args.shard_of)
    group = split_shape(full, args.shard_of // dist_ctx.world)
    check_memory(args, shard, group, dist_ctx, device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fp8_dtype = kernel.native_fp8_dtype(device)
    start = time.perf_counter()
    layers = [make_layer(group, dist_ctx.rank, dist_ctx.world, i, args.seed, max(args.batch), args.kv_len,
                         device, dtype, fp8_dtype) for i in range(full.layers)]
    g = torch.Generator(device).manual_seed(args.seed)
    final_norm = (1 + 0.1 * torch.randn(full.hidden, generator=g, device=device)).to(dtype)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    log(dist_ctx, f"generated {full.layers} layers in {time.perf_counter() - start:.1f} s")
    scales = make_scales(group, kernel.reference.fp8_max(fp8_dtype))
    return Setup(kernel, shard, group, scales, layers, final_norm, dtype, fp8_dtype)


def path_ops(setup: Setup, args) -> Dict[str, object]:
    """The ops of the two builds, by name."""
    return {"ours": setup.kernel.convert.KERNEL_OPS,
            "torch": torch_ops(setup.kernel.convert, setup.kernel.reference, not args.no_compile)}


def log(dist_ctx: Dist, message: str) -> None:
    if dist_ctx.rank == 0:
        print(message, flush=True)


def batch_input(setup: Setup, hidden: int, batch: int, seed: int, device) -> torch.Tensor:
    """The step's input (the embeddings of the new tokens), identical on every rank."""
    g = torch.Generator(device).manual_seed(seed + 7919 * batch)
    return torch.randn(batch, hidden, generator=g, device=device, dtype=setup.dtype)


def fresh_compile_cache() -> None:
    """The torch build compiles its functions per batch size (dynamic=False): start each batch size afresh, so
    no number of batch sizes reaches dynamo's recompile limit (which main turns into an error rather than a
    silent fall back to eager code timed as "compiled")."""
    torch._dynamo.reset()


def run_benchmark(args, setup: Setup, dist_ctx: Dist, device: torch.device) -> List[Measurement]:
    models = {path: build_model(setup.kernel.convert, setup.layers, setup.final_norm, setup.shard, setup.scales, ops,
                                dist_ctx.all_reduce, setup.dtype, args.kv_len)
              for path, ops in path_ops(setup, args).items()}
    barrier = dist.barrier if dist_ctx.world > 1 else (lambda: None)
    pos = args.kv_len - 1
    results = []
    for batch in args.batch:
        fresh_compile_cache()
        x = batch_input(setup, setup.shard.hidden, batch, args.seed, device)
        caches = caches_for(setup.layers, batch)
        states = ProcessState(setup, batch, args.kv_len, device) if device.type == "cuda" else None
        outputs, latency = {}, {}
        for path in reversed(PATHS):  # torch first: its output is the agreement baseline
            outputs[path], latency[path] = measure(models[path], caches, x, pos, args, device, barrier, states)
            log(dist_ctx, f"batch {batch:3d} {path:5s}: " + ", ".join(
                f"{summary['median']:8.3f} ms per step ({state}"
                + (f", probe {summary['probe_ms']:.3f} ms)" if "probe_ms" in summary else ")")
                for state, summary in latency[path].items()))
        # Profiled after both builds are timed: a profiler session leaves later graph replays slower (ours
        # +0.15 ms a step at batch 32 on an H100, docs/experiments/README.md, item 52).
        noise = relative_error(models["torch"](half_ulp_perturbed(x, args.seed), caches, pos), outputs["torch"])
        for path in PATHS:
            breakdown = profile_breakdown(lambda: models[path](x, caches, pos), args.profile_steps, device,
                                          setup.kernel)
            results.append(Measurement(path, batch, latency[path], breakdown,
                                       relative_error(outputs[path], outputs["torch"]), noise))
    return results


def batch_processes(args, dist_ctx: Dist) -> bool:
    """Whether each batch size runs in a child process of its own: CUDA-graph timing on one rank, unless
    --one-process. In one process, the fast state stopped taking hold after the first batch size's graphs (H100:
    the same numbers in both states at batch 8 and 32 in three runs; items 51-52); in a fresh process it took hold
    in all but one of many tries (item 53, which the setter retries and the probe cover), and no earlier batch
    size's profiler session slows the replays. Under torchrun every rank times its batches in its own process."""
    return (args.device == "cuda" and not args.no_graph and not args.one_process and dist_ctx.world == 1
            and len(args.batch) > 1)


def measurement_of(record: dict) -> Measurement:
    """A Measurement back from its entry in a report's JSON (write_reports)."""
    breakdown = Breakdown(record["breakdown_us"], record["calls_per_step"], record["top_kernels"])
    return Measurement(record["path"], record["batch"], record["latency_ms"], breakdown,
                       record["rel_diff_vs_torch"], record["noise_floor"])


def child_report(script: str, argv: List[str], *extra: str, quiet: bool = False) -> dict:
    """The JSON report of a child process running `script` with the options `argv`, then `extra` and --out a
    temporary folder (later options override earlier ones). quiet: the child's output is kept, and shown only if
    it fails."""
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([sys.executable, script, *argv, *extra, "--out", out], capture_output=quiet, text=True)
        if run.returncode != 0:
            output = f":\n{run.stdout[-2000:]}{run.stderr[-4000:]}" if quiet else ""
            raise SystemExit(f"{Path(script).name}: the child process with {' '.join(extra)} failed "
                             f"(exit {run.returncode}){output}")
        (report,) = Path(out).glob("*.json")
        return json.loads(report.read_text())


def run_batch_processes(args, argv: List[str]) -> List[Measurement]:
    """run_benchmark for each batch size in a child process of this script (child_report: the same options,
    then --batch B --one-process); its measurements read back from the child's JSON report."""
    return [measurement_of(r) for batch in args.batch
            for r in child_report(__file__, argv, "--batch", str(batch), "--one-process")["results"]]


def half_ulp_perturbed(x: torch.Tensor, seed: int) -> torch.Tensor:
    """x with a random relative perturbation of half its dtype's epsilon per element (one rounding's worth)."""
    g = torch.Generator(x.device).manual_seed(seed + 1)
    noise = torch.randn(x.shape, generator=g, device=x.device) * (torch.finfo(x.dtype).eps / 2)
    return (x.float() * (1 + noise)).to(x.dtype)


class BlockOutputs:
    """The check's all-reduce hook: reduces (on TP ranks), then keeps a copy of each all-reduced tensor, i.e.
    the attention and MLP outputs of every layer in order, so a sharding mistake shows in the first layer it
    touches instead of being diluted in the residual stream."""

    def __init__(self, reduce: Optional[Callable[[torch.Tensor], None]]):
        self.reduce = reduce
        self.tensors: List[torch.Tensor] = []

    def __call__(self, t: torch.Tensor) -> None:
        if self.reduce is not None:
            self.reduce(t)
        self.tensors.append(t.clone())

    def step(self, model, x, caches, pos: int) -> List[torch.Tensor]:
        """The block outputs and the final output of one step."""
        self.tensors = []
        out = model(x, caches, pos)
        return self.tensors + [out]


def run_check(args, setup: Setup, dist_ctx: Dist, device: torch.device) -> bool:
    """The TP=N step against the TP=1 step of the same seeded weights, on rank 0, for both builds: every
    layer's attention and MLP output and the final output within a few times their noise floor."""
    pos, ok = args.kv_len - 1, True
    names = [f"layer {i} {block}" for i in range(len(setup.layers)) for block in ("attention", "MLP")] + ["final"]
    whole_layers = [make_layer(setup.group, 0, 1, i, args.seed, max(args.batch), args.kv_len, device, setup.dtype,
                               setup.fp8_dtype) for i in range(len(setup.layers))] if dist_ctx.rank == 0 else []
    for path, ops in path_ops(setup, args).items():
        sharded_outputs, whole_outputs = BlockOutputs(dist_ctx.all_reduce), BlockOutputs(None)
        sharded = build_model(setup.kernel.convert, setup.layers, setup.final_norm, setup.shard, setup.scales, ops,
                              sharded_outputs, setup.dtype, args.kv_len)
        whole = build_model(setup.kernel.convert, whole_layers, setup.final_norm, setup.group, setup.scales, ops,
                            whole_outputs, setup.dtype, args.kv_len)
        for batch in args.batch:
            fresh_compile_cache()
            x = batch_input(setup, setup.shard.hidden, batch, args.seed, device)
            got = sharded_outputs.step(sharded, x, caches_for(setup.layers, batch), pos)
            if dist_ctx.rank != 0:
                continue
            caches = caches_for(whole_layers, batch)
            expected = whole_outputs.step(whole, x, caches, pos)
            perturbed = whole_outputs.step(whole, half_ulp_perturbed(x, args.seed), caches, pos)
            errors = [relative_error(a, b) for a, b in zip(got, expected)]
            tolerances = [max(CHECK_NOISE_FACTOR * relative_error(a, b), CHECK_MIN_TOLERANCE)
                          for a, b in zip(perturbed, expected)]
            worst = max(range(len(names)), key=lambda i: errors[i] / tolerances[i])
            passed = all(e <= t for e, t in zip(errors, tolerances))
            ok &= passed
            print(f"check {path:5s} batch {batch:3d}: TP={dist_ctx.world} vs TP=1 {'ok' if passed else 'FAIL'}; "
                  f"worst: {names[worst]}, relative error {errors[worst]:.2e} (tolerance {tolerances[worst]:.2e}); "
                  f"final {errors[-1]:.2e}", flush=True)
    return ok


# ---------------------------------------------------------------- reports


def markdown(args, results: List[Measurement], title: str, env: dict) -> str:
    by_key = {(m.path, m.batch): m for m in results}
    states = timing_states(args)
    probes = states == STATES  # both states timed, each after its setter and the probe
    timing = "CUDA-graph replays" if args.device == "cuda" and not args.no_graph else "eager steps"
    work = "kernel time" if args.device == "cuda" else "op time"
    lines = [f"# {title}", "",
             f"{env['device']['name']}, torch {env['torch']}, git {env['git_revision']}, {env['date']}.", ""]
    if probes:
        lines += ["Step latency: median of "
                  f"{args.replays} {timing} of each build in each process state: fast after an eager PDL launch, "
                  "slow after the model's attention (docs/experiments/README.md, items 51-53). Probe: what a graph "
                  f"of {PROBE_LAUNCHES} one-element adds took right after the setter, ours / torch (ms). Where a fast "
                  f"probe is not {1 - FAST_PROBE_MAX_RATIO:.0%} below the slow reference, the setter runs again, up "
                  f"to {SETTER_TRIES} times, and the row says how many ran; where a build's fast probe is not "
                  f"{1 - FAST_PROBE_MAX_RATIO:.0%} below its slow one, the row says the fast state was not reached. "
                  "Breakdown: "
                  f"{work} per step (µs) of {args.profile_steps} profiled eager steps; idle = latency - {work}.", ""]
    else:
        lines += [f"Step latency: median of {args.replays} {timing}. Breakdown: {work} per step (µs) of "
                  f"{args.profile_steps} profiled eager steps; idle = latency - {work}.", ""]
    lines += ["| batch | state | ours (ms) | torch (ms) | speedup |" + (" probe (ms) |" if probes else "")
              + " ours vs torch rel. error | noise floor |",
              "|---:|---|---:|---:|---:|" + ("---|" if probes else "") + "---:|---:|"]
    for batch in args.batch:
        ours, peer = by_key[("ours", batch)], by_key[("torch", batch)]
        for state in states:
            mine, theirs = ours.latency_ms[state], peer.latency_ms[state]
            probe = ""
            if probes:
                notes = [f"{m.path}: {m.latency_ms[state]['setter_tries']} setters" for m in (ours, peer)
                         if m.latency_ms[state].get("setter_tries", 1) > 1]
                notes += [f"{m.path}: fast state not reached" for m in (ours, peer)
                          if state == "fast" and not fast_state_reached(m.latency_ms)]
                probe = (f" {mine['probe_ms']:.3f} / {theirs['probe_ms']:.3f}"
                         + (f" ({'; '.join(notes)})" if notes else "") + " |")
            lines.append(f"| {batch} | {state} | {mine['median']:.3f} | {theirs['median']:.3f} | "
                         f"{theirs['median'] / mine['median']:.3f}x |{probe} "
                         f"{ours.rel_diff_vs_torch:.1e} | {ours.noise_floor:.1e} |")
    idle = " | ".join(f"idle ({state})" for state in states)
    lines += ["", "| batch | build | " + " | ".join(CATEGORIES) + f" | {idle} | launches per step |",
              "|---:|---|" + "---:|" * (len(CATEGORIES) + len(states) + 1)]
    for m in results:
        cells = " | ".join(f"{m.breakdown.time_us[c]:.0f}" for c in CATEGORIES)
        idles = " | ".join(f"{m.idle_us(state):.0f}" for state in states)
        lines.append(f"| {m.batch} | {m.path} | {cells} | {idles} | {sum(m.breakdown.calls.values()):.0f} |")
    return "\n".join(lines) + "\n"


def plot(args, results: List[Measurement], title: str, subtitle: str, path: Path) -> None:
    """Stacked bars per batch size, ours next to torch: kernel time by category plus idle, which adds up to
    the measured step latency in the slowest state; the latency in each state is a black line (solid for the
    first of timing_states, dashed for the next)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = dict(zip(CATEGORIES + ("idle",), plt.get_cmap("tab10").colors))
    by_key = {(m.path, m.batch): m for m in results}
    states = timing_states(args)
    fig, ax = plt.subplots(figsize=(2 + 1.8 * len(args.batch), 5))
    width, ticks, labels = 0.4, [], []
    for i, batch in enumerate(args.batch):
        for j, name in enumerate(PATHS):
            m, x, bottom = by_key[(name, batch)], i + (j - 0.5) * 0.45, 0.0
            idle_us = max(m.idle_us(state) for state in states)
            segments = [(c, m.breakdown.time_us[c] / 1e3) for c in CATEGORIES] + [("idle", idle_us / 1e3)]
            for category, ms in segments:
                ax.bar(x, ms, width, bottom=bottom, color=colors[category], label=category if i == j == 0 else None)
                bottom += ms
            # The profiled kernel time can exceed the graph-timed latency (eager steps); mark the latter.
            for state, style in zip(states, ("solid", "dashed")):
                ax.hlines(m.latency_ms[state]["median"], x - width / 2, x + width / 2, colors="black",
                          linestyles=style, label=f"step latency ({state})" if i == j == 0 else None)
            ticks.append(x)
            labels.append(f"{name}\nbatch {batch}")
    ax.set_xticks(ticks, labels)
    ax.set_ylabel("ms per decode step")
    ax.set_title(f"{title}\n{subtitle}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_environment(device: str) -> dict:
    """What a decode report names its run by: the device, torch, the git revision and the date."""
    return {"device": describe_device(device), "torch": torch.__version__, "git_revision": git_revision(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def report_dir(args, env: dict, default: str) -> Path:
    """--out, or benchmarks/results/<device>/<default>/; created."""
    out = args.out or REPO / "benchmarks" / "results" / device_slug(env["device"], args.device) / default
    out.mkdir(parents=True, exist_ok=True)
    return out


def args_record(args) -> dict:
    """The parsed options as JSON values."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


def write_reports(args, shard: ModelShape, fp8_dtype: torch.dtype, dist_ctx: Dist,
                  results: List[Measurement]) -> None:
    env = run_environment(args.device)
    device_info = env["device"]
    out = report_dir(args, env, "decode")
    name = f"{args.model}_shard{args.shard_of}_tp{dist_ctx.world}_l{shard.layers}"
    title = (f"{args.model} decode step: per-GPU shard of TP{args.shard_of}, {dist_ctx.world} GPU(s), "
             f"{shard.layers} layers")
    subtitle = (f"KV length {args.kv_len}, {args.dtype} / {str(fp8_dtype).removeprefix('torch.float8_')}, "
                f"{device_info['name']}")
    text = markdown(args, results, f"{title}, {subtitle}", env)
    (out / f"{name}.md").write_text(text)
    record = {
        "title": title, "subtitle": subtitle, "environment": env,
        "args": args_record(args),
        "shard_shape": asdict(shard), "fp8_dtype": str(fp8_dtype), "tp": dist_ctx.world,
        "results": [{"path": m.path, "batch": m.batch, "latency_ms": m.latency_ms, "breakdown_us": m.breakdown.time_us,
                     "idle_us": {state: m.idle_us(state) for state in m.latency_ms},
                     "calls_per_step": m.breakdown.calls, "top_kernels": m.breakdown.top_kernels,
                     "rel_diff_vs_torch": m.rel_diff_vs_torch, "noise_floor": m.noise_floor} for m in results],
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(args, results, title, subtitle, out / f"{name}.png")
    print(text)
    print(f"wrote {out / name}.{{md,json,png}}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    dist_ctx = init_distributed(args)
    device = device_of(args)
    try:
        if batch_processes(args, dist_ctx):  # the children build the model; this process only reports
            results = run_batch_processes(args, argv)
            shard = split_shape(full_shape(args), args.shard_of)
            fp8_dtype = load_kernel(args).native_fp8_dtype(device)
        else:
            setup = make_setup(args, dist_ctx, device)
            if args.check:
                return 0 if run_check(args, setup, dist_ctx, device) else 1
            results = run_benchmark(args, setup, dist_ctx, device)
            shard, fp8_dtype = setup.shard, setup.fp8_dtype
        if dist_ctx.rank == 0:
            write_reports(args, shard, fp8_dtype, dist_ctx, results)
        return 0
    finally:
        if dist_ctx.world > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
