"""Session 20, prepared; run in session 21 (pdlstate.log, on d24abb7): is the state that speeds up both graphs
the last eager launch being a PDL launch? Batch 32."""
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

def main():
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    k = setup.kernel
    graphs = {}
    for name in ("ours", "torch"):
        step = v[name][0]
        step()
        g = ds.capture_graph(step)
        graphs[name] = g
    tiny = torch.ones(1, 16, device="cuda", dtype=torch.bfloat16)
    scale = torch.ones((), device="cuda")
    def ours_pdl():
        k.quantize_fp8(tiny, scale)
    def ours_no_pdl():
        with k.tuning_overrides({"FP8DK_PDL": "0"}):
            ours_pdl()
    def torch_op():
        tiny.add_(0)
    for tag, fn in (("tiny op of ours, PDL", ours_pdl), ("tiny torch op", torch_op), ("tiny op of ours, PDL", ours_pdl),
                    ("tiny op of ours, no PDL", ours_no_pdl), ("tiny op of ours, PDL", ours_pdl)):
        fn(); torch.cuda.synchronize()
        ms = {}
        for name in ("ours", "torch"):
            ds.CudaGraphTimer.replay_ms(graphs[name], 5)
            ms[name] = statistics.median(ds.CudaGraphTimer.replay_ms(graphs[name], 30))
        print(f"after {tag:26s} ours {ms['ours']:8.3f} torch {ms['torch']:8.3f} ms", flush=True)

main()
