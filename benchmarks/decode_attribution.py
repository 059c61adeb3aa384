"""Where the decode step's time goes, measured on the step as it runs: CUDA-graph replays with programmatic
dependent launch (PDL), where one kernel's head overlaps the previous one's tail. decode_step.py's breakdown
profiles eager steps without PDL, which gives each kernel its own duration but not its cost on the step.

    python tools/build.py                                          # once: the local build this script loads
    python benchmarks/decode_attribution.py                         # 405B TP8 shard, batch 1 and 32, all but env
    python benchmarks/decode_attribution.py --study swap skip --batch 32
    python benchmarks/decode_attribution.py --study env --env "128 CTAs:FP8DK_SKINNY_TMA_CTAS=128" \\
        --env "o stream-K:o:FP8DK_SKINNY_TMA_WHOLE_TILES=0" --processes timing
    python benchmarks/decode_attribution.py --device cpu --layers 1 --hidden 256 --heads 16 --kv-heads 8 \\
        --head-dim 32 --intermediate 1024 --kv-len 16 --batch 2 --replays 3 --no-compile    # CPU smoke

The options after the script's own are decode_step.py's (model, shard, layers, batch, replays, device, ...).
Studies, each variant timed in --rounds interleaved rounds next to our build ("ours") and the torch build:
  swap      our build with one GEMM class (qkv, o, gate_up, down) on torch._scaled_mm, then all four: what each
            of our GEMMs is worth in the step (with PDL edges broken where a cuBLAS kernel comes in)
  skip      our build with one op replaced by a no-op returning a preallocated tensor (timing only: the output
            is wrong): the SwiGLU, the quantization before O, both RMSNorms, all of them, attention, everything
            but the GEMMs; and both RMSNorms as a near-empty kernel of ours (what a place in the PDL chain costs),
            run on the batch's first row only, without the residual (rms_norm of x), or as the static
            quantization of x or of its first row (a norm whose row sums came ready-made); --skip NAME ...
            runs only those
  chain     the step's GEMMs alone, back to back in model order (ours with and without PDL, torch), then each
            class alone: the GEMMs' time without the other kernels
  env       our build under tuning variables (--env LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE]), set when the graph is
            captured: for every launch, or with GEMM (qkv, o, gate_up, down) for that class's GEMMs only; the
            --env options of one LABEL make one variant
  timeline  per position in a layer: mean start, duration and gap to the previous kernel end, over the layers
            of a few graph replays (torch.profiler's CUDA activity records the kernels of graph launches; a
            kernel launched with PDL starts before its predecessor ends and waits: its duration includes that);
            and per segment of a layer (each GEMM, and what runs between it and the GEMM before), what it adds
            to the step, ours against the torch build
Every graph is timed in one process state, --state (default fast; decode_step.py's STATES): the same graph's
launch gaps depend on what the process launched eagerly before it. In one process the fast setter stopped taking
hold after three model graphs (docs/experiments/README.md, items 52-54): each round's state probe is kept (a
missed setter is retried up to 3 times), a round that missed is marked, and --processes timing times every
variant's every round in a child process of its own (each loads the weights again: slower; on an H100 every
child's probe read fast at its first setter, item 55).
Written to --out (default benchmarks/results/<device>/decode-attribution/) as JSON and Markdown.
"""

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple

import torch

import decode_step as ds

GEMMS = ("qkv", "o", "gate_up", "down")
STUDIES = ("swap", "skip", "chain", "env", "timeline")
TIMELINE_REPLAYS = 3
TIMELINE_EDGE_LAYERS = 5  # left out at each end of a step: its first and last layers join other kernels


