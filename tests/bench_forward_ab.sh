#!/usr/bin/env bash
# bench_model_forward_ab (bench/model_forward_ab.c) sees a known slowdown:
# with A and B the same settings and every B call slowed by 300% of its time
# (--slow-b 300, a busy-wait inside the benchmark), the median B/A ratio must
# come out well above 1 (about 4; checked > 2) at every width, and A's and B's
# logits are reported bit-identical; without the slowdown the ratio stays
# near 1 (checked < 2). The int8 tiles and vpdpbusd give the same logits
# where the CPU has AMX. Bad options exit 2 with one line. One thread and
# RUN_SERIAL, as every timing self-check.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup bench_forward_ab
FAB=$(dirname "$BIN")/bench_model_forward_ab
DEMO=$SRC/models/refusion-demo

# the B/A median of width N in the report in $T/out
ratio() { awk -v n="$1" '$1 == n { print $(NF - 3) }' "$T/out"; }
logits() { awk -v n="$1" '$1 == n { print $NF }' "$T/out"; }

"$FAB" -m "$DEMO" --n 4,8 --b "" --slow-b 300 --rounds 8 --threads 1 >"$T/out" 2>"$T/err"
rc=$?
check '[ $rc = 0 ]' "slowed run failed: $(cat "$T/err")"
for n in 1 4 8; do
  r=$(ratio $n)
  check 'awk -v r="$r" "BEGIN { exit !(r > 2) }"' "width $n: the injected 300% slowdown is not seen (B/A '$r'): $(cat "$T/out")"
  check '[ "$(logits $n)" = identical ]' "width $n: same settings, logits not identical: $(cat "$T/out")"
done
check 'grep -q "c_A(n) median \[95%\]" "$T/out" && grep -q "B slowed by 300.0%" "$T/out"' "report lines: $(cat "$T/out")"

"$FAB" -m "$DEMO" --n 4 --b "" --rounds 8 --threads 1 >"$T/out" 2>"$T/err"
r=$(ratio 4)
check 'awk -v r="$r" "BEGIN { exit !(r > 0.5 && r < 2) }"' "same settings without a slowdown: B/A '$r': $(cat "$T/out")"

if "$BIN" info -m "$DEMO" | grep -q '^cpu tier *amx'; then
  "$FAB" -m "$DEMO" --quantize q8_0 --n 8,16 --a "amx-int8=5" --b "amx-int8=0" --rounds 3 --threads 1 >"$T/out" 2>"$T/err"
  check '[ "$(logits 8)" = identical ] && [ "$(logits 16)" = identical ]' "Q8_0 int8 tiles vs vpdpbusd: $(cat "$T/out") $(cat "$T/err")"
else
  echo "SKIPPED: amx (cpu lacks it): int8 tiles vs vpdpbusd"
fi

for bad_args in "--b tier=foo" "--a amx-int8=x" "--n 1" "--rounds 1" "--quantize q2_k" ""; do
  # shellcheck disable=SC2086
  "$FAB" -m "$DEMO" $bad_args >"$T/out" 2>"$T/err"
  rc=$?
  [ -z "$bad_args" ] && { check '[ $rc = 0 ]' "defaults: rc $rc $(cat "$T/err")"; continue; }
  check '[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ ! -s "$T/out" ]' "bad '$bad_args': rc $rc, $(cat "$T/err")"
done

echo "bench_forward_ab: $pass passed, $fails failed"
[ "$fails" = 0 ]
