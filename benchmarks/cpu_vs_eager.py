#!/usr/bin/env python3
"""Our CPU ops against the eager PyTorch code they replace, on the CPU shapes of benchmarks/benchmark_*.py and
tools/demo.py. Median of interleaved runs (ours, eager, ours, ...) so that frequency drift hits both alike.

    python benchmarks/cpu_vs_eager.py                 # all cases, ~1 minute
    python benchmarks/cpu_vs_eager.py --filter gemm   # the cases whose name contains "gemm"
    python benchmarks/cpu_vs_eager.py --threads 1     # one thread: steadier on a shared machine

Eager peers: reference.py's definitions for the elementwise ops and RMSNorm (what a model runs without us),
torch._scaled_mm for the FP8 GEMM (on CPU: dequantize to fp32 and matmul, or oneDNN on AMX CPUs) and F.linear
for the 16-bit GEMM. The raw ops write into preallocated outputs, as in the `kernels benchmark` files.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import kernels
import torch

REPO = Path(__file__).resolve().parent.parent
EPS = 1e-6


def cases(k):
    ref, ops = k.reference, k.ops
    fp8 = torch.float8_e4m3fn
    scale = torch.tensor([2.0**-6])
    out = []

    def norm(name, rows, hidden, dtype, fused, quant=True):
        x = torch.randn(rows, hidden, dtype=dtype)
        w = (1 + 0.1 * torch.randn(hidden)).to(dtype)
        res = torch.randn_like(x)
        q = torch.empty(rows, hidden, dtype=fp8 if quant else dtype)
        s = scale if quant else None
        if fused:
            ours = lambda: ops.fused_add_rms_norm(q, x, res, w, EPS, s)  # noqa: E731
            eager = lambda: ref.fused_add_rms_norm_ref(x, res, w, EPS, s, fp8 if quant else None)  # noqa: E731
        else:
            ours = lambda: ops.rms_norm(q, x, w, EPS, s)  # noqa: E731
            eager = lambda: ref.rms_norm_ref(x, w, EPS, s, fp8 if quant else None)  # noqa: E731
        out.append((name, ours, eager))

    def silu(name, rows, d, dtype):
        x = torch.randn(rows, 2 * d, dtype=dtype)
        q = torch.empty(rows, d, dtype=fp8)
        out.append((name, lambda: ops.silu_and_mul(q, x, scale), lambda: ref.silu_and_mul_ref(x, scale, fp8)))

    def quant(name, rows, d, dtype):
        x = 3 * torch.randn(rows, d, dtype=dtype)
        q = torch.empty(rows, d, dtype=fp8)
        out.append((name, lambda: ops.quantize_fp8(q, x, scale), lambda: ref.quantize_fp8(x, scale, fp8)))

    def gemm_fp8(name, m, n, kk):
        a, b = torch.randn(m, kk).to(fp8), torch.randn(n, kk).to(fp8)
        sa, sb = torch.tensor([1 / 16]), torch.tensor([0.01])
        o = torch.empty(m, n, dtype=torch.bfloat16)
        out.append((name, lambda: ops.skinny_gemm(o, a, b, sa, sb, None),
                    lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)))

    def gemm_16(name, m, n, kk, dtype=torch.bfloat16):
        a, b = torch.randn(m, kk, dtype=dtype), (torch.randn(n, kk) / kk**0.5).to(dtype)
        o = torch.empty(m, n, dtype=dtype)
        out.append((name, lambda: ops.skinny_gemm(o, a, b, None, None, None),
                    lambda: torch.nn.functional.linear(a, b)))

    # benchmarks/benchmark_rmsnorm.py (CPU: hidden / 16)
    for rows in (1, 32, 256):
        norm(f"fused_add_rms_norm fp16 rows{rows} h1024", rows, 1024, torch.float16, True)
    norm("fused_add_rms_norm bf16 rows64 h512", 64, 512, torch.bfloat16, True)
    norm("rms_norm bf16 rows32 h1024", 32, 1024, torch.bfloat16, False)
    norm("rms_norm fp16 rows256 h512", 256, 512, torch.float16, False)
    # benchmarks/benchmark_swiglu.py (CPU: d / 16)
    for rows in (1, 32, 256):
        silu(f"silu_and_mul fp16 rows{rows} d512", rows, 512, torch.float16)
    silu("silu_and_mul bf16 rows32 d416", 32, 416, torch.bfloat16)
    # benchmarks/benchmark_quant_fp8.py (CPU: d / 16)
    quant("quantize_fp8 bf16 rows1 d128", 1, 128, torch.bfloat16)
    quant("quantize_fp8 bf16 rows32 d128", 32, 128, torch.bfloat16)
    quant("quantize_fp8 fp16 rows32 d256", 32, 256, torch.float16)
    quant("quantize_fp8 bf16 rows4096 d512", 4096, 512, torch.bfloat16)
    # benchmarks/benchmark_skinny_gemm.py (CPU: N and K / 16)
    gemm_fp8("skinny_gemm fp8 qkv m1", 1, 144, 1024)
    gemm_fp8("skinny_gemm fp8 qkv m32", 32, 144, 1024)
    gemm_fp8("skinny_gemm fp8 gate_up m8", 8, 832, 1024)
    gemm_fp8("skinny_gemm fp8 down m16", 16, 1024, 416)
    gemm_16("skinny_gemm bf16 qkv m1", 1, 144, 1024)
    gemm_16("skinny_gemm bf16 down m32", 32, 1024, 416)
    # tools/demo.py (CPU shapes) and the kernelized tiny Llama's 16-bit RMSNorm
    for rows in (1, 8):
        norm(f"demo rms_norm fp8 [{rows}, 4096]", rows, 4096, torch.bfloat16, False)
        silu(f"demo silu_and_mul fp8 [{rows}, 2*2048]", rows, 2048, torch.bfloat16)
    for m in (1, 8):
        gemm_fp8(f"demo skinny_gemm fp8 M={m} N=1024 K=4096", m, 1024, 4096)
    norm("layer rms_norm bf16 [8, 256]", 8, 256, torch.bfloat16, False, quant=False)
    return out


def median_pair(ours, eager, budget_s: float):
    for _ in range(3):
        ours()
        eager()
    t_ours, t_eager = [], []
    deadline = time.perf_counter() + budget_s
    while len(t_ours) < 20 or (time.perf_counter() < deadline and len(t_ours) < 2000):
        for fn, times in ((ours, t_ours), (eager, t_eager)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(t_ours) * 1e3, statistics.median(t_eager) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per case (default %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    k = kernels.get_local_kernel(REPO, backend="cpu")
    isa = k.ops.cpu_isa() if hasattr(k.ops, "cpu_isa") else "?"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, our kernels' path: {isa}")
    print(f"{'case':<44} {'ours ms':>9} {'eager ms':>9} {'speedup':>8}")
    slower = 0
    for name, ours, eager in cases(k):
        if args.filter not in name:
            continue
        a, b = median_pair(ours, eager, args.budget)
        slower += b / a < 1.0
        print(f"{name:<44} {a:>9.4f} {b:>9.4f} {b / a:>7.2f}x", flush=True)
    print(f"{slower} case(s) slower than eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
