"""rms_norm and fused_add_rms_norm on the GPU (CUDA or ROCm) against reference.py evaluated on the CPU.

test_rmsnorm.py runs the op contract on every device; this file covers what only the GPU kernels have:
their three paths (aligned rows in registers, rows with a peeled head / predicated tail, rows longer than a
block holds, staged in shared memory and beyond it), the shapes of the decode benchmarks, every kind of
alignment a row start can have, CUDA graphs, torch.compile and run-to-run determinism. The reference runs
on CPU copies: its correctly rounded rsqrt is the definition (torch's CUDA rsqrt is an approximation).
Skips without a GPU.
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
@pytest.mark.parametrize("shape", [(4, 64), (8, 4096), (16, 16385), (2, 40001)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn, torch.float8_e4m3fnuz], ids=QUANT_IDS)
def test_cuda_graph(kernel, out_dtype, shape, fused):
    """Captured once, replayed with new inputs and a new scale copied into the captured buffers: each replay
    matches the reference of its own inputs (the scale is read on the device, not baked in)."""
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


@pytest.mark.parametrize("hidden", [64, 1000, 4096, 16384])
def test_batch_invariant(kernel, hidden):
    """A row gives the same 16-bit bytes alone as inside a batch of any size: the split of a row over threads,
    hence its reduction order, depends on the hidden size only (for rows on 16-byte boundaries)."""
    x, weight = make_inputs((600, hidden), torch.bfloat16, "cuda")
    full = torch.empty_like(x)
    kernel.ops.rms_norm(full, x, weight, EPS, None)
    for rows in (1, 5, 64):
        part = torch.empty_like(x[:rows])
        kernel.ops.rms_norm(part, x[8:8 + rows], weight, EPS, None)
        assert_bitwise_equal(part, full[8:8 + rows], f"rows 8..{8 + rows} run as a batch of {rows}")
