"""Session 20: the state the torch build's graph leaves that slows ours. Per kernel class, one profiled replay of
our graph in each state; and which activity sets or clears the state."""
import statistics, sys
from collections import defaultdict
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

def main():
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    graphs = {}
    def capture(name):
        step = v[name][0]
        step()
        g = ds.capture_graph(step)
        graphs[name] = g
    def ms(name, n=40):
        g = graphs[name]
        ds.CudaGraphTimer.replay_ms(g, 5)
        return statistics.median(ds.CudaGraphTimer.replay_ms(g, n))
    def profile(name):
        g = graphs[name]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
        per = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[da.kernel_label(e.name)] += (e.time_range.end - e.time_range.start) / 3
        return per
    def report(tag):
        print(f"{tag:44s} ours {ms('ours'):8.3f} ms", flush=True)
    capture("ours")
    report("ours captured first")
    fast = profile("ours")
    capture("torch")
    report("after torch captured, not replayed")
    ms("torch")
    report("after torch replayed")
    slow = profile("ours")
    print("kernel time per step (us), fast -> slow state:")
    for k in sorted(set(fast) | set(slow), key=lambda k: -abs(slow.get(k, 0) - fast.get(k, 0)))[:12]:
        print(f"   {k:50s} {fast.get(k, 0):9.1f} {slow.get(k, 0):9.1f} {slow.get(k, 0) - fast.get(k, 0):+8.1f}")
    v["ours"][0](); torch.cuda.synchronize()
    report("after one eager step of ours")
    capture("ours, no quant")
    report("after no-quant captured, not replayed")
    ms("ours, no quant")
    report("after no-quant replayed")
    ms("torch")
    report("after torch replayed again")
    torch.cuda.empty_cache()
    report("after empty_cache")

main()
