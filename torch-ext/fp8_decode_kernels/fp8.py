"""The two FP8 flavours the ops write: float8_e4m3fn (OCP: NVIDIA, gfx950, CPU) and float8_e4m3fnuz (MI300)."""

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# gfx940/941/942 (MI300) implement the FNUZ FP8 variant; everything newer (gfx950) and NVIDIA use OCP e4m3fn.
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 flavour: 448 for e4m3fn (OCP), 240 for e4m3fnuz (MI300X)."""
    return float(torch.finfo(dtype).max)


@torch.compiler.assume_constant_result
def native_fp8_dtype(device: torch.device) -> torch.dtype:
    """The FP8 flavour the device computes in: float8_e4m3fnuz on gfx940/941/942 (MI300) ROCm GPUs,
    float8_e4m3fn everywhere else. Queries the device on each call (never at import)."""
    if device.type == "cuda" and torch.version.hip is not None:
        arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
        if arch in _FNUZ_ARCHS:
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn
