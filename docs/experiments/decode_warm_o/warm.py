"""Session 14 on an H100: benchmarks/results/nvidia-h100/session14-2026-11-26/experiments/warm-o-side-reduction.json.
That run imported the first version of benchmarks/decode_attribution.py (the same build(), 40 replays a timing).

Does warming the O projection's weights in L2 during attention (DRAM is idle there) shorten the step?
Experiment: after the QKV GEMM, a side stream reads the O weights (a plain reduction kernel) while the main stream
runs attention; joined at the end of the step."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import decode_attribution as attribution  # noqa: E402
import decode_step as ds  # noqa: E402

SIDE = None


class Warming(torch.nn.Module):
    """Wraps a layer's qkv Fp8Linear: after it, warm `target` (first `fraction` of its bytes) on the side stream."""

    def __init__(self, inner, target, fraction, sink):
        super().__init__()
        self.inner, self.target, self.fraction, self.sink = inner, target, fraction, sink
        self.input_scale, self.weight = inner.input_scale, inner.weight

    def forward(self, x):
        y = self.inner(x)
        if self.fraction > 0:
            flat = self.target.view(-1).view(torch.int32)
            n = int(flat.numel() * self.fraction)
            ev = torch.cuda.Event()
            ev.record()
            with torch.cuda.stream(SIDE):
                SIDE.wait_event(ev)
                self.sink.append(flat[:n].sum(dtype=torch.int32))
        return y


def main():
    global SIDE
    batches = [int(b) for b in sys.argv[1].split(",")]
    out = Path(sys.argv[2])
    args = ds.parse_args(["--batch", *map(str, batches)])
    device = ds.device_of(args)
    setup = ds.make_setup(args, ds.Dist(), device)
    k, sh = setup.kernel, setup.shard
    SIDE = torch.cuda.Stream()
    paths = ds.path_ops(setup, args)
    sink = []
    models = {}
    for path in ("ours", "torch"):
        for fraction in ((0.0, 1.0, 0.5) if path == "ours" else (0.0, 1.0)):
            ops = paths[path]
            m = attribution.build(setup, args, {c: ops.gemm for c in attribution.GEMMS}, ops)
            for layer, w in zip(m.layers, setup.layers):
                layer.qkv = Warming(layer.qkv, w.o, fraction, sink)
            models[f"{path}, warm o {fraction:.0%}"] = m
    results = []
    pos = args.kv_len - 1
    for batch in batches:
        ds.fresh_compile_cache()
        x = ds.batch_input(setup, sh.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)
        for rep in range(3):
            for name, model in models.items():
                def step(model=model):
                    before = len(sink)
                    y = model(x, caches, pos)
                    if len(sink) > before:
                        torch.cuda.current_stream().wait_stream(SIDE)
                    return y
                step()
                ms = attribution.time_ms(step, {}, k, args, device)
                sink.clear()
                results.append({"batch": batch, "variant": name, "rep": rep, "ms": ms})
                print(f"batch {batch:3d} rep {rep} {name:28s} {ms:8.3f} ms", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
