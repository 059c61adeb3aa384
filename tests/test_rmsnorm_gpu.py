"""rms_norm and fused_add_rms_norm on the GPU (CUDA or ROCm) against reference.py evaluated on the CPU.

test_rmsnorm.py runs the op contract on every device; this file covers what only the GPU kernels have:
their paths (aligned rows in registers, rows with a peeled head / predicated tail, rows longer than a
block holds, staged in shared memory and beyond it, and on NVIDIA sm_90+ few long rows split over a
thread-block cluster), the shapes of the decode benchmarks, every kind of alignment a row start can have,
CUDA graphs, torch.compile and run-to-run determinism. The reference runs on CPU copies: its correctly
rounded rsqrt is the definition (torch's CUDA rsqrt is an approximation). Skips without a GPU.

The cluster kernel is picked per call by a heuristic (few rows); FP8DK_RMSNORM_CLUSTER (README) forces
it (2, 4, 8 CTAs per row) or the one-CTA-per-row kernels (0). Both give the same bytes by design, which the
cluster tests check bit for bit, besides the reference.
"""

import pytest
import torch

from .conftest import HAS_GPU
from .helpers import (
    DTYPES_16BIT,
    HIDDEN_SIZES,
    QUANT_IDS,
    QUANT_OUT,
    ROW_COUNTS,
    assert_bitwise_equal,
    launched_kernels,
    poisoned,
    row_padded,
    saturating_scale,
)
from .test_rmsnorm import EPS, assert_norm_matches, make_inputs

pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")

FUSED = pytest.mark.parametrize("fused", [False, True], ids=["rms_norm", "fused_add"])
OUT_DTYPES = pytest.mark.parametrize("out_dtype", QUANT_OUT, ids=QUANT_IDS)
DTYPES = pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)


@pytest.fixture
def device() -> str:
    """Every test here runs on the GPU only (conftest's `kernel` fixture picks the GPU variant from this)."""
    return "cuda"


CLUSTER_ENV = "FP8DK_RMSNORM_CLUSTER"
CTAS_PER_SM_ENV = "FP8DK_RMSNORM_CTAS_PER_SM"


def has_clusters() -> bool:
    """Whether the cluster kernel can run here: NVIDIA (not ROCm) with compute capability 9.0 or newer."""
    return HAS_GPU and torch.version.hip is None and torch.cuda.get_device_capability()[0] >= 9


needs_clusters = pytest.mark.skipif(not has_clusters(), reason="thread-block clusters need NVIDIA sm_90+")


@pytest.fixture
def cluster_env(request, monkeypatch):
    """Sets FP8DK_RMSNORM_CLUSTER for the test (indirect parametrization: None leaves the heuristic)."""
    value = getattr(request, "param", None)
    if value is None:
        monkeypatch.delenv(CLUSTER_ENV, raising=False)
    else:
        monkeypatch.setenv(CLUSTER_ENV, value)
    return value


def scale_for(kernel, x, residual, weight, out_dtype):
    """A saturating per-tensor scale for FP8 outputs, None for 16-bit ones."""
    if out_dtype is None:
        return None
    normed_input = x if residual is None else x + residual
    return saturating_scale(kernel.reference.rms_norm_ref(normed_input, weight, EPS), out_dtype)


def run_and_check(kernel, x, weight, out, residual=None, scale=None):
    """Runs the op into `out` (poisoned by the caller) and checks it, and the updated residual bit for bit,
    against the CPU reference computed from the inputs as they were before the call."""
    cpu = lambda t: None if t is None else t.cpu()  # noqa: E731
    dtype_out = out.dtype
    if residual is None:
        ref = kernel.reference.rms_norm_ref(cpu(x), cpu(weight), EPS, cpu(scale), dtype_out)
        kernel.ops.rms_norm(out, x, weight, EPS, scale)
    else:
        ref, ref_residual = kernel.reference.fused_add_rms_norm_ref(
            cpu(x), cpu(residual), cpu(weight), EPS, cpu(scale), dtype_out)
        kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)
        assert_bitwise_equal(residual, ref_residual, "residual")
    assert_norm_matches(out, ref)


