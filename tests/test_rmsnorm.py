"""rms_norm and fused_add_rms_norm against reference.py (transformers' LlamaRMSNorm + FP8 quantization)."""

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

EPS = 1e-6


def assert_norm_matches(out, ref):
    """The shared rule, with 2 ulp on up to 0.5% of the elements for 16-bit outputs: another fp32 summation
    order moves 1/rms by ~1e-6 relative, which flips a bf16 rounding (ulp 2^-8) with probability ~5e-4, and the
    transformers order rounds twice (normalized value, then `weight * normed`, which can land 2 ulp away once
    |weight| carries the difference across a binade). Measured on an H200: 40 of 32768 bf16 elements (0.12%)
    in one [8, 4096] case. FP8 is far coarser than that: 1 ulp on 0.1%."""
    if out.element_size() == 1:
        assert_matches_reference(out, ref, max_ulps=1)
    else:
        assert_matches_reference(out, ref, max_ulps=2, max_fraction=0.005)


def make_inputs(shape, dtype, device):
    x = 2 * torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device)
    return x, weight


def quant_args(reference, x, weight, out_dtype):
    """(scale, out dtype) for an output dtype: no scale for 16-bit, a saturating one for FP8."""
    if out_dtype is None:
        return None, x.dtype
    return saturating_scale(reference.rms_norm_ref(x, weight, EPS), out_dtype), out_dtype


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=row_shape_id)
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_rms_norm(kernel, device, dtype, out_dtype, shape):
    x, weight = make_inputs(shape, dtype, device)
    scale, dtype_out = quant_args(kernel.reference, x, weight, out_dtype)
    out = poisoned(shape, dtype_out, device)
    kernel.ops.rms_norm(out, x, weight, EPS, scale)
    assert_norm_matches(out, kernel.reference.rms_norm_ref(x, weight, EPS, scale, dtype_out))


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=row_shape_id)
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_fused_add_rms_norm(kernel, device, dtype, out_dtype, shape):
    x, weight = make_inputs(shape, dtype, device)
    residual = torch.randn(shape, dtype=dtype, device=device)
    scale, dtype_out = quant_args(kernel.reference, x + residual, weight, out_dtype)
    ref_out, ref_residual = kernel.reference.fused_add_rms_norm_ref(x, residual, weight, EPS, scale, dtype_out)
    out = poisoned(shape, dtype_out, device)
    kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)
    assert_bitwise_equal(residual, ref_residual, "residual")
    assert_norm_matches(out, ref_out)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
@pytest.mark.parametrize("fused", [False, True], ids=["rms_norm", "fused_add"])
def test_strided_3d(kernel, device, dtype, out_dtype, fused):
    """3-D input and out that are row-padded views of larger buffers: read and written in place, the padding
    left untouched."""
    shape = (2, 5, 1000)
    x, weight = make_inputs(shape, dtype, device)
    x = row_padded(x, pad=24)
    residual = torch.randn(shape, dtype=dtype, device=device)
    scale, dtype_out = quant_args(kernel.reference, x + residual if fused else x, weight, out_dtype)
    out = row_padded(poisoned(shape, dtype_out, device), pad=3)
    padding_before = out._base[..., shape[-1]:].clone()
    if fused:
        ref, ref_residual = kernel.reference.fused_add_rms_norm_ref(x, residual, weight, EPS, scale, dtype_out)
        kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)
        assert_bitwise_equal(residual, ref_residual, "residual")
    else:
        ref = kernel.reference.rms_norm_ref(x, weight, EPS, scale, dtype_out)
        kernel.ops.rms_norm(out, x, weight, EPS, scale)
    assert_norm_matches(out, ref)
    assert_bitwise_equal(out._base[..., shape[-1]:], padding_before, "out's row padding")


