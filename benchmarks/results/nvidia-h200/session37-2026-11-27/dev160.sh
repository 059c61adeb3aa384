#!/usr/bin/env bash
# Session 37: the final tree (the H200 table of session 37 on 4c8b287). On an H200: the sweep, the decode step at 1/8/32 and the GEMM
# GPU tests. On an H100: the whole GPU test suite and the decode step.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/r; trap 'cd $OUT && tar czf results.tgz r' EXIT
SITE=${SITE:-$(mktemp -d)}
[ -d $SITE ] || { mkdir -p $SITE; python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .whl/*.whl || exit 1; }
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $OUT/r/gpu.txt; tail -1 $OUT/r/gpu.txt
if grep -q H200 $OUT/r/gpu.txt; then phases="build sweep decode tests-gemm"; else phases="build tests-all decode"; fi
for phase in $phases; do t=$(left); case $phase in
build) rm -rf build/_ext; CC=gcc CXX=g++ python3 tools/build.py > $OUT/r/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s" ;;
sweep) timeout 120 python3 benchmarks/sweep.py --suite skinny_gemm --gemm-shapes targets --out $OUT/r/sweep-targets > $OUT/r/sweep.log 2>&1
  echo "sweep rc=$? $(( $(date +%s) - T0 )) s"; head -1 $OUT/r/sweep.log ;;
decode) [ $t -lt 120 ] && { echo "skip decode"; continue; }
  timeout $(( t - 5 )) python3 benchmarks/decode_step.py --out $OUT/r/decode > $OUT/r/decode.log 2>&1
  echo "decode rc=$? $(( $(date +%s) - T0 )) s"; grep "^| *[0-9]" $OUT/r/decode/*.md 2>/dev/null | head -12; tail -2 $OUT/r/decode.log ;;
tests-gemm) [ $t -lt 50 ] && { echo "skip tests"; continue; }
  timeout $(( t - 5 )) python3 -m pytest -q -p no:cacheprovider tests/test_skinny_gemm_gpu.py > $OUT/r/tests-skinny.txt 2>&1
  echo "tests rc=$? $(( $(date +%s) - T0 )) s"; tail -2 $OUT/r/tests-skinny.txt ;;
tests-all) timeout 280 python3 -m pytest -q -p no:cacheprovider tests -k "not kernels_benchmark_cli" > $OUT/r/tests-all.txt 2>&1
  echo "tests rc=$? $(( $(date +%s) - T0 )) s"; tail -2 $OUT/r/tests-all.txt ;;
esac; done
echo "end $(( $(date +%s) - T0 )) s"