def check_shape(kernel, shape, dtype, out_dtype, fused):
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = poisoned(shape, out_dtype or dtype, "cuda")
    run_and_check(kernel, x, weight, out, residual, scale)


# ------------------------------------------------------------------------------------------ shapes


@FUSED
@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
@OUT_DTYPES
@DTYPES
def test_contract_shapes(kernel, dtype, out_dtype, hidden, rows, fused):
    """Every hidden size x row count of the CPU contract tests, the largest products included."""
    check_shape(kernel, (rows, hidden), dtype, out_dtype, fused)


# Decode-benchmark hidden sizes at batch sizes up to 4096, and 16385: contiguous rows of an odd size each start
# at another alignment (the peeled-head path; past 2048 slots per row, the long-row kernel).
LARGE_SHAPES = [(1, 16384), (32, 16385), (300, 5120), (4096, 4096), (2048, 8192), (2048, 16384), (512, 16385)]


@FUSED
@pytest.mark.parametrize("shape", LARGE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@OUT_DTYPES
@DTYPES
def test_large_shapes(kernel, dtype, out_dtype, shape, fused):
    check_shape(kernel, shape, dtype, out_dtype, fused)


# Rows longer than the register kernel's 4096 slots: the long-row kernel, aligned and not, with the row staged
# in shared memory and, past what the device allows (about 116k elements on an H100, 32k on an MI300X),
# partly re-read from global memory.
@FUSED
@pytest.mark.parametrize("hidden", [32768, 32776, 40001, 131072, 200003])
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn], ids=["16bit", "e4m3fn"])
@DTYPES
def test_long_rows(kernel, dtype, out_dtype, hidden, fused):
    check_shape(kernel, (3, hidden), dtype, out_dtype, fused)


def test_zero_rows(kernel):
    """No rows: nothing is read or written (the residual keeps its bytes, no launch)."""
    x, weight = make_inputs((0, 4096), torch.float16, "cuda")
    residual = torch.empty_like(x)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device="cuda")
    kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, torch.tensor([0.1], device="cuda"))
    kernel.ops.rms_norm(out, x, weight, EPS, torch.tensor([0.1], device="cuda"))
    torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------ layouts


