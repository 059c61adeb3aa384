#!/usr/bin/env bash
# Session 37 (tree 4c8b287's code). On an H200: is the routing of 405B's GEMMs above 20 tokens to torch._scaled_mm
# (session 18's step measurement) still right? The step at batch 32 and 24 with FP8DK_SKINNY_ROUTE=0 for every GEMM
# class and for each class alone. On an H100: the whole GPU test suite and the decode step.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/r; trap 'cd $OUT && tar czf results.tgz r' EXIT
SITE=${SITE:-$(mktemp -d)}
[ -d $SITE ] || { mkdir -p $SITE; python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .whl/*.whl || exit 1; }
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $OUT/r/gpu.txt; tail -1 $OUT/r/gpu.txt
if grep -q H200 $OUT/r/gpu.txt; then phases="build ${PHASES:-route32 route24}"; else phases="build tests-all decode"; fi
[ -d build/_ext ] && [ -n "$(ls build/torch* 2>/dev/null)" ] && phases=${phases#build }
for phase in $phases; do t=$(left); case $phase in
build) rm -rf build/_ext; CC=gcc CXX=g++ python3 tools/build.py > $OUT/r/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s" ;;
route32|route24|route16|route8)
  b=${phase#route}; [ $t -lt 80 ] && { echo "skip b$b"; continue; }
  extra=(--env "no route:FP8DK_SKINNY_ROUTE=0")
  if [ $b = 32 ] && [ -z "${PHASES:-}" ]; then for g in qkv o gate_up down; do extra+=(--env "no route $g:$g:FP8DK_SKINNY_ROUTE=0"); done; fi
  timeout $(( t - 5 )) python3 benchmarks/decode_attribution.py --study env --batch $b --rounds 1 --processes timing \
    "${extra[@]}" --env "again:FP8DK_UNUSED=1" --out $OUT/r/route-b$b > $OUT/r/route-b$b.log 2>&1
  echo "route b$b rc=$? $(( $(date +%s) - T0 )) s"; grep -A12 "^## batch" $OUT/r/route-b$b.log | grep "^| " ;;
decode) [ $t -lt 120 ] && { echo "skip decode"; continue; }
  timeout $(( t - 5 )) python3 benchmarks/decode_step.py --out $OUT/r/decode > $OUT/r/decode.log 2>&1
  echo "decode rc=$? $(( $(date +%s) - T0 )) s"; grep "^| *[0-9]" $OUT/r/decode/*.md 2>/dev/null | head -6 ;;
tests-all) timeout 280 python3 -m pytest -q -p no:cacheprovider tests -k "not kernels_benchmark_cli" > $OUT/r/tests-all.txt 2>&1
  echo "tests rc=$? $(( $(date +%s) - T0 )) s"; tail -2 $OUT/r/tests-all.txt ;;
esac; done
echo "end $(( $(date +%s) - T0 )) s"
