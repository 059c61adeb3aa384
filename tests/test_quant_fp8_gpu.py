"""quantize_fp8 on the GPU (CUDA or ROCm): what test_quant_fp8.py's contract cases (which also run on "cuda")
do not reach. Production shapes (the attention output of a decode step, prefill-sized tensors), every store
width the launcher picks from the alignment (row padding, misaligned base pointers), rows past the grid's y
limit, every 16-bit value against scales at FP8 rounding ties (the kernel's correctly rounded quotient),
CUDA-graph capture and replay, torch.compile. Everything is compared byte for byte with the reference on the
CPU. Skips without a GPU.
"""

import pytest
import torch

from .conftest import HAS_GPU, load_kernel
from .helpers import DTYPES_16BIT, FP8_DTYPES, assert_bitwise_equal, opcheck_utils, poisoned, row_padded, saturating_scale
from .test_quant_fp8 import FP8_IDS, SCALES, assert_exact, every_value, make_input, near_tie_scales

pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")

DEVICE = "cuda"
# Decode: the attention output of Llama-3.1-405B at TP8 / TP4 / TP2 / TP1 (16..128 heads x 128) and of
# Llama-3-8B (4096), batch 1..32; prefill-sized: thousands of rows. Plus widths that end in a partial chunk.
WIDTHS = (2048, 4096, 8192, 16384, 4100, 1000, 5)
ROW_COUNTS = (1, 3, 32, 257, 4096)
MAX_ELEMENTS = 1 << 24
SHAPES = [(rows, d) for d in WIDTHS for rows in ROW_COUNTS if rows * d <= MAX_ELEMENTS]


@pytest.fixture(scope="module")
def kernel():
    return load_kernel(None)


