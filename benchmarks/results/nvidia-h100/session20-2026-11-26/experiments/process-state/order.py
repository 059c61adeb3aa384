"""Session 20: does the order of the builds in one process change their step times? argv[1]: the build captured
first (ours or torch). Captures it, times it; captures the other, times it; times the first again; then one
eager step of the first and times it again. Batch 32, 405B TP8 shard."""
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

def main(first):
    second = "torch" if first == "ours" else "ours"
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    graphs = {}
    def capture(name):
        step = v[name][0]
        step()
        g = ds.capture_graph(step)
        graphs[name] = g
    def report(tag, name):
        g = graphs[name]
        ds.CudaGraphTimer.replay_ms(g, 5)
        ms = [statistics.median(ds.CudaGraphTimer.replay_ms(g, 40)) for _ in range(2)]
        print(f"{first} first | {tag:36s} {name:6s} " + " ".join(f"{m:8.3f}" for m in ms) + " ms", flush=True)
    capture(first)
    report("captured first", first)
    capture(second)
    report("captured second", second)
    report("after the second's capture", first)
    v[first][0](); torch.cuda.synchronize()
    report("after one eager step of its own", first)
    v[second][0](); torch.cuda.synchronize()
    report("after one eager step of its own", second)

main(sys.argv[1])
