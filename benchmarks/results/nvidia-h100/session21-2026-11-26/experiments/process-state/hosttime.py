"""Session 21: in which state does the host wait? For both decode graphs (batch 32, 405B TP8 shard) in the fast
state (after an eager step of ours) and the slow one (after one of the torch build), the host time of each
graph.replay() call (perf_counter around the call, no synchronization), next to the GPU time of the replay
(CUDA events). If a replay's host call takes as long as the GPU work, the host submits the graph in pieces and
the GPU waits for it."""
import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

REPLAYS = 20


def main():
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    steps = {"ours": v["ours"][0], "torch": v["torch"][0]}
    graphs = {}
    for name, step in steps.items():
        step()
        graphs[name] = ds.capture_graph(step)
    setters = {"fast": steps["ours"], "slow": steps["torch"]}
    for round_ in range(2):
        for state, setter in setters.items():
            for name, g in graphs.items():
                setter(); torch.cuda.synchronize()
                ds.CudaGraphTimer.replay_ms(g, 3)
                events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                          for _ in range(REPLAYS)]
                host = []
                for start, end in events:
                    start.record()
                    t0 = time.perf_counter()
                    g.replay()
                    host.append((time.perf_counter() - t0) * 1e3)
                    end.record()
                torch.cuda.synchronize()
                gpu = [s.elapsed_time(e) for s, e in events]
                # One replay launched alone on an idle GPU: host call time vs GPU time.
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                g.replay()
                alone = (time.perf_counter() - t0) * 1e3
                torch.cuda.synchronize()
                print(f"round {round_} {state} {name:5s} gpu {statistics.median(gpu):8.3f} ms | host per replay call: "
                      f"median {statistics.median(host):7.3f} max {max(host):7.3f} first {host[0]:7.3f} | "
                      f"alone {alone:7.3f} ms", flush=True)

main()