def env_variants(specs: List[str]) -> Dict[str, Dict[str, Dict[str, str]]]:
    """LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE] specs -> label -> {GEMM class, or "all" for every launch: variables};
    the specs of one label make one variant. ValueError names a malformed spec."""
    variants: Dict[str, Dict[str, Dict[str, str]]] = {}
    for spec in specs:
        label, _, settings = spec.partition(":")
        gemm, colon, rest = settings.partition(":")
        gemm, settings = (gemm, rest) if colon and gemm in GEMMS else (None, settings)
        items = [item.split("=", 1) for item in settings.split(",")]
        if not label or any(len(kv) != 2 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kv[0]) for kv in items):
            raise ValueError(f"{spec!r}: expected LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE], GEMM one of {', '.join(GEMMS)}")
        variants.setdefault(label, {}).setdefault(gemm or "all", {}).update(items)
    return variants


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--study", nargs="+", choices=STUDIES, help="default: all (env only with --env)")
    p.add_argument("--env", action="append", default=[], metavar="LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE]",
                   help="a variant of the env study (repeatable)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every variant")
    p.add_argument("--skip", nargs="+", metavar="NAME", help="the skip study's variants to run (default: all)")
    p.add_argument("--state", choices=ds.STATES, default="fast",
                   help="the process state every graph is timed in (decode_step.py, STATES)")
    p.add_argument("--processes", choices=("one", "timing"), default="one",
                   help="timing: each variant's each round timed in a child process of its own (and the timeline, "
                        "if asked for, in one more), so that no process times more than one model graph (in one "
                        "process the fast setter stopped taking hold after three: docs/experiments/README.md, "
                        "item 54)")
    p.add_argument("--only", metavar="VARIANT", help=argparse.SUPPRESS)  # a --processes timing child's variant
    own, rest = p.parse_known_args(argv)
    if own.help:
        p.print_help()
        print("\ndecode_step.py's options:\n")
        ds.parse_args(["--help"])
    if "--batch" not in rest:
        rest += ["--batch", "1", "32"]
    step_args = ds.parse_args(rest)
    try:
        own.env_variants = env_variants(own.env)
    except ValueError as e:
        p.error(f"--env {e}")
    if own.study is None:
        own.study = [study for study in STUDIES if study != "env" or own.env_variants]
    elif "env" in own.study and not own.env_variants:
        p.error("--study env needs at least one --env")
    if own.skip and "skip" not in own.study:
        p.error("--skip needs the skip study")
    return own, step_args


def build(setup: ds.Setup, args, gemm_of: Dict[str, Callable], elementwise, attention=None):
    """decode_step.py's model over the shared weights, with the GEMM of each class from `gemm_of`, the other ops
    from `elementwise` (a DecodeOps) and `attention` (default SDPA)."""
    return ds.build_model(setup.kernel.convert, setup.layers, setup.final_norm, setup.shard, setup.scales,
                          elementwise, None, setup.dtype, args.kv_len, gemm_of, attention)


def step_variants(setup, args, own, batch: int) -> Dict[str, tuple]:
    """name -> (step function, tuning environment) of the requested studies at one batch size."""
    paths = ds.path_ops(setup, args)
    x = ds.batch_input(setup, setup.shard.hidden, batch, args.seed, setup.final_norm.device)
    caches = ds.caches_for(setup.layers, batch)
    pos = args.kv_len - 1

    def step_of(model):
        return (lambda: model(x, caches, pos)), {}

    def model(gemm_of=None, elementwise=None, attention=None):
        """Our build, with the given GEMMs (class -> function), elementwise ops and attention instead of ours."""
        gemms = {g: paths["ours"].gemm for g in GEMMS} | (gemm_of or {})
        return build(setup, args, gemms, elementwise or paths["ours"], attention)

    variants = {"ours": step_of(model()),
                "torch": step_of(model({g: paths["torch"].gemm for g in GEMMS}, paths["torch"]))}
    if "swap" in own.study:
        for g in GEMMS:
            variants[f"ours, {g} on torch"] = step_of(model({g: paths["torch"].gemm}))
        variants["ours, all GEMMs on torch"] = step_of(model({g: paths["torch"].gemm for g in GEMMS}))
    if "skip" in own.study:
        skipped = skipped_ops(setup, paths["ours"], batch)
        unknown = sorted(set(own.skip or ()) - set(skipped))
        if unknown:
            raise SystemExit(f"--skip: no variant {unknown}; the skip study's variants: {sorted(skipped)}")
        for name, (elementwise, attention) in skipped.items():
            if own.skip and name not in own.skip:
                continue
            variants[f"ours, {name}"] = step_of(model(elementwise=elementwise, attention=attention))
    if "chain" in own.study:
        variants |= gemm_chains(setup, paths, batch)
    if "env" in own.study:
        for label, scopes in own.env_variants.items():
            tuned = {g: with_tuning(paths["ours"].gemm, env, setup.kernel) for g, env in scopes.items() if g != "all"}
            step = variants["ours"][0] if not tuned else step_of(model(tuned))[0]
            variants[f"ours, {label}"] = (step, scopes.get("all", {}))
    return variants


