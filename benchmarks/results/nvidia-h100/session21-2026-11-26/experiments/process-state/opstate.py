"""Session 21: which eager op sets the state that changes both decode-step graphs' replay times
(docs/experiments/README.md, items 51-52)? Batch 32, 405B TP8 shard. Captures both builds' graphs, then for each
eager op X: puts the process in the slow state (an eager step of the torch build) or the fast one (an eager step
of ours), runs X once and times both graphs. argv[1]: the table, "ops" (the decode step's ops, run first) or
"launch" (which launch property: clusters, PDL, SDPA's backends), which also writes each op's kernels with their
grid, block and shared memory (from a profiler trace) to argv[2]."""
import json, os, tempfile
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[5]))
import torch
import decode_attribution as da
import decode_step as ds
import decoder

BATCH = 32


def kernels_of(fn):
    """(name, launch attributes) of every kernel one eager call of fn launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(); torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    keep = ("grid", "block", "shared memory", "registers per thread", "blocks per SM", "warps per SM")
    return [(e["name"][:110], {key: e["args"].get(key) for key in keep})
            for e in events if e.get("cat") == "kernel"]


def main(table, kernel_log):
    own, args = da.parse_args(["--batch", str(BATCH)])
    setup = ds.make_setup(args, ds.Dist(), ds.device_of(args))
    paths = ds.path_ops(setup, args)
    models = {"ours": da.build(setup, args, {g: paths["ours"].gemm for g in da.GEMMS}, paths["ours"]),
              "torch": da.build(setup, args, {g: paths["torch"].gemm for g in da.GEMMS}, paths["torch"])}
    x = ds.batch_input(setup, setup.shard.hidden, BATCH, args.seed, setup.final_norm.device)
    caches = ds.caches_for(setup.layers, BATCH)
    pos = args.kv_len - 1
    steps = {name: (lambda m=m: m(x, caches, pos)) for name, m in models.items()}
    graphs = {}
    for name, step in steps.items():
        step()
        graphs[name] = ds.capture_graph(step)

    def probe(tag):
        torch.cuda.synchronize()
        ms = {}
        for name, g in graphs.items():
            ds.CudaGraphTimer.replay_ms(g, 5)
            ms[name] = statistics.median(ds.CudaGraphTimer.replay_ms(g, 30))
        print(f"{tag:58s} ours {ms['ours']:8.3f} torch {ms['torch']:8.3f} ms", flush=True)

    h8 = (0.1 * torch.randn(BATCH, setup.shard.hidden, device="cuda")).to(setup.fp8_dtype)
    h16 = torch.randn(BATCH, setup.shard.hidden, device="cuda", dtype=setup.dtype)
    res = torch.randn_like(h16)
    rope = decoder.Rope(models["ours"].rope_cos[pos], models["ours"].rope_sin[pos])

    def gemm(name, cls):
        layer = models[name].layers[0]
        linear = {"qkv": layer.qkv, "o": layer.o, "gate_up": layer.mlp.gate_up, "down": layer.mlp.down}[cls]
        a = (0.1 * torch.randn(BATCH, linear.weight.shape[1], device="cuda")).to(setup.fp8_dtype)
        return lambda: linear(a)

    def norm(name):
        layer = models[name].layers[0]
        return lambda: layer.ops.add_rms_norm(h16, res.clone(), layer.input_norm_weight, layer.eps,
                                              layer.qkv.input_scale, setup.fp8_dtype)

    def attention():
        layer = models["ours"].layers[0]
        qkv = layer.qkv(h8)
        return lambda: layer.attention(qkv, caches[0], pos, rope)

    def one_layer(name):
        layer = models[name].layers[0]
        return lambda: layer(h16, res.clone(), caches[0], pos, rope)

    k = setup.kernel

    def tuned(fn, values):
        def run():
            with k.tuning_overrides(values):
                fn()
        return run

    def sdpa(backend):
        from torch.nn.attention import sdpa_kernel
        run = attention()

        def with_backend():
            with sdpa_kernel(backend):
                run()
        return with_backend

    tiny = torch.ones(1, 16, device="cuda", dtype=setup.dtype)
    one = torch.ones((), device="cuda")
    from torch.nn.attention import SDPBackend
    w16 = torch.randn(2304, setup.shard.hidden, device="cuda", dtype=setup.dtype)
    launch = {
        "slow": {"ours quantize, tiny (PDL)": lambda: k.quantize_fp8(tiny, one),
                 "ours quantize, tiny, no PDL": tuned(lambda: k.quantize_fp8(tiny, one), {"FP8DK_PDL": "0"}),
                 "ours add_rms_norm (cluster)": norm("ours"),
                 "ours add_rms_norm, cluster, no PDL": tuned(norm("ours"), {"FP8DK_PDL": "0"}),
                 "ours add_rms_norm, no cluster": tuned(norm("ours"), {"FP8DK_RMSNORM_CLUSTER": "0"}),
                 "ours qkv GEMM, no PDL": tuned(gemm("ours", "qkv"), {"FP8DK_PDL": "0"}),
                 "torch o GEMM (cuBLASLt)": gemm("torch", "o"),
                 "torch gate_up GEMM (cuBLASLt)": gemm("torch", "gate_up"),
                 "torch bf16 linear (cuBLAS)": lambda: torch.nn.functional.linear(h16, w16)},
        "fast": {"SDPA (default backend)": attention(),
                 "SDPA, flash only": sdpa(SDPBackend.FLASH_ATTENTION),
                 "SDPA, efficient only": sdpa(SDPBackend.EFFICIENT_ATTENTION),
                 "SDPA, math only": sdpa(SDPBackend.MATH),
                 "torch down GEMM (cuBLASLt)": gemm("torch", "down"),
                 "torch add_rms_norm (compiled)": norm("torch")},
    }
    ops = {"nothing": lambda: None,
           "torch qkv GEMM (cuBLASLt)": gemm("torch", "qkv"), "torch down GEMM (cuBLASLt)": gemm("torch", "down"),
           "ours qkv GEMM": gemm("ours", "qkv"), "ours down GEMM": gemm("ours", "down"),
           "torch add_rms_norm (compiled)": norm("torch"), "ours add_rms_norm": norm("ours"),
           "SDPA attention": attention(), "torch one layer": one_layer("torch"), "ours one layer": one_layer("ours")}
    setters = {"slow": steps["torch"], "fast": steps["ours"]}
    for state, setter in setters.items():
        setter(); probe(f"after an eager step ({state})")
    if table == "ops":
        for tag, op in ops.items():
            for state, setter in setters.items():
                setter(); torch.cuda.synchronize()
                op(); probe(f"{state} state, then {tag}")
        return
    with open(kernel_log, "w") as log:
        for state, table_ops in launch.items():
            for tag, op in table_ops.items():
                for _ in range(2):
                    setters[state](); torch.cuda.synchronize()
                    op(); probe(f"{state} state, then {tag}")
                for kernel in kernels_of(op):
                    print(f"{tag}: {kernel}", file=log)

main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
