"""skinny_gemm on the GPU (CUDA or ROCm) against reference.py's float64 GEMM.

test_skinny_gemm.py runs the op contract on every device; this file covers what only the GPU kernel has:
every M with each MMA token padding (8/16/24/32) and row-block count, the N x K grid of the task (tiles
narrower than a CTA, K tails inside a sub-iteration, long K), the decode shapes, weight-row access widths
(16 B, 8 B, element by element) with NaN in the padding the kernel must not read, the stream-K grid with
tiles shared by many CTAs, the split grid and split-K forced through the environment (deterministic
reduction, bitwise-identical reruns), NaN propagation of the FP8 unpack, 64-bit
offsets (N * K > 2^31), CUDA graphs and torch.compile. Skips without a GPU.

Every test runs three times (the `gemm_path` fixture): with the copy-engine kernel wherever it can run
(Hopper; skinny_gemm_tma.cuh) multiplying with mma.sync (FP8DK_SKINNY_TMA_QGMMA=0: exact products, fp32
sums), with it multiplying through wgmma wherever the operands are OCP e4m3 (FP8DK_SKINNY_TMA_QGMMA=1;
skinny_gemm_qgmma.cuh: what the plan picks above 8 tokens), and with FP8DK_SKINNY_TMA=0 (the portable
kernel). Tests that force the portable kernel's knobs run it on every pass. Where the copy engine cannot serve (no Hopper, rows of b not 16-byte
aligned) both passes take the portable kernel; test_kernel_choice checks which kernel ran.
"""

import os

import pytest
import torch

from .conftest import HAS_GPU
from .helpers import FP8_DTYPES, assert_bitwise_equal, launched_kernels, poisoned
from .test_skinny_gemm import assert_gemm_close

pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")

FP8 = pytest.mark.parametrize("dtype", FP8_DTYPES, ids=("e4m3fn", "e4m3fnuz"))
OUT16 = pytest.mark.parametrize("out_dtype", (torch.float16, torch.bfloat16), ids=("fp16", "bf16"))
OPERANDS = pytest.mark.parametrize("dtype", (*FP8_DTYPES, torch.float16, torch.bfloat16),
                                   ids=("e4m3fn", "e4m3fnuz", "fp16", "bf16"))
NS = (1, 17, 128, 2304, 13312)
KS = (16, 48, 1000, 6656, 16384)
DECODE = {"qkv": (2304, 16384), "gate_up": (13312, 16384), "down": (16384, 6656)}


@pytest.fixture(params=("tma", "tma-reducers", "qgmma", "portable"), autouse=True)
def gemm_path(request, monkeypatch) -> str:
    """Every test on each path of the op: the copy-engine kernel with mma.sync (the consumers reducing each
    tile's run themselves, or handing it to the reducer warps), with wgmma (and the reducer warps), and the
    portable kernel."""
    if request.param == "portable":
        monkeypatch.setenv("FP8DK_SKINNY_TMA", "0")
    else:
        monkeypatch.setenv("FP8DK_SKINNY_TMA_QGMMA", "1" if request.param == "qgmma" else "0")
        monkeypatch.setenv("FP8DK_SKINNY_TMA_REDUCERS", "0" if request.param == "tma" else "1")
    return request.param


def is_hopper() -> bool:
    return torch.version.hip is None and torch.cuda.get_device_capability()[0] == 9


@pytest.fixture
def device() -> str:
    """Every test here runs on the GPU only (conftest's `kernel` fixture picks the GPU variant from this)."""
    return "cuda"


def padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    """`t` as a view into a buffer with `pad` extra elements per row holding NaN (0x7f in e4m3fn, 0x80 in
    e4m3fnuz): padding the kernel must never read."""
    if pad == 0:
        return t
    buf = torch.full((t.shape[0], t.shape[1] + pad), float("nan"), dtype=t.dtype, device=t.device)
    buf[:, : t.shape[1]].copy_(t)
    return buf[:, : t.shape[1]]


def operands(m, n, k, dtype, out_dtype=None, bias=False, pad_a=0, pad_b=0):
    """a [m, k], b [n, k] (optionally row-padded with NaN), scales for FP8, bias; FP8 values spread over the
    whole e4m3 range (|x| up to ~100, subnormals included) and scales that keep outputs well inside fp16."""
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda")
    scale_a = scale_b = None
    if dtype in FP8_DTYPES:
        a, b = (16 * a).to(dtype), (16 * b).to(dtype)
        scale_a = torch.rand(1, device="cuda") * 0.01 + 0.005
        scale_b = torch.rand(1, device="cuda") * 0.01 + 0.005
        out_dtype = out_dtype or torch.float16
    else:
        a, b = a.to(dtype), b.to(dtype)
        out_dtype = dtype
    bias_t = torch.randn(n, device="cuda").to(out_dtype) if bias else None
    return padded(a, pad_a), padded(b, pad_b), scale_a, scale_b, bias_t, out_dtype


