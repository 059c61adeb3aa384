"""Pure-PyTorch references: the definition of every op's semantics.

The tests compare each backend against these on fresh random inputs; the benchmarks time them (eager and
``torch.compile``) as the peers. They allocate and return their outputs instead of writing into ``out``.
"""

from typing import Optional

import torch

from .fp8 import FP8_DTYPES, fp8_max


def quantize_fp8(y: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Static per-tensor quantization: saturate(y / scale) rounded to nearest even.

    ``y`` is computed in float32; values beyond the flavour's max (including +-inf) saturate to +-max,
    NaN stays NaN. torch's own ``.to(fp8)`` rounds to nearest even but does not saturate, hence the clamp.
    """
    if dtype not in FP8_DTYPES:
        raise ValueError(f"quantize_fp8: dtype must be float8_e4m3fn or float8_e4m3fnuz, got {dtype}")
    bound = fp8_max(dtype)
    q = y.float() / scale.float().reshape(())
    return q.clamp(-bound, bound).to(dtype)


def _finish(y: torch.Tensor, scale: Optional[torch.Tensor], out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    if scale is None:
        return y
    return quantize_fp8(y, scale, out_dtype or torch.float8_e4m3fn)


def rms_norm_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scale: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """transformers' LlamaRMSNorm order: fp32 mean of squares, x * rsqrt(mean + eps) rounded to the input
    dtype, then times weight (in the input dtype); with a scale, that 16-bit result is quantized."""
    xf = x.float()
    variance = xf.pow(2).mean(-1, keepdim=True)
    normed = (xf * torch.rsqrt(variance + eps)).to(x.dtype)
    return _finish(weight * normed, scale, out_dtype)


def fused_add_rms_norm_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scale: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple:
    """Returns (out, new_residual) with new_residual = x + residual in the input dtype and
    out = rms_norm_ref(new_residual)."""
    new_residual = x + residual
    return rms_norm_ref(new_residual, weight, eps, scale, out_dtype), new_residual


def silu_and_mul_ref(
    x: torch.Tensor, scale: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """x is [..., 2*d], gate first. y = silu(gate) * up in float32, then rounded to the input dtype or,
    with a scale, quantized from float32 directly."""
    d = x.shape[-1] // 2
    gate, up = x[..., :d].float(), x[..., d:].float()
    y = torch.nn.functional.silu(gate) * up
    if scale is None:
        return y.to(x.dtype)
    return quantize_fp8(y, scale, out_dtype or torch.float8_e4m3fn)


def skinny_gemm_ref(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: Optional[torch.Tensor] = None,
    scale_b: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias[N]), computed in float64 on the
    dequantized operands and rounded once to ``out_dtype`` (default: a's dtype, fp16 for FP8 operands)."""
    if out_dtype is None:
        out_dtype = torch.float16 if a.dtype in FP8_DTYPES else a.dtype
    acc = a.double() @ b.double().t()
    if scale_a is not None:
        acc = acc * scale_a.double().reshape(())
    if scale_b is not None:
        acc = acc * scale_b.double().reshape(())
    if bias is not None:
        acc = acc + bias.double()
    return acc.to(out_dtype)
