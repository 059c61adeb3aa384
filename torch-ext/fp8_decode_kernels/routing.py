"""Where ``skinny_gemm`` hands an FP8 call to ``torch._scaled_mm`` (cuBLASLt) instead of running our kernel.

Users must never be slower with the package than without it. Where our kernel was measured slower than
``torch._scaled_mm`` (same process, CUDA graphs, weights rotated beyond L2; ``benchmarks/sweep.py --gemm-shapes
targets``), the wrapper calls ``torch._scaled_mm`` for that (Hopper part, weight shape, M). Each table holds the
measured shapes, as ``benchmarks/routing_table.py`` draws them from the sweeps cited below (a test checks that
they match); other shapes follow a rule drawn from the same measurements. Architectures without a
measurement (pre-Hopper NVIDIA, ROCm) always run our kernel, as before.

``FP8DK_SKINNY_ROUTE=0`` runs our kernel everywhere (the benchmarks' "kernel alone").
"""

import functools
import os

import torch

# NVIDIA compute capability 9.x, measured 2026-11-26 on an H100 80GB HBM3, e4m3fn -> fp16 and bf16 (session 23,
# three runs averaged: benchmarks/results/nvidia-h100/session23-2026-11-26/sweep-targets-1af49a8-{a,b,c}/): weight
# shape (N, K) -> the M values (1..32) at which torch._scaled_mm was faster than our kernel by 1% or more with either
# output dtype (between measured M, the nearer measured point decides; halfway, the smaller). Ranges: the slower
# output dtype's.
_SM90_SLOWER_M = {
    (2304, 16384): frozenset(),                # Llama-3.1-405B TP8 qkv: 1.16-1.23x
    (16384, 2048): frozenset(),                # 405B TP8 o: 1.18-1.24x
    (13312, 16384): frozenset(),               # 405B TP8 gate_up: 1.03-1.15x
    (16384, 6656): frozenset(),                # 405B TP8 down: 1.12-1.13x
    (10240, 8192): frozenset(),                # Llama-3.1-70B qkv: 1.06-1.07x
    (8192, 28672): frozenset(),                # 70B down: 1.03x
    (6144, 4096): frozenset(),                 # Llama-3.1-8B qkv: 1.15-1.24x
    (28672, 4096): frozenset(),                # 8B gate_up: 1.06-1.09x
}
# Shapes not in the table, from the same measurements: our kernel up to 4 tokens, and at every M for weights at
# least the size of the smallest measured one (8B qkv, 24 MiB; every measured shape won or tied at every M);
# torch._scaled_mm above 4 tokens for smaller weights, which no measurement covers.
_SM90_ALWAYS_OURS_M = 4
_SM90_LARGE_WEIGHT_BYTES = 24 << 20

# The H200 (same compute capability, 1.4x the H100's bandwidth per SM), measured 2026-11-26 on an NVIDIA H200
# (benchmarks/results/nvidia-h200/session22-2026-11-26/sweep-a-1c6381b/ and sweep-b-1c6381b/, two runs averaged,
# the same rule; the kernel of 27786d0; ranges: the slower output dtype's). Session 23's plan rule changed the
# tiling of 405B gate_up, 70B qkv and 70B down at 8 tokens or fewer, so their rows come from its two runs on one
# H200 (benchmarks/results/nvidia-h200/session23-2026-11-26/sweep-a-31c8fa5/ and sweep-b-31c8fa5/). The copy-engine
# plan is tuned on the H100; on the H200 our kernel wins the 405B shapes but gate_up from 8 tokens, and loses 70B
# qkv and, above 8 tokens, 70B down, so unmeasured shapes go to torch._scaled_mm at every M.
#
# The four 405B TP8 shapes run our kernel at every M on the H200, by the decode step, although torch._scaled_mm
# runs 405B gate_up 1-5% faster alone from 8 tokens: in the step, all four on our kernel against this table's
# earlier rule (405B's GEMMs on torch._scaled_mm above 20 tokens, gate_up from 13) were 0.64 ms faster at batch 16,
# 0.90 ms at 24 and 0.61-0.62 ms at 32 (two runs), while any one class alone on ours among three on
# torch._scaled_mm was 0.45-0.92 ms slower than all four on it: a cuBLAS kernel beside ours breaks programmatic
# hand-offs (session 37, benchmarks/results/nvidia-h200/session37-2026-11-27/route-*/, decode_attribution.py
# --study env with FP8DK_SKINNY_ROUTE=0). Sessions 18 and 23 had measured the same study on the kernels of their
# time.
_EVERY_M = frozenset(range(1, 33))
_H200_STEP_OURS_SHAPES = frozenset({(2304, 16384), (16384, 2048), (13312, 16384), (16384, 6656)})
_H200_SLOWER_M = {
    (2304, 16384): frozenset(),                                  # 405B qkv: 1.06-1.19x alone
    (16384, 2048): frozenset(),                                  # 405B o: 1.10-1.15x alone
    (13312, 16384): frozenset(),                                 # 405B gate_up: 1.06x to 4, 0.91-0.99x from 8 alone
    (16384, 6656): frozenset(),                                  # 405B down: 1.04-1.07x alone
    (10240, 8192): _EVERY_M,                                     # 70B qkv: 0.92-0.96x
    (8192, 28672): frozenset(range(13, 33)),                     # 70B down: 1.03x up to 8, 0.96-0.98x above
    (6144, 4096): frozenset(range(7, 13)),                       # 8B qkv: 0.99x at 8, 1.00-1.04x elsewhere
    (28672, 4096): frozenset(range(21, 33)),                     # 8B gate_up: 1.03-1.05x up to 16, 0.93-0.95x above
}


@torch.compiler.assume_constant_result  # torch.compile calls it while tracing, not in the graph
def _hopper_part(index: int) -> str:
    """"h200", "h100" (every other compute capability 9.x part is taken as one), or "" off Hopper."""
    return _hopper_part_of(index)


@functools.lru_cache(maxsize=None)
def _hopper_part_of(index: int) -> str:
    if torch.cuda.get_device_capability(index)[0] != 9:
        return ""
    return "h200" if "H200" in torch.cuda.get_device_name(index) else "h100"


def prefer_scaled_mm(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether torch._scaled_mm is measured (or, for an unmeasured shape, expected) faster than our kernel for
    these operands. The caller checks that torch._scaled_mm takes them. Pure host logic: no device sync."""
    if os.environ.get("FP8DK_SKINNY_ROUTE", "1") == "0":
        return False
    if a.device.type != "cuda" or torch.version.hip is not None:
        return False
    part = _hopper_part(a.device.index if a.device.index is not None else torch.cuda.current_device())
    if not part:
        return False
    return _scaled_mm_faster(part, a.shape[0], b.shape[0], b.shape[1], b.element_size())


def _scaled_mm_faster(part: str, m, n: int, k: int, weight_elem_bytes: int) -> bool:
    """The tables and rules above, for a Hopper part. `m` may be a symbolic size (torch.compile with dynamic
    shapes): only set membership and comparisons, which tracing supports (`m in range(...)` it does not)."""
    if part == "h200":
        return m in _H200_SLOWER_M.get((n, k), _EVERY_M)
    slower = _SM90_SLOWER_M.get((n, k))
    if slower is not None:
        return m in slower
    if m <= _SM90_ALWAYS_OURS_M:
        return False
    return n * k * weight_elem_bytes < _SM90_LARGE_WEIGHT_BYTES
