"""Session 20, prepared; run in session 21 (destroy.log, on d24abb7): does destroying a CUDA graph, not an eager
launch, leave the slow state that decode_attribution.py's later rounds show (docs/experiments/README.md, item 51)?
Batch 32, 405B TP8 shard."""
import gc, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

def main():
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    def capture(name):
        step = v[name][0]
        step()
        g = ds.capture_graph(step)
        return g
    def report(tag, g):
        ds.CudaGraphTimer.replay_ms(g, 5)
        print(f"{tag:48s} {statistics.median(ds.CudaGraphTimer.replay_ms(g, 40)):8.3f} ms", flush=True)
    ours = capture("ours")
    report("ours, captured first", ours)
    other = capture("ours, no quant")
    report("ours after the no-quant graph's capture", ours)
    del other; gc.collect()
    report("ours after that graph was destroyed", ours)
    again = capture("ours")
    report("a second graph of ours, captured now", again)
    del again; gc.collect()
    peer = capture("torch")
    report("the torch build's graph", peer)
    del peer; gc.collect()
    report("ours after the torch graph was destroyed", ours)
    v["ours"][0](); torch.cuda.synchronize()
    report("ours after one eager step of ours", ours)
    fresh = capture("ours")
    report("a new graph of ours after all that", fresh)

main()
