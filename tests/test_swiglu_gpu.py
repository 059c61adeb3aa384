"""silu_and_mul on the GPU (CUDA or ROCm): what test_swiglu.py's contract cases (which also run on "cuda") do
not reach. Production widths and batch sizes, every alignment the launcher picks a vector width for, row
padding and misaligned base pointers, row counts past the grid's y limit, CUDA-graph capture and replay,
torch.compile, and the accuracy of the exp2-based silu against a float64 reference over every 16-bit gate
value (docs/swiglu_accuracy.md). Skips without a GPU.

    python -m pytest tests/test_swiglu_gpu.py -s     # -s shows the accuracy figures ([swiglu accuracy] lines)
"""

import math

import pytest
import torch

from .conftest import HAS_GPU, load_kernel
from .helpers import (
    DTYPES_16BIT,
    FP8_DTYPES,
    MAX_MISMATCH_FRACTION,
    QUANT_IDS,
    QUANT_OUT,
    assert_bitwise_equal,
    assert_matches_reference,
    opcheck_utils,
    poisoned,
    row_padded,
    saturating_scale,
)

pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")

DEVICE = "cuda"
# Widths: tiny and odd (scalar-width accesses, partial chunks), the production intermediate sizes per GPU
# (Llama-3.1-405B at TP8/TP4/TP2: 6656/13312/26624, Llama-3-8B: 14336) and a width that is a multiple of 4
# but not of 8 (8-byte accesses, up half not 16-byte aligned).
WIDTHS = (1, 7, 64, 4096, 4100, 6656, 13312, 14336, 26624)
ROW_COUNTS = (1, 3, 32, 257, 2048, 4096)
MAX_ELEMENTS = 1 << 23  # of the output: keeps the host-side comparison of the largest cases under a second
SHAPES = [(rows, d) for d in WIDTHS for rows in ROW_COUNTS if rows * d <= MAX_ELEMENTS]
# 16-bit outputs: "within 1 ulp" is the contract. The exp2/rcp silu sits within a few 2^-23 of the exact value
# (docs/swiglu_accuracy.md), so it rounds differently from torch's expf-based reference only where y is that
# close to a rounding midpoint: about 0.02% of fp16 values in simulation. 0.5% (and at least 4 elements, for
# small tensors) still fails a systematic error: truncation flips about half of them.
MAX_FRACTION_16BIT = 5e-3
MIN_ALLOWED_16BIT = 4


@pytest.fixture(scope="module")
def kernel():
    return load_kernel(None)


def make_input(rows, d, dtype):
    return 3 * torch.randn(rows, 2 * d, dtype=dtype, device=DEVICE)


def quant_args(reference, x, out_dtype):
    """(scale, out dtype): no scale for 16-bit out, one that saturates the top third of the FP8 range."""
    if out_dtype is None:
        return None, x.dtype
    return saturating_scale(reference.silu_and_mul_ref(x), out_dtype), out_dtype


