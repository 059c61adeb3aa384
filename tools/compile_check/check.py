#!/usr/bin/env python3
"""Machine-code check: compile each kernel's device code for gfx942 / sm_90a (/ gfx950) and check its shape.

Usage::

    python tools/compile_check/check.py check  [--kernel NAME]... [--target T]... [--keep DIR] [--root DIR] [-D X=1]
    python tools/compile_check/check.py report [--kernel NAME]... [--target T]... [--keep DIR] [--markdown]

``check`` exits 0 when every expectation holds, 1 when one does not (each violation is printed), 2 when a
mandatory tool (clang-19, nvcc, cuobjdump) is missing. ``report`` prints, per kernel and target, registers,
scratch/spills, LDS/shared memory, occupancy and the count of every checked instruction as Markdown tables
(``--markdown`` adds the page header used for docs/MACHINE_CODE.md); it exits 0 even when checks fail.

Expectations: ``<kernel dir>/machine_code.toml``
================================================
A top-level directory of the repo takes part by holding a ``machine_code.toml``::

    header = "rmsnorm_fp8/rmsnorm_kernels.cuh"      # from the repo root; the generated TU includes it
    instantiate = [                                  # C++ lines appended after the include
      "template __global__ void fp8dk::k<fp8dk::Bf16, 8>(const uint16_t*, uint8_t*, int);",
    ]
    defines = ["FP8DK_FOO=1"]                        # optional: -D for every target

    [gfx942]                                         # also [sm_90a] and the optional [gfx950]
    require      = { global_load_dwordx4 = 1, v_cvt_pk_fp8_f32 = 1 }   # pattern -> min count, whole TU
    require_each = { global_load_dwordx4 = 1 }       # pattern -> min count in every kernel of the TU
    forbid       = ["scratch_"]                      # pattern must not occur anywhere in the TU
    max          = { vgpr = 64 }                     # per-kernel ceilings
    min          = { occupancy = 8 }                 # per-kernel floors
    flags        = []                                # extra compiler flags for this target

    [sm_90a]
    require = { "LDG.E.128" = 1, "F2FP.SATFINITE.E4M3.F32.PACK_AB" = 1 }
    forbid  = ["LDL", "STL"]

Every key but ``header`` is optional; unknown keys are errors. gfx942 and sm_90a are compiled for every
kernel that has the file, with or without a table; gfx950 only where a Python with ``triton`` is found.

Patterns are matched against instruction mnemonics: the first word of an instruction line of the AMDGPU
``.s`` (comments, labels and directives excluded), or the SASS opcode with its dot-modifiers and without
the predicate (``LDG.E.128.CONSTANT``). A pattern matches when it equals the mnemonic or is a prefix of it
ending at a word boundary: the mnemonic's next character is ``.`` or ``_``, or the pattern ends with one
(``LDG.E.128`` matches ``LDG.E.128.CONSTANT`` but not ``LDG.E.64``; ``global_load_dword`` does not match
``global_load_dwordx4``; ``scratch_`` matches every scratch instruction). ``re:<regex>`` patterns are
``re.match``-ed against the mnemonic instead.

Resource keys for ``max``/``min`` (checked per kernel):

* gfx942/gfx950: ``vgpr`` ``agpr`` ``sgpr`` (``; NumVgprs:`` etc.), ``scratch`` bytes (``; ScratchSize:``,
  default max 0), ``lds`` bytes (``.amdhsa_group_segment_fixed_size``), ``occupancy`` waves/SIMD
  (``; Occupancy:``).
* sm_90a (ptxas ``-v``): ``regs``, ``spill`` bytes (stores + loads, default max 0), ``stack`` bytes,
  ``smem`` bytes, ``occupancy`` = warps/SM that the register count alone allows (64K regs, 256-reg granules).

Tools: ``$CLANG`` or ``clang-19``; ``$NVCC``, ``nvcc`` or ``$CUDA_HOME/bin/nvcc``; ``$CUOBJDUMP``,
``cuobjdump`` or ``build/tools/nvidia/cu13/bin/cuobjdump`` (with nvdisasm beside it); for gfx950
``$FP8DK_TRITON_PYTHON``, this Python if it imports triton, or ``build/triton-venv/bin/python``.
See tools/compile_check/README.md for the compile lines and more examples.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SPEC_NAME = "machine_code.toml"

MANDATORY_TARGETS = ("gfx942", "sm_90a")
OPTIONAL_TARGETS = ("gfx950",)
TARGETS = MANDATORY_TARGETS + OPTIONAL_TARGETS

AMD_RESOURCES = ("vgpr", "agpr", "sgpr", "scratch", "lds", "occupancy")
NV_RESOURCES = ("regs", "spill", "stack", "smem", "occupancy")
DEFAULT_MAX = {"gfx942": {"scratch": 0}, "gfx950": {"scratch": 0}, "sm_90a": {"spill": 0}}

# What the real builds pass, so the TU sees the same macros. kernel-builder (cmake/utils.cmake,
# get_torch_gpu_compiler_flags) uses torch's COMMON_NVCC_FLAGS minus the __CUDA_NO_HALF* defines plus
# -DENABLE_FP8 for CUDA, and COMMON_HIP_FLAGS + COMMON_HIPCC_FLAGS plus -DUSE_ROCM -DENABLE_FP8
# -U__HIP_NO_HALF_* -fno-gpu-rdc for HIP; its preamble adds CUDA_KERNEL / ROCM_KERNEL.
CLANG_FLAGS = ["-O3", "-std=c++20", "-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DHIPBLAS_V2", "-DCUDA_HAS_FP16=1",
               "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1", "-DENABLE_FP8", "-DROCM_KERNEL", "-fno-gpu-rdc"]
NVCC_FLAGS = ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-DENABLE_FP8", "-DCUDA_KERNEL"]


# ----------------------------------------------------------------------------------------------- errors


class ToolMissing(Exception):
    """A compiler or disassembler needed for a target is not installed."""


class SpecError(Exception):
    """A machine_code.toml that does not follow the format."""


class CompileError(Exception):
    """The compiler rejected the TU (or a tool in the chain failed)."""


# ----------------------------------------------------------------------------------------------- specs


@dataclasses.dataclass
class TargetSpec:
    """Expectations of one kernel for one target (one table of machine_code.toml)."""

    require: dict[str, int] = dataclasses.field(default_factory=dict)
    require_each: dict[str, int] = dataclasses.field(default_factory=dict)
    forbid: list[str] = dataclasses.field(default_factory=list)
    max: dict[str, int] = dataclasses.field(default_factory=dict)
    min: dict[str, int] = dataclasses.field(default_factory=dict)
    flags: list[str] = dataclasses.field(default_factory=list)

    def patterns(self) -> list[str]:
        """Every pattern this table mentions, in order of first mention (the report's columns)."""
        return list(dict.fromkeys([*self.require, *self.require_each, *self.forbid]))


@dataclasses.dataclass
class KernelSpec:
    """One machine_code.toml: which header to instantiate and what each target's code must look like."""

    name: str
    root: Path
    spec_path: Path
    header: str
    instantiate: list[str]
    defines: list[str]
    targets: dict[str, TargetSpec]

    def target(self, target: str) -> TargetSpec:
        return self.targets.get(target, TargetSpec())


def _expect_type(value, typ, where: str):
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        raise SpecError(f"{where}: expected {typ.__name__}, got {type(value).__name__} {value!r}")
    return value


def _str_list(value, where: str) -> list[str]:
    _expect_type(value, list, where)
    for i, item in enumerate(value):
        _expect_type(item, str, f"{where}[{i}]")
    return list(value)


def _int_table(value, where: str, allowed: tuple[str, ...] | None = None) -> dict[str, int]:
    _expect_type(value, dict, where)
    for key, count in value.items():
        _expect_type(count, int, f"{where}.{key}")
        if allowed is not None and key not in allowed:
            raise SpecError(f"{where}: unknown resource {key!r} (known: {', '.join(allowed)})")
    return dict(value)


def parse_target_table(table: dict, target: str, where: str) -> TargetSpec:
    """Validate one [target] table."""
    resources = NV_RESOURCES if target == "sm_90a" else AMD_RESOURCES
    known = {f.name for f in dataclasses.fields(TargetSpec)}
    unknown = set(table) - known
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(known)})")
    spec = TargetSpec(
        require=_int_table(table.get("require", {}), f"{where}.require"),
        require_each=_int_table(table.get("require_each", {}), f"{where}.require_each"),
        forbid=_str_list(table.get("forbid", []), f"{where}.forbid"),
        max=_int_table(table.get("max", {}), f"{where}.max", resources),
        min=_int_table(table.get("min", {}), f"{where}.min", resources),
        flags=_str_list(table.get("flags", []), f"{where}.flags"),
    )
    for pattern in spec.patterns():
        compile_pattern(pattern)  # a bad regex is a spec error, not a crash later
    return spec