def misaligned(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of `t` (contiguous) starting `offset` elements into a fresh buffer: a base pointer off any
    16-byte boundary when offset % 8 != 0."""
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


@FUSED
@pytest.mark.parametrize("pad_in,pad_out", [(8, 0), (5, 0), (0, 3), (24, 8), (1, 7)],
                         ids=["in+8", "in+5", "out+3", "in+24,out+8", "in+1,out+7"])
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 16384, 16385])
@OUT_DTYPES
@DTYPES
def test_row_strides(kernel, dtype, out_dtype, hidden, pad_in, pad_out, fused):
    """Row-padded input and out views, with padding that keeps rows 16-byte aligned (+8, +24 elements) and
    padding that gives each row another alignment (+5, +3, +1, +7); out's padding stays untouched."""
    shape = (37, hidden)
    x, weight = make_inputs(shape, dtype, "cuda")
    if pad_in:
        x = row_padded(x, pad=pad_in)
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = poisoned(shape, out_dtype or dtype, "cuda")
    if pad_out:
        out = row_padded(out, pad=pad_out)
        padding = out._base[..., hidden:].clone()
    run_and_check(kernel, x, weight, out, residual, scale)
    if pad_out:
        assert_bitwise_equal(out._base[..., hidden:], padding, "out's row padding")


@FUSED
@pytest.mark.parametrize("hidden", [7, 1000, 4096, 16384])
@OUT_DTYPES
@DTYPES
def test_3d(kernel, dtype, out_dtype, hidden, fused):
    """[batch, tokens, hidden] input and out, the input a row-padded view that breaks 16-byte alignment."""
    shape = (3, 5, hidden)
    x, weight = make_inputs(shape, dtype, "cuda")
    x = row_padded(x, pad=3)
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    run_and_check(kernel, x, weight, poisoned(shape, out_dtype or dtype, "cuda"), residual, scale)


# (input, residual, out, weight) offsets in elements from a 16-byte boundary. Equal offsets: the rows share one
# misalignment, so the kernel peels a head and still moves whole slots as vectors; different offsets force
# element-wise access on the streams that disagree with the input.
OFFSETS = [(1, 1, 1, 0), (3, 3, 3, 3), (1, 0, 0, 0), (0, 5, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (2, 6, 4, 7)]


@FUSED
@pytest.mark.parametrize("offsets", OFFSETS, ids=lambda o: "in{}-res{}-out{}-w{}".format(*o))
@pytest.mark.parametrize("shape", [(9, 64), (33, 1000), (5, 4096), (4, 16384), (6, 16385)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@OUT_DTYPES
@DTYPES
def test_misaligned_base(kernel, dtype, out_dtype, shape, offsets, fused):
    in_off, res_off, out_off, w_off = offsets
    x, weight = make_inputs(shape, dtype, "cuda")
    x, weight = misaligned(x, in_off), misaligned(weight, w_off)
    residual = misaligned(torch.randn(shape, dtype=dtype, device="cuda"), res_off) if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    # FP8 rows move as 8-byte vectors: an offset of `out_off` elements misaligns them like the 16-bit streams.
    out = misaligned(poisoned(shape, out_dtype or dtype, "cuda"), out_off)
    run_and_check(kernel, x, weight, out, residual, scale)


# ------------------------------------------------------------------------------------------ graphs, compile


@FUSED
@pytest.mark.parametrize("shape", [(4, 64), (8, 4096), (16, 16385), (2, 40001), (3, 16384)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn, torch.float8_e4m3fnuz], ids=QUANT_IDS)
@pytest.mark.parametrize("cluster_env", [None, "0", "4"], ids=["auto", "one-cta", "cluster4"], indirect=True)
def test_cuda_graph(kernel, cluster_env, out_dtype, shape, fused):
    """Captured once, replayed with new inputs and a new scale copied into the captured buffers: each replay
    matches the reference of its own inputs (the scale is read on the device, not baked in). On every path:
    the cluster kernel's launch (cudaLaunchKernelEx with a cluster attribute) is captured too."""
    dtype = torch.bfloat16
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda")
    scale = torch.tensor([1.0], device="cuda")
    out = poisoned(shape, out_dtype or dtype, "cuda")
    scale_arg = None if out_dtype is None else scale

    def call():
        if fused:
            kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale_arg)
        else:
            kernel.ops.rms_norm(out, x, weight, EPS, scale_arg)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm-up outside the capture (module load, first-launch attributes)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()

    for _ in range(3):
        new_x, new_weight = make_inputs(shape, dtype, "cuda")
        new_residual = torch.randn(shape, dtype=dtype, device="cuda")
        x.copy_(new_x), weight.copy_(new_weight), residual.copy_(new_residual)
        if out_dtype is not None:
            scale.copy_(scale_for(kernel, x, residual if fused else None, weight, out_dtype))
        out.fill_(float("nan"))
        ref_args = (x.cpu(), weight.cpu(), EPS, None if scale_arg is None else scale.cpu(), out.dtype)
        if fused:
            ref, ref_residual = kernel.reference.fused_add_rms_norm_ref(ref_args[0], residual.cpu(), *ref_args[1:])
        else:
            ref = kernel.reference.rms_norm_ref(*ref_args)
        graph.replay()
        torch.cuda.synchronize()
        assert_norm_matches(out, ref)
        if fused:
            assert_bitwise_equal(residual, ref_residual, "residual")


@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn], ids=["16bit", "e4m3fn"])
def test_torch_compile_gpu(kernel, out_dtype):
    """A decoder-layer-like function around both wrappers compiles into one graph (fullgraph: a break raises)
    and gives the eager bytes, on shapes of each kernel path."""
    def prenorm(x, residual, weight, scale):
        h = kernel.fused_add_rms_norm(x, residual, weight, EPS, scale=scale, out_dtype=out_dtype)
        return h, kernel.rms_norm(residual, weight, EPS, scale=scale, out_dtype=out_dtype)

    compiled = torch.compile(prenorm, fullgraph=True)
    for shape in [(7, 4096), (3, 1001), (2, 40000)]:
        x, weight = make_inputs(shape, torch.float16, "cuda")
        residual = torch.randn(shape, dtype=torch.float16, device="cuda")
        scale = None if out_dtype is None else torch.tensor([0.02], device="cuda")
        residual_eager = residual.clone()
        got = compiled(x, residual, weight, scale)
        want = prenorm(x, residual_eager, weight, scale)
        for g, w in zip(got, want):
            assert_bitwise_equal(g, w, "compiled output")
        assert_bitwise_equal(residual, residual_eager, "compiled residual")


# ------------------------------------------------------------------------------------------ determinism


@FUSED
@pytest.mark.parametrize("shape", [(257, 1000), (64, 16384), (5, 16385), (2, 131072)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_deterministic(kernel, shape, fused):
    """The same inputs twice give the same bytes (fixed reduction order, no atomics)."""
    x, weight = make_inputs(shape, torch.float16, "cuda")
    residual = torch.randn(shape, dtype=torch.float16, device="cuda")
    scale = torch.tensor([0.01], device="cuda")
    outs, residuals = [], []
    for _ in range(2):
        out = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda")
        res = residual.clone()
        if fused:
            kernel.ops.fused_add_rms_norm(out, x, res, weight, EPS, scale)
        else:
            kernel.ops.rms_norm(out, x, weight, EPS, scale)
        outs.append(out)
        residuals.append(res)
    assert_bitwise_equal(outs[1], outs[0], "second run's out")
    assert_bitwise_equal(residuals[1], residuals[0], "second run's residual")


@pytest.mark.parametrize("hidden", [64, 1000, 4096, 16384, 16385, 32768])
@pytest.mark.parametrize("cluster_env", [None], ids=["auto"], indirect=True)
def test_batch_invariant(kernel, cluster_env, hidden):
    """A row gives the same 16-bit bytes alone as inside a batch of any size: the split of a row over threads,
    hence its reduction order, depends on the hidden size (and the row's alignment, the same here: the rows
    are the same memory) only. On NVIDIA sm_90+ the small batches of long rows take the cluster kernel and
    the 600-row batch does not, so this also compares the two paths."""
    x, weight = make_inputs((600, hidden), torch.bfloat16, "cuda")
    full = torch.empty_like(x)
    kernel.ops.rms_norm(full, x, weight, EPS, None)
    for rows in (1, 5, 64):
        part = torch.empty_like(x[:rows])
        kernel.ops.rms_norm(part, x[8:8 + rows], weight, EPS, None)
        assert_bitwise_equal(part, full[8:8 + rows], f"rows 8..{8 + rows} run as a batch of {rows}")


# ------------------------------------------------------------------------------------------ cluster kernel

# Rows that take the cluster kernel when forced (a row the one-CTA kernels give more than one warp, up to the
# long-row kernel's 4096 slots): aligned rows (16384: 512 threads per row; 8192: 256; 4096: 128, so 4 of 8
# CTAs idle; 5120: 160, 5 warps over 2 or 4 CTAs leave part of a CTA idle; 32768: 1024), odd sizes on the
# general path (16385 and 24577: the long-row kernel's split, 2 chunks; 1001: 64 threads).
CLUSTER_SHAPES = [(1, 16384), (3, 16384), (17, 16384), (32, 16384), (1, 16385), (32, 16385), (5, 24577),
                  (2, 32768), (7, 8192), (4, 4096), (9, 1001), (6, 5120)]
CLUSTER_SIZES = pytest.mark.parametrize("ctas", ["2", "4", "8"], ids=lambda c: f"cluster{c}")


def run_op(kernel, fused, out, x, residual, weight, scale):
    if fused:
        kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)
    else:
        kernel.ops.rms_norm(out, x, weight, EPS, scale)


def same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its sizes, strides and offset into a copy of its buffer: the same alignment, which
    picks the kernel path (aligned or not), hence the split of a row, hence the bytes."""
    base = t if t._base is None else t._base
    assert base.is_contiguous() and base.storage_offset() == 0
    return base.clone().as_strided(t.size(), t.stride(), t.storage_offset())


def check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, residual=None, scale=None):
    """Runs the op with `ctas` CTAs per row forced into `out` (poisoned by the caller) and checks it against
    the reference (and the residual bit for bit), then runs the one-CTA-per-row kernels on the same inputs,
    into tensors laid out like `out` and the residual, and checks that every byte agrees."""
    one_cta = same_layout_copy(out)
    one_cta_residual = None if residual is None else same_layout_copy(residual)
    monkeypatch.setenv(CLUSTER_ENV, ctas)
    run_and_check(kernel, x, weight, out, residual, scale)
    monkeypatch.setenv(CLUSTER_ENV, "0")
    run_op(kernel, residual is not None, one_cta, x, one_cta_residual, weight, scale)
    assert_bitwise_equal(out, one_cta, "out (cluster vs one CTA per row)")
    if residual is not None:
        assert_bitwise_equal(residual, one_cta_residual, "residual (cluster vs one CTA per row)")


@needs_clusters
@FUSED
@pytest.mark.parametrize("shape", CLUSTER_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@OUT_DTYPES
@DTYPES
@CLUSTER_SIZES
def test_cluster_shapes(kernel, monkeypatch, ctas, dtype, out_dtype, shape, fused):
    """Rows 1..32 split over clusters of 2, 4 and 8 CTAs: the reference's bytes (within the rule) and exactly
    the one-CTA-per-row kernels' bytes, poisoned outputs fully written."""
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = poisoned(shape, out_dtype or dtype, "cuda")
    check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, residual, scale)


@needs_clusters
@FUSED
@pytest.mark.parametrize("cap", ["0", "1", "3", "8"], ids=lambda c: f"cap{c}")
@pytest.mark.parametrize("shape,ctas", [((1, 16384), "8"), ((8, 16384), "8"), ((32, 16384), "4"), ((32, 16385), "4")],
                         ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else f"cluster{v}")
def test_cluster_ctas_per_sm(kernel, monkeypatch, cap, shape, ctas, fused):
    """The cluster kernel held to `cap` CTAs per SM (FP8DK_RMSNORM_CTAS_PER_SM; 0: no cap, the default 2 runs in
    the other tests) by the dynamic shared memory it asks for and does not use: the decode shapes' clusters
    launch, and give the reference's bytes and exactly the one-CTA-per-row kernels' bytes."""
    monkeypatch.setenv(CTAS_PER_SM_ENV, cap)
    x, weight = make_inputs(shape, torch.bfloat16, "cuda")
    residual = torch.randn(shape, dtype=torch.bfloat16, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, torch.float8_e4m3fn)
    out = poisoned(shape, torch.float8_e4m3fn, "cuda")
    check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, residual, scale)