def run(kernel, a, b, scale_a, scale_b, bias, out_dtype, out=None):
    if out is None:
        out = poisoned((a.shape[0], b.shape[0]), out_dtype, "cuda")
    kernel.ops.skinny_gemm(out, a, b, scale_a, scale_b, bias)
    return out


def check(kernel, m, n, k, dtype, out_dtype=None, bias=False, pad_a=0, pad_b=0):
    a, b, sa, sb, bias_t, out_dtype = operands(m, n, k, dtype, out_dtype, bias, pad_a, pad_b)
    out = run(kernel, a, b, sa, sb, bias_t, out_dtype)
    assert_gemm_close(out, a, b, sa, sb, bias_t, kernel.reference)


# ------------------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize("m", range(1, 33))
@OPERANDS
def test_every_m(kernel, dtype, m):
    """Every M: token paddings 8/16/24/32, one or two row blocks per warp, tokens past M read token M - 1;
    K = 4176 ends inside a sub-iteration."""
    check(kernel, m, 300, 4176, dtype, bias=m % 3 == 0)


@pytest.mark.parametrize("m", (1, 8, 9, 32))
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("n", NS)
def test_grid(kernel, n, k, m):
    """The task's N x K grid (e4m3fn, fp16 out): tiles wider than N, K tails inside a sub-iteration, long K."""
    check(kernel, m, n, k, torch.float8_e4m3fn, bias=n % 2 == 1)


@pytest.mark.parametrize("m", (1, 16, 32))
@pytest.mark.parametrize("n,k", ((17, 48), (2304, 1000), (128, 16384)))
@OUT16
@OPERANDS
def test_grid_dtypes(kernel, dtype, out_dtype, n, k, m):
    """Every operand format (and both outputs for FP8) on a few grid points."""
    if dtype not in FP8_DTYPES and out_dtype != dtype:
        pytest.skip("16-bit operands produce their own dtype")
    check(kernel, m, n, k, dtype, out_dtype, bias=True)


@pytest.mark.parametrize("m", (1, 4, 8, 16, 32))
@pytest.mark.parametrize("layer", DECODE)
@FP8
def test_decode_shapes(kernel, dtype, layer, m):
    n, k = DECODE[layer]
    check(kernel, m, n, k, dtype, torch.bfloat16)


@pytest.mark.parametrize("m", (1, 32))
@pytest.mark.parametrize("layer", DECODE)
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=("fp16", "bf16"))
def test_decode_shapes_16bit(kernel, dtype, layer, m):
    n, k = DECODE[layer]
    check(kernel, m, n, k, dtype)


def test_zero_k_and_empty(kernel):
    """K = 0 gives the bias (or zeros); M = 0 and N = 0 are no-ops."""
    fn = torch.float8_e4m3fn
    a, b = torch.empty(3, 0, device="cuda").to(fn), torch.empty(5, 0, device="cuda").to(fn)
    s = torch.ones(1, device="cuda")
    bias = torch.randn(5, device="cuda").half()
    out = run(kernel, a, b, s, s, bias, torch.float16)
    assert_bitwise_equal(out, bias.expand(3, 5), "K = 0 with bias")
    assert not run(kernel, a, b, s, s, None, torch.float16).any()
    run(kernel, a[:0], b, s, s, None, torch.float16)
    run(kernel, a, b[:0], s, s, None, torch.float16)


# ------------------------------------------------------------------------------------------ kernel choice, accuracy


@pytest.mark.parametrize("case", ("aligned", "b_row_stride_8", "b_offset_8", "k_below_box", "tma_off",
                                  "portable_knob"))
