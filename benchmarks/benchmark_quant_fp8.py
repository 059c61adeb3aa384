"""`kernels benchmark` workloads: quantize_fp8, static per-tensor FP8 quantization of a 16-bit tensor.

    kernels benchmark ./            # the local build in build/ (see BENCHMARKS.md)

The runner times each `benchmark_<workload>` with a host clock around one call, and checks `self.out`
against `verify_<workload>` with `torch.allclose(atol=1e-2)`. The op is bit-exact, so the decoded FP8 values
must equal the reference's (NaN cannot occur: the inputs are finite).

Shapes: the attention output that the decoder quantizes before the O projection, [batch, heads * 128]: 2048
columns for Llama-3.1-405B at TP8, 4096 for Llama-3-8B; batch 1 and 32 (decode) and 4096 rows (a prefill-sized
tensor, where bandwidth decides). On CPU the widths are divided by 16, as in the other benchmark files.
"""

import torch
from kernels.benchmark import Benchmark

# Not a power of two: the kernel's correctly rounded division is what makes the bytes the reference's.
SCALE = 0.0137
CPU_SHRINK = 16


class QuantizeFp8(Benchmark):
    """out = fp8(saturate(x / scale)). verify_* sets `self.out` to our FP8 output (the kernel writes `self.q`)
    decoded to float32 and returns the reference decoded the same way."""

    seed = 0

    def _setup(self, rows: int, d: int, dtype: torch.dtype) -> None:
        if self.device == "cpu":
            d //= CPU_SHRINK
        device = torch.device(self.device)
        self.fp8 = self.kernel.native_fp8_dtype(device)
        self.x = 3 * torch.randn(rows, d, device=device, dtype=dtype)
        self.scale = torch.tensor([SCALE], device=device)
        self.q = torch.empty(rows, d, device=device, dtype=self.fp8)

    def _run(self):
        self.kernel.ops.quantize_fp8(self.q, self.x, self.scale)

    def _verify(self):
        self.out = self.q.float()
        return self.kernel.reference.quantize_fp8(self.x, self.scale, self.fp8).float()

    def setup_bf16_rows1_d2048(self):
        self._setup(1, 2048, torch.bfloat16)

    def benchmark_bf16_rows1_d2048(self):
        self._run()

    def verify_bf16_rows1_d2048(self):
        return self._verify()

    def setup_bf16_rows32_d2048(self):
        self._setup(32, 2048, torch.bfloat16)

    def benchmark_bf16_rows32_d2048(self):
        self._run()

    def verify_bf16_rows32_d2048(self):
        return self._verify()

    def setup_fp16_rows32_d4096(self):
        self._setup(32, 4096, torch.float16)

    def benchmark_fp16_rows32_d4096(self):
        self._run()

    def verify_fp16_rows32_d4096(self):
        return self._verify()

    def setup_bf16_rows4096_d8192(self):
        self._setup(4096, 8192, torch.bfloat16)

    def benchmark_bf16_rows4096_d8192(self):
        self._run()

    def verify_bf16_rows4096_d8192(self):
        return self._verify()
