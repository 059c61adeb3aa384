"""Fixtures shared by the tests: the kernel, loaded through `kernels` exactly as users load it, and the devices.

`device` runs every test on "cpu" and, when torch.cuda.is_available() (CUDA or ROCm), on "cuda" with the GPU
variant of the build; without a GPU the "cuda" cases skip with the reason. The build must exist already
(python tools/build.py); it is found through LOCAL_KERNELS, which points the Hub repo id at this checkout
unless the environment already maps it (kernel-builder's test shells point it at their build).
"""

import functools
import os
import zlib
from typing import Optional

import pytest
import torch

from .helpers import REPO_ID, REPO_ROOT

HAS_GPU = torch.cuda.is_available()

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")),
]


def pytest_configure(config):
    # Registered here rather than only in pytest.ini: kernel-builder's sandbox copies tests/*.py but no ini file.
    config.addinivalue_line("markers", "kernels_ci: fast subset run by kernel-builder's CI (pytest -m kernels_ci)")


_LOADED = set()  # backends load_kernel has loaded (a failed or skipped load is not one)


@functools.cache
def load_kernel(backend: Optional[str]):
    """The kernel module for `backend` ("cpu", or None for the installed torch's own backend)."""
    import kernels

    overrides = os.environ.get("LOCAL_KERNELS", "")
    if f"{REPO_ID}=" not in overrides:
        os.environ["LOCAL_KERNELS"] = ":".join(filter(None, [overrides, f"{REPO_ID}={REPO_ROOT}"]))
    try:
        module = kernels.get_kernel(REPO_ID, version=1, backend=backend)
    except FileNotFoundError as e:
        if backend == "cpu" and HAS_GPU:
            pytest.skip("no CPU variant next to the GPU one: build it with `python tools/build.py --backend cpu`")
        pytest.fail(f"no build of {REPO_ID} for this system: run `python tools/build.py` first.\n{e}", pytrace=False)
    _LOADED.add(backend)
    return module


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def kernel(device):
    """The kernel whose ops take tensors on `device`: the CPU variant for "cpu", the installed torch's (CUDA or
    ROCm) variant for "cuda"."""
    return load_kernel("cpu" if device == "cpu" else None)


@pytest.fixture(autouse=True)
def _seed(request):
    """Different random inputs in every test, reproducible from the test's id alone (any -k selection)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def kernel_cpu():
    """The CPU variant, for tests that are about the CPU only."""
    return load_kernel("cpu")


@pytest.fixture(autouse=True)
def _tuning_overrides(monkeypatch):
    """The kernels read each FP8DK_* override once per process (common/tuning.h). A test that sets one through
    monkeypatch gets it read again: setenv and delenv here also make every loaded variant forget what it read,
    and so does the start of every test (the previous test's monkeypatch has undone its settings by then)."""

    def reload():
        for backend in list(_LOADED):
            load_kernel(backend).ops._reload_tuning()

    set_env, del_env = monkeypatch.setenv, monkeypatch.delenv

    def setenv(name, value, prepend=None):
        set_env(name, value, prepend)
        reload()

    def delenv(name, raising=True):
        del_env(name, raising)
        reload()

    monkeypatch.setenv, monkeypatch.delenv = setenv, delenv
    reload()