def test_kernel_choice(kernel, monkeypatch, gemm_path, case):
    """The copy-engine kernel runs on Hopper wherever the copy engine can read b (base and row stride multiples
    of 16 bytes; K shorter than a box is zero-filled, not a fallback); the portable kernel everywhere else:
    other GPUs, rows of b 8 bytes apart or starting 8 bytes off, FP8DK_SKINNY_TMA=0, or a knob of the portable
    kernel set. Both are right (checked against the reference)."""
    m, n, k = 5, 300, 1024
    pad_b = 8 if case == "b_row_stride_8" else 0
    if case == "k_below_box":
        k = 48
    if case == "tma_off":
        monkeypatch.setenv("FP8DK_SKINNY_TMA", "0")
    if case == "portable_knob":
        monkeypatch.setenv("FP8DK_SKINNY_STREAM_K", "0")
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, torch.float8_e4m3fn, bias=True, pad_b=pad_b)
    if case == "b_offset_8":
        b = torch.cat([torch.zeros(8, dtype=torch.uint8, device="cuda"), b.reshape(-1).view(torch.uint8)])[8:]
        b = b.view(torch.float8_e4m3fn).view(n, k)
        assert b.data_ptr() % 16 == 8
    out = poisoned((m, n), out_dtype, "cuda")
    names = launched_kernels(lambda: kernel.ops.skinny_gemm(out, a, b, sa, sb, bias), "skinny_gemm")
    assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)
    expect_tma = is_hopper() and gemm_path != "portable" and case in ("aligned", "k_below_box")
    assert any("skinny_gemm_tma_kernel" in x for x in names) == expect_tma, names
    if expect_tma and gemm_path == "qgmma":
        assert all(", true>" in x for x in names if "skinny_gemm_tma_kernel" in x), names


@pytest.mark.parametrize("dtype", (torch.float8_e4m3fnuz, torch.bfloat16), ids=("e4m3fnuz", "bf16"))
def test_qgmma_only_for_ocp_e4m3(kernel, monkeypatch, gemm_path, dtype):
    """FP8DK_SKINNY_TMA_QGMMA=1 asks for wgmma, which multiplies OCP e4m3 only: other operands keep mma.sync
    on the copy-engine kernel (and are right)."""
    if not is_hopper() or gemm_path != "qgmma":
        pytest.skip("the wgmma pass on Hopper")
    a, b, sa, sb, bias, out_dtype = operands(7, 300, 1024, dtype, bias=True)
    out = poisoned((7, 300), out_dtype, "cuda")
    names = launched_kernels(lambda: kernel.ops.skinny_gemm(out, a, b, sa, sb, bias), "skinny_gemm_tma_kernel")
    assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)
    assert not any(", true>" in x for x in names), names


@pytest.mark.parametrize("m", (9, 17, 32))
@pytest.mark.parametrize("n,k", [(2304, 16384), (16384, 2048), (13312, 4096 + 80), (300, 1152)])
def test_qgmma_overlap_bitwise_as_box_by_box(kernel, monkeypatch, gemm_path, n, k, m):
    """The wgmma consumer's overlapped boxes (qgmma_two_boxes: a warpgroup's two boxes of a full stage, the
    default) sum to the bit what box by box does (FP8DK_SKINNY_TMA_QGMMA_OVERLAP=0), on the plan's tilings of
    64 and 128 rows and on K with a partial last stage (taken box by box either way)."""
    if not is_hopper() or gemm_path != "qgmma":
        pytest.skip("the wgmma pass on Hopper")
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, torch.float8_e4m3fn, bias=True)
    overlapped = run(kernel, a, b, sa, sb, bias, out_dtype)
    monkeypatch.setenv("FP8DK_SKINNY_TMA_QGMMA_OVERLAP", "0")
    box_by_box = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_bitwise_equal(overlapped, box_by_box, "overlapped boxes against box by box")
    assert_gemm_close(overlapped, a, b, sa, sb, bias, kernel.reference)


@pytest.mark.parametrize("m", (1, 8, 16, 24, 32))
@pytest.mark.parametrize("n,k", [(2304, 16384), (16384, 6656), (256, 4096), (1024, 48)])
@OUT16
def test_accuracy_against_scaled_mm(kernel, out_dtype, n, k, m):
    """The accuracy rule: against a float64 GEMM of the dequantized operands, our error (largest element and
    norm) is never worse than torch._scaled_mm's (use_fast_accum=False) on the same e4m3fn inputs."""
    if not is_hopper():
        pytest.skip("torch._scaled_mm's FP8 path is measured on Hopper")
    a, b, sa, sb, _, _ = operands(m, n, k, torch.float8_e4m3fn)
    ours = run(kernel, a, b, sa, sb, None, out_dtype).double()
    theirs = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=out_dtype).double()
    ref = (a.double() @ b.double().t()) * (sa.double() * sb.double())
    err_ours, err_theirs = (ours - ref).abs(), (theirs - ref).abs()
    assert err_ours.max() <= err_theirs.max(), (err_ours.max().item(), err_theirs.max().item())
    assert err_ours.norm() <= err_theirs.norm() * 1.001, (err_ours.norm().item(), err_theirs.norm().item())


