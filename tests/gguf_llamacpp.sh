#!/usr/bin/env bash
# gguf_llamacpp.sh - GGUF files written by `refusion convert` (the shipped
# demo model in bf16, f16, f32, q8_0, q4_0) read by independent readers:
#  1. @huggingface/gguf: every metadata key and value, tensor name, type,
#     shape, offset and the tensor bytes agree with what the source
#     checkpoint says (scripts/gguf/check_gguf.mjs, which re-quantises Q8_0 /
#     Q4_0 with ggml's reference formulas);
#  2. llama.cpp itself (npm node-llama-cpp, prebuilt binaries, CPU):
#     it loads every file; it tokenizes like our tokenizer read from the same
#     file; its greedy continuation equals ours and its logits agree within
#     a stated tolerance (max |ours - llama.cpp| / max |logit| over 8 steps).
# Skipped (exit 77, a SKIPPED line) only when the npm packages cannot be
# installed; the install is cached in .deps/npm-gguf.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup gguf_llama
NPM=$(bash "$SRC/scripts/gguf/fetch_ref.sh") || {
  echo "gguf_llamacpp: SKIPPED: node-llama-cpp / @huggingface/gguf could not be installed from npm"; exit 77; }
G=$SRC/scripts/gguf
DEMO=$SRC/models/refusion-demo

for dt in bf16 f16 f32 q8_0 q4_0; do
  "$BIN" convert -m "$DEMO" -o "$T/demo-$dt.gguf" --dtype $dt >/dev/null || { bad "convert --dtype $dt"; continue; }
  node "$G/check_gguf.mjs" "$NPM" "$T/demo-$dt.gguf" "$DEMO" $dt refusion-demo || bad "@huggingface/gguf check of $dt"
done

# tokenization: llama.cpp's reading of our tokenizer metadata = ours
printf '%s\n' 'def f(x): return 3 * x' '<|im_start|>user' 'Tom has 12 apples. He buys 7 more.<|im_end|>' \
  '   spaces  and	tabs  ' 'héllo wörld 123456 {"a": [1, 2]}' "it's   <think>x</think> <|mask|><|beginoftext|>" > "$T/text"
node "$G/llamacpp.mjs" tokenize "$NPM" "$T/demo-f32.gguf" "$T/text" > "$T/tok.llama" || bad "llama.cpp tokenize"
while IFS= read -r line; do "$BIN" tokenize -m "$T/demo-f32.gguf" "$line"; done < "$T/text" > "$T/tok.ours"
cmp -s "$T/tok.llama" "$T/tok.ours" || { bad "token ids differ (llama.cpp vs ours):"; diff "$T/tok.llama" "$T/tok.ours" >&2; }

# logits and greedy continuation after a chat prompt
IDS=$("$BIN" tokenize -m "$T/demo-f32.gguf" "<|im_start|>user
Write a Python function f(x) that does this: start from x, add 5, square it.<|im_end|>
<|im_start|>assistant
")
# tolerance per file type: f32 differs only in summation order; bf16 and
# q8_0 also in how activations are rounded (llama.cpp: bf16 / q8_0 blocks)
for spec in f32:0.002 bf16:0.005 q8_0:0.02 q4_0:0.02; do
  dt=${spec%%:*} tol=${spec#*:}
  "$BIN" logits -m "$T/demo-$dt.gguf" --ids "$IDS" -n 8 > "$T/ours.$dt" || { bad "refusion logits $dt"; continue; }
  node "$G/llamacpp.mjs" logits "$NPM" "$T/demo-$dt.gguf" "$IDS" 8 > "$T/llama.$dt" || { bad "llama.cpp on $dt"; continue; }
  node -e '
    const fs = require("fs");
    const [a, b, tol, dt] = [JSON.parse(fs.readFileSync(process.argv[1])), JSON.parse(fs.readFileSync(process.argv[2])), Number(process.argv[3]), process.argv[4]];
    let err = 0, top = 0;
    a.logits.forEach((row, k) => row.forEach((v, j) => { err = Math.max(err, Math.abs(v - b.logits[k][j])); top = Math.max(top, Math.abs(b.logits[k][j])); }));
    const same = JSON.stringify(a.greedy) === JSON.stringify(b.greedy);
    console.log(`${dt}: greedy ${same ? "identical" : "DIFFERENT"} (${a.greedy.join(" ")}), max |ours - llama.cpp| = ${err.toFixed(5)}, / max |logit| = ${(err / top).toFixed(5)} (tolerance ${tol})`);
    if (!same) console.log(`   llama.cpp: ${b.greedy.join(" ")}`);
    process.exit(same && err / top <= tol ? 0 : 1);' "$T/ours.$dt" "$T/llama.$dt" $tol $dt || bad "$dt: ours and llama.cpp disagree"
done

[ $fails -eq 0 ] || { echo "gguf_llamacpp: $fails failure(s)" >&2; exit 1; }
echo "gguf_llamacpp: OK"
