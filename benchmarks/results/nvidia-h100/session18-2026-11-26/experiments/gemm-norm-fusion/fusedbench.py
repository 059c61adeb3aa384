"""o / down of 405B alone: skinny_gemm, skinny_gemm + fused_add_rms_norm, and skinny_gemm_add_rms_norm (fused),
per call, from CUDA-graph replays of 24 calls over 4 weight copies (beyond L2)."""
import os, statistics, sys
import torch
import kernels
os.environ.setdefault("LOCAL_KERNELS", f"fp8-decode-kernels/fp8-decode-kernels={os.getcwd()}")
k = kernels.get_kernel("fp8-decode-kernels/fp8-decode-kernels", version=1)
dev = "cuda"
fp8 = torch.float8_e4m3fn
CALLS = 24

def timed(fn):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fn(i)
    for _ in range(3): g.replay()
    ts = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / CALLS)
    return statistics.median(ts)

for n, kk in ((16384, 2048), (16384, 6656)):
    ws = [(torch.randn(n, kk, device=dev) / kk ** 0.5).to(fp8) for _ in range(4)]
    for m in (1, 8, 32):
        a = torch.randn(m, kk, device=dev).to(fp8)
        sa = torch.tensor([0.1], device=dev); sb = torch.tensor([0.1], device=dev)
        res = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        w = torch.ones(n, device=dev, dtype=torch.bfloat16); sc = torch.tensor([0.01], device=dev)
        gemm = lambda i: k.skinny_gemm(a, ws[i % 4], sa, sb, None, torch.bfloat16)
        comp = lambda i: k.fused_add_rms_norm(k.skinny_gemm(a, ws[i % 4], sa, sb, None, torch.bfloat16), res, w, 1e-5, sc, fp8)
        fused = lambda i: k.skinny_gemm_add_rms_norm(a, ws[i % 4], res, w, 1e-5, sa, sb, None, sc, fp8)
        r = {name: timed(f) for name, f in (("gemm", gemm), ("gemm+norm", comp), ("fused", fused), ("gemm ", gemm), ("gemm+norm ", comp), ("fused ", fused))}
        print(f"N={n} K={kk} M={m}: " + "  ".join(f"{x.strip()} {v:.2f} us" for x, v in r.items()), flush=True)
