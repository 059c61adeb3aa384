"""skinny_gemm against reference.py's float64 GEMM: out = (a @ b^T) * scale_a * scale_b (+ bias).

The op takes M <= 32; the Python function routes M > 32 to torch (M = 33..64 below exercise that path).
"""

import os

import pytest
import torch

from .helpers import FP8_DTYPES, assert_bitwise_equal, opcheck_utils, poisoned, row_padded

OPERAND_DTYPES = (torch.float16, torch.bfloat16, *FP8_DTYPES)
OPERAND_IDS = ("fp16", "bf16", "e4m3fn", "e4m3fnuz")
# (N, K): odd and tiny sizes, sizes off the usual multiples of 16, and one long K.
NK_SHAPES = ((1, 1), (17, 33), (33, 17), (1000, 1000), (129, 4097))


def make_operands(m, n, k, dtype, device, bias, pad=0):
    """a [M, K], b [N, K] (row-padded by `pad`), their scales and bias. FP8 operands get random fp32 scales and
    values spread over the FP8 range; the output is bf16 for FP8 e4m3fnuz and fp16 otherwise."""
    a, b = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
    scale_a = scale_b = None
    if dtype in FP8_DTYPES:
        a, b = (8 * a).to(dtype), (8 * b).to(dtype)
        scale_a = torch.rand(1, device=device) * 0.1 + 0.01
        scale_b = torch.rand(1, device=device) * 0.1 + 0.01
        out_dtype = torch.bfloat16 if dtype == torch.float8_e4m3fnuz else torch.float16
    else:
        a, b = a.to(dtype), b.to(dtype)
        out_dtype = dtype
    if pad:
        a, b = row_padded(a, pad, fill=0), row_padded(b, pad, fill=0)
    bias_t = torch.randn(n, device=device).to(out_dtype) if bias else None
    return a, b, scale_a, scale_b, bias_t, out_dtype


def wgmma_may_run(a) -> bool:
    """Whether skinny_gemm may multiply `a` with Hopper's wgmma (skinny_gemm_tma_plan.cuh: OCP e4m3 above 8
    tokens, or at any M under FP8DK_SKINNY_TMA_QGMMA=1; never under FP8DK_SKINNY_TMA=0 or _QGMMA=0)."""
    if a.device.type != "cuda" or torch.version.hip is not None or a.dtype != torch.float8_e4m3fn:
        return False
    if torch.cuda.get_device_capability(a.device)[0] != 9 or os.environ.get("FP8DK_SKINNY_TMA") == "0":
        return False
    forced = os.environ.get("FP8DK_SKINNY_TMA_QGMMA")
    return forced == "1" if forced in ("0", "1") else a.shape[0] > 8


# wgmma sums the products of FP8 operands with fewer bits than fp32 (about 14, as users of Hopper's FP8 tensor
# cores document), so where it may run the element bound allows 2^-14 of the largest product per K step. It
# still catches a lost K step or a misplaced fragment; how close that path must be is the accuracy rule
# (test_skinny_gemm_gpu.py::test_accuracy_against_scaled_mm), not this bound.
WGMMA_ACCUMULATION_BITS = 14


def assert_gemm_close(out, a, b, scale_a, scale_b, bias, reference):
    """Against the float64 reference rounded once. The op (M <= 32): relative error norm well under 1e-2 and
    every element within 1 ulp of the output dtype plus the worst-case error of an fp32 accumulation over K
    (each of K products off by at most 2^-22 of the largest; 2^-14 where wgmma may run). The torch route
    (M > 32) only within 1e-2 in norm: cuBLAS may reduce split-K partial sums in 16 bits."""
    ref = reference.skinny_gemm_ref(a, b, scale_a, scale_b, bias, out.dtype)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if out.numel() == 0:
        return
    eps = torch.finfo(out.dtype).eps
    out, ref = out.cpu().double(), ref.cpu().double()
    assert not out.isnan().any(), "NaN in the output (an element left unwritten?)"
    error = ((out - ref).norm() / ref.norm()).item() if ref.norm() > 0 else 0.0
    if a.shape[0] > 32:
        assert error < 1e-2, f"relative error norm {error:.2e} of torch's GEMM"
        return
    assert error < 5e-3, f"relative error norm {error:.2e}"
    scale = scale_a.item() * scale_b.item() if scale_a is not None else 1.0
    accumulation_bits = WGMMA_ACCUMULATION_BITS if wgmma_may_run(a) else 22
    accumulation = a.shape[1] * 2.0**-accumulation_bits * a.double().abs().max().item() * b.double().abs().max().item() * scale
    torch.testing.assert_close(out, ref, rtol=eps, atol=accumulation)


