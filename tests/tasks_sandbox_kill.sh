#!/usr/bin/env bash
# tasks_sandbox_kill.sh - `refusion eval --task mbpp` killed while a sample
# runs (a program that forks and sleeps): after SIGKILL, SIGTERM and SIGINT
# of eval, none of the processes it started (the relay, the sample and the
# sample's child) is alive 1 s later, and no sandbox directory is left in
# $TMPDIR: at once after SIGTERM and SIGINT, after the next eval's start
# after SIGKILL (which sweeps the directories whose writer is gone).
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup tasks_sandbox_kill
set -m # background jobs in their own groups, SIGINT not ignored
F=$SRC/tests/data/paper_tasks
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"
chmod 0711 "$T" "$TMPDIR" # started by root, the sample runs as nobody

head -n 1 "$F/mbpp.jsonl" >"$T/one.jsonl"
printf '%s\n' '{"completion": "import os, time\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(60)\n"}' \
  >"$T/sleep.jsonl"
printf '%s\n' '{"completion": "def square(x):\n    return x * x\n"}' >"$T/right.jsonl"

# descendants PID: the process ids below PID, recursively
descendants() {
  local kids
  kids=$(ps -e -o pid=,ppid= | awk -v p="$1" '$2 == p {print $1}')
  for k in $kids; do
    echo "$k"
    descendants "$k"
  done
}
# running PIDS...: those still running (a zombie has ended)
running() {
  for p in "$@"; do
    st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ] && echo "$p"
  done
}
sandboxes() { ls "$TMPDIR" | grep -c '^refusion-sandbox-'; }

for sig in KILL TERM INT; do
  "$BIN" eval --task mbpp --data "$T/one.jsonl" --answers "$T/sleep.jsonl" --code-timeout 60 \
    -o "$T/run-$sig" --quiet 2>"$T/err-$sig" &
  epid=$!
  # mid-sample: the sample and its child run the driver
  procs=""
  for _ in $(seq 1 200); do
    procs=$(descendants "$epid")
    n=0
    for p in $procs; do grep -q driver.py "/proc/$p/cmdline" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -ge 2 ] && break
    sleep 0.1
  done
  check '[ "$n" -ge 2 ]' "$sig: the sample did not start: $(cat "$T/err-$sig")"
  check '[ "$(sandboxes)" = 1 ]' "$sig: no sandbox directory while the sample runs"
  kill "-$sig" "$epid"
  wait "$epid"
  st=$?
  sleep 1
  left=$(running $procs)
  check '[ -z "$left" ]' "$sig: processes alive 1 s after eval ended (status $st): $(for p in $left; do tr '\0' ' ' <"/proc/$p/cmdline"; echo; done)"
  if [ "$sig" = KILL ]; then
    check '[ "$(sandboxes)" = 1 ]' "SIGKILL: the killed run's sandbox directory should still be there"
    # the next start sweeps it (its writer is gone), and its own
    run eval --task mbpp --data "$T/one.jsonl" --answers "$T/right.jsonl" -o "$T/next" --quiet
    check '[ $rc = 0 ]' "the next eval: rc $rc $err"
  else
    check '[ $st = $((128 + $(kill -l "$sig"))) ]' "$sig: eval's status $st, want death by the signal"
  fi
  check '[ "$(sandboxes)" = 0 ]' "$sig: sandbox directories left: $(ls "$TMPDIR")"
  rm -rf "${TMPDIR:?}"/*
done

echo "tasks_sandbox_kill: $pass passed, $fails failed"
[ "$fails" = 0 ]
