"""quantize_fp8 against reference.quantize_fp8: saturate(x / scale) rounded to nearest even, NaN kept.

The op is bit-exact on every backend (the GPU kernels compute the correctly rounded fp32 quotient), so outputs
are compared byte for byte, signed zeros included; only NaN is compared by position, since the sign a NaN
keeps is not part of the contract. Runs on "cpu" and, with a GPU, on "cuda" (tests/conftest.py).
"""

import pytest
import torch

from .helpers import (
    DTYPES_16BIT,
    FP8_DTYPES,
    ROW_SHAPES,
    assert_bitwise_equal,
    assert_matches_reference,
    opcheck_utils,
    poisoned,
    row_padded,
    row_shape_id,
    saturating_scale,
)

FP8_IDS = ("e4m3fn", "e4m3fnuz")
# Widths beyond helpers.ROW_SHAPES: around the kernels' 16-column chunk, and long rows with a partial last chunk.
ODD_SHAPES = [(3, 15), (3, 16), (3, 17), (5, 33), (2, 4095), (2, 4097), (1, 100003), (2, (1 << 19) + 3)]


def make_input(shape, dtype, device):
    return 3 * torch.randn(shape, dtype=dtype, device=device)


def assert_exact(out: torch.Tensor, ref: torch.Tensor) -> None:
    """The reference's bytes, signed zeros included; NaN exactly where the reference has NaN, with any sign."""
    assert_matches_reference(out, ref, max_ulps=0, max_fraction=0.0)  # shapes, dtypes, NaN positions, values
    # Equal values with different bytes can only be zeros of different signs.
    finite = ~torch.isnan(ref.cpu().float())
    assert_bitwise_equal(out.cpu()[finite], ref.cpu()[finite], "quantized bytes (the sign of a zero)")


def run_and_check(kernel, x, scale, out):
    kernel.ops.quantize_fp8(out, x, scale)
    assert_exact(out, kernel.reference.quantize_fp8(x, scale, out.dtype))


@pytest.mark.parametrize("shape", ROW_SHAPES + ODD_SHAPES, ids=row_shape_id)
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_quantize_fp8(kernel, device, dtype, out_dtype, shape):
    """Random rows with a scale that saturates the top third of the FP8 range; out poisoned with NaN, so an
    element left unwritten fails."""
    x = make_input(shape, dtype, device)
    scale = saturating_scale(x, out_dtype)
    run_and_check(kernel, x, scale, poisoned(shape, out_dtype, device))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_strided_3d(kernel, device, dtype, out_dtype):
    """3-D input and out that are row-padded views of larger buffers; out's padding stays untouched and the
    input's (NaN) is never read."""
    x = row_padded(make_input((2, 5, 1000), dtype, device), pad=16)
    scale = saturating_scale(x, out_dtype)
    out = row_padded(poisoned(x.shape, out_dtype, device), pad=3)
    padding_before = out._base[..., out.shape[-1]:].clone()
    run_and_check(kernel, x, scale, out)
    assert_bitwise_equal(out._base[..., out.shape[-1]:], padding_before, "out's row padding")