@pytest.mark.parametrize("wk,rb,boxes,stages", [(1, 1, 1, 2), (2, 1, 2, 3), (2, 1, 8, 2), (4, 2, 4, 2), (8, 1, 8, 4),
                                                (1, 1, 3, 7), (2, 2, 2, 16)])
@pytest.mark.parametrize("m", (1, 9, 32))
@pytest.mark.parametrize("dtype", (torch.float8_e4m3fn, torch.bfloat16), ids=("e4m3fn", "bf16"))
def test_tma_tilings(kernel, monkeypatch, dtype, m, wk, rb, boxes, stages):
    """The copy-engine kernel's knobs: warp columns along K, boxes per stage (boxes and stages wholly past K
    skipped), two row blocks per warp, shallow rings (every slot reused many times), rings deeper than shared
    memory allows (capped). Portable kernel on the other pass / other GPUs."""
    monkeypatch.setenv("FP8DK_SKINNY_TMA_WK", str(wk))
    monkeypatch.setenv("FP8DK_SKINNY_TMA_RB", str(rb))
    monkeypatch.setenv("FP8DK_SKINNY_TMA_BOXES", str(boxes))
    monkeypatch.setenv("FP8DK_SKINNY_TMA_STAGES", str(stages))
    check(kernel, m, 1000, 4096 + 80, dtype, bias=True)
    check(kernel, m, 33, 2 * 1024 + 16, dtype, bias=False)


# ------------------------------------------------------------------------------------------ strides, alignment


@pytest.mark.parametrize("pad_a,pad_b", [(0, 256), (8, 8), (3, 0), (0, 1), (5, 7), (16, 2)])
@pytest.mark.parametrize("m", (1, 12, 32))
@OPERANDS
def test_row_strides(kernel, dtype, m, pad_a, pad_b):
    """Padded rows of a and b (the padding holds NaN, which must never be read): vLLM's 256-byte FP8 padding,
    8-byte and odd strides (narrow weight access paths, element-wise activation staging)."""
    check(kernel, m, 130, 1000, dtype, bias=True, pad_a=pad_a, pad_b=pad_b)


@pytest.mark.parametrize("k", (1000, 1003, 1024))
@FP8
def test_weight_access_widths(kernel, dtype, k):
    """K = 1000 FP8 rows are 8-byte aligned (8-byte loads), K = 1003 byte aligned (element loads)."""
    check(kernel, 9, 2304, k, dtype, bias=True)


def test_out_stride_and_offsets(kernel):
    """out with a row stride (padding untouched) and operands starting at odd offsets of their buffers."""
    m, n, k, fn = 7, 333, 2000, torch.float8_e4m3fn
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, fn, bias=True)
    a_buf = torch.zeros(m * k + 3, device="cuda").to(fn)
    a_off = a_buf[3:].view(m, k)
    a_off.copy_(a)
    b_buf = torch.zeros(n * k + 5, device="cuda").to(fn)
    b_off = b_buf[5:].view(n, k)
    b_off.copy_(b)
    out_buf = torch.full((m, n + 9), 7.0, dtype=out_dtype, device="cuda")
    out = out_buf[:, :n]
    run(kernel, a_off, b_off, sa, sb, bias, out_dtype, out=out.fill_(float("nan")))
    assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)
    assert bool((out_buf[:, n:] == 7.0).all()), "wrote into out's row padding"


# ------------------------------------------------------------------------------------------ split-K, determinism


@pytest.mark.parametrize("split", (1, 2, 3, 8, 64))
@pytest.mark.parametrize("m", (1, 16, 32))
@FP8
def test_forced_split_k(kernel, monkeypatch, dtype, m, split):
    """FP8DK_SKINNY_SPLIT_K: any split (capped at one K-block per slice) is right; splits up to 8 meet in a
    cluster on sm_90+, larger ones (M = 16, 32 here) through the workspace."""
    monkeypatch.setenv("FP8DK_SKINNY_SPLIT_K", str(split))
    check(kernel, m, 2304, 6656 + 40, dtype, bias=True)


