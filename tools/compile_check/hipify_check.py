#!/usr/bin/env python3
"""Hipify check: after torch's hipify, no ROCm translation unit may still use a CUDA-only API.

    python tools/compile_check/hipify_check.py [--root DIR] [--keep DIR]

kernel-builder builds the ROCm variants from the CUDA sources: it copies the tree to its build directory and
runs torch's hipify on the `.cu` files of each `backend = "rocm"` kernel of build.toml (its cmake/hipify.py,
from vLLM)::

    hipify(project_directory=<src>, output_directory=<build copy>, header_include_dirs=[],
           includes=[<src>/*], extra_files=[<build copy>/<kernel>/<x>.cu, ...],
           show_detailed=True, is_pytorch_extension=True, hipify_extra_files_only=True)

This script makes the same call on a temporary copy, then looks at what hipcc would really compile: the
hipified `.hip` plus every project header it includes. hipify rewrites a header only when it finds it next to
the including file (``header_include_dirs`` is empty), so a header included as ``"common/x.cuh"`` from
``rmsnorm_fp8/`` reaches hipcc **unconverted**: such headers must be ROCm-clean on their own.

Only the branches a ROCm build compiles are checked: the unit is preprocessed by clang-19 (``-E``, device pass
for gfx942 and host pass) with torch's and kernel-builder's ROCm defines (``USE_ROCM``,
``__HIP_PLATFORM_AMD__``, ...). Headers from outside the project (torch, HIP, the C++ library) are replaced by
empty stubs, so ``#if`` tests on macros those headers define see them undefined.

Fails on, in code that survives preprocessing (comments and string literals excluded):

* ``cuda[A-Z]...`` identifiers (runtime API: ``cudaStream_t``, ``cudaDeviceGetAttribute``, ...),
* ``cu[A-Z]...(`` calls (driver API), ``cublas...``, ``__nv_...`` (cuda_fp8.h / cuda_fp16.h types and intrinsics),
* an ``#include`` of a CUDA toolkit header (``cuda_runtime.h``, ``cuda_fp8.h``, ``cub/``, ``thrust/``, ...),
* hipify reporting unsupported CUDA calls, or a `.cu` it did not convert.

Not flagged: ``at::cuda::``, ``c10::cuda::``, ``CUDAStream``, ``C10_CUDA_CHECK`` and other torch names. Since
"hipify v2" (pytorch/pytorch#151845, relanded as #174087) torch no longer renames CUDA classes or namespaces
to HIP ones: ROCm builds of torch provide them under their CUDA names, and torch 2.13's hipify leaves them as
they are on purpose.

Exit status: 0 clean (or nothing to check yet: no `.cu` listed by a rocm kernel exists), 1 violations,
2 a tool is missing (a Python with torch, clang-19).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import check  # noqa: E402  (tool discovery shared with the machine-code check)

ToolMissing = check.ToolMissing

# What torch (COMMON_HIP_FLAGS, COMMON_HIPCC_FLAGS) and kernel-builder (utils.cmake) pass to hipcc.
ROCM_DEFINES = ["-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DHIPBLAS_V2", "-DCUDA_HAS_FP16=1",
                "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1", "-DENABLE_FP8", "-DROCM_KERNEL"]

FORBIDDEN = [
    (re.compile(r"\bcuda[A-Z]\w*"), "CUDA runtime API"),
    (re.compile(r"\bcu[A-Z]\w*(?=\s*\()"), "CUDA driver API call"),
    (re.compile(r"\bcublas\w*", re.I), "cuBLAS"),
    (re.compile(r"\b__nv_\w+"), "CUDA-only type/intrinsic (cuda_fp8.h, cuda_fp16.h, ...)"),
]
HINT = ("hipify rewrites a header only when it finds it next to the including file, so a header included from "
        "another directory (\"common/x.h\") reaches hipcc unchanged. Either keep it ROCm-clean (CUDA-only code "
        "under #if !defined(USE_ROCM)), or include it relative to the .cu (\"../common/x.h\") so that hipify "
        "converts it (to common/x_hip.h).")
CUDA_HEADER = re.compile(r"^(cuda\w*\.h|cuda|crt/.*|cub/.*|thrust/.*|cooperative_groups.*|mma\.h|nvrtc\.h|"
                         r"cublas\w*\.h|cusparse\w*\.h|curand\w*\.h|nvtx\w*/.*)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
LINEMARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"')
STRING_OR_CHAR = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


@dataclasses.dataclass
class Finding:
    file: str
    line: int
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: `{self.text}` -- {self.why}"


# ----------------------------------------------------------------------------------------------- inputs


def rocm_sources(root: Path) -> tuple[list[str], list[str]]:
    """(.cu files of the rocm kernels of build.toml, their include dirs), paths relative to `root`."""
    data = tomllib.loads((root / "build.toml").read_text(encoding="utf-8"))
    sources, includes = [], []
    for kernel in data.get("kernel", {}).values():
        if kernel.get("backend") != "rocm":
            continue
        sources += [s for s in kernel.get("src", []) if s.endswith(".cu")]
        includes += kernel.get("include", [])
    return list(dict.fromkeys(sources)), list(dict.fromkeys(includes or ["."]))


def find_torch_python() -> str:
    for python in (sys.executable, str(REPO_ROOT / ".venv" / "bin" / "python")):
        probe = subprocess.run([python, "-c", "import importlib.util as u; assert u.find_spec('torch')"],
                               capture_output=True)
        if probe.returncode == 0:
            return python
    raise ToolMissing("no Python with torch (torch.utils.hipify) found: this one, nor .venv/bin/python")


# ----------------------------------------------------------------------------------------------- hipify


def load_torch_hipify():
    """torch.utils.hipify.hipify_python, loaded as a fresh standalone package (a new, empty result cache each
    time) and without `import torch`, which costs seconds: hipify itself imports nothing from torch."""
    import importlib.util

    torch_spec = importlib.util.find_spec("torch")  # locates the package without importing it
    if torch_spec is None or not torch_spec.submodule_search_locations:
        from torch.utils.hipify import hipify_python  # unusual layout: let the import system find it

        return hipify_python
    pkg_dir = Path(list(torch_spec.submodule_search_locations)[0]) / "utils" / "hipify"
    pkg_name = "_fp8dk_torch_hipify"
    pkg_spec = importlib.util.spec_from_file_location(pkg_name, pkg_dir / "__init__.py",
                                                      submodule_search_locations=[str(pkg_dir)])
    pkg = importlib.util.module_from_spec(pkg_spec)
    sys.modules[pkg_name] = pkg
    pkg_spec.loader.exec_module(pkg)
    return importlib.import_module(f"{pkg_name}.hipify_python")


def run_hipify_in_process(request: dict) -> dict:
    """The kernel-builder call (runs in a Python that has torch); returns per-file status and the log."""
    import contextlib
    import io

    hipify = load_torch_hipify().hipify
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        result = hipify(project_directory=request["project"], output_directory=request["output"],
                        header_include_dirs=[], includes=[os.path.join(request["project"], "*")],
                        extra_files=request["sources"], show_detailed=True, is_pytorch_extension=True,
                        hipify_extra_files_only=True, show_progress=False)
    files = {path: {"hipified": r.hipified_path, "status": r.status} for path, r in result.items()}
    return {"files": files, "log": log.getvalue()}


def run_hipify(python: str, project: Path, output: Path, sources: list[Path]) -> dict:
    request = {"project": str(project), "output": str(output), "sources": [str(s) for s in sources]}
    proc = subprocess.run([python, __file__, "_hipify", json.dumps(request)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"hipify failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_tree(root: Path, dest: Path) -> None:
    skip = shutil.ignore_patterns(".git", ".venv", "venv", "build", "result", "__pycache__", ".pytest_cache",
                                  "_cmake_build", "*.so", "*.o")
    shutil.copytree(root, dest, ignore=skip)


def unsupported_calls(log: str) -> int:
    m = re.search(r"Total number of unsupported CUDA function calls: (\d+)", log)
    return int(m.group(1)) if m else 0


# ----------------------------------------------------------------------------------------------- preprocessing


def resolve_include(name: str, quoted: bool, including_dir: Path, include_dirs: list[Path]) -> Path | None:
    """Where the compiler finds `name`: next to the includer for "..." includes, then the -I dirs."""
    candidates = ([including_dir] if quoted else []) + include_dirs
    for d in candidates:
        if (d / name).is_file():
            return (d / name).resolve()
    return None


def external_includes(unit: Path, include_dirs: list[Path]) -> set[str]:
    """Names of every header the unit (transitively, all branches) includes from outside the project."""
    external, seen, todo = set(), set(), [unit]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for quote, name in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            found = resolve_include(name, quote == '"', path.parent, include_dirs)
            if found is None:
                external.add(name)
            else:
                todo.append(found)
    return external


def make_stubs(names: set[str], stub_dir: Path) -> None:
    for name in names:
        stub = stub_dir / name
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("", encoding="utf-8")


def preprocess(unit: Path, include_dirs: list[Path], stub_dir: Path, device: bool) -> str:
    """The unit as hipcc's device (gfx942) or host pass sees it, with line markers."""
    mode = ["--cuda-device-only", "--offload-arch=gfx942"] if device else ["--cuda-host-only"]
    cmd = [str(check.find_clang()), "-E", "-x", "hip", *mode, "-nogpuinc", "-nogpulib", "-nostdinc",
           "-nostdinc++", "-std=c++20", *ROCM_DEFINES, *[f"-I{d}" for d in include_dirs], f"-I{stub_dir}",
           str(unit)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"clang -E failed on {unit}:\n{proc.stderr}")
    return proc.stdout


