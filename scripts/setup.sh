#!/usr/bin/env bash
# Creates .venv (if missing) with the project's Python toolchain; fast when everything is already there.
#   torch 2.13.0 first (a torch already in the venv is kept, e.g. a CUDA or ROCm build on a GPU machine), then the
#   rest with pip held to that torch: kernels 0.17.2 with transformers 5.22.2 (the newest transformers that
#   accepts kernels 0.17.x), pytest, ninja (torch's extension builds), and numpy, matplotlib, tabulate (kernels'
#   [benchmark] extra: `kernels benchmark` and the benchmark charts).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)
PACKAGES=(kernels==0.17.2 transformers==5.22.2 pytest ninja numpy matplotlib tabulate)

[ -x "$PY" ] || python3 -m venv "$VENV"

installed() { "$PY" -c "from importlib.metadata import version; print(version('$1'))" 2>/dev/null; }

if ! installed torch >/dev/null; then
  "${PIP[@]}" torch==2.13.0
fi

# Skip pip altogether when every pin is met (pip's resolver alone takes seconds).
all_pinned() {
  local spec have
  for spec in "${PACKAGES[@]}"; do
    have=$(installed "${spec%%==*}") || return 1
    [[ "$spec" != *==* || "$have" == "${spec#*==}" ]] || return 1
  done
}
all_pinned && exit 0

# The public version of the installed torch (2.13.0 also matches 2.13.0+cu130): pip must not replace it.
TORCH_VERSION=$(installed torch)
TORCH_VERSION=${TORCH_VERSION%%+*}
"${PIP[@]}" -c <(echo "torch==$TORCH_VERSION") "${PACKAGES[@]}"