@needs_clusters
@FUSED
@pytest.mark.parametrize("pad_in,pad_out", [(8, 0), (5, 3), (1, 7)], ids=["in+8", "in+5,out+3", "in+1,out+7"])
@pytest.mark.parametrize("hidden", [8192, 16384, 16385])
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn], ids=["16bit", "e4m3fn"])
@CLUSTER_SIZES
def test_cluster_row_strides(kernel, monkeypatch, ctas, out_dtype, hidden, pad_in, pad_out, fused):
    """Row-padded input and out on the cluster kernel: rows that keep 16-byte alignment (+8) and rows that each
    start at another alignment (general path, element-wise head and tail); out's padding stays untouched."""
    shape, dtype = (5, hidden), torch.bfloat16
    x, weight = make_inputs(shape, dtype, "cuda")
    x = row_padded(x, pad=pad_in)
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = row_padded(poisoned(shape, out_dtype or dtype, "cuda"), pad=pad_out) if pad_out else \
        poisoned(shape, out_dtype or dtype, "cuda")
    padding = out._base[..., hidden:].clone() if pad_out else None
    check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, residual, scale)
    if pad_out:
        assert_bitwise_equal(out._base[..., hidden:], padding, "out's row padding")


@needs_clusters
@FUSED
@pytest.mark.parametrize("offsets", [(1, 1, 1, 0), (1, 0, 0, 0), (2, 6, 4, 7)],
                         ids=lambda o: "in{}-res{}-out{}-w{}".format(*o))
