"""RMSNorm and the fused residual add + RMSNorm, optionally quantized to FP8 (rmsnorm_fp8/)."""

from typing import Optional

import torch

from ._common import check_devices, quant_output
from ._ops import add_op_namespace_prefix, ops


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    scale: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """RMSNorm with transformers' LlamaRMSNorm numerics, optionally quantized to FP8.

    ``y = (x * rsqrt(mean(x^2) + eps))`` computed in float32 and rounded to x's dtype, then ``y * weight`` in
    x's dtype. Without ``scale`` that is the result (``out_dtype`` must be None or x's dtype); with ``scale``
    the 16-bit result is quantized to ``out_dtype`` (an FP8 flavour, default: the platform's native one).

    x: [..., hidden] float16 or bfloat16, hidden >= 1; the last dimension must be contiguous, the leading ones
    may have a row stride (e.g. a slice of a wider buffer). weight: [hidden], contiguous, x's dtype.
    Returns a new contiguous tensor of x's shape.
    """
    out = quant_output("rms_norm", x, scale, out_dtype)
    ops.rms_norm(out, x, weight, eps, scale)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    scale: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Residual add followed by RMSNorm, the pre-norm step of a decoder layer.

    Updates ``residual`` IN PLACE to ``x + residual`` (rounded to x's dtype) and returns
    ``rms_norm(residual, weight, eps, scale, out_dtype)``. residual must have x's shape and dtype and be
    contiguous; the other arguments are as in :func:`rms_norm`.
    """
    out = quant_output("fused_add_rms_norm", x, scale, out_dtype)
    ops.fused_add_rms_norm(out, x, residual, weight, eps, scale)
    return out


# The ops only write into `out`: their fakes (torch.compile, meta tensors) check devices and return nothing.
@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(out, input, weight, eps, scale):
    check_devices("rms_norm", "input", input, weight=weight, scale=scale, out=out)


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm"))
def _fused_add_rms_norm_fake(out, input, residual, weight, eps, scale):
    check_devices("fused_add_rms_norm", "input", input, residual=residual, weight=weight, scale=scale, out=out)
