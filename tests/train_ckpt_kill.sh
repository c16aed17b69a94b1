#!/usr/bin/env bash
# train_ckpt_kill.sh - a training run killed at every step of its checkpoint
# saves (issue 11) always leaves a checkpoint that --resume continues, and the
# resumed run ends bit-identical to an uninterrupted one.
#
# REFUSION_TEST_KILL_AT=N makes the N-th save step of the process _exit(86)
# (a file staged, half of optimizer.bin, the journal, each rename, the
# journal's removal: src/train/checkpoint.c), as kill -9 would at that
# moment. N walks from 1 until a run is no longer killed, which covers every
# step of both saves (steps 2 and 4). After each kill:
#  - a kill before the first save's commit point may leave no checkpoint:
#    --resume must then refuse with one line, and a fresh run is the answer;
#  - otherwise `train --resume` must succeed, and its final model.safetensors
#    must equal the uninterrupted run's byte for byte;
#  - no NAME.next, NAME.tmp.PID or checkpoint.commit may be left behind.
set -u
BIN=${REFUSION_BIN:?REFUSION_BIN must point at the refusion binary}
T=$(mktemp -d /tmp/rf_ckpt_kill.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

for i in $(seq 1 60); do
  a=$((i * 37 % 1000)) b=$((i * 11 % 97))
  printf '{"query": "add %d and %d", "response": "%d"}\n' $a $b $((a + b))
done >"$T/data.jsonl"
"$BIN" tokenizer-train --input "$T/data.jsonl" --vocab 300 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train"
ARGS=(--data "$T/data.jsonl" --tokenizer "$T/tok" --config tiny --batch 4 --seq-len 64 --lr 3e-3 --threads 1
      --steps 4 --save-every 2 --quiet --no-plot)

"$BIN" train "${ARGS[@]}" -o "$T/ref" 2>"$T/ref.err" || { echo "FAIL: uninterrupted run: $(cat "$T/ref.err")" >&2; exit 1; }

leftovers() { (cd "$1" && ls -a | grep -E '\.next$|\.next\.tmp\.[0-9]+$|\.tmp\.[0-9]+$|^checkpoint\.commit' | tr '\n' ' '); }

n=0 killed=0 fresh=0 resumed=0
while [ $n -lt 100 ]; do
  n=$((n + 1))
  rm -rf "$T/run"
  REFUSION_TEST_KILL_AT=$n "$BIN" train "${ARGS[@]}" -o "$T/run" 2>"$T/kill.err"
  rc=$?
  if [ $rc -eq 0 ]; then
    break # past the last save step: the run finished
  fi
  [ $rc -eq 86 ] || { bad "kill point $n: exit $rc, not the hook's 86: $(cat "$T/kill.err")"; break; }
  killed=$((killed + 1))
  if [ -f "$T/run/optimizer.bin" ] || [ -f "$T/run/checkpoint.commit" ]; then
    "$BIN" train "${ARGS[@]}" -o "$T/run" --resume 2>"$T/resume.err"
    rc=$?
    [ $rc -eq 0 ] || { bad "kill point $n: --resume failed ($rc): $(cat "$T/resume.err")"; continue; }
    resumed=$((resumed + 1))
  else
    # nothing committed yet: --resume refuses with one line, a fresh run works
    "$BIN" train "${ARGS[@]}" -o "$T/run" --resume >/dev/null 2>"$T/resume.err"
    rc=$?
    [ $rc -ne 0 ] && [ "$(wc -l <"$T/resume.err")" -eq 1 ] && grep -q '^refusion: ' "$T/resume.err" && ok ||
      bad "kill point $n: --resume without a checkpoint: exit $rc, $(cat "$T/resume.err")"
    "$BIN" train "${ARGS[@]}" -o "$T/run" 2>"$T/resume.err" || { bad "kill point $n: fresh run failed"; continue; }
    fresh=$((fresh + 1))
  fi
  cmp -s "$T/run/model.safetensors" "$T/ref/model.safetensors" && ok ||
    bad "kill point $n: the continued run's weights differ from the uninterrupted run's"
  left=$(leftovers "$T/run")
  [ -z "$left" ] && ok || bad "kill point $n: left behind: $left"
done
[ $killed -ge 20 ] && ok || bad "only $killed kill points before the run finished (two saves have about 26)"
[ $resumed -ge 10 ] && ok || bad "only $resumed kill points left a checkpoint to resume"
[ -z "$(leftovers "$T/ref")" ] && ok || bad "the uninterrupted run left: $(leftovers "$T/ref")"

echo "train_ckpt_kill: $killed kill points ($resumed resumed, $fresh before any commit); $pass checks passed, $fails failed"
[ $fails -eq 0 ]