@pytest.mark.parametrize("shape", [(4, 16384), (6, 16385)], ids=lambda s: f"{s[0]}x{s[1]}")
@CLUSTER_SIZES
def test_cluster_misaligned_base(kernel, monkeypatch, ctas, shape, offsets, fused):
    """Base pointers off 16-byte boundaries (one shared misalignment, and streams that disagree with the
    input) on the cluster kernel."""
    in_off, res_off, out_off, w_off = offsets
    dtype, out_dtype = torch.float16, torch.float8_e4m3fn
    x, weight = make_inputs(shape, dtype, "cuda")
    x, weight = misaligned(x, in_off), misaligned(weight, w_off)
    residual = misaligned(torch.randn(shape, dtype=dtype, device="cuda"), res_off) if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = misaligned(poisoned(shape, out_dtype, "cuda"), out_off)
    check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, residual, scale)


@needs_clusters
@pytest.mark.parametrize("rows", [1, 2, 5, 16, 17, 32, 33, 64, 67, 200])
def test_cluster_heuristic_rows(kernel, monkeypatch, rows):
    """The heuristic's choice at each row count (clusters of 8, 4, 2, then none on a 132-SM GPU) gives the
    one-CTA-per-row kernels' bytes."""
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    shape, dtype = (rows, 16384), torch.bfloat16
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda")
    scale = scale_for(kernel, x, residual, weight, torch.float8_e4m3fn)
    out, residual_auto = poisoned(shape, torch.float8_e4m3fn, "cuda"), residual.clone()
    run_op(kernel, True, out, x, residual_auto, weight, scale)
    monkeypatch.setenv(CLUSTER_ENV, "0")
    want, residual_one = poisoned(shape, torch.float8_e4m3fn, "cuda"), residual.clone()
    run_op(kernel, True, want, x, residual_one, weight, scale)
    assert_bitwise_equal(out, want, "out (heuristic vs one CTA per row)")
    assert_bitwise_equal(residual_auto, residual_one, "residual (heuristic vs one CTA per row)")


