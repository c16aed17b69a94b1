#!/usr/bin/env bash
# train_ckpt_kill.sh - a training run killed at every step of its checkpoint
# saves always leaves a checkpoint that --resume continues, and the
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
#
# Then a full disk during a save ("disk full ends in the same
# state"), simulated without root or mounts: in a subshell, `trap '' XFSZ`
# (an ignored signal stays ignored across exec, so a write past the limit
# returns EFBIG instead of killing the process) and `ulimit -f K` (K blocks of
# 1024 bytes, the most any one file may hold). From a committed step-2
# checkpoint, `train --resume` runs to step 4 and its save fails mid-write.
# K walks the write points the limit can reach, taken from the reference
# run's file sizes: model.safetensors (its header, mid-data, its last
# tensor), optimizer.bin (the first block past model.safetensors' size, the
# middle of its second moments, its last bytes), and one K where everything
# fits (the run must then succeed). A per-file limit reaches no other write:
# config.json, the tokenizer's files and the journal are smaller than
# model.safetensors and written after it, and optimizer.bin's first moments
# end before model.safetensors' size. For each failing K:
#  - exit non-zero, and stderr is exactly one line, `refusion: `, naming the
#    file that failed and the reason (strerror(EFBIG));
#  - the directory holds the same files as before, the step-2 set byte for
#    byte, and none of the save's leftovers;
#  - a plain `train --resume` then ends bit-identical to the reference run.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup train_ckpt_kill

for i in $(seq 1 60); do
  a=$((i * 37 % 1000)) b=$((i * 11 % 97))
  printf '{"query": "add %d and %d", "response": "%d"}\n' $a $b $((a + b))
done >"$T/data.jsonl"
"$BIN" tokenizer-train --input "$T/data.jsonl" --vocab 300 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train"
ARGS=(--data "$T/data.jsonl" --tokenizer "$T/tok" --config tiny --batch 4 --seq-len 64 --lr 3e-3 --threads 1
      --steps 4 --save-every 2 --quiet --no-plot)

"$BIN" train "${ARGS[@]}" -o "$T/ref" 2>"$T/ref.err" || { echo "FAIL: uninterrupted run: $(cat "$T/ref.err")" >&2; exit 1; }

leftovers() { (cd "$1" && ls -a | grep -E '\.next$|\.next\.tmp\.[0-9]+$|\.tmp\.[0-9]+$|^checkpoint\.commit' | tr '\n' ' '); }
# ends_as_reference LABEL: the run in $T/run ended with the uninterrupted
# run's weights, byte for byte, and left nothing staged behind
ends_as_reference() {
  cmp -s "$T/run/model.safetensors" "$T/ref/model.safetensors" && ok ||
    bad "$1: the continued run's weights differ from the uninterrupted run's"
  local left
  left=$(leftovers "$T/run")
  [ -z "$left" ] && ok || bad "$1: left behind: $left"
}

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
  ends_as_reference "kill point $n"
done
[ $killed -ge 20 ] && ok || bad "only $killed kill points before the run finished (two saves have about 26)"
[ $resumed -ge 10 ] && ok || bad "only $resumed kill points left a checkpoint to resume"
[ -z "$(leftovers "$T/ref")" ] && ok || bad "the uninterrupted run left: $(leftovers "$T/ref")"

# ---- a full disk during the step-4 save --------------------------------------------
SET=(config.json model.safetensors tokenizer.json tokenizer_config.json optimizer.bin)
# the limit mechanism itself: a write past K blocks is cut at K*1024 bytes, the
# writer is not killed and gets an error
( trap '' XFSZ; ulimit -f 1 && head -c 3000 /dev/zero >"$T/probe" ) 2>/dev/null
probe_rc=$?
[ $probe_rc -ne 0 ] && [ "$(wc -c <"$T/probe")" -eq 1024 ] && ok ||
  bad "ulimit -f 1 with SIGXFSZ ignored: exit $probe_rc and $(wc -c <"$T/probe") bytes, not a failed write at 1024"

"$BIN" train "${ARGS[@]}" -o "$T/s2" --stop-at 2 2>"$T/s2.err" || bad "the step-2 run failed: $(cat "$T/s2.err")"
"$BIN" train "${ARGS[@]}" -o "$T/s2c" --stop-at 2 2>/dev/null && "$BIN" train "${ARGS[@]}" -o "$T/s2c" --resume 2>/dev/null &&
  cmp -s "$T/s2c/model.safetensors" "$T/ref/model.safetensors" && ok ||
  bad "a step-2 checkpoint resumed without a limit does not end as the reference run"
msize=$(wc -c <"$T/ref/model.safetensors") osize=$(wc -c <"$T/ref/optimizer.bin")
# K: model.safetensors' header (1 block is less than it), its middle, its last
# block; optimizer.bin just past model.safetensors' size (its second moments),
# its middle, its last bytes; all fits
KS="1 $((msize / 2048)) $(((msize - 1) / 1024)) $((msize / 1024 + 1)) $(((msize + osize) / 2048)) $(((osize - 1) / 1024)) $((osize / 1024 + 1))"
full=0
for K in $KS; do
  rm -rf "$T/run"
  cp -R "$T/s2" "$T/run"
  before=$(ls -a "$T/run" | tr '\n' ' ')
  ( trap '' XFSZ; ulimit -f "$K" && exec "$BIN" train "${ARGS[@]}" -o "$T/run" --resume ) >/dev/null 2>"$T/full.err"
  rc=$?
  if [ $((K * 1024)) -ge "$osize" ]; then
    # every file fits: the save succeeds under the limit
    [ $rc -eq 0 ] && cmp -s "$T/run/model.safetensors" "$T/ref/model.safetensors" && ok ||
      bad "ulimit -f $K (every file fits): exit $rc, $(cat "$T/full.err")"
    continue
  fi
  full=$((full + 1))
  if [ $((K * 1024)) -lt "$msize" ]; then want=model.safetensors; else want=optimizer.bin; fi
  [ $rc -ne 0 ] && ok || bad "ulimit -f $K: a failed save exits 0"
  [ "$(wc -l <"$T/full.err")" -eq 1 ] && grep -q "^refusion: .*/$want[.a-z0-9]*: .*File too large" "$T/full.err" && ok ||
    bad "ulimit -f $K: want one 'refusion: ' line naming $want and the reason, got: $(cat "$T/full.err")"
  for f in "${SET[@]}"; do
    cmp -s "$T/run/$f" "$T/s2/$f" && ok || bad "ulimit -f $K: the failed save changed the step-2 checkpoint's $f"
  done
  left=$(leftovers "$T/run")
  [ -z "$left" ] && ok || bad "ulimit -f $K: the failed save left behind: $left"
  after=$(ls -a "$T/run" | tr '\n' ' ')
  [ "$after" = "$before" ] && ok || bad "ulimit -f $K: the directory held '$before', now '$after'"
  "$BIN" train "${ARGS[@]}" -o "$T/run" --resume 2>"$T/resume.err" || { bad "ulimit -f $K: the --resume after it failed: $(cat "$T/resume.err")"; continue; }
  ends_as_reference "ulimit -f $K, then --resume"
done
[ $full -eq 6 ] && ok || bad "$full of the 6 limits made the save fail"

echo "train_ckpt_kill: $killed kill points ($resumed resumed, $fresh before any commit), $full full-disk points; $pass checks passed, $fails failed"
[ $fails -eq 0 ]
