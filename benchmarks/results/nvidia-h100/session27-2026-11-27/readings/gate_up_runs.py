"""405B gate_up's CTAs at batch 32, by how many runs of shared tiles their stream-K range holds (docs/experiments/
README.md, item 61). Run from the repository root:

    python benchmarks/results/nvidia-h100/session27-2026-11-27/readings/gate_up_runs.py TRACE.npz ...

The plan (tests/plans/skinny_plans.cu on an H100's figures, m = 32, n = 13312, k = 16384): 132 CTAs, 208 tiles
of 64 rows, the first 76 shared by stream-K (32 K-blocks each), then one whole tile per CTA. CTA g takes the
shared units [g U / G, (g + 1) U / G), U = 76 * 32, as skinny_gemm_tma.cuh's CtaWork does.
"""
import json
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import decode_trace as dt  # noqa: E402

SHARED_TILES, K_BLOCKS, CTAS = 76, 32, 132
UNITS = SHARED_TILES * K_BLOCKS


def shared_runs(g: int):
    begin, end = g * UNITS // CTAS, (g + 1) * UNITS // CTAS
    return end - begin, (end - 1) // K_BLOCKS - begin // K_BLOCKS + 1


for path in sys.argv[1:]:
    data = np.load(path, allow_pickle=False)
    layers = dt.layers_of(dt.launches(data["replay0"], dt.gemm_classes(json.loads(str(data["meta"]))["shard"])))
    rows = []
    for i in dt.usual_layers(layers):
        ctas = next(launch for launch in layers[i] if launch["name"] == "gate_up")["ctas"]
        assert len(ctas) == CTAS, "not the plan this reading assumes"
        t = ctas["t"].astype(np.int64)
        streaming = t[:, 3] - t[:, 2]  # first full stage to the end of the last stage
        for r, d, s in zip(ctas, streaming - np.median(streaming), t[:, 3] - np.median(t[:, 3])):
            units, runs = shared_runs(int(r["block"]))
            rows.append((units, runs, d / 1e3, s / 1e3))
    a = np.array(rows)
    print(path)
    for units, runs in sorted({(int(u), int(n)) for u, n, _, _ in rows}):
        sel = (a[:, 0] == units) & (a[:, 1] == runs)
        streaming, end = a[sel, 2], a[sel, 3]
        print(f"  {units} shared units in {runs} run(s): {sel.sum():5d} CTA-layers, streaming "
              f"{np.median(streaming):+.2f} us against the launch's median (p90 {np.percentile(streaming, 90):+.2f}), "
              f"stream end {np.median(end):+.2f} (p90 {np.percentile(end, 90):+.2f}), {np.mean(end > 3):.0%} more than "
              "3 us after the median")
