#!/usr/bin/env bash
set -u
SITE=$(mktemp -d)  # .whl/: the kernels package and its wheels, installed outside the tree
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl 2>/dev/null
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
git log --oneline -1
CC=gcc CXX=g++ python3 tools/build.py > "$SITE/build.log" 2>&1 || { grep -B2 -A8 -i "error" "$SITE/build.log" | head -60; exit 1; }
echo "build $((SECONDS-START)) s"
timeout 420 python3 benchmarks/decode_attribution.py --study env \
  --env "trigger after loads:FP8DK_RMSNORM_TRIGGER=1" \
  --env "trigger after row sum:FP8DK_RMSNORM_TRIGGER=2" \
  --env "trigger at exit:FP8DK_RMSNORM_TRIGGER=3" \
  --batch 32 1 --rounds 2 --out $OUT/trig > $OUT/trig.log 2>&1
echo "env rc $? $((SECONDS-START)) s"; grep -B2 -A12 "^## batch" $OUT/trig/*.md | head -80; tail -3 $OUT/trig.log