def load_spec(spec_path: Path, root: Path) -> KernelSpec:
    """Read and validate `<kernel dir>/machine_code.toml`; `root` is the tree the header path is relative to."""
    where = str(spec_path.relative_to(root)) if spec_path.is_relative_to(root) else str(spec_path)
    try:
        data = tomllib.loads(spec_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{where}: {e}") from e
    unknown = set(data) - {"header", "instantiate", "defines", *TARGETS}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)} (targets: {', '.join(TARGETS)})")
    if "header" not in data:
        raise SpecError(f"{where}: missing `header`")
    header = _expect_type(data["header"], str, f"{where}: header")
    if not (root / header).is_file():
        raise SpecError(f"{where}: header {header!r} does not exist under {root}")
    targets = {t: parse_target_table(_expect_type(data[t], dict, f"{where}: [{t}]"), t, f"{where}: [{t}]")
               for t in TARGETS if t in data}
    return KernelSpec(
        name=spec_path.parent.name,
        root=root,
        spec_path=spec_path,
        header=header,
        instantiate=_str_list(data.get("instantiate", []), f"{where}: instantiate"),
        defines=_str_list(data.get("defines", []), f"{where}: defines"),
        targets=targets,
    )


def find_spec_paths(root: Path) -> list[Path]:
    """Every `<dir>/machine_code.toml` directly below `root`, sorted by directory name."""
    return sorted(p for p in root.glob(f"*/{SPEC_NAME}") if not p.parent.name.startswith("."))


