"""Representative rms_norm / fused_add_rms_norm calls for compute-sanitizer (not a pytest module):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python tests/sanitizer_rmsnorm.py

One call per GPU kernel path (aligned rows, odd hidden sizes, row strides, misaligned base pointers, rows
beyond registers and beyond shared memory, both FP8 flavours, zero rows; on NVIDIA sm_90+ rows split over
thread-block clusters of 2, 4 and 8 CTAs, forced with FP8DK_RMSNORM_CLUSTER, while the one-CTA cases force
it off so that they keep covering their kernels; many aligned rows on the persistent kernel). With torch's caching allocator off,
every tensor is its own exactly sized allocation, so memcheck reports any access past a tensor's last
element; writes past a view's rows into its padding are caught here by comparing the padding. Prints one
line per call and exits non-zero on a wrong result (loose check: the pytest suite has the exact rule).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import load_kernel  # noqa: E402

EPS = 1e-6
CLUSTER_ENV = "FP8DK_RMSNORM_CLUSTER"


def offset_view(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of `t` starting `offset` elements into an exactly sized buffer (misaligned base pointer)."""
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


def padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    buf = torch.full((*t.shape[:-1], t.shape[-1] + pad), float("nan"), dtype=t.dtype, device=t.device)
    buf[..., : t.shape[-1]].copy_(t)
    return buf[..., : t.shape[-1]]


def check(k, name, x, weight, out, residual=None, scale=None, padded_out=False):
    """Runs one call and checks it loosely; `padded_out`: out is a row-padded view whose padding must survive."""
    ref_args = (x.cpu(), weight.cpu(), EPS, None if scale is None else scale.cpu(), out.dtype)
    padding = out._base[..., out.shape[-1]:].clone() if padded_out else None
    if residual is None:
        ref = k.reference.rms_norm_ref(*ref_args)
        k.ops.rms_norm(out, x, weight, EPS, scale)
    else:
        ref, ref_res = k.reference.fused_add_rms_norm_ref(ref_args[0], residual.cpu(), *ref_args[1:])
        k.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)
    torch.cuda.synchronize()
    # Loose checks (the pytest suite has the exact rule): a wrong index or an unwritten element shows as a gross error.
    diff = (out.cpu().float() - ref.float()).abs()
    tol = 0.07 * ref.float().abs() + 0.05 * ref.float().abs().max()
    ok = bool((diff <= tol).all()) and not bool(out.cpu().float().isnan().any())
    if residual is not None:
        ok &= torch.equal(residual.cpu(), ref_res)
    if padding is not None:
        ok &= torch.equal(out._base[..., out.shape[-1]:].cpu().view(torch.uint8), padding.cpu().view(torch.uint8))
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return ok