@needs_clusters
@pytest.mark.parametrize("setting,rows,want", [("0", 4, "one-cta"), ("4", 4, "cluster"), ("8", 300, "cluster"),
                                               (None, 4, "cluster"), (None, 1000, "one-cta")],
                         ids=["forced-off", "forced-4", "forced-8-many-rows", "auto-few-rows", "auto-many-rows"])
def test_cluster_override_selects_kernel(kernel, monkeypatch, setting, rows, want):
    """FP8DK_RMSNORM_CLUSTER really switches kernels (the bitwise comparisons above would pass even if it did
    nothing), and the heuristic takes the cluster kernel for few long rows only."""
    if setting is None:
        monkeypatch.delenv(CLUSTER_ENV, raising=False)
    else:
        monkeypatch.setenv(CLUSTER_ENV, setting)
    shape = (rows, 16384)
    x, weight = make_inputs(shape, torch.bfloat16, "cuda")
    residual = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda")
    scale = torch.tensor([0.05], device="cuda")
    kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale)  # first-call setup outside the profile
    names = launched_kernels(lambda: kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale),
                             "rms_norm")
    cluster = [n for n in names if "rms_norm_cluster_kernel" in n]
    assert (len(cluster) == len(names)) if want == "cluster" else not cluster, names


@needs_clusters
def test_cluster_override_rejects_bad_values(kernel, monkeypatch):
    x, weight = make_inputs((2, 16384), torch.float16, "cuda")
    out = torch.empty_like(x)
    for bad in ("3", "16", "-1", "two"):
        monkeypatch.setenv(CLUSTER_ENV, bad)
        with pytest.raises(ValueError, match=CLUSTER_ENV):
            kernel.ops.rms_norm(out, x, weight, EPS, None)


@needs_clusters
@pytest.mark.parametrize("shape,ctas", [((1, 16384), "8"), ((32, 16384), "4"), ((3, 1001), "2")],
                         ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else f"cluster{v}")
