"""The ROCm device code, executed: every AMD kernel path run on the CPU wave emulator (tools/amd_emu, issue 19).

No AMD GPU is available, so the gfx942 (MI300X) and gfx950 (MI355X) branches of the kernels are compiled as host
C++ under the ROCm build's macros and run on a SIMT emulator whose AMD builtins follow AMD's and LLVM's documents
(tools/amd_emu/README.md). Each launch goes through the launchers' plan for the emulated device, runs under
AddressSanitizer (any out-of-bounds global or LDS access fails), and its output is compared with reference.py
under the GPU tests' rules. The matrix instructions are first checked against AMD's Matrix Instruction Calculator
tables (tools/amd_emu/calculator/); the mutation tests plant known faults and check that the suite catches them.
"""

import concurrent.futures
import functools
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import types
import zlib

import pytest
import torch

from .helpers import (
    DTYPES_16BIT,
    FP8_DTYPES,
    REPO_ROOT,
    assert_bitwise_equal,
    assert_matches_reference,
    saturating_scale,
)

sys.path.insert(0, str(REPO_ROOT / "tools" / "amd_emu"))
import build as emu_build  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
TARGETS = ("gfx942", "gfx950")
NATIVE = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
FLAVOUR = {torch.float8_e4m3fn: "fn", torch.float8_e4m3fnuz: "fnuz"}
FMT16 = {torch.float16: "fp16", torch.bfloat16: "bf16"}
DT_IDS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3fn",
          torch.float8_e4m3fnuz: "e4m3fnuz", None: "16bit"}
CALC = REPO_ROOT / "tools" / "amd_emu" / "calculator"


def _load_reference():
    """reference.py from the source tree, no build needed: its package's directory as a bare package (its
    __init__ needs the build's _ops), so that reference.py's relative imports resolve there."""
    package = types.ModuleType("fp8dk_source")
    package.__path__ = [str(REPO_ROOT / "torch-ext" / "fp8_decode_kernels")]
    sys.modules.setdefault("fp8dk_source", package)
    return importlib.import_module("fp8dk_source.reference")


reference = _load_reference()


# ------------------------------------------------------------------------------------------ running the driver


@functools.cache
def _drivers():
    """Both targets' drivers, built in parallel (about 20 s each on one core; cached under build/amd_emu)."""
    try:
        emu_build.clang()
    except FileNotFoundError as e:
        if IN_CI:
            pytest.fail(f"CI=true and clang-19 is missing: {e}")
        pytest.skip(str(e))
    with concurrent.futures.ThreadPoolExecutor(len(TARGETS)) as pool:
        return dict(zip(TARGETS, pool.map(emu_build.build, TARGETS)))


def driver(target):
    return _drivers()[target]


def span_bytes(t: torch.Tensor) -> bytes:
    """The bytes of a 1-D or 2-D view (unit last stride) from its first to its last element."""
    if t.numel() == 0:
        n = 0
    elif t.dim() == 1:
        n = t.numel()
    else:
        n = (t.shape[0] - 1) * t.stride(0) + t.shape[1]
    return t.as_strided((n,), (1,)).contiguous().view(torch.uint8).numpy().tobytes()


def from_span(data: bytes, like: torch.Tensor) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(like.dtype) if data else like.new_empty(0)
    return flat.as_strided(like.shape, like.stride())


_runs = itertools.count()


def emulate(tmp_path, target, op, buffers, **params):
    """Runs the driver's `op` on `target`. buffers: name -> tensor, or (tensor, leading elements that shift the
    pointer off 64-byte alignment), or None. Returns (name -> tensor as the launch left it, stdout)."""
    d = tmp_path / f"run{next(_runs)}"
    d.mkdir()
    args = [str(driver(target)), op, f"dir={d}"]
    shapes = {}
    for name, spec in buffers.items():
        t, off = spec if isinstance(spec, tuple) else (spec, 0)
        if t is None:
            continue
        (d / f"{name}.bin").write_bytes(span_bytes(t))
        shapes[name] = t
        if off:
            args.append(f"{name}_off={off * t.element_size()}")
    args += [f"{k}={v}" for k, v in params.items()]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError(f"emulator run failed (exit {r.returncode}): {' '.join(args[1:])}\n"
                             f"{r.stdout[-2000:]}\n{r.stderr[-6000:]}")
    outs = {n: from_span((d / f"{n}.bin.out").read_bytes(), t) for n, t in shapes.items()}
    # A failed run keeps its files for a look; a finished one frees its buffers (the suite's runs wrote about
    # 0.5 GB into pytest's temporary folder).
    shutil.rmtree(d)
    return outs, r.stdout


def plan_of(stdout: str) -> dict:
    """key=value pairs of the driver's 'plan' lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("plan "):
            out.update(kv.split("=", 1) for kv in line.split()[1:])
    return out


def launches(stdout: str) -> list:
    return [line for line in stdout.splitlines() if line.startswith("launch ")]


def padded(t: torch.Tensor, pad: int, fill=float("nan")) -> torch.Tensor:
    """A view of `t` in a buffer with `pad` extra elements per row (row stride > row length)."""
    if pad == 0:
        return t.contiguous()
    buf = torch.full((t.shape[0], t.shape[1] + pad), fill, dtype=t.dtype)
    buf[:, : t.shape[1]].copy_(t)
    return buf[:, : t.shape[1]]


def assert_exact(out: torch.Tensor, ref: torch.Tensor) -> None:
    """tests/test_quant_fp8.py's rule: the reference's bytes, signed zeros included; NaN by position."""
    assert_matches_reference(out, ref, max_ulps=0, max_fraction=0.0)
    finite = ~torch.isnan(ref.float())
    assert_bitwise_equal(out[finite], ref[finite], "quantized bytes (the sign of a zero)")


def special_16bit(shape, dtype, scale=3.0):
    """Random values with the special ones mixed in: +-inf, NaN, +-0, tiny values of both signs (they quantize
    to zero: the -0 question of issue 19), huge ones."""
    x = scale * torch.randn(shape)
    flat = x.view(-1)
    specials = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, -1e-6, 1e-6, -3e-5, 6e4, -6e4])
    idx = torch.randperm(flat.numel())[: min(flat.numel() // 8, 4 * len(specials))]
    flat[idx] = specials.repeat(len(idx) // len(specials) + 1)[: len(idx)]
    return x.to(dtype)


# ------------------------------------------------------------------------------------------ matrix instructions


def _calculator_table(instr: str, matrix: str) -> dict:
    """(row, col) -> (register, lane, low bit, high bit) from the calculator's --register-layout CSV."""
    lines = (CALC / f"{instr}.{matrix}.csv").read_text().splitlines()
    assert lines[0] == "Architecture: CDNA3" and lines[1].lower() == f"instruction: {instr}"
    start = next(i for i, line in enumerate(lines) if re.match(r"[A-DK]\[", line))
    cols = [int(c) for c in lines[start].split(",")[1:]]
    table = {}
    for line in lines[start + 1:]:
        cells = line.split(",")
        row = int(cells[0])
        for col, cell in zip(cols, cells[1:]):
            m = re.fullmatch(r"v(\d+)\{(\d+)\}(?:\.\[(\d+):(\d+)\])?", cell.strip())
            assert m, f"unparsed calculator cell {cell!r}"
            reg, lane = int(m[1]), int(m[2])
            hi, lo = (int(m[3]), int(m[4])) if m[3] else (31, 0)  # a whole 32-bit register
            table[(row, col)] = (reg, lane, lo, hi)
    return table


MFMA = {  # instruction -> (element format, K, sparse)
    "v_mfma_f32_16x16x16_f16": ("f16", 16, False),
    "v_mfma_f32_16x16x16_bf16": ("bf16", 16, False),
    "v_mfma_f32_16x16x32_fp8_fp8": ("fp8", 32, False),
    "v_smfmac_f32_16x16x64_fp8_fp8": ("fp8", 64, True),
}


def test_calculator_data_is_versioned():
    readme = (CALC / "README.md").read_text()
    assert "AMD Matrix Instruction Calculator Version 1.3.2" in readme
    for instr, (_, _, sparse) in MFMA.items():
        for m in ("A", "B", "D") + (("K",) if sparse else ()):
            assert (CALC / f"{instr}.{m}.csv").exists()