def main() -> int:
    k = load_kernel(None)
    dev = "cuda"
    fn, fnuz = torch.float8_e4m3fn, torch.float8_e4m3fnuz
    scale = torch.tensor([0.02], device=dev)
    cases = []  # (name, shape, dtype, out dtype, fused, how the tensors are laid out, FP8DK_RMSNORM_CLUSTER)
    for fused in (False, True):
        op = "fused" if fused else "rms_norm"
        one_cta = [
            (f"{op} aligned 16x4096 fp16->e4m3fn", (16, 4096), torch.float16, fn, fused, "contiguous"),
            (f"{op} aligned 3x16384 bf16->e4m3fnuz", (3, 16384), torch.bfloat16, fnuz, fused, "contiguous"),
            (f"{op} odd hidden 33x7 fp16->fp16", (33, 7), torch.float16, None, fused, "contiguous"),
            (f"{op} odd hidden 5x16385 bf16->e4m3fn", (5, 16385), torch.bfloat16, fn, fused, "contiguous"),
            (f"{op} odd hidden 9x1001 fp16->e4m3fnuz", (9, 1001), torch.float16, fnuz, fused, "contiguous"),
            (f"{op} strided in+5 out+3 7x1000 bf16->e4m3fn", (7, 1000), torch.bfloat16, fn, fused, "padded"),
            (f"{op} strided 3-D 2x3x4096 fp16->e4m3fnuz", (2, 3, 4096), torch.float16, fnuz, fused, "padded"),
            (f"{op} misaligned bases 6x4096 fp16->e4m3fn", (6, 4096), torch.float16, fn, fused, "offset"),
            (f"{op} misaligned bases 4x130 bf16->bf16", (4, 130), torch.bfloat16, None, fused, "offset"),
            (f"{op} long row 2x40001 fp16->e4m3fn", (2, 40001), torch.float16, fn, fused, "contiguous"),
            (f"{op} long row past smem 1x200003 bf16->e4m3fnuz", (1, 200003), torch.bfloat16, fnuz, fused, "offset"),
        ]
        cases += [(*case, "0") for case in one_cta]
        cases += [
            (f"{op} cluster of 4 aligned 3x16384 bf16->e4m3fn", (3, 16384), torch.bfloat16, fn, fused,
             "contiguous", "4"),
            (f"{op} cluster of 8 long-row split 2x16385 fp16->e4m3fnuz", (2, 16385), torch.float16, fnuz, fused,
             "contiguous", "8"),
            (f"{op} cluster of 2 strided in+5 out+3 5x8192 bf16->bf16", (5, 8192), torch.bfloat16, None, fused,
             "padded", "2"),
            (f"{op} cluster of 8 misaligned bases 3x16384 fp16->e4m3fn", (3, 16384), torch.float16, fn, fused,
             "offset", "8"),
            (f"{op} cluster of 8 idle CTAs 4x1001 fp16->e4m3fn", (4, 1001), torch.float16, fn, fused,
             "contiguous", "8"),
            (f"{op} cluster heuristic 1x16384 bf16->e4m3fn", (1, 16384), torch.bfloat16, fn, fused,
             "contiguous", None),
            # Many aligned rows: the persistent kernel (heuristic), rows per CTA uneven; 1032: idle lanes.
            (f"{op} persistent 300x16384 bf16->e4m3fn", (300, 16384), torch.bfloat16, fn, fused,
             "contiguous", None),
            (f"{op} persistent 5000x1032 fp16->e4m3fnuz", (5000, 1032), torch.float16, fnuz, fused,
             "contiguous", None),
        ]
    ok = True
    for name, shape, dtype, out_dtype, fused, layout, cluster in cases:
        torch.manual_seed(0)
        x = 2 * torch.randn(shape, dtype=dtype, device=dev)
        weight = torch.randn(shape[-1], dtype=dtype, device=dev)
        residual = torch.randn(shape, dtype=dtype, device=dev) if fused else None
        out = torch.empty(shape, dtype=out_dtype or dtype, device=dev)
        if layout == "padded":
            x, out = padded(x, 5), padded(out, 3)
        elif layout == "offset":
            x, weight, out = offset_view(x, 1), offset_view(weight, 3), offset_view(out, 1)
            residual = None if residual is None else offset_view(residual, 1)
        with k.tuning_overrides({CLUSTER_ENV: cluster}):
            ok &= check(k, name, x, weight, out, residual, None if out_dtype is None else scale, layout == "padded")

    # No rows: nothing launched, nothing touched.
    empty = torch.empty(0, 4096, dtype=torch.float16, device=dev)
    k.ops.fused_add_rms_norm(torch.empty(0, 4096, dtype=fn, device=dev), empty, empty.clone(),
                             torch.randn(4096, dtype=torch.float16, device=dev), EPS, scale)
    k.ops.rms_norm(torch.empty_like(empty), empty, torch.randn(4096, dtype=torch.float16, device=dev), EPS, None)
    torch.cuda.synchronize()
    print("ok   0 rows")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