def test_cluster_sums_repeated(kernel, monkeypatch, shape, ctas):
    """The warps' sums cross the cluster as asynchronous stores counted on an mbarrier, with no barrier after
    them: 64 launches back to back on the same row give the bytes of the first, which are the one-CTA-per-row
    kernels'. A sum read before it landed would read a slot of an earlier launch's CTA, or garbage."""
    monkeypatch.setenv(CLUSTER_ENV, ctas)
    x, weight = make_inputs(shape, torch.bfloat16, "cuda")
    scale = scale_for(kernel, x, None, weight, torch.float8_e4m3fn)
    out = poisoned(shape, torch.float8_e4m3fn, "cuda")
    check_against_one_cta(kernel, monkeypatch, ctas, x, weight, out, None, scale)
    monkeypatch.setenv(CLUSTER_ENV, ctas)
    outs = poisoned((64, *shape), torch.float8_e4m3fn, "cuda")
    for i in range(outs.shape[0]):
        kernel.ops.rms_norm(outs[i], x, weight, EPS, scale)
    for i in range(outs.shape[0]):
        assert_bitwise_equal(outs[i], out, f"launch {i}")


@needs_clusters
@pytest.mark.parametrize("shape", [(3, 16384), (2, 16385)], ids=lambda s: f"{s[0]}x{s[1]}")
@CLUSTER_SIZES
def test_cluster_deterministic(kernel, monkeypatch, ctas, shape):
    """The same inputs twice on the cluster kernel give the same bytes (fixed order, no atomics)."""
    monkeypatch.setenv(CLUSTER_ENV, ctas)
    x, weight = make_inputs(shape, torch.float16, "cuda")
    residual = torch.randn(shape, dtype=torch.float16, device="cuda")
    scale = torch.tensor([0.01], device="cuda")
    outs = []
    for _ in range(2):
        out, res = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda"), residual.clone()
        kernel.ops.fused_add_rms_norm(out, x, res, weight, EPS, scale)
        outs.append((out, res))
    assert_bitwise_equal(outs[1][0], outs[0][0], "second run's out")
    assert_bitwise_equal(outs[1][1], outs[0][1], "second run's residual")


# ------------------------------------------------------------------------------------------ persistent kernel

PERSISTENT_ENV = "FP8DK_RMSNORM_PERSISTENT"

needs_persistent = pytest.mark.skipif(not HAS_GPU or torch.version.hip is not None,
                                      reason="the persistent kernel is launched on NVIDIA only")

# Aligned rows of 64 to 512 threads (hidden 1032: 129 slots, 33 threads' worth rounded up to 64, so some lanes
# hold only part of their slots): fewer rows than the device holds CTAs, about as many, and several per CTA
# (with a remainder, so CTAs end after different row counts).
PERSISTENT_SHAPES = [(1, 16384), (131, 16384), (1001, 16384), (264, 8192), (777, 8192), (300, 5120),
                     (2049, 4096), (1000, 1032)]