def discover_specs(root: Path, names: list[str] | None = None) -> list[KernelSpec]:
    specs = [load_spec(p, root) for p in find_spec_paths(root)]
    if names:
        missing = set(names) - {s.name for s in specs}
        if missing:
            raise SpecError(f"no {SPEC_NAME} for kernel(s) {sorted(missing)} under {root}")
        specs = [s for s in specs if s.name in names]
    return specs


# ----------------------------------------------------------------------------------------------- build.toml


def build_flags(root: Path, header: str, backend: str, key: str) -> list[str]:
    """`key` (hip-flags / cuda-flags) of the build.toml kernel of `backend` whose src lists `header`."""
    path = root / "build.toml"
    if not path.is_file():
        return []
    kernels = tomllib.loads(path.read_text(encoding="utf-8")).get("kernel", {})
    for kernel in kernels.values():
        if kernel.get("backend") == backend and header in kernel.get("src", []):
            return list(kernel.get(key, []))
    return []


# ----------------------------------------------------------------------------------------------- tools


def _which(env: str, names: list[str], extra_dirs: list[Path] = ()) -> Path | None:
    if os.environ.get(env):
        return Path(os.environ[env])
    for name in names:
        found = shutil.which(name)
        if found:
            return Path(found)
        for d in extra_dirs:
            if (d / name).is_file() and os.access(d / name, os.X_OK):
                return d / name
    return None


def find_clang() -> Path:
    clang = _which("CLANG", ["clang-19"])
    if clang is None:
        raise ToolMissing("clang-19 not found (apt-get install clang-19; or bash tools/compile_check/install_tools.sh)")
    return clang


def find_opt() -> Path:
    opt = _which("OPT", ["opt-19"])
    if opt is None:
        raise ToolMissing("opt-19 not found (apt-get install llvm-19; or bash tools/compile_check/install_tools.sh)")
    return opt


def find_nvcc() -> Path:
    cuda_home = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    nvcc = _which("NVCC", ["nvcc"], cuda_home)
    if nvcc is None:
        raise ToolMissing("nvcc not found (CUDA 13.0 expected on PATH or in $CUDA_HOME/bin)")
    return nvcc


def find_cuobjdump() -> Path:
    pip_dir = REPO_ROOT / "build" / "tools" / "nvidia" / "cu13" / "bin"
    tool = _which("CUOBJDUMP", ["cuobjdump"], [pip_dir])
    if tool is None:
        raise ToolMissing("cuobjdump not found ($CUOBJDUMP, PATH, or build/tools: "
                          "bash tools/compile_check/install_tools.sh)")
    return tool


def _nvdisasm_env(cuobjdump: Path) -> dict[str, str]:
    """cuobjdump -sass runs nvdisasm: make the one beside cuobjdump (the pip wheel layout) findable."""
    env = dict(os.environ)
    if shutil.which("nvdisasm") is None and (cuobjdump.parent / "nvdisasm").is_file():
        env["PATH"] = f"{cuobjdump.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _imports_triton(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import triton._C.libtriton"], capture_output=True)
    return probe.returncode == 0


@functools.cache
def find_triton_python() -> str:
    candidates = [os.environ.get("FP8DK_TRITON_PYTHON"), sys.executable,
                  str(REPO_ROOT / "build" / "triton-venv" / "bin" / "python")]
    for python in candidates:
        if python and Path(python).exists() and _imports_triton(python):
            return python
    raise ToolMissing("gfx950 needs a Python with triton ($FP8DK_TRITON_PYTHON or build/triton-venv: "
                      "bash tools/compile_check/install_tools.sh --with-triton)")


