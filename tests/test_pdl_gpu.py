"""Programmatic dependent launch (PDL, common/launch.h): on sm_90+ every kernel may start while the kernel before
it on the stream is still running, and waits (griddepcontrol.wait) before it touches global memory. These tests
run chains of decoder-step ops in which each op reads what the op before it wrote (read after write) and
overwrites what an earlier op read (write after read): eagerly and replayed from a CUDA graph, with PDL and
without (FP8DK_PDL=0). All kernels are deterministic, so the runs must agree bit for bit; a kernel that read
or wrote before its wait would read a stale or poisoned (NaN) buffer and break that. Skips without a GPU; on a
GPU without PDL (before sm_90, ROCm) both settings run the plain launch and the tests still check the chain.
"""

import pytest
import torch

from .conftest import HAS_GPU, load_kernel
from .helpers import assert_bitwise_equal

pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")

DEVICE = "cuda"
LAYERS = 6
EPS = 1e-5


@pytest.fixture(scope="module")
def kernel():
    return load_kernel(None)


class Chain:
    """A stack of decoder-layer MLP halves on fixed buffers (M tokens): fused_add_rms_norm -> FP8 x, gate_up
    GEMM, silu_and_mul -> FP8, down GEMM back into x, then rms_norm (16-bit) + quantize_fp8 of x into the FP8
    buffer the next layer's norm overwrites. Every buffer is written by one op and read by the next."""

    def __init__(self, kernel, m, hidden, inter, dtype=torch.bfloat16):
        fp8 = kernel.native_fp8_dtype(torch.device(DEVICE))
        g = torch.Generator(device=DEVICE).manual_seed(1234)

        def randn(*shape):
            return torch.randn(*shape, device=DEVICE, generator=g)

        self.k = kernel
        self.x0 = randn(m, hidden).to(dtype)
        self.residual0 = randn(m, hidden).to(dtype)
        self.norm_w = [(1 + 0.1 * randn(hidden)).to(dtype) for _ in range(LAYERS)]
        self.gate_up_w = [randn(2 * inter, hidden).to(fp8) for _ in range(LAYERS)]
        self.down_w = [randn(hidden, inter).to(fp8) for _ in range(LAYERS)]
        one = torch.ones(1, device=DEVICE)
        self.x_scale = one / 32  # normalized activations stay within +-14 before FP8's 448 saturates
        self.act_scale = one / 16
        self.gate_up_scale = one / hidden**0.5  # unit-variance GEMM outputs
        self.down_scale = one / inter**0.5
        self.x = torch.empty_like(self.x0)
        self.residual = torch.empty_like(self.residual0)
        self.xq = torch.empty(m, hidden, dtype=fp8, device=DEVICE)
        self.h = torch.empty(m, hidden, dtype=dtype, device=DEVICE)
        self.gate_up = torch.empty(m, 2 * inter, dtype=dtype, device=DEVICE)
        self.act = torch.empty(m, inter, dtype=fp8, device=DEVICE)

    def reset(self):
        """Inputs back to their start values, every intermediate poisoned (NaN)."""
        self.x.copy_(self.x0)
        self.residual.copy_(self.residual0)
        for t in (self.xq, self.h, self.gate_up, self.act):
            t.fill_(float("nan"))

    def run(self):
        ops = self.k.ops
        for layer in range(LAYERS):
            ops.fused_add_rms_norm(self.xq, self.x, self.residual, self.norm_w[layer], EPS, self.x_scale)
            ops.skinny_gemm(self.gate_up, self.xq, self.gate_up_w[layer], self.x_scale, self.gate_up_scale, None)
            ops.silu_and_mul(self.act, self.gate_up, self.act_scale)
            ops.skinny_gemm(self.x, self.act, self.down_w[layer], self.act_scale, self.down_scale, None)
            ops.rms_norm(self.h, self.x, self.norm_w[layer], EPS, None)
            ops.quantize_fp8(self.xq, self.h, self.x_scale)

    def results(self):
        return {name: getattr(self, name).clone() for name in ("x", "residual", "xq", "h", "gate_up", "act")}


def eager(chain):
    chain.reset()
    chain.run()
    torch.cuda.synchronize()
    return chain.results()


def serialized_then_pdl(chain, monkeypatch):
    """The chain's results without PDL (the reference), then PDL switched on for the rest of the test."""
    monkeypatch.setenv("FP8DK_PDL", "0")
    want = eager(chain)
    monkeypatch.setenv("FP8DK_PDL", "1")
    return want