# ----------------------------------------------------------------------------------------------- scanning


def scan_preprocessed(text: str, stub_dir: Path, describe) -> list[Finding]:
    """Findings in the active code of one preprocessed unit; `describe` maps a file path to its report name."""
    findings, file, line = [], "", 0
    for raw in text.splitlines():
        if m := LINEMARKER.match(raw):
            line, file = int(m.group(1)), m.group(2)
            header = os.path.relpath(file, stub_dir) if file.startswith(str(stub_dir)) else None
            if header and CUDA_HEADER.match(header) and raw.rstrip().endswith(" 1"):
                findings.append(Finding(*_includer(text, raw), f"#include <{header}>", "CUDA toolkit header"))
            continue
        if not file.startswith(str(stub_dir)) and raw.strip():
            code = STRING_OR_CHAR.sub('""', raw)
            for rx, why in FORBIDDEN:
                for hit in rx.finditer(code):
                    findings.append(Finding(file, line, hit.group(0), why))
        line += 1
    return [dataclasses.replace(f, file=describe(f.file)) for f in findings]


def _includer(text: str, marker: str) -> tuple[str, int]:
    """File and line of the #include that produced `marker` (the last marker before it, plus its lines)."""
    before = text[: text.index(marker)].splitlines()
    file, line = "?", 0
    for raw in before:
        if m := LINEMARKER.match(raw):
            line, file = int(m.group(1)), m.group(2)
        else:
            line += 1
    return file, line


def dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.file, f.line, f.text)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


# ----------------------------------------------------------------------------------------------- main check


@dataclasses.dataclass
class HipifyReport:
    checked: list[str]
    missing: list[str]
    problems: list[str]


def check_tree(root: Path, keep: Path | None = None) -> HipifyReport:
    """Hipify a copy of `root` as kernel-builder does and scan every ROCm unit. Raises ToolMissing."""
    sources, include_names = rocm_sources(root)
    present = [s for s in sources if (root / s).is_file()]
    report = HipifyReport(checked=present, missing=[s for s in sources if s not in present], problems=[])
    if not present:
        return report
    python = find_torch_python()
    check.find_clang()
    with tempfile.TemporaryDirectory(prefix="hipify-check-") as tmp:
        out, stub_dir = Path(tmp) / "src", Path(tmp) / "stubs"
        copy_tree(root, out)
        result = run_hipify(python, root, out, [out / s for s in present])
        if n := unsupported_calls(result["log"]):
            report.problems.append(f"hipify reports {n} unsupported CUDA call(s):\n{result['log'].strip()}")
        include_dirs = [(out / d).resolve() for d in include_names]

        def describe(path: str) -> str:
            p = Path(path)
            return f"{p.relative_to(out)}" if p.is_relative_to(out) else path

        reached_from: dict[str, list[str]] = {}  # finding -> the .cu files whose ROCm unit contains it
        for rel in present:
            entry = result["files"].get(str(out / rel), {})
            hipified = entry.get("hipified")
            if not hipified or not entry.get("status", "").startswith(("[ok]", "[skipped, no changes]")):
                report.problems.append(f"{rel}: hipify did not convert it ({entry.get('status', 'no result')})")
                continue
            unit = Path(hipified)
            make_stubs(external_includes(unit, include_dirs), stub_dir)
            findings = []
            for device in (True, False):
                text = preprocess(unit, include_dirs, stub_dir, device)
                findings += scan_preprocessed(text, stub_dir, describe)
            for f in dedupe(findings):
                reached_from.setdefault(str(f), []).append(rel)
        report.problems += [f"{finding} (in the ROCm build of {', '.join(units)})"
                            for finding, units in reached_from.items()]
        if keep is not None:
            shutil.copytree(out, keep, dirs_exist_ok=True)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_hipify"]:  # internal: run inside the torch Python
        print(json.dumps(run_hipify_in_process(json.loads(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT)
    parser.add_argument("--keep", type=Path, help="copy the hipified tree here")
    args = parser.parse_args(argv)
    try:
        report = check_tree(args.root.resolve(), args.keep)
    except ToolMissing as e:
        print(f"missing tool: {e}", file=sys.stderr)
        return 2
    for rel in report.missing:
        print(f"not yet present (listed in build.toml): {rel}")
    if not report.checked:
        print("no .cu of a rocm kernel exists yet: nothing to hipify")
        return 0
    for p in report.problems:
        print("FAIL " + p)
    if report.problems:
        print("hint: " + HINT)
    print(f"hipify check: {len(report.checked)} file(s), {len(report.problems)} problem(s)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