def tool_version(tool: Path) -> str:
    """First line of `tool --version` that names a version, for the report header."""
    out = subprocess.run([str(tool), "--version"], capture_output=True, text=True).stdout
    lines = [ln.strip() for ln in out.splitlines() if "version" in ln.lower() or "release" in ln.lower()]
    return lines[-1] if lines else tool.name


# ----------------------------------------------------------------------------------------------- results


@dataclasses.dataclass
class Function:
    """One function of the machine code: its instruction counts and resource usage."""

    name: str
    is_kernel: bool = False
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    resources: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TargetResult:
    kernel: str
    target: str
    functions: list[Function] = dataclasses.field(default_factory=list)
    error: str | None = None  # compile error: every check fails
    skipped: str | None = None  # optional target without its tool
    seconds: float = 0.0
    compiler: str = ""

    @property
    def kernels(self) -> list[Function]:
        return [f for f in self.functions if f.is_kernel]

    def total_counts(self) -> collections.Counter:
        total = collections.Counter()
        for f in self.functions:
            total.update(f.counts)
        return total


def _run(cmd: list, what: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise CompileError(f"{what} failed (exit {proc.returncode}):\n  $ {' '.join(map(str, cmd))}\n"
                           f"{(proc.stdout + proc.stderr).strip()}")
    return proc


# ----------------------------------------------------------------------------------------------- TU


def translation_unit(spec: KernelSpec) -> str:
    lines = [f"// generated by tools/compile_check/check.py from {spec.name}/{SPEC_NAME} -- do not edit",
             f'#include "{spec.header}"', *spec.instantiate, ""]
    return "\n".join(lines)


def write_tu(spec: KernelSpec, workdir: Path) -> Path:
    path = workdir / f"{spec.name}.cu"
    path.write_text(translation_unit(spec), encoding="utf-8")
    return path


def _defines(spec: KernelSpec) -> list[str]:
    return [f"-D{d}" for d in spec.defines]


def clang_command(spec: KernelSpec, tu: Path, out: Path, arch: str = "gfx942", extra: list[str] = ()) -> list:
    return [find_clang(), "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc",
            "--cuda-device-only", "-S", *CLANG_FLAGS, "-DFP8DK_HIP_SHIM", "-I", HERE, "-I", spec.root,
            *build_flags(spec.root, spec.header, "rocm", "hip-flags"), *_defines(spec), *extra, tu, "-o", out]


def nvcc_command(spec: KernelSpec, tu: Path, out: Path) -> list:
    return [find_nvcc(), "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v", *NVCC_FLAGS,
            "-I", spec.root, *build_flags(spec.root, spec.header, "cuda", "cuda-flags"), *_defines(spec),
            *spec.target("sm_90a").flags, tu, "-o", out]


# ----------------------------------------------------------------------------------------------- AMDGPU .s

_AMD_INSN = re.compile(r"^\s+([a-z][a-z0-9_]*)(?=\s|$)")
_AMD_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):")
_AMD_TYPE_FN = re.compile(r"^\s*\.type\s+([^,\s]+),\s*@function")
_AMD_INFO = re.compile(r"^; (\w+): (\d+)")
_AMD_KD = re.compile(r"^\s*\.amdhsa_kernel\s+(\S+)")
_AMD_KD_FIELD = re.compile(r"^\s*\.amdhsa_(group_segment_fixed_size|private_segment_fixed_size)\s+(\d+)")
# clang-19 prints NumSgprs; newer LLVM (Triton's, for gfx950) prints TotalNumSgprs with the same meaning.
_AMD_INFO_KEYS = {"NumVgprs": "vgpr", "NumAgprs": "agpr", "NumSgprs": "sgpr", "TotalNumSgprs": "sgpr",
                  "ScratchSize": "scratch", "Occupancy": "occupancy", "codeLenInByte": "code_bytes"}


