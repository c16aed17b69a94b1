#!/usr/bin/env bash
# run_golden.sh - the one command run on the device machine (see README.md):
#   bash scripts/device/run_golden.sh
# with .deps/golden, .deps/refusion_ref and the npm Qwen3 tokenizer carried.
# Writes forward.json/.bin, tokenizer.json, decode.json, summary.json and
# log.txt to $OUT.
set -uo pipefail
OUT=${OUT:?OUT not set}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -c 'import sys, torch, transformers, tokenizers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)' 2>&1 | tee "$OUT/log.txt"
python3 scripts/device/golden.py --out "$OUT" --threads 8 "$@" 2>&1 | tee -a "$OUT/log.txt"
