"""Comparison rules and input makers shared by the op tests.

The rule (README "Op contract"): outputs equal the reference's bytes except at most 1 ulp of the output dtype on
at most 0.1% of the elements, and NaN exactly where the reference has NaN. The same rule serves FP8 and 16-bit
outputs; for 16-bit it is stricter than "within 1 ulp" alone, so a systematic rounding error (e.g. truncation)
fails even though each element stays within 1 ulp.
"""

import math
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "fp8-decode-kernels/fp8-decode-kernels"

DTYPES_16BIT = (torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# A quantizing op's output: its input dtype (None) or an FP8 flavour.
QUANT_OUT = (None, *FP8_DTYPES)
QUANT_IDS = ("16bit", "e4m3fn", "e4m3fnuz")
MAX_MISMATCH_FRACTION = 1e-3

# Row-wise ops: every hidden size x every row count, except the largest products, which only add CI time.
HIDDEN_SIZES = (1, 7, 64, 1000, 4096, 16384)
ROW_COUNTS = (1, 3, 32, 257)
MAX_ELEMENTS = 1 << 20
ROW_SHAPES = [(rows, hidden) for hidden in HIDDEN_SIZES for rows in ROW_COUNTS if rows * hidden <= MAX_ELEMENTS]


def row_shape_id(shape) -> str:
    return f"{shape[0]}x{shape[1]}"


def poisoned(shape, dtype, device) -> torch.Tensor:
    """An output buffer full of NaN (0x7f in e4m3fn, 0x80 in e4m3fnuz): an element the op leaves unwritten
    shows up as a NaN the reference does not have."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def row_padded(t: torch.Tensor, pad: int = 5, fill=float("nan")) -> torch.Tensor:
    """A copy of `t` as a view into a buffer with `pad` extra columns per row (last dim contiguous, row stride
    larger than the row), which the ops must accept without a copy."""
    buf = torch.full((*t.shape[:-1], t.shape[-1] + pad), fill, dtype=t.dtype, device=t.device)
    view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def saturating_scale(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A per-tensor scale that maps the largest |y| to 1.5x the FP8 maximum: the top third of the range
    saturates, the rest covers the normal and subnormal FP8 values. Not a power of two, so the division's
    rounding is exercised too."""
    amax = y.float().abs().max().item()
    return torch.tensor([max(amax, 1e-3) / (1.5 * torch.finfo(dtype).max)], dtype=torch.float32, device=y.device)


def _ordinal(t: torch.Tensor) -> torch.Tensor:
    """Float bit patterns as integers ordered like the values (sign-magnitude -> two's complement): adjacent
    representable values differ by 1, +0 and -0 coincide, and +-inf sits 1 above the largest finite value."""
    if t.element_size() == 1:
        bits, sign_bit = t.view(torch.uint8).to(torch.int32), 0x80
    else:
        bits, sign_bit = t.view(torch.int16).to(torch.int32) & 0xFFFF, 0x8000
    magnitude = bits & (sign_bit - 1)
    return torch.where(bits & sign_bit != 0, -magnitude, magnitude)


def assert_matches_reference(out: torch.Tensor, ref: torch.Tensor, max_ulps: int = 1,
                             max_fraction: float = MAX_MISMATCH_FRACTION) -> None:
    """`out` (FP8 or 16-bit) equals `ref` bit for bit except on at most `max_fraction` of the elements, which
    may be up to `max_ulps` ulp of the dtype away; NaN exactly where `ref` has NaN."""
    assert out.dtype == ref.dtype and out.shape == ref.shape, (
        f"got {out.dtype} {tuple(out.shape)}, want {ref.dtype} {tuple(ref.shape)}")
    if out.numel() == 0:
        return
    out, ref = out.cpu(), ref.cpu()
    nan_out, nan_ref = torch.isnan(out.float()), torch.isnan(ref.float())
    assert torch.equal(nan_out, nan_ref), (
        f"NaN positions differ: {int((nan_out & ~nan_ref).sum())} unexpected NaN (unwritten or wrong), "
        f"{int((nan_ref & ~nan_out).sum())} missing")
    ulps = (_ordinal(out) - _ordinal(ref)).abs().masked_fill(nan_ref, 0)
    worst = int(ulps.argmax())
    assert ulps.flatten()[worst] <= max_ulps, (
        f"{int(ulps.flatten()[worst])} ulp from the reference at flat index {worst}: got "
        f"{out.flatten()[worst].item()}, want {ref.flatten()[worst].item()} ({out.dtype}, allowed {max_ulps} ulp)")
    count, allowed = int((ulps != 0).sum()), math.floor(out.numel() * max_fraction)
    assert count <= allowed, (
        f"{count} of {out.numel()} elements differ from the reference (allowed: {allowed}, {max_fraction:.1%}); "
        f"first at flat index {int((ulps != 0).flatten().nonzero()[0])}")


def assert_bitwise_equal(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    same = out.cpu().view(torch.uint8) == ref.cpu().view(torch.uint8)
    if not bool(same.all()):
        where = (~same).nonzero()[0].tolist()  # in the byte view: the element's last index scaled by its size
        where[-1] //= out.element_size()
        raise AssertionError(f"{what}: {int((~same).sum())} bytes differ from the reference, the first at "
                             f"{tuple(where)}: {out[tuple(where)].item()!r} against {ref[tuple(where)].item()!r}")


def opcheck_utils(*tensors) -> tuple:
    """torch.library.opcheck's checks for these arguments. test_schema compares arguments with allclose, which
    torch implements for no FP8 dtype, so it is left out whenever an FP8 tensor is involved."""
    utils = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    if any(isinstance(t, torch.Tensor) and t.dtype in FP8_DTYPES for t in tensors):
        return utils[1:]
    return utils


def launched_kernels(fn, name_part: str) -> list:
    """Names of the GPU kernels containing `name_part` that `fn` launches, from the profiler (skips where it
    records none)."""
    import pytest
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA and name_part in e.name]
    if not names:
        pytest.skip(f"the profiler recorded no {name_part} kernel (CUPTI unavailable?)")
    return names