def parse_amdgpu_asm(text: str) -> list[Function]:
    """Split clang's AMDGPU assembly into functions with mnemonic counts and resource comments.

    Instructions are counted between a function's label and its `.Lfunc_end`; the `; Key: N` comments that
    follow `; -- End function` belong to the function that just ended; `.amdhsa_kernel` marks kernels.
    """
    fn_names = {m.group(1) for line in text.splitlines() if (m := _AMD_TYPE_FN.match(line))}
    functions: dict[str, Function] = {}
    current: Function | None = None  # function whose body we are in
    last: Function | None = None  # function whose trailing info comments we may be reading
    kd: Function | None = None  # kernel whose .amdhsa_kernel block we are in
    for line in text.splitlines():
        label = _AMD_LABEL.match(line)
        if label and label.group(1) in fn_names:
            current = last = functions.setdefault(label.group(1), Function(label.group(1)))
            continue
        if label and label.group(1).startswith(".Lfunc_end"):
            current = None
            continue
        if m := _AMD_KD.match(line):
            kd = functions.setdefault(m.group(1), Function(m.group(1)))
            kd.is_kernel = True
            continue
        if kd is not None:
            if line.strip() == ".end_amdhsa_kernel":
                kd = None
            elif m := _AMD_KD_FIELD.match(line):
                key = "lds" if m.group(1) == "group_segment_fixed_size" else "private_segment"
                kd.resources[key] = int(m.group(2))
            continue
        if m := _AMD_INFO.match(line):
            if last is not None and m.group(1) in _AMD_INFO_KEYS:
                last.resources[_AMD_INFO_KEYS[m.group(1)]] = int(m.group(2))
            continue
        if current is not None and (m := _AMD_INSN.match(line.split(";", 1)[0])):
            current.counts[m.group(1)] += 1
    return list(functions.values())


# ----------------------------------------------------------------------------------------------- SASS / ptxas

_SASS_FN = re.compile(r"^\s*Function\s*:\s*(\S+)")
# A mnemonic is upper case, digits, "_" and "."; plus the "x" of shapes inside it (QGMMA.64x8x32.F32...).
_SASS_INSN = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_.x]*)")
_PTXAS_FN = re.compile(r"(?:Compiling entry function|Function properties for)\s+'?([^'\s]+)'?")
_PTXAS_ENTRY = re.compile(r"Compiling entry function\s+'([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_sass(text: str) -> dict[str, collections.Counter]:
    """Opcode counts per function of `cuobjdump -sass` output."""
    counts: dict[str, collections.Counter] = {}
    current: collections.Counter | None = None
    for line in text.splitlines():
        if m := _SASS_FN.match(line):
            current = counts.setdefault(m.group(1), collections.Counter())
        elif current is not None and (m := _SASS_INSN.match(line)):
            current[m.group(1)] += 1
    return counts


def regs_occupancy(regs: int) -> int:
    """Warps per SM that `regs` registers per thread allow on sm_90 (64K registers, 256-register granules)."""
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    return min(64, 65536 // per_warp)


def parse_ptxas(text: str) -> dict[str, dict]:
    """Per function: registers, spills, stack, smem, barriers, and whether it is an entry (kernel)."""
    info: dict[str, dict] = {}
    current: dict | None = None
    for line in text.splitlines():
        if m := _PTXAS_FN.search(line):
            current = info.setdefault(m.group(1), {"entry": False})
            if _PTXAS_ENTRY.search(line):
                current["entry"] = True
            continue
        if current is None:
            continue
        if m := _PTXAS_FRAME.search(line):
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            current["spill"] = current["spill_stores"] + current["spill_loads"]
        if m := _PTXAS_USED.search(line):
            current["regs"] = int(m.group(1))
            current["occupancy"] = regs_occupancy(current["regs"])
            current["smem"] = int(m.group(1)) if (m := _PTXAS_SMEM.search(line)) else 0
            current["barriers"] = int(m.group(1)) if (m := _PTXAS_BARRIERS.search(line)) else 0
    return info


def sm90a_functions(ptxas_log: str, sass: str) -> list[Function]:
    info, counts = parse_ptxas(ptxas_log), parse_sass(sass)
    functions = []
    for name in dict.fromkeys([*info, *counts]):
        res = {k: v for k, v in info.get(name, {}).items() if k != "entry"}
        functions.append(Function(name, is_kernel=info.get(name, {}).get("entry", name in counts),
                                  counts=counts.get(name, collections.Counter()), resources=res))
    return functions


# ----------------------------------------------------------------------------------------------- compile


def _keep(keep: Path | None, name: str, text: str) -> None:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / name).write_text(text, encoding="utf-8")


def compile_gfx942(spec: KernelSpec, work: Path, keep: Path | None) -> list[Function]:
    tu, out = write_tu(spec, work), work / f"{spec.name}.gfx942.s"
    _run(clang_command(spec, tu, out, extra=spec.target("gfx942").flags), "clang-19 (gfx942)")
    asm = out.read_text(encoding="utf-8")
    _keep(keep, out.name, asm)
    return parse_amdgpu_asm(asm)


def compile_gfx950(spec: KernelSpec, work: Path, keep: Path | None) -> list[Function]:
    python = find_triton_python()
    tu, ll, out = write_tu(spec, work), work / f"{spec.name}.gfx950.ll", work / f"{spec.name}.gfx950.s"
    as_gfx950 = ["-emit-llvm", "-U__gfx942__", "-D__gfx950__=1", *spec.target("gfx950").flags]
    _run(clang_command(spec, tu, ll, extra=as_gfx950), "clang-19 (gfx950 IR)")
    # clang's own codegen runs these IR passes before instruction selection; Triton's does not, and without
    # them pointers loaded from a by-value kernel argument (a params struct) stay generic: flat_load, not
    # global_load.
    promoted = work / f"{spec.name}.gfx950.promoted.ll"
    _run([find_opt(), "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-S",
          "-passes=amdgpu-promote-kernel-arguments,infer-address-spaces", ll, "-o", promoted], "opt-19 (gfx950 IR)")
    _run([python, HERE / "retarget_amdgpu.py", promoted, "gfx950", out], "Triton LLVM (IR -> gfx950)")
    asm = out.read_text(encoding="utf-8")
    _keep(keep, out.name, asm)
    return parse_amdgpu_asm(asm)


def compile_sm90a(spec: KernelSpec, work: Path, keep: Path | None) -> list[Function]:
    cuobjdump = find_cuobjdump()
    tu, cubin = write_tu(spec, work), work / f"{spec.name}.sm_90a.cubin"
    proc = _run(nvcc_command(spec, tu, cubin), "nvcc (sm_90a)")
    ptxas_log = proc.stdout + proc.stderr
    sass = _run([cuobjdump, "-sass", cubin], "cuobjdump -sass", env=_nvdisasm_env(cuobjdump)).stdout
    _keep(keep, f"{spec.name}.sm_90a.ptxas.txt", ptxas_log)
    _keep(keep, f"{spec.name}.sm_90a.sass", sass)
    return sm90a_functions(ptxas_log, sass)


COMPILERS = {"gfx942": compile_gfx942, "sm_90a": compile_sm90a, "gfx950": compile_gfx950}


def compiler_name(target: str) -> str:
    try:
        if target == "sm_90a":
            return tool_version(find_nvcc())
        if target == "gfx950":
            python = find_triton_python()
            v = subprocess.run([python, "-c", "import triton; print(triton.__version__)"],
                               capture_output=True, text=True).stdout.strip()
            return f"{tool_version(find_clang())} + Triton {v} LLVM"
        return tool_version(find_clang())
    except ToolMissing:
        return "missing"


def run_target(spec: KernelSpec, target: str, keep: Path | None = None) -> TargetResult:
    """Compile `spec` for `target` and parse its machine code. Raises ToolMissing for a mandatory target."""
    result = TargetResult(spec.name, target)
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix=f"mc-{spec.name}-{target}-") as tmp:
            work = Path(tmp)
            if keep is not None:
                _keep(keep, f"{spec.name}.cu", translation_unit(spec))
            result.functions = COMPILERS[target](spec, work, keep)
    except ToolMissing as e:
        if target in MANDATORY_TARGETS:
            raise
        result.skipped = str(e)
    except CompileError as e:
        result.error = str(e)
    result.seconds = time.perf_counter() - start
    return result


