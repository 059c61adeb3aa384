"""The package's static-FP8 modules (convert.py) and the benchmarks' decoder built from them
(benchmarks/decoder.py) against pure-PyTorch references of the same math, the Llama-MLP converter on a tiny
transformers model, and the decode-step benchmark's CPU smoke run.

The references quantize activations exactly where the decoder does (reference.quantize_fp8, dequantized
again) and multiply dequantized weights in float64, so the remaining differences are the GEMMs' fp32
accumulation order and the attention's softmax precision. Those change a 16-bit value by an ulp now and then,
which moves an FP8 code one step where a value sits on a rounding boundary: hence tolerances on the relative
L2 error instead of bitwise comparisons.
"""

import functools
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

from .conftest import HAS_GPU, REPO_ID, REPO_ROOT

DTYPES = (torch.bfloat16, torch.float16)
EPS = 1e-5
# Relative L2 errors. Stages whose inputs match up to 16-bit roundings agree to well under 1%. Past one
# static FP8 quantization of slightly different inputs, a few % of the codes move a step (6-12% of that
# element); the layer's MLP output sits behind two of them, fed by the attention's rounding differences.
STAGE_TOLERANCE = 1e-2
LAYER_OUTPUT_TOLERANCE = 0.1


BENCHMARK_DECODER = REPO_ROOT / "benchmarks" / "decoder.py"


def benchmark_script(name: str):
    """benchmarks/<name>, or a skip where benchmarks/ is not part of this checkout (e.g. kernel-builder's test
    sandbox)."""
    script = REPO_ROOT / "benchmarks" / name
    if not script.is_file():
        pytest.skip("benchmarks/ is not part of this checkout (e.g. kernel-builder's test sandbox)")
    return script


# The decode benchmarks' smoke-test model, after --layers: a tiny Llama shard whose step runs in a second.
TINY_DECODER = ["--hidden", "128", "--heads", "16", "--kv-heads", "8", "--head-dim", "32", "--intermediate", "1024",
                "--kv-len", "16"]


