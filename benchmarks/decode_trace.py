"""Our build's decode step per CTA: when each CTA of each of our kernels entered, returned from its PDL wait,
reached its own marks and ended, on which SM, on one clock (the global timer), for a CUDA-graph replay as it
runs. torch.profiler gives a kernel's start and end only, and a PDL launch's start is not when it works.

Needs a diagnostic build (common/diag_trace.cuh; not for timing anything else):

    NVCC_APPEND_FLAGS=-DFP8DK_DIAG_TRACE python tools/build.py
    python benchmarks/decode_trace.py --batch 1 32 --out DIR       # records and summaries, DIR/trace-b*.npz/.txt
    python benchmarks/decode_trace.py --batch 32 --variant "late:qkv:FP8DK_SKINNY_TMA_WINDOW=2"  # and a variant
    python benchmarks/decode_trace.py --batch 32 --variant "cap3:FP8DK_RMSNORM_CTAS_PER_SM=3"   # every launch
    python benchmarks/decode_trace.py --parse DIR/trace-b32.npz     # the summary again, from the records

The options after the script's own are decode_step.py's (model, shard, layers, ...). Each batch size's step is
captured as in decode_step.py, replayed in the fast process state, and its kernels' records of --traced replays
are kept (each its own). The diagnostic build's step runs about 1% slower than the plain one (H100, 405B TP8
shard), and the torch kernels' launch gaps (attention) moved by up to 5 us a layer between two graphs of one
process: compare our kernels' spans between variants, not the whole layer.

The summary, per position in a layer (the middle layers' mean, us from the end of the previous layer's down GEMM):
  enter      first / median / last CTA entry
  wait       first / last return from the PDL wait (the kernel before it has completed)
  stage      GEMMs: median / last CTA's first full stage (its first weights and activations have landed)
  stream     GEMMs: median / last CTA's end of its last stage
  end        first / median / last CTA end
per GEMM that follows one of our kernels, per SM: from the CTA of the GEMM before it leaving the SM to the CTA of
this GEMM entering it (the hand-off), median and last; and per GEMM the span that ends with its last CTA (from the
GEMM before, or from the quantization after attention) against its weights at the copy bandwidth the run
measured: what each part of the layer costs over the bytes it moves; per GEMM, how the CTAs' stream ends spread
by SM, and which SMs stream faster than the rest; per elementwise launch, how many of its CTAs shared an SM and
how that delayed them. (A record's t[2] and t[3] are the GEMM's stage and stream marks, skinny_gemm_tma.cuh.)
"""

import argparse
import ctypes
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List

import numpy as np

from decode_attribution import GEMMS, env_variants, with_tuning

# common/diag_trace.cuh, struct Record
RECORD = np.dtype([("t", "<u8", (5,)), ("kind", "<u4"), ("n", "<u4"), ("k", "<u4"), ("m", "<u4"),
                   ("block", "<u4"), ("smid", "<u4"), ("grid", "<u4"), ("unused", "<u4")])
assert RECORD.itemsize == 72
KINDS = {1: "rmsnorm", 2: "swiglu", 3: "quant", 4: "gemm"}
MODULES = ("rmsnorm", "swiglu", "quantize", "skinny_gemm_e4m3fn", "skinny_gemm_e4m3fnuz", "skinny_gemm_bf16",
           "skinny_gemm_fp16")
CAPACITY = 1 << 19  # diag_trace.cuh, kCapacity
EDGE_LAYERS = 5  # left out at each end of the step
FAST_SM_US = 3.0  # an SM whose CTAs end their stream this much before the median, on average, is listed
# PDL releases are also read apart for the layers where the next kernel's median CTA had entered at least this
# long before the kernel it waits for ended: a GEMM issues its first requests at entry, and the release after an
# RMSNorm was slow while they were younger than this (docs/experiments/README.md, item 60).
SETTLED_US = 4.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--parse", type=Path, metavar="NPZ", help="summarize saved records instead of running")
    p.add_argument("--traced", type=int, default=2, help="replays recorded, each on its own")
    p.add_argument("--copy-gbps", type=float, help="--parse: the copy bandwidth the spans are held against "
                   "(default: the one the run measured; traces of session 25 have none: 3003 on its H100s)")
    p.add_argument("--timed", type=int, default=30, help="replays timed before (the diagnostic build's step)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE]",
                   help="also trace our build with tuning variables, for one GEMM class (qkv, o, gate_up, down) or "
                        "for every launch of the step, as decode_attribution.py's --env (the specs of one LABEL make "
                        "one variant); the records go to trace-b<batch>-<LABEL>.npz (repeatable)")
    own, rest = p.parse_known_args(argv)
    if own.help:
        p.print_help()
        sys.exit(0)
    try:
        own.variants = env_variants(own.variant)
    except ValueError as e:
        p.error(f"--variant {e}")
    for label in own.variants:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", label):
            p.error(f"--variant label {label!r}: letters, digits, '.', '_', '-' (it names the records' file)")
    return own, rest


