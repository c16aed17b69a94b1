#!/usr/bin/env bash
# gguf_kquant.sh - GGUF files made by llama.cpp's own quantizer
# (llama_model_quantize of npm node-llama-cpp's prebuilt libllama, through
# scripts/gguf/fetch_quantize.sh) at the common ftypes, read by refusion:
#  1. every file loads, and refusion's greedy continuation after a chat
#     prompt equals llama.cpp's (node-llama-cpp) on the same file, logits
#     within a stated tolerance (max |ours - llama.cpp| / max |logit| over 8
#     steps: llama.cpp quantizes the activations of K-quant dots per 256
#     (Q8_K), refusion per 32, so the two differ by that rounding);
#     the demo model (every row a multiple of 256: the K-quant blocks
#     themselves) and the demo grown to hidden 320 / ffn 800, where
#     llama.cpp falls back to Q5_0, Q5_1, Q8_0, Q4_0 and IQ4_NL for rows
#     that are not whole 256-blocks;
#  2. dequantization bit-identical to llama.cpp's: each file converted to
#     F32 by `refusion convert` and by llama_model_quantize (ftype ALL_F32,
#     requantize allowed: ggml's own dequantizers) holds the same bytes;
#  3. `refusion convert --dtype q4_k_m|q6_k` writes the bytes llama-quantize
#     writes from the same file (demo and grown shapes), and llama.cpp runs
#     the file as refusion does;
#  4. a tensor of a ggml type refusion does not read is refused with the
#     type's name and what to do.
# Skipped (exit 77) only when node-llama-cpp cannot be installed from npm.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup gguf_kquant
NPM=$(bash "$SRC/scripts/gguf/fetch_ref.sh") && Q=$(bash "$SRC/scripts/gguf/fetch_quantize.sh") || {
  echo "gguf_kquant: SKIPPED: node-llama-cpp could not be installed from npm"; exit 77; }
G=$SRC/scripts/gguf
DEMO=$SRC/models/refusion-demo

"$BIN" convert -m "$DEMO" -o "$T/demo.gguf" --dtype f16 >/dev/null || { bad "convert --dtype f16"; exit 1; }
"$BIN" grow -m "$DEMO" -o "$T/g320.gguf" --hidden 320 --ffn 800 --dtype f16 --no-progress >/dev/null ||
  { bad "grow to hidden 320"; exit 1; }