def compute(kernel, a, b, scale_a, scale_b, bias, out_dtype):
    """The raw op into a NaN-poisoned out where it applies (M <= 32), the Python function (torch) beyond."""
    if a.shape[0] > 32:
        return kernel.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)
    out = poisoned((a.shape[0], b.shape[0]), out_dtype, a.device)
    kernel.ops.skinny_gemm(out, a, b, scale_a, scale_b, bias)
    return out


@pytest.mark.parametrize("m", range(65))
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_every_m(kernel, device, dtype, m):
    """Every M the op takes (0..32) and the torch route (33..64), on row-padded a and b; bias on even M."""
    a, b, scale_a, scale_b, bias, out_dtype = make_operands(m, 17, 257, dtype, device, bias=m % 2 == 0, pad=5)
    out = compute(kernel, a, b, scale_a, scale_b, bias, out_dtype)
    assert_gemm_close(out, a, b, scale_a, scale_b, bias, kernel.reference)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("m", (1, 7, 32, 48))
@pytest.mark.parametrize("n,k", NK_SHAPES, ids=[f"n{n}_k{k}" for n, k in NK_SHAPES])
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_shapes(kernel, device, dtype, n, k, m, bias):
    a, b, scale_a, scale_b, bias_t, out_dtype = make_operands(m, n, k, dtype, device, bias)
    out = compute(kernel, a, b, scale_a, scale_b, bias_t, out_dtype)
    assert_gemm_close(out, a, b, scale_a, scale_b, bias_t, kernel.reference)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_deterministic(kernel, device, dtype):
    """The same inputs give bitwise-identical outputs (no atomics-order dependence)."""
    a, b, scale_a, scale_b, bias, out_dtype = make_operands(32, 1000, 4097, dtype, device, bias=True)
    first = kernel.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)
    for _ in range(3):
        assert_bitwise_equal(kernel.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype), first, "rerun")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("m", (4, 40), ids=["op", "torch_route"])
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_python_api_defaults(kernel, device, dtype, m):
    """out_dtype defaults: the operands' dtype for 16-bit; for FP8 the bias's dtype, else float16."""
    a, b, scale_a, scale_b, bias, _ = make_operands(m, 24, 64, dtype, device, bias=True)
    if dtype in FP8_DTYPES:
        bias = bias.bfloat16()
        assert kernel.skinny_gemm(a, b, scale_a, scale_b).dtype == torch.float16
    out = kernel.skinny_gemm(a, b, scale_a, scale_b, bias)
    assert out.dtype == (bias.dtype if dtype in FP8_DTYPES else dtype) and out.shape == (m, 24)
    assert_gemm_close(out, a, b, scale_a, scale_b, bias, kernel.reference)


# ------------------------------------------------------------------------------------------------ bad inputs


