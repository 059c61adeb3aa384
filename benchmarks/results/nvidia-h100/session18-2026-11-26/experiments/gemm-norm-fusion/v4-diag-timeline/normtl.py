"""Diagnostic build only: where the fused epilogue's time goes, per CTA (FP8DK_NORM lines)."""
import os, re, statistics, sys, collections
if sys.argv[1:2] == ["--parse"]:
    runs = collections.defaultdict(list)
    for line in open(sys.argv[2]):
        m = re.match(r"FP8DK_NORM (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", line)
        if m:
            v = list(map(int, m.groups()))
            runs[(v[0], v[2])].append(v[3:])
    for (mm, tag), ctas in sorted(runs.items()):
        if len(ctas) < 100: continue
        t0 = min(c[0] for c in ctas)
        col = lambda i: sorted(c[i] - t0 for c in ctas)
        last_pub = max(c[2] for c in ctas) - t0
        med = lambda xs: xs[len(xs) // 2]
        print(f"M={mm} tag={tag} ctas={len(ctas)}: loop end first 0 med {med(col(0))} last {col(0)[-1]} | "
              f"staged med {med([c[1]-c[0] for c in ctas])} max {max(c[1]-c[0] for c in ctas)} | "
              f"published last {last_pub} | waited med {med(col(3))} (after last pub {med(col(3))-last_pub}) | "
              f"collected med {med(col(4))} | end med {med(col(5))} last {col(5)[-1]} ns")
    sys.exit(0)
import torch, kernels
os.environ.setdefault("LOCAL_KERNELS", f"fp8-decode-kernels/fp8-decode-kernels={os.getcwd()}")
k = kernels.get_kernel("fp8-decode-kernels/fp8-decode-kernels", version=1)
fp8 = torch.float8_e4m3fn
for n, kk in ((16384, 2048), (16384, 6656)):
    w = (torch.randn(n, kk, device="cuda") / kk ** 0.5).to(fp8)
    for m in (1, 32):
        a = torch.randn(m, kk, device="cuda").to(fp8)
        x16 = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
        sa = torch.tensor([0.1], device="cuda"); sb = torch.tensor([0.1], device="cuda")
        res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        nw = torch.ones(n, device="cuda", dtype=torch.bfloat16); sc = torch.tensor([0.01], device="cuda")
        for _ in range(6):
            k.quantize_fp8(x16, sa, fp8)
            k.skinny_gemm_add_rms_norm(a, w, res, nw, 1e-5, sa, sb, None, sc, fp8)
        torch.cuda.synchronize()
        print(f"CASE n={n} k={kk} m={m}", flush=True)
