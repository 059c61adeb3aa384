#!/usr/bin/env bash
# Session 37: experiment FP8DK_EXP_O_PREFETCH (bytes of each o weight row brought into L2 by skinny_gemm_prefetch,
# launched with PDL after qkv). Phases: build step32 step1 step8.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p $OUT/r; trap 'cd $OUT && tar czf results.tgz r' EXIT
SITE=${SITE:-$(mktemp -d)}
[ -d $SITE ] || { mkdir -p $SITE; python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .whl/*.whl || exit 1; }
export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $OUT/r/gpu.txt
for phase in "$@"; do case $phase in
build) rm -rf build/_ext; CC=gcc CXX=g++ python3 tools/build.py > $OUT/r/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s"; tail -3 $OUT/r/build.log
  du -sh build/torch* ; tar czf $OUT/built.tgz build/torch*; ls -la $OUT/built.tgz ;;
step32|step1|step8)
  b=${phase#step}; t=$(left); [ $t -lt 100 ] && { echo "skip b$b"; continue; }
  if [ $b = 32 ]; then sizes="512 1280 2048"; else sizes="1024 2048"; fi
  extra=(); for n in $sizes; do extra+=(--env "o pf $n:FP8DK_EXP_O_PREFETCH=$n"); done
  timeout $(( t - 5 )) python3 benchmarks/decode_attribution.py --study env --batch $b --rounds 1 --processes timing \
    "${extra[@]}" --env "again:FP8DK_UNUSED=1" --out $OUT/r/step-b$b > $OUT/r/step-b$b.log 2>&1
  echo "step b$b rc=$? $(( $(date +%s) - T0 )) s"; grep -A12 "^## batch" $OUT/r/step-b$b.log | grep "^| "; grep -c EXPERIMENT $OUT/r/step-b$b.log ;;
esac; done
echo "end $(( $(date +%s) - T0 )) s"
