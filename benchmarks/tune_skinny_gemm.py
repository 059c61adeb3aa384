"""Tuning grid for skinny_gemm's heuristic: the FP8 GEMM timed under FP8DK_SKINNY_BLOCK_N / FP8DK_SKINNY_SPLIT_K
overrides next to the default plan and torch._scaled_mm, with sweep.py's method (CUDA graphs, weights rotated
beyond L2, medians), in one process.

    python benchmarks/tune_skinny_gemm.py                          # 405B TP8 shapes, M = 1, 8, 16, 32
    python benchmarks/tune_skinny_gemm.py --m 1 --layers qkv --split-k 1 2 4 --block-n 16 32 64
    python benchmarks/tune_skinny_gemm.py --m 8 --layers qkv --pairs 16:4 32:2   # both overrides at once
    python benchmarks/tune_skinny_gemm.py --env FP8DK_SKINNY_STREAM_K=0          # any launcher variable
    python benchmarks/tune_skinny_gemm.py --layers --shapes 1024:16384 1536:16384  # any (N, K), named NxK
    python benchmarks/tune_skinny_gemm.py --out tune.json          # also write the rows as JSON
    python benchmarks/tune_skinny_gemm.py --context quant          # each GEMM after the quantization of its input
    python benchmarks/tune_skinny_gemm.py --context cold           # ... and that after a kernel launched without PDL
    python benchmarks/tune_skinny_gemm.py --context sdpa           # ... after decode attention (torch SDPA), as o
    python benchmarks/tune_skinny_gemm.py --rotation-mb 12288      # weights rotated over 12 GB (address translation)

Prints one row per (layer, M, configuration): microseconds, % of the copy bandwidth measured in the same run,
and the speedup over torch._scaled_mm. With --context quant the microseconds are those of the pair
(quantization, GEMM) less those of the quantization alone, for ours and for torch._scaled_mm alike; with --context
cold, of (a small torch kernel, the quantization, the GEMM) less the first two: the GEMM's start overlaps nothing
but the quantization, as 405B o's after attention in a decode step; with --context sdpa the small kernel is that
attention itself (torch SDPA, one sequence per token). A configuration the launcher rejects (e.g. a
block too narrow for M) is reported and skipped.
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import CudaGraphTimer, copy_bandwidth, describe_device  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"qkv": (2304, 16384), "o": (16384, 2048), "gate_up": (13312, 16384), "down": (16384, 6656),
          "70b_qkv": (10240, 8192), "70b_down": (8192, 28672), "8b_qkv": (6144, 4096), "8b_gate_up": (28672, 4096)}
DEFAULT_LAYERS = ("qkv", "gate_up", "down")
ROTATION_MB = 192  # > 3x the L2 of an H100/H200


def torch_kernels_before(context: str, x: torch.Tensor):
    """What runs before the quantization in `context`: nothing (quant), a small torch kernel (cold) or the 405B TP8
    shard's decode attention over x's rows as sequences (sdpa): 16 query heads on one KV head of 128, 1024
    positions."""
    if context == "cold":
        spacer = torch.zeros_like(x)
        return lambda: spacer.add_(x)
    if context == "sdpa":
        q = torch.randn(x.shape[0], 1, 16, 128, device=x.device, dtype=x.dtype)
        kv = torch.randn(2, x.shape[0], 1, 1024, 128, device=x.device, dtype=x.dtype)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, kv[0], kv[1])
    return lambda: None


def shape(text: str) -> tuple:
    n, sep, kdim = text.partition(":")
    if not (sep and n.isdigit() and kdim.isdigit() and int(n) > 0 and int(kdim) > 0):
        raise argparse.ArgumentTypeError(f"expected N:K with positive integers, got {text!r}")
    return f"{n}x{kdim}", (int(n), int(kdim))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", nargs="*", choices=sorted(LAYERS), default=list(DEFAULT_LAYERS))
    p.add_argument("--shapes", nargs="*", default=[], metavar="N:K", type=shape,
                   help="weight shapes [N, K] to time after --layers' (named NxK)")
    p.add_argument("--m", type=int, nargs="+", default=[1, 8, 16, 32])
    p.add_argument("--block-n", type=int, nargs="*", default=[], help="FP8DK_SKINNY_BLOCK_N values to try")
    p.add_argument("--split-k", type=int, nargs="*", default=[], help="FP8DK_SKINNY_SPLIT_K values to try")
    p.add_argument("--pairs", nargs="*", default=[], metavar="BLOCK_N:SPLIT_K",
                   help="both overrides at once, e.g. 16:4 32:2")
    p.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="one configuration per argument, e.g. FP8DK_SKINNY_STREAM_K=0 or, several variables "
                        "at once, FP8DK_SKINNY_TMA_WK=2,FP8DK_SKINNY_TMA_BOXES=4")
    p.add_argument("--context", choices=("none", "quant", "cold", "sdpa"), default="none",
                   help="quant: every call quantizes its 16-bit activations (quantize_fp8) and multiplies the result, "
                        "as a decode step does: the GEMM starts after a small kernel, not after another GEMM, and "
                        "its end is not overlapped by the next GEMM's start (programmatic dependent launch). "
                        "Reports the GEMM as the pair less the quantization alone. cold: a small torch kernel "
                        "(launched without PDL, as attention's) before each quantization")
    p.add_argument("--rotation-mb", type=int, default=ROTATION_MB,
                   help="weights rotated over at least this many MB (distinct buffers): beyond L2 by default; "
                        "gigabytes also take the weights beyond the reach of the address translation caches, as "
                        "a decode step's 50 GB do")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("FP8DK_SKINNY_ROUTE", "0")  # the kernel alone, never the wrapper's hand-off to cuBLASLt
    import kernels

    k = kernels.get_local_kernel(REPO)
    dev = "cuda"
    fp8 = k.native_fp8_dtype(torch.device(dev))
    timer = CudaGraphTimer(quick=True)
    copy_gbps = copy_bandwidth(dev, quick=True)["gbps"]
    info = describe_device(dev)
    print(f"# {info.get('name')}, copy bandwidth {copy_gbps:.0f} GB/s, context {args.context}, "
          f"weights rotated over {args.rotation_mb} MB", flush=True)
    configs = [("default", {}), ("no PDL", {"FP8DK_PDL": "0"})]
    configs += [(f"block_n={b}", {"FP8DK_SKINNY_BLOCK_N": str(b)}) for b in args.block_n]
    configs += [(f"split_k={c}", {"FP8DK_SKINNY_SPLIT_K": str(c)}) for c in args.split_k]
    for assignment in args.env:  # KEY=VALUE[,KEY=VALUE...]: one configuration
        configs.append((assignment, dict(part.partition("=")[::2] for part in assignment.split(","))))
    for pair in args.pairs:
        b, c = pair.split(":")
        configs.append((f"block_n={b},split_k={c}", {"FP8DK_SKINNY_BLOCK_N": b, "FP8DK_SKINNY_SPLIT_K": c}))
    rows = []
    scale_a = torch.tensor([1.0], device=dev)
    for layer, (n, kdim) in [(name, LAYERS[name]) for name in args.layers] + args.shapes:
        sets = max(1, math.ceil((args.rotation_mb << 20) / (n * kdim)))
        weights = [torch.randn(n, kdim, device=dev).to(fp8) for _ in range(sets)]
        scale_b = torch.tensor([1.0 / kdim], device=dev)
        for m in args.m:
            x = torch.randn(m, kdim, device=dev, dtype=torch.bfloat16)
            scale_x = torch.tensor([1.0], device=dev)
            nbytes = n * kdim + m * kdim + 2 * m * n
            est_us = nbytes / (copy_gbps * 1e3) + 3
            if args.context != "none":
                # The activations as the GEMM reads them in a decode step: written by the kernel just before,
                # which itself starts once the torch kernels of the context have ended.
                before = torch_kernels_before(args.context, x)

                def operand():
                    before()
                    return k.quantize_fp8(x, scale_x, fp8)
                quant_us = timer.time([operand], 3)["median_us"]
            else:
                a = x.to(fp8)

                def operand():
                    return a
                quant_us = 0.0
            peer = timer.time([lambda w=w: torch._scaled_mm(operand(), w.t(), scale_a, scale_b,
                                                            out_dtype=torch.bfloat16)
                               for w in weights], est_us)["median_us"] - quant_us
            for name, env in configs:
                try:
                    with k.tuning_overrides(env):
                        us = timer.time([lambda w=w: k.skinny_gemm(operand(), w, scale_a, scale_b,
                                                                   out_dtype=torch.bfloat16)
                                         for w in weights], est_us)["median_us"] - quant_us
                except (RuntimeError, ValueError) as e:  # ValueError: a tiling the copy-engine plan cannot hold
                    print(f"{layer:8s} M={m:<3d} {name:24s} rejected: {str(e).splitlines()[0]}", flush=True)
                    continue
                pct = 100 * nbytes / (us * 1e3) / copy_gbps
                rows.append({"layer": layer, "m": m, "config": name, "context": args.context,
                             "rotation_mb": args.rotation_mb, "sets": sets, "us": us,
                             "scaled_mm_us": peer, "quant_us": quant_us, "pct_copy_bw": pct, "speedup": peer / us})
                print(f"{layer:8s} M={m:<3d} {name:24s} {us:8.2f} us {pct:5.1f}% BW  _scaled_mm {peer:8.2f} us "
                      f"{peer / us:5.2f}x", flush=True)
        del weights
        torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": info, "copy_gbps": copy_gbps, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
