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
#
#   PREFILL="64 256 512" bash scripts/bench_llamacpp.sh [MODEL.gguf] [THREADS]
#
# Prefill instead: a prompt of each length fed into an empty cache, by this
# engine (the Python binding, one session: rf_generate with one answer
# token, i.e. the prompt in chunks plus the last token's logits) and by
# llama.cpp (evaluateWithoutGeneratingNewTokens, batch 512), each process
# timing REPS (3) prefills and keeping its fastest (the first includes
# warm-up), ROUNDS (4) processes per engine in ABBA order; prints both
# tokens/s per round and the median of the per-round ratios with its range.
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
if [ -n "${PREFILL:-}" ]; then
  REPS=${REPS:-3}
  ROUNDS=${ROUNDS:-4}
  echo "# $(date -u +%F' '%H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# refusion: $("$BIN" info -m "$MODEL" | grep -E '^(dtype|cpu tier)' | tr -s ' ' | paste -sd';')"
  echo "# model $MODEL ($(du -h "$MODEL" | cut -f1)), $THREADS threads, prefill of an empty cache, best of $REPS per process, $ROUNDS rounds ABBA"
  LIB=$(dirname "$BIN")/librefusion.so.0
  ours() { # prompt ids -> fastest prefill in seconds
    OMP_NUM_THREADS=$THREADS PYTHONPATH="$SRC/python" python3 -c '
import sys, refusion
m = refusion.Model(sys.argv[1], lib=sys.argv[2])
s = m.session()
ids = [int(t) for t in sys.argv[3].split()]
best = 1e9
for _ in range(int(sys.argv[4])):
    s.generate(ids, method="ar", gen_length=1)
    best = min(best, s.stats["seconds"])
print(best)' "$MODEL" "$LIB" "$1" "$REPS"
  }
  theirs() {
    node "$SRC/scripts/gguf/llamacpp.mjs" prefill "$NPM" "$MODEL" "$1" "$REPS" "$THREADS" |
      node -e 'const j = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(Math.min(...j.seconds))'
  }
  for L in $PREFILL; do
    ids=$(seq 0 $((L - 1)) | awk '{ printf "%s%d", (NR > 1 ? " " : ""), ($1 * 37) % 800 + 10 }')
    ratios=()
    for r in $(seq 1 "$ROUNDS"); do
      if [ $((r % 2)) = 1 ]; then a=$(ours "$ids"); b=$(theirs "$ids"); else b=$(theirs "$ids"); a=$(ours "$ids"); fi
      ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
      awk -v L="$L" -v r="$r" -v a="$a" -v b="$b" 'BEGIN { printf "prefill %d round %d: refusion %.1f tokens/s, llama.cpp %.1f tokens/s, ratio %.2f\n", L, r, L / a, L / b, b / a }'
    done
    printf '%s\n' "${ratios[@]}" | sort -n | awk -v L="$L" '{ v[NR] = $1 } END {
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "prefill %d: refusion / llama.cpp tokens/s, median of %d rounds %.2f (range %.2f to %.2f)\n", L, NR, m, v[1], v[NR] }'
  done
  exit 0
fi
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
