"""Fused FP8 decode kernels: RMSNorm (+ residual add), SwiGLU and skinny GEMM, each with optional static
per-tensor FP8 output quantization, and the standalone static FP8 quantization.

Load through the Kernel Hub rather than importing directly::

    import kernels
    k = kernels.get_kernel("fp8-decode-kernels/fp8-decode-kernels", version=1)
    y = k.rms_norm(x, weight, scale=torch.tensor([0.05], device=x.device))

Each function allocates its output, checks its arguments and calls the raw op in ``ops``
(``torch.ops.<namespace>``), which takes the output as its first argument and validates every input; the
ops' fake implementations (torch.compile, meta tensors) sit next to the functions:

- ``norm``: rms_norm, fused_add_rms_norm            - ``activation``: silu_and_mul
- ``quantization``: quantize_fp8                     - ``gemm``: skinny_gemm (``routing``: its hand-off to cuBLASLt)

``layers`` holds the ``kernels.kernelize`` layers, ``convert`` the static-FP8 linear layers and MLPs and the
converter of transformers' Llama MLPs, ``reference`` pure-PyTorch definitions of every op's semantics,
``tuning`` the way to change a FP8DK_* override in a running process.

FP8 output (``scale`` given): ``q = saturate(y / scale)`` rounded to nearest even, saturating at +-448
(float8_e4m3fn) or +-240 (float8_e4m3fnuz); NaN stays NaN. ``scale`` is a one-element float32 tensor on the
input's device. The default FP8 flavour is the platform's native one (``native_fp8_dtype``): float8_e4m3fnuz
on gfx940/941/942 (MI300) GPUs, float8_e4m3fn elsewhere (NVIDIA, gfx950, CPU).
"""

from . import convert, layers, reference, routing
from ._ops import ops
from .activation import silu_and_mul
from .fp8 import native_fp8_dtype
from .gemm import skinny_gemm
from .norm import fused_add_rms_norm, rms_norm
from .quantization import quantize_fp8
from .tuning import tuning_overrides

__all__ = [
    "convert",
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
    "tuning_overrides",
]