def skipped_ops(setup, ours, batch: int) -> Dict[str, tuple]:
    """name -> (elementwise DecodeOps, attention or None) of the skip study: ops replaced by no-ops that return a
    preallocated tensor of the right shape (timing only: the step's output is wrong)."""
    sh, device, fp8 = setup.shard, setup.final_norm.device, setup.fp8_dtype
    swiglu_out = torch.zeros(batch, sh.intermediate, device=device).to(fp8)
    quant_out = torch.zeros(batch, sh.heads * sh.head_dim, device=device).to(fp8)
    norm_out = torch.zeros(batch, sh.hidden, device=device).to(fp8)
    attention_out = torch.zeros(batch, sh.heads * sh.head_dim, device=device, dtype=setup.dtype)

    def norm_replaced_by(launch):
        """An RMSNorm that runs `launch(x, residual, weight, eps, scale, out_dtype)` in its place and returns the
        preallocated output; the final norm (16-bit out) passes x through."""
        def norm(x, residual, weight, eps, scale, out_dtype):
            if out_dtype is None:
                return x
            launch(x, residual, weight, eps, scale, out_dtype)
            return norm_out
        return norm

    def no_attention(*args):
        return attention_out

    tiny = torch.zeros(1, 16, device=device, dtype=setup.dtype)
    no_norm = norm_replaced_by(lambda *args: None)
    # One CTA of ours quantizing 16 values: what a kernel's place in the PDL chain costs, apart from its work.
    norm_as_handoff = norm_replaced_by(lambda x, residual, weight, eps, scale, out_dtype:
                                       ours.quantize(tiny, scale, out_dtype))
    # The RMSNorm of the batch's first row only: its kernel and split for one row (the batch-1 launch).
    norm_of_one_row = norm_replaced_by(lambda x, residual, weight, eps, scale, out_dtype:
                                       ours.add_rms_norm(x[:1], residual[:1], weight, eps, scale, out_dtype))
    # rms_norm of x alone: the RMSNorm without the residual's read and write.
    norm_without_residual = norm_replaced_by(lambda x, residual, weight, eps, scale, out_dtype:
                                             setup.kernel.rms_norm(x, weight, eps, scale, out_dtype))
    # The static quantization of x: an RMSNorm whose row sums came ready-made (no reduction, no residual), i.e.
    # the elementwise rest of a norm whose sums the GEMM before it computed.
    norm_as_quantization = norm_replaced_by(lambda x, residual, weight, eps, scale, out_dtype:
                                            ours.quantize(x, scale, out_dtype))
    norm_as_quantization_of_one_row = norm_replaced_by(lambda x, residual, weight, eps, scale, out_dtype:
                                                       ours.quantize(x[:1], scale, out_dtype))

    none = ours._replace(silu_and_mul=lambda *a: swiglu_out, quantize=lambda *a: quant_out, add_rms_norm=no_norm)
    return {"no swiglu": (ours._replace(silu_and_mul=none.silu_and_mul), None),
            "no quant": (ours._replace(quantize=none.quantize), None),
            "no rmsnorm": (ours._replace(add_rms_norm=no_norm), None),
            "rmsnorm as a near-empty kernel": (ours._replace(add_rms_norm=norm_as_handoff), None),
            "rmsnorm of one row": (ours._replace(add_rms_norm=norm_of_one_row), None),
            "rmsnorm without the residual": (ours._replace(add_rms_norm=norm_without_residual), None),
            "rmsnorm as a quantization of x": (ours._replace(add_rms_norm=norm_as_quantization), None),
            "rmsnorm as a quantization of one row": (ours._replace(add_rms_norm=norm_as_quantization_of_one_row),
                                                     None),
            "no elementwise": (none, None),
            "no attention": (ours, no_attention),
            "GEMMs only": (none, no_attention)}


