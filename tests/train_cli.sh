#!/usr/bin/env bash
# train_cli.sh - `refusion train` end to end: a short run writes a checkpoint
# that `refusion info` and `refusion generate` load; the CSV log and the loss
# plot; Ctrl-C and SIGTERM save and exit 0, --resume finishes the run; malformed data
# files fail with exit 1 and one line naming file and record, writing nothing.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup train_cli

rf_py - "$T" <<'EOF' || { echo "FAIL: python3 needed to write the data" >&2; exit 1; }
import json, sys
from reverse_data import records
recs = records(200)
json.dump(recs, open(sys.argv[1] + '/data.json', 'w'))
with open(sys.argv[1] + '/data.jsonl', 'w') as f:
    for r in recs[:50]:
        f.write(json.dumps(r) + '\n')
EOF
"$BIN" tokenizer-train --input "$T/data.json" --vocab 300 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train"

COMMON=(--tokenizer "$T/tok" --config tiny --batch 8 --seq-len 48 --lr 3e-3 --threads 1 --slot-sizes 4,8)

# ---- help and bad options -------------------------------------------------------
"$BIN" train --help >"$T/help" 2>&1 && grep -q -- "--objective" "$T/help" && ok || bad "train --help"
"$BIN" train --data "$T/data.json" -o "$T/x" --objective bert >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "objective" "$T/err" && ok || bad "--objective bert not refused"
expect_fail 2 "--batch expects an integer in [1, 1048576], got '0'" train --data "$T/data.json" -o "$T/x" --batch 0
expect_fail 2 "--lr expects a number in [0, 10], got 'fast'" train --data "$T/data.json" -o "$T/x" --lr fast
expect_fail 2 "--slot-sizes: bad list '4,x'" train --data "$T/data.json" -o "$T/x" --slot-sizes 4,x
expect_fail 2 "--init and --resume exclude each other" train --data "$T/data.json" -o "$T/x" --init "$T/a" --resume
expect_fail 2 "--data and -o DIR are required" train --data "$T/data.json"
expect_fail 2 "unknown option '--bogus'" train --data "$T/data.json" -o "$T/x" --bogus
[ ! -e "$T/x" ] && ok || bad "a refused command line wrote $T/x"
# --help lists every option, from the option table
"$BIN" train --help >"$T/help" 2>&1
for o in data out init config tokenizer init-std resume objective slot-sizes mdm-pad aux-ar mask-floor batch seq-len \
         accum steps epochs lr min-lr warmup weight-decay beta2 clip seed threads save-every stop-at skip-long \
         log-every no-plot quiet json mpi allreduce bucket-mb; do
  grep -q -- "--$o\b" "$T/help" && ok || bad "train --help lacks --$o"
done

# ---- a short run --------------------------------------------------------------------
"$BIN" train --data "$T/data.json" -o "$T/run" "${COMMON[@]}" --steps 12 --log-every 4 \
  >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "train exit $rc: $(cat "$T/err")"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json optimizer.bin log.csv; do
  [ -s "$T/run/$f" ] && ok || bad "run/$f missing"
done
[ -s "$T/run/loss.png" ] || [ -s "$T/run/loss.svg" ] && ok || bad "no loss plot"
rows=$(($(wc -l <"$T/run/log.csv") - 1))
[ "$rows" -eq 12 ] && ok || bad "log.csv has $rows rows, want 12"
head -1 "$T/run/log.csv" | grep -q "^step,lr,loss,ar_loss,mdm_loss,tokens_per_s,elapsed" && ok || bad "csv header"
grep -q "step 12/12" "$T/err" && ok || bad "no progress line for the last step: $(cat "$T/err")"
ls "$T/run" | grep -q "tmp" && bad "temporary files left: $(ls "$T/run")" || ok

# the checkpoint in the engine
"$BIN" info -m "$T/run" >"$T/out" 2>"$T/err" && ok || bad "info: $(cat "$T/err")"
"$BIN" generate -m "$T/run" -p "reverse 123" -n 8 --slot-size 4 --blocks 1 >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "generate on the trained checkpoint: exit $rc: $(cat "$T/err")"
"$BIN" generate -m "$T/run" -p "reverse 123" -n 8 --mode ar >"$T/out" 2>"$T/err" && ok ||
  bad "AR generate on the trained checkpoint: $(cat "$T/err")"

# JSON Lines, the two baselines, --init from the checkpoint
"$BIN" train --data "$T/data.jsonl" -o "$T/ar" "${COMMON[@]}" --objective ar --steps 3 -q \
  2>"$T/err" && ok || bad "ar on jsonl: $(cat "$T/err")"
