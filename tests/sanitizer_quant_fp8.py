"""Representative quantize_fp8 calls for compute-sanitizer (not collected by pytest):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitizer_quant_fp8.py

Covers every store width the launcher picks (16/8/4/2/1 bytes, from row padding and base-pointer offsets),
partial chunks at the end of a row (d not a multiple of 16, d < 16), both FP8 flavours, fp16 and bf16 input,
3-D input, zero rows, and tight allocations: each input and output is a view that ends exactly at the end of
its own allocation, so any read or write past the last element is an out-of-bounds access memcheck reports.
Each result is also compared byte for byte with reference.py, so the script fails on wrong values too.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import load_kernel  # noqa: E402
from tests.helpers import saturating_scale  # noqa: E402
from tests.sanitizer_swiglu import tight  # noqa: E402
from tests.test_quant_fp8 import assert_exact  # noqa: E402

DEVICE = "cuda"


def run(kernel, shape, dtype, out_dtype, in_offset=0, in_pad=0, out_offset=0, out_pad=0):
    x = tight(shape, dtype, in_offset, in_pad)
    x.copy_(3 * torch.randn(x.shape, dtype=dtype, device=DEVICE))
    scale = saturating_scale(x, out_dtype) if x.numel() else torch.ones(1, device=DEVICE)
    out = tight(shape, out_dtype, out_offset, out_pad)
    kernel.ops.quantize_fp8(out, x, scale)
    torch.cuda.synchronize()
    assert_exact(out, kernel.reference.quantize_fp8(x.cpu(), scale.cpu(), out_dtype))


def main():
    kernel = load_kernel(None)
    torch.manual_seed(0)
    cases = 0
    for dtype in (torch.float16, torch.bfloat16):
        for out_dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
            for d in (1, 7, 16, 17, 2048, 4100):  # partial chunks at 1, 7, 17, 4100
                for rows in (1, 37):
                    run(kernel, (rows, d), dtype, out_dtype)  # store width 16 where d allows
                    run(kernel, (rows, d), dtype, out_dtype, in_pad=8, out_pad=8)  # 8-byte stores
                    run(kernel, (rows, d), dtype, out_dtype, in_pad=4, out_pad=4)  # 4-byte stores
                    run(kernel, (rows, d), dtype, out_dtype, in_pad=3, out_pad=5)  # odd strides: 1-byte stores
                    run(kernel, (rows, d), dtype, out_dtype, in_offset=1, out_offset=3)  # misaligned bases
                    cases += 5
            run(kernel, (2, 3, 4096), dtype, out_dtype, in_pad=8, out_pad=16)  # 3-D, padded, 16-byte accesses
            run(kernel, (0, 64), dtype, out_dtype)  # no rows: nothing launched
            cases += 2
    print(f"sanitizer_quant_fp8: {cases} calls ok")


if __name__ == "__main__":
    main()