def _bad_cases(device):
    """(id, arguments of the raw skinny_gemm op, message the error must contain)."""
    def t(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=device).to(dtype)

    fn, fnuz = torch.float8_e4m3fn, torch.float8_e4m3fnuz
    a, b, out = t(4, 64), t(8, 64), t(4, 8)
    a8, b8 = t(4, 64, dtype=fn), t(8, 64, dtype=fn)
    s = torch.ones(1, device=device)
    return [
        ("M=33", (t(33, 8), t(33, 64), b, None, None, None), "a must have at most 32 rows"),
        ("3-D a", (out, t(1, 4, 64), b, None, None, None), "a must be 2-D"),
        ("1-D b", (out, a, t(64), None, None, None), "b must be 2-D"),
        ("K mismatch", (out, a, t(8, 32), None, None, None), "must share K"),
        ("fp32 a", (out, a.float(), b.float(), None, None, None), "a must be float16, bfloat16, float8_e4m3fn"),
        ("a/b dtypes", (out, a, b.half(), None, None, None), "a and b must have the same dtype"),
        ("mismatched fp8 flavours", (out, a8, t(8, 64, dtype=fnuz), s, s, None), "same FP8 flavour"),
        ("fp8 without scales", (out, a8, b8, None, None, None), "FP8 operands need scale_a and scale_b"),
        ("fp8 without scale_b", (out, a8, b8, s, None, None), "FP8 operands need scale_a and scale_b"),
        ("scales with 16-bit", (out, a, b, s, s, None), "only for FP8 operands"),
        ("scale_a with 2 elements", (out, a8, b8, torch.ones(2, device=device), s, None),
         "scale_a must have exactly one element"),
        ("fp16 scale_b", (out, a8, b8, s, s.half(), None), "scale_b must be a float32 tensor"),
        ("fp8 out", (out.to(fn), a8, b8, s, s, None), "out must be float16 or bfloat16"),
        ("fp32 out", (out.float(), a8, b8, s, s, None), "out must be float16 or bfloat16"),
        ("16-bit out dtype", (out.half(), a, b, None, None, None), "out must have the dtype of a and b"),
        ("out shape", (t(4, 9), a, b, None, None, None), r"out must have shape \[4, 8\]"),
        ("bias shape", (out, a, b, None, None, t(9)), r"bias must have shape \[8\]"),
        ("bias dtype", (out, a, b, None, None, t(8).half()), "bias must have the out dtype"),
        ("fp32 bias", (out, a8, b8, s, s, t(8).float()), "bias must have the out dtype"),
        ("strided bias", (out, a, b, None, None, t(16)[::2]), "bias must be contiguous"),
        ("non-contiguous last dim of b", (out, a, t(64, 8).t(), None, None, None),
         "b must be contiguous in its last"),
        ("non-contiguous last dim of a", (out, t(64, 4).t(), b, None, None, None),
         "a must be contiguous in its last"),
    ]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", range(len(_bad_cases("cpu"))), ids=[c[0] for c in _bad_cases("cpu")])
def test_rejects(kernel, device, case):
    _, args, match = _bad_cases(device)[case]
    with pytest.raises(RuntimeError, match=match):
        kernel.ops.skinny_gemm(*args)


@pytest.mark.parametrize("m", (4, 40), ids=["op", "torch_route"])
def test_wrapper_rejects(kernel, device, m):
    a8 = torch.randn(m, 64, device=device).to(torch.float8_e4m3fn)
    b8 = torch.randn(8, 64, device=device).to(torch.float8_e4m3fn)
    a, b, s = a8.half(), b8.half(), torch.ones(1, device=device)
    with pytest.raises(ValueError, match="FP8 operands need scale_a and scale_b"):
        kernel.skinny_gemm(a8, b8)
    with pytest.raises(ValueError, match="only for FP8 operands"):
        kernel.skinny_gemm(a, b, s, s)
    with pytest.raises(ValueError, match="out_dtype must be torch.float16 or torch.bfloat16"):
        kernel.skinny_gemm(a8, b8, s, s, out_dtype=torch.float32)
    with pytest.raises(ValueError, match="out_dtype must be a's dtype"):
        kernel.skinny_gemm(a, b, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a must be 2-D"):
        kernel.skinny_gemm(a[None], b)
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        kernel.skinny_gemm(a, b.tolist())


# ---------------------------------------------------------------------------------- torch.library / compile


@pytest.mark.kernels_ci
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_opcheck(kernel, device, dtype, bias):
    a, b, scale_a, scale_b, bias_t, out_dtype = make_operands(5, 24, 48, dtype, device, bias)
    args = (torch.empty(5, 24, dtype=out_dtype, device=device), a, b, scale_a, scale_b, bias_t)
    torch.library.opcheck(kernel.ops.skinny_gemm, args, test_utils=opcheck_utils(*args))


@pytest.mark.parametrize("m", (5, 40), ids=["op", "torch_route"])
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float8_e4m3fn), ids=("bf16", "e4m3fn"))
def test_torch_compile(kernel, device, dtype, m):
    a, b, scale_a, scale_b, bias, out_dtype = make_operands(m, 24, 48, dtype, device, bias=True)

    def linear(a, b, scale_a, scale_b, bias):
        return kernel.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)

    compiled = torch.compile(linear, fullgraph=True)(a, b, scale_a, scale_b, bias)
    assert_bitwise_equal(compiled, linear(a, b, scale_a, scale_b, bias), "compiled output")


