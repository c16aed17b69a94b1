#!/usr/bin/env bash
# tasks_paper_cli.sh - `refusion eval --task NAME` end to end:
#  - --answers on every fixture (tests/data/paper_tasks) gives the scores
#    worked out by hand (see tests/tasks_paper_score.c), in lm-eval's shape,
#    with a sample line per record;
#  - the task's preset is the default, --preset and explicit options override
#    it in any order;
#  - the demo model over every fixture: the report's shape and counts (its
#    scores mean nothing on a 3.4M model), and --table over the seven runs;
#  - a run killed mid-way (and its last line cut short) resumes with
#    --resume and ends with the samples of an uninterrupted run;
#  - bad options and files: one "refusion: " line and exit status 1 or 2.
# JSON is inspected with node (a declared dependency).
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup tasks_paper_cli
F=$SRC/tests/data/paper_tasks
DEMO=$SRC/models/refusion-demo

# ---- --answers: the hand-computed scores -----------------------------------------------
# task data-file-stem metric=value ...
while read -r task stem expect; do
  run eval --task "$task" --data "$F/$stem.jsonl" --answers "$F/$stem.answers.jsonl" -o "$T/ans-$task" --quiet
  check '[ $rc -eq 0 ] && [ -s "$T/ans-$task.json" ] && [ -s "$T/ans-$task.md" ]' "answers $task: rc $rc $err"
  for kv in $expect; do
    m=${kv%=*} v=${kv#*=}
    got=$(js "$T/ans-$task.json" "console.log(d.results['$task']['$m'])")
    check '[ "$got" = "$v" ]' "answers $task $m: $got, want $v"
  done
  lines=$(wc -l <"$T/ans-$task.samples.jsonl")
  recs=$(grep -c . "$F/$stem.jsonl")
  check '[ "$lines" = "$recs" ]' "answers $task: $lines sample lines for $recs records"
done <<'EOF'
gsm8k gsm8k exact_match,flexible-extract=0.6 exact_match,strict-match=0.4
math math exact_match,boxed=0.4 exact_match,minerva=0.2
humaneval humaneval pass@1,create_test=0.5
mbpp mbpp pass_at_1,none=0.33333333
arc-c arc exact_match,remove_whitespace=0.6
mmlu-pro mmlu_pro exact_match,custom-extract=0.5
gpqa gpqa exact_match,flexible-extract=0.5 exact_match,strict-match=0.25
EOF
# the stderr is lm-eval's sample standard error: sqrt(0.6 * 0.4 * 5 / 4 / 5) for 3 of 5
se=$(js "$T/ans-gsm8k.json" "console.log(d.results.gsm8k['exact_match_stderr,flexible-extract'].toFixed(6))")
check '[ "$se" = 0.244949 ]' "gsm8k stderr $se"
row=$(grep -c '^| gsm8k | gsm8k_cot | exact_match,flexible-extract | 60.00 | 24.49 | 5 |' "$T/ans-gsm8k.md")
check '[ "$row" = 1 ]' "the Markdown row: $(cat "$T/ans-gsm8k.md")"
shape=$(js "$T/ans-gpqa.json" "const t = d.table; console.log(t.length, t[0].task, t[0].metric, t[0].value, typeof t[0].stderr, d['n-samples'].gpqa.effective)")
check '[ "$shape" = "2 gpqa exact_match,flexible-extract 0.5 number 4" ]' "table shape: $shape"
run eval --task gsm8k --data "$F/gsm8k.jsonl" --answers "$F/gsm8k.answers.jsonl" -o "$T/lim" --limit 2 --quiet
got=$(js "$T/lim.json" "console.log(d['n-samples'].gsm8k.effective, d.results.gsm8k['exact_match,strict-match'])")
check '[ "$got" = "2 0.5" ]' "--limit 2: $got"

# progress on stderr (not a terminal: a line per tenth), with the score and the ETA
run eval --task arc-c --data "$F/arc.jsonl" --answers "$F/arc.answers.jsonl" -o "$T/prog"
check '[[ "$err" == *"arc-c: ["*"] 1/5  score 100.0%"*"eta "* ]] && [[ "$err" == *"5/5  score 60.0%"* ]]' "progress: $err"

# ---- presets ---------------------------------------------------------------------------
settings() { js "$1" "const s = d.config.settings; console.log(s.slot_size, s.blocks, s.slot_threshold, s.token_threshold, s.temperature, s.preset)"; }
run eval -t 1 -m "$DEMO" --task math --data "$F/math.jsonl" --limit 1 -n 4 -o "$T/p1" --quiet
check '[ $rc -eq 0 ] && [ "$(settings "$T/p1.json")" = "32 8 0.8 0.6 0 math" ]' "math preset: $(settings "$T/p1.json") $err"
run eval -t 1 -m "$DEMO" --slot-size 4 --task math --data "$F/math.jsonl" --limit 1 -n 4 --temp 0.5 -o "$T/p2" --quiet
check '[ "$(settings "$T/p2.json")" = "4 8 0.8 0.6 0.5 math" ]' "explicit options over the task preset: $(settings "$T/p2.json")"
run eval -t 1 -m "$DEMO" --slot-size 4 --task gsm8k --preset arc-c --data "$F/gsm8k.jsonl" --limit 1 -n 4 -o "$T/p3" --quiet
check '[ "$(settings "$T/p3.json")" = "4 64 0.8 0.1 0 arc-c" ]' "--preset over the task's, options over both: $(settings "$T/p3.json")"
gl=$(js "$T/p3.json" "console.log(d.config.settings.gen_length)")
check '[ "$gl" = 4 ]' "-n 4 kept: $gl"
run eval -t 1 -m "$DEMO" --preset gpqa --data "$SRC/tests/data/none.json" --help
check '[ $rc -eq 0 ] && [[ "$out" == *"--preset TASK"* ]]' "--help lists --preset"

# ---- the demo model over every fixture -------------------------------------------------
for spec in gsm8k:gsm8k math:math humaneval:humaneval mbpp:mbpp arc-c:arc mmlu-pro:mmlu_pro gpqa:gpqa; do
  task=${spec%%:*} stem=${spec#*:}
  run eval -t 1 -m "$DEMO" --task "$task" --data "$F/$stem.jsonl" --decoder ar -n 4 --limit 2 -o "$T/demo-$task" --quiet
  check '[ $rc -eq 0 ]' "demo $task: rc $rc $err"
  shape=$(js "$T/demo-$task.json" "
    const r = d.results['$task'], s = d.speed['$task'];
    const ok = typeof r.alias === 'string' && d.table.length >= 1 && d.table.every(x => x.task === '$task' && x.value >= 0 && x.value <= 1)
      && s.tokens > 0 && s.calls > 0 && s.tokens_per_s > 0 && d['n-samples']['$task'].effective === 2 && d.config.decoder === 'ar';
    console.log(ok ? 'ok' : JSON.stringify(d))")
  check '[ "$shape" = ok ]' "demo $task report: $shape"
  lines=$(node -e "
    const l = require('fs').readFileSync(process.argv[1], 'utf8').trim().split('\n').map(JSON.parse);
    console.log(l.length, l.every((x, i) => x.index === i && typeof x.completion === 'string' && x.tokens > 0 && x.metrics))" \
    "$T/demo-$task.samples.jsonl")
  check '[ "$lines" = "2 true" ]' "demo $task samples: $lines"
done
sb=$(node -e "
  const l = require('fs').readFileSync(process.argv[1], 'utf8').trim().split('\n').map(JSON.parse);
  console.log(l.every(x => x.sandbox && typeof x.sandbox.passed === 'boolean'))" "$T/demo-mbpp.samples.jsonl")
check '[ "$sb" = true ]' "code samples carry the sandbox's verdict"

# the seven runs as one table in the paper's layout: one row, a cell per task
run eval --table "$T"/demo-*.json
row=$(grep -c "^| $DEMO, ar |\( [0-9.]* ([0-9.]* tok/s) |\)\{7\}\$" "$T/out")
head=$(head -n 1 "$T/out")
check '[ $rc -eq 0 ] && [ "$row" = 1 ] && [ "$head" = "| model, decoder | humaneval | mbpp | gsm8k | math | gpqa | mmlu-pro | arc-c |" ]' \
  "--table: $out $err"
expect_fail 1 "not the summary" eval --table "$T/demo-gsm8k.json" "$SRC/models/refusion-demo/config.json"

# ---- resume after a kill ---------------------------------------------------------------
for _ in $(seq 6); do cat "$F/gsm8k.jsonl"; done >"$T/g30.jsonl"
common=(-t 1 -m "$DEMO" --task gsm8k --data "$T/g30.jsonl" --decoder ar -n 6 --quiet)
run eval "${common[@]}" -o "$T/whole"
check '[ $rc -eq 0 ] && [ "$(wc -l <"$T/whole.samples.jsonl")" = 30 ]' "uninterrupted run: rc $rc $err"
"$BIN" eval "${common[@]}" -o "$T/cut" 2>/dev/null &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$T/cut.samples.jsonl" ] && [ "$(wc -l <"$T/cut.samples.jsonl")" -ge 3 ] && break
  sleep 0.02
done
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
k=$(wc -l <"$T/cut.samples.jsonl")
check '[ "$k" -ge 3 ]' "killed after $k samples"
if [ "$k" -ge 30 ]; then # it finished before the kill landed: keep what a kill after 5 would have left
  head -n 5 "$T/whole.samples.jsonl" >"$T/cut.samples.jsonl"
  k=5
fi
printf '{"task":"gsm8k","index":%d,"id":' "$k" >>"$T/cut.samples.jsonl" # a line the kill cut short
expect_fail 1 "give --resume" eval "${common[@]}" -o "$T/cut"
run eval "${common[@]}" -o "$T/cut" --resume
check '[ $rc -eq 0 ]' "resume: rc $rc $err"
same=$(node -e "
  const fs = require('fs'), rd = f => fs.readFileSync(f, 'utf8').trim().split('\n').map(JSON.parse).map(x => JSON.stringify([x.index, x.id, x.completion, x.metrics, x.tokens, x.calls]));
  const a = rd(process.argv[1]), b = rd(process.argv[2]);
  console.log(a.length === b.length && a.every((x, i) => x === b[i]))" "$T/whole.samples.jsonl" "$T/cut.samples.jsonl")
check '[ "$same" = true ]' "the resumed samples differ from the uninterrupted run's"
res=$(js "$T/cut.json" "console.log(d['n-samples'].gsm8k.effective, d['n-samples'].gsm8k.resumed)")
check '[ "$res" = "30 $k" ]' "resumed counts: $res (killed after $k)"
a1=$(js "$T/whole.json" "console.log(JSON.stringify(d.results))")
a2=$(js "$T/cut.json" "console.log(JSON.stringify(d.results))")
check '[ "$a1" = "$a2" ]' "resumed results differ: $a1 / $a2"
# samples of another task or data are refused
expect_fail 1 "not sample" eval -t 1 -m "$DEMO" --task gsm8k --data "$F/gsm8k.jsonl" --decoder ar -n 4 -o "$T/cut" --resume --quiet

# ---- bad input -------------------------------------------------------------------------
expect_fail 2 "needs --data" eval --task gsm8k --answers "$F/gsm8k.answers.jsonl" -o "$T/x"
expect_fail 2 "expects one of" eval --task gsm9k --data "$F/gsm8k.jsonl" --answers "$F/gsm8k.answers.jsonl"
expect_fail 2 "expects one of" eval --task gsm8k --preset nope --data "$F/gsm8k.jsonl" --answers "$F/gsm8k.answers.jsonl"
expect_fail 1 "line 2" eval --task gsm8k --data "$F/gsm8k_bad.jsonl" --answers "$F/gsm8k.answers.jsonl" -o "$T/x"
expect_fail 1 "5 samples" eval --task gsm8k --data "$F/gsm8k.jsonl" --answers "$F/mbpp.answers.jsonl" -o "$T/x2"
printf '{"completion": 3}\n' >"$T/badans.jsonl"
expect_fail 1 "line 1" eval --task gsm8k --data "$F/gsm8k.jsonl" --answers "$T/badans.jsonl" -o "$T/x3"
expect_fail 1 "missing.jsonl" eval --task gsm8k --data "$F/missing.jsonl" --answers "$F/gsm8k.answers.jsonl" -o "$T/x4"
expect_fail 2 "-m MODEL" eval --task gsm8k --data "$F/gsm8k.jsonl"

echo "tasks_paper_cli: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
