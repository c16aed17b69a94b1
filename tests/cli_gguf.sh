#!/usr/bin/env bash
# cli_gguf.sh - GGUF through the CLI, no network needed:
#  - the demo model converted to bf16 GGUF gives the same logits (bit for
#    bit), the same ReFusion and AR answers and the same tokenization and
#    chat prompt as its safetensors checkpoint, with -m FILE.gguf in
#    generate, tokenize, logits, info, eval;
#  - GGUF -> safetensors (bf16) again: the same logits; q8_0 / q4_0 files
#    load and decode; a q8_0 file as safetensors holds its dequantised
#    weights; bad option combinations are refused;
#  - corrupted files (truncated, bad magic, huge counts, offsets past the end,
#    unknown types, misaligned) and a header fuzz: exit 1 with one line
#    "refusion: ..." and never a crash.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_gguf
DEMO=$SRC/models/refusion-demo
G=$T/demo.gguf

"$BIN" convert -m "$DEMO" -o "$G" --dtype bf16 >/dev/null || bad "convert to bf16 GGUF"
IDS="845 117 115 312 10 344 257 414 412 275 325"
"$BIN" logits -m "$DEMO" --ids "$IDS" -n 4 > "$T/l.st" || bad "logits (safetensors)"
"$BIN" logits -m "$G" --ids "$IDS" -n 4 > "$T/l.gguf" || bad "logits (gguf)"
cmp -s "$T/l.st" "$T/l.gguf" || bad "bf16 GGUF logits differ from the safetensors checkpoint's"
# each output row is one thread's whole dot product: the thread count changes nothing
"$BIN" logits -m "$G" --ids "$IDS" -n 4 --threads 1 > "$T/l.t1" || bad "logits --threads 1"
cmp -s "$T/l.gguf" "$T/l.t1" || bad "logits with --threads 1 differ from the default threads'"
[ "$(wc -c < "$T/l.st")" -gt 10000 ] || bad "logits output too short"

# answers: everything but the timings must be equal
strip() { sed -E 's/"(tokens_per_s|wall_s|[a-z_]*_ms|[a-z_]*time[a-z_]*|seconds)": ?[0-9.e+-]+//g'; }
P="Write a Python function f(x) that does this: start from x, multiply by 3, then add 2."
# the same settings on both sides: the directory's generation_config.json
# (the demo's rolling slot) has no counterpart in the .gguf file
for mode in refusion ar; do
  "$BIN" generate -m "$DEMO" -p "$P" --mode $mode -n 32 --slot-size 8 --blocks 2 --generation-config none --json 2>/dev/null | strip > "$T/g.st"
  "$BIN" generate -m "$G" -p "$P" --mode $mode -n 32 --slot-size 8 --blocks 2 --generation-config none --json 2>/dev/null | strip > "$T/g.gguf"
  grep -Eq '"answer_ids": ?\[[0-9]' "$T/g.st" || bad "generate --mode $mode produced no answer"
  cmp -s "$T/g.st" "$T/g.gguf" || { bad "generate --mode $mode differs between safetensors and GGUF"; diff "$T/g.st" "$T/g.gguf" | head -5 >&2; }
done
for text in "def f(x): return 3 * x" "<|mask|><|beginoftext|> héllo  wörld 12345" "Tom has 12 apples.<|im_end|>"; do
  [ "$("$BIN" tokenize -m "$DEMO" "$text")" = "$("$BIN" tokenize -m "$G" "$text")" ] || bad "tokenize '$text' differs"
done
[ "$("$BIN" tokenize -m "$DEMO" --chat --user Hi --text)" = "$("$BIN" tokenize -m "$G" --chat --user Hi --text)" ] || bad "chat prompt differs"
"$BIN" info -m "$G" > "$T/info" || bad "info on GGUF"
mask=$(grep -o '"mask_token_id": [0-9]*' "$DEMO/config.json" | grep -o '[0-9]*$')
bot=$(grep -o '"bot_token_id": [0-9]*' "$DEMO/config.json" | grep -o '[0-9]*$')
grep -q "mask $mask, bot $bot" "$T/info" || bad "info: ReFusion's mask / begin ids ($mask, $bot) lost: $(grep tokens "$T/info")"
grep -q "GGUF metadata" "$T/info" || bad "info: the tokenizer in the GGUF is not seen"

# back to safetensors
"$BIN" convert -m "$G" -o "$T/back" --dtype bf16 >/dev/null 2>&1 || bad "GGUF -> safetensors"
cp "$DEMO/tokenizer.json" "$DEMO/tokenizer_config.json" "$T/back/" 2>/dev/null
"$BIN" logits -m "$T/back" --ids "$IDS" -n 4 > "$T/l.back" || bad "logits (back)"
cmp -s "$T/l.st" "$T/l.back" || bad "safetensors -> GGUF -> safetensors changed the logits"

# quantised files load and decode; the output type follows --dtype
for dt in q8_0 q4_0; do
  "$BIN" convert -m "$DEMO" -o "$T/$dt.gguf" --dtype $dt >/dev/null || bad "convert $dt"
  "$BIN" info -m "$T/$dt.gguf" | grep -qi "dtype *$dt" || bad "info $dt: $("$BIN" info -m "$T/$dt.gguf" | grep dtype)"
  "$BIN" generate -m "$T/$dt.gguf" -p "$P" -n 16 > /dev/null 2>&1 || bad "generate on $dt"
