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

# One line per step, so that a long pip run is not silent; pip itself stays quiet (its errors still show).
step() { echo "setup.sh: $*"; }

if [ ! -x "$PY" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV"
fi

installed() { "$PY" -c "from importlib.metadata import version; print(version('$1'))" 2>/dev/null; }

if ! installed torch >/dev/null; then
  step "installing torch 2.13.0 (about a minute)"
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
all_pinned && { step "$VENV is up to date (torch $(installed torch))"; exit 0; }

# The public version of the installed torch (2.13.0 also matches 2.13.0+cu130): pip must not replace it.
TORCH_VERSION=$(installed torch)
TORCH_VERSION=${TORCH_VERSION%%+*}
step "installing ${PACKAGES[*]} for torch $TORCH_VERSION (about 45 s)"
"${PIP[@]}" -c <(echo "torch==$TORCH_VERSION") "${PACKAGES[@]}"
step "done"
