#!/usr/bin/env bash
# The test suite as CI runs it: set up .venv, build the local variant(s), run pytest. Extra arguments go to
# pytest (e.g. `bash scripts/test.sh -m kernels_ci`, `-k skinny`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
PY=.venv/bin/python
"$PY" tools/build.py
# With a CUDA or ROCm torch, the "cpu" test cases need the CPU variant too.
if [ "$("$PY" -c 'import torch; print(torch.version.cuda or torch.version.hip or "")')" != "" ]; then
  "$PY" tools/build.py --backend cpu
fi
"$PY" -m pytest tests -q "$@"
