#!/usr/bin/env bash
# cli_probe.sh - `refusion probe` end to end on a random model with a
# tokenizer trained on the task suite (the numbers themselves are checked
# against a naive computation in tasks_probe.c; this checks the program):
#  - the Markdown table has the 3 heads x (3 classes + all) rows;
#  - --json: every view predicts every answer token once (same n), one
#    "answer start" per example, the classes add up to "all";
#  - with a slot larger than every answer, the mask head slot by slot IS the
#    whole-answer-masked view: same numbers; with any slot size the answer
#    start is the same position seen the same way by both mask views;
#  - --json FILE writes the file and still prints the table;
#  - --decode prints the decoder table and the acceptance table, and the
#    acceptance counts in the JSON add up to the committed tokens;
#  - bad options and files give exit status 1/2 and one "refusion: " line.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_probe

run tasks -o "$T/data" --seed 5 --train 200 --test 6
check '[ $rc -eq 0 ]' "tasks: $err"
run tokenizer-train --input "$T/data/train.json" --vocab 400 -o "$T/tok"
check '[ $rc -eq 0 ]' "tokenizer-train: $err"
run init -o "$T/m" --preset tiny --tokenizer "$T/tok/tokenizer.json" --dtype f32 --seed 4 --std 0.5
check '[ $rc -eq 0 ]' "init: $err"
P=(probe -m "$T/m" --data "$T/data/test.json" --threads 1 --quiet)

# ---- the table -------------------------------------------------------------------
run "${P[@]}" --slot-size 4 --limit 4
check '[ $rc -eq 0 ] && [ $(grep -c "^| AR head\|^| mask head" "$T/out") -eq 12 ]' "table: rc $rc $err $out"
check 'grep -q "(4 examples), slot size 4" "$T/out"' "header: $out"

# ---- JSON on stdout: counts ------------------------------------------------------------
run "${P[@]}" --slot-size 4 --limit 4 --json
check '[ $rc -eq 0 ]' "--json: $err"
printf '%s' "$out" >"$T/p4.json"
r=$(js "$T/p4.json" "const v = d.probe.views, names = ['ar', 'mask_slot', 'mask_all'];
  const n = names.map(k => v[k].all.n), sum = names.map(k => v[k].start.n + v[k].slot.n + v[k].later.n);
  console.log(d.probe.examples === 4 && d.probe.slot_size === 4 && n[0] > 20 && n.every(x => x === n[0]) &&
    sum.every(x => x === n[0]) && names.every(k => v[k].start.n === 4) &&
    Math.abs(v.mask_slot.start.ce - v.mask_all.start.ce) < 1e-4)")
check '[ "$r" = true ]' "json counts: $(cat "$T/p4.json")"

# a slot longer than every answer: slot by slot == whole answer masked
run "${P[@]}" --slot-size 4000 --limit 4 --json
printf '%s' "$out" >"$T/pbig.json"
r=$(js "$T/pbig.json" "const a = d.probe.views.mask_slot.all, b = d.probe.views.mask_all.all;
  console.log(a.n === b.n && Math.abs(a.ce - b.ce) < 1e-4 && Math.abs(a.prob - b.prob) < 1e-5 && a.acc === b.acc &&
    d.probe.views.ar.slot.n === 0)")
check '[ "$r" = true ]' "slot 4000: mask/slot != mask/all: $(cat "$T/pbig.json")"
# the AR head does not depend on the slot size
r=$(node -e "const f = p => JSON.parse(require('fs').readFileSync(p, 'utf8')).probe.views.ar.all;
  const a = f(process.argv[1]), b = f(process.argv[2]);
  console.log(a.n === b.n && Math.abs(a.ce - b.ce) < 1e-9)" "$T/p4.json" "$T/pbig.json")
check '[ "$r" = true ]' "the AR head changed with the slot size"

# ---- --json FILE + --decode --------------------------------------------------------------
run "${P[@]}" --slot-size 4 --limit 3 --json "$T/dec.json" --decode --gen-length 24 --blocks 2
check '[ $rc -eq 0 ] && [ -s "$T/dec.json" ] && grep -q "^| AR head" "$T/out"' "--json FILE: rc $rc $err"
check 'grep -q "How the committed tokens got in" "$T/out" && grep -q "| overall  |    3 |" "$T/out"' \
  "--decode tables: $out"
r=$(js "$T/dec.json" "const o = d.decode.metrics.overall, a = o.accept;
  const s = a.first_free + a.first_checked + a.first_replaced + a.verified + a.forced_draft + a.forced_ar;
  console.log(o.n === 3 && o.tokens > 0 && s === o.tokens && d.decode.settings.slot_size === 4)")
check '[ "$r" = true ]' "--decode: acceptance counts do not add up to the tokens: $(cat "$T/dec.json")"

# AR-verified (both switches): the other acceptance counts, same sum
run "${P[@]}" --slot-size 4 --limit 3 --json --decode --gen-length 24 --blocks 2 --ar-verify both
printf '%s' "$out" >"$T/ver.json"
r=$(js "$T/ver.json" "const o = d.decode.metrics.overall, a = o.accept;
  const s = a.first_free + a.first_checked + a.first_replaced + a.verified + a.forced_draft + a.forced_ar;
  console.log(o.tokens > 0 && s === o.tokens && a.forced_draft === 0 && d.decode.settings.ar_verify === 'both')")
check '[ "$r" = true ]' "--decode --ar-verify both: acceptance counts: $(cat "$T/ver.json")"

# ---- bad input -------------------------------------------------------------------------
expect_fail 2 "required" probe --data "$T/data/test.json"
expect_fail 2 "--slot-size" probe -m "$T/m" --data "$T/data/test.json" --slot-size 0
expect_fail 2 "unknown option" probe -m "$T/m" --data "$T/data/test.json" --bogus 1
expect_fail 2 "decoder" probe -m "$T/m" --data "$T/data/test.json" --decoder mdm
expect_fail 1 "nope.json" probe -m "$T/m" --data "$T/nope.json"
expect_fail 1 "config.json" probe -m "$T/nomodel" --data "$T/data/test.json"
expect_fail 1 "/proc" probe -m "$T/m" --data "$T/data/test.json" --limit 1 --quiet --json /proc/rf_no/x.json

echo "cli_probe: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
