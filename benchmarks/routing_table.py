"""The M sets of routing.py's per-GPU tables, drawn from `sweep.py --suite skinny_gemm --gemm-shapes targets`
reports (sweep.json), so that a table is redrawn by the same rule every time.

    python benchmarks/routing_table.py benchmarks/results/nvidia-h200/<run a>/sweep.json <run b>/sweep.json

The rule (routing.py): a measured M goes to torch._scaled_mm where it was faster than our kernel by 1% or more
with either output dtype; an M between measured ones follows the nearer measured M, halfway the smaller. With
several reports, each point's medians are averaged over the reports first. Prints one line per weight shape
(N, K): each measured M's speedup of ours over torch._scaled_mm (the slower output dtype's; * marks the routed
ones), then the M values 1..32 to route.
"""

import argparse
import json
from collections import defaultdict
from typing import Dict, List, Tuple

MAX_M = 32
ROUTE_BELOW = 1 / 1.01  # our speedup at which a point goes to torch._scaled_mm


def speedups(reports: List[dict]) -> Dict[Tuple[int, int], Dict[int, float]]:
    """(N, K) -> M -> the lowest, over the output dtypes, of torch._scaled_mm's mean median / ours."""
    times = defaultdict(lambda: ([], []))
    for report in reports:
        for r in report["results"]:
            if r["suite"] != "skinny_gemm":
                continue
            label, t = r["label"], r["times"]
            ours, peer = times[(label["N"], label["K"], label["M"], r["table"])]
            ours.append(t["ours"]["median_us"])
            peer.append(t["torch._scaled_mm"]["median_us"])
    worst = defaultdict(dict)
    for (n, k, m, _), (ours, peer) in times.items():
        speedup = (sum(peer) / len(peer)) / (sum(ours) / len(ours))
        worst[(n, k)][m] = min(speedup, worst[(n, k)].get(m, speedup))
    return worst


def routed_m(measured: Dict[int, float]) -> List[int]:
    """The M values 1..MAX_M that go to torch._scaled_mm, by the nearer measured M (halfway: the smaller)."""
    points = sorted(measured)
    return [m for m in range(1, MAX_M + 1)
            if measured[min(points, key=lambda p: (abs(p - m), p))] <= ROUTE_BELOW]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", help="sweep.json files of the same GPU")
    args = p.parse_args(argv)
    reports = []
    for path in args.reports:
        with open(path) as f:
            reports.append(json.load(f))
    for shape, measured in speedups(reports).items():
        points = " ".join(f"{m}:{s:.3f}{'*' if s <= ROUTE_BELOW else ''}" for m, s in sorted(measured.items()))
        print(f"{shape}: {points} -> {routed_m(measured)}")


if __name__ == "__main__":
    main()