def every_value(dtype, device) -> torch.Tensor:
    """All 65536 bit patterns of a 16-bit format (NaN, +-inf, +-0, subnormals, +-max), as [256, 256]."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    return bits.view(dtype).reshape(256, 256).to(device)


# Scales: calibrated-looking values (not powers of two), an all-ones significand (the one scale whose refined
# reciprocal needs its correction step), powers of two, negative, and the extremes: tiny and huge magnitudes,
# subnormal, zero, infinite, NaN. Written as float32 bit patterns where the decimal form would be inexact.
SCALES = {
    "0.0137": 0.0137,
    "1/448": 1 / 448,
    "3": 3.0,
    "all_ones_significand": torch.tensor([0x3FFFFFFF], dtype=torch.int32).view(torch.float32).item(),
    "2^-7": 2.0 ** -7,
    "-0.25": -0.25,
    "2^-64": 2.0 ** -64,
    "below_2^-64": 2.0 ** -64 * 0.99,
    "2^64": 2.0 ** 64,
    "1e-30": 1e-30,
    "1e30": 1e30,
    "subnormal": torch.tensor([0x00012345], dtype=torch.int32).view(torch.float32).item(),
    "max_float32": torch.finfo(torch.float32).max,
    "0": 0.0,
    "-0": -0.0,
    "inf": float("inf"),
    "-inf": float("-inf"),
    "nan": float("nan"),
}


@pytest.mark.parametrize("scale_value", SCALES.values(), ids=SCALES.keys())
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_every_input_value(kernel, device, dtype, out_dtype, scale_value):
    """Every 16-bit input value against every kind of scale: saturation at +-max (+-inf included), NaN kept,
    signed zeros, subnormal outputs, and x / 0, x / inf and x / NaN as the division gives them."""
    x = every_value(dtype, device)
    scale = torch.tensor([scale_value], dtype=torch.float32, device=device)
    run_and_check(kernel, x, scale, poisoned(x.shape, out_dtype, device))


def near_tie_scales() -> list:
    """Scales that put x0 / scale on an FP8 rounding midpoint m, or within a few float32 ulps of it: x0 / m
    rounded to float32 and its neighbours. Every input 2^k * x0 then lands as close to the midpoint 2^k * m.
    Where the quotient is that close to a tie, dividing by an approximate 1/scale rounds the wrong way."""
    scales = []
    for x0 in (1.5, 3.25, 100.0, 0.8125):
        for m in (1.0625, 1.1875, 17.0, 0.013671875):  # midpoints of both flavours' grids
            s = torch.tensor([x0 / m], dtype=torch.float32)
            scales.append(s.item())
            up, down = s, s
            for _ in range(2):
                up = torch.nextafter(up, torch.tensor([float("inf")]))
                down = torch.nextafter(down, torch.tensor([0.0]))
                scales += [up.item(), down.item()]
    return scales


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_rounding_ties(kernel, device, dtype, out_dtype):
    """Every 16-bit input against scales that make many quotients (near-)ties, where only the correctly rounded
    quotient gives the reference's bytes. Also checks that the cases are hard: x * (1 / scale) in float32
    quantizes differently from x / scale somewhere among them."""
    x = every_value(dtype, device)
    bound = torch.finfo(out_dtype).max
    reciprocal_differs = 0
    for scale_value in near_tie_scales():
        scale = torch.tensor([scale_value], dtype=torch.float32, device=device)
        run_and_check(kernel, x, scale, poisoned(x.shape, out_dtype, device))
        x_cpu, scale_cpu = x.cpu().float(), scale.cpu()
        by_reciprocal = (x_cpu * (1 / scale_cpu)).clamp(-bound, bound).to(out_dtype)
        ref = kernel.reference.quantize_fp8(x.cpu(), scale_cpu, out_dtype)
        nan = torch.isnan(ref.float())
        reciprocal_differs += int((by_reciprocal.view(torch.uint8) != ref.view(torch.uint8))[~nan].sum())
    assert reciprocal_differs > 0, "no scale puts a quotient close enough to a tie to tell the methods apart"


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", [None, *FP8_DTYPES], ids=["default", *FP8_IDS])
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_python_api(kernel, device, dtype, out_dtype):
    x = make_input((4, 3, 96), dtype, device)
    dtype_out = out_dtype or kernel.native_fp8_dtype(x.device)
    scale = saturating_scale(x, dtype_out)
    out = kernel.quantize_fp8(x, scale, out_dtype=out_dtype)
    assert out.shape == x.shape and out.dtype == dtype_out and out.is_contiguous()
    assert_exact(out, kernel.reference.quantize_fp8(x, scale, dtype_out))


def test_empty(kernel, device):
    for shape in [(0, 64), (3, 0), (2, 0, 5)]:
        x = torch.randn(shape, dtype=torch.float16, device=device)
        out = kernel.quantize_fp8(x, torch.tensor([1.0], device=device))
        assert out.shape == shape


# ------------------------------------------------------------------------------------------------ bad inputs


def _bad_cases(device):
    """(id, arguments of the raw quantize_fp8 op, message the error must contain)."""
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    out = torch.empty(4, 64, dtype=torch.float8_e4m3fn, device=device)
    scale = torch.tensor([0.1], device=device)
    return [
        ("fp32 input", (out, x.float(), scale), "input must be float16 or bfloat16"),
        ("0-d input", (out[0, 0], x[0, 0], scale), "input must have at least one dimension"),
        ("non-contiguous last dim", (out[:, :32], x[:, ::2], scale), "input must be contiguous in its last"),
        ("overlapping rows", (out, x[:1].expand(4, 64), scale), "input rows must not overlap"),
        ("out shape", (out[:, :32], x, scale), r"out must have the input shape \[4, 64\]"),
        ("16-bit out", (torch.empty_like(x), x, scale), "out must be float8_e4m3fn or float8_e4m3fnuz"),
        ("non-contiguous out", (torch.empty(4, 128, dtype=out.dtype, device=device)[:, ::2], x, scale),
         "out must be contiguous in its last"),
        ("scale with 2 elements", (out, x, torch.tensor([0.1, 0.2], device=device)),
         "scale must have exactly one element"),
        ("empty scale", (out, x, torch.empty(0, device=device)), "scale must have exactly one element"),
        ("fp16 scale", (out, x, scale.half()), "scale must be a float32 tensor"),
    ]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", range(len(_bad_cases("cpu"))), ids=[c[0] for c in _bad_cases("cpu")])
def test_rejects(kernel, device, case):
    _, args, match = _bad_cases(device)[case]
    with pytest.raises(RuntimeError, match=match):
        kernel.ops.quantize_fp8(*args)


def test_wrapper_rejects(kernel, device):
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    scale = torch.tensor([0.1], device=device)
    with pytest.raises(ValueError, match="out_dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz"):
        kernel.quantize_fp8(x, scale, out_dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        kernel.quantize_fp8(None, scale)
    with pytest.raises(TypeError, match="scale must be a torch.Tensor"):
        kernel.quantize_fp8(x, 0.1)


# ---------------------------------------------------------------------------------- torch.library / compile


@pytest.mark.kernels_ci
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_opcheck(kernel, device, dtype, out_dtype):
    x = make_input((3, 64), dtype, device)
    args = (torch.empty(x.shape, dtype=out_dtype, device=device), x, saturating_scale(x, out_dtype))
    torch.library.opcheck(kernel.ops.quantize_fp8, args, test_utils=opcheck_utils(*args))


@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fnuz], ids=["default", "e4m3fnuz"])
def test_torch_compile(kernel, device, out_dtype):
    """fullgraph=True: the wrapper (allocation + op) traces without a graph break."""
    x = make_input((5, 128), torch.bfloat16, device)
    scale = torch.tensor([0.05], device=device)

    def quantize(x, scale):
        return kernel.quantize_fp8(x, scale, out_dtype=out_dtype)

    compiled = torch.compile(quantize, fullgraph=True)(x, scale)
    assert_bitwise_equal(compiled, quantize(x, scale), "compiled output")


def test_decoder_quantizes_with_the_kernel(kernel, device):
    """The FP8 modules' kernel build quantizes activations with this op (convert.KERNEL_OPS)."""
    assert kernel.convert.KERNEL_OPS.quantize is kernel.quantize_fp8
    x = make_input((3, 256), torch.float16, device)
    scale = torch.tensor([0.02], device=device)
    fp8 = kernel.native_fp8_dtype(x.device)
    assert_exact(kernel.convert.KERNEL_OPS.quantize(x, scale, fp8), kernel.reference.quantize_fp8(x, scale, fp8))
