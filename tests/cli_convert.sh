#!/usr/bin/env bash
# refusion convert: an f32 checkpoint converted to bf16 is byte-identical to
# the same random checkpoint written directly in bf16 (the writer rounds to
# nearest-even, as torch does); converting back to f32 and again to bf16 is
# a fixed point; bad input gives one error line and a non-zero exit.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_convert

"$BIN" init -o "$T/f32" --preset tiny --dtype f32 --seed 5 --std 0.5 >/dev/null
"$BIN" init -o "$T/bf16" --preset tiny --dtype bf16 --seed 5 --std 0.5 >/dev/null
"$BIN" convert -m "$T/f32" -o "$T/conv16" >/dev/null
check 'cmp -s "$T/bf16/model.safetensors" "$T/conv16/model.safetensors"' "f32 -> bf16 differs from a bf16 init"
check 'grep -q "\"torch_dtype\": \"bfloat16\"" "$T/conv16/config.json"' "the converted config does not say bf16"
"$BIN" convert -m "$T/conv16" -o "$T/back32" --dtype f32 >/dev/null
"$BIN" convert -m "$T/back32" -o "$T/again16" >/dev/null
check 'cmp -s "$T/conv16/model.safetensors" "$T/again16/model.safetensors"' "bf16 -> f32 -> bf16 is not a fixed point"
check '"$BIN" info -m "$T/back32" >/dev/null' "the converted checkpoint does not load"
a=$("$BIN" generate -m "$T/conv16" --ids 1,2,3 --mode ar -n 8 --json | grep -o '"answer_ids":\[[0-9,]*\]')
b=$("$BIN" generate -m "$T/back32" --ids 1,2,3 --mode ar -n 8 --json | grep -o '"answer_ids":\[[0-9,]*\]')
check '[ -n "$a" ] && [ "$a" = "$b" ]' "bf16 and its f32 widening generate different ids: $a / $b"

# logits: -n greedy steps (also --n-predict), one row of logits per step
run logits -m "$T/conv16" --ids "1 2 3" -n 2
check '[ $rc = 0 ] && [ "$(grep -o "\"greedy\": \[[0-9]*, [0-9]*\]" "$T/out")" != "" ]' "logits -n 2: $rc $err"
run logits -m "$T/conv16" --ids "1 2 3" --n-predict=2
check '[ $rc = 0 ] && cmp -s "$T/out" <("$BIN" logits -m "$T/conv16" --ids "1 2 3" -n 2)' "--n-predict=2 differs from -n 2"
expect_fail 2 "-n expects an integer in [1, 65536], got '0'" logits -m "$T/conv16" --ids 1 -n 0
expect_fail 2 "--ids is required" logits -m "$T/conv16"

expect_fail 1 "missing" convert -m "$T/missing" -o "$T/x"
expect_fail 2 "--dtype must be" convert -m "$T/f32" -o "$T/x" --dtype int8
expect_fail 2 "-m IN and -o OUT are required" convert -m "$T/f32"
expect_fail 2 "unknown option '--bogus'" convert -m "$T/f32" -o "$T/x" --bogus
echo "cli_convert: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
