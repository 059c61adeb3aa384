#!/usr/bin/env bash
# Prepared in session 36 for session 37 (clean tree at HEAD, 92be0e9 or later): the kernel alone under the first-refill
# rule (FIRST = the ring), against the old rule in the same run (FP8DK_SKINNY_TMA_FIRST=1 -> the window), on the
# issue's 56 targets; then the rest of the sanitizer set. Phases: build sweep sanitize.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/r; trap 'cd $OUT && tar czf results.tgz r' EXIT
SITE=${SITE:-$(mktemp -d)}
[ -d $SITE ] || { mkdir -p $SITE; python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .whl/*.whl || exit 1; }
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $OUT/r/gpu.txt
for phase in "$@"; do case $phase in
build) rm -rf build/_ext; CC=gcc CXX=g++ python3 tools/build.py > $OUT/r/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s" ;;
sweep)
  t=$(left); timeout $(( t < 200 ? t - 5 : 200 )) python3 benchmarks/sweep.py --suite skinny_gemm --gemm-shapes targets \
    --env-baseline FP8DK_SKINNY_TMA_FIRST=1 --out $OUT/r/sweep-targets > $OUT/r/sweep.log 2>&1
  echo "sweep rc=$? $(( $(date +%s) - T0 )) s"; tail -30 $OUT/r/sweep.log | cut -c1-200 ;;
sanitize)
  for tool in racecheck memcheck synccheck; do
    t=$(left); [ $t -lt 40 ] && { echo "skip $tool"; continue; }
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout $((t-5)) compute-sanitizer --tool $tool python3 tests/sanitizer_skinny_gemm.py Hopper \
      > $OUT/r/sanitizer-$tool.log 2>&1; echo "$tool rc=$? $(( $(date +%s) - T0 )) s"; grep -v "^=* *$" $OUT/r/sanitizer-$tool.log | tail -3
  done ;;
esac; done
echo "end $(( $(date +%s) - T0 )) s"
