#!/usr/bin/env bash
# Set up .venv, build the variant for the installed torch, run tools/demo.py (kernelized tiny Llama + op timings).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
.venv/bin/python tools/build.py
.venv/bin/python tools/demo.py