@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_special_values(kernel, device, dtype, out_dtype):
    """A NaN poisons only its own row; huge rows do not overflow the fp32 sum of squares; an all-zero row gives
    zeros (x * rsqrt(eps)); tiny scales saturate."""
    big = torch.finfo(dtype).max / 2
    x = torch.randn(4, 64, dtype=dtype, device=device)
    x[0, 7] = float("nan")
    x[1] = big
    x[2] = 0
    weight = torch.randn(64, dtype=dtype, device=device)
    scale = None if out_dtype is None else torch.tensor([1e-3], device=device)
    dtype_out = out_dtype or dtype
    out = torch.empty(x.shape, dtype=dtype_out, device=device)
    kernel.ops.rms_norm(out, x, weight, EPS, scale)
    assert_norm_matches(out, kernel.reference.rms_norm_ref(x, weight, EPS, scale, dtype_out))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_python_api(kernel, device, dtype, out_dtype):
    """The wrappers allocate the documented output and give the op's result; residual is updated in place."""
    x, weight = make_inputs((3, 7, 64), dtype, device)
    scale, dtype_out = quant_args(kernel.reference, x, weight, out_dtype)
    out = kernel.rms_norm(x, weight, EPS, scale=scale, out_dtype=out_dtype)
    assert out.shape == x.shape and out.is_contiguous()
    assert_norm_matches(out, kernel.reference.rms_norm_ref(x, weight, EPS, scale, dtype_out))

    residual = torch.randn_like(x)
    ref_out, ref_residual = kernel.reference.fused_add_rms_norm_ref(x, residual, weight, EPS, scale, dtype_out)
    out = kernel.fused_add_rms_norm(x, residual, weight, EPS, scale=scale, out_dtype=out_dtype)
    assert_bitwise_equal(residual, ref_residual, "residual")
    assert_norm_matches(out, ref_out)


def test_default_fp8_flavour(kernel, device):
    x, weight = make_inputs((2, 64), torch.bfloat16, device)
    out = kernel.rms_norm(x, weight, scale=torch.tensor([0.1], device=device))
    assert out.dtype == kernel.native_fp8_dtype(x.device)
    if device == "cpu" or torch.version.hip is None:
        assert out.dtype == torch.float8_e4m3fn


# ------------------------------------------------------------------------------------------------ bad inputs


def _bad_rms_norm_cases(device):
    """(id, arguments of the raw rms_norm op, message the error must contain)."""
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    w = torch.randn(64, dtype=torch.bfloat16, device=device)
    out = torch.empty_like(x)
    fp8_out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=device)
    scale = torch.tensor([0.1], device=device)
    return [
        ("fp32 input", (out.float(), x.float(), w, EPS, None), "input must be float16 or bfloat16"),
        ("fp32 weight", (out, x, w.float(), EPS, None), "weight must have the input dtype"),
        ("weight shape", (out, x, w[:32], EPS, None), r"weight must have shape \[64\]"),
        ("2-D weight", (out, x, w.view(1, 64), EPS, None), r"weight must have shape \[64\]"),
        ("strided weight", (out, x, torch.randn(128, dtype=w.dtype, device=device)[::2], EPS, None),
         "weight must be contiguous"),
        ("non-contiguous last dim", (out, x[:, ::2], w[:32], EPS, None), "input must be contiguous in its last"),
        ("transposed input", (torch.empty(64, 64, dtype=x.dtype, device=device),
                              torch.randn(64, 64, dtype=x.dtype, device=device).t(), w, EPS, None),
         "input must be contiguous in its last"),
        ("out shape", (out[:2], x, w, EPS, None), "out must have the input shape"),
        ("out dtype", (out.half(), x, w, EPS, None), "out must have the input dtype"),
        ("fp8 out without scale", (fp8_out, x, w, EPS, None), "out must have the input dtype"),
        ("16-bit out with scale", (out, x, w, EPS, scale), "out must be float8_e4m3fn or float8_e4m3fnuz"),
        ("scale with 2 elements", (fp8_out, x, w, EPS, torch.tensor([0.1, 0.2], device=device)),
         "scale must have exactly one element"),
        ("fp16 scale", (fp8_out, x, w, EPS, scale.half()), "scale must be a float32 tensor"),
        ("negative eps", (out, x, w, -1.0, None), "eps must be finite and >= 0"),
        ("nan eps", (out, x, w, float("nan"), None), "eps must be finite and >= 0"),
        ("empty hidden", (out[:, :0], x[:, :0], w[:0], EPS, None), "hidden size"),
    ]


