#!/usr/bin/env bash
# One GPU session in one call: build the CUDA/ROCm variant, run the tests, run compute-sanitizer memcheck on
# tests/sanitizer_*.py, run the benchmark sweep with the time that is left, and leave the logs and results in
# $OUT. Run from the repository root:
#
#     bash tools/gpu_session.sh
#     STAGES="sweep" SWEEP_ARGS="--suite skinny_gemm" bash tools/gpu_session.sh
#
# Every stage runs even when an earlier one failed (a stale build may still load); a summary comes last.
# Environment:
#   OUT               where logs and results go (the device tool sets it; default gpu_session_out/ in the repository)
#   STAGES            stages to run, in order (default "build tests sanitizer sweep")
#   SESSION_SECONDS   wall-clock budget of the whole script (default 560: the device tool allows 600 a command)
#   SWEEP_ARGS        extra arguments for benchmarks/sweep.py, e.g. "--quick" or "--suite rmsnorm"; unless
#                     they set --budget-seconds, the sweep gets the time the earlier stages left. Do not pass
#                     --out: the results are collected from benchmarks/results/.
#   BUILD_TIMEOUT, TESTS_TIMEOUT, SANITIZER_TIMEOUT (per file)   stage limits in seconds (300, 180, 150)
#   PYTHON            interpreter (default python3)
#
# Files in $OUT (at most 8, as the device tool returns): <stage>.log for each stage, summary.txt, sweep.md
# (the tables) and sweep-results.tar.gz (benchmarks/results/<device>/: JSON, Markdown, PNGs), which unpacks
# at the repository root: tar -xzf sweep-results.tar.gz -C <repo>.

set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-$PWD/gpu_session_out}
STAGES=${STAGES:-"build tests sanitizer sweep"}
SESSION_SECONDS=${SESSION_SECONDS:-560}
SWEEP_ARGS=${SWEEP_ARGS:-}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-300}
TESTS_TIMEOUT=${TESTS_TIMEOUT:-180}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-150}
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# The tests and the sweep load the local build; nothing may wait on the (unreachable) Hub.
export HF_HUB_OFFLINE=1

mkdir -p "$OUT"
STAMP=$(mktemp)  # results newer than this are this session's
SUMMARY=()

note() { SUMMARY+=("$(printf '%-10s %-14s %5s  %s' "$1" "$2" "$3" "${4:-}")"); }

status_word() {
  case $1 in
    0) echo ok ;;
    124 | 137) echo TIMEOUT ;;
    *) echo "FAIL (rc $1)" ;;
  esac
}

seconds_left() { echo $((SESSION_SECONDS - SECONDS)); }

# A stage's commands get at most `limit` seconds and never more than the session has left.
bounded() {
  local limit=$1
  shift
  local left
  left=$(seconds_left)
  ((left < limit)) && limit=$left
  if ((limit <= 0)); then
    echo "no time left for: $*"
    return 124
  fi
  timeout --kill-after=10 "$limit" "$@"
}

install_wheels() {
  # The device image has no `kernels`; the lead carries it (and only it) as wheels in .whl/.
  compgen -G ".whl/*.whl" >/dev/null || { note setup ok "" "no .whl/ to install"; return; }
  local site
  site=$(mktemp -d)
  if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      .whl/*.whl; then
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    note setup ok "" "installed $(ls .whl/*.whl | wc -l) wheel(s) into $site"
  else
    note setup "FAIL" "" "pip install of .whl/*.whl failed; kernels may be missing"
  fi
}

stage_build() {
  # The image's default $CC/$CXX (/opt/gcc) link libstdc++ statically, which crashes next to torch's own
  # (tools/build.py refuses such a library); the system gcc links it dynamically.
  CC=gcc CXX=g++ bounded "$BUILD_TIMEOUT" "$PYTHON" tools/build.py
}

stage_tests() {
  bounded "$TESTS_TIMEOUT" "$PYTHON" -m pytest tests -q -rfE --maxfail=25 -p no:cacheprovider ${PYTEST_ARGS:-}
}

stage_sanitizer() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer not found (ROCm, or no CUDA toolkit): skipped"
    return 0
  fi
  local files=(tests/sanitizer_*.py) rc=0 f
  if [[ ! -e ${files[0]} ]]; then
    echo "no tests/sanitizer_*.py: skipped"
    return 0
  fi
  # Without the caching allocator every tensor is its own allocation, so memcheck sees a write past a
  # tensor's end instead of it landing silently in a neighbour inside the same cached segment.
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  # Each file is a script that exits non-zero on a wrong result; memcheck adds its own errors to the status.
  for f in "${files[@]}"; do
    echo "=== memcheck: $f"
    bounded "$SANITIZER_TIMEOUT" compute-sanitizer --tool memcheck --error-exitcode 1 "$PYTHON" "$f"
    local file_rc=$?
    echo "=== $f: $(status_word $file_rc)"
    ((file_rc != 0)) && rc=$file_rc
  done
  return $rc
}

stage_sweep() {
  # 25 s stay for archiving and the summary; the sweep stops starting cases 40 s before its own limit, time
  # for the case in flight and for writing the JSON, Markdown and plots.
  local limit=$(($(seconds_left) - 25))
  local args=$SWEEP_ARGS
  [[ $args == *--budget-seconds* ]] || args+=" --budget-seconds $((limit - 40))"
  if ((limit < 60)); then
    echo "only ${limit}s left: sweep skipped"
    return 124
  fi
  # shellcheck disable=SC2086  # SWEEP_ARGS is a list of words
  bounded "$limit" "$PYTHON" benchmarks/sweep.py $args
}

collect_sweep() {
  local dirs
  mapfile -t dirs < <(find benchmarks/results -name sweep.json -newer "$STAMP" -printf '%h\n' 2>/dev/null)
  if ((${#dirs[@]} == 0)); then
    echo "no sweep results written in this session"
    return
  fi
  tar -czf "$OUT/sweep-results.tar.gz" "${dirs[@]}"
  cp "${dirs[0]}/sweep.md" "$OUT/sweep.md"
  echo "sweep results: ${dirs[*]} -> $OUT/sweep-results.tar.gz"
}

install_wheels
for stage in $STAGES; do
  if ! declare -F "stage_$stage" >/dev/null; then
    note "$stage" "UNKNOWN" "" "not one of: build tests sanitizer sweep"
    continue
  fi
  start=$SECONDS
  echo "===== $stage ($(seconds_left)s of the session left)" | tee "$OUT/$stage.log"
  "stage_$stage" 2>&1 | tee -a "$OUT/$stage.log"
  rc=${PIPESTATUS[0]}
  note "$stage" "$(status_word "$rc")" "$((SECONDS - start))s" "$OUT/$stage.log"
done
[[ " $STAGES " == *" sweep "* ]] && collect_sweep | tee -a "$OUT/sweep.log"
rm -f "$STAMP"

{
  echo "===== gpu_session summary ($SECONDS s)"
  "$PYTHON" -c 'import torch; print("device:", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU",
    "| torch", torch.__version__, "| CUDA", torch.version.cuda, "| HIP", torch.version.hip)' 2>&1
  printf '%s\n' "${SUMMARY[@]}"
} | tee "$OUT/summary.txt"
