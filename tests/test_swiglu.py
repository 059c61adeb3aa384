"""silu_and_mul against reference.py: silu(gate) * up in fp32, rounded to the input dtype or quantized to FP8."""

import pytest
import torch

from .helpers import (
    DTYPES_16BIT,
    QUANT_IDS,
    QUANT_OUT,
    ROW_SHAPES,
    assert_bitwise_equal,
    assert_matches_reference,
    opcheck_utils,
    poisoned,
    row_padded,
    row_shape_id,
    saturating_scale,
)


def make_input(rows, d, dtype, device):
    return 3 * torch.randn(rows, 2 * d, dtype=dtype, device=device)


def quant_args(reference, x, out_dtype):
    if out_dtype is None:
        return None, x.dtype
    return saturating_scale(reference.silu_and_mul_ref(x), out_dtype), out_dtype


def out_shape(x):
    return (*x.shape[:-1], x.shape[-1] // 2)


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=row_shape_id)
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_silu_and_mul(kernel, device, dtype, out_dtype, shape):
    """`shape` is (rows, d): the input is [rows, 2*d]."""
    x = make_input(*shape, dtype, device)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out = poisoned(out_shape(x), dtype_out, device)
    kernel.ops.silu_and_mul(out, x, scale)
    assert_matches_reference(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_strided_3d(kernel, device, dtype, out_dtype):
    """3-D input and out that are row-padded views of larger buffers, the padding left untouched."""
    x = row_padded(3 * torch.randn(2, 5, 2 * 1000, dtype=dtype, device=device), pad=16)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out = row_padded(poisoned(out_shape(x), dtype_out, device), pad=3)
    padding_before = out._base[..., out.shape[-1]:].clone()
    kernel.ops.silu_and_mul(out, x, scale)
    assert_matches_reference(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))
    assert_bitwise_equal(out._base[..., out.shape[-1]:], padding_before, "out's row padding")


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_special_values(kernel, device, dtype, out_dtype):
    """Saturation at +-max (+-inf included), NaN propagation, values far below the FP8 normal range."""
    big = torch.finfo(dtype).max
    gate = torch.tensor([200.0, 1.0, float("nan"), 1.0, 3.0, -1.0, 20.0, 1e-3, 0.0, -20.0], dtype=dtype)
    up = torch.tensor([300.0, float("inf"), 1.0, float("-inf"), float("nan"), 1e-4, -big, 1e-3, 5.0, 2.0], dtype=dtype)
    x = torch.cat([gate, up]).view(1, -1).to(device)
    scale = None if out_dtype is None else torch.tensor([0.25], device=device)
    dtype_out = out_dtype or dtype
    out = poisoned(out_shape(x), dtype_out, device)
    kernel.ops.silu_and_mul(out, x, scale)
    assert_matches_reference(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_python_api(kernel, device, dtype, out_dtype):
    x = 3 * torch.randn(4, 3, 2 * 96, dtype=dtype, device=device)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    out = kernel.silu_and_mul(x, scale=scale, out_dtype=out_dtype)
    assert out.shape == (4, 3, 96) and out.is_contiguous()
    assert_matches_reference(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


def test_default_fp8_flavour(kernel, device):
    x = torch.randn(2, 64, dtype=torch.float16, device=device)
    out = kernel.silu_and_mul(x, scale=torch.tensor([0.1], device=device))
    assert out.dtype == kernel.native_fp8_dtype(x.device)


# ------------------------------------------------------------------------------------------------ bad inputs


def _bad_cases(device):
    """(id, arguments of the raw silu_and_mul op, message the error must contain)."""
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    out = torch.empty(4, 32, dtype=x.dtype, device=device)
    fp8_out = torch.empty(4, 32, dtype=torch.float8_e4m3fnuz, device=device)
    scale = torch.tensor([0.1], device=device)
    return [
        ("fp32 input", (out.float(), x.float(), None), "input must be float16 or bfloat16"),
        ("odd last dim", (out, x[:, :63], None), "last dimension must be even"),
        ("non-contiguous last dim", (out[:, :16], x[:, ::2], None), "input must be contiguous in its last"),
        ("out shape", (torch.empty_like(x), x, None), r"out must have shape \[4, 32\]"),
        ("out dtype", (out.half(), x, None), "out must have the input dtype"),
        ("fp8 out without scale", (fp8_out, x, None), "out must have the input dtype"),
        ("16-bit out with scale", (out, x, scale), "out must be float8_e4m3fn or float8_e4m3fnuz"),
        ("scale with 2 elements", (fp8_out, x, torch.tensor([0.1, 0.2], device=device)),
         "scale must have exactly one element"),
        ("fp16 scale", (fp8_out, x, scale.half()), "scale must be a float32 tensor"),
        ("non-contiguous out", (torch.empty(4, 64, dtype=x.dtype, device=device)[:, ::2], x, None),
         "out must be contiguous in its last"),
    ]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", range(len(_bad_cases("cpu"))), ids=[c[0] for c in _bad_cases("cpu")])
def test_rejects(kernel, device, case):
    _, args, match = _bad_cases(device)[case]
    with pytest.raises(RuntimeError, match=match):
        kernel.ops.silu_and_mul(*args)


def test_wrapper_rejects(kernel, device):
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="even last dimension"):
        kernel.silu_and_mul(x[:, :63])
    with pytest.raises(ValueError, match="out_dtype must be x's dtype"):
        kernel.silu_and_mul(x, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="out_dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz"):
        kernel.silu_and_mul(x, scale=torch.tensor([0.1], device=device), out_dtype=torch.float16)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        kernel.silu_and_mul(None)


# ---------------------------------------------------------------------------------- torch.library / compile


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_opcheck(kernel, device, dtype, out_dtype):
    x = make_input(3, 64, dtype, device)
    scale, dtype_out = quant_args(kernel.reference, x, out_dtype)
    args = (torch.empty(out_shape(x), dtype=dtype_out, device=device), x, scale)
    torch.library.opcheck(kernel.ops.silu_and_mul, args, test_utils=opcheck_utils(*args))


@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fnuz], ids=["16bit", "e4m3fnuz"])
def test_torch_compile(kernel, device, out_dtype):
    x = make_input(5, 128, torch.float16, device)
    scale = None if out_dtype is None else torch.tensor([0.05], device=device)

    def swiglu(x, scale):
        return kernel.silu_and_mul(x, scale=scale, out_dtype=out_dtype)

    compiled = torch.compile(swiglu, fullgraph=True)(x, scale)
    assert_bitwise_equal(compiled, swiglu(x, scale), "compiled output")
