#!/usr/bin/env bash
# The test suite as CI runs it: set up .venv, build the local variant(s), run pytest, then the CPU op tests again
# on the baseline CPU path. Extra arguments go to the first pytest and skip the second pass (e.g.
# `bash scripts/test.sh -m kernels_ci`, `-k skinny`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
PY=.venv/bin/python
# Temporary files (pytest's folders and output capture, Inductor's cache, compilers) go under the ignored build/,
# on the checkout's disk, not into the machine's /tmp, which may be smaller (a RAM disk).
export TMPDIR="$PWD/build/tmp"
mkdir -p "$TMPDIR"
"$PY" tools/build.py
# With a CUDA or ROCm torch, the "cpu" test cases need the CPU variant too.
if [ "$("$PY" -c 'import torch; print(torch.version.cuda or torch.version.hip or "")')" != "" ]; then
  "$PY" tools/build.py --backend cpu
fi
# pytest's output also goes to build/pytest.log, from which .ci/run names the failed tests again at the end of a
# failed run's log (the last lines of a log are what a CI report keeps).
PYTEST_LOG=build/pytest.log
"$PY" -m pytest tests -q "$@" 2>&1 | tee "$PYTEST_LOG"

# The CPU op tests once more on the other CPU code path: ATEN_CPU_CAPABILITY=default selects the baseline x86-64
# code in ATen and in our CPU kernels (common/cpu_simd.h), where the run above took the machine's AVX2 code, so
# the suite's verdict covers both kinds of CPU; tests/test_cpu_paths.py checks that the switch took effect.
# Skipped when extra pytest arguments select a subset. Inductor's cache does not key on the capability, so this
# pass gets a cache of its own.
if [ $# -eq 0 ]; then
  echo "== CPU op tests again on the baseline path (ATEN_CPU_CAPABILITY=default) =="
  INDUCTOR_CACHE=$(mktemp -d)
  trap 'rm -rf "$INDUCTOR_CACHE"' EXIT
  ATEN_CPU_CAPABILITY=default TORCHINDUCTOR_CACHE_DIR="$INDUCTOR_CACHE" "$PY" -m pytest -q -k "cpu or meta" \
    tests/test_cpu_paths.py tests/test_devices.py tests/test_nan_rule.py tests/test_skinny_gemm.py \
    tests/test_rmsnorm.py tests/test_swiglu.py tests/test_quant_fp8.py tests/test_llama_kernelize.py 2>&1 |
    tee -a "$PYTEST_LOG"
fi
