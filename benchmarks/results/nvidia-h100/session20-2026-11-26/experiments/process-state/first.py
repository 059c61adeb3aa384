"""Why the first graph a process times runs faster: ours, ours, ours, torch, ours (same graphs replayed), with
SM clocks read between. Diagnostic for session 20."""
import statistics, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

def clocks():
    q = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip()

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
    def timed(tag, name):
        g = graphs[name]
        ds.CudaGraphTimer.replay_ms(g, ds.WARMUP_STEPS)
        ms = statistics.median(ds.CudaGraphTimer.replay_ms(g, 50))
        print(f"{tag:28s} {name:10s} {ms:8.3f} ms | {clocks()}", flush=True)
    capture("ours")
    for i in range(3):
        timed(f"ours before torch #{i}", "ours")
    print("idle 5 s"); time.sleep(5)
    timed("ours after 5 s idle", "ours")
    capture("torch")
    for i in range(2):
        timed(f"torch #{i}", "torch")
    for i in range(3):
        timed(f"ours after torch #{i}", "ours")
    print("idle 5 s"); time.sleep(5)
    timed("ours after torch, 5 s idle", "ours")
    capture("ours, no quant")
    timed("ours (no quant) new graph", "ours, no quant")
    timed("ours again", "ours")

main()
