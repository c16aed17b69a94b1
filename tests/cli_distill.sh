#!/usr/bin/env bash
# cli_distill.sh - `refusion distill` on the demo model:
#  - every response of the distilled file is the model's greedy AR answer to
#    its query, as `refusion generate --decoder ar` gives it (same -n), and
#    not the input's response (the input's responses are replaced by a
#    sentence no model answers, so a copy of them cannot pass);
#  - the other fields of each record are kept; answers without an EOS are
#    dropped, or kept with --keep-truncated;
#  - bad options and files give exit status 1/2 and one "refusion: " line.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_distill
M=$SRC/models/refusion-demo
N=5

run tasks -o "$T/data" --seed 3 --train 8 --test 1
check '[ $rc -eq 0 ]' "tasks: $err"
# the input's responses: not what the model would answer
node -e '
const fs = require("fs"), d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
for (const e of d) e.response = "not an answer";
fs.writeFileSync(process.argv[2], JSON.stringify(d));' "$T/data/train.json" "$T/in.json"

run distill -m "$M" --data "$T/in.json" -o "$T/d.json" -n 96 --limit $N --threads 1 --quiet
check '[ $rc -eq 0 ] && [ -s "$T/d.json" ]' "distill: rc $rc $err"
check '[[ "$err" == *"of $N examples"* ]]' "summary line: $err"
n_kept=$(js "$T/d.json" 'console.log(d.length)')
check '[ "$n_kept" -ge 3 ] && [ "$n_kept" -le $N ]' "kept $n_kept of $N (the demo ends most answers within 96 tokens)"
r=$(js "$T/d.json" "const src = JSON.parse(require('fs').readFileSync('$T/data/train.json', 'utf8'));
  console.log(d.every(e => { const s = src.find(x => x.query === e.query);
    return s && e.family === s.family && JSON.stringify(e.answer) === JSON.stringify(s.answer) && e.response !== 'not an answer'; }))")
check '[ "$r" = true ]' "records keep their other fields: $(head -c 600 "$T/d.json")"

# got = `generate --decoder ar -n N`'s answer to record I's query of FILE, a
# JSON string ("no EOS" when it has none, unless CUT is 1); rc its status
ar_answer() { # FILE I N CUT
  local q
  q=$(js "$1" "console.log(d[$2].query)")
  run generate -m "$M" --decoder ar -n "$3" --threads 1 --json -p "$q"
  printf '%s' "$out" >"$T/g.json"
  got=$(js "$T/g.json" "console.log($4 || d.hit_eos ? JSON.stringify(d.text) : 'no EOS')")
}

# each response is generate --decoder ar's answer (the text, up to its EOS)
for i in $(seq 0 $((n_kept - 1))); do
  want=$(js "$T/d.json" "console.log(JSON.stringify(d[$i].response))")
  ar_answer "$T/d.json" "$i" 96 0
  check '[ $rc -eq 0 ] && [ "$got" = "$want" ]' "record $i: distill $want, generate --decoder ar $got"
done

# answers cut at --gen-length: dropped, or kept with --keep-truncated
run distill -m "$M" --data "$T/in.json" -o "$T/t0.json" -n 3 --limit 2 --quiet
check '[ $rc -eq 0 ] && [ "$(js "$T/t0.json" "console.log(d.length)")" = 0 ]' "-n 3: $err"
check '[[ "$err" == *"2 without an EOS dropped"* ]]' "-n 3 summary: $err"
run distill -m "$M" --data "$T/in.json" -o "$T/t1.json" -n 3 --limit 2 --quiet --keep-truncated
want=$(js "$T/t1.json" "console.log(d.length === 2 ? JSON.stringify(d[1].response) : 'count ' + d.length)")
ar_answer "$T/t1.json" 1 3 1
check '[ $rc -eq 0 ] && [ "$got" = "$want" ]' "--keep-truncated: distill $want, generate $got"

# ---- bad input -------------------------------------------------------------------------
printf 'not json' >"$T/bad.json"
printf '[{"query": "q"}]' >"$T/noresp.json"
expect_fail 2 "-m MODEL" distill --data "$T/in.json" -o "$T/x.json"
expect_fail 2 "--data" distill -m "$M" -o "$T/x.json"
expect_fail 2 "-o OUT" distill -m "$M" --data "$T/in.json"
expect_fail 2 "unknown option" distill -m "$M" --data "$T/in.json" -o "$T/x.json" --bogus
expect_fail 2 "-n expects" distill -m "$M" --data "$T/in.json" -o "$T/x.json" -n -1
expect_fail 2 "unexpected argument" distill -m "$M" --data "$T/in.json" -o "$T/x.json" extra
expect_fail 1 "nope.json" distill -m "$M" --data "$T/nope.json" -o "$T/x.json"
expect_fail 1 "bad.json" distill -m "$M" --data "$T/bad.json" -o "$T/x.json"
expect_fail 1 "response" distill -m "$M" --data "$T/noresp.json" -o "$T/x.json"
expect_fail 1 "nomodel" distill -m "$T/nomodel" --data "$T/in.json" -o "$T/x.json"
expect_fail 1 "/proc" distill -m "$M" --data "$T/in.json" --limit 1 --quiet -n 8 -o /proc/rf_no/x.json
check '[ ! -e "$T/x.json" ]' "a refused run wrote its output"

echo "cli_distill: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
