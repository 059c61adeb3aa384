"""Session 14 on an H100, with CuPy: benchmarks/results/nvidia-h100/session14-2026-11-26/experiments/
l2-prefetch-o-132ctas.json. The run before (l2-prefetch-o-1cta.json) launched one CTA of 128 threads,
KERN((1,), (128,), ...), and also timed the main-stream variant at 60%. Those runs imported the first version of
benchmarks/decode_attribution.py (the same build(), 40 replays a timing).

Prefetch the O projection's weights into L2 during attention with cp.async.bulk.prefetch.L2 (GRID CTAs of one
warp, fire-and-forget), on a side stream or on the main stream right after the QKV GEMM."""
import json
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import decode_attribution as attribution  # noqa: E402
import decode_step as ds  # noqa: E402

CODE = r'''
extern "C" __global__ void l2_prefetch(const char* base, unsigned long long bytes, unsigned chunk) {
  unsigned long long start = (unsigned long long)(blockIdx.x * blockDim.x + threadIdx.x) * chunk;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * chunk;
  for (unsigned long long off = start; off < bytes; off += stride) {
    unsigned long long left = bytes - off;
    unsigned n = left < chunk ? (unsigned)left : chunk;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(base + off), "r"(n) : "memory");
  }
}
'''
KERN = None
SIDE = None


GRID = 132


def prefetch(t, fraction, chunk=32768):
    nbytes = (int(t.numel() * t.element_size() * fraction) // 16) * 16
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        KERN((GRID,), (32,), (np.uint64(t.data_ptr()), np.uint64(nbytes), np.uint32(chunk)))


class Prefetching(torch.nn.Module):
    def __init__(self, inner, target, fraction, side, flag):
        super().__init__()
        self.inner, self.target, self.fraction, self.side, self.flag = inner, target, fraction, side, flag
        self.input_scale, self.weight = inner.input_scale, inner.weight

    def forward(self, x):
        y = self.inner(x)
        if self.fraction > 0:
            if self.side:
                ev = torch.cuda.Event()
                ev.record()
                with torch.cuda.stream(SIDE):
                    SIDE.wait_event(ev)
                    prefetch(self.target, self.fraction)
                self.flag.append(1)
            else:
                prefetch(self.target, self.fraction)
        return y


def main():
    global KERN, SIDE
    batches = [int(b) for b in sys.argv[1].split(",")]
    out = Path(sys.argv[2])
    KERN = cupy.RawKernel(CODE, "l2_prefetch", options=("-arch=sm_90",))
    args = ds.parse_args(["--batch", *map(str, batches)])
    device = ds.device_of(args)
    setup = ds.make_setup(args, ds.Dist(), device)
    k, sh = setup.kernel, setup.shard
    SIDE = torch.cuda.Stream()
    ours = ds.path_ops(setup, args)["ours"]
    flag = []
    models = {}
    for name, fraction, side in (("ours", 0, False), ("pf o 100% side", 1.0, True), ("pf o 60% side", 0.6, True),
                                 ("pf o 30% side", 0.3, True), ("pf o 100% main", 1.0, False)):
        m = attribution.build(setup, args, {c: ours.gemm for c in attribution.GEMMS}, ours)
        for layer, w in zip(m.layers, setup.layers):
            layer.qkv = Prefetching(layer.qkv, w.o, fraction, side, flag)
        models[name] = m
    results = []
    pos = args.kv_len - 1
    for batch in batches:
        x = ds.batch_input(setup, sh.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)
        for rep in range(3):
            for name, model in models.items():
                def step(model=model):
                    before = len(flag)
                    y = model(x, caches, pos)
                    if len(flag) > before:
                        torch.cuda.current_stream().wait_stream(SIDE)
                    return y
                step()
                ms = attribution.time_ms(step, {}, k, args, device)
                flag.clear()
                results.append({"batch": batch, "variant": name, "rep": rep, "ms": ms})
                print(f"batch {batch:3d} rep {rep} {name:28s} {ms:8.3f} ms", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
