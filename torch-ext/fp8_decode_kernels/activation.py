"""SwiGLU, ``silu(gate) * up``, optionally quantized to FP8 (swiglu_fp8/)."""

from typing import Optional

import torch

from ._common import check_devices, check_tensor, quant_output
from ._ops import add_op_namespace_prefix, ops


def silu_and_mul(
    x: torch.Tensor,
    scale: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """SwiGLU activation: ``silu(gate) * up`` where ``gate, up = x[..., :d], x[..., d:]``.

    Computed in float32, then rounded to x's dtype, or with ``scale`` quantized directly from float32 to
    ``out_dtype`` (an FP8 flavour, default: the platform's native one). x: [..., 2*d] float16 or bfloat16 with
    a contiguous last dimension (leading dimensions may have a row stride). Returns a new [..., d] tensor.
    """
    check_tensor("silu_and_mul", "x", x)
    if x.dim() == 0 or x.shape[-1] % 2 != 0:
        raise ValueError(f"silu_and_mul: x must be [..., 2*d] (gate then up) with an even last dimension, "
                         f"got shape {tuple(x.shape)}")
    out = quant_output("silu_and_mul", x, scale, out_dtype, (*x.shape[:-1], x.shape[-1] // 2))
    ops.silu_and_mul(out, x, scale)
    return out


# The op only writes into `out`: its fake (torch.compile, meta tensors) checks devices and returns nothing.
@torch.library.register_fake(add_op_namespace_prefix("silu_and_mul"))
def _silu_and_mul_fake(out, input, scale):
    check_devices("silu_and_mul", "input", input, scale=scale, out=out)
