#!/usr/bin/env python3
"""What a plain device-to-device copy reaches at the working-set sizes of our decode-sized kernels, timed exactly
as benchmarks/sweep.py times the kernels (CUDA graph over rotated buffers, median per call), next to the 1 GiB
copy the sweep's "% of copy bandwidth" columns divide by. A kernel moving B bytes cannot be expected to beat a
copy moving B bytes; this shows how far below the 1 GiB figure that copy already is.

    python benchmarks/copy_ceiling.py                         # the sizes below
    python benchmarks/copy_ceiling.py --mb 21 59 --out copy.json
"""

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import CudaGraphTimer, copy_bandwidth, describe_device, rotation_bytes  # noqa: E402

# Bytes read + written by: silu_and_mul [512, 2 x 6656] and [512, 2 x 8192] (FP8 out), fused_add_rms_norm
# [512, 8192] and [512, 16384] (FP8 out), [2048, 16384], and a 405B QKV weight.
DEFAULT_MB = (17.0, 21.0, 29.4, 58.7, 234.9, 37.7)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, nargs="+", default=list(DEFAULT_MB), help="bytes read + written, in MB")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = p.parse_args(argv)
    info = describe_device("cuda")
    ceiling = copy_bandwidth("cuda", quick=False)["gbps"]
    rotation = rotation_bytes("cuda", info, quick=False)
    timer = CudaGraphTimer(quick=False)
    print(f"# {info['name']}: 1 GiB copy {ceiling:.0f} GB/s (read + written)")
    rows = []
    for mb in args.mb:
        nbytes = int(mb * 1e6) // 2 // 16 * 16  # copied bytes: half the traffic
        sets = max(1, math.ceil(rotation / (2 * nbytes)))
        pairs = [(torch.empty(nbytes, dtype=torch.uint8, device="cuda"),
                  torch.empty(nbytes, dtype=torch.uint8, device="cuda")) for _ in range(sets)]
        est_us = 2 * nbytes / (ceiling * 1e3)
        us = timer.time([lambda d=d, s=s: d.copy_(s) for d, s in pairs], est_us)["median_us"]
        gbps = 2 * nbytes / us / 1e3
        rows.append({"traffic_mb": 2 * nbytes / 1e6, "us": us, "gbps": gbps, "pct_of_1gib_copy": 100 * gbps / ceiling})
        print(f"{2 * nbytes / 1e6:8.1f} MB  {us:8.2f} us  {gbps:6.0f} GB/s  {100 * gbps / ceiling:5.1f}% of the 1 GiB copy")
        del pairs
        torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": info, "copy_gbps": ceiling, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
