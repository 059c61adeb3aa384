#!/usr/bin/env bash
# Install what the machine-code and hipify checks need on a fresh Debian 12 machine (CI or a developer's):
#   clang-19, lld-19, llvm-19 (apt)                 gfx942 device assembly, llvm-objdump/llvm-cxxfilt
#   libclang-rt-19-dev (apt)                        AddressSanitizer runtime for the AMD wave emulator (tools/amd_emu)
#   cuobjdump + nvdisasm (PyPI wheels, build/tools) SASS of the sm_90a cubins (nvcc 13.0 is on the image)
#   --with-triton: triton in build/triton-venv      optional gfx950 lowering (~1 GB; not needed for CI)
# Idempotent: each step is skipped when its tool is already there, so a second run takes well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$ROOT/build/tools"
WITH_TRITON=0
for arg in "$@"; do
  case "$arg" in
    --with-triton) WITH_TRITON=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install_tools.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_apt_tools() {
  local missing=()
  command -v clang-19 >/dev/null || missing+=(clang-19)
  command -v ld.lld-19 >/dev/null || missing+=(lld-19)
  command -v llvm-objdump-19 >/dev/null || missing+=(llvm-19)
  # AddressSanitizer runtime for the AMD wave emulator's driver (tools/amd_emu, tests/test_amd_emulator.py).
  [ -e "$(clang-19 -print-file-name=libclang_rt.asan-x86_64.a 2>/dev/null)" ] || missing+=(libclang-rt-19-dev)
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install_tools: clang-19/lld-19/llvm-19/libclang-rt-19-dev present"
    return
  fi
  echo "install_tools: apt-get install ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

python_bin() {
  if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else command -v python3; fi
}

install_cuda_binutils() {
  local bin="$TOOLS/nvidia/cu13/bin"
  if [ -x "$bin/cuobjdump" ] && [ -x "$bin/nvdisasm" ]; then
    echo "install_tools: cuobjdump/nvdisasm present in build/tools"
    return
  fi
  echo "install_tools: pip install --target build/tools nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"
  # One pip call for both: pip --target will not merge a second wheel into an existing nvidia/ directory.
  rm -rf "$TOOLS/nvidia" "$TOOLS"/nvidia_cuda_*.dist-info
  "$(python_bin)" -m pip install -q --disable-pip-version-check --no-deps --target "$TOOLS" \
    nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
}

install_triton() {
  local venv="$ROOT/build/triton-venv"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import triton._C.libtriton" 2>/dev/null; then
    echo "install_tools: triton present in build/triton-venv"
    return
  fi
  echo "install_tools: python3 -m venv build/triton-venv && pip install triton"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check triton
}

install_apt_tools
install_cuda_binutils
if [ "$WITH_TRITON" -eq 1 ]; then install_triton; fi
command -v nvcc >/dev/null || echo "install_tools: warning: nvcc is not on PATH (expected on the CI image)" >&2
