"""Correctness and a quick timing of the norm-in experiment (skinny_gemm_norm_in) against rms_norm + skinny_gemm."""
import sys
from pathlib import Path

import kernels
import torch

REPO = Path(__file__).resolve().parents[1]
k = kernels.get_local_kernel(REPO)
ops = k._ops.ops
torch.manual_seed(0)
dev = "cuda"
f8 = torch.float8_e4m3fn
ok = True
for n, kk in [(2304, 16384), (13312, 16384), (16384, 2048), (1000, 4096), (6144, 4096)]:
    b = (torch.randn(n, kk, device=dev) * 0.5).to(f8)
    scale_b = torch.tensor([0.01], device=dev)
    for m in [1, 2, 7, 8, 16, 24, 32]:
        x = torch.randn(m, kk, device=dev, dtype=torch.bfloat16) * 3
        w = (torch.rand(kk, device=dev) + 0.5).to(torch.bfloat16)
        eps = 1e-5
        scale = torch.tensor([0.02], device=dev)
        parts = 128 if kk % 128 == 0 else 64
        sums = x.float().pow(2).view(m, parts, kk // parts).sum(-1).contiguous()
        a = k.rms_norm(x, w, eps, scale, f8)
        ref = k.skinny_gemm(a, b, scale, scale_b, out_dtype=torch.bfloat16)
        out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
        try:
            ops.skinny_gemm_norm_in(out, x, sums, w, eps, scale, b, scale_b)
        except RuntimeError as e:
            print(f"n={n} k={kk} m={m}: {str(e).splitlines()[0]}")
            continue
        torch.cuda.synchronize()
        nan = out.isnan().sum().item()
        err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        eq = (out == ref).float().mean().item()
        good = nan == 0 and err < 2e-2
        ok &= good
        print(f"n={n} k={kk} m={m}: nan {nan} rel err {err:.2e} equal {eq:.3f} {'ok' if good else 'BAD'}")
# timing, one shape class after nothing (rough): norm + gemm vs norm_in
for n, kk, m in [(13312, 16384, 32), (2304, 16384, 32), (2304, 16384, 1)]:
    bs = [(torch.randn(n, kk, device=dev) * 0.5).to(f8) for _ in range(4)]
    x = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
    w = torch.ones(kk, device=dev, dtype=torch.bfloat16)
    scale = torch.tensor([0.02], device=dev); scale_b = torch.tensor([0.01], device=dev)
    sums = x.float().pow(2).view(m, 128, kk // 128).sum(-1).contiguous()
    out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    def plain(i):
        a = k.rms_norm(x, w, 1e-5, scale, f8)
        return k.skinny_gemm(a, bs[i % 4], scale, scale_b, out_dtype=torch.bfloat16)
    def folded(i):
        ops.skinny_gemm_norm_in(out, x, sums, w, 1e-5, scale, bs[i % 4], scale_b)
    for name, fn in [("norm+gemm", plain), ("norm_in", folded)]:
        for i in range(8): fn(i)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(40): fn(i)
        g.replay(); torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); g.replay(); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) * 1000 / 40)
        ts.sort()
        print(f"time n={n} k={kk} m={m} {name}: {ts[5]:.2f} us")
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
