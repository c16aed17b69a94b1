#!/usr/bin/env bash
# cli_refusals.sh - inputs that were once accepted or answered unclearly,
# each now one "refusion: ..." line and a non-zero exit:
#  - `info` on a checkpoint whose tokenizer.json is garbage;
#  - a config.json whose rope_theta overflows float (1e308);
#  - `train --resume` in a directory the run never saved to.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_refusals

run init -o "$T/m" --preset tiny --seed 1 --tokenizer "$SRC/models/refusion-demo/tokenizer.json"
[ "$rc" -eq 0 ] && ok || bad "init: $err"
run info -m "$T/m"
[ "$rc" -eq 0 ] && ok || bad "info on a good checkpoint: $rc $err"

cp -r "$T/m" "$T/badtok"
printf '{"model": {"type": "BPE", "vocab": 17}}' >"$T/badtok/tokenizer.json"
expect_fail 1 "tokenizer.json" info -m "$T/badtok"
printf '\x00\xff garbage' >"$T/badtok/tokenizer.json"
expect_fail 1 "tokenizer.json" info -m "$T/badtok"

cp -r "$T/m" "$T/theta"
sed -i 's/"rope_theta": *[0-9.e+]*/"rope_theta": 1e308/' "$T/theta/config.json"
grep -q '"rope_theta": 1e308' "$T/theta/config.json" && ok || bad "could not set rope_theta"
expect_fail 1 '"rope_theta" must be a number > 1 and at most' info -m "$T/theta"

printf '{"prompt": "a", "response": "b"}\n' >"$T/data.jsonl"
mkdir -p "$T/run"
expect_fail 1 "holds no checkpoint yet" train --data "$T/data.jsonl" -o "$T/run" --resume \
  --tokenizer "$SRC/models/refusion-demo/tokenizer.json"

echo "cli_refusals: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