def out_shape(x):
    return (*x.shape[:-1], x.shape[-1] // 2)


def assert_swiglu_matches(out, ref):
    """The contract's comparison: FP8 as in helpers (0.1% at 1 ulp), 16-bit within 1 ulp on at most
    MAX_FRACTION_16BIT of the elements."""
    if out.element_size() == 2:
        max_fraction = max(MAX_FRACTION_16BIT, MIN_ALLOWED_16BIT / max(out.numel(), 1))
    else:
        max_fraction = MAX_MISMATCH_FRACTION
    assert_matches_reference(out, ref, max_fraction=max_fraction)


def run_and_check(kernel, x, scale, out, dtype_out):
    kernel.ops.silu_and_mul(out, x, scale)
    assert_swiglu_matches(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_shapes(kernel, dtype, out_dtype, shape):
    """`shape` is (rows, d): the input is [rows, 2*d], the output poisoned before the call."""
    x = make_input(*shape, dtype)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    run_and_check(kernel, x, scale, poisoned(out_shape(x), dtype_out, DEVICE), dtype_out)


# Row padding in elements: 8 keeps every row 16-byte aligned; 4, 2 and 1 leave 8-, 4- and 2-byte alignment.
@pytest.mark.parametrize("in_pad", (8, 4, 2, 1))
@pytest.mark.parametrize("d", (7, 4096, 4100))
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_row_padding(kernel, dtype, out_dtype, d, in_pad):
    """Input rows padded (the gate/up GEMM's output may be), out rows padded too; NaN padding would leak into
    the output if read, and out's padding must stay untouched."""
    x = row_padded(make_input(33, d, dtype), pad=in_pad)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out = row_padded(poisoned(out_shape(x), dtype_out, DEVICE), pad=in_pad + 1)
    padding_before = out._base[..., out.shape[-1]:].clone()
    run_and_check(kernel, x, scale, out, dtype_out)
    assert_bitwise_equal(out._base[..., out.shape[-1]:], padding_before, "out's row padding")


@pytest.mark.parametrize("offsets", [(1, 0), (0, 1), (4, 8), (8, 4)], ids=lambda o: f"in+{o[0]},out+{o[1]}")
@pytest.mark.parametrize("d", (8, 4096, 4100))
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_misaligned_base(kernel, dtype, out_dtype, d, offsets):
    """Input and out starting `offsets` elements into their allocations (2-byte aligned, 8-byte aligned...):
    the launcher must narrow the accesses to what the pointers allow, never fault or skip elements."""
    rows, (in_off, out_off) = 5, offsets
    x_buf = torch.empty(rows * 2 * d + in_off, dtype=dtype, device=DEVICE)
    x = x_buf[in_off:].view(rows, 2 * d)
    x.copy_(make_input(rows, d, dtype))
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out_buf = poisoned((rows * d + out_off,), dtype_out, DEVICE)
    out = out_buf[out_off:].view(rows, d)
    run_and_check(kernel, x, scale, out, dtype_out)
    assert torch.isnan(out_buf[:out_off].float()).all(), "wrote before out's first element"


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
def test_3d_padded(kernel, out_dtype):
    """[batch, tokens, 2d] with padded rows: the leading dimensions collapse into one row stride."""
    x = row_padded(make_input(2 * 9, 1000, torch.bfloat16).view(2, 9, 2000), pad=24)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    run_and_check(kernel, x, scale, poisoned(out_shape(x), dtype_out, DEVICE), dtype_out)


def test_rows_past_grid_y_limit(kernel):
    """More row groups than the grid's y dimension holds (65535): the rest continue in z. Every row is
    checked for being written; rows around the 65535 boundary and at the end are compared in full."""
    rows, d = 65535 + 37, 2048  # 2048 columns: one row per block row, so 65572 row groups
    x = make_input(rows, d, torch.float16)
    scale = torch.tensor([0.05], device=DEVICE)
    out = poisoned((rows, d), torch.float8_e4m3fn, DEVICE)
    kernel.ops.silu_and_mul(out, x, scale)
    assert not torch.isnan(out.float()).any(), "rows left unwritten"
    for part in (slice(0, 8), slice(65535 - 8, 65535 + 8), slice(rows - 8, rows)):
        assert_swiglu_matches(out[part], kernel.reference.silu_and_mul_ref(x[part], scale, out.dtype))


@pytest.mark.parametrize("shape", [(0, 64), (0, 14), (2, 0, 64)], ids=str)
def test_no_rows(kernel, shape):
    x = torch.randn(shape, dtype=torch.float16, device=DEVICE)
    out = torch.empty(out_shape(x), dtype=torch.float8_e4m3fn, device=DEVICE)
    kernel.ops.silu_and_mul(out, x, torch.tensor([1.0], device=DEVICE))
    torch.cuda.synchronize()


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_extreme_gates(kernel, dtype, out_dtype):
    """The exp2 path at its edges: exp(-x) overflowing (x < -88.72 gives -0, like the reference's x / inf),
    the subnormal-reciprocal range -88.7 < x < -87.3, +-inf (silu(-inf) = NaN, as -inf / inf), NaN, zeros
    of both signs, subnormal gates, the largest finite values."""
    info = torch.finfo(dtype)
    gate_values = [-88.0, -87.5, -88.5, -88.6875, -88.75, -89.0, -90.0, -100.0, -1e4, -info.max, info.max, 87.5,
                   100.0, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, info.tiny, -info.tiny,
                   info.smallest_normal / 4, -info.smallest_normal / 4, 1e-3, -1e-3, 15.0, -15.0, 40.0, -40.0]
    gate = torch.tensor(gate_values, dtype=torch.float32).to(dtype)
    up = torch.tensor([1.0, -3.0, 2.0 ** 20, -(2.0 ** 60), 0.5, 1e30, 0.0], dtype=torch.float32).to(dtype)
    g, u = torch.meshgrid(gate, up, indexing="ij")  # every gate with every up
    x = torch.cat([g.reshape(1, -1), u.reshape(1, -1)], dim=1).to(DEVICE)
    scale = None if out_dtype is None else torch.tensor([2.0 ** -10], device=DEVICE)
    dtype_out = out_dtype or dtype
    run_and_check(kernel, x, scale, poisoned(out_shape(x), dtype_out, DEVICE), dtype_out)


@pytest.mark.parametrize("scale_value", [0.0, float("inf"), 1e-30, -0.5], ids=str)
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=str)
def test_unusual_scales(kernel, out_dtype, scale_value):
    """The kernel multiplies by 1/scale: scale 0 must give +-max and NaN for y = 0 (0/0), like the division."""
    x = make_input(4, 64, torch.bfloat16)
    x[0, :8] = 0
    scale = torch.tensor([scale_value], device=DEVICE)
    run_and_check(kernel, x, scale, poisoned(out_shape(x), out_dtype, DEVICE), out_dtype)


def test_rejects_mixed_devices(kernel):
    x = torch.randn(4, 64, dtype=torch.float16, device=DEVICE)
    with pytest.raises(RuntimeError, match="same device"):
        kernel.ops.silu_and_mul(torch.empty(4, 32, dtype=torch.float8_e4m3fn), x, torch.tensor([1.0], device=DEVICE))
    with pytest.raises(RuntimeError, match="same device"):
        kernel.ops.silu_and_mul(torch.empty(4, 32, dtype=torch.float8_e4m3fn, device=DEVICE), x, torch.tensor([1.0]))


# ---------------------------------------------------------------------------------- graphs and torch.compile


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
def test_cuda_graph(kernel, out_dtype):
    """Captured once, replayed with new input values and a new scale copied into the captured buffers: the
    scale is read on the device, so each replay quantizes with the current one."""
    rows, d, dtype = 32, 6656, torch.bfloat16
    x = make_input(rows, d, dtype)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out = torch.empty(rows, d, dtype=dtype_out, device=DEVICE)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        kernel.ops.silu_and_mul(out, x, scale)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel.ops.silu_and_mul(out, x, scale)
    for step in range(3):
        x.copy_(make_input(rows, d, dtype) * (step + 1))
        if scale is not None:
            scale.copy_(quant_args(kernel.reference, x, out_dtype)[0])
        out.copy_(poisoned(out.shape, dtype_out, DEVICE))
        graph.replay()
        torch.cuda.synchronize()
        assert_swiglu_matches(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
def test_torch_compile(kernel, out_dtype):
    """fullgraph=True: the wrapper (allocation + op) traces without a graph break; two batch sizes."""
    torch._dynamo.reset()

    def swiglu(x, scale):
        return kernel.silu_and_mul(x, scale=scale, out_dtype=out_dtype)

    compiled = torch.compile(swiglu, fullgraph=True)
    for rows in (3, 64):
        x = make_input(rows, 4096, torch.float16)
        scale, _ = quant_args(kernel.reference, x, out_dtype)
        assert_bitwise_equal(compiled(x, scale), swiglu(x, scale), "compiled output")


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
def test_opcheck(kernel, out_dtype):
    x = make_input(3, 4100, torch.bfloat16)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    args = (torch.empty(out_shape(x), dtype=dtype_out, device=DEVICE), x, scale)
    torch.library.opcheck(kernel.ops.silu_and_mul, args, test_utils=opcheck_utils(*args))


# ----------------------------------------------------------------------------------------------- accuracy


def silu_error_bound(gate: torch.Tensor) -> torch.Tensor:
    """docs/swiglu_accuracy.md: relative error of the kernel's fp32 y = silu(x) * up against the exact value,
    (5 + 0.65 max(-x, 0)) * 2^-23."""
    return (5 + 0.65 * (-gate).clamp(min=0)) * 2.0 ** -23


MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7}


def spacing(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Distance between adjacent `dtype` values around |v| (float64), subnormals included."""
    exponent = torch.floor(torch.log2(v.abs().clamp(min=torch.finfo(dtype).smallest_normal)))
    return torch.exp2(exponent - MANTISSA_BITS[dtype])


@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_accuracy_all_gates(kernel, dtype, record_property):
    """Every 16-bit gate value (all 65536 patterns) against 64 random up values, 16-bit out, compared with
    silu(x) * up in float64. Each output must be within half a spacing of the exact value plus the documented
    fp32 error bound (so a misrounded output is only allowed where the exact value lies that close to a
    rounding midpoint). Where exp(-x) overflows fp32 (x < -88.72) the contract's value is -0 * up, and the
    kernel must give exactly that. Prints the figures docs/swiglu_accuracy.md records."""
    rows = 64
    gate = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device=DEVICE).to(torch.int16).view(dtype)
    gate = gate.expand(rows, -1)
    up = torch.randn(rows, gate.shape[1], device=DEVICE).to(dtype)
    x = torch.cat([gate, up], dim=1)
    out = poisoned(out_shape(x), dtype, DEVICE)
    kernel.ops.silu_and_mul(out, x, None)

    ref = kernel.reference.silu_and_mul_ref(x)
    nan_out, nan_ref = torch.isnan(out), torch.isnan(ref)
    assert torch.equal(nan_out, nan_ref), "NaN positions differ from the reference (silu(-inf) and NaN gates)"
    mismatch_vs_ref = float(((out.view(torch.int16) != ref.view(torch.int16)) & ~nan_ref).float().mean())

    g, u = gate.double(), up.double()
    overflow = torch.isinf(torch.exp(-gate.float()))  # the contract's fp32 exp(-x) overflows: y is -0 * up
    exact = torch.where(overflow, -0.0 * u, g / (1 + torch.exp(-g)) * u)
    finite = torch.isfinite(g) & torch.isfinite(u) & (exact.abs() <= torch.finfo(dtype).max)
    assert torch.equal(out[overflow & finite].double(), exact[overflow & finite]), "x < -88.72 must give -0 * up"

    got, want = out.double()[finite], exact[finite]
    err = (got - want).abs()
    tiny = 4 * 2.0 ** -149  # fp32 subnormal rounding of y, far below any 16-bit spacing
    half = 0.5 * spacing(want, dtype)
    allowed = half + silu_error_bound(g[finite]) * want.abs() + tiny
    worst = int((err - allowed).argmax())
    assert err[worst] <= allowed[worst], (
        f"gate {g[finite][worst].item()!r} up {u[finite][worst].item()!r}: got {got[worst].item()!r}, exact "
        f"{want[worst].item()!r}; error {err[worst].item():.3e} > allowed {allowed[worst].item():.3e}")

    # Relative error where the output is a normal number (below, 16-bit underflow dominates), absolute error
    # where |y| <= 1 (above, the output's own spacing does).
    normal = want.abs() >= torch.finfo(dtype).smallest_normal
    unit = want.abs() <= 1
    # The smallest fp32 relative error that explains each output: zero where the output is correctly rounded.
    implied = ((err - half - tiny).clamp(min=0) / want.abs().clamp(min=1e-300))
    figures = {
        "max_abs_error_at_abs_y_le_1": float(err[unit].max()),
        "max_rel_error_normal_y": float((err[normal] / want[normal].abs()).max()),
        "max_error_in_output_ulps": float((err / (2 * half)).max()),
        "not_correctly_rounded_fraction": float((err > half).float().mean()),
        "implied_fp32_rel_error_max_in_2^-23": float(implied.max()) / 2.0 ** -23,
        "mismatch_vs_reference_fraction": mismatch_vs_ref,
    }
    for name, value in figures.items():
        record_property(f"{dtype}_{name}", value)
    print(f"\n[swiglu accuracy] {dtype} on {torch.cuda.get_device_name()}: "
          + ", ".join(f"{k} = {v:.4g}" for k, v in figures.items()))
    assert math.isfinite(figures["max_rel_error_normal_y"])
