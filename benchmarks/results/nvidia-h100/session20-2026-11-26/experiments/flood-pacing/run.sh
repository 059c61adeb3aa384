#!/usr/bin/env bash
set -u
SITE=$(mktemp -d)  # .whl/: the kernels package and its wheels, installed outside the tree
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl 2>/dev/null
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
CC=gcc CXX=g++ python3 tools/build.py > "$SITE/build.log" 2>&1 || { grep -B2 -A8 -i "error" "$SITE/build.log" | head -60; exit 1; }
echo "build $((SECONDS-START)) s"
timeout $((570-SECONDS)) python3 benchmarks/decode_attribution.py --study env \
  --env "pace 50%:FP8DK_SKINNY_TMA_PACE=50" \
  --env "pace 100%:FP8DK_SKINNY_TMA_PACE=100" \
  --env "o pace 100%:o:FP8DK_SKINNY_TMA_PACE=100" \
  --batch 32 1 --rounds 2 --out $OUT/pace > $OUT/pace.log 2>&1
echo "env rc $? $((SECONDS-START)) s"; grep -B2 -A12 "^## batch" $OUT/pace/*.md | head -80; tail -3 $OUT/pace.log
