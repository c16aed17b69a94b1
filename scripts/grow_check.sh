#!/usr/bin/env bash
# grow_check.sh - the long check of function-preserving growth (too slow for
# CI): the demo model grown to the Qwen3-0.6B shape
#   1. in f32: logits of the README's prompts (prompt + 8 greedy steps) equal
#      the demo's within 1e-5 of the largest over the demo's vocabulary, the
#      extra 151,086 rows more than 100 below (avx2 kernels: f32 activations);
#   2. in bf16: greedy AR answers (ids) identical to the demo's on the 300
#      test examples of the paper table's test set, and the rolling slot's
#      answers and model calls identical too (bench_decode_ab, demo as A,
#      grown as B).
# Exits non-zero on any difference.
#
#   bash scripts/grow_check.sh [LIMIT]      # default 300 examples; SHAPE=1.7b etc. for another preset
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-300}
SHAPE=${SHAPE:-0.6b}
BIN=${REFUSION_BIN:-build/refusion}
AB=$(dirname "$BIN")/bench_decode_ab
DATA=${DATA:-runs/grow/data/test.json}
DEMO=models/refusion-demo
T=$(mktemp -d /tmp/rf_grow_check.XXXXXX)
trap 'rm -rf "$T"' EXIT
[ -x "$BIN" ] && [ -x "$AB" ] || bash scripts/build.sh >&2
if [ ! -e "$DATA" ]; then # the paper table's test set (seed 1, 300): it depends only on --seed and --test
  "$BIN" tasks --seed 1 --train 1 --test 300 -o "$(dirname "$DATA")" >/dev/null
fi
fail=0
echo "# $(date -u +%F' '%H:%M) UTC; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); demo grown to $SHAPE"

"$BIN" grow -m "$DEMO" -o "$T/f32" --preset "$SHAPE" --dtype f32
for p in "Write a Python function f(x) that does this: start from x, add 5, square it, then return its absolute value." \
  "Tom has 12 apples. He buys 7 more. How many apples does he have now?" \
  "Write a Python function f(x) that does this: start from x, add 4, then multiply by 2."; do
  ids=$("$BIN" tokenize -m "$DEMO" "$p" | tail -1)
  REFUSION_CPU=avx2 "$BIN" logits -m "$DEMO" --ids "$ids" -n 8 >"$T/a.json"
  OMP_NUM_THREADS=2 REFUSION_CPU=avx2 "$BIN" logits -m "$T/f32" --ids "$ids" -n 8 >"$T/b.json"
  node -e '
const a = require(process.argv[1]), b = require(process.argv[2]);
let md = 0, ma = 0, gap = Infinity;
a.logits.forEach((x, k) => {
  const y = b.logits[k];
  let lo = Infinity, hi = -Infinity;
  x.forEach((v, i) => { md = Math.max(md, Math.abs(v - y[i])); ma = Math.max(ma, Math.abs(v)); lo = Math.min(lo, y[i]); });
  for (let i = x.length; i < y.length; i++) hi = Math.max(hi, y[i]);
  gap = Math.min(gap, lo - hi);
});
const ok = md / ma <= 1e-5 && gap > 100 && JSON.stringify(a.greedy) === JSON.stringify(b.greedy);
console.log(`f32 logits: rel err ${(md / ma).toExponential(2)}, extra rows >= ${gap.toFixed(0)} below, greedy ${ok ? "same" : "DIFFERENT"}: ${ok ? "ok" : "FAIL"}`);
process.exit(ok ? 0 : 1);' "$T/a.json" "$T/b.json" || fail=1
done
rm -rf "$T/f32"

"$BIN" grow -m "$DEMO" -o "$T/bf16" --preset "$SHAPE"
for opts in "--decoder ar -n 128" "--rolling --slot-size 4 --slot-threshold 0.5 -n 128"; do
  "$AB" -m "$DEMO" --model-b "$T/bf16" --data "$DATA" --limit "$LIMIT" --threads 2 --a "$opts" --b "$opts" \
    --json "$T/ab.json" >/dev/null
  node -e '
const d = require(process.argv[1]), ok = d.same === d.examples && d.a_calls === d.b_calls && d.a_tokens === d.b_tokens;
console.log(`${process.argv[2]}: answers identical ${d.same}/${d.examples}, calls ${d.a_calls} (demo) vs ${d.b_calls} (grown): ${ok ? "ok" : "FAIL"}`);
process.exit(ok ? 0 : 1);' "$T/ab.json" "$opts" || fail=1
done
[ $fail = 0 ] && echo "grow_check: the grown $SHAPE model is the demo model" || echo "grow_check: FAILED"
exit $fail
