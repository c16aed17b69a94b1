#!/usr/bin/env bash
# bench_llamabench.sh - AR decode and prefill of this engine against
# llama.cpp's own llama-bench, built for this CPU from the source npm
# node-llama-cpp ships (scripts/gguf/build_llamacpp_native.sh), on the same
# GGUF file with the same threads, in interleaved rounds (A B B A ...).
#
#   bash scripts/bench_llamabench.sh MODEL.gguf [THREADS] [ROUNDS]
#
# Decode: llama-bench's tg64 (64 tokens, one per call, on an empty cache;
# `-p 0 -n 64 -r 1` per round, after its own warm-up run) against
# `refusion generate --mode ar -n 64 --ignore-eos` after an 8-token prompt
# (its wall_s counts that prompt's call too: a little against refusion).
# Prefill: llama-bench's pp512 (`-p 512 -n 0 -r 3`, the fastest
# repetition) against one refusion session's prefill of 512 tokens into an
# empty cache (the Python binding, the fastest of 3). Prints every round,
# then per test the median of the per-round ratios refusion / llama.cpp
# with their range. TESTS="tg64" (or "pp512") runs one of the two.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${REFUSION_BIN:-$SRC/build/refusion}
MODEL=${1:?usage: bench_llamabench.sh MODEL.gguf [THREADS] [ROUNDS]}
THREADS=${2:-2}
ROUNDS=${3:-4}
LB=$(bash "$SRC/scripts/gguf/build_llamacpp_native.sh")/llama-bench
IDS="845 117 115 312 10 32 51 324"
PRE=$(seq 0 511 | awk '{ printf "%s%d", (NR > 1 ? " " : ""), ($1 * 37) % 800 + 10 }')
LIB=$(dirname "$BIN")/librefusion.so.0
echo "# $(date -u +%F' '%H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# refusion $(git -C "$SRC" describe --always --dirty 2>/dev/null): $("$BIN" info -m "$MODEL" | grep -E '^(dtype|cpu tier)' | tr -s ' ' | paste -sd';')"
echo "# llama.cpp: $LB ($(git -C "$(dirname "$LB")/../../src" rev-parse --short HEAD 2>/dev/null), -march=native)"
echo "# model $MODEL ($(du -h "$MODEL" | cut -f1)), $THREADS threads, $ROUNDS rounds ABBA"
lb() { # llama-bench options -> the fastest repetition's tokens/s
  "$LB" -m "$MODEL" -t "$THREADS" -o json "$@" 2>/dev/null |
    python3 -c 'import json, sys; print(max(json.load(sys.stdin)[0]["samples_ts"]))'
}
ours_tg() {
  OMP_NUM_THREADS=$THREADS "$BIN" generate -m "$MODEL" --ids "$IDS" --mode ar -n 64 --ignore-eos --threads "$THREADS" --json 2>/dev/null |
    python3 -c 'import json, sys; o = json.load(sys.stdin); print(o["tokens"] / o["wall_s"])'
}
ours_pp() {
  OMP_NUM_THREADS=$THREADS PYTHONPATH="$SRC/python" python3 -c '
import sys, refusion
m = refusion.Model(sys.argv[1], lib=sys.argv[2])
s = m.session()
ids = [int(t) for t in sys.argv[3].split()]
best = 1e9
for _ in range(3):
    s.generate(ids, method="ar", gen_length=1)
    best = min(best, s.stats["seconds"])
print(len(ids) / best)' "$MODEL" "$LIB" "$PRE"
}
summary() { # name, ratios...
  local name=$1
  shift
  printf '%s\n' "$@" | sort -n | awk -v t="$name" '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s: refusion / llama.cpp tokens/s, median of %d rounds %.2f (range %.2f to %.2f)\n", t, NR, m, v[1], v[NR] }'
}
TESTS=${TESTS:-tg64 pp512}
for t in $TESTS; do
  case $t in tg64 | pp512) ;; *) echo "bench_llamabench.sh: TESTS takes tg64 and pp512 (got '$t')" >&2; exit 2 ;; esac
  ratios=()
  for r in $(seq 1 "$ROUNDS"); do
    if [ $t = tg64 ]; then A=ours_tg B="lb -p 0 -n 64 -r 1"; else A=ours_pp B="lb -p 512 -n 0 -r 3"; fi
    if [ $((r % 2)) = 1 ]; then a=$($A); b=$($B); else b=$($B); a=$($A); fi
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')")
    awk -v t=$t -v r="$r" -v a="$a" -v b="$b" 'BEGIN { printf "%s round %d: refusion %.1f tokens/s, llama-bench %.1f tokens/s, ratio %.2f\n", t, r, a, b, a / b }'
  done
  summary $t "${ratios[@]}"
done
