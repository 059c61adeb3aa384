"""Where a copy-engine skinny_gemm launch spends its time: head, stream and tail, per CTA.

Needs a diagnostic build (not for timing anything else: every CTA prints at its end):

    NVCC_APPEND_FLAGS=-DFP8DK_DIAG_TIMELINE python tools/build.py
    python benchmarks/skinny_gemm_timeline.py --layers qkv 70b_qkv --m 1 32 > timeline.log
    python benchmarks/skinny_gemm_timeline.py --parse timeline.log

Each case is run in three sequences, after a warm-up: the quantization of the activations then the GEMM (as in a
decode step), and two GEMMs back to back with and without programmatic dependent launch (PDL). The kernel prints
one line per CTA (`FP8DK_TL n k m grid cta out t_entry t_first_copy t_first_stage t_last_stage t_end
t_last_warp_stage t_epilogue smid t7 t8 t9 t10`, global timer in ns; t_last_stage is warp 0's, t_last_warp_stage the last consumer
warp's, t_epilogue when the last run's reduction starts); --parse groups them into launches by their entry times
and reports, relative to the launch's first CTA entry:
the spread of the entries, the first copy and the first full stage (prologue and first-byte latency), the
stream's end (first, median, last CTA), the end (last CTA), between back-to-back launches the gap from
the first launch's end to the second's first entry, and the tail split, medians over the CTAs: the last
consumer warp's lag behind warp 0, the wait for the others at the reduction barrier, the reduction itself.
Kernels built since session 32 also mark the steps of the last run's reduction (t7..t10, 0 where not reached):
the workspace protocol's partials stored, counted, and (the last to arrive) the tile finished; the cluster
meet's partial tile in red, the peers' rows landed, this CTA's outputs stored, its copies read. The summary
gives the gaps from t_epilogue through those marks to the end, for the CTA that ended last and as medians over
the CTAs that reached as many marks.
"""

import argparse
import ctypes
import os
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_skinny_gemm import LAYERS, REPO  # noqa: E402
LINE = re.compile(r"FP8DK_TL (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)(?: (\d+) (\d+))?(?: (\d+))?"
                  r"(?: (\d+) (\d+) (\d+) (\d+))?")
CASE = re.compile(r"^CASE (.*)$")


def run(args) -> int:
    import torch

    os.environ.setdefault("FP8DK_SKINNY_ROUTE", "0")
    import kernels

    k = kernels.get_local_kernel(REPO)
    fp8 = k.native_fp8_dtype(torch.device("cuda"))
    one = torch.tensor([1.0], device="cuda")
    libc = ctypes.CDLL(None)
    envs = [dict(part.partition("=")[::2] for part in e.split(",")) if e else {} for e in args.env]
    for layer in args.layers:
        n, kdim = LAYERS[layer]
        weights = [torch.randn(n, kdim, device="cuda").to(fp8) for _ in range(2)]
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # evicts the weights from L2
        for m in args.m:
            x = torch.randn(m, kdim, device="cuda", dtype=torch.bfloat16)
            a = x.to(fp8)
            for env in envs:
                label = ",".join(f"{key}={v}" for key, v in env.items()) or "default"
                for seq in ("quant+gemm", "gemm+gemm pdl", "gemm+gemm no-pdl"):
                    pdl = {"FP8DK_PDL": "0"} if seq.endswith("no-pdl") else {}
                    with k.tuning_overrides({**env, **pdl}):
                        def body():  # outputs kept, so that the two launches write different buffers
                            if seq == "quant+gemm":
                                return [k.skinny_gemm(k.quantize_fp8(x, one, fp8), weights[0], one, one,
                                                      out_dtype=torch.bfloat16)]
                            return [k.skinny_gemm(a, w, one, one, out_dtype=torch.bfloat16) for w in weights]
                        body()  # warm-up (its lines come before the CASE marker: --parse drops them)
                        flush.zero_()
                        torch.cuda.synchronize()
                        libc.fflush(None)  # the kernels' lines go through C stdio, the marker through Python's
                        print(f"CASE {layer} M={m} {label} {seq}", flush=True)
                        outs = body()
                        torch.cuda.synchronize()
                        libc.fflush(None)
                        del outs
        del weights, flush
        torch.cuda.empty_cache()
    return 0