def _bad_fused_cases(device):
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    w = torch.randn(64, dtype=torch.bfloat16, device=device)
    out = torch.empty_like(x)
    return [
        ("residual shape", (out, x, torch.randn(4, 32, dtype=x.dtype, device=device), w, EPS, None),
         "residual must have the input shape"),
        ("residual dtype", (out, x, torch.randn(4, 64, dtype=torch.float16, device=device), w, EPS, None),
         "residual must have the input dtype"),
        ("strided residual", (out, x, torch.randn(4, 128, dtype=x.dtype, device=device)[:, :64], w, EPS, None),
         "residual must be contiguous"),
        ("fp32 weight", (out, x, torch.randn_like(x), w.float(), EPS, None), "weight must have the input dtype"),
    ]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", range(len(_bad_rms_norm_cases("cpu"))),
                         ids=[c[0] for c in _bad_rms_norm_cases("cpu")])
def test_rms_norm_rejects(kernel, device, case):
    _, args, match = _bad_rms_norm_cases(device)[case]
    with pytest.raises(RuntimeError, match=match):
        kernel.ops.rms_norm(*args)


@pytest.mark.parametrize("case", range(len(_bad_fused_cases("cpu"))), ids=[c[0] for c in _bad_fused_cases("cpu")])
def test_fused_add_rms_norm_rejects(kernel, device, case):
    _, args, match = _bad_fused_cases(device)[case]
    with pytest.raises(RuntimeError, match=match):
        kernel.ops.fused_add_rms_norm(*args)


def test_wrapper_rejects(kernel, device):
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    w = torch.randn(64, dtype=torch.bfloat16, device=device)
    scale = torch.tensor([0.1], device=device)
    with pytest.raises(ValueError, match="out_dtype must be x's dtype"):
        kernel.rms_norm(x, w, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="out_dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz"):
        kernel.rms_norm(x, w, scale=scale, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out_dtype must be x's dtype"):
        kernel.fused_add_rms_norm(x, torch.randn_like(x), w, out_dtype=torch.float16)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        kernel.rms_norm(x.tolist(), w)
    with pytest.raises(TypeError, match="scale must be a torch.Tensor"):
        kernel.rms_norm(x, w, scale=0.1)


# ---------------------------------------------------------------------------------- torch.library / compile


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_opcheck(kernel, device, dtype, out_dtype):
    x, weight = make_inputs((3, 64), dtype, device)
    scale, dtype_out = quant_args(kernel.reference, x, weight, out_dtype)
    out = torch.empty(x.shape, dtype=dtype_out, device=device)
    args = (out, x, weight, EPS, scale)
    torch.library.opcheck(kernel.ops.rms_norm, args, test_utils=opcheck_utils(*args))
    args = (out, x, torch.randn_like(x), weight, EPS, scale)
    torch.library.opcheck(kernel.ops.fused_add_rms_norm, args, test_utils=opcheck_utils(*args))


@pytest.mark.parametrize("quantize", [False, True], ids=["16bit", "native_fp8"])
def test_torch_compile(kernel, device, quantize):
    """Both wrappers trace into one graph (fullgraph: a graph break raises) and compute the eager result,
    including the default FP8 flavour's device query."""
    x, weight = make_inputs((5, 256), torch.bfloat16, device)
    scale = torch.tensor([0.02], device=device) if quantize else None

    def norm_twice(x, residual, weight, scale):
        y = kernel.rms_norm(x, weight, EPS, scale=scale)
        return y, kernel.fused_add_rms_norm(x, residual, weight, EPS, scale=scale)

    residual = torch.randn_like(x)
    residual_eager = residual.clone()
    compiled = torch.compile(norm_twice, fullgraph=True)(x, residual, weight, scale)
    eager = norm_twice(x, residual_eager, weight, scale)
    for c, e in zip(compiled, eager):
        assert_bitwise_equal(c, e, "compiled output")
    assert_bitwise_equal(residual, residual_eager, "compiled residual")