IDS=$("$BIN" tokenize -m "$T/demo.gguf" "<|im_start|>user
Write a Python function f(x) that does this: start from x, add 5, square it.<|im_end|>
<|im_start|>assistant
")

# llama.cpp's enum llama_ftype
FTYPES="Q4_K_M:15 Q5_K_M:17 Q6_K:18 Q3_K_M:12 Q2_K:10 IQ4_NL:25 IQ4_XS:30 Q4_0:2 Q4_1:3 Q5_0:8 Q5_1:9 Q4_K_S:14 Q5_K_S:16"
TOL=0.02
compare() { # ours.json reference.json label tolerance
  node -e '
    const fs = require("fs");
    const [a, b, tol, what] = [JSON.parse(fs.readFileSync(process.argv[1])), JSON.parse(fs.readFileSync(process.argv[2])), Number(process.argv[3]), process.argv[4]];
    let err = 0, top = 0;
    a.logits.forEach((row, k) => row.forEach((v, j) => { err = Math.max(err, Math.abs(v - b.logits[k][j])); top = Math.max(top, Math.abs(b.logits[k][j])); }));
    const same = JSON.stringify(a.greedy) === JSON.stringify(b.greedy);
    console.log(`${what}: greedy ${same ? "identical" : "DIFFERENT"}, max |ours - llama.cpp| / max |logit| = ${(err / top).toFixed(5)} (tolerance ${tol})`);
    process.exit(same && err / top <= tol ? 0 : 1);' "$1" "$2" "$4" "$3"
}

# the grown shape: the ftypes whose mixes fall back (every fallback type)
FALLBACK="Q4_K_M:15 Q5_K_S:16 Q6_K:18 Q3_K_M:12 Q2_K:10 IQ4_XS:30"
for base in demo g320; do
  specs=$FTYPES
  [ $base = g320 ] && specs=$FALLBACK
  for spec in $specs; do
    name=${spec%%:*} ft=${spec#*:} f=$T/$base-${spec%%:*}.gguf
    "$Q" "$T/$base.gguf" "$f" "$ft" >"$T/q.log" 2>&1 || { bad "llama.cpp quantize $base $name: $(tail -n 2 "$T/q.log")"; continue; }
    types=$(grep -o 'converting to [a-zA-Z0-9_]*' "$T/q.log" | sed 's/converting to //' | sort | uniq -c | tr -s ' \n' ' ')
    "$BIN" logits -m "$f" --ids "$IDS" -n 8 >"$T/ours.json" 2>"$T/err" || { bad "refusion cannot run $base $name ($types): $(cat "$T/err")"; continue; }
    node "$G/llamacpp.mjs" logits "$NPM" "$f" "$IDS" 8 >"$T/llama.json" || { bad "llama.cpp cannot run $base $name"; continue; }
    if compare "$T/ours.json" "$T/llama.json" "$base $name ($types) vs llama.cpp" $TOL; then ok; else
      bad "$base $name: ours and llama.cpp disagree"; fi
    # the same weights dequantized to f32: the quantized kernels differ from
    # the f32 forward by their activation rounding only (0.003-0.006
    # measured; a level off by one in a quarter of Q6_K's weights: 0.015)
    "$BIN" convert -m "$f" -o "$T/ours-f32.gguf" --dtype f32 >/dev/null || { bad "convert $base $name to f32"; continue; }
    "$BIN" logits -m "$T/ours-f32.gguf" --ids "$IDS" -n 8 >"$T/f32.json" || { bad "refusion on $base $name as f32"; continue; }
    if compare "$T/ours.json" "$T/f32.json" "$base $name vs its f32 dequantization" 0.008; then ok; else
      bad "$base $name: the quantized kernels and the dequantized f32 forward disagree"; fi
    # dequantization: ours and ggml's give the same f32 bytes
    "$Q" "$f" "$T/llama-f32.gguf" 0 requant >"$T/q.log" 2>&1 || { bad "llama.cpp dequantize $base $name"; continue; }
    if python3 "$G/tensors_equal.py" "$T/ours-f32.gguf" "$T/llama-f32.gguf" >"$T/eq" 2>&1; then ok; else
      bad "$base $name: dequantized weights differ from ggml's: $(tail -n 3 "$T/eq")"; fi
  done
done

# writing: `refusion convert --dtype q4_k_m|q6_k` holds the bytes
# llama-quantize writes from the same f16 file (its mixes' per-tensor types
# and fallbacks included), and llama.cpp runs refusion's file as refusion does
for base in demo g320; do
  for spec in q4_k_m:15 q6_k:18; do
    dt=${spec%%:*}
    "$BIN" convert -m "$T/$base.gguf" -o "$T/w-$dt.gguf" --dtype $dt >/dev/null || { bad "convert $base --dtype $dt"; continue; }
    "$Q" "$T/$base.gguf" "$T/l-$dt.gguf" "${spec#*:}" >"$T/q.log" 2>&1 || { bad "llama.cpp quantize $base $dt"; continue; }
    if python3 "$G/tensors_equal.py" "$T/w-$dt.gguf" "$T/l-$dt.gguf" >"$T/eq" 2>&1; then ok; else
      bad "$base --dtype $dt: tensors differ from llama-quantize's: $(tail -n 3 "$T/eq")"; fi
  done
done
"$BIN" logits -m "$T/w-q4_k_m.gguf" --ids "$IDS" -n 8 >"$T/ours.json" && node "$G/llamacpp.mjs" logits "$NPM" "$T/w-q4_k_m.gguf" "$IDS" 8 >"$T/llama.json" &&
  compare "$T/ours.json" "$T/llama.json" "refusion-written g320 q4_k_m vs llama.cpp" $TOL && ok || bad "refusion's q4_k_m file: llama.cpp disagrees"

# a type refusion does not read (IQ2_XXS written into a tensor's type field)
python3 -c '
import struct, sys
sys.path.insert(0, sys.argv[3])
from tensors_equal import Reader
data = bytearray(open(sys.argv[1], "rb").read())
r = Reader(bytes(data)); r.p = 8
nt, nkv = r.take("Q"), r.take("Q")
for _ in range(nkv):
    r.string(); r.value(r.take("I"))
for _ in range(nt):
    name, nd = r.string(), r.take("I")
    for _ in range(nd): r.take("Q")
    if name == "blk.1.ffn_up.weight":
        struct.pack_into("<I", data, r.p, 16)
    r.take("I"); r.take("Q")
open(sys.argv[2], "wb").write(data)' "$T/demo-Q4_K_M.gguf" "$T/iq2.gguf" "$G"
expect_fail 1 "ggml type IQ2_XXS is not supported (re-quantize" info -m "$T/iq2.gguf"

[ $fails -eq 0 ] || { echo "gguf_kquant: $fails failure(s), $pass passed" >&2; exit 1; }
echo "gguf_kquant: OK ($pass checks)"
