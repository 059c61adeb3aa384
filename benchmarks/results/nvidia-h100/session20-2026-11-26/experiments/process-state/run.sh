#!/usr/bin/env bash
set -u
SITE=$(mktemp -d)  # .whl/: the kernels package and its wheels, installed outside the tree
python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl 2>/dev/null
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader
CC=gcc CXX=g++ python3 tools/build.py > "$SITE/build.log" 2>&1 || { grep -B2 -A8 -i "error" "$SITE/build.log" | head -60; exit 1; }
echo "build $((SECONDS-START)) s"
timeout 300 python3 benchmarks/results/nvidia-h100/session20-2026-11-26/experiments/process-state/${1:-first}.py 2>&1 | grep -v '^\[' | tail -30
echo "done $((SECONDS-START)) s"