def _operand_values(fmt, shape, target, gen):
    """Random operand values exactly representable in `fmt`, as (float64 values, bit patterns)."""
    if fmt == "fp8":
        dtype = NATIVE[target]
        x = (torch.randn(shape, generator=gen) * 8).to(dtype)
        x = torch.where(torch.isnan(x.float()), torch.zeros_like(x.float()).to(dtype), x)
        return x.double(), x.view(torch.uint8).to(torch.int64), 8
    dtype = torch.float16 if fmt == "f16" else torch.bfloat16
    x = torch.randn(shape, generator=gen).to(dtype)
    return x.double(), x.view(torch.int16).to(torch.int64) & 0xFFFF, 16


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("instr", list(MFMA))
def test_matrix_instruction_layouts(tmp_path, target, instr):
    """D = C + A B with every operand placed in lanes/registers by AMD's calculator tables (CDNA3; gfx950 keeps
    the layouts, CDNA4 ISA), not by the kernels' own indexing."""
    fmt, kdim, sparse = MFMA[instr]
    gen = torch.Generator().manual_seed(zlib.crc32(f"{target} {instr}".encode()))
    a_val, a_bits, width = _operand_values(fmt, (16, kdim), target, gen)
    b_val, b_bits, _ = _operand_values(fmt, (kdim, 16), target, gen)
    c = torch.randn(16, 16, generator=gen).float()
    regs = bytearray(64 * 52)

    def put(lane, base, reg, lo, hi, value):
        word = int.from_bytes(regs[52 * lane + base + 4 * reg: 52 * lane + base + 4 * reg + 4], "little")
        word |= (int(value) & ((1 << (hi - lo + 1)) - 1)) << lo
        regs[52 * lane + base + 4 * reg: 52 * lane + base + 4 * reg + 4] = word.to_bytes(4, "little")

    ta, tb = _calculator_table(instr, "A"), _calculator_table(instr, "B")
    if sparse:
        tk = _calculator_table(instr, "K")
        for i in range(16):
            for g in range(kdim // 4):
                keep = sorted(torch.randperm(4, generator=gen)[:2].tolist())
                for p in range(4):
                    if p not in keep:
                        a_val[i, 4 * g + p] = 0.0
                reg, lane, lo, hi = ta[(i, 4 * g)]
                assert hi - lo == 15
                put(lane, 0, reg, lo, lo + 7, a_bits[i, 4 * g + keep[0]])
                put(lane, 0, reg, lo + 8, hi, a_bits[i, 4 * g + keep[1]])
                reg, lane, lo, hi = tk[(i, 4 * g)]
                put(lane, 48, reg, lo, hi, keep[0] | (keep[1] << 2))
    else:
        for (i, k), (reg, lane, lo, hi) in ta.items():
            assert hi - lo + 1 == width
            put(lane, 0, reg, lo, hi, a_bits[i, k])
    for (k, j), (reg, lane, lo, hi) in tb.items():
        assert hi - lo + 1 == width
        put(lane, 16, reg, lo, hi, b_bits[k, j])
    td = _calculator_table(instr, "D")
    for (i, j), (reg, lane, lo, hi) in td.items():
        put(lane, 32, reg, 0, 31, int(c[i, j].view(torch.int32)) & 0xFFFFFFFF)
    regs_t = torch.frombuffer(regs, dtype=torch.uint8)
    d0 = torch.zeros(64 * 4, dtype=torch.float32)
    outs, _ = emulate(tmp_path, target, "mfma", {"regs": regs_t, "d": d0}, instr=instr)
    d = outs["d"].view(64, 4)
    want = (c.double() + a_val @ b_val).float()
    got = torch.empty(16, 16)
    for (i, j), (reg, lane, _, _) in td.items():
        got[i, j] = d[lane, reg]
    assert torch.equal(got, want), f"{instr}: {int((got != want).sum())} of 256 results differ"


def _fp8_grid(dtype):
    """Every finite FP8 value, the midpoints between neighbours (rounding ties) and values just off them."""
    vals = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    vals = vals[~torch.isnan(vals)].unique()
    mids = (vals[1:] + vals[:-1]) / 2
    off = torch.cat([mids * (1 + 2**-20), mids * (1 - 2**-20)])
    return torch.cat([vals, mids, off, -vals, -mids, -off])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("negative_zero_nan", (0, 1))
def test_cvt_pk_fp8(tmp_path, target, negative_zero_nan):
    """v_cvt_pk_fp8_f32 in the kernels' quantize4 pattern against torch's conversion: round to nearest even over
    the whole in-range grid (ties included); the one undocumented corner (a negative value rounding to zero in
    e4m3fnuz) follows the emulated hardware answer."""
    dtype = NATIVE[target]
    x = _fp8_grid(dtype)
    x = torch.cat([x, torch.tensor([0.0, -0.0, float("nan"), 1e-30, -1e-30])])
    x = torch.cat([x, torch.zeros((-len(x)) % 4)])
    outs, _ = emulate(tmp_path, target, "cvt", {"x": x, "y": torch.zeros(len(x), dtype=torch.uint8)},
                      count=len(x), fnuz_negative_zero_nan=negative_zero_nan)
    got = outs["y"]
    want = x.to(dtype).view(torch.uint8).clone()
    if dtype == torch.float8_e4m3fnuz and negative_zero_nan:
        want[(x.to(dtype).float() == 0) & (torch.signbit(x))] = 0x80
    assert torch.equal(got, want), f"{int((got != want).sum())} conversions differ, e.g. x = " \
        f"{x[(got != want).nonzero()[0]].item()}: got {got[got != want][0]:#x}, want {want[got != want][0]:#x}"


# ------------------------------------------------------------------------------------------ quantize_fp8

QUANT_CASES = {  # store width -> (rows, d, in row stride pad, out row stride pad, in offset, out offset)
    16: (3, 37, 11, 11, 0, 0),
    8: (3, 37, 11, 3, 0, 0),
    4: (2, 21, 3, 3, 0, 4),
    2: (2, 21, 3, 3, 0, 2),
    1: (2, 21, 3, 3, 1, 0),
}


def run_quant(tmp_path, target, in_dtype, out_dtype, width=16, x=None, scale=None, **opts):
    rows, d, pin, pout, oin, oout = QUANT_CASES[width]
    if x is None:
        x = special_16bit((rows, d), in_dtype)
    x = padded(x, pin)
    if scale is None:
        scale = saturating_scale(x.float().nan_to_num(0, 0, 0), out_dtype)
    out = padded(torch.full((rows, d), float("nan")).to(out_dtype), pout)
    outs, stdout = emulate(tmp_path, target, "quant", {"x": (x, oin), "out": (out, oout), "scale": scale},
                           **{"in": FMT16[in_dtype], "out": FLAVOUR[out_dtype], "d": d, "rows": rows,
                              "in_stride": x.stride(0), "out_stride": out.stride(0), **opts})
    assert plan_of(stdout)["store_width"] == str(width)
    return outs["out"], reference.quantize_fp8(x, scale, out_dtype), outs


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("in_dtype", DTYPES_16BIT, ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", FP8_DTYPES, ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("width", list(QUANT_CASES))
def test_quantize_fp8(tmp_path, target, in_dtype, out_dtype, width):
    """Every instantiation the launcher dispatches to (store width x format x flavour), on both targets: the
    reference's bytes (the native flavour through v_cvt_pk_fp8_f32, the other through the software path)."""
    out, ref, _ = run_quant(tmp_path, target, in_dtype, out_dtype, width)
    assert_exact(out, ref)


@pytest.mark.parametrize("sfu_ulp", (-1, 1))
@pytest.mark.parametrize("scale", (3e-3, 1 / 448, 1e-30, 3e25, 0.0, float("inf"), float("nan"), 1e-40),
                         ids=str)
def test_quantize_fp8_exact_for_any_hardware_reciprocal(tmp_path, sfu_ulp, scale):
    """The correctly rounded quotient whatever v_rcp_f32 returns within its documented 1 ulp, for ordinary,
    tiny, huge, zero, infinite, NaN and subnormal scales."""
    out, ref, _ = run_quant(tmp_path, "gfx942", torch.bfloat16, torch.float8_e4m3fnuz,
                            scale=torch.tensor([scale]), sfu_ulp=sfu_ulp)
    assert_exact(out, ref)


# ------------------------------------------------------------------------------------------ silu_and_mul

SWIGLU_CASES = {8: (48, 256, 0, 0), 4: (40, 100, 0, 0), 2: (7, 130, 6, 2), 1: (33, 101, 0, 0)}  # width -> rows, d, pads


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("in_dtype", DTYPES_16BIT, ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", (None, *FP8_DTYPES), ids=["16bit", "e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("width", list(SWIGLU_CASES))
def test_silu_and_mul(tmp_path, target, in_dtype, out_dtype, width):
    rows, d, pin, pout = SWIGLU_CASES[width]
    x = padded(special_16bit((rows, 2 * d), in_dtype), pin)
    y = reference.silu_and_mul_ref(x)
    scale = saturating_scale(y.float().nan_to_num(0, 0, 0), out_dtype) if out_dtype else None
    ref = reference.silu_and_mul_ref(x, scale, out_dtype)
    out = padded(torch.full((rows, d), float("nan")).to(ref.dtype), pout)
    outs, stdout = emulate(tmp_path, target, "swiglu", {"x": x, "out": out, "scale": scale},
                           **{"in": FMT16[in_dtype], "out": FLAVOUR.get(out_dtype, "same"), "d": d, "rows": rows,
                              "in_stride": x.stride(0), "out_stride": out.stride(0)})
    assert plan_of(stdout)["vector_width"] == str(width)
    assert_matches_reference(outs["out"], ref)


# ------------------------------------------------------------------------------------------ rms_norm

RMS_CASES = {  # name -> rows, hidden, input offset (elements), input row pad; the plan's kernel (rmsnorm_plan.h)
    "aligned-rows-per-block": (37, 64, 0, 0, "0"),
    "aligned-block-per-row": (3, 4096, 0, 8, "0"),
    "general": (5, 1001, 3, 5, "1"),
    "long-row-staged": (2, 16411, 1, 0, "2"),
    "long-row": (2, 40003, 1, 0, "2"),
}


def run_rmsnorm(tmp_path, target, case, in_dtype, out_dtype, residual, x=None, **opts):
    rows, hidden, off, pad, kernel = RMS_CASES[case]
    if x is None:
        x = special_16bit((rows, hidden), in_dtype, scale=1.0)
    x = padded(x, pad)
    res = torch.randn(rows, hidden).to(in_dtype) if residual else None
    weight = (1 + 0.1 * torch.randn(hidden)).to(in_dtype)
    if residual:
        y16, res_ref = reference.fused_add_rms_norm_ref(x, res, weight, 1e-6)
    else:
        y16, res_ref = reference.rms_norm_ref(x, weight, 1e-6), None
    scale = saturating_scale(y16.float().nan_to_num(0, 0, 0), out_dtype) if out_dtype else None
    ref = reference.rms_norm_ref(res_ref if residual else x, weight, 1e-6, scale, out_dtype)
    out = torch.full((rows, hidden), float("nan")).to(ref.dtype)
    outs, stdout = emulate(
        tmp_path, target, "rmsnorm",
        {"x": (x, off), "residual": (res, off), "weight": (weight, off), "out": (out, off), "scale": scale},
        **{"in": FMT16[in_dtype], "out": FLAVOUR.get(out_dtype, "same"), "rows": rows, "hidden": hidden,
           "in_stride": x.stride(0), "out_stride": out.stride(0), "eps": 1e-6, "residual": int(residual)}, **opts)
    assert plan_of(stdout)["kernel"] == kernel
    outs["_stdout"] = stdout
    return outs, ref, res_ref


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("in_dtype", DTYPES_16BIT, ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", (None, *FP8_DTYPES), ids=["16bit", "e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("residual", (False, True), ids=["rms_norm", "fused_add"])
@pytest.mark.parametrize("case", ["aligned-rows-per-block", "general"])
def test_rms_norm(tmp_path, target, in_dtype, out_dtype, residual, case):
    """Every instantiation of the register kernel (aligned / general x format x out x residual) on both
    targets: rows per block (group_sum: shuffles within a wave) and the general path (head/tail slots)."""
    outs, ref, res_ref = run_rmsnorm(tmp_path, target, case, in_dtype, out_dtype, residual)
    assert_matches_reference(outs["out"], ref)
    if residual:
        assert_exact(outs["residual"], res_ref)  # bit for bit; a NaN by position (its payload may differ)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("in_dtype", DTYPES_16BIT, ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", (None, *FP8_DTYPES), ids=["16bit", "e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("residual", (False, True), ids=["rms_norm", "fused_add"])
def test_rms_norm_long_row_kernel(tmp_path, target, in_dtype, out_dtype, residual):
    """Every instantiation of the long-row kernel (rows beyond a block's registers: one block of 16 waves per
    row, the row staged in dynamic LDS, block_sum through LDS)."""
    outs, ref, res_ref = run_rmsnorm(tmp_path, target, "long-row-staged", in_dtype, out_dtype, residual,
                                     reverse_lanes=int(residual))  # work-items also scheduled last to first
    assert_matches_reference(outs["out"], ref)
    if residual:
        assert_exact(outs["residual"], res_ref)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("in_dtype,out_dtype,residual", [
    (torch.bfloat16, None, True), (torch.float16, torch.float8_e4m3fn, False), (torch.bfloat16,
                                                                             torch.float8_e4m3fnuz, True)])
@pytest.mark.parametrize("case", ["aligned-block-per-row", "long-row"])
def test_rms_norm_long_rows(tmp_path, target, in_dtype, out_dtype, residual, case):
    """A block per row (block_sum over 8-16 waves through LDS) and a row longer than MI300X's 64 KB of LDS (the
    long-row kernel re-reads what it could not stage; MI355X's 160 KB hold it)."""
    outs, ref, res_ref = run_rmsnorm(tmp_path, target, case, in_dtype, out_dtype, residual)
    assert_matches_reference(outs["out"], ref)
    if residual:
        assert_exact(outs["residual"], res_ref)
    if case == "long-row" and target == "gfx942":  # MI300X's 64 KB stage 4092 of the row's 5002 slots
        assert int(plan_of(outs["_stdout"])["staged_slots"]) < -(-(40003 + 7) // 8)


# ------------------------------------------------------------------------------------------ skinny_gemm

from .test_skinny_gemm import assert_gemm_close  # noqa: E402  (the GPU tests' tolerance)

GEMM_FORMATS = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float16, torch.bfloat16)
AB_NAME = {torch.float8_e4m3fn: "fn", torch.float8_e4m3fnuz: "fnuz", torch.float16: "fp16", torch.bfloat16: "bf16"}


def gemm_operands(ab, m, n, k, out_dtype=None, bias=False, pad_a=0, pad_b=0, a_scale=16.0):
    """tests/test_skinny_gemm_gpu.py's operands: FP8 values over the whole e4m3 range (subnormals included)."""
    a, b = torch.randn(m, k), torch.randn(n, k)
    sa = sb = None
    if ab in FP8_DTYPES:
        a, b = (a_scale * a).to(ab), (16 * b).to(ab)
        sa, sb = torch.rand(1) * 0.01 + 0.005, torch.rand(1) * 0.01 + 0.005
        out_dtype = out_dtype or torch.float16
    else:
        a, b = a.to(ab), b.to(ab)
        out_dtype = ab
    bias_t = torch.randn(n).to(out_dtype) if bias else None
    return padded(a, pad_a), padded(b, pad_b), sa, sb, bias_t, out_dtype


def run_gemm(tmp_path, target, ops, a_off=0, b_off=0, **opts):
    a, b, sa, sb, bias_t, out_dtype = ops
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    out = torch.full((m, n), float("nan")).to(out_dtype)
    outs, stdout = emulate(
        tmp_path, target, "gemm",
        {"a": (a, a_off), "b": (b, b_off), "out": out, "bias": bias_t, "scale_a": sa, "scale_b": sb},
        ab=AB_NAME[a.dtype], out=FMT16[out_dtype], m=m, n=n, k=k, a_stride=a.stride(0), b_stride=b.stride(0),
        out_stride=n, **opts)
    return outs["out"], stdout


def check_gemm(tmp_path, target, ops, **kw):
    out, stdout = run_gemm(tmp_path, target, ops, **kw)
    a, b, sa, sb, bias_t, _ = ops
    assert_gemm_close(out, a, b, sa, sb, bias_t, reference)
    return out, plan_of(stdout), stdout


def lb_pad(ab, k, access):
    """Row padding (elements) that makes b's rows allow `access`-byte loads (16, 8, or "element")."""
    eb = 1 if ab in FP8_DTYPES else 2
    per16 = 16 // eb
    if access == 16:
        return (-k) % per16
    if access == 8:
        return ((-k) % per16 + 8 // eb) % per16
    return 0 if (k * eb) % 8 else 1


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("route", ("fp8", "16bit"))
@pytest.mark.parametrize("m", range(1, 33))
def test_skinny_gemm_every_m(tmp_path, target, route, m):
    """Every M on both routes. fp8 (the chip's own flavour): SMFMAC 16x16x64 (M <= 8, tokens in the 2:4-sparse
    operand) and MFMA 16x16x32 (M > 8, 1-2 tiles of 16 tokens, 1-2 row blocks); 16bit: MFMA 16x16x16 f16 (odd M)
    and bf16 (even M). Odd N and K (a masked tail sub-iteration), bias on odd M, weight rows allowing 128-bit,
    64-bit or element-wise loads in turn."""
    ab = NATIVE[target] if route == "fp8" else (torch.bfloat16, torch.float16)[m % 2]
    k = 333 if route == "fp8" else 165
    access = (16, 8, "element")[m % 3]
    ops = gemm_operands(ab, m, 67, k, out_dtype=(torch.float16, torch.bfloat16)[m % 2], bias=m % 2 == 1,
                        pad_b=lb_pad(ab, k, access))
    _, plan, _ = check_gemm(tmp_path, target, ops)
    assert plan["mp"] == str((m + 7) // 8 * 8)
    assert plan["b_access"] == str((1 if route == "fp8" else 2) if access == "element" else access)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ab", GEMM_FORMATS, ids=["e4m3fn", "e4m3fnuz", "fp16", "bf16"])
def test_skinny_gemm_every_instantiation(tmp_path, target, ab):
    """Every kernel the launcher can dispatch to for this operand format: token padding MP (8, 16, 24, 32) x out
    format x weight access width, with bias and padded activation rows (work-items scheduled in both orders, so
    an LDS read that a barrier does not order after its write shows). On gfx942 e4m3fnuz and on gfx950
    e4m3fn take the FP8 matrix instructions, the other flavour and fp16 / bf16 the 16-bit MFMA."""
    eb = 1 if ab in FP8_DTYPES else 2
    k = 131 if eb == 1 else 67
    for (mp, out_dtype, access) in itertools.product((8, 16, 24, 32), (torch.float16, torch.bfloat16),
                                                     (16, 8, "element")):
        if ab not in FP8_DTYPES and out_dtype != ab:
            continue  # 16-bit operands: out has their dtype
        m = mp - 3
        ops = gemm_operands(ab, m, 20, k, out_dtype=out_dtype, bias=True, pad_a=8, pad_b=lb_pad(ab, k, access))
        _, plan, _ = check_gemm(tmp_path, target, ops, reverse_lanes=int(mp in (16, 32)))
        assert (plan["mp"], plan["b_access"]) == (str(mp), str(eb if access == "element" else access))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ab", (NATIVE["gfx942"], torch.bfloat16), ids=["e4m3fnuz", "bf16"])
@pytest.mark.parametrize("access", (16, 8, "element"))
def test_skinny_gemm_weight_access_widths(tmp_path, target, ab, access):
    """Weights read with 128-bit, 64-bit and element-wise loads (from the row alignment), and an activation
    pointer off 16 bytes (the launcher's realigned copy)."""
    eb = 1 if ab in FP8_DTYPES else 2
    k = 320 // eb
    pad_b = {16: 0, 8: 8 // eb, "element": 0}[access]
    ops = gemm_operands(ab, 5, 33, k, pad_b=pad_b)
    _, plan, stdout = check_gemm(tmp_path, target, ops, b_off=1 if access == "element" else 0, a_off=1)
    assert plan["b_access"] == str(access if access != "element" else eb)
    assert plan["a_copied"] == "1"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,split,k,block_n", [(4, 5, 1100, 64), (20, 3, 400, 0), (32, 2, 300, 0)])
def test_skinny_gemm_split_k(tmp_path, target, m, split, k, block_n):
    """Split-K through the workspace: partial tiles added in slice order by the last workgroup to arrive, the
    arrival counters left zero; bitwise the same result whatever order the workgroups run in."""
    ops = gemm_operands(NATIVE[target], m, 40, k, bias=True, pad_b=lb_pad(NATIVE[target], k, 16))
    opt = {"split_k": split, "block_n": block_n}
    out, plan, _ = check_gemm(tmp_path, target, ops, **opt)
    assert plan["split_k"] == str(split) and plan["contributions"] == str(split)
    for order in (1, 2):
        again, _ = run_gemm(tmp_path, target, ops, block_order=order, seed=order, reverse_lanes=1, **opt)
        assert_bitwise_equal(again, out, f"block order {order}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m", (3, 24))
def test_skinny_gemm_stream_k(tmp_path, target, m):
    """Stream-K: equal runs of tiles x sub-iterations per workgroup, partial tiles met in K order."""
    ops = gemm_operands(NATIVE[target], m, 80, 1500, pad_b=lb_pad(NATIVE[target], 1500, 16))
    out, plan, _ = check_gemm(tmp_path, target, ops, stream_k=1, occupancy=1, device="mi300x")
    assert plan["stream_k"] == "1" and int(plan["contributions"]) > 1
    again, _ = run_gemm(tmp_path, target, ops, stream_k=1, occupancy=1, device="mi300x", block_order=2, seed=7)
    assert_bitwise_equal(again, out, "stream-K in shuffled workgroup order")


@pytest.mark.parametrize("target", TARGETS)
def test_skinny_gemm_zero_k(tmp_path, target):
    """K = 0: every output is the bias (the empty dot product is +0)."""
    ops = gemm_operands(torch.float16, 3, 20, 0, bias=True)
    out, _ = run_gemm(tmp_path, target, ops)
    assert_bitwise_equal(out, ops[4].expand(3, 20), "bias")


# ------------------------------------------------------------------------------------------ open hardware questions


@pytest.mark.parametrize("negative_zero_nan", (0, 1))
@pytest.mark.parametrize("op", ("quant", "swiglu", "rmsnorm"))
def test_fnuz_negative_zero_either_answer(tmp_path, op, negative_zero_nan):
    """Issue 19, question 1: whether gfx942's v_cvt_pk_fp8_f32 writes 0x00 or 0x80 (NaN in e4m3fnuz) for -0.0
    and negative values that round to zero is undocumented. The kernels turn such values into +0 first, so the
    bytes are the reference's (0x00) under both answers. Inputs full of tiny negatives and -0."""
    dt, fnuz = torch.bfloat16, torch.float8_e4m3fnuz
    opt = {"fnuz_negative_zero_nan": negative_zero_nan}
    tiny = -torch.rand(4, 64) * 1e-3 * (torch.rand(4, 64) < 0.5) + torch.randn(4, 64) * (torch.rand(4, 64) < 0.1)
    if op == "quant":
        x = tiny.to(dt)
        x[0, :8] = -0.0
        out, ref, _ = run_quant(tmp_path, "gfx942", dt, fnuz, x=x[:3, :37], scale=torch.tensor([0.05]), **opt)
        assert_exact(out, ref)
    elif op == "swiglu":
        x = torch.cat([-torch.full((4, 32), 100.0), tiny[:, :32]], dim=1).to(dt)  # silu(-100) * up: -0 / tiny
        x[:, 32:40] = -0.0
        scale = torch.tensor([0.05])
        ref = reference.silu_and_mul_ref(x, scale, fnuz)
        out = torch.full((4, 32), float("nan")).to(fnuz)
        outs, _ = emulate(tmp_path, "gfx942", "swiglu", {"x": x, "out": out, "scale": scale},
                          **{"in": "bf16", "out": "fnuz", "d": 32, "rows": 4, "in_stride": 64, "out_stride": 32},
                          **opt)
        assert_exact(outs["out"], ref)
    else:
        x = tiny.to(dt)
        x[:, 0] = 50.0  # one large value per row: the others normalize to tiny values of both signs
        outs, ref, _ = run_rmsnorm(tmp_path, "gfx942", "aligned-rows-per-block", dt, fnuz, False,
                                   x=torch.cat([x] * 10)[:37], **opt)
        assert_exact(outs["out"], ref)


@pytest.mark.parametrize("flush", (0, 1))
def test_e4m3fn_on_gfx942_f16_subnormals(tmp_path, flush):
    """Issue 19, question 2: e4m3fn operands on gfx942 are unpacked to f16 times 2^-8 (bit trick), so FP8
    values below 2^-6 become f16 subnormals. Whether gfx942's f16 MFMA flushes f16 subnormal inputs is
    undocumented. Operands without FP8 subnormals give the reference under both answers; with many of them
    the result holds only if the MFMA keeps subnormals (README: settled only by a first MI300X run)."""
    m, n, k = 12, 40, 256
    normal = gemm_operands(torch.float8_e4m3fn, m, n, k)
    a, b, sa, sb, bias, out_dtype = normal
    lift = lambda t: torch.where(t.float().abs() < 2**-6, torch.full_like(t.float(), 0.5), t.float()).to(t.dtype)
    normal = (lift(a), lift(b), sa, sb, bias, out_dtype)
    check_gemm(tmp_path, "gfx942", normal, mfma_flush_f16_denormals=flush)
    tiny = gemm_operands(torch.float8_e4m3fn, m, n, k, a_scale=2**-7)  # a: mostly FP8 subnormals
    assert (tiny[0].float().abs() < 2**-6).float().mean() > 0.5
    if flush:
        with pytest.raises(AssertionError):
            check_gemm(tmp_path, "gfx942", tiny, mfma_flush_f16_denormals=1)
    else:
        check_gemm(tmp_path, "gfx942", tiny)


# ------------------------------------------------------------------------------------------ launch plans

DEVICES = {"mi300x": (304, 64 * 1024), "mi355x": (256, 160 * 1024)}  # CUs, LDS per workgroup
LAUNCH = re.compile(r"launch (\S+) grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+) lds=(\d+) static_lds=(\d+)")
LAUNCH_BOUNDS = {"quantize_fp8_kernel": 256, "silu_and_mul_kernel": 256, "skinny_gemm_kernel": 256,
                 "rms_norm_kernel<aligned>": 1024, "rms_norm_kernel<general>": 1024, "rms_norm_long_row_kernel": 1024}


def planned(tmp_path, device, op, **params):
    """The launch the ROCm launcher would make on `device` (dry run: planned, checked, not executed)."""
    target = "gfx942" if device == "mi300x" else "gfx950"
    _, stdout = emulate(tmp_path, target, op, {}, dry=1, device=device, **params)
    (launch,) = launches(stdout)
    name, *nums = LAUNCH.fullmatch(launch).groups()
    gx, gy, gz, bx, by, bz, lds, static_lds = map(int, nums)
    threads = bx * by * bz
    cus, lds_limit = DEVICES[device]
    assert 1 <= threads <= LAUNCH_BOUNDS[name], f"{launch}: beyond the kernel's __launch_bounds__"
    assert lds + static_lds <= lds_limit, launch
    assert gy <= 65535 and gz <= 65535 and gx * bx < 2**32, launch
    return name, (gx, gy, gz), (bx, by, bz), lds, plan_of(stdout)


LLAMA_GEMMS = {  # (N, K): Llama-3.1-405B TP8 shard and Llama-3.1-8B
    "405b-qkv": (2304, 16384), "405b-o": (16384, 2048), "405b-gate_up": (13312, 16384), "405b-down": (16384, 6656),
    "8b-qkv": (6144, 4096), "8b-gate_up": (28672, 4096), "8b-down": (4096, 14336),
}


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("layer", list(LLAMA_GEMMS))
def test_skinny_gemm_plans(tmp_path, device, layer):
    """The GEMM plans for the decode shapes on MI300X (304 CUs, 64 KB LDS) and MI355X: 4 waves, LDS within
    the device's, split-K slices within the K-blocks, a stream-K grid within the CU slots."""
    n, k = LLAMA_GEMMS[layer]
    cus = DEVICES[device][0]
    for ab, m in itertools.product(("fnuz" if device == "mi300x" else "fn", "bf16"), (1, 4, 8, 9, 16, 24, 32)):
        name, grid, block, lds, plan = planned(tmp_path, device, "gemm", ab=ab, out="bf16", m=m, n=n, k=k,
                                               a_stride=k, b_stride=k, out_stride=n)
        assert block == (256, 1, 1) and lds > 0
        if plan["stream_k"] == "1":
            assert grid[0] <= cus * 8 and grid[1] == 1
        else:
            assert grid == (int(plan["tiles"]), int(plan["split_k"]), 1)
            assert int(plan["split_k"]) <= -(-k // int(plan["block_elems"]))


@pytest.mark.parametrize("device", list(DEVICES))
def test_elementwise_and_rms_norm_plans(tmp_path, device):
    """silu_and_mul / quantize_fp8 grids (rows past 65535 row groups continue in z) and the rms_norm split
    (whole waves per row group; the long-row kernel's LDS staging within the device's LDS)."""
    for d, rows in ((1, 1), (13, 3), (6656, 8), (53248, 1), (8, 20_000_000), (4096, 4096)):
        for op, chunk, extra in (("swiglu", 8, {"out": "fnuz"}), ("quant", 16, {"out": "fn"})):
            _, grid, block, _, _ = planned(tmp_path, device, op, d=d, rows=rows, in_stride=2 * d, out_stride=d,
                                           **{"in": "bf16"}, **extra)
            assert grid[0] * block[0] * chunk >= d, "every chunk of a row has a work-item"
            assert grid[1] * grid[2] * block[1] >= rows, "every row has a work-item (y, then z)"
    for hidden, rows in ((1, 1), (7, 33), (4096, 1), (16384, 4096), (53248, 2), (100003, 3)):
        name, grid, block, lds, plan = planned(tmp_path, device, "rmsnorm", hidden=hidden, rows=rows,
                                               in_stride=hidden, out_stride=hidden, eps=1e-6, residual=1,
                                               out="fnuz", **{"in": "bf16"})
        assert block[0] % 64 == 0, "the reductions need whole waves"
        assert grid[0] * (int(plan["rows_per_block"]) or 1) >= rows  # the long-row kernel: a row per block
        if name == "rms_norm_long_row_kernel":
            assert lds == 16 * int(plan["staged_slots"]) and lds + 64 <= DEVICES[device][1]


# ------------------------------------------------------------------------------------------ mutation checks

MUTATIONS = {  # fault switch of the driver -> what it plants, and a check of the suite that must catch it
    1: "SMFMAC: one lane's 2:4 index pattern selects the other pair of its group",
    2: "v_cvt_pk_fp8_f32 path saturates one FP8 step below the maximum",
    3: "MFMA 16x16x32 fp8: one lane's B fragment comes from its neighbour",
    4: "ds_bpermute (__shfl_xor): one lane reads its source's neighbour",
    5: "s_barrier (__syncthreads) does not wait",
}


def _mutated_check(tmp_path, fault):
    opt = {"fault": fault}
    if fault in (1, 3):  # SMFMAC route (M <= 8) / MFMA route (M > 8), gfx942's own FP8
        check_gemm(tmp_path, "gfx942", gemm_operands(torch.float8_e4m3fnuz, 4 if fault == 1 else 16, 67, 333), **opt)
    elif fault == 2:
        out, ref, _ = run_quant(tmp_path, "gfx942", torch.bfloat16, torch.float8_e4m3fnuz, **opt)
        assert_exact(out, ref)
    else:  # rows reduced by wave shuffles (4) / a block reduction through LDS between barriers (5)
        case = "aligned-rows-per-block" if fault == 4 else "aligned-block-per-row"
        outs, ref, _ = run_rmsnorm(tmp_path, "gfx942", case, torch.bfloat16, None, False, **opt)
        assert_matches_reference(outs["out"], ref)


@pytest.mark.parametrize("fault", list(MUTATIONS), ids=lambda f: MUTATIONS[f].split(":")[0].split()[0] + str(f))
def test_mutation_is_caught(tmp_path, fault):
    """A check that cannot fail is not a check: each planted fault makes the corresponding test fail."""
    _mutated_check(tmp_path, 0)  # the check passes without the fault
    with pytest.raises(AssertionError):
        _mutated_check(tmp_path, fault)


@pytest.mark.parametrize("instr,fault", [("v_smfmac_f32_16x16x64_fp8_fp8", 1), ("v_mfma_f32_16x16x32_fp8_fp8", 3)])
def test_mutation_is_caught_by_layout_test(tmp_path, instr, fault, monkeypatch):
    """The calculator-table test catches a wrong lane in the matrix instructions themselves."""
    real = emulate
    monkeypatch.setattr(sys.modules[__name__], "emulate", lambda *a, **kw: real(*a, **kw, fault=fault))
    with pytest.raises(AssertionError):
        test_matrix_instruction_layouts(tmp_path, "gfx942", instr)


def test_memcheck_is_caught(tmp_path):
    """An output buffer one byte short: the kernel's last store lands outside it and AddressSanitizer stops
    the run."""
    x = torch.randn(3, 32).to(torch.bfloat16)
    out = torch.zeros(3 * 32 - 1, dtype=torch.uint8).view(torch.float8_e4m3fnuz)
    with pytest.raises(AssertionError, match="AddressSanitizer"):
        emulate(tmp_path, "gfx942", "quant", {"x": x, "out": out, "scale": torch.tensor([0.1])},
                **{"in": "bf16", "out": "fnuz", "d": 32, "rows": 3, "in_stride": 32, "out_stride": 32})


SELFTEST_ERRORS = {
    "shuffle_reads_exited_lane": "not active",
    "divergent_collectives": "divergent wave",
    "barrier_in_divergent_code": "deadlock",
    "mfma_partial_wave": "partial wave",
    "lds_out_of_bounds": "AddressSanitizer",
}


@pytest.mark.parametrize("case", list(SELFTEST_ERRORS))
def test_emulator_rules_are_enforced(tmp_path, case):
    """Code the hardware would run wrongly or undefinedly (a shuffle reading an exited lane, lanes of a wave at
    different wave-wide instructions, a barrier in divergent code, an MFMA without all lanes, LDS past the
    launch's size) stops the emulator with an error; the same kernel keeping the rules runs."""
    emulate(tmp_path, "gfx942", "selftest", {}, case="ok")
    with pytest.raises(AssertionError, match=SELFTEST_ERRORS[case]):
        emulate(tmp_path, "gfx942", "selftest", {}, case=case)
