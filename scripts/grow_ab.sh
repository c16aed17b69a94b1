#!/usr/bin/env bash
# grow_ab.sh - ReFusion (rolling slot) vs AR decoding speed at real model
# shapes: the demo model grown (refusion grow, function preserving: same
# answers and calls) to the Qwen3-0.6B shape (and, with SHAPES="0.6b 8b",
# to 8B in Q4_0), then bench_decode_ab's ABBA A/B (A: AR, B: rolling slot,
# the same model) per dtype and thread count, with the cache-resident demo
# itself as the first row.
#
#   bash scripts/grow_ab.sh [LIMIT]            # default 300 test examples
#
# Environment: SLOTS ("4": the rolling slot sizes, i.e. draft lengths, to
# try; "4 8 16" shows where wider drafts pay at memory-bound shapes),
# POLICIES ("fixed"; "fixed adaptive" adds --draft-policy adaptive rows, where
# the slot size is the widest call), LOCK (a file: every A/B run holds it
# exclusively, e.g. /tmp/rf-cpu.lock on a shared machine), TXT (the results
# file, default $RESULTS/grow_ab.txt),
# PLAN (plan-and-infill rows, B = ReFusion's own decoder instead of the
# rolling slot: "" none; "default" its defaults, the authors' settings;
# "verified" the paper table's AR-verified decoder with jacobi infilling,
# scripts/paper_table.sh's FAST; "default verified" both; their answers may
# differ from AR's, which the rows say),
# SHAPES ("0.6b"; add 8b for the 8B Q4_0 row), DTYPES
# ("bf16 q8_0 q4_0"), THREADS ("1 2"), GEN (128), DATA (the paper table's
# test set, made when missing), RESULTS (results: grow_ab.txt and one JSON
# per run under grow_ab/), MODELS (runs/grow: the grown checkpoints, kept
# for the next run). Every line of grow_ab.txt names date, CPU, tier,
# threads and the command it came from.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-300}
SHAPES=${SHAPES:-0.6b}
DTYPES=${DTYPES:-bf16 q8_0 q4_0}
THREADS=${THREADS:-1 2}
GEN=${GEN:-128}
DATA=${DATA:-runs/grow/data/test.json}
RESULTS=${RESULTS:-results}
MODELS=${MODELS:-runs/grow}
BIN=${REFUSION_BIN:-build/refusion}
AB=$(dirname "$BIN")/bench_decode_ab
DEMO=models/refusion-demo
A_OPTS="--decoder ar -n $GEN"
SLOTS=${SLOTS-4}
POLICIES=${POLICIES:-fixed}
LOCK=${LOCK:-}
PLAN=${PLAN:-}
# the plan-and-infill settings PLAN names (label|options)
plan_opts() {
  case $1 in
    default) echo "--decoder refusion -n $GEN" ;;
    verified) echo "--decoder refusion --slot-size 8 --blocks 16 --slot-threshold 0.5 --token-threshold 0.5 --ar-verify both --jacobi -n $GEN" ;;
    *) echo "grow_ab.sh: PLAN: unknown setting '$1' (default, verified)" >&2; exit 2 ;;
  esac
}
for v in $PLAN; do plan_opts "$v" >/dev/null; done
export OMP_PROC_BIND=${OMP_PROC_BIND:-true}
[ -x "$BIN" ] && [ -x "$AB" ] || bash scripts/build.sh >&2
if [ ! -e "$DATA" ]; then # the paper table's test set (seed 1, 300): it depends only on --seed and --test
  "$BIN" tasks --seed 1 --train 1 --test 300 -o "$(dirname "$DATA")" >/dev/null
fi
mkdir -p "$RESULTS/grow_ab" "$MODELS"
TXT=${TXT:-$RESULTS/grow_ab.txt}
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
TIER=$("$BIN" info -m "$DEMO" | sed -n 's/^cpu tier *//p')

