"""Does warming the O projection's weights in L2 during attention (DRAM is idle there) shorten the decode step?
After each layer's QKV GEMM, o's weights (the first `fraction` of their bytes) are brought into L2 while the main
stream runs attention, in one of two ways:

    python warm_o.py reduction 32,1 warm.json   # a plain reduction kernel reads them, on a side stream
    python warm_o.py prefetch 32,1 pf.json      # cp.async.bulk.prefetch.L2 from GRID CTAs of one warp (CuPy),
                                                # on a side stream or on the main stream

Session 14 on an H100 (benchmarks/results/nvidia-h100/session14-2026-11-26/experiments/):
warm-o-side-reduction.json (reduction) and l2-prefetch-o-132ctas.json (prefetch). The run before the latter,
l2-prefetch-o-1cta.json, launched one CTA of 128 threads, KERN((1,), (128,), ...), and also timed the main-stream
variant at 60%. Those runs were two scripts that imported the first version of benchmarks/decode_attribution.py
(the same build(), 40 replays a timing); this one is both, with their variants.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import decode_attribution as attribution  # noqa: E402
import decode_step as ds  # noqa: E402

PREFETCH_CODE = r'''
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
GRID = 132
PREFETCH_KERNEL = None  # compiled by main for `prefetch`
SIDE = None  # the side stream

# how -> (name, build, fraction of o's bytes, on the side stream) of each variant
VARIANTS = {
    "reduction": [(f"{path}, warm o {fraction:.0%}", path, fraction, True)
                  for path, fractions in (("ours", (0.0, 1.0, 0.5)), ("torch", (0.0, 1.0))) for fraction in fractions],
    "prefetch": [("ours", "ours", 0.0, False), ("pf o 100% side", "ours", 1.0, True),
                 ("pf o 60% side", "ours", 0.6, True), ("pf o 30% side", "ours", 0.3, True),
                 ("pf o 100% main", "ours", 1.0, False)],
}


def reduce_weights(t: torch.Tensor, fraction: float):
    flat = t.view(-1).view(torch.int32)
    return flat[:int(flat.numel() * fraction)].sum(dtype=torch.int32)


def prefetch_weights(t: torch.Tensor, fraction: float, chunk: int = 32768):
    import cupy

    nbytes = (int(t.numel() * t.element_size() * fraction) // 16) * 16
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        PREFETCH_KERNEL((GRID,), (32,), (np.uint64(t.data_ptr()), np.uint64(nbytes), np.uint32(chunk)))


class Warming(torch.nn.Module):
    """Wraps a layer's qkv Fp8Linear: after it, `warm(target, fraction)` on the side stream (its result, kept alive,
    appended to `side_work`) or on the main stream."""

    def __init__(self, inner, target, fraction, warm, side, side_work):
        super().__init__()
        self.inner, self.target, self.fraction, self.warm = inner, target, fraction, warm
        self.side, self.side_work = side, side_work
        self.input_scale, self.weight = inner.input_scale, inner.weight

    def forward(self, x):
        y = self.inner(x)
        if self.fraction > 0:
            if self.side:
                ev = torch.cuda.Event()
                ev.record()
                with torch.cuda.stream(SIDE):
                    SIDE.wait_event(ev)
                    self.side_work.append(self.warm(self.target, self.fraction))
            else:
                self.warm(self.target, self.fraction)
        return y


def main():
    global PREFETCH_KERNEL, SIDE
    how, batches, out = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], Path(sys.argv[3])
    warm = {"reduction": reduce_weights, "prefetch": prefetch_weights}[how]
    if how == "prefetch":
        import cupy

        PREFETCH_KERNEL = cupy.RawKernel(PREFETCH_CODE, "l2_prefetch", options=("-arch=sm_90",))
    args = ds.parse_args(["--batch", *map(str, batches)])
    device = ds.device_of(args)
    setup = ds.make_setup(args, ds.Dist(), device)
    k, sh = setup.kernel, setup.shard
    SIDE = torch.cuda.Stream()
    paths = ds.path_ops(setup, args)
    side_work = []
    models = {}
    for name, path, fraction, side in VARIANTS[how]:
        ops = paths[path]
        m = attribution.build(setup, args, {c: ops.gemm for c in attribution.GEMMS}, ops)
        for layer, w in zip(m.layers, setup.layers):
            layer.qkv = Warming(layer.qkv, w.o, fraction, warm, side, side_work)
        models[name] = m
    results = []
    pos = args.kv_len - 1
    for batch in batches:
        ds.fresh_compile_cache()
        x = ds.batch_input(setup, sh.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)
        for rep in range(3):
            for name, model in models.items():
                def step(model=model):
                    before = len(side_work)
                    y = model(x, caches, pos)
                    if len(side_work) > before:  # the side stream rejoins (a graph capture requires it)
                        torch.cuda.current_stream().wait_stream(SIDE)
                    return y
                step()
                ms = attribution.time_ms(step, {}, k, args, device)
                side_work.clear()
                results.append({"batch": batch, "variant": name, "rep": rep, "ms": ms})
                print(f"batch {batch:3d} rep {rep} {name:28s} {ms:8.3f} ms", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