def benchmark_module(name: str):
    """benchmarks/<name>.py imported as a module (its folder on sys.path while it loads its own imports)."""
    script = benchmark_script(f"{name}.py")
    sys.path.insert(0, str(script.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(script.parent))
    return module


@pytest.fixture
def convert(kernel):
    """The package's static-FP8 modules and converters."""
    return kernel.convert


@functools.cache
def _benchmark_decoder():
    spec = importlib.util.spec_from_file_location("benchmark_decoder", BENCHMARK_DECODER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def decoder():
    """benchmarks/decoder.py, the decoder model that benchmarks/decode_step.py times."""
    benchmark_script(BENCHMARK_DECODER.name)
    return _benchmark_decoder()


def fp8_of(kernel, device) -> torch.dtype:
    return kernel.native_fp8_dtype(torch.device(device))


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


# ---------------------------------------------------------------- the same math in float64


def dequantized(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.double() * scale.double()


def fp8_activation(reference, x: torch.Tensor, scale: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """What an FP8 GEMM sees of x: x statically quantized with `scale`, as a float64 value."""
    return dequantized(reference.quantize_fp8(x, scale, fp8), scale)


def linear_reference(a: torch.Tensor, linear) -> torch.Tensor:
    """a (float64, dequantized) @ the dequantized weight, rounded once to the layer's output dtype."""
    return (a @ dequantized(linear.weight, linear.weight_scale).t()).to(linear.out_dtype)


def mlp_reference(reference, mlp, x: torch.Tensor) -> torch.Tensor:
    fp8 = mlp.gate_up.weight.dtype
    gate_up = linear_reference(fp8_activation(reference, x, mlp.gate_up.input_scale, fp8), mlp.gate_up)
    gate, up = gate_up.float().chunk(2, dim=-1)
    act = torch.nn.functional.silu(gate) * up  # quantized from float32, as silu_and_mul does
    return linear_reference(fp8_activation(reference, act, mlp.down.input_scale, fp8), mlp.down)


def rope_reference(x: torch.Tensor, pos: int, theta: float) -> torch.Tensor:
    """transformers' Llama rotary embedding of one position, factors in float32 rounded to x's dtype."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    angles = torch.cat([pos * inv_freq, pos * inv_freq])
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * angles.cos().to(x.dtype) + torch.cat([-x2, x1], dim=-1) * angles.sin().to(x.dtype)


def attention_reference(q, keys, values):
    """Softmax attention of one query per sequence in float32; keys/values [B, kv_heads, L, d] are shared by
    groups of consecutive query heads."""
    group = q.shape[1] // keys.shape[1]
    keys = keys.float().repeat_interleave(group, dim=1)
    values = values.float().repeat_interleave(group, dim=1)
    scores = q.float().unsqueeze(2) @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (scores.softmax(dim=-1) @ values).squeeze(2)


def layer_reference(reference, layer, dims, x, residual, cache, pos, theta):
    """Fp8DecoderLayer's decode step, written out: returns (attention output, out, new residual); writes the
    cache at pos."""
    heads, kv_heads, d = dims
    fp8, batch = layer.qkv.weight.dtype, x.shape[0]
    residual = x + residual
    h = reference.rms_norm_ref(residual, layer.input_norm_weight, EPS)
    qkv = linear_reference(fp8_activation(reference, h, layer.qkv.input_scale, fp8), layer.qkv)
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q = q.reshape(batch, heads, d)
    k = k.reshape(batch, kv_heads, d)
    if theta is not None:
        q, k = rope_reference(q, pos, theta), rope_reference(k, pos, theta)
    cache.key[:, :, pos] = k
    cache.value[:, :, pos] = v.reshape(batch, kv_heads, d)
    attn = attention_reference(q, cache.key[:, :, :pos + 1], cache.value[:, :, :pos + 1])
    attn = attn.to(x.dtype).reshape(batch, heads * d)
    o = linear_reference(fp8_activation(reference, attn, layer.o.input_scale, fp8), layer.o)
    residual = o + residual
    h = reference.rms_norm_ref(residual, layer.post_attention_norm_weight, EPS)
    return attn, mlp_reference(reference, layer.mlp, h), residual


# ---------------------------------------------------------------- builders


class LlamaLikeMLP(nn.Module):
    """transformers' LlamaMLP, reduced to what the converter reads."""

    def __init__(self, hidden, intermediate, dtype, device, act=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype, device=device)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype, device=device)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype, device=device)
        self.act_fn = act or nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def random_linear(convert, n, k, input_amax, dtype, device, fp8):
    weight, weight_scale = convert.quantize_weight(torch.randn(n, k, dtype=dtype, device=device) / k ** 0.5, fp8)
    input_scale = input_amax / torch.finfo(fp8).max
    return convert.Fp8Linear(weight, weight_scale, input_scale, None, dtype)


def random_layer(convert, decoder, hidden, dims, intermediate, dtype, device, fp8):
    heads, kv_heads, d = dims

    def linear(n, k, amax):
        return random_linear(convert, n, k, amax, dtype, device, fp8)

    def norm_weight():
        return (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)

    mlp = convert.Fp8LlamaMLP(linear(2 * intermediate, hidden, 4.0), linear(hidden, intermediate, 4.0))
    return decoder.Fp8DecoderLayer(norm_weight(), norm_weight(), EPS, linear((heads + 2 * kv_heads) * d, hidden, 4.0),
                                   linear(hidden, heads * d, 2.0), mlp,
                                   decoder.SdpaDecodeAttention(heads, kv_heads, d), None, convert.KERNEL_OPS)


def random_cache(decoder, batch, kv_heads, capacity, d, pos, dtype, device):
    """Random keys and values up to pos, NaN after it: positions the step must not read."""
    def one():
        t = torch.randn(batch, kv_heads, capacity, d, dtype=dtype, device=device)
        t[:, :, pos + 1:] = float("nan")
        return t
    return decoder.KVCache(one(), one())


# ---------------------------------------------------------------- tests


@pytest.mark.kernels_ci
def test_quantize_fp8_static_defaults_to_device_flavour(kernel, convert, device):
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device) * 100
    scale = torch.tensor([0.05], device=device)
    fp8 = fp8_of(kernel, device)
    out = convert.quantize_fp8_static(x, scale)
    assert out.dtype == fp8
    assert torch.equal(out.view(torch.uint8), kernel.reference.quantize_fp8(x, scale, fp8).view(torch.uint8))


@pytest.mark.parametrize("rows", [1, 7, 48], ids=lambda r: f"rows{r}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_linear(kernel, convert, device, dtype, rows):
    """16-bit input is quantized with input_scale; FP8 input is used as is; rows > 32 go through torch."""
    fp8 = fp8_of(kernel, device)
    linear = random_linear(convert, 96, 128, 4.0, dtype, device, fp8)
    x = torch.randn(rows, 128, dtype=dtype, device=device)
    out = linear(x)
    assert out.dtype == dtype and out.shape == (rows, 96)
    expected = linear_reference(fp8_activation(kernel.reference, x, linear.input_scale, fp8), linear)
    assert relative_error(out, expected) < 1e-2
    assert torch.equal(linear(linear.quantize_input(x)), out)
    assert linear(x.reshape(1, rows, 128)).shape == (1, rows, 96)


@pytest.mark.parametrize("rows", [1, 5, 40], ids=lambda r: f"rows{r}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_llama_mlp_matches_float_reference(kernel, convert, device, dtype, rows):
    """from_llama_mlp with calibrated scales against the same math on dequantized weights in float64, and
    loosely against the original 16-bit MLP (FP8's own error)."""
    mlp = LlamaLikeMLP(128, 320, dtype, device)
    x = torch.randn(rows, 128, dtype=dtype, device=device)
    fp8_mlp = convert.from_llama_mlp(mlp, x)
    assert fp8_mlp.gate_up.weight.dtype == fp8_of(kernel, device)
    out = fp8_mlp(x)
    assert out.dtype == dtype and out.shape == x.shape
    assert relative_error(out, mlp_reference(kernel.reference, fp8_mlp, x)) < STAGE_TOLERANCE
    with torch.no_grad():
        assert relative_error(out, mlp(x)) < 0.1


@pytest.mark.kernels_ci
def test_from_llama_mlp_scales(kernel, convert, device):
    """Given scales are used as given; a missing one is calibrated as amax / fp8_max; neither is an error."""
    mlp = LlamaLikeMLP(64, 128, torch.bfloat16, device)
    x = torch.randn(3, 64, dtype=torch.bfloat16, device=device)
    fp8_max = torch.finfo(fp8_of(kernel, device)).max
    given = convert.from_llama_mlp(mlp, input_scale=0.5, act_scale=0.25)
    assert given.gate_up.input_scale.item() == 0.5 and given.down.input_scale.item() == 0.25
    calibrated = convert.from_llama_mlp(mlp, x, act_scale=0.25)
    assert calibrated.gate_up.input_scale.item() == pytest.approx(x.abs().max().item() / fp8_max)
    assert calibrated.down.input_scale.item() == 0.25
    with pytest.raises(ValueError, match="calibration_input"):
        convert.from_llama_mlp(mlp)
    with pytest.raises(ValueError, match="SiLU"):
        convert.from_llama_mlp(LlamaLikeMLP(64, 128, torch.bfloat16, device, act=nn.GELU()), x)


@pytest.mark.parametrize("theta", [None, 10000.0], ids=["no_rope", "rope"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fp8_decoder_layer_matches_reference(kernel, convert, decoder, device, dtype, theta):
    """One decode step of a GQA layer (4 query heads per KV head) against the layer written out in PyTorch:
    the KV written at pos, the attention output (the O GEMM's input), the residual and the MLP output. Cache
    entries after pos are NaN and must not be read."""
    hidden, dims, intermediate, batch, capacity, pos = 128, (8, 2, 32), 256, 3, 12, 9
    layer = random_layer(convert, decoder, hidden, dims, intermediate, dtype, device, fp8_of(kernel, device))
    x = torch.randn(batch, hidden, dtype=dtype, device=device)
    residual = torch.randn(batch, hidden, dtype=dtype, device=device)
    cache = random_cache(decoder, batch, dims[1], capacity, dims[2], pos, dtype, device)
    ref_cache = decoder.KVCache(cache.key.clone(), cache.value.clone())
    rope = None
    if theta is not None:
        tables = decoder.rope_tables(capacity, dims[2], theta, dtype, torch.device(device))
        rope = decoder.Rope(tables.cos[pos], tables.sin[pos])

    ref_attn, ref_out, ref_residual = layer_reference(kernel.reference, layer, dims, x, residual.clone(), ref_cache,
                                                      pos, theta)
    attn = []
    layer.o.register_forward_pre_hook(lambda module, args: attn.append(args[0]))
    out = layer(x, residual, cache, pos, rope)

    assert out.dtype == dtype and not out.isnan().any()
    for written, expected in ((cache.key, ref_cache.key), (cache.value, ref_cache.value)):
        assert relative_error(written[:, :, pos], expected[:, :, pos]) < STAGE_TOLERANCE
    assert relative_error(attn[0], ref_attn) < STAGE_TOLERANCE
    assert relative_error(residual, ref_residual) < STAGE_TOLERANCE
    assert relative_error(out, ref_out) < LAYER_OUTPUT_TOLERANCE


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: torch.cuda.is_available() is False")
@pytest.mark.parametrize("device", ["cuda"])
def test_fp8_decoder_cuda_graph(kernel, convert, decoder, device):
    """A whole decode step (two layers and the final norm) captured in a CUDA graph and replayed on new
    inputs gives the eager step's output."""
    dtype, hidden, dims, batch, capacity = torch.bfloat16, 256, (8, 2, 64), 4, 32
    fp8 = fp8_of(kernel, device)
    layers = [random_layer(convert, decoder, hidden, dims, 512, dtype, device, fp8) for _ in range(2)]
    tables = decoder.rope_tables(capacity, dims[2], 500000.0, dtype, torch.device(device))
    model = decoder.Fp8Decoder(layers, torch.ones(hidden, dtype=dtype, device=device), EPS, tables,
                               convert.KERNEL_OPS)
    caches = [random_cache(decoder, batch, dims[1], capacity, dims[2], capacity - 1, dtype, device) for _ in layers]
    x = torch.randn(batch, hidden, dtype=dtype, device=device)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(x, caches, capacity - 1)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(x, caches, capacity - 1)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(out, model(x, caches, capacity - 1), rtol=0, atol=0)


def test_convert_llama_mlps_to_fp8(kernel, convert, device):
    """Every layer of a tiny LlamaForCausalLM gets an Fp8LlamaMLP; logits stay close (FP8's own error) and
    generate() runs, through the kernel for decode rows and torch for the 48-row prefill."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (3, 16), device=device)
    with torch.no_grad():
        expected = model(ids).logits
    assert convert.convert_llama_mlps_to_fp8(model, calibration_inputs=ids) is model
    assert all(isinstance(layer.mlp, convert.Fp8LlamaMLP) for layer in model.model.layers)
    with torch.no_grad():
        assert relative_error(model(ids).logits, expected) < 0.05
        generated = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert generated.shape == (3, 20)


def test_convert_rejects_models_without_llama_mlps(convert):
    with pytest.raises(ValueError, match="no module"):
        convert.convert_llama_mlps_to_fp8(nn.Sequential(nn.Linear(4, 4)))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_GPU,
                                                                                       reason="no GPU"))])
def test_decode_step_benchmark_smoke(kernel, device, tmp_path):
    """benchmarks/decode_step.py end to end at tiny sizes, loading the kernel the way these tests do: eager
    steps on CPU; on a GPU, CUDA-graph replays in both process states, each batch size in a child process."""
    script = benchmark_script("decode_step.py")
    command = [sys.executable, str(script), "--repo-id", REPO_ID, "--device", device, "--layers", "1",
               *TINY_DECODER, "--batch", "2", "3", "--replays", "30" if device == "cuda" else "3",
               "--profile-steps", "1", "--no-compile", "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = tmp_path.glob("*.json")
    results = json.loads(report.read_text())["results"]
    assert {(r["path"], r["batch"]) for r in results} == {(p, b) for p in ("ours", "torch") for b in (2, 3)}
    states = {"fast", "slow"} if device == "cuda" else {"eager"}
    assert all(set(r["latency_ms"]) == states == set(r["idle_us"]) for r in results)
    assert all(s["median"] > 0 for r in results for s in r["latency_ms"].values())
    # Each GPU timing keeps the state probe it ran after; a CPU one has none.
    assert all(("probe_ms" in s) == (device == "cuda") for r in results for s in r["latency_ms"].values())
    assert all(s.get("probe_ms", 1.0) > 0 for r in results for s in r["latency_ms"].values())
    assert all(1 <= s.get("setter_tries", 1) <= 3 for r in results for s in r["latency_ms"].values())
    assert all(r["rel_diff_vs_torch"] < 0.05 for r in results)
    table = (tmp_path / report.name.replace(".json", ".md")).read_text()
    assert all(f"| {b} | {state} |" in table for b in (2, 3) for state in states), table
    assert {p.suffix for p in tmp_path.iterdir()} == {".json", ".md", ".png"}
    # The parent of the per-batch children reads their measurements back from the same JSON.
    decode_step = benchmark_module("decode_step")
    for record in results:
        measurement = decode_step.measurement_of(record)
        assert measurement.latency_ms == record["latency_ms"]
        assert all(measurement.idle_us(state) == record["idle_us"][state] for state in states)


def test_decode_step_fast_state_reached():
    """The report trusts a fast-state timing only where its probe ran clearly faster than the slow-state one
    (item 52: a setter does not always take hold); timings without probes (eager) are not judged."""
    decode_step = benchmark_module("decode_step")

    def latency(fast_probe, slow_probe):
        return {"fast": {"median": 1.0, "probe_ms": fast_probe}, "slow": {"median": 1.1, "probe_ms": slow_probe}}

    assert decode_step.fast_state_reached(latency(0.987, 1.166))
    assert not decode_step.fast_state_reached(latency(1.160, 1.166))
    assert not decode_step.fast_state_reached(latency(1.120, 1.166))  # 4% apart: within a probe's spread
    assert decode_step.fast_state_reached({"eager": {"median": 1.0}})
    # The report's rows give both builds' probes and name a build whose fast setter missed.
    args = decode_step.parse_args(["--device", "cuda", "--batch", "8"])
    breakdown = decode_step.Breakdown({c: 1.0 for c in decode_step.CATEGORIES},
                                      {c: 1.0 for c in decode_step.CATEGORIES}, [])
    results = [decode_step.Measurement("ours", 8, latency(0.99, 1.17), breakdown, 0.3, 0.3),
               decode_step.Measurement("torch", 8, latency(1.16, 1.17), breakdown, 0.0, 0.3)]
    env = {"device": {"name": "GPU"}, "torch": "2", "git_revision": "abc", "date": "today"}
    table = decode_step.markdown(args, results, "title", env)
    assert "| 8 | fast | 1.000 | 1.000 | 1.000x | 0.990 / 1.160 (torch: fast state not reached) |" in table, table
    results[0].latency_ms["fast"]["setter_tries"] = 2
    table = decode_step.markdown(args, results, "title", env)
    assert "| 0.990 / 1.160 (ours: 2 setters; torch: fast state not reached) |" in table, table
    assert "| 8 | slow | 1.100 | 1.100 | 1.000x | 1.170 / 1.170 |" in table, table


def test_decode_step_setter_retried_until_the_probe_says_fast():
    """A fast setter is launched again while the probe is not 5% below the slow reference, at most SETTER_TRIES
    times in all; a slow setter once. The probe and the setters run come back with the timing."""
    decode_step = benchmark_module("decode_step")
    entered = []

    def run(probes, state):
        entered.clear()
        readings = iter(probes)
        return decode_step.enter_with_probe(entered.append, lambda: next(readings), state, 1.19)

    assert run([1.00], "fast") == (1.00, 1) and entered == ["fast"]
    assert run([1.19, 1.18, 1.01], "fast") == (1.01, 3) and entered == ["fast"] * 3
    assert run([1.19] * decode_step.SETTER_TRIES, "fast") == (1.19, decode_step.SETTER_TRIES)
    assert len(entered) == decode_step.SETTER_TRIES
    assert run([1.19], "slow") == (1.19, 1) and entered == ["slow"]


def test_decode_step_batch_children(kernel_cpu, tmp_path):
    """run_batch_processes (on a GPU the default for several batch sizes) at tiny sizes, here on the CPU: one
    child per batch size, their measurements read back in batch order."""
    decode_step = benchmark_module("decode_step")
    argv = ["--repo-id", REPO_ID, "--device", "cpu", "--layers", "1", *TINY_DECODER, "--batch", "2", "3",
            "--replays", "3", "--profile-steps", "1", "--no-compile", "--out", str(tmp_path)]
    results = decode_step.run_batch_processes(decode_step.parse_args(argv), argv)
    assert [(m.batch, m.path) for m in results] == [(2, "ours"), (2, "torch"), (3, "ours"), (3, "torch")]
    assert all(m.latency_ms["eager"]["median"] > 0 and m.breakdown.busy_us > 0 for m in results)
    assert not any(tmp_path.iterdir())  # the children wrote to their own folders


def test_decode_step_batch_processes():
    """Which runs time each batch size in a child process: CUDA graphs on one rank with several batch sizes."""
    decode_step = benchmark_module("decode_step")
    one_rank, two_ranks = decode_step.Dist(), decode_step.Dist(rank=0, world=2)

    def args(*extra):
        return decode_step.parse_args(["--device", "cuda", "--replays", "30", *extra])
    assert decode_step.batch_processes(args(), one_rank)
    assert not decode_step.batch_processes(args("--one-process"), one_rank)
    assert not decode_step.batch_processes(args("--no-graph"), one_rank)
    assert not decode_step.batch_processes(args("--batch", "32"), one_rank)
    assert not decode_step.batch_processes(args("--tp", "2"), two_ranks)
    assert not decode_step.batch_processes(decode_step.parse_args(["--device", "cpu"]), one_rank)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_GPU,
                                                                                       reason="no GPU"))])
def test_decode_attribution_smoke(kernel, device, tmp_path):
    """benchmarks/decode_attribution.py end to end at tiny sizes, every study (on CPU without the timeline)."""
    script = benchmark_script("decode_attribution.py")
    command = [sys.executable, str(script), "--env", "no PDL:FP8DK_PDL=0",
               "--env", "o, 2 stages:o:FP8DK_SKINNY_TMA_STAGES=2", "--env", "o, 2 stages:FP8DK_PDL=0",
               "--rounds", "1",
               "--repo-id", REPO_ID, "--device", device, "--layers", "2", *TINY_DECODER, "--batch", "2",
               "--replays", "30" if device == "cuda" else "3", "--no-compile", "--out", str(tmp_path)]
    # Our GEMM kernel at every shape, so that the timeline has it: at these tiny shapes the routing table sends
    # the GEMMs to torch._scaled_mm on an H200 (routing.py).
    environment = {**os.environ, "FP8DK_SKINNY_ROUTE": "0"}
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = tmp_path.glob("*.json")
    record = json.loads(report.read_text())
    variants = {r["variant"] for r in record["results"]}
    expected = {"ours", "torch", "ours, all GEMMs on torch", "ours, GEMMs only", "GEMM chain, ours, no PDL",
                "ours, no PDL", "ours, o, 2 stages"} | {f"ours, {g} on torch" for g in ("qkv", "o", "gate_up", "down")}
    assert expected <= variants
    assert all(r["ms"] > 0 for r in record["results"])
    assert all((r["probe_ms"] is not None) == (device == "cuda") for r in record["results"])
    assert record["state"] == ("fast" if device == "cuda" else "eager")
    assert record["env_variants"]["o, 2 stages"] == {"o": {"FP8DK_SKINNY_TMA_STAGES": "2"}, "all": {"FP8DK_PDL": "0"}}
    if device == "cuda":
        kernels = {row["kernel"] for row in record["timelines"]["ours, batch 2"]["positions"]}
        assert {"gemm", "rmsnorm", "swiglu", "quant"} <= kernels, kernels
    assert {p.suffix for p in tmp_path.iterdir()} == {".json", ".md"}


def test_decode_attribution_skip_filter(kernel_cpu, tmp_path):
    """--skip runs only the named variants of the skip study (with ours and torch); an unknown name is an error
    that lists the variants. The filter is the same on every device: run on the CPU variant (skipped on a GPU
    machine without one, where `--device cpu` would find no build)."""
    script = benchmark_script("decode_attribution.py")
    common = ["--rounds", "1", "--repo-id", REPO_ID, "--device", "cpu", "--layers", "1", *TINY_DECODER,
              "--batch", "2", "--replays", "2", "--no-compile", "--out", str(tmp_path), "--study", "skip"]
    wanted = ["rmsnorm as a quantization of x", "rmsnorm as a quantization of one row"]
    run = subprocess.run([sys.executable, str(script), *common, "--skip", *wanted], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = tmp_path.glob("*.json")
    variants = {r["variant"] for r in json.loads(report.read_text())["results"]}
    assert variants == {"ours", "torch"} | {f"ours, {name}" for name in wanted}
    run = subprocess.run([sys.executable, str(script), *common, "--skip", "no such variant"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode != 0 and "no such variant" in run.stderr and "no rmsnorm" in run.stderr, run.stderr


def test_decode_attribution_child_processes(kernel_cpu, tmp_path):
    """--processes timing: every variant's every round timed by a child process of its own, its result read back
    in round order; the children write to their own folders. On the CPU variant, as the skip filter's test."""
    script = benchmark_script("decode_attribution.py")
    command = [sys.executable, str(script), "--study", "env", "--env", "no PDL:FP8DK_PDL=0", "--rounds", "2",
               "--processes", "timing", "--repo-id", REPO_ID, "--device", "cpu", "--layers", "2", *TINY_DECODER,
               "--batch", "2", "--replays", "2", "--no-compile", "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = tmp_path.glob("*.json")
    record = json.loads(report.read_text())
    assert record["processes"] == "timing" and record["args"]["layers"] == 2
    assert [(r["round"], r["variant"]) for r in record["results"]] == [
        (round_, variant) for round_ in (0, 1) for variant in ("ours", "torch", "ours, no PDL")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [report.name, report.with_suffix(".md").name]
    # A child's variant must be one of the studies'.
    run = subprocess.run([*command[:-2], "--out", str(tmp_path / "x"), "--processes", "one", "--only", "nope"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode != 0 and "--only 'nope'" in run.stderr and "ours, no PDL" in run.stderr, run.stderr


def test_decode_attribution_layer_timeline():
    """The timeline's indexing on a made-up trace: per step the residual's zeros, 8 layers of (RMSNorm, GEMM,
    SwiGLU) where the GEMM starts before the RMSNorm ends (PDL), the final norm; three steps."""
    module = benchmark_module("decode_attribution")
    layers, kernels, t = 8, [], 0.0
    for _ in range(3):
        kernels.append((t, t + 1.0, "fill"))
        t += 2.0
        for _ in range(layers):
            kernels.append((t, t + 3.0, "rms_norm_cluster_kernel"))
            kernels.append((t + 1.0, t + 10.0, "skinny_gemm_tma_kernel"))
            kernels.append((t + 10.5, t + 11.5, "silu_and_mul_kernel"))
            t += 12.0
        kernels.append((t, t + 2.0, "rms_norm_kernel"))
        t += 5.0
    rows = module.layer_timeline(kernels[::-1], 3, layers)
    assert [(r["position"], r["kernel"]) for r in rows] == [(0, "rmsnorm"), (1, "gemm"), (2, "swiglu")]
    assert [r["start"] for r in rows] == pytest.approx([0.0, 1.0, 10.5])
    assert [r["duration"] for r in rows] == pytest.approx([3.0, 9.0, 1.0])
    assert [r["gap"] for r in rows] == pytest.approx([0.5, -2.0, 0.5])


def test_decode_attribution_rounds_out_of_state():
    """A round whose probe did not show the state is marked and left out of its variant's median where the variant
    has a round that did; a variant with none says so (items 52-54: in one process the fast setter stopped taking
    hold after three graphs)."""
    module = benchmark_module("decode_attribution")

    def result(variant, round_, ms, reached):
        return {"batch": 1, "variant": variant, "round": round_, "ms": ms, "probe_ms": 1.0 if reached else 1.17,
                "setter_tries": 1 if reached else 3, "state_reached": reached}
    results = [result("ours", 0, 23.0, True), result("torch", 0, 25.0, True), result("ours, x", 0, 23.5, False),
               result("ours", 1, 23.6, False), result("torch", 1, 26.4, False), result("ours, x", 1, 23.6, False)]
    env = {"device": {"name": "GPU"}, "torch": "2", "git_revision": "abc", "date": "today"}
    table = module.markdown(results, {}, env, [1], "replays")
    assert "| ours | 23.000 | +0.000 | 1.087x | 23.000 [1.000], 23.600 [1.170*] |" in table, table
    assert "| torch | 25.000 | +2.000 | 1.000x | 25.000 [1.000], 26.400 [1.170*] |" in table, table
    assert "| ours, x (state not reached) | 23.550 | +0.550 | 1.062x |" in table, table
    # On CPU there is no probe: every round counts.
    cpu = [{**r, "probe_ms": None, "setter_tries": None, "state_reached": None} for r in results]
    assert "| ours | 23.300 | +0.000 |" in module.markdown(cpu, {}, env, [1], "eager steps")


def test_decode_attribution_layer_segments():
    """A layer's segments on a made-up trace in the order of the kernels' ends: per step the residual's zeros, 8
    layers of (RMSNorm, qkv GEMM with a split-K reduce, two attention kernels, o GEMM, RMSNorm, gate_up GEMM,
    SwiGLU, down GEMM) whose GEMMs start before the kernel before them ends (PDL), the final norm; three steps.
    A segment is what it adds to the step: from the end of the segment before to its own end."""
    module = benchmark_module("decode_attribution")
    layers, kernels, t = 8, [], 0.0
    layer = [("rms_norm_cluster_kernel", 3.0), ("skinny_gemm_tma_kernel", 10.0),
             ("cublasLt::splitKreduce_kernel", 1.0), ("rope", 2.0), ("flash_fwd_kernel", 5.0),
             ("skinny_gemm_tma_kernel", 7.0), ("rms_norm_cluster_kernel", 4.0), ("skinny_gemm_tma_kernel", 20.0),
             ("silu_and_mul_kernel", 1.0), ("skinny_gemm_tma_kernel", 9.0)]
    for _ in range(3):
        kernels.append((t, t + 1.0, "fill"))
        t += 1.0
        for _ in range(layers):
            for name, adds in layer:
                kernels.append((t - 2.0, t + adds, name))  # starts 2 us early, ends `adds` after the one before
                t += adds
        kernels.append((t, t + 2.0, "rms_norm_kernel"))
        t += 5.0
    rows = module.layer_segments(kernels[::-1], 3, layers)
    assert [r["segment"] for r in rows] == list(module.LAYER_SEGMENTS)
    assert [r["us"] for r in rows] == pytest.approx([3.0, 11.0, 7.0, 7.0, 4.0, 20.0, 1.0, 9.0])


def test_decode_trace_summary(tmp_path):
    """benchmarks/decode_trace.py's reading of a made-up diagnostic trace (common/diag_trace.cuh's records): 12
    layers of our 8 kernels, each CTA's marks placed by hand. A GEMM's first CTAs enter long before its others on
    SMs the GEMM before left idle, so launches are told apart by block index, not by gaps in time; every position
    reads back its marks, from the end of the previous layer's down GEMM; the SM hand-offs pair each GEMM's CTA
    with the one that left its SM; each PDL release is the next launch's first wait after the last CTA end."""
    module = benchmark_module("decode_trace")
    shard = {"hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 16, "intermediate": 96}
    # (kind, n, k, m, grid) and, relative to the launch's start, entry, wait, stage, stream, end in ns
    qkv, o, gate_up, down = (4, 64, 64, 2, 4), (4, 64, 32, 2, 4), (4, 192, 64, 2, 4), (4, 64, 96, 2, 4)
    norm, quant, swiglu = (1, 64, 2, 0, 2), (3, 32, 2, 0, 1), (2, 96, 2, 0, 3)
    sequence = [(norm, 5000), (qkv, 15000), (quant, 40000), (o, 12000), (norm, 5000), (gate_up, 70000),
                (swiglu, 2000), (down, 35000)]
    records, t, previous = [], 1_000_000, 35000
    for layer in range(12):
        for (kind, n, k, m, grid), length in sequence:
            for block in range(grid):
                if kind == 1:  # launched as the GEMM before issues its last loads
                    entry = t - int(0.8 * previous) + 100 * block
                elif kind == 4 and block == 0 and (n, k) == qkv[1:3]:  # one qkv CTA on an SM down left idle,
                    entry = t - 40_000  # entered (timer skew) before the RMSNorm's first: stream order is the waits'
                elif kind == 2 and layer == 6:  # a SwiGLU whose records were lost: its layer has another shape
                    continue
                else:
                    entry = t + 100 * block
                fast = 5000 if (n, k) == gate_up[1:3] and block == 0 else 0  # gate_up's SM 0 streams faster
                wait = t + 1000 + 10 * block  # the first wait is block 0's
                marks = (entry, wait, t + 2000 if kind == 4 else 0, t + length - 900 - fast if kind == 4 else 0,
                         t + length - 500 + 100 * block)
                sm = 0 if kind == 1 else block  # the RMSNorm's two CTAs on one SM, the others on their own
                records.append((marks, kind, n, k, m, grid - 1 - block, sm, grid, 0))
            t, previous = t + length, length
    records.append(((0, 0, 0, 0, 0), 0, 0, 0, 0, 0, 0, 0, 0))  # a slot claimed by a CTA with no work
    trace = np.array(records, dtype=module.RECORD)
    np.random.default_rng(0).shuffle(trace)  # the dump's order is the atomic's, not time's
    meta = {"device": "made-up GPU", "batch": 2, "shard": shard, "step_ms": 1.0, "probe_ms": 1.0, "slow_probe_ms": 1.2}
    path = tmp_path / "trace.npz"
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), replay0=trace)

    chain = module.launches(trace, module.gemm_classes(shard))
    assert [launch["name"] for launch in chain[:8]] == ["rmsnorm", "qkv", "quant", "o", "rmsnorm", "gate_up",
                                                        "swiglu", "down"]
    assert all(sorted(launch["ctas"]["block"]) == list(range(len(launch["ctas"]))) for launch in chain)
    assert all(a["ctas"]["t"][:, 1].min() < b["ctas"]["t"][:, 1].min() for a, b in zip(chain, chain[1:]))
    layers = module.layers_of(chain)
    assert len(layers) == 11  # cut at each RMSNorm a qkv follows; the last runs to the end of the chain
    rows = module.layer_summary(layers)
    assert [row["name"] for row in rows] == ["rmsnorm", "qkv", "quant", "o", "rmsnorm", "gate_up", "swiglu", "down"]
    # origin: the previous down's last CTA end = its start + 35000 - 500 + 300 (4 CTAs): 200 ns before this layer
    qkv_row, o_row = rows[1], rows[3]
    assert qkv_row["enter"]["first"] == pytest.approx(5.0 + 0.2 - 40.0)
    assert all(row["layers"] == 6 for row in rows)  # middle layers 2..8 but the one without its SwiGLU
    assert qkv_row["wait"]["first"] == pytest.approx(5.0 + 0.2 + 1.0)
    assert qkv_row["stage"]["last"] == pytest.approx(5.0 + 0.2 + 2.0)
    assert o_row["stream"]["median"] == pytest.approx(5.2 + 15 + 40 + 12 - 0.9)
    assert o_row["end"]["last"] == pytest.approx(5.2 + 15 + 40 + 12 - 0.5 + 0.3)
    assert "stage" not in rows[0] and "stream" not in rows[0]
    pairs = {(p["before"], p["between"], p["after"]): p for p in module.handoffs(layers)}
    assert set(pairs) == {("qkv", "quant", "o"), ("o", "rmsnorm", "gate_up"), ("gate_up", "swiglu", "down"),
                          ("down", "rmsnorm", "qkv")}
    # gate_up's CTA on SM s enters at its start + 100 s; o's left SM s at o's start + 12000 - 500 + 100 s
    assert pairs[("o", "rmsnorm", "gate_up")]["median_us"] == pytest.approx(5.0 + 0.5)
    # PDL releases: a launch's first wait at its start + 1 us, the last CTA of a launch of g CTAs ending at its end
    # - 0.5 + 0.1 (g - 1) us; the RMSNorms entered 27.7 / 9.3 us before the GEMM before them ended, every other
    # launch's median CTA after it. qkv -> quantization (attention between) is left out.
    released = {(r["before"], r["after"]): r for r in module.releases(layers)}
    expected = {("down", "rmsnorm"): (1.2, True), ("rmsnorm", "qkv"): (1.4, False), ("quant", "o"): (1.5, False),
                ("o", "rmsnorm"): (1.2, True), ("rmsnorm", "gate_up"): (1.4, False),
                ("gate_up", "swiglu"): (1.2, False), ("swiglu", "down"): (1.3, False)}
    assert set(released) == set(expected)
    for pair, (us, settled) in expected.items():
        row = released[pair]
        assert row["median_us"] == pytest.approx(us) and row["p90_us"] == pytest.approx(us)
        assert row["settled" if settled else "unsettled"] == (pytest.approx(us), 6)
        assert row["unsettled" if settled else "settled"] is None
    by_sm = {row["gemm"]: row for row in module.stream_ends_by_sm(layers)}
    assert by_sm["gate_up"]["fast_sms"] == [0] and by_sm["gate_up"]["percentiles"][0] == pytest.approx(-5.0)
    assert all(by_sm[g]["fast_sms"] == [] and by_sm[g]["percentiles"][0] == 0 for g in ("qkv", "o", "down"))
    packing = {row["kernel"]: row for row in module.elementwise_packing(layers)}
    assert list(packing) == ["rmsnorm -> qkv", "quant -> o", "rmsnorm -> gate_up", "swiglu -> down"]
    assert packing["rmsnorm -> qkv"]["most_per_sm"] == 2 and packing["rmsnorm -> qkv"]["sms"] == 1
    # Its CTAs end 3.5 and 3.6 us after its wait (start + 1 us), in the 7 middle layers (with the short one)
    assert packing["rmsnorm -> qkv"]["end_us_by_count"] == {2: (pytest.approx(3.55), 14)}
    assert packing["swiglu -> down"]["most_per_sm"] == 1 and packing["swiglu -> down"]["sms"] == 3
    # Spans ending with each GEMM: from the GEMM before, or from the quantization's entry after attention.
    spans = module.bandwidth_spans(rows, module.gemm_classes(shard), copy_gbps=1.0)  # 1 byte a ns
    assert [span["span"] for span in spans] == ["rmsnorm, qkv", "quant, o", "rmsnorm, gate_up", "swiglu, down"]
    assert spans[1]["start"] == pytest.approx(5.2 + 15) and spans[1]["us"] == pytest.approx(40 + 12 - 0.5 + 0.3)
    assert spans[2]["start"] == pytest.approx(o_row["end"]["last"])
    assert spans[0]["at_copy_bw_us"] == pytest.approx(64 * 64 / 1e3)
    assert spans[3]["over_us"] == pytest.approx(spans[3]["us"] - 64 * 96 / 1e3)
    assert "Spans ending" not in module.summarize_file(path)  # the run measured no bandwidth
    text = module.summarize_file(path, copy_gbps=1.0)
    assert "made-up GPU, batch 2, ours, replay0: 11 layers traced" in text and "Spans ending" in text
    own, rest = module.parse_args(["--variant", "late-flood:qkv:A=1,B=2", "--variant", "late-flood:C=3",
                                   "--batch", "32"])
    assert own.variants == {"late-flood": {"qkv": {"A": "1", "B": "2"}, "all": {"C": "3"}}}
    assert rest == ["--batch", "32"]
    for bad in ("a b:qkv:A=1", "x:attention:A=1", "x:qkv:A"):
        with pytest.raises(SystemExit):
            module.parse_args(["--variant", bad])


def test_env_variants_parsed():
    """decode_attribution.py's --env and decode_trace.py's --variant: LABEL:[GEMM:]KEY=VALUE[,KEY=VALUE], the specs
    of one label merged into one variant (GEMM classes and "all" for every launch), a malformed spec named."""
    module = benchmark_module("decode_attribution")
    assert module.env_variants(["co:qkv:A=1,B=2", "co:C=3", "co:gate_up:A=4", "plain:o:W=2"]) == {
        "co": {"qkv": {"A": "1", "B": "2"}, "all": {"C": "3"}, "gate_up": {"A": "4"}}, "plain": {"o": {"W": "2"}}}
    for bad in ("nolabel", ":A=1", "x:qkv:", "x:qkv:A", "x:attention:A=1", "x:A=1,"):
        with pytest.raises(ValueError, match="expected LABEL"):
            module.env_variants([bad])