done
"$BIN" convert -m "$DEMO" -o "$T/x" --format safetensors --dtype q8_0 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "needs --format gguf" "$T/err" || bad "q8_0 to safetensors: rc $rc, $(cat "$T/err")"
# a quantised GGUF to safetensors: its weights dequantised, the same f32
# values (so the same logits) as the GGUF converted to f32
"$BIN" convert -m "$T/q8_0.gguf" -o "$T/x" --dtype f32 >/dev/null 2>"$T/err" || bad "Q8_0 GGUF to safetensors: $(cat "$T/err")"
cp "$DEMO/tokenizer.json" "$DEMO/tokenizer_config.json" "$T/x/" 2>/dev/null
"$BIN" convert -m "$T/q8_0.gguf" -o "$T/q8f32.gguf" --dtype f32 >/dev/null || bad "Q8_0 GGUF to f32 GGUF"
"$BIN" logits -m "$T/x" --ids "$IDS" -n 4 > "$T/l.x" && "$BIN" logits -m "$T/q8f32.gguf" --ids "$IDS" -n 4 > "$T/l.q8f32" &&
  cmp -s "$T/l.x" "$T/l.q8f32" || bad "Q8_0 GGUF as safetensors and as an f32 GGUF: the logits differ"

# corrupted files: exit 1, one line "refusion: <file>: ..."
expect_bad() { # file, needle
  "$BIN" info -m "$1" >/dev/null 2>"$T/err"; local rc=$?
  if [ $rc -ne 1 ] || [ "$(wc -l < "$T/err")" -ne 1 ] || ! grep -q "^refusion: $1: .*$2" "$T/err"; then
    bad "$1 ($2): rc $rc, stderr: $(head -c 300 "$T/err")"
  fi
}
B=$T/bad.gguf
size=$(stat -c %s "$G")
head -c $((size - 100)) "$G" > "$B"; expect_bad "$B" "past the end"
head -c 30 "$G" > "$B"; expect_bad "$B" "cannot fit"
# cut inside the metadata and inside the tensor infos (either a count or a
# string is then found not to fit)
for cut in 5000 $(( $(grep -abo 'output_norm.weight' "$G" | head -1 | cut -d: -f1) + 5 )); do
  head -c $cut "$G" > "$B"; expect_bad "$B" "\(truncated\|cannot fit\|runs past the end\)"
done
poke() { cp "$G" "$B"; printf "$2" | dd of="$B" bs=1 seek=$1 conv=notrunc status=none; }
poke 0 'XGUF'; expect_bad "$B" "not a GGUF file"
poke 4 '\x07'; expect_bad "$B" "version 7"
poke 15 '\x01'; expect_bad "$B" "tensors cannot fit"        # n_tensors high byte
poke 23 '\x01'; expect_bad "$B" "metadata entries cannot fit"
poke 31 '\x01'; expect_bad "$B" "string length"               # first key's length
# the first tensor info (token_embd.weight): its type and offset fields
off=$(grep -abo 'token_embd.weight' "$G" | head -1 | cut -d: -f1)
tinfo=$((off + 17 + 4 + 16))                                  # name, n_dims, 2 x ne
poke $tinfo '\x10'; expect_bad "$B" "ggml type IQ2_XXS is not supported (re-quantize"
poke $tinfo '\x63'; expect_bad "$B" "ggml type 99"
poke $((tinfo + 4)) '\x04'; expect_bad "$B" "not a multiple of the alignment"
poke $((tinfo + 11)) '\x01'; expect_bad "$B" "past the end"
poke $((off - 8)) '\x10'; expect_bad "$B" ""                  # name length 16: everything shifts

# fuzz: random bytes in the header: exit 0 or 1, never a crash, one line
hdr=$((tinfo + 2000))
RANDOM=4242
crash=0 multi=0 rejected=0
for i in $(seq 1 100); do
  cp "$G" "$B"
  for j in 1 2 3; do
    printf "\\x$(printf %02x $((RANDOM % 256)))" | dd of="$B" bs=1 seek=$(( (RANDOM * 32768 + RANDOM) % hdr )) conv=notrunc status=none
  done
  "$BIN" info -m "$B" >/dev/null 2>"$T/err"; rc=$?
  [ $rc -ge 2 ] && { crash=$((crash + 1)); echo "fuzz $i: exit $rc: $(head -c 200 "$T/err")" >&2; }
  [ $rc -eq 1 ] && { rejected=$((rejected + 1)); [ "$(wc -l < "$T/err")" -eq 1 ] || multi=$((multi + 1)); }
done
echo "fuzz: 100 files, $rejected rejected, $crash crashes, $multi multi-line messages"
[ $crash -eq 0 ] || bad "$crash fuzzed files crashed"
[ $multi -eq 0 ] || bad "$multi rejections were not one line"

echo "cli_gguf: $fails failed"
[ "$fails" -eq 0 ]