def gemm_chains(setup, paths, batch: int) -> Dict[str, tuple]:
    """The chain study: the step's GEMMs alone on fixed FP8 inputs, all four classes in model order (ours with
    and without PDL, torch's), then each class alone."""
    sh, device, fp8 = setup.shard, setup.final_norm.device, setup.fp8_dtype
    in_features = {"qkv": sh.hidden, "o": sh.heads * sh.head_dim, "gate_up": sh.hidden, "down": sh.intermediate}
    a = {g: (4 * torch.randn(batch, k, device=device)).to(fp8) for g, k in in_features.items()}
    one = torch.ones((), device=device)

    def chain(gemm, classes):
        def run():
            for w in setup.layers:
                for g in classes:
                    gemm(a[g], getattr(w, g), one, one, None, setup.dtype)
        return run

    ours, peer = paths["ours"].gemm, paths["torch"].gemm
    chains = {"GEMM chain, ours": (chain(ours, GEMMS), {}),
              "GEMM chain, ours, no PDL": (chain(ours, GEMMS), {"FP8DK_PDL": "0"}),
              "GEMM chain, torch": (chain(peer, GEMMS), {})}
    for g in GEMMS:
        chains[f"{g} chain, ours"] = (chain(ours, (g,)), {})
        chains[f"{g} chain, torch"] = (chain(peer, (g,)), {})
    return chains


def with_tuning(gemm: Callable, env: dict, kernel) -> Callable:
    """gemm launched under the tuning variables `env` (the plan is made at launch, so a graph captured with it
    keeps that plan)."""
    def tuned(*args):
        with kernel.tuning_overrides(env):
            return gemm(*args)
    return tuned


def time_ms(step: Callable, env: dict, kernel, args, device, states: Optional[ds.ProcessState],
            state: str) -> dict:
    """Median step time ("ms"): decode_step.py's CUDA-graph replays on a GPU (the graph captured under `env`, its
    replays timed in process state `state`, entered outside `env`: a PDL launch must stay one), eager steps on
    CPU. On a GPU also the state probe's milliseconds, the setters run and whether the probe showed the state
    (decode_step.enter_with_probe); None on CPU."""
    with kernel.tuning_overrides(env):
        step()  # the torch build compiles its functions at the first call
        if device.type != "cuda":
            ms = statistics.median(ds.synced_ms(step, args.replays, device, ds.WARMUP_STEPS))
            return {"ms": ms, "probe_ms": None, "setter_tries": None, "state_reached": None}
        graph = ds.capture_graph(step)
    samples, probe, tries = ds.replay_ms_in_state(graph, args.replays, states, state)
    return {"ms": statistics.median(samples), "probe_ms": probe, "setter_tries": tries,
            "state_reached": ds.probe_shows(state, probe, states.slow_probe_ms)}


def kernel_label(name: str) -> str:
    for key, label in (("rms_norm", "rmsnorm"), ("skinny_gemm", "gemm"), ("silu", "swiglu"), ("quantize", "quant"),
                       ("nvjet", "cuBLAS"), ("sdpa", "sdpa"), ("flash", "sdpa"), ("triton", "triton")):
        if key in name:
            return label if label != "triton" else name[:48]
    return name.split("<")[0].split("(")[0][-48:]


def timeline(step: Callable, layers: int, states: ds.ProcessState, state: str) -> dict:
    """layer_timeline ("positions") and layer_segments ("segments") of TIMELINE_REPLAYS graph replays of `step`,
    in `state`."""
    graph = ds.capture_graph(step)
    states.enter_checked(state)
    ds.CudaGraphTimer.replay_ms(graph, ds.WARMUP_STEPS)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(TIMELINE_REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"positions": layer_timeline(kernels, TIMELINE_REPLAYS, layers),
            "segments": layer_segments(kernels, TIMELINE_REPLAYS, layers)}


