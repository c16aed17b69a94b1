#!/usr/bin/env bash
# cli_tokenizer.sh - `refusion tokenize` and `refusion tokenizer-train` from
# the command line: round trips, the chat template, and bad input (invalid
# UTF-8, malformed tokenizer.json, bad ids) giving one clear error line and a
# non-zero status, never a crash. Needs no network: it trains its own small
# tokenizer.
set -uo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_tokenizer
WORK=$T

# expect_error NAME PATTERN CMD...: status 1, exactly one stderr line, matching
# the extended regular expression PATTERN
expect_error() {
  local name=$1 pat=$2; shift 2
  "$@" > "$WORK/out" 2> "$WORK/err"
  local rc=$? lines
  lines=$(wc -l < "$WORK/err")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -qE "$pat" "$WORK/err"; then
    bad "$name: status $rc, stderr ($lines lines): $(head -c 300 "$WORK/err")"
  else
    ok
  fi
}

# a small corpus and tokenizer
for i in $(seq 1 300); do
  echo "The model number $i answers the question about diffusion; it's fine. Grüße, 你好 $((i * 7))."
  printf 'def f%d(x):\n    return x * %d\n' "$i" "$i"
done > "$WORK/corpus.txt"
printf '{"prompt": "what is 2+2?", "answer": ["four", "4"]}\n{"prompt": "hello there"}\n' > "$WORK/data.jsonl"
"$BIN" tokenizer-train --input "$WORK/corpus.txt" --input "$WORK/data.jsonl" --vocab 600 -o "$WORK/tok" 2> "$WORK/train.err" \
  && ok "tokenizer-train: $(cat "$WORK/train.err")" || bad "tokenizer-train: $(cat "$WORK/train.err")"
TOK=$WORK/tok

"$BIN" tokenize --help > /dev/null && ok "--help" || bad "--help"
text=$'Hello wörld, it\'s 2+2=4!\n\t<|im_end|> 你好 😀'
ids=$("$BIN" tokenize -m "$TOK" "$text") || bad "encode"
back=$("$BIN" tokenize -m "$TOK" --decode "$ids"; printf x)
[ "${back%x}" = "$text" ] && ok "decode(encode(s)) == s ($(echo "$ids" | wc -w) ids)" || bad "round trip: '${back%x}'"
skip=$("$BIN" tokenize -m "$TOK" --decode --skip-special "$ids"; printf x)
[ "${skip%x}" = $'Hello wörld, it\'s 2+2=4!\n\t 你好 😀' ] && ok "--skip-special" || bad "--skip-special: '${skip%x}'"
printf '%s' "$text" > "$WORK/in.txt"
[ "$("$BIN" tokenize -m "$TOK" -f "$WORK/in.txt")" = "$ids" ] && ok "--file" || bad "--file"
[ "$("$BIN" tokenize -m "$TOK" < "$WORK/in.txt")" = "$ids" ] && ok "stdin" || bad "stdin"
[ "$("$BIN" tokenize -m "$TOK/tokenizer.json" "$text")" = "$ids" ] && ok "-m tokenizer.json" || bad "-m tokenizer.json"

chat=$("$BIN" tokenize -m "$TOK" --chat --system "Be brief." --user "Hi" --no-think --text; printf x)
want=$'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
[ "${chat%x}" = "$want" ] && ok "--chat --no-think --text" || bad "chat text: '${chat%x}'"
echo '[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nHello"}]' > "$WORK/chat.json"
chat=$("$BIN" tokenize -m "$TOK" --chat -f "$WORK/chat.json" --no-generation-prompt --text; printf x)
want=$'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\nHello<|im_end|>\n'
[ "${chat%x}" = "$want" ] && ok "--chat from JSON" || bad "chat JSON: '${chat%x}'"
cids=$("$BIN" tokenize -m "$TOK" --chat -f "$WORK/chat.json" --no-generation-prompt --json)
[ "$(printf '%s' "${chat%x}" | "$BIN" tokenize -m "$TOK" --json)" = "$cids" ] && ok "--chat ids == encode(template text)" || bad "chat ids"