@pytest.mark.parametrize("m", (1, 9, 32))
@pytest.mark.parametrize("n,k", [(2304, 16384), (16384, 6656), (17, 16384), (300, 4176), (2304, 1000), (13312, 48)])
@FP8
def test_split_grid(kernel, monkeypatch, dtype, n, k, m):
    """FP8DK_SKINNY_STREAM_K=0: the split grid with the heuristic's split (clusters on sm_90+), the path the
    default stream-K grid replaced."""
    monkeypatch.setenv("FP8DK_SKINNY_STREAM_K", "0")
    check(kernel, m, n, k, dtype, bias=True)


@pytest.mark.parametrize("m", (1, 5, 16, 24, 32))
@pytest.mark.parametrize("n,k", [(17, 16384), (33, 6656 + 40), (2304, 16384 + 8), (4000, 1003), (129, 64 * 64 + 63)])
def test_stream_k_shared_tiles(kernel, m, n, k):
    """The stream-K grid where tiles are shared by many CTAs (2-3 tiles over the whole GPU, segments that start
    and end inside tiles and K-blocks), with K tails, 8-byte and element-wise weight rows; bitwise rerun."""
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, torch.float8_e4m3fn, bias=True)
    first = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_gemm_close(first, a, b, sa, sb, bias, kernel.reference)
    assert_bitwise_equal(run(kernel, a, b, sa, sb, bias, out_dtype), first, "rerun")


@OPERANDS
@pytest.mark.parametrize("m", (1, 5, 8, 17, 32))
def test_cluster_per_tile(kernel, monkeypatch, dtype, m):
    """405B TP8 qkv (2304 x 16384) runs on a tile-aligned grid (on an H100, 36 tiles x 3 CTAs), whose tiles' CTAs
    form clusters (the plan at every token count since session 33) and add their partial sums through distributed
    shared memory: bit for bit the sums of the workspace protocol (FP8DK_SKINNY_TMA_CLUSTER=0), and within the
    reference's tolerance."""
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "1")  # as the plan, and whatever it becomes
    out_dtype = torch.bfloat16 if dtype in FP8_DTYPES else None
    a, b, sa, sb, bias, out_dtype = operands(m, 2304, 16384, dtype, out_dtype=out_dtype, bias=True)
    clustered = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_gemm_close(clustered, a, b, sa, sb, bias, kernel.reference)
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "0")
    assert_bitwise_equal(run(kernel, a, b, sa, sb, bias, out_dtype), clustered, "workspace")


@pytest.mark.parametrize("m,n", [(1, 2304), (2, 2301), (3, 2300), (8, 2301), (11, 2300), (32, 2301), (32, 2300)])
def test_cluster_meet_repeated(kernel, monkeypatch, m, n):
    """The cluster per tile's meet, where each CTA copies the rows of the tokens its peers finish into their shared
    memory with the copy engine: 16 launches back to back give the workspace protocol's bytes every time (rows read
    before they landed, or sent to the wrong rank or slot, would not). Token counts that split unevenly over the 3
    ranks (at 1 and 2 tokens a rank finishes none), a last tile of 60 rows (N = 2300) and one of 61 (N = 2301,
    where no 4 outputs of a row are finished together)."""
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "1")
    a, b, sa, sb, bias, out_dtype = operands(m, n, 16384, torch.float8_e4m3fn, out_dtype=torch.bfloat16, bias=True)
    outs = [run(kernel, a, b, sa, sb, bias, out_dtype) for _ in range(16)]
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "0")
    expected = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_gemm_close(expected, a, b, sa, sb, bias, kernel.reference)
    for i, out in enumerate(outs):
        assert_bitwise_equal(out, expected, f"launch {i}")


@pytest.mark.parametrize("wk,m,n", [(1, 8, 2304), (1, 8, 2047), (2, 5, 4096), (4, 8, 2048), (4, 32, 2047)])
def test_cluster_meet_warp_columns(kernel, monkeypatch, wk, m, n):
    """The cluster meet's partial tile straight from the accumulators, for every number of warp columns along K
    that a tile-aligned grid takes (forced; on an H100: one column with clusters of 7 and 8 CTAs, two with 2, four
    with 2, where each later column adds its fragments after a barrier), with last tiles of 127 rows: bit for bit
    the workspace protocol's sums, and within the reference's tolerance. Copy engine only: the plan printer
    (tests/test_plans.py) checks which of these grids are clusters."""
    if not is_hopper():
        pytest.skip("the cluster meet is the copy-engine kernel's (sm_90)")
    monkeypatch.setenv("FP8DK_SKINNY_TMA_WK", str(wk))
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "1")
    a, b, sa, sb, bias, out_dtype = operands(m, n, 16384, torch.float8_e4m3fn, out_dtype=torch.bfloat16, bias=True)
    clustered = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_gemm_close(clustered, a, b, sa, sb, bias, kernel.reference)
    assert_bitwise_equal(run(kernel, a, b, sa, sb, bias, out_dtype), clustered, "rerun")
    monkeypatch.setenv("FP8DK_SKINNY_TMA_CLUSTER", "0")
    assert_bitwise_equal(run(kernel, a, b, sa, sb, bias, out_dtype), clustered, "workspace")


