"""Session 21: what kind of eager launch sets the state (docs/experiments/README.md, item 52)? Besides both decode
graphs (batch 32, 405B TP8 shard) it times two small graphs: 1000 torch add_ launches, and 1000 of our quantize
launches with PDL edges. Each single eager op X runs after putting the process in the other state (an eager step of
ours for the fast state, one of the torch build for the slow one); then all four graphs are timed. Run it with and
without CUDA_DEVICE_MAX_CONNECTIONS=1 (argv[1] is only the label printed)."""
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds

MICRO_LAUNCHES = 1000


def main(label):
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    v = da.step_variants(setup, args, own, 32)
    k = setup.kernel
    steps = {"ours": v["ours"][0], "torch": v["torch"][0]}
    graphs = {}
    for name, step in steps.items():
        step()
        graphs[name] = ds.capture_graph(step)
    counter = torch.zeros(4096, device="cuda")
    tiny = torch.ones(1, 16, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")

    def micro_torch():
        for _ in range(MICRO_LAUNCHES):
            counter.add_(1)

    def micro_ours():
        for _ in range(MICRO_LAUNCHES):
            k.quantize_fp8(tiny, one)

    graphs["1000 add_"] = ds.capture_graph(micro_torch)
    graphs["1000 ours PDL"] = ds.capture_graph(micro_ours)

    def probe(tag):
        torch.cuda.synchronize()
        ms = {}
        for name, g in graphs.items():
            ds.CudaGraphTimer.replay_ms(g, 5)
            ms[name] = statistics.median(ds.CudaGraphTimer.replay_ms(g, 30))
        print(f"{label} | {tag:44s} " + " ".join(f"{name} {m:7.3f}" for name, m in ms.items()) + " ms", flush=True)

    x = torch.randn(32, 8, 128, device="cuda", dtype=torch.bfloat16)
    key = torch.zeros(32, 1, 1024, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2304, 16384, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(32, 16384, device="cuda", dtype=torch.bfloat16)
    many = [torch.randn(8, device="cuda") for _ in range(64)]
    small_w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)

    def cache_write():
        key[:, :, 1000] = x[:, :1]

    def big_alloc():
        t = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        del t
        torch.cuda.empty_cache()

    candidates = {
        "fast": {  # run from the fast state: does it set the slow one?
            "nothing": lambda: None,
            "add_ (vectorized)": lambda: counter.add_(1),
            "neg": lambda: -x,
            "cat of two": lambda: torch.cat([x, x], dim=-1),
            "cat of 64 (large params)": lambda: torch.cat(many),
            "strided mul": lambda: x[:, ::2] * x[:, 1::2],
            "cache write (index copy)": cache_write,
            "fp32 matmul (cuBLAS)": lambda: x.float()[:, 0] @ x.float()[0, 0],
            "4 GiB cudaMalloc + empty_cache": big_alloc,
            "ours quantize, no PDL": lambda: None,  # replaced below
        },
        "slow": {  # run from the slow state: does it set the fast one?
            "nothing": lambda: None,
            "ours quantize, PDL": lambda: k.quantize_fp8(tiny, one),
            "bf16 linear 32x2304x16384 (cuBLAS)": lambda: torch.nn.functional.linear(h, w),
            "bf16 linear 32x256x256 (cuBLAS)": lambda: torch.nn.functional.linear(h[:, :256], small_w),
            "fp32 matmul (cuBLAS)": lambda: x.float()[:, 0] @ x.float()[0, 0],
        },
    }

    def quantize_no_pdl():
        with k.tuning_overrides({"FP8DK_PDL": "0"}):
            k.quantize_fp8(tiny, one)
    candidates["fast"]["ours quantize, no PDL"] = quantize_no_pdl
    setters = {"fast": steps["ours"], "slow": steps["torch"]}
    for state, setter in setters.items():
        setter(); probe(f"after an eager step ({state})")
    for state, ops in candidates.items():
        for tag, op in ops.items():
            setters[state](); torch.cuda.synchronize()
            op(); probe(f"{state} state, then {tag}")

main(sys.argv[1] if len(sys.argv) > 1 else "default")
