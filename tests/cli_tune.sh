#!/usr/bin/env bash
# refusion tune: on an AMX machine it measures the demo model (bf16 tiles)
# and a Q8_0 copy (int8 tiles), prints one row per width and a last line
# that is the environment setting its rows imply (the smallest width from
# which every ratio's interval lies below 1, else off), a value
# REFUSION_AMX_* accepts;
# at every tier, with packed weights, it measures the prefetch level (L2
# against L1 per width; the last line REFUSION_PREFETCH_L2= the widest width
# up to which L2 was not slower, when it won at 1 token) and the stream
# panels (REFUSION_STREAM_PANELS=1 when one panel per tile won at 1 token
# and lost clearly nowhere, else 0) and keeps them in the tune cache,
# which the next load applies; f32 weights have nothing to
# tune; bad input: one error line. (Which path wins is the machine's
# business: not asserted.)
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_tune
export XDG_CACHE_HOME="$T/cache" # tune writes its cache there, not in the real one
DEMO=$SRC/models/refusion-demo

# the setting the printed rows of the tiles' table imply (the first table;
# on an Intel CPU the packed bf16 kernels' table follows it)
implied() {
  awk 'BEGIN { n = 0 } /^REFUSION_/ { exit }
       $1 ~ /^[0-9]+$/ && NF >= 6 { w[n] = $1; hi = $6; sub(/\]/, "", hi); r[n++] = hi + 0 }
       END { from = "off"; for (i = n - 1; i >= 0 && r[i] < 1; i--) from = w[i]; print from }' "$T/out"
}

if "$BIN" info -m "$DEMO" | grep -q '^cpu tier *amx'; then
  run tune -m "$DEMO" --rounds 3 -t 1
  check '[ $rc = 0 ] && [ "$(sed "/^REFUSION_/q" "$T/out" | grep -c "^ *[0-9][0-9]* .*\]")" = 8 ]' "bf16 tune: rc $rc, $out $err"
  last=$(grep -m1 '^REFUSION_' "$T/out")
  check '[ "$last" = "REFUSION_AMX_BF16=$(implied)" ]' "bf16: the tiles' setting '$last' is not what the rows imply ($(implied)): $out"
  # the packed bf16 kernels' choice (where measured) is one of the two
  bf16p=$(grep '^REFUSION_BF16P' "$T/out")
  check '[ -z "$bf16p" ] || [ "$bf16p" = REFUSION_BF16P=dp ] || [ "$bf16p" = REFUSION_BF16P=fma ]' "bf16p setting: '$bf16p'"
  # the printed setting is one refusion accepts
  check 'env "$last" "$BIN" info -m "$DEMO" | grep "^cpu tier" | grep -vq "not off or a number"' "bf16 setting refused: $last"

  run convert -m "$DEMO" -o "$T/q8.gguf" --dtype q8_0
  check '[ $rc = 0 ]' "convert: $err"
  run tune -m "$T/q8.gguf" --rounds 3 -t 1
  check '[ $rc = 0 ] && grep -q "the int8 tiles against vpdpbusd" "$T/out"' "q8_0 tune: rc $rc, $out $err"
  last=$(grep -m1 '^REFUSION_AMX' "$T/out")
  check '[ "$last" = "REFUSION_AMX_INT8=$(implied)" ]' "q8_0: the last line '$last' is not what the rows imply ($(implied)): $out"

  run convert -m "$DEMO" -o "$T/f32" --dtype f32
  expect_fail 1 "the tiles take bf16 or packed Q8_0 / Q4_0" tune -m "$T/f32" --rounds 3
else
  echo "SKIPPED: amx (cpu lacks it): the measurement"