# ----------------------------------------------------------------------------------------------- checking


def compile_pattern(pattern: str):
    """A predicate on mnemonics for `pattern` (see the module docstring for the matching rule)."""
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error as e:
            raise SpecError(f"bad regex in pattern {pattern!r}: {e}") from e
        return lambda mnemonic: rx.match(mnemonic) is not None

    def matches(mnemonic: str) -> bool:
        if not mnemonic.startswith(pattern):
            return False
        rest = mnemonic[len(pattern):]
        return rest == "" or pattern[-1] in "._" or rest[0] in "._"

    return matches


def count_matches(counts: collections.Counter, pattern: str) -> int:
    match = compile_pattern(pattern)
    return sum(n for mnemonic, n in counts.items() if match(mnemonic))


def _where(counts_by_fn: list[Function], pattern: str) -> str:
    hits = [f"{display_name(f.name)} ({count_matches(f.counts, pattern)})"
            for f in counts_by_fn if count_matches(f.counts, pattern)]
    return "; in " + ", ".join(hits) if hits else ""


def check_resources(fn: Function, tspec: TargetSpec, target: str) -> list[str]:
    limits = {**DEFAULT_MAX.get(target, {}), **tspec.max}
    problems = []
    for key, bound in limits.items():
        value = fn.resources.get(key)
        if value is None:
            problems.append(f"{display_name(fn.name)}: resource `{key}` not found in the compiler output")
        elif value > bound:
            problems.append(f"{display_name(fn.name)}: {key} = {value} > max {bound}")
    for key, bound in tspec.min.items():
        value = fn.resources.get(key)
        if value is None:
            problems.append(f"{display_name(fn.name)}: resource `{key}` not found in the compiler output")
        elif value < bound:
            problems.append(f"{display_name(fn.name)}: {key} = {value} < min {bound}")
    return problems


