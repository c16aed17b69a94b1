#!/usr/bin/env bash
# speed_ab.sh - ReFusion vs AR decoding speed as an interleaved A/B: the AR
# model decoded greedily and the headline ReFusion model with its headline
# settings, evaluated alternately ROUNDS times on the same test examples
# (2 threads pinned), so that a slow minute of a shared or virtual machine
# hits both alike. Prints every round and the median and best ratio.
#
#   OUT=runs/rvsa bash scripts/speed_ab.sh [ROUNDS] [LIMIT]     # defaults 5, 300
#
# Needs the paper-table run's models ($OUT/bf16/{ar,refusion-aux8f7}) and
# test set ($OUT/data/test.json); scripts/paper_table.sh makes them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/rvsa}
ROUNDS=${1:-5}
LIMIT=${2:-300}
BIN=${REFUSION_BIN:-build/refusion}
AR_MODEL=${AR_MODEL:-ar}
RF_MODEL=${RF_MODEL:-refusion-aux8f7}
RF_ARGS=${RF_ARGS:---slot-size 8 --blocks 16 --slot-threshold 0.5 --token-threshold 0.5 --ar-verify both --jacobi}
export OMP_PROC_BIND=${OMP_PROC_BIND:-true}
T=$(mktemp -d /tmp/rf_speed_ab.XXXXXX)
trap 'rm -rf "$T"' EXIT
for f in "$OUT/bf16/$AR_MODEL/config.json" "$OUT/bf16/$RF_MODEL/config.json" "$OUT/data/test.json"; do
  [ -e "$f" ] || { echo "speed_ab: $f missing (run scripts/paper_table.sh first)" >&2; exit 1; }
done
echo "# $(date -u +%F' '%H:%M) UTC, load $(cut -d' ' -f1-3 /proc/loadavg); $LIMIT examples, 2 threads, OMP_PROC_BIND=$OMP_PROC_BIND"
echo "# A: $BIN eval -m $OUT/bf16/$AR_MODEL --decoder ar"
echo "# B: $BIN eval -m $OUT/bf16/$RF_MODEL --decoder refusion $RF_ARGS"
ev() { # NAME MODEL ARGS... -> tokens/s accuracy
  local name=$1 model=$2
  shift 2
  "$BIN" eval -m "$OUT/bf16/$model" --data "$OUT/data/test.json" --gen-length 128 --limit "$LIMIT" -t 2 "$@" \
    --quiet -o "$T/$name" >/dev/null 2>&1
  node -e 'const o = require(process.argv[1]).metrics.overall; console.log(o.tokens_per_s.toFixed(1), (100 * o.accuracy).toFixed(1))' "$T/$name.json"
}
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  read -r a acc_a < <(ev a "$AR_MODEL" --decoder ar)
  # shellcheck disable=SC2086
  read -r b acc_b < <(ev b "$RF_MODEL" --decoder refusion $RF_ARGS)
  ratio=$(node -e "console.log(($b / $a).toFixed(3))")
  ratios+=("$ratio")
  echo "round $r: AR $a tokens/s ($acc_a%), ReFusion $b tokens/s ($acc_b%), ratio $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  printf "ReFusion / AR: median %.3f, best %.3f, worst %.3f over %d rounds\n", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR], v[1], NR }'
