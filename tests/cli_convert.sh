#!/usr/bin/env bash
# refusion convert: an f32 checkpoint converted to bf16 is byte-identical to
# the same random checkpoint written directly in bf16 (the writer rounds to
# nearest-even, as torch does); converting back to f32 and again to bf16 is
# a fixed point; bad input gives one error line and a non-zero exit.
set -u
R=${REFUSION_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=$((fail + 1)); fi; }

"$R" init -o "$T/f32" --preset tiny --dtype f32 --seed 5 --std 0.5 >/dev/null
"$R" init -o "$T/bf16" --preset tiny --dtype bf16 --seed 5 --std 0.5 >/dev/null
"$R" convert -m "$T/f32" -o "$T/conv16" >/dev/null
check "f32 -> bf16 equals a bf16 init" 'cmp -s "$T/bf16/model.safetensors" "$T/conv16/model.safetensors"'
check "config says bf16" 'grep -q "\"torch_dtype\": \"bfloat16\"" "$T/conv16/config.json"'
"$R" convert -m "$T/conv16" -o "$T/back32" --dtype f32 >/dev/null
"$R" convert -m "$T/back32" -o "$T/again16" >/dev/null
check "bf16 -> f32 -> bf16 is a fixed point" 'cmp -s "$T/conv16/model.safetensors" "$T/again16/model.safetensors"'
check "converted checkpoint loads" '"$R" info -m "$T/back32" >/dev/null'
a=$("$R" generate -m "$T/conv16" --ids 1,2,3 --mode ar -n 8 --json | grep -o '"answer_ids":\[[0-9,]*\]')
b=$("$R" generate -m "$T/back32" --ids 1,2,3 --mode ar -n 8 --json | grep -o '"answer_ids":\[[0-9,]*\]')
check "bf16 and its f32 widening generate the same ids" '[ -n "$a" ] && [ "$a" = "$b" ]'

err=$("$R" convert -m "$T/missing" -o "$T/x" 2>&1 >/dev/null); rc=$?
check "missing input: exit 1, one line" '[ $rc = 1 ] && [ $(printf "%s\n" "$err" | wc -l) = 1 ]'
err=$("$R" convert -m "$T/f32" -o "$T/x" --dtype int8 2>&1 >/dev/null); rc=$?
check "bad dtype: exit 2, one line" '[ $rc = 2 ] && [ $(printf "%s\n" "$err" | wc -l) = 1 ]'
echo "cli_convert: $((7 - fail)) passed, $fail failed"
[ $fail = 0 ]