# --json: the run's figures as one JSON object on stdout
js=$("$BIN" train --data "$T/data.jsonl" -o "$T/js" "${COMMON[@]}" --objective ar --steps 3 -q --json 2>"$T/err")
node -e 'const o = JSON.parse(process.argv[1]);
  process.exit(o.step === 3 && o.steps_run === 3 && o.loss > 0 && o.loss_ar > 0 && o.tokens_per_s > 0 &&
               o.stopped === false && o.ranks === 1 && o.out.endsWith("/js") ? 0 : 1)' "$js" && ok ||
  bad "train --json: '$js' $(cat "$T/err")"
"$BIN" train --data "$T/data.json,$T/data.jsonl" -o "$T/mdm" --init "$T/run" --objective mdm \
  --batch 4 --seq-len 48 --steps 2 --threads 1 -q --no-plot 2>"$T/err" && ok ||
  bad "mdm --init: $(cat "$T/err")"

# ---- Ctrl-C saves; --resume finishes ---------------------------------------------------
# interrupted SIG DIR LINES: a long run into DIR (stderr in DIR.err), sent SIG once
# its log has LINES lines; rc = its exit status
interrupted() {
  "$BIN" train --data "$T/data.json" -o "$2" "${COMMON[@]}" --steps 100000 --no-plot >"$T/out" 2>"$2.err" &
  local pid=$!
  for _ in $(seq 1 300); do
    [ -f "$2/log.csv" ] && [ "$(wc -l <"$2/log.csv")" -ge "$3" ] && break
    sleep 0.1
  done
  kill "-$1" $pid
  wait $pid
  rc=$?
}
interrupted INT "$T/int" 4
[ $rc -eq 0 ] && ok || bad "interrupted run exit $rc: $(cat "$T/int.err")"
grep -q "interrupted: saved step" "$T/int.err" && ok || bad "no interruption message: $(cat "$T/int.err")"
[ -s "$T/int/optimizer.bin" ] && [ -s "$T/int/model.safetensors" ] && ok || bad "nothing saved on Ctrl-C"
done_steps=$(($(wc -l <"$T/int/log.csv") - 1))
# SIGTERM (kill; mpirun's Ctrl-C) saves the same way
interrupted TERM "$T/term" 3
[ $rc -eq 0 ] && grep -q "interrupted: saved step" "$T/term.err" && [ -s "$T/term/optimizer.bin" ] && ok ||
  bad "SIGTERM: exit $rc, nothing saved: $(cat "$T/term.err")"
"$BIN" train --data "$T/data.json" -o "$T/int" "${COMMON[@]}" --steps $((done_steps + 3)) --resume \
  --no-plot -q 2>"$T/err" && ok || bad "resume: $(cat "$T/err")"
rows=$(($(wc -l <"$T/int/log.csv") - 1))
[ "$rows" -eq $((done_steps + 3)) ] && ok || bad "after resume log has $rows rows, want $((done_steps + 3))"

# ---- malformed data: exit 1, one line naming file and record, nothing written -----------
check_bad() { # name content needle
  printf '%s' "$2" >"$T/$1"
  "$BIN" train --data "$T/$1" -o "$T/never" "${COMMON[@]}" --steps 1 >"$T/out" 2>"$T/err"
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [ $rc -ne 1 ]; then bad "$1: exit $rc (want 1): $(cat "$T/err")"; return; fi
  if [ "$lines" -ne 1 ]; then bad "$1: $lines stderr lines: $(cat "$T/err")"; return; fi
  grep -q "^refusion: .*$1: $3" "$T/err" || { bad "$1: message: $(cat "$T/err")"; return; }
  [ -e "$T/never" ] && { bad "$1: output directory created"; return; }
  ok
}
check_bad notjson.json 'hello' "not JSON"
check_bad trunc.json '[{"query": "a", "response": "b"}, {"query":' "not valid JSON at line 1"
check_bad noresp.json '[{"query": "a", "response": "b"}, {"query": "c"}]' 'record 1: missing "response"'
check_bad noquery.jsonl $'{"query": "a", "response": "b"}\n{"response": "b"}\n' 'line 2 (record 1): missing "query"'
check_bad list.json '[["a", "b"]]' "record 0: not an object"
long=$(printf 'x %.0s' $(seq 1 100))
check_bad long.json "[{\"query\": \"$long\", \"response\": \"b\"}]" "record 0: .* exceed the sequence length 48"
"$BIN" train --data "$T/missing.json" -o "$T/never" "${COMMON[@]}" >"$T/out" 2>"$T/err"
[ $? -eq 1 ] && grep -q "missing.json: cannot open" "$T/err" && ok || bad "missing file: $(cat "$T/err")"

echo "train_cli: $pass passed, $fails failed"
[ $fails -eq 0 ]
