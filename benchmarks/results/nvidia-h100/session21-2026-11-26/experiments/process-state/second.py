"""Session 21: what in a process's first batch size stops the fast state taking hold later (item 52)? argv[1], done
before batch 32's graphs are captured: "none"; "profile" (one profiled eager step of ours, PDL off, as
decode_step.py's breakdown); "batch1-eager" (one eager step of each build at batch 1, the torch build compiling);
"batch1-graphs" (the same, then both builds' batch-1 graphs captured, replayed and destroyed, as decode_step.py's
first batch). Then, at batch 32, both graphs timed after each setter, twice: the torch build's eager step (slow)
and ours (fast). 405B TP8 shard."""
import gc, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds


def main(pre):
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "1", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    if pre == "profile":
        v = da.step_variants(setup, args, own, 32)
        ds.profile_breakdown(v["ours"][0], 1, torch.device("cuda"), setup.kernel)
    elif pre in ("batch1-eager", "batch1-graphs"):
        v1 = da.step_variants(setup, args, own, 1)
        graphs = []
        for name in ("torch", "ours"):
            v1[name][0]()
            if pre == "batch1-graphs":
                g = ds.capture_graph(v1[name][0])
                ds.CudaGraphTimer.replay_ms(g, 20)
                graphs.append(g)
        del graphs
        gc.collect()
        ds.fresh_compile_cache()
    elif pre != "none":
        raise SystemExit(f"unknown {pre!r}")
    v = da.step_variants(setup, args, own, 32)
    steps = {"ours": v["ours"][0], "torch": v["torch"][0]}
    graphs = {}
    for name, step in steps.items():
        step()
        graphs[name] = ds.capture_graph(step)
    for round_ in range(2):
        for state, setter in (("slow", steps["torch"]), ("fast", steps["ours"])):
            setter(); torch.cuda.synchronize()
            ms = {}
            for name, g in graphs.items():
                ds.CudaGraphTimer.replay_ms(g, 5)
                ms[name] = statistics.median(ds.CudaGraphTimer.replay_ms(g, 30))
            print(f"{pre:14s} round {round_} after the {state} setter: ours {ms['ours']:8.3f} torch {ms['torch']:8.3f} ms",
                  flush=True)

main(sys.argv[1])
