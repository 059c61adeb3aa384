"""The CPU code paths: which one runs is chosen by ATen's CPU capability (ATEN_CPU_CAPABILITY overrides it), for
ATen's own kernels and for ours alike. scripts/test.sh runs the CPU op tests a second time with
ATEN_CPU_CAPABILITY=default, so that the suite covers both the machine's vector path and the baseline x86-64
path on any CI machine; these tests show that the switch really changes the path.
"""

import os
import subprocess
import sys

import pytest
import torch

from .helpers import REPO_ID, REPO_ROOT

# What our kernels report for each ATen capability (ops.cpu_isa): AVX2 code from AVX2 up (never AVX-512 code).
OUR_PATH = {"DEFAULT": "default", "AVX2": "avx2", "AVX512": "avx2"}


def _in_subprocess(env_extra: dict) -> list:
    code = (
        "import os, torch, kernels\n"
        f"k = kernels.get_kernel({REPO_ID!r}, version=1, backend='cpu')\n"
        "print(torch.backends.cpu.get_cpu_capability(), k.ops.cpu_isa())\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
    env.update(LOCAL_KERNELS=f"{REPO_ID}={REPO_ROOT}", **env_extra)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_paths_follow_aten_capability(kernel_cpu):
    """This process: our kernels take the path of ATen's capability."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in OUR_PATH:
        pytest.skip(f"no vector path of ours for ATen capability {capability} (e.g. aarch64): default code")
    assert kernel_cpu.ops.cpu_isa() == OUR_PATH[capability]
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    if forced:  # scripts/test.sh's second pass: the override must have taken effect
        assert capability == forced.upper() and kernel_cpu.ops.cpu_isa() == OUR_PATH[forced.upper()]


def test_default_capability_selects_the_baseline_path(kernel_cpu):
    """ATEN_CPU_CAPABILITY=default selects the baseline code in ATen and ours; without it an AVX2 machine runs
    the AVX2 code: two different paths, both under test."""
    assert _in_subprocess({"ATEN_CPU_CAPABILITY": "default"}) == ["DEFAULT", "default"]
    native = _in_subprocess({})
    if native[0] not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU has no AVX2 path (ATen capability {native[0]}): one path only")
    assert native == [native[0], "avx2"]
