"""What the wrappers (norm, activation, quantization, gemm) and their fake implementations share: argument
checks and the allocation of a quantizing op's output."""

from typing import Optional

import torch

from .fp8 import FP8_DTYPES, native_fp8_dtype


def check_tensor(fn: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")


def quant_out_dtype(fn: str, x: torch.Tensor, scale: Optional[torch.Tensor],
                    out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """Output dtype of a quantizing op: x's dtype without a scale, an FP8 flavour with one."""
    if scale is None:
        if out_dtype is not None and out_dtype != x.dtype:
            raise ValueError(f"{fn}: out_dtype must be x's dtype ({x.dtype}) when scale is None, got {out_dtype}; "
                             "pass a scale for FP8 output")
        return x.dtype
    check_tensor(fn, "scale", scale)
    if out_dtype is None:
        return native_fp8_dtype(x.device)
    if out_dtype not in FP8_DTYPES:
        raise ValueError(f"{fn}: out_dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz when scale is "
                         f"given, got {out_dtype}")
    return out_dtype


def quant_output(fn: str, x, scale: Optional[torch.Tensor], out_dtype: Optional[torch.dtype],
                 shape: Optional[tuple] = None) -> torch.Tensor:
    """The new output of a quantizing op on x: contiguous, of x's shape unless `shape` is given, of the dtype
    quant_out_dtype picks."""
    check_tensor(fn, "x", x)
    dtype = quant_out_dtype(fn, x, scale, out_dtype)
    return torch.empty(x.shape if shape is None else shape, dtype=dtype, device=x.device)


def check_devices(op: str, ref_name: str, ref: torch.Tensor, **tensors) -> None:
    """The fakes' device rule. The dispatcher sends every call with a meta tensor among its arguments to the fake,
    also a mix of meta and real tensors (which the launchers would reject), so the fakes apply the launchers'
    rule: every tensor on the device of the first."""
    for name, t in tensors.items():
        if t is not None and t.device != ref.device:
            raise RuntimeError(f"{op}: {name} must be on the same device as {ref_name} ({ref.device}), "
                               f"got {t.device}")
