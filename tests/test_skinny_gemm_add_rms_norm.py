"""skinny_gemm_add_rms_norm: skinny_gemm, then fused_add_rms_norm on its output.

Its definition is that composition (reference.skinny_gemm_add_rms_norm_ref). Everywhere but Hopper's fused kernel
the op runs the two ops, so the tests ask for their bytes; where the fused kernel runs (one 128-row output tile
per SM: N about 128 x the SM count, FP8 operands and output), the residual must still be the composition's bit
for bit and the FP8 output may differ by one step on a few elements, where the sum of squares, added in another
order, rounds differently. The fused cases run on the GPU only (skipping elsewhere) and check which kernels ran.
"""

import math

import pytest
import torch

from .helpers import FP8_DTYPES, assert_bitwise_equal, assert_matches_reference, opcheck_utils

EPS = 1e-5
# Where the fused kernel's FP8 bytes may differ from the composition's (one step each): the inverse rms of a
# token may round to a neighbour, which moves the outputs that sit near a rounding boundary.
FUSED_MISMATCH_FRACTION = 0.01


def make_inputs(m, n, k, fp8, out_16bit, device, bias=False, seed=0):
    """FP8 operands of the flavour `fp8` (or 16-bit ones when fp8 is None) with their scales, a residual of
    `out_16bit` about as large as the GEMM's output, the norm weight and the FP8 output's scale."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen)
    b = torch.randn(n, k, generator=gen) / math.sqrt(k)
    scale_a = scale_b = None
    if fp8 is not None:
        a, b = (8 * a).to(fp8), (8 * b).to(fp8)
        scale_a, scale_b = torch.tensor([0.125]), torch.tensor([0.125])
    else:
        a, b = a.to(out_16bit), b.to(out_16bit)
    residual = torch.randn(m, n, generator=gen).to(out_16bit)
    weight = (1 + 0.1 * torch.randn(n, generator=gen)).to(out_16bit)
    bias_t = (0.1 * torch.randn(n, generator=gen)).to(out_16bit) if bias else None
    scale = torch.tensor([2.5 / 448])
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return tuple(map(move, (a, b, scale_a, scale_b, bias_t, residual, weight, scale)))


def composed(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale, out_dtype):
    """The two ops, on a copy of the residual: (out, new residual)."""
    residual = residual.clone()
    h = kernel.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=residual.dtype)
    return kernel.fused_add_rms_norm(h, residual, weight, EPS, scale, out_dtype), residual


def fused_call(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale, out_dtype):
    residual = residual.clone()
    out = kernel.skinny_gemm_add_rms_norm(a, b, residual, weight, EPS, scale_a, scale_b, bias, scale, out_dtype)
    return out, residual


@pytest.mark.parametrize("bias", (False, True), ids=("no_bias", "bias"))
@pytest.mark.parametrize("m", (1, 7, 16, 32, 40))
@pytest.mark.parametrize("fp8, out_16bit, quantized", [
    (torch.float8_e4m3fn, torch.bfloat16, True),
    (torch.float8_e4m3fnuz, torch.float16, True),
    (torch.float8_e4m3fn, torch.float16, False),
    (None, torch.bfloat16, True),
], ids=("e4m3fn-bf16-fp8", "e4m3fnuz-fp16-fp8", "e4m3fn-fp16-16bit", "bf16-fp8"))
def test_composition(kernel, device, fp8, out_16bit, quantized, m, bias):
    """Shapes no fused kernel takes (N far from 128 per SM; M = 40 goes to torch's GEMM): the composition, byte
    for byte, and every element written."""
    a, b, scale_a, scale_b, bias_t, residual, weight, scale = make_inputs(m, 200, 72, fp8, out_16bit, device, bias)
    scale = scale if quantized else None
    out_dtype = (fp8 or torch.float8_e4m3fn) if quantized else None
    want, want_residual = composed(kernel, a, b, scale_a, scale_b, bias_t, residual, weight, scale, out_dtype)
    got, got_residual = fused_call(kernel, a, b, scale_a, scale_b, bias_t, residual, weight, scale, out_dtype)
    assert_bitwise_equal(got_residual, want_residual, "residual")
    assert_bitwise_equal(got, want, "out")


def test_against_reference(kernel, device):
    """The float64 reference of the definition: the residual within an ulp of the GEMM's output and of the sum
    (the add may cancel, so not in ulps of the sum alone), the output within the FP8 rounding that follows."""
    a, b, scale_a, scale_b, _, residual, weight, scale = make_inputs(5, 96, 256, torch.float8_e4m3fn,
                                                                     torch.bfloat16, device)
    reference = kernel.reference
    h = reference.skinny_gemm_ref(a.cpu(), b.cpu(), scale_a.cpu(), scale_b.cpu(), None, torch.bfloat16).float()
    want, want_residual = reference.skinny_gemm_add_rms_norm_ref(
        a.cpu(), b.cpu(), residual.cpu(), weight.cpu(), EPS, scale_a.cpu(), scale_b.cpu(), None, scale.cpu(),
        torch.float8_e4m3fn)
    got, got_residual = fused_call(kernel, a, b, scale_a, scale_b, None, residual, weight, scale,
                                   torch.float8_e4m3fn)
    bf16_ulp = 2.0 ** -7  # relative spacing of bfloat16 (8 significant bits)
    bound = bf16_ulp * (h.abs() + want_residual.float().abs())
    assert ((got_residual.cpu().float() - want_residual.float()).abs() <= bound).all()
    err = (got.cpu().float() - want.float()).norm() / want.float().norm()
    assert err < 0.05, f"relative error {err:.3g} against the float64 reference"


def test_empty(kernel, device):
    a, b, scale_a, scale_b, _, residual, weight, scale = make_inputs(0, 64, 32, torch.float8_e4m3fn,
                                                                     torch.bfloat16, device)
    out = kernel.skinny_gemm_add_rms_norm(a, b, residual, weight, EPS, scale_a, scale_b, None, scale)
    assert out.shape == (0, 64) and out.dtype == torch.float8_e4m3fn


REJECTS = [
    ("residual dtype", lambda x: dict(x, residual=x["residual"].float()), "residual must be float16 or bfloat16"),
    ("residual shape", lambda x: dict(x, residual=x["residual"][:, :32]), r"residual must have shape \[4, 64\]"),
    ("residual strided", lambda x: dict(x, residual=torch.empty_like(x["residual"].repeat(1, 2))[:, ::2]),
     "residual must be contiguous"),
    ("weight shape", lambda x: dict(x, weight=x["weight"][:32]), r"weight must have shape \[64\]"),
    ("weight dtype", lambda x: dict(x, weight=x["weight"].half()), "weight must have the residual dtype"),
    ("out dtype", lambda x: dict(x, out=x["out"].view(torch.int8)), "out must be float8_e4m3fn or float8_e4m3fnuz"),
    ("scale dtype", lambda x: dict(x, scale=x["scale"].double()), "scale must be a float32 tensor"),
    ("no scale_b", lambda x: dict(x, scale_b=None), "FP8 operands need scale_a and scale_b"),
    ("k mismatch", lambda x: dict(x, b=x["b"][:, :16]), "must share K"),
    ("eps", lambda x: dict(x, eps=-1.0), "eps must be finite and >= 0"),
]


@pytest.mark.parametrize("case", REJECTS, ids=[c[0] for c in REJECTS])
def test_rejects(kernel, device, case):
    _, change, message = case
    a, b, scale_a, scale_b, _, residual, weight, scale = make_inputs(4, 64, 32, torch.float8_e4m3fn,
                                                                     torch.bfloat16, device)
    x = dict(out=torch.empty(4, 64, dtype=torch.float8_e4m3fn, device=device), a=a, b=b, scale_a=scale_a,
             scale_b=scale_b, bias=None, residual=residual, weight=weight, eps=EPS, scale=scale)
    x = change(x)
    with pytest.raises(RuntimeError, match=message):
        kernel.ops.skinny_gemm_add_rms_norm(**x)


def test_opcheck(kernel, device):
    a, b, scale_a, scale_b, bias, residual, weight, scale = make_inputs(5, 48, 64, torch.float8_e4m3fn,
                                                                        torch.bfloat16, device, bias=True)
    args = (torch.empty(5, 48, dtype=torch.float8_e4m3fn, device=device), a, b, scale_a, scale_b, bias, residual,
            weight, EPS, scale)
    torch.library.opcheck(kernel.ops.skinny_gemm_add_rms_norm, args, test_utils=opcheck_utils(*args))


def test_torch_compile(kernel, device):
    a, b, scale_a, scale_b, bias, residual, weight, scale = make_inputs(5, 48, 64, torch.float8_e4m3fn,
                                                                        torch.bfloat16, device, bias=True)

    def step(a, residual):
        return kernel.skinny_gemm_add_rms_norm(a, b, residual, weight, EPS, scale_a, scale_b, bias, scale)

    eager_residual, compiled_residual = residual.clone(), residual.clone()
    compiled = torch.compile(step, fullgraph=True)(a, compiled_residual)
    assert_bitwise_equal(compiled, step(a, eager_residual), "compiled output")
    assert_bitwise_equal(compiled_residual, eager_residual, "compiled residual")


# ---------------------------------------------------------------------------------- the fused kernel (Hopper)


def fused_kernel_shapes():
    """(N, K) whose plan the fused kernel takes on this GPU: 128-row tiles at one per SM (all of them, and one
    fewer with a partial last tile), K of 405B's O and down projections."""
    if not torch.cuda.is_available() or torch.version.hip is not None:
        return []
    if torch.cuda.get_device_capability()[0] != 9:
        return []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = sms - sms % 4  # 128 on an H100 SXM (132 SMs), as 405B's N = 16384
    return [(128 * tiles, 2048), (128 * (tiles - 1) + 48, 6656)]


def needs_fused_kernel(device):
    if device != "cuda" or not fused_kernel_shapes():
        pytest.skip("the fused kernel runs on Hopper (sm_90) GPUs only")


def kernel_names(fn):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    if not names:
        pytest.skip("the profiler recorded no kernel (CUPTI unavailable?)")
    return names


@pytest.mark.parametrize("m", (1, 5, 8, 9, 16, 24, 32))
@pytest.mark.parametrize("fp8, out_16bit", [(torch.float8_e4m3fn, torch.bfloat16),
                                            (torch.float8_e4m3fnuz, torch.float16)], ids=("e4m3fn", "e4m3fnuz"))
@pytest.mark.parametrize("shape", range(2), ids=("whole_tiles", "partial_tile"))
def test_fused_kernel(kernel, device, shape, fp8, out_16bit, m):
    needs_fused_kernel(device)
    n, k = fused_kernel_shapes()[shape]
    a, b, scale_a, scale_b, bias, residual, weight, scale = make_inputs(m, n, k, fp8, out_16bit, device,
                                                                        bias=shape == 1, seed=m)
    want, want_residual = composed(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale, fp8)
    # Through the raw op into a NaN-poisoned output: every element must be written.
    out = torch.full((m, n), float("nan"), device=device).to(fp8)
    got_residual = residual.clone()

    def run():
        kernel.ops.skinny_gemm_add_rms_norm(out, a, b, scale_a, scale_b, bias, got_residual, weight, EPS, scale)

    # The fused kernels: OCP e4m3 at every M; e4m3fnuz (mma.sync) where its plan keeps one warp column, M <= 8.
    fused = fp8 == torch.float8_e4m3fn or m <= 8
    names = kernel_names(run)
    assert any("skinny_gemm_tma_kernel" in x and x.split(">(")[0].endswith("true") for x in names) == fused, names
    assert any("rms_norm" in x for x in names) != fused, names
    assert_bitwise_equal(got_residual, want_residual, "residual")
    assert_matches_reference(out, want, max_ulps=1, max_fraction=FUSED_MISMATCH_FRACTION)


def test_fused_kernel_off(kernel, device):
    """FP8DK_SKINNY_FUSED_NORM=0: the composition, bit for bit, on the shape the fused kernel would take."""
    needs_fused_kernel(device)
    n, k = fused_kernel_shapes()[0]
    a, b, scale_a, scale_b, bias, residual, weight, scale = make_inputs(32, n, k, torch.float8_e4m3fn,
                                                                        torch.bfloat16, device)
    want, want_residual = composed(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale,
                                   torch.float8_e4m3fn)
    with kernel.tuning_overrides({"FP8DK_SKINNY_FUSED_NORM": "0"}):
        got, got_residual = fused_call(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale,
                                       torch.float8_e4m3fn)
    assert_bitwise_equal(got_residual, want_residual, "residual")
    assert_bitwise_equal(got, want, "out")


@pytest.mark.parametrize("m", (1, 32))
def test_fused_kernel_deterministic_and_graph(kernel, device, m):
    """Ten eager calls and ten replays of a captured call give the same bytes (the exchange's state is left ready
    for the next launch: no memset between them)."""
    needs_fused_kernel(device)
    n, k = fused_kernel_shapes()[0]
    a, b, scale_a, scale_b, bias, residual, weight, scale = make_inputs(m, n, k, torch.float8_e4m3fn,
                                                                        torch.bfloat16, device, seed=3)
    first, first_residual = fused_call(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale,
                                       torch.float8_e4m3fn)
    for _ in range(9):
        out, new_residual = fused_call(kernel, a, b, scale_a, scale_b, bias, residual, weight, scale,
                                       torch.float8_e4m3fn)
        assert_bitwise_equal(out, first, "rerun")
        assert_bitwise_equal(new_residual, first_residual, "rerun residual")
    graph_residual = residual.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch's graph docs ask
        kernel.skinny_gemm_add_rms_norm(a, b, residual.clone(), weight, EPS, scale_a, scale_b, bias, scale)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = kernel.skinny_gemm_add_rms_norm(a, b, graph_residual, weight, EPS, scale_a, scale_b, bias, scale)
    for _ in range(10):
        graph_residual.copy_(residual)
        graph.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(graph_out, first, "replay")
        assert_bitwise_equal(graph_residual, first_residual, "replay residual")