def assert_same(got, want, what):
    for name, ref in want.items():
        assert not ref.float().isnan().any(), f"{name}: the reference run left NaN (a buffer was not written)"
        assert_bitwise_equal(got[name], ref, f"{what}: {name}")


# (M, hidden, intermediate): one row block, and a batch on wider layers (split-K through clusters on sm_90).
SHAPES = [(1, 1024, 2816), (24, 4096, 7168)]


@pytest.mark.parametrize("m,hidden,inter", SHAPES, ids=[f"m{m}_h{h}" for m, h, _ in SHAPES])
def test_chain_eager_equals_serialized(kernel, monkeypatch, m, hidden, inter):
    chain = Chain(kernel, m, hidden, inter)
    want = serialized_then_pdl(chain, monkeypatch)
    for attempt in range(3):
        assert_same(eager(chain), want, f"eager with PDL, run {attempt}")


@pytest.mark.parametrize("m,hidden,inter", SHAPES, ids=[f"m{m}_h{h}" for m, h, _ in SHAPES])
def test_chain_graph_equals_serialized(kernel, monkeypatch, m, hidden, inter):
    chain = Chain(kernel, m, hidden, inter)
    want = serialized_then_pdl(chain, monkeypatch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (cluster occupancy queries, attributes)
        chain.reset()
        chain.run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain.run()
    for replay in range(5):
        chain.reset()
        graph.replay()
        torch.cuda.synchronize()
        assert_same(chain.results(), want, f"graph replay {replay}")


def test_bad_override_is_rejected(kernel, monkeypatch):
    x = torch.randn(2, 64, dtype=torch.float16, device=DEVICE)
    monkeypatch.setenv("FP8DK_PDL", "yes")
    with pytest.raises(ValueError, match="FP8DK_PDL must be 0 or 1"):
        kernel.silu_and_mul(x)


@pytest.mark.parametrize("foreign", ["1", "0"])
@pytest.mark.parametrize("m", [1, 32])
def test_graph_after_foreign_kernel(kernel, m, foreign):
    """Under capture an op that follows a PyTorch kernel may start once that kernel's CTAs all run
    (FP8DK_PDL_FOREIGN, on by default), and must still wait for its end. A long PyTorch matmul writes the
    quantization's input, then the quantization and an FP8 GEMM follow (o after SDPA in a decode step); each
    replay gets new inputs and poisoned intermediates, so an op that read before the matmul ended would return
    NaN or the last replay's result."""
    fp8 = kernel.native_fp8_dtype(torch.device(DEVICE))
    g = torch.Generator(device=DEVICE).manual_seed(7)
    hidden, inner, n = 2048, 8192, 4096
    a = torch.empty(m, inner, dtype=torch.bfloat16, device=DEVICE)
    b = torch.randn(hidden, inner, device=DEVICE, generator=g).to(torch.bfloat16) / inner**0.5
    w = torch.randn(n, hidden, device=DEVICE, generator=g).to(fp8)
    x_scale, w_scale = torch.full((1,), 1 / 64, device=DEVICE), torch.full((1,), 1 / hidden**0.5, device=DEVICE)
    h = torch.empty(m, hidden, dtype=torch.bfloat16, device=DEVICE)
    xq = torch.empty(m, hidden, dtype=fp8, device=DEVICE)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=DEVICE)

    def step():
        torch.matmul(a, b.t(), out=h)
        kernel.ops.quantize_fp8(xq, h, x_scale)
        kernel.ops.skinny_gemm(out, xq, w, x_scale, w_scale, None)

    a.normal_(generator=g)
    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    starts, waits = kernel.ops._pdl_foreign_starts(), kernel.ops._pdl_foreign_waits()
    with kernel.tuning_overrides({"FP8DK_PDL_FOREIGN": foreign}), torch.cuda.graph(graph):
        step()
    # PDL needs sm_90 and CUDA; then the quantization, and only it, follows a foreign kernel, and the GEMM, which
    # starts at the quantization's entry, is planned to wait for the matmul (its whole ring before the wait).
    pdl = torch.version.hip is None and torch.cuda.get_device_capability()[0] >= 9
    assert kernel.ops._pdl_foreign_starts() - starts == (1 if pdl and foreign == "1" else 0)
    assert kernel.ops._pdl_foreign_waits() - waits == (1 if pdl and foreign == "1" else 0)
    for replay in range(6):
        a.normal_(generator=g)
        h.fill_(float("nan")), xq.fill_(float("nan")), out.fill_(float("nan"))
        graph.replay()
        got = out.clone()
        step()  # eager: the reference
        torch.cuda.synchronize()
        assert_bitwise_equal(got, out, f"graph replay {replay}")
