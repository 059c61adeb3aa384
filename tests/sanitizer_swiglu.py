"""Representative silu_and_mul calls for compute-sanitizer (not collected by pytest):

    compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitizer_swiglu.py

Covers every vector width the launcher picks (16/8/4/2-byte accesses from d, row padding and base-pointer
offsets), partial chunks at the end of a row (odd d), both FP8 flavours and 16-bit out, fp16 and bf16 input,
3-D input, zero rows, and tight allocations: each input and output is a view that ends exactly at the end of
its own allocation, so any read or write past the last element is an out-of-bounds access memcheck reports.
Each result is also compared with reference.py, so the script fails on wrong values too.
"""

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import load_kernel  # noqa: E402
from tests.helpers import saturating_scale  # noqa: E402
from tests.test_swiglu_gpu import assert_swiglu_matches  # noqa: E402

DEVICE = "cuda"


def tight(shape, dtype, offset=0, pad=0):
    """A [..., cols] tensor with `pad` extra elements per row, starting `offset` elements into a fresh
    allocation that ends right after its last element (no padding after the last row)."""
    *lead, cols = shape
    rows = math.prod(lead)
    stride = cols + pad
    size = offset + (rows - 1) * stride + cols if rows else offset
    buf = torch.full((size,), float("nan"), dtype=dtype, device=DEVICE)
    return torch.as_strided(buf, (rows, cols), (stride, 1), offset).view(*lead, cols)


def run(kernel, shape, d, dtype, out_dtype, in_offset=0, in_pad=0, out_offset=0, out_pad=0):
    x = tight((*shape, 2 * d), dtype, in_offset, in_pad)
    x.copy_(3 * torch.randn(x.shape, dtype=dtype, device=DEVICE))
    if out_dtype is None:
        scale = None
    elif x.numel() == 0:
        scale = torch.ones(1, device=DEVICE)
    else:
        scale = saturating_scale(kernel.reference.silu_and_mul_ref(x), out_dtype)
    dtype_out = out_dtype or dtype
    out = tight((*shape, d), dtype_out, out_offset, out_pad)
    kernel.ops.silu_and_mul(out, x, scale)
    torch.cuda.synchronize()
    assert_swiglu_matches(out, kernel.reference.silu_and_mul_ref(x, scale, dtype_out))


def main():
    kernel = load_kernel(None)
    torch.manual_seed(0)
    cases = 0
    for dtype in (torch.float16, torch.bfloat16):
        for out_dtype in (None, torch.float8_e4m3fn, torch.float8_e4m3fnuz):
            for d in (1, 7, 64, 4100, 6656):  # widths 1, 1, 8, 4, 8 (partial chunks at 1, 7, 4100)
                for rows in (1, 37):
                    run(kernel, (rows,), d, dtype, out_dtype)
                    run(kernel, (rows,), d, dtype, out_dtype, in_pad=3, out_pad=5)  # odd strides: width 1
                    run(kernel, (rows,), d, dtype, out_dtype, in_pad=4, out_pad=4)  # width <= 4
                    run(kernel, (rows,), d, dtype, out_dtype, in_offset=1, out_offset=3)  # misaligned bases
                    cases += 4
            run(kernel, (2, 3), 4096, dtype, out_dtype, in_pad=8)  # 3-D, padded, 16-byte accesses
            run(kernel, (0,), 64, dtype, out_dtype)  # no rows: nothing launched
            cases += 2
    print(f"sanitizer_swiglu: {cases} calls ok")


if __name__ == "__main__":
    main()