def layer_timeline(kernels: List[tuple], replays: int, layers: int) -> List[dict]:
    """Per position in a layer: mean start (from the layer's first kernel), duration and gap to the previous
    kernel's end, in microseconds, over the middle layers of `replays` steps, from (start, end, name) of every
    kernel. A step: the residual's zeros, `layers` runs of one layer's kernels, the final norm (one kernel of
    ours, two of the torch build's). Kernels that start together may swap places from layer to layer (PDL), so a
    position's kernel is the one most often found there."""
    kernels = sorted(kernels)
    per_step = len(kernels) // replays
    per_layer = (per_step - 2) // layers
    edge = min(TIMELINE_EDGE_LAYERS, layers // 4)
    rows = defaultdict(lambda: defaultdict(list))
    for r in range(replays):
        for layer in range(edge, layers - edge):
            first = r * per_step + 1 + layer * per_layer
            ks = kernels[first:first + per_layer]
            for i, (s, e, name) in enumerate(ks):
                rows[i]["start"].append(s - ks[0][0])
                rows[i]["duration"].append(e - s)
                rows[i]["gap"].append(s - kernels[first + i - 1][1])
                rows[i]["names"].append(kernel_label(name))
    return [{"position": i, "kernel": statistics.mode(v["names"]),
             **{k: statistics.mean(v[k]) for k in ("start", "duration", "gap")}} for i, v in sorted(rows.items())]


# A layer's segments, each from the end of the one before to the end of its last kernel: a GEMM (with cuBLASLt's
# split-K reduce, where it runs one), and what runs between it and the GEMM before (the kernel that writes the
# GEMM's activations last).
LAYER_SEGMENTS = ("input RMSNorm", "qkv", "attention", "o", "post-attention RMSNorm", "gate_up", "SwiGLU", "down")


def layer_segments(kernels: List[tuple], replays: int, layers: int) -> List[dict]:
    """Per segment of a layer (LAYER_SEGMENTS): the mean time in microseconds from the previous segment's end to
    this one's, over the middle layers of `replays` steps, from (start, end, name) of every kernel. Kernels are
    taken in the order of their ends: with PDL a kernel starts before the one it waits for ends, never ends before
    it. A step's GEMMs (our kernel or cuBLASLt's, with its split-K reduce) come four a layer, qkv, o, gate_up and
    down; the input RMSNorm's segment starts at the end of the layer before. So a segment's time is what it adds to
    the step, whatever of it overlapped the segment before. A step whose GEMMs are not four a layer (a GEMM under
    another library's name) is left out."""
    kernels = sorted(kernels, key=lambda k: k[1])
    per_step = len(kernels) // replays
    edge = max(1, min(TIMELINE_EDGE_LAYERS, layers // 4))
    times = defaultdict(list)
    for r in range(replays):
        step = kernels[r * per_step:(r + 1) * per_step]
        labels = [kernel_label(name) for _, _, name in step]
        gemms = []  # per GEMM: (the kernel before it, its last kernel), indices into step
        i = 0
        while i < len(step):
            if labels[i] in ("gemm", "cuBLAS"):
                before = i - 1
                while i + 1 < len(step) and "splitKreduce" in labels[i + 1]:
                    i += 1
                gemms.append((before, i))
            i += 1
        if len(gemms) != 4 * layers:
            continue
        for layer in range(edge, layers - edge):
            ends = [index for gemm in gemms[4 * layer:4 * layer + 4] for index in gemm]
            origins = [gemms[4 * layer - 1][1]] + ends[:-1]  # the layer before's down, then each end in turn
            for name, a, b in zip(LAYER_SEGMENTS, origins, ends):
                times[name].append(step[b][1] - step[a][1])
    return [{"segment": name, "us": statistics.mean(times[name])} for name in LAYER_SEGMENTS if times[name]]


def markdown(results: List[dict], timelines: Dict[str, dict], env: dict, batches, timing: str) -> str:
    lines = [f"# Decode step attribution, {env['device']['name']}", "",
             f"torch {env['torch']}, git {env['git_revision']}, {env['date']}. Time of a step (or of a GEMM chain): "
             f"the median over the rounds of each round's median of {timing}. vs ours: the variant's step less our "
             "build's; torch / variant: the torch build's step over the variant's. In brackets, where taken: the "
             "state probe before each round's replays (decode_step.py: a graph of 1000 one-element adds, about "
             "1.0 ms fast and 1.19 ms slow on an H100). A probe marked * did not show the state after "
             f"{ds.SETTER_TRIES} setters (docs/experiments/README.md, items 52-54); such rounds are left out of a "
             "variant's median where it has a round that did, and a variant with none says so.", ""]
    for batch in batches:
        rows = [r for r in results if r["batch"] == batch]

        def rounds_of(variant):
            rounds = [r for r in rows if r["variant"] == variant]
            return [r for r in rounds if r.get("state_reached") is not False] or rounds

        def median_of(variant):
            return statistics.median(r["ms"] for r in rounds_of(variant))

        def sample(r):
            if r.get("probe_ms") is None:
                return f"{r['ms']:.3f}"
            return f"{r['ms']:.3f} [{r['probe_ms']:.3f}{'*' if r.get('state_reached') is False else ''}]"

        # A child process of --processes timing times one variant, the timeline's child none.
        timed = list(dict.fromkeys(r["variant"] for r in rows))
        ours, peer = (median_of(path) if path in timed else None for path in ("ours", "torch"))
        lines += [f"## batch {batch}", ""]
        if timed:
            lines += ["| variant | ms | vs ours (ms) | torch / variant | rounds (ms) |", "|---|---:|---:|---:|---|"]
        for variant in timed:
            ms = median_of(variant)
            chain = " chain, " in variant
            delta = "" if chain or ours is None else f"{ms - ours:+.3f}"
            speedup = "" if chain or peer is None else f"{peer / ms:.3f}x"
            samples = ", ".join(sample(r) for r in rows if r["variant"] == variant)
            missed = all(r.get("state_reached") is False for r in rounds_of(variant))
            label = f"{variant} (state not reached)" if missed else variant
            lines.append(f"| {label} | {ms:.3f} | {delta} | {speedup} | {samples} |")
        lines.append("")
        segments = {path: {row["segment"]: row["us"] for row in timelines[f"{path}, batch {batch}"]["segments"]}
                    for path in ("ours", "torch") if f"{path}, batch {batch}" in timelines}
        if len(segments) == 2 and segments["ours"] and segments["torch"]:
            lines += [f"### a layer's segments, batch {batch}", "",
                      "From the end of the segment before to the end of its last kernel, kernels in the order of "
                      "their ends, in the profiled replays (which run a few percent slower than timed ones, more so "
                      "for the build with more kernels).", "",
                      "| segment | ours (us) | torch (us) | ours less torch (us) |", "|---|---:|---:|---:|"]
            for name in LAYER_SEGMENTS:
                if name in segments["ours"] and name in segments["torch"]:
                    ours_us, torch_us = segments["ours"][name], segments["torch"][name]
                    lines.append(f"| {name} | {ours_us:.2f} | {torch_us:.2f} | {ours_us - torch_us:+.2f} |")
            totals = [sum(segments[path].values()) for path in ("ours", "torch")]
            lines += [f"| layer | {totals[0]:.2f} | {totals[1]:.2f} | {totals[0] - totals[1]:+.2f} |", ""]
        for key, table in timelines.items():
            if key.endswith(f"batch {batch}"):
                lines += [f"### timeline, {key}", "", "| position | kernel | start (us) | duration (us) | gap (us) |",
                          "|---:|---|---:|---:|---:|"]
                lines += [f"| {t['position']} | {t['kernel']} | {t['start']:.2f} | {t['duration']:.2f} | "
                          f"{t['gap']:.2f} |" for t in table["positions"]]
                lines.append("")
    return "\n".join(lines) + "\n"


def timing_line(result: dict, state: str) -> str:
    probe = "" if result["probe_ms"] is None else (
        f" (probe {result['probe_ms']:.3f} ms, {result['setter_tries']} setters"
        + ("" if result["state_reached"] else f", {state} state not reached") + ")")
    return f"batch {result['batch']:3d} round {result['round']} {result['variant']:32s} {result['ms']:9.3f} ms{probe}"


def variant_names(own, args, device: torch.device, batch: int) -> List[str]:
    """The requested studies' variants at one batch size, named from a model of one layer (the names do not depend
    on the depth), so that a parent of child processes does not hold the weights its children load."""
    one_layer = argparse.Namespace(**{**vars(args), "layers": 1, "quick": False})
    names = list(step_variants(ds.make_setup(one_layer, ds.Dist(), device), one_layer, own, batch))
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the one layer's weights, back to the device for the children
    return names


def run_in_children(own, args, argv: List[str], device: torch.device) -> Tuple[List[dict], Dict[str, dict]]:
    """--processes timing: every variant's every round timed by a child process of its own, and the timeline
    study (if asked for) by one more child per batch size."""
    def in_child(batch: int, *extra: str) -> dict:
        return ds.child_report(__file__, argv, "--batch", str(batch), *extra, "--processes", "one", quiet=True)

    results, timelines = [], {}
    for batch in args.batch:
        names = variant_names(own, args, device, batch)
        for round_ in range(own.rounds):
            for name in names:
                (result,) = in_child(batch, "--rounds", "1", "--only", name)["results"]
                results.append({**result, "round": round_})
                print(timing_line(results[-1], own.state), flush=True)
        if "timeline" in own.study and device.type == "cuda":
            timelines |= in_child(batch, "--rounds", "0")["timelines"]  # no timing, then the timeline
    return results, timelines


def run_here(own, args, setup, device: torch.device) -> Tuple[List[dict], Dict[str, dict]]:
    """Every variant's rounds, interleaved, and the timeline study, in this process."""
    results, timelines = [], {}
    for batch in args.batch:
        ds.fresh_compile_cache()
        variants = step_variants(setup, args, own, batch)
        if own.only is not None:
            if own.only not in variants:
                raise SystemExit(f"decode_attribution.py: --only {own.only!r}: not a variant of these studies "
                                 f"({', '.join(variants)})")
            variants = {own.only: variants[own.only]}
        states = ds.ProcessState(setup, batch, args.kv_len, device) if device.type == "cuda" else None
        for round_ in range(own.rounds):
            for name, (step, env) in variants.items():
                results.append({"batch": batch, "variant": name, "round": round_,
                                **time_ms(step, env, setup.kernel, args, device, states, own.state)})
                print(timing_line(results[-1], own.state), flush=True)
        if "timeline" in own.study and device.type == "cuda" and own.only is None:
            for path in ("ours", "torch"):
                timelines[f"{path}, batch {batch}"] = timeline(variants[path][0], setup.shard.layers, states,
                                                               own.state)
    return results, timelines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    own, args = parse_args(argv)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    device = ds.device_of(args)
    if own.processes == "timing":
        results, timelines = run_in_children(own, args, argv, device)
        layers = ds.full_shape(args).layers
    else:
        setup = ds.make_setup(args, ds.Dist(), device)
        results, timelines = run_here(own, args, setup, device)
        layers = setup.shard.layers
    env = ds.run_environment(args.device)
    out = ds.report_dir(args, env, "decode-attribution")
    name = f"{args.model}_shard{args.shard_of}_l{layers}"
    record = {"environment": env, "studies": own.study, "state": own.state if device.type == "cuda" else "eager",
              "processes": own.processes, "env_variants": own.env_variants,
              "args": ds.args_record(args), "results": results, "timelines": timelines}
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    timing = f"CUDA-graph replays in the {own.state} state" if device.type == "cuda" else "eager steps"
    text = markdown(results, timelines, env, args.batch, timing)
    (out / f"{name}.md").write_text(text)
    print(text)
    print(f"wrote {out / name}.{{md,json}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
