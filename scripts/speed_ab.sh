#!/usr/bin/env bash
# speed_ab.sh - ReFusion vs AR decoding speed as an interleaved A/B: the AR
# model decoded greedily and the headline ReFusion model with its headline
# settings (and, with RF_ARGS_C, a second ReFusion setting), evaluated
# alternately ROUNDS times on the same test examples (2 threads pinned), so
# that a slow minute of a shared or virtual machine hits all alike. Prints
# every round and the median, best and worst ratio.
#
#   bash scripts/speed_ab.sh [ROUNDS] [LIMIT]          # defaults 5, 300
#
# Models: the shipped demo pair (models/ar-demo, models/refusion-demo: the
# `ar` and `refusion-aux8f7` models of scripts/paper_table.sh), or AR_PATH /
# RF_PATH. Test set: DATA, made with the paper table's seed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
LIMIT=${2:-300}
BIN=${REFUSION_BIN:-build/refusion}
AR_PATH=${AR_PATH:-models/ar-demo}
RF_PATH=${RF_PATH:-models/refusion-demo}
DATA=${DATA:-runs/rvsa/data/test.json}
RF_ARGS=${RF_ARGS:---rolling --slot-size 4 --slot-threshold 0.5}
RF_ARGS_C=${RF_ARGS_C:-}
export OMP_PROC_BIND=${OMP_PROC_BIND:-true}
T=$(mktemp -d /tmp/rf_speed_ab.XXXXXX)
trap 'rm -rf "$T"' EXIT
[ -x "$BIN" ] || bash scripts/build.sh >&2
if [ ! -e "$DATA" ]; then # the paper table's task suite (scripts/paper_table.sh: seed 1, 40,000 / 300)
  "$BIN" tasks --seed 1 --train 40000 --test 300 -o "$(dirname "$DATA")" >/dev/null
fi
for f in "$AR_PATH/config.json" "$RF_PATH/config.json"; do
  [ -e "$f" ] || { echo "speed_ab: $f missing" >&2; exit 1; }
done
echo "# $(date -u +%F' '%H:%M) UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg); $LIMIT examples of $DATA, 2 threads, OMP_PROC_BIND=$OMP_PROC_BIND"
echo "# A: $BIN eval -m $AR_PATH --decoder ar"
echo "# B: $BIN eval -m $RF_PATH --decoder refusion $RF_ARGS"
[ -n "$RF_ARGS_C" ] && echo "# C: $BIN eval -m $RF_PATH --decoder refusion $RF_ARGS_C"
ev() { # NAME MODEL ARGS... -> tokens/s accuracy tokens/call
  local name=$1 model=$2
  shift 2
  "$BIN" eval -m "$model" --data "$DATA" --gen-length 128 --limit "$LIMIT" -t 2 "$@" \
    --quiet -o "$T/$name" >/dev/null 2>&1
  node -e 'const o = require(process.argv[1]).metrics.overall; console.log(o.tokens_per_s.toFixed(1), (100 * o.accuracy).toFixed(1), o.tokens_per_call.toFixed(2))' "$T/$name.json"
}
ratio() { node -e "console.log(($1 / $2).toFixed(3))"; }
ratios=() ratios_c=()
for r in $(seq 1 "$ROUNDS"); do
  read -r a acc_a _ < <(ev a "$AR_PATH" --decoder ar)
  # shellcheck disable=SC2086
  read -r b acc_b tpc_b < <(ev b "$RF_PATH" --decoder refusion $RF_ARGS)
  ratios+=("$(ratio "$b" "$a")")
  line="round $r: AR $a tokens/s ($acc_a%), ReFusion $b tokens/s ($acc_b%, $tpc_b tokens/call), ratio ${ratios[-1]}"
  if [ -n "$RF_ARGS_C" ]; then
    # shellcheck disable=SC2086
    read -r c acc_c tpc_c < <(ev c "$RF_PATH" --decoder refusion $RF_ARGS_C)
    ratios_c+=("$(ratio "$c" "$a")")
    line="$line; C $c tokens/s ($acc_c%, $tpc_c tokens/call), ratio ${ratios_c[-1]}"
  fi
  echo "$line"
done
summary() { # LABEL RATIOS...
  local label=$1
  shift
  printf '%s\n' "$@" | sort -n | awk -v l="$label" '{ v[NR] = $1 } END {
    printf "%s / AR: median %.3f, best %.3f, worst %.3f over %d rounds\n", l, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR], v[1], NR }'
}
summary "ReFusion (B)" "${ratios[@]}"
[ -n "$RF_ARGS_C" ] && summary "ReFusion (C)" "${ratios_c[@]}"
exit 0
