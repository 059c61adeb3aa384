"""EXPERIMENT (session 30): does the weight stream of skinny_gemm's copy-engine kernel start faster, or run
faster, when (a) each whole tile starts its K walk at a different K-block (FP8DK_SKINNY_TMA_ROTATE=1), or (b) the
weights are packed so that every box is 16 KB (8 KB) of contiguous bytes (FP8DK_SKINNY_TMA_PACKED=block_n)?
Per 405B TP8 shape and token count: 'steady' = back-to-back calls over rotated weight copies in one CUDA graph
(the sweep's setting), 'cold' = [read a 64 MB other buffer, sleep ~50 us, quantize, GEMM] less the same sequence
without the GEMM (session 19's l2warm.py). Also checks each variant's output against the plain layout's."""
import os
import statistics
import sys
from pathlib import Path

import torch
import kernels

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from decode_attribution import pack_weight  # noqa: E402

os.environ["FP8DK_SKINNY_ROUTE"] = "0"
k = kernels.get_local_kernel(REPO)
fp8, bf16, dev = torch.float8_e4m3fn, torch.bfloat16, "cuda"
SHAPES = {"o": (16384, 2048, 128), "qkv": (2304, 16384, 64), "gate_up": (13312, 16384, 64), "down": (16384, 6656, 128)}
only = sys.argv[1:] or list(SHAPES)
s = torch.tensor([0.05], device=dev)
other = torch.ones(64 << 20, dtype=torch.uint8, device=dev)


def timed(fn, reps, calls):
    fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / calls)
    return statistics.median(ts)


for name in only:
    n, kk, bn = SHAPES[name]
    copies = max(2, -(-160 << 20) // (n * kk))
    w = [(torch.randn(n, kk, device=dev) / 45).to(fp8) for _ in range(copies)]
    wp = [pack_weight(x, bn) for x in w]
    for m in (1, 32):
        x = torch.randn(m, kk, device=dev, dtype=bf16)
        a = k.quantize_fp8(x, s, fp8)
        variants = {"plain": ({}, w), "rotate": ({"FP8DK_SKINNY_TMA_ROTATE": "1"}, w),
                    "packed": ({"FP8DK_SKINNY_TMA_PACKED": str(bn)}, wp),
                    "packed+rotate": ({"FP8DK_SKINNY_TMA_PACKED": str(bn), "FP8DK_SKINNY_TMA_ROTATE": "1"}, wp)}
        ref = None
        line = []
        for label, (env, ws) in variants.items():
            with k.tuning_overrides(env):
                out = k.skinny_gemm(a, ws[0], s, s, out_dtype=bf16)
                torch.cuda.synchronize()
                if ref is None:
                    ref = out
                    check = "ref"
                else:
                    d = (out.float() - ref.float()).abs().max().item()
                    check = "bitwise" if torch.equal(out, ref) else f"maxdiff {d:.3g} (|ref| {ref.float().abs().max().item():.3g})"
                steady = timed(lambda i: k.skinny_gemm(a, ws[i % copies], s, s, out_dtype=bf16), 15, 4 * copies)

                def seq(i, with_gemm):
                    other.view(torch.int64).sum()
                    torch.cuda._sleep(100000)
                    q = k.quantize_fp8(x, s, fp8)
                    if with_gemm:
                        k.skinny_gemm(q, ws[i % copies], s, s, out_dtype=bf16)
                cold = timed(lambda i: seq(i, True), 9, 16) - timed(lambda i: seq(i, False), 9, 16)
            line.append(f"{label} steady {steady:.2f} cold {cold:.2f} [{check}]")
        print(f"{name} M={m}: " + " | ".join(line), flush=True)
    del w, wp
    torch.cuda.empty_cache()