def summarize(case: str, launches: list) -> list:
    rows = []
    prev_end = None
    for j, ctas in enumerate(launches):
        t0 = min(c[0] for c in ctas)
        us = lambda t: (t - t0) / 1e3  # noqa: E731
        entry = [us(c[0]) for c in ctas]
        copy = [us(c[1]) for c in ctas if c[1]]
        first = [us(c[2]) for c in ctas if c[2]]
        last = sorted(us(c[3]) for c in ctas if c[3])
        end = [us(c[4]) for c in ctas]
        gap = "" if prev_end is None else f" gap {(t0 - prev_end) / 1e3:6.2f}"
        if all(c[5] and c[6] for c in ctas):  # the tail split (kernels built since session 15)
            med = lambda f: statistics.median(f(c) / 1e3 for c in ctas)  # noqa: E731
            gap += (f" tail: warps {med(lambda c: c[5] - c[3]):5.2f} barrier {med(lambda c: c[6] - c[5]):5.2f}"
                    f" epilogue {med(lambda c: c[4] - c[6]):5.2f}")
        marked = [c for c in ctas if len(c) > 7 and c[7]]
        if marked:
            def steps(c):  # us from t_epilogue through the reduction's marks that were reached to the end
                marks = [c[6]] + [t for t in c[7:11] if t] + [c[4]]
                return [(b - a) / 1e3 for a, b in zip(marks, marks[1:])]
            last_cta = steps(max(ctas, key=lambda c: c[4]))
            alike = [steps(c) for c in marked if len(steps(c)) == len(last_cta)]
            gap += (" reduction steps: last CTA " + "/".join(f"{x:.2f}" for x in last_cta) + ", median of "
                    f"{len(alike)} " + "/".join(f"{statistics.median(col):.2f}" for col in zip(*alike)))
        rows.append(f"{case} [{j}] ctas {len(ctas):3d} entry<= {max(entry):5.2f} copy {min(copy):5.2f}.."
                    f"{max(copy):5.2f} first-stage {min(first):5.2f}..{max(first):5.2f} stream-end "
                    f"{last[0]:6.2f}/{statistics.median(last):6.2f}/{last[-1]:6.2f} end {max(end):6.2f} "
                    f"tail {max(end) - last[-1]:5.2f}{gap}")
        prev_end = max(c[4] for c in ctas)
    return rows


def parse(path: Path) -> int:
    cases = []
    for raw in path.read_text().splitlines():
        mc = CASE.match(raw)
        if mc:
            cases.append((mc.group(1), []))
            continue
        ml = LINE.search(raw)
        if ml and cases:
            cases[-1][1].append([int(g or 0) for g in ml.groups()])
    for case, lines in cases:
        # Launches told apart by their entries: a CTA entering more than 5 us after the one before it starts the
        # next launch (a launch's CTAs enter within about 1 us). The device's printf buffer may hand a line
        # to a later marker: a group smaller than its grid is such a stray and is dropped.
        lines.sort(key=lambda f: f[6])
        launches = []
        for f in lines:
            if not launches or f[6] - launches[-1][-1][6] > 5000:
                launches.append([])
            launches[-1].append(f)
        whole = [[f[6:13] + f[14:18] for f in launch] for launch in launches if len(launch) == launch[0][3]]
        for row in summarize(case, whole):
            print(row)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", nargs="+", choices=sorted(LAYERS), default=["qkv"])
    p.add_argument("--m", type=int, nargs="+", default=[1])
    p.add_argument("--env", nargs="*", default=[""], help="configurations KEY=VALUE[,KEY=VALUE] ('' = default)")
    p.add_argument("--parse", type=Path, help="summarize a log written by a run")
    args = p.parse_args(argv)
    return parse(args.parse) if args.parse else run(args)


if __name__ == "__main__":
    sys.exit(main())