@pytest.mark.parametrize("name, part", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200")])
def test_routing_part_traces_into_one_graph(kernel_cpu, monkeypatch, name, part):
    """routing.py tells an H100 from an H200 by the device's name, which torch.compile cannot put in a graph:
    the lookup must run while tracing (a fullgraph compile of the wrapper failed on an H100 when it did not).
    Checked here with the CUDA device queries mocked, on the GPU by test_torch_compile_gpu."""
    routing = kernel_cpu.routing
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
    routing._hopper_part_of.cache_clear()
    try:
        def tagged(x):
            return x + (1.0 if routing._hopper_part(0) == "h200" else 2.0)

        torch._dynamo.reset()  # the part is a constant of the compiled code: the previous case's would be reused
        got = torch.compile(tagged, fullgraph=True, backend="eager")(torch.zeros(2))
    finally:
        routing._hopper_part_of.cache_clear()
        torch._dynamo.reset()
    assert got.tolist() == ([1.0, 1.0] if part == "h200" else [2.0, 2.0])


def test_routing_lookup_traces_with_a_symbolic_token_count(kernel_cpu):
    """Under torch.compile with dynamic shapes M is symbolic: the tables' lookup must trace without a graph
    break for both parts, measured and unmeasured shapes alike (`m in range(...)` did not: the H200's default
    for unmeasured shapes failed test_torch_compile_gpu), and decide as it does eagerly."""
    routing = kernel_cpu.routing
    shapes = [(2304, 16384), (8192, 28672), (28672, 4096), (6144, 4096), (2304, 2048), (4096, 4096), (32768, 8192)]

    def decisions(x):
        m = x.shape[0]
        flags = [routing._scaled_mm_faster(part, m, n, k, 1) for part in ("h100", "h200") for n, k in shapes]
        return x + sum(float(f) * 2.0 ** i for i, f in enumerate(flags))

    torch._dynamo.reset()
    try:
        compiled = torch.compile(decisions, fullgraph=True, backend="eager", dynamic=True)
        for m in (1, 4, 5, 12, 13, 21, 32):
            x = torch.zeros(m, 2)
            assert torch.equal(compiled(x), decisions(x)), m
    finally:
        torch._dynamo.reset()
    # And what the tables say: the H200 never hands 405B's four GEMMs to torch._scaled_mm (the decode step's
    # measurement), 70B down above 12 tokens, 8B gate_up above 20; the H100 an unmeasured shape under 24 MiB above
    # 4 tokens, one of 24 MiB or more never.
    for n, k in ((2304, 16384), (16384, 2048), (13312, 16384), (16384, 6656)):
        assert not any(routing._scaled_mm_faster("h200", m, n, k, 1) for m in range(1, 33))
    assert [routing._scaled_mm_faster("h200", m, 8192, 28672, 1) for m in (12, 13)] == [False, True]
    assert [routing._scaled_mm_faster("h200", m, 28672, 4096, 1) for m in (20, 21)] == [False, True]
    assert [routing._scaled_mm_faster("h100", m, 4096, 4096, 1) for m in (4, 5)] == [False, True]
    assert not any(routing._scaled_mm_faster("h100", m, 32768, 8192, 1) for m in range(1, 33))


# ------------------------------------------------------------------------------------ the CPU route for M > 32


@pytest.mark.parametrize("mkldnn", [True, False], ids=["onednn_on", "onednn_off"])
@pytest.mark.parametrize("dtype", OPERAND_DTYPES, ids=OPERAND_IDS)
def test_cpu_torch_route_any_cpu(kernel_cpu, dtype, mkldnn, monkeypatch):
    """M > 32 on CPU must not depend on the CPU model: torch._scaled_mm goes through oneDNN on CPUs with AMX
    (which rejects float8_e4m3fnuz) and emulates elsewhere, so the wrapper never calls it on CPU (it raises
    here if called). torch.backends.mkldnn is the switch torch's own CPU GEMMs (F.linear) consult to choose
    oneDNN on CPUs that have its fast paths; both settings must meet the contract."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch._scaled_mm called for a CPU tensor")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", mkldnn)
    a, b, scale_a, scale_b, bias, out_dtype = make_operands(48, 40, 96, dtype, "cpu", bias=True)
    out = kernel_cpu.skinny_gemm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)
    assert_gemm_close(out, a, b, scale_a, scale_b, bias, kernel_cpu.reference)
