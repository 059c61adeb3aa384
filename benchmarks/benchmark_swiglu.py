"""`kernels benchmark` workloads: silu_and_mul (SwiGLU) with static FP8 output.

    kernels benchmark ./            # the local build in build/ (see BENCHMARKS.md)

The runner times each `benchmark_<workload>` with a host clock around one call, and checks `self.out`
against `verify_<workload>` with `torch.allclose(atol=1e-2)`. benchmarks/sweep.py is the careful measurement.

Shapes: x is [rows, 2*d], gate then up, with d = 8192 (the blog's table: a [rows, 16384] fp16 input) and
d = 6656 (Llama-3.1-405B's MLP width per GPU at TP8) on a GPU. On CPU d is divided by 16, as in
benchmark_rmsnorm.py.
"""

import torch
from kernels.benchmark import Benchmark

# A power of two, so y / scale is exact whichever way the kernel divides. silu(gate) * up of unit normals
# rarely exceeds 14 = 448 * SCALE; the few larger values exercise saturation.
SCALE = 2.0**-5
CPU_SHRINK = 16


def fp8_steps(q: torch.Tensor) -> torch.Tensor:
    """FP8 codes as signed positions on the FP8 number line, in units of 1/128 step (float32; NaN kept).

    allclose(atol=1e-2) on decoded FP8 values would demand identical bytes (one e4m3 step is 6-12% of a
    value), while a last-bit difference in expf legitimately moves a value across a rounding boundary. In
    these units one step is 0.0078 and two are 0.0156, so atol=1e-2 admits exactly one step. The low 7 bits
    of an e4m3 code order its magnitude; the top bit is the sign. (A copy of benchmark_rmsnorm.py's: each
    benchmark file ships to the Hub and runs on its own.)
    """
    bits = q.view(torch.uint8).to(torch.int32)
    magnitude = bits & 0x7F
    steps = torch.where(bits >= 0x80, -magnitude, magnitude).float() / 128
    return steps.masked_fill(q.float().isnan(), float("nan"))


class SiluAndMulFp8(Benchmark):
    """out = fp8(silu(gate) * up / scale). verify_* sets `self.out` to our FP8 output (the kernel writes
    `self.q`) in `fp8_steps` units and returns the reference in the same units."""

    seed = 0

    def _setup(self, rows: int, d: int, dtype: torch.dtype) -> None:
        if self.device == "cpu":
            d //= CPU_SHRINK
        device = torch.device(self.device)
        self.fp8 = self.kernel.native_fp8_dtype(device)
        self.x = torch.randn(rows, 2 * d, device=device, dtype=dtype)
        self.scale = torch.tensor([SCALE], device=device)
        self.q = torch.empty(rows, d, device=device, dtype=self.fp8)

    def _run(self):
        self.kernel.ops.silu_and_mul(self.q, self.x, self.scale)

    def _verify(self):
        self.out = fp8_steps(self.q)
        return fp8_steps(self.kernel.reference.silu_and_mul_ref(self.x, self.scale, self.fp8))

    # The blog's table: [rows, 16384] fp16 in, so d = 8192.
    def setup_fp16_rows1(self):
        self._setup(1, 8192, torch.float16)

    def benchmark_fp16_rows1(self):
        self._run()

    def verify_fp16_rows1(self):
        return self._verify()

    def setup_fp16_rows32(self):
        self._setup(32, 8192, torch.float16)

    def benchmark_fp16_rows32(self):
        self._run()

    def verify_fp16_rows32(self):
        return self._verify()

    def setup_fp16_rows256(self):
        self._setup(256, 8192, torch.float16)

    def benchmark_fp16_rows256(self):
        self._run()

    def verify_fp16_rows256(self):
        return self._verify()

    def setup_bf16_rows32_d6656(self):
        self._setup(32, 6656, torch.bfloat16)

    def benchmark_bf16_rows32_d6656(self):
        self._run()

    def verify_bf16_rows32_d6656(self):
        return self._verify()
