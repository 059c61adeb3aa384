"""The RMSNorm -> GEMM PDL release of a trace record file, per layer, by how long before the RMSNorm's last CTA
end the GEMM's median CTA entered (docs/experiments/README.md, item 60). Run from the repository root:

    python benchmarks/results/nvidia-h100/session27-2026-11-27/readings/release_by_entry.py TRACE.npz ...
"""
import json
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import decode_trace as dt  # noqa: E402

BINS = ((-100, 1), (1, 2), (2, 3), (3, 4), (4, 100))  # us the GEMM's median CTA entered before the end

for path in sys.argv[1:]:
    data = np.load(path, allow_pickle=False)
    layers = dt.layers_of(dt.launches(data["replay0"], dt.gemm_classes(json.loads(str(data["meta"]))["shard"])))
    print(path)
    for pos, gemm in ((0, "qkv"), (4, "gate_up")):
        rows = []
        for i in dt.usual_layers(layers):
            norm, after = layers[i][pos]["ctas"]["t"].astype(np.int64), layers[i][pos + 1]["ctas"]["t"].astype(np.int64)
            end = norm[:, 4].max()
            rows.append(((after[:, 1].min() - end) / 1e3, (end - np.sort(after[:, 0])[len(after) // 2]) / 1e3,
                         (end - norm[:, 1].min()) / 1e3))
        a = np.array(rows)
        print(f"  rmsnorm -> {gemm}: release median {np.median(a[:, 0]):.2f} us, RMSNorm wait to last end median "
              f"{np.median(a[:, 2]):.2f} us, {len(a)} layers")
        for lo, hi in BINS:
            sel = (a[:, 1] >= lo) & (a[:, 1] < hi)
            if sel.any():
                print(f"    GEMM entered {lo:>4}..{hi:<3} us before: {sel.sum():3d} layers, release median "
                      f"{np.median(a[sel, 0]):.2f} us")