# the grown checkpoint of SHAPE in DTYPE (grown once, kept in $MODELS)
grown() {
  local shape=$1 dt=$2 out
  case $dt in bf16) out=$MODELS/demo-$shape-bf16 ;; *) out=$MODELS/demo-$shape-$dt.gguf ;; esac
  [ -e "$out" ] || "$BIN" grow -m "$DEMO" -o "$out" --preset "$shape" --dtype "$dt" >&2
  echo "$out"
}

{
  echo "# $(date -u +%F' '%H:%M) UTC; $CPU; tier $TIER; load $(cut -d' ' -f1-3 /proc/loadavg); $LIMIT examples of $DATA; OMP_PROC_BIND=$OMP_PROC_BIND"
  echo "# A: $A_OPTS   B: --rolling --slot-size S --slot-threshold 0.5 --draft-policy P -n $GEN, S in $SLOTS, P in $POLICIES${PLAN:+; plan-and-infill: $PLAN}   (bench_decode_ab, ABBA, the same model for A and B; time ratio B/A < 1 = ReFusion faster)"
} | tee "$TXT"
rows=("demo bf16 $DEMO")
for shape in $SHAPES; do
  if [ "$shape" = 8b ]; then rows+=("$shape q4_0 $(grown "$shape" q4_0)"); continue; fi
  for dt in $DTYPES; do rows+=("$shape $dt $(grown "$shape" "$dt")"); done
done
# the B sides (SLOTS="" leaves the rolling rows out): "label|file tag|options"
variants=()
for slot in $SLOTS; do
  for policy in $POLICIES; do
    variants+=("slot $slot $policy|s$slot-$policy|--rolling --slot-size $slot --slot-threshold 0.5 --draft-policy $policy -n $GEN")
  done
done
for v in $PLAN; do variants+=("plan-and-infill $v|plan-$v|$(plan_opts "$v")"); done
for row in "${rows[@]}"; do
  read -r shape dt model <<<"$row"
  for t in $THREADS; do
    for variant in "${variants[@]}"; do
      IFS='|' read -r label tag B_OPTS <<<"$variant"
      js=$RESULTS/grow_ab/${TIER%% *}-$shape-$dt-t$t-$tag.json
      cmd="$AB -m $model --data $DATA --limit $LIMIT --threads $t --a \"$A_OPTS\" --b \"$B_OPTS\" --json $js"
      # the measured call costs (adaptive) go to the results as a comment
      ${LOCK:+flock -x "$LOCK"} "$AB" -m "$model" --data "$DATA" --limit "$LIMIT" --threads "$t" --a "$A_OPTS" --b "$B_OPTS" --json "$js" |
        sed -n 's/^# B: call cost/# '"$shape $dt t$t $label"': call cost/p' | tee -a "$TXT"
      node -e '
const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")), [shape, dt, t, label, when, cpu, tier, cmd] = process.argv.slice(2);
const ar = d.a_tokens / d.a_total_s, rf = d.b_tokens / d.b_total_s;
console.log(`${shape} ${dt} t${t} ${label}: AR ${ar.toFixed(1)} tok/s, ${label.startsWith("plan") ? "ReFusion" : "rolling"} ${rf.toFixed(1)} tok/s, speed-up ${(1 / d.ratio_total).toFixed(3)}x ` +
  `(median per-example time ratio ${d.ratio_median.toFixed(3)} [${d.ratio_ci_lo.toFixed(3)}, ${d.ratio_ci_hi.toFixed(3)}]), ` +
  `${(d.b_tokens / d.b_calls).toFixed(2)} tokens/call, answers identical ${d.same}/${d.examples}; ${when}; ${cpu}; tier ${tier}; threads ${t}; ${cmd}`);
' "$js" "$shape" "$dt" "$t" "$label" "$(date -u +%F' '%H:%M)" "$CPU" "$TIER" "$cmd" | tee -a "$TXT"
    done
  done
done