@pytest.mark.parametrize("block_n,m", [(16, 1), (32, 1), (128, 4), (64, 16), (128, 16), (128, 32), (256, 32)])
def test_forced_block_n(kernel, monkeypatch, block_n, m):
    monkeypatch.setenv("FP8DK_SKINNY_BLOCK_N", str(block_n))
    monkeypatch.setenv("FP8DK_SKINNY_SPLIT_K", "3")
    check(kernel, m, 1000, 4096 + 64, torch.float8_e4m3fn, bias=True)


BAD_OVERRIDES = [  # (variable, value, message): on every GPU, the copy-engine kernel's knobs included
    ("FP8DK_SKINNY_BLOCK_N", "48", "FP8DK_SKINNY_BLOCK_N must be 32 times a power of two"),
    ("FP8DK_SKINNY_BLOCK_N", "32", "FP8DK_SKINNY_BLOCK_N = 32 is too narrow"),
    ("FP8DK_SKINNY_SPLIT_K", "two", "FP8DK_SKINNY_SPLIT_K must be a positive integer"),
    ("FP8DK_SKINNY_STREAM_K", "yes", "FP8DK_SKINNY_STREAM_K must be 0 or 1"),
    ("FP8DK_SKINNY_TMA", "on", "FP8DK_SKINNY_TMA must be 0 or 1"),
    ("FP8DK_SKINNY_TMA_STAGES", "4x", "FP8DK_SKINNY_TMA_STAGES must be a positive integer, got '4x'"),
    ("FP8DK_SKINNY_TMA_WHOLE_TILES", "2", "FP8DK_SKINNY_TMA_WHOLE_TILES must be 0 or 1"),
    ("FP8DK_SKINNY_TMA_QGMMA", "yes", "FP8DK_SKINNY_TMA_QGMMA must be 0 or 1"),
]


def test_bad_overrides(kernel, monkeypatch):
    """Malformed FP8DK_SKINNY_* values and overrides the problem cannot take are rejected, the message naming
    the variable (common/tuning.h and the plan throw std::invalid_argument: torch raises ValueError)."""
    a, b, sa, sb, bias, out_dtype = operands(32, 256, 512, torch.float8_e4m3fn)
    bad = BAD_OVERRIDES + ([("FP8DK_SKINNY_TMA_WK", "3", "FP8DK_SKINNY_TMA_WK must divide 8")] if is_hopper() else [])
    for variable, value, message in bad:
        monkeypatch.setenv(variable, value)
        with pytest.raises(ValueError, match=message):
            run(kernel, a, b, sa, sb, bias, out_dtype)
        monkeypatch.delenv(variable)


def test_overrides_read_once_per_process(kernel):
    """An override is read on first use and kept: a change to the environment behind the kernel's back (not
    through monkeypatch, which reloads) shows only after _reload_tuning."""
    a, b, sa, sb, bias, out_dtype = operands(8, 256, 512, torch.float8_e4m3fn)
    run(kernel, a, b, sa, sb, bias, out_dtype)
    os.environ["FP8DK_SKINNY_SPLIT_K"] = "two"
    try:
        run(kernel, a, b, sa, sb, bias, out_dtype)
        kernel.ops._reload_tuning()
        with pytest.raises(ValueError, match="FP8DK_SKINNY_SPLIT_K must be a positive integer"):
            run(kernel, a, b, sa, sb, bias, out_dtype)
    finally:
        del os.environ["FP8DK_SKINNY_SPLIT_K"]
        kernel.ops._reload_tuning()


@pytest.mark.parametrize("split", (None, "heuristic", "4", "13"))
@pytest.mark.parametrize("m,n,k", [(1, 2304, 16384), (8, 2304, 16384), (32, 2304, 16384), (4, 13312, 16384),
                                   (5, 17, 1000)])