fi
# the prefetch level: the setting the prefetch table's rows imply
implied_l2() {
  awk 'BEGIN { n = 0 } /prefetch into L2 against L1/ { on = 1; next } on && /^REFUSION_/ { exit }
       on && $1 ~ /^[0-9]+$/ && NF >= 6 { lo = $5; sub(/\[/, "", lo); sub(/,/, "", lo); hi = $6; sub(/\]/, "", hi)
         w[n] = $1; r[n] = $4 + 0; l[n] = lo + 0; h[n++] = hi + 0 }
       END { v = "off"; if (n > 0 && h[0] < 1) for (i = 0; i < n && r[i] <= 1 && l[i] <= 1; i++) v = w[i]; print v }' "$T/out"
}
# the adaptive rolling slot's call costs: tune prints c(1..32) (c(1) = 1,
# non-decreasing) and keeps them in the cache under the model's key; the
# demo's own settings (the adaptive width) then size their calls by the
# cached table, not by timing: a flat table drafts, a steep one (wide calls
# 50x a 1-token call) makes plain AR calls, both with AR's answer; with the
# cache off the decoder times the calls itself (more calls than the flat
# table's, whose wide calls are free); a malformed table: one
# warning, the cache ignored. Run after the avx2 tune above (its key: avx2,
# 1 thread).
call_costs() {
  local costs file q="Tom has 12 apples. He buys 7 more. How many apples does he have now?"
  costs=$(grep -A1 'call cost c(n)' "$T/out" | tail -n 1)
  check 'echo "$costs" | awk "NF != 32 || \$1 != \"1.00\" { exit 1 } { for (i = 2; i <= NF; i++) if (\$i < \$(i - 1)) exit 1 }"' \
    "call costs: '$costs'"
  file=$(ls "$XDG_CACHE_HOME"/refusion/tune-*.txt)
  check '[ "$(grep -c "^call-cost: [0-9a-f]\{16\} 32 1.000 " "$file")" = 1 ]' "cache: $(cat "$file")"
  # info says whether the model's table is cached for its thread count
  check 'REFUSION_CPU=avx2 OMP_NUM_THREADS=1 "$BIN" info -m "$DEMO" | grep -q "^call costs the tune cache'"'"'s for 1 threads: c(8) "' \
    "info at 1 thread: $(REFUSION_CPU=avx2 OMP_NUM_THREADS=1 "$BIN" info -m "$DEMO")"
  check 'REFUSION_CPU=avx2 OMP_NUM_THREADS=2 "$BIN" info -m "$DEMO" | grep -q "^call costs none cached for 2 threads"' \
    "info at 2 threads: $(REFUSION_CPU=avx2 OMP_NUM_THREADS=2 "$BIN" info -m "$DEMO")"
  set_table() { # c(n) = 1 + SLOPE (n - 1) for the cached table
    awk -v s="$1" '/^call-cost: / { printf "call-cost: %s 32", $2; for (i = 0; i < 32; i++) printf " %.3f", 1 + s * i; print ""; next } 1' \
      "$file" >"$file.new" && mv "$file.new" "$file"
  }
  calls() { # NAME [env...]: the demo's own settings at avx2, 1 thread
    local name=$1
    shift
    env REFUSION_CPU=avx2 "$@" "$BIN" generate -m "$DEMO" -t 1 --json -p "$q" >"$T/$name.json" 2>"$T/$name.err" ||
      bad "generate ($name): $(cat "$T/$name.err")"
    field "$T/$name.json" 'o["model_calls"], o["tokens"], o["answer_ids"]'
  }
  local ar flat steep off
  ar=$(REFUSION_CPU=avx2 "$BIN" generate -m "$DEMO" -t 1 --json -p "$q" --decoder ar | python3 -c 'import json, sys; print(json.load(sys.stdin)["answer_ids"])')
  set_table 50; steep=$(calls steep)
  set_table 0; flat=$(calls flat)
  off=$(calls off REFUSION_TUNE=off) # timed: wide calls cost more than in the flat table, so fewer drafts
  check 'python3 -c "import sys; f, s, o = (eval(a) for a in sys.argv[1:4]); a = eval(sys.argv[4])
assert f[2] == s[2] == o[2] == a, \"answers differ from AR decoding\"
assert s[0] >= s[1] - 2 and f[0] < s[0] and o[0] > f[0], (f[:2], s[:2], o[:2])" "$flat" "$steep" "$off" "$ar"' \
    "cached tables (calls, tokens): flat $flat, steep $steep, off $off, AR $ar"
  sed -i 's/^call-cost: \([0-9a-f]*\) 32 /call-cost: \1 33 /' "$file"
  calls malformed >/dev/null
  check '[ "$(grep -c "tune cache" "$T/malformed.err")" = 1 ] && grep -q "corrupt" "$T/malformed.err"' \
    "a malformed table: $(cat "$T/malformed.err")"
}
REFUSION_CPU=avx2 "$BIN" tune -m "$DEMO" --rounds 3 -t 1 >"$T/out" 2>"$T/err"
check '[ $? = 0 ] && grep -q "prefetch into L2 against L1 (tier avx2" "$T/out"' "avx2 prefetch: $(cat "$T/out" "$T/err")"
last=$(grep '^REFUSION_PREFETCH_L2=' "$T/out")
check '[ "$last" = "REFUSION_PREFETCH_L2=$(implied_l2)" ]' "prefetch: the last line '$last' is not what the rows imply ($(implied_l2)): $(cat "$T/out")"
check 'grep -q "max |L2 - L1| = 0 of" "$T/out"' "prefetch: the two levels' logits differ: $(cat "$T/out")"
# the next load applies the cache (info says the level), the environment wins over it
want=$(sed -n 's/^REFUSION_PREFETCH_L2=//p' "$T/out")
info=$("$BIN" info -m "$DEMO")
if [ "$want" = off ]; then wl="into L1 at every width"; else wl="into L2 for calls of up to $want tokens"; fi
check 'echo "$info" | grep -q "^prefetch   $wl" && echo "$info" | grep -q "^tune cache applied: "' "cache not applied ($want): $info"
info=$(REFUSION_PREFETCH_L2=3 "$BIN" info -m "$DEMO")
check 'echo "$info" | grep -q "^prefetch   into L2 for calls of up to 3 tokens"' "environment over the cache: $info"
# the stream panels: one panel per tile when it won at 1 token (its
# interval below 1) and lost clearly (interval above 1) at no width, else
# the kernels' own counts (0); the same bits either way; applied at load,
# the environment over it
implied_sp() {
  awk 'BEGIN { n = 0 } /one stream panel per tile against/ { on = 1; next } on && /^REFUSION_/ { exit }
       on && $1 ~ /^[0-9]+$/ && NF >= 6 { lo = $5; sub(/\[/, "", lo); sub(/,/, "", lo); hi = $6; sub(/\]/, "", hi)
         l[n] = lo + 0; h[n++] = hi + 0 }
       END { v = (n > 0 && h[0] < 1); for (i = 1; i < n; i++) if (l[i] > 1) v = 0; print v }' "$T/out"
}
check 'grep -q "one stream panel per tile against the kernels'"'"' own counts (tier avx2" "$T/out"' "stream panels: $(cat "$T/out")"
last=$(grep '^REFUSION_STREAM_PANELS=' "$T/out")
check '[ "$last" = "REFUSION_STREAM_PANELS=$(implied_sp)" ]' "stream panels: the last line '$last' is not what the rows imply ($(implied_sp)): $(cat "$T/out")"
check 'grep -q "max |one - own| = 0 of" "$T/out"' "stream panels: the logits differ: $(cat "$T/out")"
if [ "$(implied_sp)" = 1 ]; then wl="at most 1 weight panel per tile"; else wl="the kernels' own panels per tile"; fi
info=$("$BIN" info -m "$DEMO")
check 'echo "$info" | grep -q "^streams    $wl"' "stream panels not applied ($(implied_sp)): $info"
info=$(REFUSION_STREAM_PANELS=4 "$BIN" info -m "$DEMO")
check 'echo "$info" | grep -q "^streams    at most 4 weight panels per tile"' "environment over the cache: $info"
info=$(REFUSION_STREAM_PANELS=3 "$BIN" info -m "$DEMO")
check 'echo "$info" | grep -q "^streams    .*(REFUSION_STREAM_PANELS not 0, 1, 2 or 4: ignored)$"' "a malformed setting: $info"
info=$("$BIN" --no-tune info -m "$DEMO")
check 'echo "$info" | grep -q "^tune cache off"' "--no-tune: $info"
call_costs
run convert -m "$DEMO" -o "$T/f32" --dtype f32
REFUSION_CPU=avx2 "$BIN" tune -m "$T/f32" >"$T/out" 2>"$T/err"
check '[ $? = 0 ] && grep -q "^tier avx2: no kernel setting to tune" "$T/out" && grep -q "call cost c(n)" "$T/out"' \
  "avx2 f32: $(cat "$T/out" "$T/err")"

expect_fail 2 "-m MODEL is required" tune
expect_fail 2 "rounds" tune -m "$DEMO" --rounds 2
expect_fail 1 "" tune -m "$T/missing"

echo "cli_tune: $pass passed, $fails failed"
[ "$fails" = 0 ]
