"""Fused FP8 decode kernels: RMSNorm (+ residual add), SwiGLU and skinny GEMM, each with optional static
per-tensor FP8 output quantization, and the standalone static FP8 quantization.

Load through the Kernel Hub rather than importing directly::

    import kernels
    k = kernels.get_kernel("fp8-decode-kernels/fp8-decode-kernels", version=1)
    y = k.rms_norm(x, weight, scale=torch.tensor([0.05], device=x.device))

The functions below allocate the output and call the raw ops in ``ops`` (``torch.ops.<namespace>``), which
take the output as their first argument and validate every input. ``reference`` holds pure-PyTorch
definitions of all semantics.

FP8 output (``scale`` given): ``q = saturate(y / scale)`` rounded to nearest even, saturating at +-448
(float8_e4m3fn) or +-240 (float8_e4m3fnuz); NaN stays NaN. ``scale`` is a one-element float32 tensor on the
input's device. The default FP8 flavour is the platform's native one: float8_e4m3fnuz on gfx940/941/942 (MI300)
GPUs, float8_e4m3fn elsewhere (NVIDIA, gfx950, CPU).
"""

from typing import Optional

import torch

from . import layers, reference, routing
from ._ops import add_op_namespace_prefix, ops

__all__ = [
    "decoder",
    "fused_add_rms_norm",
    "layers",
    "native_fp8_dtype",
    "ops",
    "quantize_fp8",
    "reference",
    "rms_norm",
    "routing",
    "silu_and_mul",
    "skinny_gemm",
]

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
_16BIT_DTYPES = (torch.float16, torch.bfloat16)
# The raw skinny_gemm op's limit on M (common/checks.h kSkinnyMaxM); larger M is routed to torch.
_SKINNY_MAX_M = 32
# gfx940/941/942 (MI300) implement the FNUZ FP8 variant; everything newer (gfx950) and NVIDIA use OCP e4m3fn.
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


@torch.compiler.assume_constant_result
def native_fp8_dtype(device: torch.device) -> torch.dtype:
    """The FP8 flavour the device computes in: float8_e4m3fnuz on gfx940/941/942 (MI300) ROCm GPUs,
    float8_e4m3fn everywhere else. Queries the device on each call (never at import)."""
    if device.type == "cuda" and torch.version.hip is not None:
        arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
        if arch in _FNUZ_ARCHS:
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def _check_tensor(fn: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")


def _quant_out_dtype(fn: str, x: torch.Tensor, scale: Optional[torch.Tensor],
                     out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """Output dtype of a quantizing op: x's dtype without a scale, an FP8 flavour with one."""
    if scale is None:
        if out_dtype is not None and out_dtype != x.dtype:
            raise ValueError(f"{fn}: out_dtype must be x's dtype ({x.dtype}) when scale is None, got {out_dtype}; "
                             "pass a scale for FP8 output")
        return x.dtype
    _check_tensor(fn, "scale", scale)
    if out_dtype is None:
        return native_fp8_dtype(x.device)
    if out_dtype not in _FP8_DTYPES:
        raise ValueError(f"{fn}: out_dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz when scale is "
                         f"given, got {out_dtype}")
    return out_dtype


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
    _check_tensor("rms_norm", "x", x)
    dtype = _quant_out_dtype("rms_norm", x, scale, out_dtype)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
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
    _check_tensor("fused_add_rms_norm", "x", x)
    dtype = _quant_out_dtype("fused_add_rms_norm", x, scale, out_dtype)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    ops.fused_add_rms_norm(out, x, residual, weight, eps, scale)
    return out


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
    _check_tensor("silu_and_mul", "x", x)
    if x.dim() == 0 or x.shape[-1] % 2 != 0:
        raise ValueError(f"silu_and_mul: x must be [..., 2*d] (gate then up) with an even last dimension, "
                         f"got shape {tuple(x.shape)}")
    dtype = _quant_out_dtype("silu_and_mul", x, scale, out_dtype)
    out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=dtype, device=x.device)
    ops.silu_and_mul(out, x, scale)
    return out


def _gemm_out_dtype(a: torch.Tensor, scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor], out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """Output dtype; also checks the scales, which decide the routing of M > 32 as much as the op's path."""
    if a.dtype in _FP8_DTYPES:
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
    """skinny_gemm for M > _SKINNY_MAX_M: torch's own GEMMs, with the same contract."""
    if a.dtype not in _FP8_DTYPES:
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
    """``out[M, N] = (a[M, K] @ b[N, K]^T) * scale_a * scale_b (+ bias[N])`` with float32 accumulation.

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
    """
    _check_tensor("skinny_gemm", "a", a)
    _check_tensor("skinny_gemm", "b", b)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"skinny_gemm: a must be 2-D [M, K] and b 2-D [N, K], got a {tuple(a.shape)} and "
                         f"b {tuple(b.shape)}")
    dtype = _gemm_out_dtype(a, scale_a, scale_b, bias, out_dtype)
    if a.shape[0] > _SKINNY_MAX_M:
        return _torch_gemm(a, b, scale_a, scale_b, bias, dtype)
    if (a.dtype in _FP8_DTYPES and b.is_contiguous() and _scaled_mm_supported(a, b)
            and routing.prefer_scaled_mm(a, b)):
        return _torch_gemm(a, b, scale_a, scale_b, bias, dtype)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device)
    ops.skinny_gemm(out, a, b, scale_a, scale_b, bias)
    return out


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
    _check_tensor("quantize_fp8", "x", x)
    _check_tensor("quantize_fp8", "scale", scale)
    dtype = _quant_out_dtype("quantize_fp8", x, scale, out_dtype)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    ops.quantize_fp8(out, x, scale)
    return out


# Shape/dtype propagation for torch.compile and meta tensors: the ops only write into `out`. The dispatcher sends
# every call with a meta tensor among its arguments here, also a mix of meta and real tensors (which the
# launchers would reject), so these apply the launchers' device rule: every tensor on the device of the first.
def _check_devices(op: str, ref_name: str, ref: torch.Tensor, **tensors) -> None:
    for name, t in tensors.items():
        if t is not None and t.device != ref.device:
            raise RuntimeError(f"{op}: {name} must be on the same device as {ref_name} ({ref.device}), "
                               f"got {t.device}")


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(out, input, weight, eps, scale):
    _check_devices("rms_norm", "input", input, weight=weight, scale=scale, out=out)


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm"))
def _fused_add_rms_norm_fake(out, input, residual, weight, eps, scale):
    _check_devices("fused_add_rms_norm", "input", input, residual=residual, weight=weight, scale=scale, out=out)


@torch.library.register_fake(add_op_namespace_prefix("silu_and_mul"))
def _silu_and_mul_fake(out, input, scale):
    _check_devices("silu_and_mul", "input", input, scale=scale, out=out)


@torch.library.register_fake(add_op_namespace_prefix("skinny_gemm"))
def _skinny_gemm_fake(out, a, b, scale_a, scale_b, bias):
    _check_devices("skinny_gemm", "a", a, b=b, scale_a=scale_a, scale_b=scale_b, out=out, bias=bias)


@torch.library.register_fake(add_op_namespace_prefix("quantize_fp8"))
def _quantize_fp8_fake(out, input, scale):
    _check_devices("quantize_fp8", "input", input, scale=scale, out=out)


# Last: the FP8 decoder path builds on the functions above (importing it earlier would be circular).
from . import decoder  # noqa: E402
