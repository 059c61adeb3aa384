"""(Session 14, as run on an H100; the helper that warm.py and pf.py import: the first version of
benchmarks/decode_attribution.py.)

Decode-step attribution in graph mode: our build with one GEMM class at a time on torch._scaled_mm,
plus the GEMM chain alone (the step's 504 GEMMs back to back, no elementwise, no attention)."""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import decode_step as ds  # noqa: E402
import decoder  # noqa: E402

CLASSES = ("qkv", "o", "gate_up", "down")


def build(setup, args, gemm_of, elementwise, attention=None):
    conv = setup.kernel.convert
    ew = ds.annotated_ops(conv, elementwise)
    shard, scales = setup.shard, setup.scales
    attention = attention or decoder.SdpaDecodeAttention(shard.heads, shard.kv_heads, shard.head_dim)

    def ops_for(cls):
        return conv.DecodeOps(ew.add_rms_norm, ew.silu_and_mul, gemm_of[cls], ew.quantize)

    def linear(cls, weight, ws, ins):
        return conv.Fp8Linear(weight, ws, ins, None, setup.dtype, ops_for(cls))

    blocks = [decoder.Fp8DecoderLayer(
        w.input_norm, w.post_norm, shard.eps,
        linear("qkv", w.qkv, scales.qkv_w, scales.qkv_in), linear("o", w.o, scales.o_w, scales.o_in),
        conv.Fp8LlamaMLP(linear("gate_up", w.gate_up, scales.gate_up_w, scales.gate_up_in),
                         linear("down", w.down, scales.down_w, scales.down_in), ops_for("down")),
        attention, None, ew) for w in setup.layers]
    rope = decoder.rope_tables(args.kv_len, shard.head_dim, shard.rope_theta, setup.dtype, setup.final_norm.device)
    return decoder.Fp8Decoder(blocks, setup.final_norm, shard.eps, rope, ew)


def graph_ms(step, kernel, count, env=None):
    with kernel.tuning_overrides(env or {}):
        ds.CudaGraphTimer.warm_up([step])
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
    ds.CudaGraphTimer.replay_ms(g, 3)
    s = ds.CudaGraphTimer.replay_ms(g, count)
    del g
    return statistics.median(s)


def main():
    batches = [int(b) for b in sys.argv[1].split(",")] if len(sys.argv) > 1 else [32, 8, 1]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("attrib.json")
    args = ds.parse_args(["--batch", *map(str, batches)])
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    device = ds.device_of(args)
    setup = ds.make_setup(args, ds.Dist(), device)
    k = setup.kernel
    paths = ds.path_ops(setup, args)
    ours, peer = paths["ours"], paths["torch"]
    models = {"ours": build(setup, args, {c: ours.gemm for c in CLASSES}, ours),
              "torch": build(setup, args, {c: peer.gemm for c in CLASSES}, peer)}
    for c in CLASSES:
        models[f"ours, {c} on torch"] = build(setup, args, {d: (peer.gemm if d == c else ours.gemm) for d in CLASSES},
                                              ours)
    models["ours, all GEMMs on torch"] = build(setup, args, {c: peer.gemm for c in CLASSES}, ours)
    results = []
    pos = args.kv_len - 1
    for batch in batches:
        ds.fresh_compile_cache()
        x = ds.batch_input(setup, setup.shard.hidden, batch, args.seed, device)
        caches = ds.caches_for(setup.layers, batch)
        for rep in range(2):
            for name, model in models.items():
                for env_name, env in ((("", None),) if name != "ours" else (("", None), (", no PDL", {"FP8DK_PDL": "0"}))):
                    def step(model=model):
                        return model(x, caches, pos)
                    step()
                    ms = graph_ms(step, k, 40, env)
                    results.append({"batch": batch, "variant": name + env_name, "rep": rep, "ms": ms})
                    print(f"batch {batch:3d} rep {rep} {name + env_name:28s} {ms:8.3f} ms", flush=True)
        # The GEMM chain: the 504 GEMMs of one step with fixed FP8 inputs.
        fp8 = setup.fp8_dtype
        sh = setup.shard
        acts = {"qkv": sh.hidden, "o": sh.heads * sh.head_dim, "gate_up": sh.hidden, "down": sh.intermediate}
        a = {c: (torch.randn(batch, kk, device=device) * 4).to(fp8) for c, kk in acts.items()}
        sc = torch.ones((), device=device)
        for rep in range(2):
            for name, ops in (("ours", ours), ("torch", peer)):
                def chain(ops=ops):
                    for w in setup.layers:
                        for c in CLASSES:
                            ops.gemm(a[c], getattr(w, c), sc, sc, None, setup.dtype)
                chain()
                envs = (("", None), (", no PDL", {"FP8DK_PDL": "0"})) if name == "ours" else (("", None),)
                for env_name, env in envs:
                    ms = graph_ms(chain, k, 40, env)
                    results.append({"batch": batch, "variant": "GEMM chain " + name + env_name, "rep": rep, "ms": ms})
                    print(f"batch {batch:3d} rep {rep} GEMM chain {name + env_name:17s} {ms:8.3f} ms", flush=True)
            # Per class chains (126 calls of one class back to back).
            for name, ops in (("ours", ours), ("torch", peer)):
                for c in CLASSES:
                    def chain1(ops=ops, c=c):
                        for w in setup.layers:
                            ops.gemm(a[c], getattr(w, c), sc, sc, None, setup.dtype)
                    chain1()
                    ms = graph_ms(chain1, k, 40)
                    results.append({"batch": batch, "variant": f"{c} chain {name}", "rep": rep, "ms": ms})
                    print(f"batch {batch:3d} rep {rep} {c} chain {name:6s} {ms:8.3f} ms ({ms * 1e3 / len(setup.layers):.2f} us/call)", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
