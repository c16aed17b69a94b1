#!/usr/bin/env bash
# bench_serve_solo.sh [MODEL] [TOKENS] [REPS] - one request alone through
# `refusion serve` against `refusion generate` with the same model, settings
# and threads: the decoders' own wall_s, interleaved A B B A, REPS rounds.
# Prints every run, then the median of the per-round ratios serve / generate
# (1.0 = the server decodes a lone request as fast as the CLI). MODE=rolling
# uses the rolling slot (slots of SLOT tokens, default 8) instead of AR;
# THREADS=N (default 2) goes to both.
#
# The 0.6B shape in Q8_0 (a random model of Qwen3-0.6B's shape):
#   ./build/refusion init -o /tmp/sv-06b --preset 0.6b
#   ./build/refusion convert -m /tmp/sv-06b -o /tmp/sv-06b-q8.gguf --dtype q8_0
#   flock -x /tmp/rf-cpu.lock scripts/bench_serve_solo.sh /tmp/sv-06b-q8.gguf 48 5
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/refusion-demo}
TOKENS=${2:-48}
REPS=${3:-5}
THREADS=${THREADS:-2}
SLOT=${SLOT:-8}
BIN=./build/refusion
command -v jq >/dev/null || { echo "bench_serve_solo: jq is needed" >&2; exit 1; }
IDS=$(seq 100 130 | paste -sd,)
if [ "${MODE:-ar}" = rolling ]; then
  cli=(--rolling --slot-size "$SLOT"); req="\"mode\":\"refusion\",\"rolling\":true,\"slot_size\":$SLOT"
else
  cli=(--decoder ar); req='"mode":"ar"'
fi
PORT=$((20000 + $$ % 20000))
"$BIN" serve -m "$MODEL" --threads "$THREADS" --port "$PORT" -q &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf "localhost:$PORT/health" >/dev/null && break; sleep 0.2; done
gen() { "$BIN" generate -m "$MODEL" --ids "$IDS" -n "$TOKENS" "${cli[@]}" --threads "$THREADS" --ignore-eos --json 2>/dev/null | jq -r .wall_s; }
srv_run() {
  curl -sf "localhost:$PORT/v1/completions" \
    -d "{\"prompt\":[$IDS],\"max_tokens\":$TOKENS,$req,\"ignore_eos\":true,\"temperature\":0}" | jq -r .refusion.wall_s
}
srv_run >/dev/null # the server's first call pages the weights in; the CLI pays that in every run, outside its wall_s
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F), build $(git rev-parse --short HEAD 2>/dev/null), threads $THREADS, mode ${MODE:-ar}, $MODEL"
ratios=()
for r in $(seq "$REPS"); do
  a1=$(gen); b1=$(srv_run); b2=$(srv_run); a2=$(gen)
  ratio=$(echo "($b1 + $b2) / ($a1 + $a2)" | bc -l)
  printf 'round %d: generate %s %s  serve %s %s  serve/generate %.3f\n' "$r" "$a1" "$a2" "$b1" "$b2" "$ratio"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {printf "median serve/generate over %d rounds: %.3f (min %.3f, max %.3f)\n", NR, (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), a[1], a[NR]}'
