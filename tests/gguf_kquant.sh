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
#  3. `refusion convert --dtype X` writes the bytes llama-quantize writes
#     from the same file for every file type X it takes (Q4_K_M, Q4_K_S,
#     Q5_K_M, Q5_K_S, Q6_K, Q3_K_S/M/L, Q2_K, IQ4_XS, IQ4_NL, Q4_0, Q4_1,
#     Q5_0, Q5_1, Q8_0; demo, grown and a deeper GQA-4 untied shape; also
#     from a quantised file), and llama.cpp runs the files as refusion does;
#  4. `refusion info` counts each file's tensors per type as llama-quantize
#     reports them and prints its bits per weight; --verify finds an
#     infinite block scale;
#  5. a tensor of a ggml type refusion does not read, and a K-quant file cut
#     short, are refused with one error line (the type named, and what to
#     do).
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
    # info: as many tensors of each type as llama-quantize says it wrote,
    # and the file's bits per weight (every tensor's bytes over its weights)
    "$BIN" info -m "$f" >"$T/info" 2>"$T/err" || { bad "info $base $name: $(cat "$T/err")"; continue; }
    bpw=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[2]); from tensors_equal import tensors
t = tensors(sys.argv[1]).values(); n = 0; b = 0
for ne, ty, data in t:
    w = 1
    for d in ne: w *= d
    n += w; b += len(data)
print(f"{8 * b / n:.2f}")' "$f" "$G")
    line=$(grep '^tensors' "$T/info")
    set -- $types
    while [ $# -ge 2 ]; do
      echo "$line" | grep -Eq "[ ,]$1 $(echo "$2" | tr a-z A-Z)[,;]" || bad "info $base $name: '$line' lacks $1 $2"
      shift 2
    done
    echo "$line" | grep -q "; $bpw bits per weight" && ok || bad "info $base $name: '$line', want $bpw bits per weight"
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

# writing: `refusion convert --dtype X` holds the bytes llama-quantize
# writes from the same f16 file for every file type X (its mixes'
# per-tensor types and fallbacks included): the demo, the grown shape
# (rows not whole 256-blocks) and a deeper model with 4 query heads per KV
# head and an output matrix of its own (the rules by layer, by GQA and for
# an untied token_embd)
"$BIN" init -o "$T/g4" --tokenizer "$DEMO/tokenizer.json" --hidden 256 --layers 18 --heads 8 --kv-heads 2 \
  --head-dim 32 --ffn 512 --vocab 850 --tied 0 >/dev/null && "$BIN" convert -m "$T/g4" -o "$T/g4.gguf" --dtype f16 >/dev/null ||
  bad "init / convert the GQA-4 untied model"
WRITE="q4_k_m:15 q4_k_s:14 q5_k_m:17 q5_k_s:16 q6_k:18 q3_k_s:11 q3_k_m:12 q3_k_l:13 q2_k:10 iq4_xs:30 iq4_nl:25 q4_0:2 q4_1:3 q5_0:8 q5_1:9 q8_0:7"
for base in demo g320 g4; do
  for spec in $WRITE; do
    dt=${spec%%:*}
    "$BIN" convert -m "$T/$base.gguf" -o "$T/w-$dt.gguf" --dtype $dt >/dev/null || { bad "convert $base --dtype $dt"; continue; }
    "$Q" "$T/$base.gguf" "$T/l-$dt.gguf" "${spec#*:}" >"$T/q.log" 2>&1 || { bad "llama.cpp quantize $base $dt"; continue; }
    if python3 "$G/tensors_equal.py" "$T/w-$dt.gguf" "$T/l-$dt.gguf" >"$T/eq" 2>&1; then ok; else
      bad "$base --dtype $dt: tensors differ from llama-quantize's: $(tail -n 3 "$T/eq")"; fi
  done
done
# from a quantised file: dequantised, then quantised again, as
# llama-quantize --allow-requantize does
"$BIN" convert -m "$T/demo-Q4_K_M.gguf" -o "$T/w-re.gguf" --dtype iq4_xs >/dev/null &&
  "$Q" "$T/demo-Q4_K_M.gguf" "$T/l-re.gguf" 30 requant >"$T/q.log" 2>&1 &&
  python3 "$G/tensors_equal.py" "$T/w-re.gguf" "$T/l-re.gguf" >"$T/eq" 2>&1 && ok ||
  bad "Q4_K_M file to --dtype iq4_xs: differs from llama-quantize's: $(tail -n 3 "$T/eq")"
# llama.cpp runs refusion's files (the grown shape) as refusion does
for dt in q4_k_m iq4_xs; do
  "$BIN" convert -m "$T/g320.gguf" -o "$T/w-$dt.gguf" --dtype $dt >/dev/null || { bad "convert g320 $dt"; continue; }
  "$BIN" logits -m "$T/w-$dt.gguf" --ids "$IDS" -n 8 >"$T/ours.json" && node "$G/llamacpp.mjs" logits "$NPM" "$T/w-$dt.gguf" "$IDS" 8 >"$T/llama.json" &&
    compare "$T/ours.json" "$T/llama.json" "refusion-written g320 $dt vs llama.cpp" $TOL && ok || bad "refusion's $dt file: llama.cpp disagrees"
done

# a type refusion does not read (IQ2_XXS written into a tensor's type field)
python3 -c '
import struct, sys
sys.path.insert(0, sys.argv[3])
from tensors_equal import tensor_info
data = bytearray(open(sys.argv[1], "rb").read())
at, _, _ = tensor_info(bytes(data), "blk.1.ffn_up.weight")
struct.pack_into("<I", data, at, 16)
open(sys.argv[2], "wb").write(data)' "$T/demo-Q4_K_M.gguf" "$T/iq2.gguf" "$G"
expect_fail 1 "ggml type IQ2_XXS is not supported (re-quantize" info -m "$T/iq2.gguf"

# info --verify dequantizes the blocks: an infinite f16 scale (d of the
# second Q4_K block of blk.1.ffn_up: weights 256..511) is found where it
# is, the file as written passes
python3 -c '
import sys
sys.path.insert(0, sys.argv[3])
from tensors_equal import tensor_info
data = bytearray(open(sys.argv[1], "rb").read())
_, off, base = tensor_info(bytes(data), "blk.1.ffn_up.weight")
data[base + off + 144:base + off + 146] = b"\x00\x7c"
open(sys.argv[2], "wb").write(data)' "$T/demo-Q4_K_M.gguf" "$T/inf.gguf" "$G"
"$BIN" info --verify -m "$T/demo-Q4_K_M.gguf" >/dev/null 2>"$T/err" && ok || bad "info --verify on the Q4_K_M file: $(cat "$T/err")"
expect_fail 1 "a weight matrix of layer 1 has a non-finite value at element 256" info --verify -m "$T/inf.gguf"

# a K-quant file cut short: one error line naming the tensor, no crash
head -c $(( $(wc -c <"$T/demo-Q4_K_M.gguf") * 3 / 4 )) "$T/demo-Q4_K_M.gguf" >"$T/cut.gguf"
expect_fail 1 "run past the end of the file" info -m "$T/cut.gguf"

[ $fails -eq 0 ] || { echo "gguf_kquant: $fails failure(s), $pass passed" >&2; exit 1; }
echo "gguf_kquant: OK ($pass checks)"