def evaluate(spec: KernelSpec, result: TargetResult) -> list[str]:
    """Every way `result` falls short of the expectations of `spec` for its target (empty: all hold)."""
    if result.skipped:
        return []
    if result.error:
        return [result.error]
    tspec = spec.target(result.target)
    if not result.kernels:
        return ["no kernel in the machine code: does `instantiate` name the kernels (explicit instantiations)?"]
    total = result.total_counts()
    problems = []
    for pattern, need in tspec.require.items():
        have = count_matches(total, pattern)
        if have < need:
            problems.append(f"require `{pattern}` >= {need} in the TU, found {have}")
    for pattern, need in tspec.require_each.items():
        for fn in result.kernels:
            have = count_matches(fn.counts, pattern)
            if have < need:
                problems.append(f"{display_name(fn.name)}: require_each `{pattern}` >= {need}, found {have}")
    for pattern in tspec.forbid:
        have = count_matches(total, pattern)
        if have:
            problems.append(f"forbid `{pattern}`: found {have}{_where(result.functions, pattern)}")
    for fn in result.kernels:
        problems.extend(check_resources(fn, tspec, result.target))
    return problems


# ----------------------------------------------------------------------------------------------- names

_DEMANGLED: dict[str, str] = {}


def demangle_all(names: list[str]) -> None:
    """Fill the demangling cache with one c++filt call (names stay mangled if no c++filt is installed)."""
    todo = [n for n in dict.fromkeys(names) if n not in _DEMANGLED]
    tool = shutil.which("llvm-cxxfilt-19") or shutil.which("c++filt")
    if not todo or tool is None:
        return
    out = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True, text=True).stdout
    lines = out.splitlines()
    if len(lines) == len(todo):
        _DEMANGLED.update(zip(todo, lines))


def display_name(mangled: str) -> str:
    """`fp8dk::kernel<fp8dk::Bf16, 8>` for `_ZN5fp8dk6kernelI...`: no return type, no parameter list."""
    name = _DEMANGLED.get(mangled, mangled)
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


# ----------------------------------------------------------------------------------------------- report

AMD_COLUMNS = [("VGPR", "vgpr"), ("AGPR", "agpr"), ("SGPR", "sgpr"), ("scratch B", "scratch"),
               ("LDS B", "lds"), ("occupancy (waves/SIMD)", "occupancy")]
NV_COLUMNS = [("regs", "regs"), ("spill st/ld B", None), ("stack B", "stack"), ("smem B", "smem"),
              ("barriers", "barriers"), ("occupancy (warps/SM by regs)", "occupancy")]


def _cell(fn: Function, key: str | None) -> str:
    if key is None:  # spill pair
        if "spill_stores" not in fn.resources:
            return "?"
        return f"{fn.resources['spill_stores']}/{fn.resources['spill_loads']}"
    value = fn.resources.get(key)
    return "?" if value is None else str(value)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def section_title(kernel: str, target: str) -> str:
    return f"### {kernel} — {target}"


def report_table(spec: KernelSpec, result: TargetResult, problems: list[str]) -> list[str]:
    """Markdown for one kernel x target: a row per function, then the TU totals and the verdict."""
    title = section_title(spec.name, result.target)
    if result.skipped:
        return [title, "", f"_skipped: {result.skipped}_", ""]
    if result.error:
        return [title, "", "**compile error**", "", "```", result.error, "```", ""]
    columns = NV_COLUMNS if result.target == "sm_90a" else AMD_COLUMNS
    patterns = spec.target(result.target).patterns()
    lines = [title, "", f"_{result.compiler}_", "",
             _row(["kernel", *[c for c, _ in columns], *[f"`{p}`" for p in patterns]]),
             _row(["---"] * (1 + len(columns) + len(patterns)))]
    for fn in sorted(result.functions, key=lambda f: (not f.is_kernel, display_name(f.name))):
        name = display_name(fn.name) + ("" if fn.is_kernel else " (device function)")
        lines.append(_row([f"`{name}`", *[_cell(fn, k) for _, k in columns],
                           *[str(count_matches(fn.counts, p)) for p in patterns]]))
    if len(result.functions) > 1 and patterns:
        total = result.total_counts()
        lines.append(_row(["**TU total**", *[""] * len(columns), *[str(count_matches(total, p)) for p in patterns]]))
    lines.append("")
    if problems:
        lines += ["**FAILS:**", "", *[f"- {p}" for p in problems], ""]
    else:
        lines += ["all expectations hold" if patterns or spec.target(result.target).max else
                  "compiles; default checks hold (no expectations table for this target)", ""]
    return lines


