"""Static per-tensor FP8 quantization (quant_fp8/)."""

from typing import Optional

import torch

from ._common import check_devices, check_tensor, quant_output
from ._ops import add_op_namespace_prefix, ops


def quantize_fp8(
    x: torch.Tensor,
    scale: torch.Tensor,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Static per-tensor FP8 quantization: ``saturate(x / scale)`` rounded to nearest even, NaN kept.

    Bit for bit ``reference.quantize_fp8(x, scale, out_dtype)`` on every backend (the GPU kernels compute the
    correctly rounded float32 quotient). x: [..., d] float16 or bfloat16 with a contiguous last dimension
    (leading dimensions may have a row stride); scale: a one-element float32 tensor on x's device, read on the
    device; ``out_dtype``: torch.float8_e4m3fn or torch.float8_e4m3fnuz, default the platform's native flavour.
    Returns a new contiguous tensor of x's shape.
    """
    # x first, then scale: quant_output alone would accept scale=None (16-bit output), which this op has not.
    check_tensor("quantize_fp8", "x", x)
    check_tensor("quantize_fp8", "scale", scale)
    out = quant_output("quantize_fp8", x, scale, out_dtype)
    ops.quantize_fp8(out, x, scale)
    return out


# The op only writes into `out`: its fake (torch.compile, meta tensors) checks devices and returns nothing.
@torch.library.register_fake(add_op_namespace_prefix("quantize_fp8"))
def _quantize_fp8_fake(out, input, scale):
    check_devices("quantize_fp8", "input", input, scale=scale, out=out)
