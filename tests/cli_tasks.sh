#!/usr/bin/env bash
# cli_tasks.sh - `refusion tasks` and `refusion eval` end to end:
#  - the suite is byte-identical for a seed, its test set does not change
#    with the training size, and no test query is in the training set;
#  - eval --answers scores the reference responses 100% and corrupted ones
#    lower, writing NAME.md and NAME.json;
#  - eval --json prints the report (= NAME.json) on stdout, parsed by node;
#  - eval's progress line (done/total, accuracy, tok/s): one line per tenth
#    when stderr is not a terminal, throttled redraws on a terminal (through
#    script(1)), nothing with --quiet;
#  - eval runs all three decoders on a random model with a tokenizer trained
#    on the training split, and its counts add up (MDM: one call per step);
#  - bad options and files give exit status 1/2 and one "refusion: " line.
# JSON is inspected with node (a declared dependency).
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_tasks

# ---- the suite ---------------------------------------------------------------------
run tasks -o "$T/a" --seed 3 --train 600 --test 90
check '[ $rc -eq 0 ] && [ -s "$T/a/train.json" ] && [ -s "$T/a/test.json" ]' "tasks: rc $rc $err"
run tasks -o "$T/b" --seed 3 --train 600 --test 90
check 'cmp -s "$T/a/train.json" "$T/b/train.json" && cmp -s "$T/a/test.json" "$T/b/test.json"' \
  "same seed, different files"