# --info --json: the same figures as --info, as one JSON object (parsed by node)
info=$("$BIN" tokenize -m "$TOK" --info)
ij=$("$BIN" tokenize -m "$TOK" --info --json | node -e "
const d = JSON.parse(require('fs').readFileSync(0, 'utf8'));
console.log(['vocab_size ' + d.vocab_size, 'eos ' + d.eos.id + ' ' + d.eos.piece, 'mask ' + d.mask.id + ' ' + d.mask.piece,
             'special ' + d.special.join(' ')].join('\\n'))" 2>&1)
[ -n "$info" ] && [ "$ij" = "$info" ] && ok "--info --json" || bad "--info --json: '$ij' vs '$info'"

# bad input: one clear line, status 1
printf 'ab\xffcd' > "$WORK/bad.txt"
expect_error "invalid UTF-8 (stdin)" '^refusion: stdin: invalid UTF-8 at byte offset 2 ' "$BIN" tokenize -m "$TOK" < "$WORK/bad.txt"
expect_error "invalid UTF-8 (file)" "^refusion: $WORK/bad.txt: invalid UTF-8 at byte offset 2 " "$BIN" tokenize -m "$TOK" -f "$WORK/bad.txt"
expect_error "truncated UTF-8" 'invalid UTF-8 at byte offset 3 ' "$BIN" tokenize -m "$TOK" $'abc\xe4\xbd'
expect_error "id out of range" 'argument: token id 999999 is not in the vocabulary' "$BIN" tokenize -m "$TOK" --decode "1 2 999999"
expect_error "not ids" 'expected token ids' "$BIN" tokenize -m "$TOK" --decode "1 two"
expect_error "chat not JSON" 'chat input is not valid JSON' "$BIN" tokenize -m "$TOK" --chat '[{"role":'
expect_error "chat without content" "has no attribute 'content'" "$BIN" tokenize -m "$TOK" --chat '[{"role": "user"}]'
mkdir -p "$WORK/m1" "$WORK/m2" "$WORK/m3" "$WORK/m4"
echo 'not json {' > "$WORK/m1/tokenizer.json"
echo '{"model": {"type": "BPE", "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}' > "$WORK/m2/tokenizer.json"
echo '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}, "pre_tokenizer": {"type": "ByteLevel"}}' > "$WORK/m3/tokenizer.json"
head -c 5000 "$TOK/tokenizer.json" > "$WORK/m4/tokenizer.json"
expect_error "tokenizer.json not JSON" "^refusion: $WORK/m1/tokenizer.json: not valid JSON: line 1" "$BIN" tokenize -m "$WORK/m1" hi
expect_error "no model.vocab" "^refusion: $WORK/m2/tokenizer.json: model.vocab missing" "$BIN" tokenize -m "$WORK/m2" hi
expect_error "merge of unknown tokens" "^refusion: $WORK/m3/tokenizer.json: model.merges\[0\] .* not in model.vocab" "$BIN" tokenize -m "$WORK/m3" hi
expect_error "truncated tokenizer.json" "^refusion: $WORK/m4/tokenizer.json: not valid JSON" "$BIN" tokenize -m "$WORK/m4" hi
expect_error "missing model" "^refusion: $WORK/nope: no such file" "$BIN" tokenize -m "$WORK/nope" hi
expect_error "train: invalid UTF-8 corpus" "^refusion: $WORK/bad.txt: invalid UTF-8 at byte offset 2" "$BIN" tokenizer-train --input "$WORK/bad.txt" -o "$WORK/t2"
echo '{"a": [1, "x"' > "$WORK/broken.json"
expect_error "train: broken JSON input" "^refusion: $WORK/broken.json: line 2: not valid JSON" "$BIN" tokenizer-train --input "$WORK/broken.json" -o "$WORK/t3"
printf '{"text": "ok"}\n{"text": 5}\n' | "$BIN" tokenize -m "$TOK" --jsonl > "$WORK/out" 2> "$WORK/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$WORK/out")" -eq 2 ] && grep -q '"ids"' "$WORK/out" && grep -q 'line 2' "$WORK/err" \
  && ok "--jsonl: a bad line is reported, the rest answered" || bad "--jsonl bad line: rc $rc $(cat "$WORK/err")"

# the option table: a chat built from --system / --user / --assistant keeps
# their order; one TEXT at most; options refused with one line, exit 2
chat=$("$BIN" tokenize -m "$TOK" --user "U1" --assistant "A1" --user "U2" --no-generation-prompt --text; printf x)
want=$'<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n'
[ "${chat%x}" = "$want" ] && ok || bad "--user --assistant --user order: '${chat%x}'"
expect_fail 2 "unexpected argument 'b'" tokenize -m "$TOK" a b
expect_fail 2 "unknown option '--bogus'" tokenize -m "$TOK" --bogus a
expect_fail 2 "--user needs a value" tokenize -m "$TOK" --user
expect_fail 2 "-m PATH" tokenize hello
expect_fail 2 "--vocab expects an integer in [1, 4194304], got '0'" tokenizer-train --input "$WORK/corpus.txt" --vocab 0 -o "$WORK/t4"
expect_fail 2 "--input FILE and -o DIR are required" tokenizer-train --vocab 300 -o "$WORK/t4"

echo "cli_tokenizer: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
