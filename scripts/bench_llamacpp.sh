#!/usr/bin/env bash
# bench_llamacpp.sh - AR decode speed of this engine and of llama.cpp on the
# same GGUF file with the same thread count, side by side in one run.
#
#   bash scripts/bench_llamacpp.sh [MODEL.gguf] [THREADS] [TOKENS]
#
# Without MODEL.gguf: a random model of the real Qwen3-0.6B shape is written
# by `refusion init --preset 0.6b` (with the demo model's tokenizer, which
# llama.cpp needs to load the file; the text is garbage, the speed is real)
# and converted to Q8_0 in $BENCH_DIR (default /tmp/rf-bench-llamacpp).
# llama.cpp is the prebuilt CPU build of the npm package node-llama-cpp
# (scripts/gguf/fetch_ref.sh). Both decode greedily one token per call after
# the same 8-token prompt; tokens/s counts the decoded tokens over the whole
# time (prefill of the short prompt included, for both).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${REFUSION_BIN:-$SRC/build/refusion}
MODEL=${1:-}
THREADS=${2:-2}
N=${3:-64}
DIR=${BENCH_DIR:-/tmp/rf-bench-llamacpp}
NPM=$(bash "$SRC/scripts/gguf/fetch_ref.sh")
if [ -z "$MODEL" ]; then
  MODEL=$DIR/qwen3-0.6b-random-q8_0.gguf
  if [ ! -f "$MODEL" ]; then
    mkdir -p "$DIR"
    "$BIN" init -o "$DIR/qwen3-0.6b-random" --preset 0.6b --dtype bf16 --tokenizer "$SRC/models/refusion-demo/tokenizer.json"
    "$BIN" convert -m "$DIR/qwen3-0.6b-random" -o "$MODEL" --dtype q8_0
    rm -rf "$DIR/qwen3-0.6b-random"
  fi
fi
IDS="845 117 115 312 10 32 51 324"
echo "# $(date -u +%F' '%H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# refusion: $("$BIN" info -m "$MODEL" | grep -E '^(dtype|cpu tier)' | tr -s ' ' | paste -sd';')"
echo "# model $MODEL ($(du -h "$MODEL" | cut -f1)), $THREADS threads, $N greedy tokens after ${IDS// /,}"
ours=$(OMP_NUM_THREADS=$THREADS "$BIN" generate -m "$MODEL" --ids "$IDS" --mode ar -n "$N" --json 2>/dev/null)
theirs=$(node "$SRC/scripts/gguf/llamacpp.mjs" bench "$NPM" "$MODEL" "$IDS" "$N" "$THREADS")
node -e '
  const o = JSON.parse(process.argv[1]), l = JSON.parse(process.argv[2]);
  const ours = o.tokens / o.wall_s;
  console.log(`refusion  (OMP_NUM_THREADS=${process.argv[3]} refusion generate --mode ar): ${o.tokens} tokens in ${o.wall_s.toFixed(2)} s = ${ours.toFixed(1)} tokens/s`);
  console.log(`llama.cpp (node-llama-cpp, threads ${process.argv[3]}):              ${l.tokens} tokens in ${(l.prompt_s + l.decode_s).toFixed(2)} s = ${l.total_tokens_per_s.toFixed(1)} tokens/s (decode only: ${l.tokens_per_s.toFixed(1)})`);
  console.log(`ratio refusion / llama.cpp: ${(ours / l.total_tokens_per_s).toFixed(2)}`);' "$ours" "$theirs" "$THREADS"
