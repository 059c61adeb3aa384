#!/usr/bin/env bash
set -u
SITE=$(mktemp -d)  # .whl/: the kernels package and its wheels, installed outside the tree
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl 2>/dev/null
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
CC=gcc CXX=g++ python3 tools/build.py > "$SITE/build.log" 2>&1 || { grep -B2 -A8 -i "error" "$SITE/build.log" | head -60; exit 1; }
echo "build $((SECONDS-START)) s"
for first in torch ours torch ours; do timeout 150 python3 benchmarks/results/nvidia-h100/session20-2026-11-26/experiments/process-state/order.py $first 2>&1 | grep ' first |'; echo "t $((SECONDS-START)) s"; [ $((SECONDS-START)) -gt 330 ] && break; done
