"""Does 405B o run faster when its weights sit in L2? [read a buffer] -> [sleep ~50 us] -> [quantize] -> [o GEMM],
where the buffer read is o's weights (warm) or another buffer of the same size (cold); o's time = the sequence
with o less the sequence without it, CUDA graphs, medians."""
import os
from pathlib import Path
import torch, kernels
os.environ["FP8DK_SKINNY_ROUTE"] = "0"
k = kernels.get_local_kernel(Path(__file__).resolve().parents[1])
fp8, bf16, dev = torch.float8_e4m3fn, torch.bfloat16, "cuda"
n, kk = 16384, 2048
copies = 4
wo = [(torch.randn(n, kk, device=dev) / 45).to(fp8) for _ in range(copies)]
other = [torch.empty(n * kk, dtype=torch.uint8, device=dev).fill_(1) for _ in range(copies)]
s = torch.tensor([0.05], device=dev)
acc = torch.zeros((), device=dev, dtype=torch.int64)
res = {}
for m in (1, 8, 32):
    x = torch.randn(m, kk, device=dev, dtype=bf16)
    def seq2(i, warm, with_o):
        if warm == "touch":
            wo[i % copies].view(torch.uint8).view(-1)[::65536].sum()   # one byte per 64 KB of o's weights
            other[i % copies].view(torch.int64).sum()
        else:
            src = wo[i % copies].view(torch.uint8).view(-1) if warm else other[i % copies]
            src.view(torch.int64).sum()          # reads every byte of the buffer (int64 view: 8 bytes an element)
        torch.cuda._sleep(100000)            # ~50-60 us of one spinning thread, no memory traffic
        a = k.quantize_fp8(x, s, fp8)
        if with_o:
            k.skinny_gemm(a, wo[i % copies], s, s, out_dtype=bf16)
    for warm in (True, False, "touch"):
        for with_o in (True, False):
            for i in range(copies): seq2(i, warm, with_o)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(24): seq2(i, warm, with_o)
            g.replay(); torch.cuda.synchronize()
            ts = []
            for _ in range(9):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1) * 1000 / 24)
            res[(m, warm, with_o)] = sorted(ts)[4]
    o_warm = res[(m, True, True)] - res[(m, True, False)]
    o_cold = res[(m, False, True)] - res[(m, False, False)]
    o_touch = res[(m, "touch", True)] - res[(m, "touch", False)]
    print(f"m={m}: sequence {res[(m, False, False)]:.1f} us; o after its weights were read: {o_warm:.2f} us, "
          f"after another buffer: {o_cold:.2f} us, after one byte per 64 KB of its weights then another buffer: "
          f"{o_touch:.2f} us", flush=True)