def test_deterministic(kernel, monkeypatch, m, n, k, split):
    """Ten runs are bitwise identical: the default stream-K grid (405B gate_up at 4 tokens: shared 64-row tiles,
    then whole ones), the split grid with the heuristic's split, and split-K forced on (4: a cluster on sm_90+,
    13: the workspace and counters)."""
    if split == "heuristic":
        monkeypatch.setenv("FP8DK_SKINNY_STREAM_K", "0")
    elif split is not None:
        monkeypatch.setenv("FP8DK_SKINNY_SPLIT_K", split)
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, torch.float8_e4m3fn, bias=True)
    first = run(kernel, a, b, sa, sb, bias, out_dtype)
    assert_gemm_close(first, a, b, sa, sb, bias, kernel.reference)
    for _ in range(9):
        assert_bitwise_equal(run(kernel, a, b, sa, sb, bias, out_dtype), first, "rerun")


# ------------------------------------------------------------------------------------------ special values, size


@FP8
def test_nan_propagates(kernel, dtype):
    """A NaN weight poisons its output column, a NaN activation its row (the f16 unpack keeps NaN)."""
    m, n, k = 4, 64, 512
    a, b, sa, sb, _, out_dtype = operands(m, n, k, dtype)
    nan_byte = 0x80 if dtype == torch.float8_e4m3fnuz else 0x7F
    a.view(torch.uint8)[1, 100] = nan_byte
    b.view(torch.uint8)[37, 300] = nan_byte
    out = run(kernel, a, b, sa, sb, None, out_dtype).float()
    expect = torch.zeros(m, n, dtype=torch.bool, device="cuda")
    expect[1, :] = True
    expect[:, 37] = True
    assert torch.equal(out.isnan(), expect)


@FP8
def test_extreme_values(kernel, dtype):
    """Every FP8 encoding except NaN appears in b: max, min normal and subnormals unpack exactly."""
    m, n, k = 3, 128, 256
    codes = torch.arange(256, device="cuda", dtype=torch.int32)
    nan = (codes == 0x80) if dtype == torch.float8_e4m3fnuz else ((codes & 0x7F) == 0x7F)
    codes = codes[~nan].to(torch.uint8)
    b = codes[torch.randint(len(codes), (n, k), device="cuda")].view(dtype)
    a = codes[torch.randint(len(codes), (m, k), device="cuda")].view(dtype)
    sa = torch.tensor([2.0**-10], device="cuda")
    sb = torch.tensor([2.0**-6], device="cuda")
    out = run(kernel, a, b, sa, sb, None, torch.float16)
    assert_gemm_close(out, a, b, sa, sb, None, kernel.reference)


def test_64bit_offsets(kernel):
    """N * K > 2^31 FP8 weight bytes: rows past the 2 GiB mark land in the right place."""
    m, n, k = 2, (1 << 31) // 16384 + 96, 16384
    try:
        b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device="cuda")
    except torch.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 2.1 GB weight")
    b.view(torch.uint8).random_(0, 0x7E)  # positive finite codes, no NaN
    a = (torch.randn(m, k, device="cuda") * 4).to(torch.float8_e4m3fn)
    s = torch.tensor([2.0**-8], device="cuda")
    out = run(kernel, a, b, s, s, None, torch.float16)
    for rows in (slice(0, 64), slice(n - 160, n)):
        assert_gemm_close(out[:, rows], a, b[rows], s, s, None, kernel.reference)


# ------------------------------------------------------------------------------------------ graphs, compile


@pytest.mark.parametrize("m,n,k,split", [(1, 2304, 16384, None), (8, 2304, 16384, None), (32, 1000, 4096, None),
                                         (32, 1000, 4096, "13")])
@FP8
def test_cuda_graph(kernel, monkeypatch, dtype, m, n, k, split):
    """Captured and replayed with new values copied into the captured inputs: the stream-K grid (workspace and
    counters of the capture), and split-K through the workspace (split 13 > 8)."""
    if split is not None:
        monkeypatch.setenv("FP8DK_SKINNY_SPLIT_K", split)
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, dtype, bias=True)
    out = poisoned((m, n), out_dtype, "cuda")
    kernel.ops.skinny_gemm(out, a, b, sa, sb, bias)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel.ops.skinny_gemm(out, a, b, sa, sb, bias)
    for _ in range(3):
        a2, b2, sa2, sb2, bias2, _ = operands(m, n, k, dtype, bias=True)
        for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2), (bias, bias2)):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)


