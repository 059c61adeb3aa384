"""`kernels benchmark` workloads: skinny_gemm at decode batch sizes (M = 1..32).

    kernels benchmark ./            # the local build in build/ (see BENCHMARKS.md)

The runner times each `benchmark_<workload>` with a host clock around one call, and checks `self.out`
against `verify_<workload>` with `torch.allclose(atol=1e-2)`. benchmarks/sweep.py is the careful measurement
(with rotated weights: the 37.7 MB FP8 QKV weight fits in an H100's L2).

Shapes: Llama-3.1-405B at TP8, b is the [N, K] weight: QKV 2304 x 16384, gate_up 13312 x 16384,
down 16384 x 6656. On CPU N and K are divided by 16 (a [13312, 16384] float64 reference needs 1.7 GB).
The scales are set so that the outputs have a standard deviation of 1/4: then one bf16 step of the largest
outputs (~1.2) is 0.0078, so allclose(atol=1e-2) admits a last-bit rounding difference and nothing more.
"""

import math

import torch
from kernels.benchmark import Benchmark

QKV, GATE_UP, DOWN = (2304, 16384), (13312, 16384), (16384, 6656)
CPU_SHRINK = 16
OUT_STD = 0.25


class _SkinnyGemm:
    """Shared setup, mixed into the Benchmark classes (not one itself: the runner would run it)."""

    seed = 0

    def _shape(self, n_k):
        n, k = n_k
        return (n // CPU_SHRINK, k // CPU_SHRINK) if self.device == "cpu" else (n, k)

    def _run(self):
        self.kernel.ops.skinny_gemm(self.out, self.a, self.b, self.scale_a, self.scale_b, None)

    def _verify(self):
        return self.kernel.reference.skinny_gemm_ref(self.a, self.b, self.scale_a, self.scale_b,
                                                     out_dtype=self.out.dtype)


class SkinnyGemmFp8(_SkinnyGemm, Benchmark):
    """FP8 a and b (the platform's flavour) with per-tensor scales, bf16 out."""

    def _setup(self, m: int, n_k) -> None:
        n, k = self._shape(n_k)
        device = torch.device(self.device)
        fp8 = self.kernel.native_fp8_dtype(device)
        # Unit-normal operands use the FP8 range well; the scales bring the K-term sum to OUT_STD.
        self.a = torch.randn(m, k, device=device).to(fp8)
        self.b = torch.randn(n, k, device=device).to(fp8)
        self.scale_a = torch.tensor([1 / 16], device=device)
        self.scale_b = torch.tensor([16 * OUT_STD / math.sqrt(k)], device=device)
        self.out = torch.empty(m, n, device=device, dtype=torch.bfloat16)

    def setup_qkv_m1(self):
        self._setup(1, QKV)

    def benchmark_qkv_m1(self):
        self._run()

    def verify_qkv_m1(self):
        return self._verify()

    def setup_qkv_m32(self):
        self._setup(32, QKV)

    def benchmark_qkv_m32(self):
        self._run()

    def verify_qkv_m32(self):
        return self._verify()

    def setup_gate_up_m8(self):
        self._setup(8, GATE_UP)

    def benchmark_gate_up_m8(self):
        self._run()

    def verify_gate_up_m8(self):
        return self._verify()

    def setup_down_m16(self):
        self._setup(16, DOWN)

    def benchmark_down_m16(self):
        self._run()

    def verify_down_m16(self):
        return self._verify()


class SkinnyGemmBf16(_SkinnyGemm, Benchmark):
    """bf16 a and b (an unquantized model's linear layer), bf16 out; no scales."""

    def _setup(self, m: int, n_k) -> None:
        n, k = self._shape(n_k)
        device = torch.device(self.device)
        self.a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        self.b = (torch.randn(n, k, device=device) * (OUT_STD / math.sqrt(k))).to(torch.bfloat16)
        self.scale_a = self.scale_b = None
        self.out = torch.empty(m, n, device=device, dtype=torch.bfloat16)

    def setup_qkv_m1(self):
        self._setup(1, QKV)

    def benchmark_qkv_m1(self):
        self._run()

    def verify_qkv_m1(self):
        return self._verify()

    def setup_down_m32(self):
        self._setup(32, DOWN)

    def benchmark_down_m32(self):
        self._run()

    def verify_down_m32(self):
        return self._verify()
