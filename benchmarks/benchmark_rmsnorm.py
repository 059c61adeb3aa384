"""`kernels benchmark` workloads: fused_add_rms_norm and rms_norm with static FP8 output.

    kernels benchmark ./            # the local build in build/ (see BENCHMARKS.md)

The runner times each `benchmark_<workload>` with a host clock around one call, and checks `self.out`
against `verify_<workload>` with `torch.allclose(atol=1e-2)`. benchmarks/sweep.py is the careful measurement
(CUDA graphs, rotated inputs, bandwidth); these workloads are the Hub's standard view of the same ops.

Shapes: [rows, 16384] (Llama-3.1-405B hidden) and [rows, 8192] on a GPU. On CPU the hidden size is divided by
16, so that the workloads (and their eager references) stay quick enough for CI on a 2-core machine.
"""

import torch
from kernels.benchmark import Benchmark

EPS = 1e-6
# A power of two, so y / scale is exact and every backend quantizes the reference's value whatever its division
# does (the RMSNorm GPU kernels correct their quotient anyway). With |y| up to ~5 the codes span most of the FP8
# range.
SCALE = 2.0**-6
CPU_SHRINK = 16


def fp8_steps(q: torch.Tensor) -> torch.Tensor:
    """FP8 codes as signed positions on the FP8 number line, in units of 1/128 step (float32; NaN kept).

    allclose(atol=1e-2) on decoded FP8 values would demand identical bytes (one e4m3 step is 6-12% of a
    value), while a last-bit difference in an fp32 reduction legitimately moves a value across a rounding
    boundary. In these units one step is 0.0078 and two are 0.0156, so atol=1e-2 admits exactly one step.
    The low 7 bits of an e4m3 code order its magnitude; the top bit is the sign. (benchmark_swiglu.py has a
    copy: each benchmark file ships to the Hub and runs on its own.)
    """
    bits = q.view(torch.uint8).to(torch.int32)
    magnitude = bits & 0x7F
    steps = torch.where(bits >= 0x80, -magnitude, magnitude).float() / 128
    return steps.masked_fill(q.float().isnan(), float("nan"))


class _Fp8Norm:
    """Shared setup, mixed into the Benchmark classes (not one itself: the runner would run it). verify_*
    sets `self.out` to our FP8 output in `fp8_steps` units (the kernel writes `self.q`) and returns the
    reference in the same units."""

    seed = 0

    def _setup(self, rows: int, hidden: int, dtype: torch.dtype) -> None:
        if self.device == "cpu":
            hidden //= CPU_SHRINK
        device = torch.device(self.device)
        self.fp8 = self.kernel.native_fp8_dtype(device)
        self.x = torch.randn(rows, hidden, device=device, dtype=dtype)
        self.weight = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
        self.scale = torch.tensor([SCALE], device=device)
        self.q = torch.empty(rows, hidden, device=device, dtype=self.fp8)


class FusedAddRmsNormFp8(_Fp8Norm, Benchmark):
    """residual += x; out = fp8(rms_norm(residual) * weight / scale): the pre-norm step of a decoder layer.

    The op updates the residual in place, so every call of the timing loop adds x once more; the growth
    (~100 x |x| over the runner's default 110 calls) stays far from fp16's range and does not change the
    normalized output's distribution. The runner calls the benchmark exactly once before verify, so verify
    compares against the reference applied to the residual saved at setup.
    """

    def _setup(self, rows, hidden, dtype):
        super()._setup(rows, hidden, dtype)
        self.residual = torch.randn_like(self.x)
        self.residual0 = self.residual.clone()

    def _run(self):
        self.kernel.ops.fused_add_rms_norm(self.q, self.x, self.residual, self.weight, EPS, self.scale)

    def _verify(self):
        ref_out, ref_residual = self.kernel.reference.fused_add_rms_norm_ref(
            self.x, self.residual0, self.weight, EPS, self.scale, self.fp8)
        if not torch.equal(self.residual, ref_residual):
            raise RuntimeError("fused_add_rms_norm: residual was not updated to x + residual")
        self.out = fp8_steps(self.q)
        return fp8_steps(ref_out)

    # The blog's table: [rows, 16384] fp16.
    def setup_fp16_rows1(self):
        self._setup(1, 16384, torch.float16)

    def benchmark_fp16_rows1(self):
        self._run()

    def verify_fp16_rows1(self):
        return self._verify()

    def setup_fp16_rows32(self):
        self._setup(32, 16384, torch.float16)

    def benchmark_fp16_rows32(self):
        self._run()

    def verify_fp16_rows32(self):
        return self._verify()

    def setup_fp16_rows256(self):
        self._setup(256, 16384, torch.float16)

    def benchmark_fp16_rows256(self):
        self._run()

    def verify_fp16_rows256(self):
        return self._verify()

    def setup_bf16_rows64_h8192(self):
        self._setup(64, 8192, torch.bfloat16)

    def benchmark_bf16_rows64_h8192(self):
        self._run()

    def verify_bf16_rows64_h8192(self):
        return self._verify()


class RmsNormFp8(_Fp8Norm, Benchmark):
    """out = fp8(rms_norm(x) * weight / scale), no residual (e.g. the final norm)."""

    def _run(self):
        self.kernel.ops.rms_norm(self.q, self.x, self.weight, EPS, self.scale)

    def _verify(self):
        self.out = fp8_steps(self.q)
        return fp8_steps(self.kernel.reference.rms_norm_ref(self.x, self.weight, EPS, self.scale, self.fp8))

    def setup_bf16_rows32(self):
        self._setup(32, 16384, torch.bfloat16)

    def benchmark_bf16_rows32(self):
        self._run()

    def verify_bf16_rows32(self):
        return self._verify()

    def setup_fp16_rows256_h8192(self):
        self._setup(256, 8192, torch.float16)

    def benchmark_fp16_rows256_h8192(self):
        self._run()

    def verify_fp16_rows256_h8192(self):
        return self._verify()