def run_and_check(kernel, x, scale, out):
    """Runs the op into `out` and compares it with the reference evaluated on CPU copies."""
    kernel.ops.quantize_fp8(out, x, scale)
    assert_exact(out, kernel.reference.quantize_fp8(x.cpu(), scale.cpu(), out.dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_shapes(kernel, dtype, out_dtype, shape):
    x = make_input(shape, dtype, DEVICE)
    run_and_check(kernel, x, saturating_scale(x, out_dtype), poisoned(shape, out_dtype, DEVICE))


# Row padding in elements. The input's: 8 keeps 16-byte loads, 4 / 2 / 1 leave 8-, 4- and 2-byte alignment.
# The output's: 16 keeps 16-byte stores, 8 / 4 / 2 / 1 narrow them.
@pytest.mark.parametrize("pads", [(8, 16), (8, 8), (4, 4), (2, 2), (1, 1), (8, 1), (1, 16), (3, 5)],
                         ids=lambda p: f"in+{p[0]},out+{p[1]}")
@pytest.mark.parametrize("d", (7, 16, 4096, 4100))
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_row_padding(kernel, dtype, out_dtype, d, pads):
    """Padded rows on both sides: the input's NaN padding would leak into the output if read, and out's padding
    must stay untouched."""
    x = row_padded(make_input((33, d), dtype, DEVICE), pad=pads[0])
    out = row_padded(poisoned(x.shape, out_dtype, DEVICE), pad=pads[1])
    padding_before = out._base[..., out.shape[-1]:].clone()
    run_and_check(kernel, x, saturating_scale(x, out_dtype), out)
    assert_bitwise_equal(out._base[..., out.shape[-1]:], padding_before, "out's row padding")


@pytest.mark.parametrize("offsets", [(1, 0), (0, 1), (4, 8), (8, 4), (0, 8), (3, 3)],
                         ids=lambda o: f"in+{o[0]},out+{o[1]}")
@pytest.mark.parametrize("d", (16, 4096, 4100))
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
def test_misaligned_base(kernel, out_dtype, d, offsets):
    """Input and out starting `offsets` elements into their allocations: the launcher must narrow the accesses
    to what the pointers allow, never fault or skip elements, never write before out's first element."""
    rows, (in_off, out_off) = 5, offsets
    x_buf = torch.empty(rows * d + in_off, dtype=torch.bfloat16, device=DEVICE)
    x = x_buf[in_off:].view(rows, d)
    x.copy_(make_input((rows, d), torch.bfloat16, DEVICE))
    out_buf = poisoned((rows * d + out_off,), out_dtype, DEVICE)
    out = out_buf[out_off:].view(rows, d)
    run_and_check(kernel, x, saturating_scale(x, out_dtype), out)
    assert torch.isnan(out_buf[:out_off].float()).all(), "wrote before out's first element"


def test_rows_past_grid_y_limit(kernel):
    """More row groups than the grid's y dimension holds (65535): the rest continue in z."""
    rows, d = 65535 + 37, 4096  # 256 chunks per row: one row per 256-thread block, 65572 row groups
    x = make_input((rows, d), torch.float16, DEVICE)
    scale = torch.tensor([0.01], device=DEVICE)
    out = poisoned((rows, d), torch.float8_e4m3fn, DEVICE)
    kernel.ops.quantize_fp8(out, x, scale)
    assert not torch.isnan(out.float()).any(), "rows left unwritten"
    for part in (slice(0, 8), slice(65535 - 8, 65535 + 8), slice(rows - 8, rows)):
        assert_exact(out[part], kernel.reference.quantize_fp8(x[part].cpu(), scale.cpu(), out.dtype))


@pytest.mark.parametrize("shape", [(0, 64), (4, 0), (2, 0, 64)], ids=str)
def test_nothing_to_do(kernel, shape):
    x = torch.randn(shape, dtype=torch.float16, device=DEVICE)
    out = torch.empty(shape, dtype=torch.float8_e4m3fn, device=DEVICE)
    kernel.ops.quantize_fp8(out, x, torch.tensor([1.0], device=DEVICE))
    torch.cuda.synchronize()


@pytest.mark.parametrize("scale_value", SCALES.values(), ids=SCALES.keys())
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_every_input_value(kernel, dtype, out_dtype, scale_value):
    """Every 16-bit value against every kind of scale (tiny, huge, subnormal, 0, inf, NaN included)."""
    x = every_value(dtype, DEVICE)
    scale = torch.tensor([scale_value], dtype=torch.float32, device=DEVICE)
    run_and_check(kernel, x, scale, poisoned(x.shape, out_dtype, DEVICE))


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
@pytest.mark.parametrize("dtype", DTYPES_16BIT, ids=str)
def test_rounding_ties(kernel, dtype, out_dtype):
    """Scales that put many quotients on or next to FP8 rounding midpoints, and random scales: the hardware
    reciprocal alone would round some of them the wrong way."""
    x = every_value(dtype, DEVICE)
    generator = torch.Generator().manual_seed(0)
    random_scales = torch.exp2(torch.empty(200).uniform_(-20, 5, generator=generator)).tolist()
    for scale_value in near_tie_scales() + random_scales:
        scale = torch.tensor([scale_value], dtype=torch.float32, device=DEVICE)
        run_and_check(kernel, x, scale, poisoned(x.shape, out_dtype, DEVICE))


def test_rejects_mixed_devices(kernel):
    x = torch.randn(4, 64, dtype=torch.float16, device=DEVICE)
    with pytest.raises(RuntimeError, match="out must be on the same device"):
        kernel.ops.quantize_fp8(torch.empty(4, 64, dtype=torch.float8_e4m3fn), x, torch.tensor([1.0], device=DEVICE))
    with pytest.raises(RuntimeError, match="scale must be on the same device"):
        kernel.ops.quantize_fp8(torch.empty(4, 64, dtype=torch.float8_e4m3fn, device=DEVICE), x, torch.tensor([1.0]))


# ---------------------------------------------------------------------------------- graphs and torch.compile


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
def test_cuda_graph(kernel, out_dtype):
    """Captured once, replayed with new input values and a new scale copied into the captured buffers: the
    scale is read on the device, so each replay quantizes with the current one."""
    rows, d, dtype = 32, 2048, torch.bfloat16
    x = make_input((rows, d), dtype, DEVICE)
    scale = saturating_scale(x, out_dtype)
    out = torch.empty(rows, d, dtype=out_dtype, device=DEVICE)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        kernel.ops.quantize_fp8(out, x, scale)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel.ops.quantize_fp8(out, x, scale)
    for step in range(3):
        x.copy_(make_input((rows, d), dtype, DEVICE) * (step + 1))
        scale.copy_(saturating_scale(x, out_dtype))
        out.copy_(poisoned(out.shape, out_dtype, DEVICE))
        graph.replay()
        torch.cuda.synchronize()
        assert_exact(out, kernel.reference.quantize_fp8(x.cpu(), scale.cpu(), out_dtype))


def test_cuda_graph_of_the_wrapper(kernel):
    """The Python wrapper captured too (allocation from the graph's pool, native flavour by default)."""
    x = make_input((8, 4096), torch.float16, DEVICE)
    scale = torch.tensor([0.02], device=DEVICE)
    kernel.quantize_fp8(x, scale)  # warm-up: the flavour query and the first allocation
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernel.quantize_fp8(x, scale)
    x.copy_(make_input((8, 4096), torch.float16, DEVICE))
    scale.fill_(0.03)
    graph.replay()
    torch.cuda.synchronize()
    assert_exact(out, kernel.reference.quantize_fp8(x.cpu(), scale.cpu(), out.dtype))


@pytest.mark.parametrize("out_dtype", [None, *FP8_DTYPES], ids=["default", *FP8_IDS])
def test_torch_compile(kernel, out_dtype):
    """fullgraph=True: the wrapper traces without a graph break; two batch sizes."""
    torch._dynamo.reset()

    def quantize(x, scale):
        return kernel.quantize_fp8(x, scale, out_dtype=out_dtype)

    compiled = torch.compile(quantize, fullgraph=True)
    for rows in (3, 64):
        x = make_input((rows, 4096), torch.bfloat16, DEVICE)
        scale = torch.tensor([0.02], device=DEVICE)
        assert_bitwise_equal(compiled(x, scale), quantize(x, scale), "compiled output")


@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=FP8_IDS)
def test_opcheck(kernel, out_dtype):
    x = make_input((3, 4100), torch.float16, DEVICE)
    args = (torch.empty(x.shape, dtype=out_dtype, device=DEVICE), x, saturating_scale(x, out_dtype))
    torch.library.opcheck(kernel.ops.quantize_fp8, args, test_utils=opcheck_utils(*args))