@needs_persistent
@FUSED
@pytest.mark.parametrize("shape", PERSISTENT_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@OUT_DTYPES
@DTYPES
def test_persistent_shapes(kernel, monkeypatch, dtype, out_dtype, shape, fused):
    """The persistent kernel forced on: the reference's bytes (every poisoned element written, the residual bit
    for bit), and exactly the one-CTA-per-row kernel's bytes on the same inputs."""
    monkeypatch.setenv(CLUSTER_ENV, "0")
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda") if fused else None
    scale = scale_for(kernel, x, residual, weight, out_dtype)
    out = poisoned(shape, out_dtype or dtype, "cuda")
    one_cta, one_cta_residual = same_layout_copy(out), None if residual is None else same_layout_copy(residual)
    monkeypatch.setenv(PERSISTENT_ENV, "1")
    run_and_check(kernel, x, weight, out, residual, scale)
    monkeypatch.setenv(PERSISTENT_ENV, "0")
    run_op(kernel, fused, one_cta, x, one_cta_residual, weight, scale)
    assert_bitwise_equal(out, one_cta, "out (persistent vs one CTA per row)")
    if fused:
        assert_bitwise_equal(residual, one_cta_residual, "residual (persistent vs one CTA per row)")


# (FP8DK_RMSNORM_PERSISTENT, fused, shape, whether the persistent kernel runs) on a 132-SM GPU, where the
# persistent kernel holds one CTA of [*, 16384] and two of [*, 8192] per SM.
PERSISTENT_CHOICES = {
    "auto-fused-4-rows-per-cta": (None, True, (512, 16384), True),
    "auto-fused-8192": (None, True, (1000, 8192), True),
    "auto-fused-many-rows": (None, True, (2048, 16384), False),
    "auto-rms-norm-many-rows": (None, False, (4096, 8192), True),
    "auto-few-rows": (None, True, (100, 16384), False),
    "auto-unaligned": (None, True, (600, 16385), False),
    "auto-short-rows": (None, True, (4096, 1000), False),
    "forced-off": ("0", True, (512, 16384), False),
    "forced-on": ("1", True, (100, 16384), True),
}


@needs_persistent
@pytest.mark.parametrize("case", PERSISTENT_CHOICES.values(), ids=PERSISTENT_CHOICES.keys())
def test_persistent_selects_kernel(kernel, monkeypatch, case):
    """The heuristic's choice, and FP8DK_RMSNORM_PERSISTENT really switches the kernel (the bitwise comparisons
    above would pass even if it did nothing)."""
    setting, fused, shape, want = case
    monkeypatch.setenv(CLUSTER_ENV, "0")
    if setting is None:
        monkeypatch.delenv(PERSISTENT_ENV, raising=False)
    else:
        monkeypatch.setenv(PERSISTENT_ENV, setting)
    x, weight = make_inputs(shape, torch.bfloat16, "cuda")
    residual = torch.randn(shape, dtype=torch.bfloat16, device="cuda") if fused else None
    out = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda")
    scale = torch.tensor([0.05], device="cuda")
    call = lambda: run_op(kernel, fused, out, x, residual, weight, scale)  # noqa: E731
    call()  # first-call setup outside the profile
    names = launched_kernels(call, "rms_norm")
    persistent = [n for n in names if "rms_norm_persistent_kernel" in n]
    assert (len(persistent) == len(names)) if want else not persistent, names


@needs_persistent
def test_persistent_rejects_bad_values(kernel, monkeypatch):
    x, weight = make_inputs((600, 8192), torch.float16, "cuda")
    out = torch.empty_like(x)
    for bad in ("2", "-1", "10", "yes"):
        monkeypatch.setenv(PERSISTENT_ENV, bad)
        with pytest.raises(ValueError, match=PERSISTENT_ENV):
            kernel.ops.rms_norm(out, x, weight, EPS, None)


@needs_persistent
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn], ids=["16bit", "e4m3fn"])
def test_persistent_cuda_graph(kernel, monkeypatch, out_dtype):
    """The heuristic's persistent launch (many rows) captured once and replayed on new inputs and a new scale."""
    monkeypatch.delenv(PERSISTENT_ENV, raising=False)
    shape, dtype = (1000, 8192), torch.bfloat16
    x, weight = make_inputs(shape, dtype, "cuda")
    residual = torch.randn(shape, dtype=dtype, device="cuda")
    scale = torch.tensor([1.0], device="cuda")
    scale_arg = None if out_dtype is None else scale
    out = poisoned(shape, out_dtype or dtype, "cuda")
    call = lambda: kernel.ops.fused_add_rms_norm(out, x, residual, weight, EPS, scale_arg)  # noqa: E731
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(2):
        new_x, new_weight = make_inputs(shape, dtype, "cuda")
        x.copy_(new_x), weight.copy_(new_weight), residual.copy_(torch.randn_like(residual))
        if out_dtype is not None:
            scale.copy_(scale_for(kernel, x, residual, weight, out_dtype))
        out.fill_(float("nan"))
        ref, ref_residual = kernel.reference.fused_add_rms_norm_ref(
            x.cpu(), residual.cpu(), weight.cpu(), EPS, None if scale_arg is None else scale.cpu(), out.dtype)
        graph.replay()
        torch.cuda.synchronize()
        assert_norm_matches(out, ref)
        assert_bitwise_equal(residual, ref_residual, "residual")
