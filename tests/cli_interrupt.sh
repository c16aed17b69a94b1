#!/usr/bin/env bash
# cli_interrupt.sh - `grow` and `convert` stopped while they write: SIGTERM
# and SIGINT leave no temporary output (grow's OUT.grow-tmp.PID directory,
# a GGUF's OUT.tmp.PID, a checkpoint directory convert made) and nothing at
# OUT; after SIGKILL the next run writing the same OUT removes what the
# killed one left (its process is gone) and says so. The demo model grown
# to 108M-216M parameters keeps each write busy for seconds, so the signal
# lands mid-write; a run that ends before it fails the test.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_interrupt
set -m # background jobs in their own groups, SIGINT not ignored
DEMO=$SRC/models/refusion-demo
BIG=(--hidden 1024 --layers 16 --ffn 4096)

# stop_when SIG GLOB CMD...: run CMD in the background, send SIG once a
# non-empty file matches GLOB (a temporary output being written), wait;
# sets st (the exit status) and hit (1 when the signal was sent mid-write)
stop_when() {
  local sig=$1 glob=$2
  shift 2
  "$BIN" "$@" >"$T/out" 2>"$T/err" &
  local pid=$! f
  hit=0
  for _ in $(seq 1 600); do
    for f in $glob; do
      if [ -s "$f" ]; then
        kill "-$sig" "$pid" && hit=1
        break 2
      fi
    done
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  wait "$pid"
  st=$?
}
# left PREFIX: what is there whose name starts with PREFIX
left() { ls -d "$1"* 2>/dev/null | tr '\n' ' '; }

# the input of the conversions
run grow -m "$DEMO" -o "$T/big" --hidden 1024 --layers 8 --ffn 4096
check '[ $rc = 0 ]' "grow the input: rc $rc $err"

for sig in TERM INT; do
  want=$((128 + $(kill -l $sig)))
  stop_when "$sig" "$T/g-$sig.grow-tmp.*/*.tmp.*" grow -m "$DEMO" -o "$T/g-$sig" "${BIG[@]}"
  check '[ $hit = 1 ] && [ $st = $want ]' "grow SIG$sig: signal sent $hit, status $st (want $want): $(cat "$T/err")"
  check '[ -z "$(left "$T/g-$sig")" ]' "grow SIG$sig left: $(left "$T/g-$sig")"

  stop_when "$sig" "$T/q-$sig.gguf.tmp.*" grow -m "$DEMO" -o "$T/q-$sig.gguf" --hidden 1024 --layers 8 --ffn 4096 --dtype q8_0
  check '[ $hit = 1 ] && [ $st = $want ]' "grow to GGUF SIG$sig: signal sent $hit, status $st: $(cat "$T/err")"
  check '[ -z "$(left "$T/q-$sig")" ]' "grow to GGUF SIG$sig left: $(left "$T/q-$sig")"

  stop_when "$sig" "$T/c-$sig/*.tmp.*" convert -m "$T/big" -o "$T/c-$sig" --dtype f32
  check '[ $hit = 1 ] && [ $st = $want ]' "convert SIG$sig: signal sent $hit, status $st: $(cat "$T/err")"
  check '[ -z "$(left "$T/c-$sig")" ]' "convert SIG$sig left: $(left "$T/c-$sig")"

  stop_when "$sig" "$T/c-$sig.gguf.tmp.*" convert -m "$T/big" -o "$T/c-$sig.gguf" --dtype f32
  check '[ $hit = 1 ] && [ $st = $want ]' "convert to GGUF SIG$sig: signal sent $hit, status $st: $(cat "$T/err")"
  check '[ -z "$(left "$T/c-$sig.gguf")" ]' "convert to GGUF SIG$sig left: $(left "$T/c-$sig.gguf")"
done

# SIGKILL: the temporary output stays; the next run writing OUT removes it
stop_when KILL "$T/k.grow-tmp.*/*.tmp.*" grow -m "$DEMO" -o "$T/k" "${BIG[@]}"
check '[ $hit = 1 ] && [ -n "$(left "$T/k.grow-tmp.")" ]' "grow SIGKILL: signal sent $hit, left: $(left "$T/k")"
run grow -m "$DEMO" -o "$T/k" --layers 6
check '[ $rc = 0 ] && [[ "$err" == *"refusion: grow: removed $T/k.grow-tmp."*"left by an interrupted run"* ]]' \
  "the next grow: rc $rc, $err"
check '[ "$(left "$T/k")" = "$T/k " ]' "after the next grow: $(left "$T/k")"

stop_when KILL "$T/k.gguf.tmp.*" convert -m "$T/big" -o "$T/k.gguf" --dtype f32
check '[ $hit = 1 ] && [ -n "$(left "$T/k.gguf.tmp.")" ]' "convert SIGKILL: signal sent $hit, left: $(left "$T/k.gguf")"
run convert -m "$DEMO" -o "$T/k.gguf"
check '[ $rc = 0 ] && [[ "$err" == *"refusion: convert: removed $T/k.gguf.tmp."* ]]' "the next convert: rc $rc, $err"
check '[ "$(left "$T/k.gguf")" = "$T/k.gguf " ]' "after the next convert: $(left "$T/k.gguf")"

echo "cli_interrupt: $pass passed, $fails failed"
[ "$fails" = 0 ]
