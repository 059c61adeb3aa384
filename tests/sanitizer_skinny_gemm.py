"""Representative skinny_gemm calls for compute-sanitizer (not a pytest module):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python tests/sanitizer_skinny_gemm.py
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck python tests/sanitizer_skinny_gemm.py
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool synccheck python tests/sanitizer_skinny_gemm.py
    ... python tests/sanitizer_skinny_gemm.py cluster      # only the cases whose names contain every word given

One call per kernel path: every weight access width (16 B, 8 B for K = 1000, element loads for odd K), K tails
inside a sub-iteration and K shorter than one, every token padding, split-K on (workspace, counters, last-CTA
reduction) and off, the stream-K grid (tiles shared by many CTAs, segments across tiles), bias, row strides, misaligned base pointers, K = 0. With torch's caching allocator off every
tensor is its own exactly sized allocation, so memcheck reports any read past a contiguous operand's last
row; padding inside row strides holds NaN, so reading it shows up as a wrong result, and out's padding is
compared. Prints one line per call and exits non-zero on a wrong result (loose check: the pytest suite has
the exact rule).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import load_kernel  # noqa: E402

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz


def lay_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """`t` contiguous (its own allocation), row-padded by 5 elements of NaN, or 3 elements into a buffer."""
    if layout == "padded":
        buf = torch.full((t.shape[0], t.shape[1] + 5), float("nan"), dtype=t.dtype, device=t.device)
        buf[:, : t.shape[1]].copy_(t)
        return buf[:, : t.shape[1]]
    if layout == "offset":
        buf = torch.empty(t.numel() + 3, dtype=t.dtype, device=t.device)
        view = buf[3:].view(t.shape)
        view.copy_(t)
        return view
    return t


def run_case(k, name, m, n, kdim, dtype, out_dtype, layout="contiguous", bias=False, split=None):
    torch.manual_seed(0)
    dev = "cuda"
    a, b = torch.randn(m, kdim, device=dev), torch.randn(n, kdim, device=dev)
    sa = sb = None
    if dtype in (FN, FNUZ):
        a, b = (8 * a).to(dtype), (8 * b).to(dtype)
        sa, sb = torch.tensor([0.03], device=dev), torch.tensor([0.02], device=dev)
    else:
        a, b = a.to(dtype), b.to(dtype)
    bias_t = torch.randn(n, device=dev).to(out_dtype) if bias else None
    a, b = lay_out(a, layout), lay_out(b, layout)
    out_buf = torch.full((m, n + 4), 3.0, dtype=out_dtype, device=dev)
    out = out_buf[:, :n] if layout == "padded" else torch.full((m, n), float("nan"), dtype=out_dtype, device=dev)
    if layout == "padded":
        out.fill_(float("nan"))
    # Only the split asked for: the launcher's own choice otherwise, whatever the caller's environment says.
    overrides = {"FP8DK_SKINNY_SPLIT_K": None if split in (None, "stream-k") else str(split),
                 "FP8DK_SKINNY_STREAM_K": "1" if split == "stream-k" else None}
    with k.tuning_overrides(overrides):
        k.ops.skinny_gemm(out, a, b, sa, sb, bias_t)
    torch.cuda.synchronize()
    ref = k.reference.skinny_gemm_ref(a.cpu(), b.cpu(), None if sa is None else sa.cpu(),
                                      None if sb is None else sb.cpu(), None if bias_t is None else bias_t.cpu(),
                                      out_dtype).float()
    got = out.cpu().float()
    diff = (got - ref).abs()
    ok = bool((diff <= 0.02 * ref.abs() + 0.01 * ref.abs().max() + 1e-3).all()) and not bool(got.isnan().any())
    if layout == "padded":
        ok &= bool((out_buf[:, n:] == 3.0).all())
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return ok


def main() -> int:
    k = load_kernel(None)
    f16, b16 = torch.float16, torch.bfloat16
    cases = [
        # name, m, n, k, operand dtype, out dtype, layout, bias, split (a number, "stream-k" or the default)
        ("e4m3fn M=1 N=2304 K=1000 (8-byte weight loads, K tail)", 1, 2304, 1000, FN, f16, "contiguous", True, None),
        ("e4m3fn M=32 N=17 K=1003 (element loads, odd N/K) split 4", 32, 17, 1003, FN, b16, "contiguous", True, 4),
        ("e4m3fnuz M=9 N=130 K=4176 strided a/b/out", 9, 130, 4176, FNUZ, f16, "padded", True, None),
        ("e4m3fnuz M=24 N=333 K=2000 misaligned bases split 3", 24, 333, 2000, FNUZ, b16, "offset", False, 3),
        ("e4m3fn M=16 N=2304 K=16384 default split", 16, 2304, 16384, FN, b16, "contiguous", True, None),
        ("e4m3fn M=3 N=1 K=48 (K shorter than a sub-iteration)", 3, 1, 48, FN, f16, "contiguous", False, None),
        ("bf16 M=5 N=1000 K=4100 split 3", 5, 1000, 4100, b16, b16, "contiguous", True, 3),
        ("fp16 M=24 N=33 K=40 strided", 24, 33, 40, f16, f16, "padded", True, None),
        ("fp16 M=32 N=257 K=3001 misaligned (2-byte loads) split 2", 32, 257, 3001, f16, f16, "offset", True, 2),
        ("e4m3fn M=4 N=64 K=0 bias only", 4, 64, 0, FN, f16, "contiguous", True, None),
        ("e4m3fn M=8 N=13312 K=16384 default (stream-K)", 8, 13312, 16384, FN, b16, "contiguous", True, None),
        ("e4m3fn M=32 N=2304 K=6656 default (Hopper: copy engine, wgmma)", 32, 2304, 6656, FN, b16, "contiguous", True,
         None),
        ("e4m3fn M=8 N=2300 K=16384 default (Hopper: a cluster per tile, its meet's bulk copies)", 8, 2300, 16384, FN,
         b16, "contiguous", True, None),
        ("e4m3fn M=32 N=2301 K=16384 default (Hopper: a cluster per tile, a last tile of 61 rows)", 32, 2301, 16384, FN,
         b16, "contiguous", True, None),
        ("e4m3fn M=25 N=16384 K=2048 default (Hopper: wgmma, one CTA per tile)", 25, 16384, 2048, FN, f16, "contiguous",
         False, None),
        ("e4m3fn M=32 N=17 K=16384 stream-K (a tile over many CTAs)", 32, 17, 16384, FN, f16, "contiguous", False,
         "stream-k"),
        ("e4m3fnuz M=5 N=4000 K=1003 stream-K strided (element loads)", 5, 4000, 1003, FNUZ, f16, "padded", True,
         "stream-k"),
        ("e4m3fn M=1 N=28672 K=4096 default (Hopper: whole tiles after stream-K, reducer warps)", 1, 28672, 4096, FN,
         b16, "contiguous", True, None),
        ("e4m3fn M=32 N=10240 K=8192 default (Hopper: wgmma, reducer warps)", 32, 10240, 8192, FN, b16, "contiguous",
         True, None),
        ("e4m3fnuz M=16 N=13312 K=4100 default (Hopper: mma.sync, reducer warps, K tail)", 16, 13312, 4100, FNUZ, f16,
         "contiguous", False, None),
    ]
    ok = True
    for case in cases:
        if all(word in case[0] for word in sys.argv[1:]):  # optional words a case's name must contain
            ok &= run_case(k, *case)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
