"""The decode step with each build timed in a process of its own, as a server runs one build.

    python tools/build.py                                       # once: the local build this script loads
    python benchmarks/decode_isolated.py                        # 405B TP8 shard, batch 1 8 32, two rounds
    python benchmarks/decode_isolated.py --rounds 3 --batch 32
    python benchmarks/decode_isolated.py --device cpu --layers 1 --hidden 256 --heads 16 --kv-heads 8 \\
        --head-dim 32 --intermediate 1024 --kv-len 16 --batch 2 --replays 3 --no-compile --rounds 1   # CPU smoke

decode_step.py times both builds in one process. There, a CUDA graph's replay time depends on what the process
ran eagerly before it: on an H100 at batch 32 our graph took 25.5 ms after an eager step of ours and 26.1-26.3 ms
after one of the torch build's, and the torch build's 26.9 and 28.1 ms the same way round
(docs/experiments/README.md, item 51). Here every round starts one child process per build (the order alternates
between rounds); a child sets up the model (the same seeded weights as decode_step.py), then for each batch size
runs an eager step, captures the step as decode_step.py does and times its replays, so every build is timed in
the state its own warm-up leaves and nothing of the other build's. Timing only: decode_step.py reports the
agreement between the builds and the breakdown. The options after the script's own are decode_step.py's.
Written to --out (default benchmarks/results/<device>/decode-isolated/) as JSON and Markdown.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_step as ds  # noqa: E402
import torch  # noqa: E402

CHILD_TAG = "decode_isolated:"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--rounds", type=int, default=2, help="child processes per build (the order alternates)")
    p.add_argument("--child", choices=ds.PATHS, help=argparse.SUPPRESS)
    own, rest = p.parse_known_args(argv)
    if own.help:
        p.print_help()
        print("\ndecode_step.py's options:\n")
        ds.parse_args(["--help"])
    if own.rounds < 1:
        p.error("--rounds must be at least 1")
    args = ds.parse_args(rest)
    if args.tp != 1 or args.check:
        p.error("one process per build on one device: no --tp or --check (decode_step.py has them)")
    return own, rest, args


def child(path: str, args) -> int:
    """One build at every batch size: medians of the step time, one line per batch for the parent."""
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    device = ds.device_of(args)
    setup = ds.make_setup(args, ds.Dist(), device)
    model = ds.build_model(setup.kernel.convert, setup.layers, setup.final_norm, setup.shard, setup.scales,
                           ds.path_ops(setup, args)[path], None, setup.dtype, args.kv_len)
    pos = args.kv_len - 1
    for batch in args.batch:
        ds.fresh_compile_cache()
        x = ds.batch_input(setup, setup.shard.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)

        def step():
            return model(x, caches, pos)

        step()  # the first call compiles the torch build's functions
        if device.type == "cuda" and not args.no_graph:
            samples = ds.graph_step_ms(step, args.replays)
        else:
            samples = ds.synced_ms(step, args.replays, device, ds.WARMUP_STEPS)
        print(CHILD_TAG + json.dumps({"path": path, "batch": batch, "ms": statistics.median(samples)}), flush=True)
    return 0


def run_children(own, rest: List[str]) -> List[dict]:
    results = []
    for round_ in range(own.rounds):
        order = ds.PATHS if round_ % 2 == 0 else tuple(reversed(ds.PATHS))
        for path in order:
            run = subprocess.run([sys.executable, __file__, "--child", path, *rest], capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"the {path} child failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
            for line in run.stdout.splitlines():
                if line.startswith(CHILD_TAG):
                    record = {**json.loads(line[len(CHILD_TAG):]), "round": round_}
                    results.append(record)
                    print(f"round {round_} {record['path']:5s} batch {record['batch']:3d} {record['ms']:9.3f} ms",
                          flush=True)
    return results


def markdown(args, results: List[dict], env: dict, rounds: int) -> str:
    timing = "CUDA-graph replays" if args.device == "cuda" and not args.no_graph else "eager steps"
    lines = [f"# Decode step, each build in its own process: {args.model} shard of TP{args.shard_of}, "
             f"{env['device']['name']}", "",
             f"torch {env['torch']}, git {env['git_revision']}, {env['date']}. Per build and batch: the median over "
             f"{rounds} child processes of each one's median of {args.replays} {timing}.", "",
             "| batch | ours (ms) | torch (ms) | speedup | ours, per process (ms) | torch, per process (ms) |",
             "|---:|---:|---:|---:|---|---|"]
    for batch in args.batch:
        per = {path: [r["ms"] for r in results if r["path"] == path and r["batch"] == batch] for path in ds.PATHS}
        ours, peer = statistics.median(per["ours"]), statistics.median(per["torch"])
        lines.append(f"| {batch} | {ours:.3f} | {peer:.3f} | {peer / ours:.3f}x | "
                     + " | ".join(", ".join(f"{ms:.3f}" for ms in per[path]) for path in ds.PATHS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    own, rest, args = parse_args(argv)
    if own.child:
        return child(own.child, args)
    results = run_children(own, rest)
    env = ds.run_environment(args.device)
    out = ds.report_dir(args, env, "decode-isolated")
    name = f"{args.model}_shard{args.shard_of}"
    text = markdown(args, results, env, own.rounds)
    record = {"environment": env, "rounds": own.rounds, "results": results, "args": ds.args_record(args)}
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / f"{name}.md").write_text(text)
    print(text)
    print(f"wrote {out / name}.{{md,json}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