def test_counters_streams_and_graphs(kernel):
    """The workspace's arrival counters are zeroed once and left zero by each launch: launches on two streams
    at once, two captured graphs and eager calls interleaved (each with its own counters) all stay right."""
    shapes = [(1, 2304, 16384), (9, 300, 4176), (32, 1000, 4096)]
    cases = [operands(m, n, k, torch.float8_e4m3fn, bias=True) for m, n, k in shapes]
    outs = [poisoned((a.shape[0], b.shape[0]), od, "cuda") for a, b, _, _, _, od in cases]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    for _ in range(5):
        for i, (a, b, sa, sb, bias, _) in enumerate(cases):
            with torch.cuda.stream(streams[i % 2]):
                kernel.ops.skinny_gemm(outs[i], a, b, sa, sb, bias)
    torch.cuda.synchronize()
    for out, (a, b, sa, sb, bias, _) in zip(outs, cases):
        assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)
    graphs = [torch.cuda.CUDAGraph() for _ in cases[:2]]
    for graph, out, (a, b, sa, sb, bias, _) in zip(graphs, outs, cases):
        with torch.cuda.graph(graph):
            kernel.ops.skinny_gemm(out, a, b, sa, sb, bias)
    for _ in range(3):
        for graph, out in zip(graphs, outs):
            out.fill_(float("nan"))
            graph.replay()
        a, b, sa, sb, bias, _ = cases[2]
        outs[2].fill_(float("nan"))
        kernel.ops.skinny_gemm(outs[2], a, b, sa, sb, bias)
        torch.cuda.synchronize()
        for out, (a, b, sa, sb, bias, _) in zip(outs, cases):
            assert_gemm_close(out, a, b, sa, sb, bias, kernel.reference)


@pytest.mark.parametrize("m", (3, 32))
@pytest.mark.parametrize("dtype", (torch.float8_e4m3fn, torch.bfloat16), ids=("e4m3fn", "bf16"))
def test_torch_compile_gpu(kernel, dtype, m):
    """A linear-layer-like function around the Python wrapper compiles into one graph (fullgraph)."""
    a, b, sa, sb, bias, out_dtype = operands(m, 2304, 2048, dtype, bias=True)

    def linear(x, w, scale_a, scale_b, bias):
        return kernel.skinny_gemm(x, w, scale_a, scale_b, bias, out_dtype=out_dtype) * 2

    compiled = torch.compile(linear, fullgraph=True)
    for _ in range(2):
        got = compiled(a, b, sa, sb, bias)
        assert_bitwise_equal(got, linear(a, b, sa, sb, bias), "compiled output")
        a = operands(m, 2304, 2048, dtype)[0]


@pytest.mark.parametrize("m", (1, 8, 16, 24, 32))
def test_routing_to_scaled_mm(kernel, monkeypatch, m):
    """Where routing.py hands a call to torch._scaled_mm (on an H200, 70B down, measured faster there above 12
    tokens; on an H100, where every measured shape won, an unmeasured one of 16 MiB above 4 tokens), the wrapper
    returns exactly torch._scaled_mm's result; elsewhere, and with FP8DK_SKINNY_ROUTE=0, our kernel's."""
    h200 = is_hopper() and "H200" in torch.cuda.get_device_name()
    n, k = (8192, 28672) if h200 else (4096, 4096)
    a, b, sa, sb, bias, out_dtype = operands(m, n, k, torch.float8_e4m3fn, out_dtype=torch.bfloat16, bias=True)
    routed = is_hopper() and kernel.routing.prefer_scaled_mm(a, b)
    assert routed == (is_hopper() and (m >= 13 if h200 else m > 4))
    got = kernel.skinny_gemm(a, b, sa, sb, bias, out_dtype=out_dtype)
    ours = run(kernel, a, b, sa, sb, bias, out_dtype)
    if routed:
        assert_bitwise_equal(got, torch._scaled_mm(a, b.t(), sa, sb, bias=bias, out_dtype=out_dtype), "routed")
    else:
        assert_bitwise_equal(got, ours, "our kernel")
    monkeypatch.setenv("FP8DK_SKINNY_ROUTE", "0")
    assert not kernel.routing.prefer_scaled_mm(a, b)
    assert_bitwise_equal(kernel.skinny_gemm(a, b, sa, sb, bias, out_dtype=out_dtype), ours, "FP8DK_SKINNY_ROUTE=0")
