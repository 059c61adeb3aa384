"""The decode-shaped GEMM ``a @ b^T`` of a linear layer (skinny_gemm/), and its hand-offs to torch's GEMMs."""

from typing import Optional

import torch

from . import routing
from ._common import check_devices, check_tensor
from ._ops import add_op_namespace_prefix, ops
from .fp8 import FP8_DTYPES, native_fp8_dtype

_16BIT_DTYPES = (torch.float16, torch.bfloat16)
# The raw skinny_gemm op's limit on M (common/checks.h kSkinnyMaxM); larger M is routed to torch.
_SKINNY_MAX_M = 32


def _gemm_out_dtype(a: torch.Tensor, scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor], out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """Output dtype; also checks the scales, which decide the routing of M > 32 as much as the op's path."""
    if a.dtype in FP8_DTYPES:
        if scale_a is None or scale_b is None:
            raise ValueError("skinny_gemm: FP8 operands need scale_a and scale_b (one-element float32 tensors)")
        if out_dtype is None:
            return bias.dtype if bias is not None else torch.float16
        if out_dtype not in _16BIT_DTYPES:
            raise ValueError(f"skinny_gemm: out_dtype must be torch.float16 or torch.bfloat16, got {out_dtype}")
        return out_dtype
    if scale_a is not None or scale_b is not None:
        raise ValueError("skinny_gemm: scale_a and scale_b are only for FP8 operands; 16-bit operands take none")
    if out_dtype is not None and out_dtype != a.dtype:
        raise ValueError(f"skinny_gemm: out_dtype must be a's dtype ({a.dtype}) for 16-bit operands, got {out_dtype}")
    return a.dtype


def _scaled_mm_supported(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether torch._scaled_mm takes these FP8 operands. cuBLASLt/hipBLASLt want the device's native flavour,
    dimensions that are multiples of 16 and, on NVIDIA, sm_89 or newer. Never on CPU: there torch picks oneDNN
    on CPUs with AMX (which rejects float8_e4m3fnuz) and an fp32 dequantize-and-matmul elsewhere, so what it
    accepts depends on the machine; the fallback below is that same emulation, on every CPU."""
    if a.device.type == "cpu":
        return False
    if a.device.type != "cuda" or a.dtype != native_fp8_dtype(a.device):
        return False
    if a.shape[1] % 16 != 0 or b.shape[0] % 16 != 0:
        return False
    return torch.version.hip is not None or torch.cuda.get_device_capability(a.device) >= (8, 9)


def _torch_gemm(a, b, scale_a, scale_b, bias, out_dtype):
    """skinny_gemm for M > _SKINNY_MAX_M and for the shapes `routing` hands off: torch's own GEMMs, with the
    same contract."""
    if a.dtype not in FP8_DTYPES:
        return torch.nn.functional.linear(a, b, bias)
    if _scaled_mm_supported(a, b):
        # _scaled_mm takes a row-major a and a column-major b^T, i.e. b row-major; contiguous() also gives
        # cuBLASLt its aligned leading dimensions, and costs nothing for the usual contiguous weight.
        return torch._scaled_mm(a.contiguous(), b.contiguous().t(), scale_a, scale_b, bias=bias,
                                out_dtype=out_dtype)
    # Dequantize and multiply in float32: exact operands, so only the accumulation order differs.
    out = (a.float() @ b.float().t()) * (scale_a.float() * scale_b.float()).reshape(())
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


def skinny_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: Optional[torch.Tensor] = None,
    scale_b: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """``out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias[N])``, accumulated in float32 (on Hopper,
    OCP e4m3 above 8 tokens, after the tensor core's narrower sums of 32 products: README "Op contract").

    The decode-shaped GEMM of a linear layer: ``a`` holds the activations, ``b`` the weight in nn.Linear's
    [out_features, in_features] layout. Either both operands are FP8 of the same flavour with one-element
    float32 ``scale_a`` and ``scale_b``, and ``out_dtype`` is float16 or bfloat16 (default: bias's dtype if
    given, else float16); or both are float16/bfloat16 with no scales, and the output has their dtype. bias:
    [N], contiguous, of the output dtype. Rows of ``a`` and ``b`` may be strided (last dimension contiguous).

    The kernel handles M <= 32 (decode batches); larger M is routed to torch, with torch's numerics:
    ``torch._scaled_mm`` for FP8 where it supports the operands, a float32 dequantize-and-matmul otherwise,
    ``F.linear`` for 16-bit. FP8 calls with M <= 32 also go to ``torch._scaled_mm`` where it was measured
    faster than our kernel (``routing.py``; ``FP8DK_SKINNY_ROUTE=0`` turns that off). Returns a new [M, N]
    tensor.

    On Hopper the kernel requests ``b`` before it waits for the kernel before it on the stream (programmatic
    dependent launch): ``b`` must not be written by this package's kernels just before it, e.g. a weight that
    ``quantize_fp8`` produces right before the call (README, "Tuning overrides", on PDL).
    """
    check_tensor("skinny_gemm", "a", a)
    check_tensor("skinny_gemm", "b", b)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"skinny_gemm: a must be 2-D [M, K] and b 2-D [N, K], got a {tuple(a.shape)} and "
                         f"b {tuple(b.shape)}")
    dtype = _gemm_out_dtype(a, scale_a, scale_b, bias, out_dtype)
    if a.shape[0] > _SKINNY_MAX_M:
        return _torch_gemm(a, b, scale_a, scale_b, bias, dtype)
    if (a.dtype in FP8_DTYPES and b.is_contiguous() and _scaled_mm_supported(a, b)
            and routing.prefer_scaled_mm(a, b)):
        return _torch_gemm(a, b, scale_a, scale_b, bias, dtype)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device)
    ops.skinny_gemm(out, a, b, scale_a, scale_b, bias)
    return out


# The op only writes into `out`: its fake (torch.compile, meta tensors) checks devices and returns nothing.
@torch.library.register_fake(add_op_namespace_prefix("skinny_gemm"))
def _skinny_gemm_fake(out, a, b, scale_a, scale_b, bias):
    check_devices("skinny_gemm", "a", a, b=b, scale_a=scale_a, scale_b=scale_b, out=out, bias=bias)
