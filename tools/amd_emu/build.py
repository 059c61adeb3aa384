"""Builds the CPU wave emulator's driver (tools/amd_emu/driver.cpp) for one AMD target.

    python tools/amd_emu/build.py gfx942        # -> build/amd_emu/driver-gfx942-<hash>, path printed

The kernels' headers compile as host C++ with clang-19 under the macros of the ROCm build (USE_ROCM,
__HIP_PLATFORM_AMD__, __HIP_DEVICE_COMPILE__, the __gfx942__ or __gfx950__ device pass, wave 64), with
tools/amd_emu/hip_min.h standing in for the HIP runtime header, and with AddressSanitizer (the emulator's
memcheck). No -march: the result does not depend on the CPU's instruction set (fmaf is the libm call where the
CPU has no FMA). -ffp-contract=off: see tools/amd_emu/README.md ("What is not emulated").

The binary is cached under build/amd_emu/, keyed by a hash of every source it includes and the command line.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "tools" / "amd_emu"
TARGETS = ("gfx942", "gfx950")
SOURCE_GLOBS = ("common/*.cuh", "common/*.h", "quant_fp8/*.cuh", "quant_fp8/*.h", "rmsnorm_fp8/*.cuh",
                "rmsnorm_fp8/*.h", "swiglu_fp8/*.cuh", "swiglu_fp8/*.h", "skinny_gemm/*.cuh", "skinny_gemm/*.h",
                "tools/amd_emu/*.h", "tools/amd_emu/*.cpp", "tools/amd_emu/shim/*.h", "tools/compile_check/hip_min.h")


def clang() -> str:
    """clang-19's C++ driver, with its AddressSanitizer runtime (FileNotFoundError when either is missing)."""
    for name in (os.environ.get("CLANGXX"), "clang++-19", "clang-19"):
        if name and shutil.which(name):
            path = shutil.which(name)
            runtime = subprocess.run([path, "-print-file-name=libclang_rt.asan-x86_64.a"], capture_output=True,
                                     text=True).stdout.strip()
            if not os.path.exists(runtime):
                raise FileNotFoundError("clang-19's AddressSanitizer runtime is missing (libclang-rt-19-dev; "
                                        "bash tools/compile_check/install_tools.sh installs it)")
            return path
    raise FileNotFoundError("clang-19 not found (bash tools/compile_check/install_tools.sh installs it)")


def command(target: str, output: Path, overlay: Path) -> list:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target}")
    return [
        clang(), "-x", "c++", "-std=c++20", "-O0", "-g0", "-fsanitize=address", "-fno-omit-frame-pointer",
        "-ffp-contract=off", "-fno-fast-math", "-fdeclspec",
        "-Wall", "-Wno-unknown-attributes", "-Wno-ignored-attributes", "-Wno-unused-function",
        "-Wno-unused-variable", "-Wno-unused-but-set-variable",
        "-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DFP8DK_HIP_SHIM", "-D__HIP_DEVICE_COMPILE__=1",
        "-D__AMDGCN_WAVEFRONT_SIZE=64", f"-D__{target}__=1",
        "-I", str(EMU), "-I", str(ROOT / "tools" / "compile_check"), "-I", str(ROOT),
        "-ivfsoverlay", str(overlay),
        str(EMU / "driver.cpp"), "-o", str(output),
    ]


def _overlay(build_dir: Path) -> Path:
    """A clang VFS overlay that shows tools/amd_emu/shim/launch.h at common/launch.h (torch- and HIP-free)."""
    path = build_dir / "overlay.yaml"
    text = ("{ 'version': 0, 'roots': [ { 'name': '%s', 'type': 'file', 'external-contents': '%s' } ] }\n"
            % (ROOT / "common" / "launch.h", EMU / "shim" / "launch.h"))
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def source_hash(target: str) -> str:
    h = hashlib.sha256(target.encode())
    for pattern in SOURCE_GLOBS:
        for f in sorted(ROOT.glob(pattern)):
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    h.update(subprocess.run([clang(), "--version"], capture_output=True, text=True).stdout.encode())
    h.update(" ".join(command(target, Path("out"), Path("overlay"))).encode())  # the flags
    return h.hexdigest()[:16]


def build(target: str, build_dir: Path = ROOT / "build" / "amd_emu") -> Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    output = build_dir / f"driver-{target}-{source_hash(target)}"
    if output.exists():
        return output
    tmp = output.with_suffix(".tmp")
    cmd = command(target, tmp, _overlay(build_dir))
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"emulator build failed ({target}):\n{' '.join(cmd)}\n{result.stderr[-20000:]}")
    tmp.rename(output)
    for stale in build_dir.glob(f"driver-{target}-*"):  # builds of older sources
        if stale != output:
            stale.unlink(missing_ok=True)
    return output


if __name__ == "__main__":
    for t in sys.argv[1:] or TARGETS:
        print(build(t))
