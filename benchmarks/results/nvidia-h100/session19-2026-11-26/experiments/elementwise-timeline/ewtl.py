"""Diagnostic build only: o GEMM -> X -> gate_up GEMM at 32 tokens, per-CTA global-timer marks of each kernel
(FP8DK_TL from the GEMMs, FP8DK_EW from the RMSNorm cluster kernel and the quantization), X one of: the fused
RMSNorm of 32 rows or of one row, the quantization of 32 rows or of one row."""
import collections, os, re, statistics, sys

if sys.argv[1:2] == ["--parse"]:
    TL = re.compile(r"FP8DK_TL (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)")
    EW = re.compile(r"FP8DK_EW (\w+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)")
    cases, cur = collections.OrderedDict(), None
    for line in open(sys.argv[2]):
        if line.startswith("CASE "):
            cur = line.split()[1]
            cases.setdefault(cur, [])
            continue
        m = TL.match(line)
        if m and cur:
            v = list(map(int, m.groups()))
            cases[cur].append(("o" if v[1] == 2048 else "gu", v[6], v[7], v[8], v[10]))  # entry, copy, stage, end
            continue
        m = EW.match(line)
        if m and cur:
            v = list(map(int, m.groups()[1:]))
            cases[cur].append(("x", v[3], v[4], v[5], v[6]))  # entry, waited, loaded, end
    med = lambda xs: sorted(xs)[len(xs) // 2]
    for name, rows in cases.items():
        # launches: split each kind by entry time gaps > 20 us
        launches = collections.defaultdict(list)
        for kind in ("o", "x", "gu"):
            ev = sorted((r for r in rows if r[0] == kind), key=lambda r: r[1])
            groups, last = [], None
            for r in ev:
                if last is None or r[1] - last > 20000: groups.append([])
                groups[-1].append(r); last = r[1]
            launches[kind] = groups
        stats = collections.defaultdict(list)
        for o in launches["o"]:
            o_end = max(r[4] for r in o)
            o_first_end = min(r[4] for r in o)
            x = next((g for g in launches["x"] if min(r[1] for r in g) >= min(r[1] for r in o)), None)
            if x is None: continue
            gu = next((g for g in launches["gu"] if min(r[1] for r in g) >= min(r[1] for r in x)), None)
            if gu is None: continue
            rel = lambda v: v - o_end
            stats["o first end"].append(rel(o_first_end))
            stats["x ctas"].append(len(x))
            stats["x entry med"].append(rel(med([r[1] for r in x]))); stats["x entry max"].append(rel(max(r[1] for r in x)))
            stats["x waited min"].append(rel(min(r[2] for r in x))); stats["x waited max"].append(rel(max(r[2] for r in x)))
            stats["x loaded med"].append(rel(med([r[3] for r in x]))); stats["x loaded max"].append(rel(max(r[3] for r in x)))
            stats["x end med"].append(rel(med([r[4] for r in x]))); stats["x end max"].append(rel(max(r[4] for r in x)))
            stats["gu entry min"].append(rel(min(r[1] for r in gu))); stats["gu entry med"].append(rel(med([r[1] for r in gu])))
            stats["gu entry max"].append(rel(max(r[1] for r in gu)))
            stats["gu stage1 min"].append(rel(min(r[3] for r in gu))); stats["gu stage1 med"].append(rel(med([r[3] for r in gu])))
            stats["gu stage1 max"].append(rel(max(r[3] for r in gu)))
            stats["gu end max"].append(rel(max(r[4] for r in gu)))
        print(f"== {name}: {len(stats['x ctas'])} chains (ns after o's last CTA end, median over chains)")
        for key, vals in stats.items():
            print(f"  {key:16s} {statistics.median(vals):9.0f}   ({', '.join(str(v) for v in vals)})")
    sys.exit(0)

import torch, kernels
from pathlib import Path
os.environ["FP8DK_SKINNY_ROUTE"] = "0"
k = kernels.get_local_kernel(Path(__file__).resolve().parents[1])
fp8, bf16, dev = torch.float8_e4m3fn, torch.bfloat16, "cuda"
m, hidden, inter2 = 32, 16384, 13312
wo = [(torch.randn(hidden, 2048, device=dev) / 45).to(fp8) for _ in range(3)]
wgu = [(torch.randn(inter2, hidden, device=dev) / 128).to(fp8) for _ in range(3)]
a_o = torch.randn(m, 2048, device=dev).to(fp8)
act = torch.randn(m, hidden, device=dev).to(fp8)
res = torch.randn(m, hidden, device=dev, dtype=bf16)
nw = torch.ones(hidden, device=dev, dtype=bf16)
s = torch.tensor([0.05], device=dev)
variants = {
    "rms32": lambda y: k.fused_add_rms_norm(y, res, nw, 1e-5, s, fp8),
    "rms1": lambda y: k.fused_add_rms_norm(y[:1], res[:1], nw, 1e-5, s, fp8),
    "quant32": lambda y: k.quantize_fp8(y, s, fp8),
    "quant1": lambda y: k.quantize_fp8(y[:1], s, fp8),
}
def chain(i, x):
    y = k.skinny_gemm(a_o, wo[i % 3], s, s, out_dtype=bf16)
    x(y)
    return k.skinny_gemm(act, wgu[i % 3], s, s, out_dtype=bf16)
for name, x in variants.items():   # warm-up, unrecorded
    for i in range(3): chain(i, x)
torch.cuda.synchronize()
for rep in range(2):
    for name, x in variants.items():
        print(f"CASE {name} {rep}", flush=True)
        for i in range(4): chain(i, x)
        torch.cuda.synchronize()
        print("END", flush=True)