# ---------------------------------------------------------------- records -> launches -> layers


def gemm_classes(shard: dict) -> Dict[tuple, str]:
    """(n, k) -> the GEMM class of the decoder layer, from the shard's shape."""
    q = (shard["heads"] + 2 * shard["kv_heads"]) * shard["head_dim"]
    return {(q, shard["hidden"]): "qkv", (shard["hidden"], shard["heads"] * shard["head_dim"]): "o",
            (2 * shard["intermediate"], shard["hidden"]): "gate_up", (shard["hidden"], shard["intermediate"]): "down"}


def launches(records: np.ndarray, classes: Dict[tuple, str]) -> List[dict]:
    """The records grouped into kernel launches, in stream order: each a dict with its name and its CTAs'
    records. A launch is `grid` CTAs of one key (kind, n, k, m, grid), blocks 0..grid-1 once each; a CTA joins the
    earliest launch of its key that lacks its block. (Not gaps in time: a GEMM's first CTAs may start tens of
    microseconds before the rest, on SMs the GEMM before it leaves idle.) Stream order is that of the first PDL
    wait to return: a kernel's wait returns only once the kernel before it has completed, where entries may come
    before the previous kernel's (a qkv CTA entered before the RMSNorm's first one once, at batch 1)."""
    records = records[records["kind"] != 0]  # slots claimed by CTAs that had no work and wrote nothing
    by_key = defaultdict(list)
    for r in records[np.argsort(records["t"][:, 0], kind="stable")]:
        by_key[(int(r["kind"]), int(r["n"]), int(r["k"]), int(r["m"]), int(r["grid"]))].append(r)
    result = []
    for (kind, n, k, m, grid), rs in by_key.items():
        groups, blocks, open_from = [], [], 0
        for r in rs:
            block = int(r["block"])
            j = open_from
            while j < len(groups) and block in blocks[j]:
                j += 1
            if j == len(groups):
                groups.append([])
                blocks.append(set())
            groups[j].append(r)
            blocks[j].add(block)
            while open_from < len(groups) and len(blocks[open_from]) == grid:
                open_from += 1
        name = KINDS.get(kind, "?")
        if name == "gemm":
            name = classes.get((n, k), f"gemm {n}x{k}")
        result += [{"name": name, "ctas": np.array(g, dtype=RECORD)} for g in groups]
    result.sort(key=lambda launch: int(launch["ctas"]["t"][:, 1].min()))
    return result


def layers_of(chain: List[dict]) -> List[List[dict]]:
    """The chain cut into decoder layers, each from an RMSNorm that a qkv GEMM follows up to the next."""
    starts = [i for i in range(len(chain) - 1) if chain[i]["name"] == "rmsnorm" and chain[i + 1]["name"] == "qkv"]
    return [chain[a:b] for a, b in zip(starts, starts[1:])]