DOC_HEADER = """# Machine code of the kernels

Generated by `python tools/compile_check/check.py report --markdown > docs/MACHINE_CODE.md` — do not edit
by hand; regenerate after changing a kernel, the portability layer (common/) or a `machine_code.toml`.
What each column means and how expectations are written: tools/compile_check/README.md.

- gfx942 (MI300X): clang-19 device-only assembly with tools/compile_check/hip_min.h. VGPR/AGPR/SGPR,
  scratch and occupancy (waves per SIMD, max 8) are the compiler's own `; NumVgprs:` ... comments; LDS is the
  static `__shared__` size.
- sm_90a (H100): nvcc `-cubin -Xptxas -v` + `cuobjdump -sass`. Occupancy is the warps per SM that the
  register count alone allows (64 max); shared memory and block size can lower it further.
- gfx950 (MI350, optional): clang-19 IR preprocessed for gfx950, lowered by Triton's LLVM.
- Instruction columns: how many instructions of the machine code match each pattern of the kernel's
  `machine_code.toml` (static count: a loop body counts once).
"""


def page_section(page: str, kernel: str, target: str) -> list[str] | None:
    """The lines of docs/MACHINE_CODE.md's `kernel` x `target` section (report_table's form), None if absent."""
    lines = page.splitlines()
    title = section_title(kernel, target)
    if title not in lines:
        return None
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "### "))), len(lines))
    return lines[start:end]


def render_report(specs: list[KernelSpec], results: list[TargetResult], markdown_page: bool) -> str:
    by_key = {(r.kernel, r.target): r for r in results}
    lines = [DOC_HEADER] if markdown_page else []
    for spec in specs:
        lines += [f"## {spec.name}", "", f"`{spec.header}` instantiated by `{spec.name}/{SPEC_NAME}`", ""]
        for target in TARGETS:
            if (spec.name, target) in by_key:
                result = by_key[(spec.name, target)]
                lines += report_table(spec, result, evaluate(spec, result))
    if not specs:
        lines.append(f"_No kernel directory has a {SPEC_NAME} yet._")
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------- CLI


def run_all(specs: list[KernelSpec], targets: list[str], keep: Path | None) -> list[TargetResult]:
    jobs = [(s, t) for s in specs for t in targets]
    compilers = {t: compiler_name(t) for t in targets}
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda job: run_target(job[0], job[1], keep), jobs))
    for r in results:
        r.compiler = compilers[r.target]
    demangle_all([f.name for r in results for f in r.functions])
    return results


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["check", "report"])
    parser.add_argument("--kernel", action="append", help="kernel directory name (repeatable; default: all)")
    parser.add_argument("--target", action="append", choices=TARGETS, help="repeatable; default: all")
    parser.add_argument("--keep", type=Path, help="write the TU, .s, .sass and ptxas log here")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="tree to take kernels from (default: repo)")
    parser.add_argument("--markdown", action="store_true", help="report: emit the docs/MACHINE_CODE.md page")
    parser.add_argument("-D", "--define", action="append", default=[],
                        help="extra -D for every TU, e.g. to force a fallback path and watch a check fail")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    targets = args.target or list(TARGETS)
    try:
        specs = discover_specs(args.root.resolve(), args.kernel)
        for spec in specs:
            spec.defines += args.define
        start = time.perf_counter()
        results = run_all(specs, targets, args.keep)
    except SpecError as e:
        print(f"machine_code.toml error: {e}", file=sys.stderr)
        return 1
    except ToolMissing as e:
        print(f"missing tool: {e}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    if args.mode == "report":
        sys.stdout.write(render_report(specs, results, args.markdown))
        if not args.markdown:
            print(f"\n_{len(results)} compile(s) in {elapsed:.1f} s_")
        return 0
    return print_check(specs, results, elapsed)


def print_check(specs: list[KernelSpec], results: list[TargetResult], elapsed: float) -> int:
    by_name = {s.name: s for s in specs}
    failed = 0
    for r in results:
        problems = evaluate(by_name[r.kernel], r)
        status = "SKIP" if r.skipped else ("FAIL" if problems else "ok")
        print(f"{status:4} {r.kernel} {r.target} ({r.seconds:.2f} s)" + (f": {r.skipped}" if r.skipped else ""))
        for p in problems:
            print("     - " + p.replace("\n", "\n       "))
        failed += bool(problems)
    if not specs:
        print(f"no kernel directory has a {SPEC_NAME}: nothing to check")
    print(f"{len(results) - failed} ok/skipped, {failed} failed, in {elapsed:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