run tasks -o "$T/c" --seed 3 --train 200 --test 90
check 'cmp -s "$T/a/test.json" "$T/c/test.json"' "test set changed with the training size"
run tasks -o "$T/d" --seed 4 --train 200 --test 90
check '! cmp -s "$T/a/test.json" "$T/d/test.json"' "another seed gave the same test set"
n=$(js "$T/a/train.json" "console.log(d.length)")
check '[ "$n" = 600 ]' "train has $n examples"
overlap=$(node -e "
const fs = require('fs');
const tr = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
const te = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const q = new Set(tr.map(e => e.query));
console.log(te.filter(e => q.has(e.query)).length)" "$T/a/train.json" "$T/a/test.json")
check '[ "$overlap" = 0 ]' "$overlap test queries are in the training set"
fams=$(js "$T/a/test.json" "console.log([...new Set(d.map(e => e.family))].sort().join(','))")
check '[ "$fams" = "arith,func,json" ]' "families in the test set: $fams"
run tasks --show 1
check '[ $rc -eq 0 ] && [ $(grep -c "^--- " "$T/out") -eq 3 ]' "--show: $out"
run tasks -o "$T/e" --families json --train 10 --test 5
fams=$(js "$T/e/test.json" "console.log([...new Set(d.map(e => e.family))].join(','))")
check '[ "$fams" = json ]' "--families json gave $fams"

expect_fail 2 "foo" tasks --families arith,foo
expect_fail 2 "repeated" tasks --families json,json
expect_fail 2 "--train" tasks --train x
expect_fail 2 "unknown option" tasks --bogus 1
expect_fail 1 "/proc" tasks -o /proc/rf_no/such

# ---- eval --answers: the checkers through the CLI -----------------------------------
node -e "
const fs = require('fs');
const d = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
fs.writeFileSync(process.argv[2], JSON.stringify(d.map(e => e.response)));
fs.writeFileSync(process.argv[3], JSON.stringify(d.map((e, i) => i % 2 ? e.response : e.response.slice(0, -2))));
" "$T/a/test.json" "$T/right.json" "$T/half.json"
run eval --data "$T/a/test.json" --answers "$T/right.json" -o "$T/res/right" --quiet
check '[ $rc -eq 0 ] && [ -s "$T/res/right.md" ] && [ -s "$T/res/right.json" ]' "eval --answers: rc $rc $err"
acc=$(js "$T/res/right.json" "console.log(d.metrics.overall.accuracy)")
check '[ "$acc" = 1 ]' "reference responses scored $acc"
check 'grep -q "| overall  |   90 |   100.0% |" "$T/res/right.md"' "markdown table: $(cat "$T/res/right.md")"
run eval --data "$T/a/test.json" --answers "$T/half.json" -o "$T/res/half" --quiet
acc=$(js "$T/res/half.json" "console.log(d.metrics.overall.right)")
check '[ "$acc" = 45 ]' "half-truncated answers: $acc right (want 45)"
expect_fail 1 "answers" eval --data "$T/a/test.json" --answers "$T/a/test.json" -o "$T/res/x" --quiet

# ---- eval's progress line: a line per tenth off a terminal, redraws throttled on one, none with --quiet
run eval --data "$T/a/test.json" --answers "$T/half.json" -o "$T/res/half"
lines=$(grep -c '^eval: \[[#.]*\] [0-9]*/90  acc [0-9.]*%  [0-9]* tok/s' "$T/err")
check '[ $rc -eq 0 ] && [ "$lines" = 10 ] && grep -q "^eval: \[#\{30\}\] 90/90  acc 50.0%" "$T/err"' \
  "eval progress off a terminal: $lines lines (want 10, one per tenth): $err"
check '[ "$(grep -c "9/90 " "$T/err")" = 1 ]' "eval progress: no line at the first tenth (9/90): $err"
run eval --data "$T/a/test.json" --answers "$T/half.json" -o "$T/res/half" --quiet
check '[ $rc -eq 0 ] && ! grep -q "eval:" "$T/err"' "eval --quiet printed progress: $err"
# on a terminal (script(1)'s pseudo-terminal): redrawn in place, at most 4 times a second
timeout 60 script -qfec "exec $BIN eval --data $T/a/test.json --answers $T/half.json -o $T/res/tty" /dev/null \
  </dev/null >"$T/tty.out" 2>&1
draws=$(tr '\r' '\n' <"$T/tty.out" | grep -c '^eval: \[')
check '[ "$draws" -ge 2 ] && [ "$draws" -le 8 ] && grep -q "90/90  acc 50.0%" "$T/tty.out"' \
  "eval progress on a terminal: $draws redraws for 90 instant examples (want 2-8): $(tr '\r' '|' <"$T/tty.out" | head -c 600)"

# ---- eval with a model: random weights, tokenizer from the training split -----------
run tokenizer-train --input "$T/a/train.json" --vocab 400 -o "$T/tok"
check '[ $rc -eq 0 ] && [ -s "$T/tok/tokenizer.json" ]' "tokenizer-train: $err"
run init -o "$T/m" --preset tiny --tokenizer "$T/tok/tokenizer.json" --dtype f32 --seed 2
check '[ $rc -eq 0 ]' "init: $err"
for dec in refusion ar mdm; do
  run eval -m "$T/m" --data "$T/a/test.json" --decoder $dec --limit 3 --gen-length 24 \
    --slot-size 4 --blocks 2 --steps 8 --no-early-stop -o "$T/res/$dec"
  check '[ $rc -eq 0 ] && [ -s "$T/res/$dec.md" ] && grep -q "| overall  |    3 |" "$T/out"' \
    "eval $dec: rc $rc $err $out"
  check 'grep -q "3/3" "$T/err"' "eval $dec: no progress bar on stderr: $err"
  n=$(js "$T/res/$dec.json" "console.log(d.examples.length + ' ' + d.metrics.overall.n + ' ' + d.decoder)")
  check '[ "$n" = "3 3 $dec" ]' "eval $dec: report says $n"
  # tokens and calls of the examples add up to the overall figures
  sums=$(js "$T/res/$dec.json" "const o = d.metrics.overall;
    const t = d.examples.reduce((a, e) => a + e.tokens, 0), c = d.examples.reduce((a, e) => a + e.calls, 0);
    console.log(t === o.tokens && c === o.calls && t > 0 && Math.abs(o.tokens_per_call - t / c) < 1e-6)")
  check '[ "$sums" = true ]' "eval $dec: per-example counts do not add up"
done
# --json: the report on stdout instead of the table, the same as NAME.json
run eval -m "$T/m" --data "$T/a/test.json" --decoder ar --limit 3 --gen-length 24 --json --quiet -o "$T/res/arj"
same=$(node -e "
const fs = require('fs'), d = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
const f = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
console.log(JSON.stringify(d) === JSON.stringify(f) && d.decoder === 'ar' && d.metrics.overall.n === 3 &&
  d.examples.length === 3 && d.metrics.overall.tokens_per_s > 0)" "$T/out" "$T/res/arj.json" 2>&1)
check '[ $rc -eq 0 ] && [ "$same" = true ] && ! grep -q "| overall" "$T/out"' "eval --json: rc $rc, $same, $err"
calls=$(js "$T/res/mdm.json" "console.log(d.examples.map(e => e.calls).join(','))")
check '[ "$calls" = "8,8,8" ]' "mdm without early stop: calls $calls (want one per step)"
tpc=$(js "$T/res/ar.json" "console.log(d.metrics.overall.tokens_per_call)")
check '[ "$tpc" = 1 ]' "ar: $tpc tokens per call"

expect_fail 2 "decoder" eval -m "$T/m" --data "$T/a/test.json" --decoder bogus
expect_fail 2 "required" eval --data "$T/a/test.json"
expect_fail 1 "nope.json" eval -m "$T/m" --data "$T/nope.json"
expect_fail 1 "config.json" eval -m "$T/nomodel" --data "$T/a/test.json"
expect_fail 1 "context" eval -m "$T/m" --data "$T/a/test.json" --gen-length 5000 --quiet -o "$T/res/y"
expect_fail 1 "steps" eval -m "$T/m" --data "$T/a/test.json" --decoder mdm --gen-length 16 --blocks 4 --steps 2 --quiet -o "$T/res/y"

echo "cli_tasks: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