def stats_us(values: np.ndarray, origin: int) -> dict:
    v = np.sort((values.astype(np.int64) - origin) / 1000.0)
    return {"first": float(v[0]), "median": float(v[len(v) // 2]), "last": float(v[-1])}


def middle_layers(layers: List[List[dict]]) -> List[int]:
    """Indices of the layers the summaries read: all but EDGE_LAYERS at each end (a step's first and last layers
    join other kernels), and never the first, whose origin is the layer before it."""
    edge = max(1, min(EDGE_LAYERS, len(layers) // 4))
    return list(range(edge, len(layers) - edge)) or list(range(1, len(layers)))


def usual_layers(layers: List[List[dict]]) -> List[int]:
    """The middle layers of the most common sequence of kernels (a lost or misplaced launch would shift the
    positions of its layer)."""
    middle = middle_layers(layers)
    shape = Counter(tuple(launch["name"] for launch in layers[i]) for i in middle).most_common(1)[0][0]
    return [i for i in middle if tuple(launch["name"] for launch in layers[i]) == shape]


def layer_summary(layers: List[List[dict]]) -> List[dict]:
    """Per position in a layer, the mean over usual_layers of launch_marks, from the end of the GEMM before the
    layer (the previous layer's down)."""
    per_position, usual = defaultdict(list), usual_layers(layers)
    names = [launch["name"] for launch in layers[usual[0]]]
    for i in usual:
        origin = int(layers[i - 1][-1]["ctas"]["t"][:, 4].max())
        for pos, launch in enumerate(layers[i]):
            per_position[pos].append(launch_marks(launch["ctas"], origin))
    rows = []
    for pos, marks in sorted(per_position.items()):
        mean = {key: {stat: statistics.fmean(m[key][stat] for m in marks) for stat in marks[0][key]}
                for key in marks[0]}
        rows.append({"position": pos, "name": names[pos], "layers": len(marks), **mean})
    return rows


def launch_marks(ctas: np.ndarray, origin: int) -> dict:
    t = ctas["t"]
    marks = {"enter": stats_us(t[:, 0], origin), "wait": stats_us(t[:, 1], origin), "end": stats_us(t[:, 4], origin)}
    if (t[:, 2] > 0).all():
        marks["stage"] = stats_us(t[:, 2], origin)
    if (t[:, 3] > 0).all():
        marks["stream"] = stats_us(t[:, 3], origin)
    return marks


def handoffs(layers: List[List[dict]]) -> List[dict]:
    """Per GEMM that follows one of our kernels, which follows a GEMM (GEMM -> kernel -> GEMM): per SM, the
    next GEMM's CTA entry less the previous GEMM's CTA end on that SM (us), over the middle layers' SMs."""
    chain_of = [launch for i in middle_layers(layers) for launch in layers[i]]
    per_pair = defaultdict(list)
    gemm_names = ("qkv", "o", "gate_up", "down")
    for j in range(2, len(chain_of)):
        before, between, after = chain_of[j - 2], chain_of[j - 1], chain_of[j]
        if before["name"] not in gemm_names or after["name"] not in gemm_names or between["name"] in gemm_names:
            continue
        left = {int(r["smid"]): int(r["t"][4]) for r in before["ctas"]}
        for r in after["ctas"]:
            sm = int(r["smid"])
            if sm in left:
                per_pair[(before["name"], between["name"], after["name"])].append((int(r["t"][0]) - left[sm]) / 1e3)
    return [{"before": b, "between": k, "after": a, "median_us": statistics.median(v), "last_us": max(v),
             "sms": len(v)} for (b, k, a), v in per_pair.items()]


def releases(layers: List[List[dict]]) -> List[dict]:
    """Per pair of consecutive launches of usual_layers (each layer from the previous layer's down), but for qkv
    and the quantization, between which attention runs (torch's kernels, not traced): the next launch's first
    PDL wait return less the last CTA end of the launch it waits for (us), its median and 90th percentile, and
    its median apart for the layers where the next launch's median CTA entered less than / at least SETTLED_US
    before that end. The wait returns once the grid before has completed and its memory operations are
    visible; item 60 reads the difference."""
    per_pair = defaultdict(list)
    for i in usual_layers(layers):
        chain = layers[i - 1][-1:] + layers[i]
        for before, after in zip(chain, chain[1:]):
            if before["name"] == "qkv":
                continue
            last_end = int(before["ctas"]["t"][:, 4].max())
            t = after["ctas"]["t"]
            release = stats_us(t[:, 1], last_end)["first"]
            entered_before = -stats_us(t[:, 0], last_end)["median"]
            per_pair[(before["name"], after["name"])].append((release, entered_before >= SETTLED_US))
    rows = []
    for (before, after), values in per_pair.items():
        all_us = [us for us, _ in values]
        split = {settled: [us for us, s in values if s == settled] for settled in (False, True)}
        rows.append({"before": before, "after": after, "median_us": statistics.median(all_us),
                     "p90_us": float(np.percentile(all_us, 90)),
                     "unsettled": (statistics.median(split[False]), len(split[False])) if split[False] else None,
                     "settled": (statistics.median(split[True]), len(split[True])) if split[True] else None})
    return rows


def stream_ends_by_sm(layers: List[List[dict]]) -> List[dict]:
    """Per GEMM class, over the middle layers: each SM's mean of its CTA's stream end less the launch's median
    (us), the spread of those means, and the SMs more than FAST_SM_US early (a fixed group of SMs streams faster
    than the rest, different on each chip: docs/experiments/README.md, item 57)."""
    late = defaultdict(lambda: defaultdict(list))  # class -> SM -> us after the median
    for i in middle_layers(layers):
        for launch in layers[i]:
            t = launch["ctas"]["t"]
            if launch["name"] not in GEMMS or not (t[:, 3] > 0).all():
                continue
            median = np.median(t[:, 3].astype(np.int64))
            for r in launch["ctas"]:
                late[launch["name"]][int(r["smid"])].append((int(r["t"][3]) - median) / 1e3)
    rows = []
    for name in GEMMS:
        if name not in late:
            continue
        means = {sm: statistics.fmean(v) for sm, v in late[name].items()}
        values = np.array(sorted(means.values()))
        rows.append({"gemm": name, "percentiles": {p: float(np.percentile(values, p)) for p in (0, 10, 50, 90, 100)},
                     "fast_sms": sorted(sm for sm, v in means.items() if v < -FAST_SM_US)})
    return rows


def elementwise_packing(layers: List[List[dict]]) -> List[dict]:
    """Per position of one of our elementwise kernels in a layer, over the middle layers: the most of its CTAs on
    one SM and the SMs they used (medians over the layers), and its CTAs' mean end after the launch's first wait
    (us) by how many of its CTAs shared their SM. A PDL launch's CTAs go to the SMs the kernel before it has left,
    as many to an SM as fit (docs/experiments/README.md, item 59)."""
    rows = {}
    for i in middle_layers(layers):
        layer = layers[i]
        for pos, launch in enumerate(layer):
            if launch["name"] in GEMMS:
                continue
            ctas = launch["ctas"]
            label = launch["name"] + (f" -> {layer[pos + 1]['name']}" if pos + 1 < len(layer) else "")
            row = rows.setdefault((pos, label), {"most": [], "sms": [], "ends": defaultdict(list)})
            per_sm = Counter(int(sm) for sm in ctas["smid"])
            row["most"].append(max(per_sm.values()))
            row["sms"].append(len(per_sm))
            wait = int(ctas["t"][:, 1].min())
            for r in ctas:
                row["ends"][per_sm[int(r["smid"])]].append((int(r["t"][4]) - wait) / 1e3)
    return [{"kernel": label, "most_per_sm": statistics.median(row["most"]), "sms": statistics.median(row["sms"]),
             "end_us_by_count": {n: (statistics.fmean(v), len(v)) for n, v in sorted(row["ends"].items())}}
            for (pos, label), row in sorted(rows.items())]


def bandwidth_spans(summary: List[dict], classes: Dict[tuple, str], copy_gbps: float) -> List[dict]:
    """Per GEMM of the layer (summary's mean positions), the span that ends with its last CTA and starts with the
    previous GEMM's last end, or later where none of our kernels ran in between (attention, before o's
    quantization): its length, its weights' time at the copy bandwidth (FP8, one byte an element) and the
    difference, us. The spans cover our kernels' time; what they leave out is attention."""
    size = {name: n * k for (n, k), name in classes.items()}
    spans, previous_end, pending = [], 0.0, []  # pending: our kernels since the previous GEMM
    for row in summary:
        if row["name"] not in size:
            pending.append(row)
            continue
        start = max(previous_end, pending[0]["enter"]["first"]) if pending else previous_end
        length = row["end"]["last"] - start
        at_bandwidth = size[row["name"]] / (copy_gbps * 1e3)
        spans.append({"span": ", ".join([r["name"] for r in pending] + [row["name"]]), "start": start,
                      "us": length, "at_copy_bw_us": at_bandwidth, "over_us": length - at_bandwidth})
        previous_end, pending = row["end"]["last"], []
    return spans


def summary_text(summary: List[dict], pairs: List[dict], released: List[dict], by_sm: List[dict], packing: List[dict],
                 spans: List[dict], copy_gbps: float, title: str) -> str:
    counted = f"the {summary[0]['layers']} middle layers of the most common shape" if summary else "no layers"
    lines = [title, "", f"us from the end of the previous layer's down GEMM, mean over {counted}",
             "", f"{'pos':>3} {'kernel':8} {'enter first/med/last':>22} {'wait first/last':>16} "
             f"{'stage med/last':>15} {'stream med/last':>16} {'end first/med/last':>22}"]

    def trio(m, keys=("first", "median", "last")):
        return "/".join(f"{m[k]:.1f}" for k in keys)
    for row in summary:
        stage = trio(row["stage"], ("median", "last")) if "stage" in row else "-"
        stream = trio(row["stream"], ("median", "last")) if "stream" in row else "-"
        lines.append(f"{row['position']:3d} {row['name']:8} {trio(row['enter']):>22} "
                     f"{trio(row['wait'], ('first', 'last')):>16} {stage:>15} {stream:>16} {trio(row['end']):>22}")
    lines += ["", "SM hand-off, GEMM -> kernel -> GEMM: the next GEMM's CTA entry after the previous GEMM's CTA "
              "left the same SM (us)"]
    for pair in pairs:
        lines.append(f"  {pair['before']:>7} -> {pair['between']:8} -> {pair['after']:7}: median "
                     f"{pair['median_us']:.2f}, last {pair['last_us']:.2f} over {pair['sms']} SM-layers")
    lines += ["", "PDL release: the next kernel's first wait return after the last CTA end of the one it waits for "
              "(us), median / p90 over the layers, and the median where the next kernel's median CTA entered less "
              f"than / at least {SETTLED_US:.0f} us before that end (count)"]

    def part(value):
        return f"{value[0]:5.2f} ({value[1]})" if value else "    - (0)"
    for row in released:
        lines.append(f"  {row['before']:>7} -> {row['after']:8} {row['median_us']:5.2f} / {row['p90_us']:5.2f}   "
                     f"entered < {SETTLED_US:.0f} us before: {part(row['unsettled'])}, "
                     f">= {SETTLED_US:.0f} us: {part(row['settled'])}")
    lines += ["", f"Stream ends by SM: per SM, its CTAs' mean stream end less the launch's median (us), percentiles "
              f"0/10/50/90/100 over the SMs, and the SMs more than {FAST_SM_US:.0f} us early"]
    for row in by_sm:
        lines.append(f"  {row['gemm']:8} " + " ".join(f"{v:6.1f}" for v in row["percentiles"].values())
                     + f"   early: {row['fast_sms'] or '-'}")
    lines += ["", "CTAs per SM of our elementwise kernels: the most on one SM and the SMs used (medians over the "
              "layers); the CTAs' mean end after the launch's wait (us) by how many shared their SM"]
    for row in packing:
        lines.append(f"  {row['kernel']:18} most {row['most_per_sm']:g}, SMs {row['sms']:g}: " + ", ".join(
            f"{n} on an SM {us:.2f} ({count})" for n, (us, count) in row["end_us_by_count"].items()))
    if spans:
        ours = sum(span["us"] for span in spans)
        lines += ["", f"Spans ending with each GEMM against its weights at the copy bandwidth ({copy_gbps:.0f} GB/s), us",
                  f"  {'span':34} {'from':>6} {'us':>6} {'at BW':>6} {'over':>6}"]
        for span in spans:
            lines.append(f"  {span['span']:34} {span['start']:6.1f} {span['us']:6.1f} {span['at_copy_bw_us']:6.1f} "
                         f"{span['over_us']:6.1f}")
        lines.append(f"  {'our kernels':34} {'':>6} {ours:6.1f} {sum(s['at_copy_bw_us'] for s in spans):6.1f} "
                     f"{sum(s['over_us'] for s in spans):6.1f}   (the rest of the layer, "
                     f"{summary[-1]['end']['last'] - ours:.1f} us: attention)")
    return "\n".join(lines) + "\n"


def summarize_file(path: Path, copy_gbps: float = None) -> str:
    """The summaries of a trace file's replays; the spans table against `copy_gbps` (default: the bandwidth the
    run measured, where it did)."""
    data = np.load(path, allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    copy_gbps = copy_gbps or meta.get("copy_gbps")
    classes = gemm_classes(meta["shard"])
    texts = []
    for key in sorted(k for k in data.files if k.startswith("replay")):
        layers = layers_of(launches(data[key], classes))
        title = f"{meta['device']}, batch {meta['batch']}, {meta.get('variant', 'ours')}, {key}: {len(layers)} " \
                f"layers traced, step " \
                f"{meta['step_ms']:.3f} ms (diagnostic build, untraced replays' median)"
        summary = layer_summary(layers)
        spans = bandwidth_spans(summary, classes, copy_gbps) if copy_gbps else []
        texts.append(summary_text(summary, handoffs(layers), releases(layers), stream_ends_by_sm(layers),
                                  elementwise_packing(layers), spans, copy_gbps or 0.0, title))
    return "\n".join(texts)


# ---------------------------------------------------------------- on a GPU


def dump_function(kernel, module: str):
    """fp8dk_trace_dump_<module> of the loaded extension, or None in a build without FP8DK_DIAG_TRACE."""
    ops = kernel._ops
    ext = next(v for name, v in vars(ops).items() if name.startswith("_fp8_decode_kernels"))
    fn = getattr(ctypes.CDLL(ext.__file__), f"fp8dk_trace_dump_{module}", None)
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_uint, [ctypes.c_void_p, ctypes.c_uint]
    return fn


def read_records(dumps, discard: bool = False) -> np.ndarray:
    """Every module's records since the last read (and empties the buffers); with `discard`, what did not fit
    is no error."""
    parts = []
    for dump in dumps:
        buf = np.zeros(CAPACITY, dtype=RECORD)
        written = dump(buf.ctypes.data, CAPACITY)
        if written > CAPACITY and not discard:
            raise SystemExit(f"trace buffer overflow: {written} records, room for {CAPACITY}")
        parts.append(buf[:written])
    return np.concatenate(parts)


def run(own, rest) -> int:
    import torch

    import decode_step as ds
    from sweep import copy_bandwidth

    args = ds.parse_args(rest)
    device = ds.device_of(args)
    if device.type != "cuda":
        raise SystemExit("decode_trace.py runs on a GPU")
    setup = ds.make_setup(args, ds.Dist(), device)
    dumps = [fn for fn in (dump_function(setup.kernel, m) for m in MODULES) if fn is not None]
    if not dumps:
        raise SystemExit("not a diagnostic build: NVCC_APPEND_FLAGS=-DFP8DK_DIAG_TRACE python tools/build.py")
    out = args.out or Path("benchmarks/results") / "decode-trace"
    out.mkdir(parents=True, exist_ok=True)
    ops = ds.path_ops(setup, args)["ours"]
    scopes_of = {"": {}, **{f"-{label}": scopes for label, scopes in own.variants.items()}}
    # suffix -> (the model, its GEMM classes' launches tuned; the variables every launch is captured under)
    models = {suffix: (ds.build_model(setup.kernel.convert, setup.layers, setup.final_norm, setup.shard, setup.scales,
                                      ops, None, setup.dtype, args.kv_len,
                                      {g: with_tuning(ops.gemm, env, setup.kernel)
                                       for g, env in scopes.items() if g != "all"} or None),
                       scopes.get("all", {}))
              for suffix, scopes in scopes_of.items()}
    shard = {key: getattr(setup.shard, key) for key in ("hidden", "heads", "kv_heads", "head_dim", "intermediate")}
    copy_gbps = copy_bandwidth("cuda", quick=True)["gbps"]
    for batch in args.batch:
        x = ds.batch_input(setup, setup.shard.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)
        pos = args.kv_len - 1
        states = ds.ProcessState(setup, batch, args.kv_len, device)
        for suffix, (model, step_env) in models.items():
            with setup.kernel.tuning_overrides(step_env):  # the plans are made at capture
                graph = ds.capture_graph(lambda: model(x, caches, pos))
            samples, probe, _ = ds.replay_ms_in_state(graph, own.timed, states, "fast")
            replays = {}
            for i in range(own.traced):
                read_records(dumps, discard=True)  # what ran before: the warm-up, the timed replays, the setter
                graph.replay()
                torch.cuda.synchronize()
                replays[f"replay{i}"] = read_records(dumps)
            meta = {"device": torch.cuda.get_device_name(device), "batch": batch, "shard": shard,
                    "variant": suffix[1:] or "ours", "copy_gbps": copy_gbps, "step_ms": statistics.median(samples),
                    "probe_ms": probe,
                    "slow_probe_ms": states.slow_probe_ms}
            path = out / f"trace-b{batch}{suffix}.npz"
            np.savez_compressed(path, meta=np.array(json.dumps(meta)), **replays)
            text = summarize_file(path)
            path.with_suffix(".txt").write_text(text)
            print(text, flush=True)
            del graph
    return 0


def main(argv=None) -> int:
    own, rest = parse_args(argv)
    if own.parse:
        print(summarize_file(own.parse, own.copy_gbps), end="")
        return 0
    return run(own, rest)


if __name__ == "__main__":
    sys.exit(main())
