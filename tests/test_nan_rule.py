"""The NaN rule, one for all ops (README "Numerics"): an FP8 output is NaN exactly where the reference's is; an
e4m3fn NaN byte is 0x7f or 0xff (its sign bit is unspecified: torch itself gives different NaN signs on its
scalar and vectorized CPU paths), e4m3fnuz has a single NaN, 0x80. Every other byte follows the op's rounding
rule. Inputs: rows with NaN, +-inf and inf * 0 (x * rsqrt(inf) in RMSNorm)."""

import pytest
import torch

from .helpers import FP8_DTYPES, assert_matches_reference

NAN_BYTES = {torch.float8_e4m3fn: (0x7F, 0xFF), torch.float8_e4m3fnuz: (0x80,)}


def assert_nan_rule(out: torch.Tensor, ref: torch.Tensor) -> None:
    # NaN positions equal. The other bytes: within 1 ulp (these rows are too short for the 0.1% allowance of
    # the op tests to admit a single flip of the GPU kernels' reciprocal or exp2; the op tests check that).
    assert_matches_reference(out, ref, max_ulps=1, max_fraction=0.05)
    out_bytes = out.cpu().view(torch.uint8)
    nan = torch.isnan(ref.cpu().float())
    assert nan.any(), "the inputs must produce NaN"
    allowed = torch.zeros_like(nan)
    for byte in NAN_BYTES[out.dtype]:
        allowed |= out_bytes == byte
    assert bool(allowed[nan].all()), f"NaN bytes outside {NAN_BYTES[out.dtype]}: {out_bytes[nan & ~allowed].tolist()}"


def special_rows(dtype, device, hidden=37):
    x = torch.randn(4, hidden, dtype=dtype, device=device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, 0] = float("-inf")
    x[2, 1] = float("nan")
    return x


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=("e4m3fn", "e4m3fnuz"))
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=("fp16", "bf16"))
def test_rms_norm_nan(kernel, device, dtype, out_dtype):
    x = special_rows(dtype, device)
    w = torch.randn(x.shape[-1], dtype=dtype, device=device)
    scale = torch.tensor([2.0**-6], device=device)
    out = kernel.rms_norm(x, w, 1e-6, scale, out_dtype)
    assert_nan_rule(out, kernel.reference.rms_norm_ref(x, w, 1e-6, scale, out_dtype))
    residual = torch.randn_like(x)
    ref, _ = kernel.reference.fused_add_rms_norm_ref(x, residual, w, 1e-6, scale, out_dtype)
    assert_nan_rule(kernel.fused_add_rms_norm(x, residual, w, 1e-6, scale, out_dtype), ref)


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=("e4m3fn", "e4m3fnuz"))
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=("fp16", "bf16"))
def test_silu_and_mul_nan(kernel, device, dtype, out_dtype):
    x = torch.randn(4, 38, dtype=dtype, device=device)  # gate = x[:, :19], up = x[:, 19:]
    x[0, 3] = float("nan")  # NaN gate
    x[1, 19 + 5] = float("inf")  # inf * silu(gate): +-inf, saturated
    x[2, 19 + 0] = float("-inf")
    x[2, 19 + 1] = float("nan")  # NaN up
    x[3, 2], x[3, 19 + 2] = 0.0, float("inf")  # silu(0) * inf = NaN
    scale = torch.tensor([2.0**-6], device=device)
    out = kernel.silu_and_mul(x, scale, out_dtype)
    assert_nan_rule(out, kernel.reference.silu_and_mul_ref(x, scale, out_dtype))


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=("e4m3fn", "e4m3fnuz"))
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=("fp16", "bf16"))
def test_quantize_fp8_nan(kernel, device, dtype, out_dtype):
    x = special_rows(dtype, device)
    x[3, :4] = -float("nan")  # NaN with the sign bit set: any sign may come out
    scale = torch.tensor([2.0**-6], device=device)
    assert_nan_rule(kernel.quantize_fp8(x, scale, out_dtype), kernel.reference.quantize_fp8(x, scale, out_dtype))
