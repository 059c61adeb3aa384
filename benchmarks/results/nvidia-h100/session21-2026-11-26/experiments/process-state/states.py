"""Session 21: the decode step of both builds timed in the same, stated state (docs/experiments/README.md,
item 52): before each timing, one eager op that sets the state; fast: a cuBLAS bf16 linear (32 x 2304 x 16384),
slow: the model's SDPA attention (RoPE, cache write, SDPA). Both are torch ops, so a PyTorch-only process can be
in either state. Per batch size: both graphs captured, then rounds of (state, build) timings in alternating
order. 405B TP8 shard, batches 1 8 32."""
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds
import decoder

ROUNDS = 2


def main():
    own, args = da.parse_args(["--study", "skip", "--skip", "no quant", "--batch", "1", "8", "32"])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    w = torch.randn(2304, setup.shard.hidden, device="cuda", dtype=setup.dtype)
    h = torch.randn(32, setup.shard.hidden, device="cuda", dtype=setup.dtype)
    results = {}
    for batch in args.batch:
        ds.fresh_compile_cache()
        v = da.step_variants(setup, args, own, batch)
        graphs = {}
        for name in ("ours", "torch"):
            step = v[name][0]
            step()
            graphs[name] = ds.capture_graph(step)
        pos = args.kv_len - 1
        attention = decoder.SdpaDecodeAttention(setup.shard.heads, setup.shard.kv_heads, setup.shard.head_dim)
        qkv = torch.randn(batch, (setup.shard.heads + 2 * setup.shard.kv_heads) * setup.shard.head_dim,
                          device="cuda", dtype=setup.dtype)
        cache = ds.caches_for(setup.layers, batch)[0]
        rope = decoder.rope_tables(args.kv_len, setup.shard.head_dim, setup.shard.rope_theta, setup.dtype, "cuda")
        rope = decoder.Rope(rope.cos[pos], rope.sin[pos])
        setters = {"fast": lambda: torch.nn.functional.linear(h, w),
                   "slow": lambda: attention(qkv, cache, pos, rope)}
        for round_ in range(ROUNDS):
            order = ("ours", "torch") if round_ % 2 == 0 else ("torch", "ours")
            for state, setter in setters.items():
                for name in order:
                    setter(); torch.cuda.synchronize()
                    ds.CudaGraphTimer.replay_ms(graphs[name], 3)
                    ms = statistics.median(ds.CudaGraphTimer.replay_ms(graphs[name], 50))
                    results.setdefault((batch, state, name), []).append(ms)
                    print(f"batch {batch:2d} round {round_} {state} {name:5s} {ms:8.3f} ms", flush=True)
        del graphs
    print("\n| batch | state | ours (ms) | torch (ms) | speedup |\n|---:|---|---:|---:|---:|")
    for batch in args.batch:
        for state in ("fast", "slow"):
            ours = statistics.median(results[(batch, state, "ours")])
            peer = statistics.median(results[(batch, state, "torch")])
            print(f"| {batch} | {state} | {ours:.3f} | {peer:.3f} | {peer / ours:.3f}x |")

main()
