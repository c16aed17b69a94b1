#!/usr/bin/env bash
# cli_checkpoint.sh - `refusion init` and `refusion info` end to end: writing
# checkpoints of several shapes, copying a tokenizer, and refusing corrupted
# checkpoints with exit status 1 and exactly one line on stderr (never a
# crash: no exit status above 128), including a small header fuzz; info
# --json parsed by node.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_ckpt

# info on $1 must fail cleanly: rc 1, one stderr line starting "refusion: ",
# containing $2 (if given)
expect_bad() {
  local dir=$1 needle=${2:-} what=${3:-$1}
  run info -m "$dir"
  local lines
  lines=$(wc -l <"$T/err")
  if [ "$rc" -ne 1 ]; then bad "$what: exit $rc (want 1); stderr: $err"; return; fi
  if [ "$lines" -ne 1 ]; then bad "$what: $lines stderr lines: $err"; return; fi
  case "$err" in refusion:\ *) ;; *) bad "$what: stderr not 'refusion: ...': $err"; return ;; esac
  if [ -n "$needle" ] && [[ "$err" != *"$needle"* ]]; then
    bad "$what: stderr lacks '$needle': $err"; return
  fi
  ok
}

# ---- init + info work -------------------------------------------------------------
run init -o "$T/tiny" --preset tiny --seed 1
[ "$rc" -eq 0 ] && [ -f "$T/tiny/config.json" ] && [ -f "$T/tiny/model.safetensors" ] && ok || bad "init tiny: $rc $err"
run info -m "$T/tiny" --verify
[ "$rc" -eq 0 ] && ok || bad "info tiny: $rc $err"
# tiny: 512*64 + 2*(64*64*2 + 64*32*2 + 3*64*128 + 2*64 + 2*16) + 64 = 106880
[[ "$out" == *"hidden 64, layers 2, heads 4 (kv 2), head_dim 16, ffn 128"* ]] && ok || bad "info shape: $out"
[[ "$out" == *"params     106880 "* ]] && ok || bad "info params: $out"
[[ "$out" == *"BF16"* && "$out" == *"load "* && "$out" == *"peak RSS"* ]] && ok || bad "info dtype/load: $out"
# --json: the same description as one JSON object on stdout (parsed by node)
run info -m "$T/tiny" --verify --json
js=$(node -e "
const d = JSON.parse(require('fs').readFileSync(0, 'utf8')), c = d.config;
const good = d.params === 106880 && c.hidden_size === 64 && c.n_layers === 2 && c.n_heads === 4 && c.n_kv_heads === 2 &&
  c.head_dim === 16 && c.intermediate_size === 128 && c.rms_eps === 1e-6 && d.dtype === 'BF16' && d.files.length === 1 &&
  d.files[0].format === 'safetensors' && d.files[0].bytes === d.bytes && d.bytes > 200000 && d.load_ms > 0 &&
  d.peak_rss_mb > 0 && typeof d.cpu.tier === 'string' && d.verify.finite === true && d.tokenizer === null;
console.log(good ? 'ok' : JSON.stringify(d));" <"$T/out" 2>&1)
[ "$rc" -eq 0 ] && [ "$js" = ok ] && ok || bad "info --json: rc $rc: $js"
# same seed, same bytes; another seed, other bytes
run init -o "$T/tiny2" --preset tiny --seed 1
cmp -s "$T/tiny/model.safetensors" "$T/tiny2/model.safetensors" && ok || bad "same seed differs"
run init -o "$T/tiny3" --preset tiny --seed 2
cmp -s "$T/tiny/model.safetensors" "$T/tiny3/model.safetensors" && bad "other seed same bytes" || ok

# overrides, f32, untied, shards with an index
run init -o "$T/custom" --preset small --hidden 96 --heads 6 --kv-heads 2 --layers 3 --ffn 160 \
  --vocab 1000 --tied 0 --dtype f32 --shard-mb 1 --seed 9 --std 0.05
[ "$rc" -eq 0 ] && ok || bad "init custom: $rc $err"
[ -f "$T/custom/model.safetensors.index.json" ] && [ ! -e "$T/custom/model.safetensors" ] && ok || bad "custom: no index"
run info -m "$T/custom"
[ "$rc" -eq 0 ] && [[ "$out" == *"hidden 96, layers 3, heads 6 (kv 2), head_dim 16, ffn 160"* ]] \
  && [[ "$out" == *"vocab      1000"* && "$out" == *"untied"* && "$out" == *"F32"* ]] && ok || bad "info custom: $rc $out $err"
grep -q '"mask_token_id": 999' "$T/custom/config.json" && ok || bad "custom mask id"
# rewriting a directory in the other layout leaves no stale files behind
cp -r "$T/custom" "$T/relayout"
run init -o "$T/relayout" --preset tiny --shard-mb 0
[ "$rc" -eq 0 ] && [ "$(ls "$T/relayout")" = "$(printf 'config.json\nmodel.safetensors')" ] && ok || bad "relayout: $(ls "$T/relayout")"
run info -m "$T/relayout"
[[ "$out" == *"hidden 64,"* ]] && ok || bad "relayout info: $out"

# a tokenizer is copied in and supplies the special ids and the vocabulary size
mkdir -p "$T/tok"
cat >"$T/tok/tokenizer.json" <<'EOF'
{"version": "1.0", "added_tokens": [
  {"id": 5, "content": "<|endoftext|>", "special": true},
  {"id": 6, "content": "<|im_end|>", "special": true}],
 "pre_tokenizer": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": []}}
EOF
echo '{"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}}' >"$T/tok/tokenizer_config.json"
run init -o "$T/withtok" --preset tiny --tokenizer "$T/tok/tokenizer.json"
[ "$rc" -eq 0 ] && cmp -s "$T/tok/tokenizer.json" "$T/withtok/tokenizer.json" \
  && cmp -s "$T/tok/tokenizer_config.json" "$T/withtok/tokenizer_config.json" && ok || bad "tokenizer copy: $rc $err"
run info -m "$T/withtok"
# ids 0..6, then <|beginoftext|> = 7 and <|mask|> = 8: vocabulary 9
[[ "$out" == *"vocab      9,"* && "$out" == *"eos 6, pad 5, mask 8, bot 7"* && "$out" == *"tokenizer  tokenizer.json"* ]] \
  && ok || bad "tokenizer ids: $out $err"
run init -o "$T/x" --preset tiny --tokenizer "$T/tok/tokenizer.json" --vocab 5
[ "$rc" -eq 1 ] && ok || bad "too small --vocab accepted: $rc"

# usage errors
run init --help
[ "$rc" -eq 0 ] && [[ "$out" == usage:* ]] && ok || bad "init --help"
run info --help
[ "$rc" -eq 0 ] && ok || bad "info --help"
for args in "init" "init -o $T/y --preset huge" "init -o $T/y --heads 0" "init -o $T/y --dtype i8" \
            "init -o $T/y --bogus 1" "init -o $T/y --heads 3" "info" "info -m" "info --json" \
            "info -m $T/tiny --json=1"; do
  run $args
  lines=$(wc -l <"$T/err")
  if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$lines" -eq 1 ]; then ok; else bad "'$args': rc $rc, $lines lines: $err"; fi
done

# ---- corrupted checkpoints ---------------------------------------------------------
fresh() { rm -rf "$T/c"; cp -r "$T/tiny" "$T/c"; }
ST="$T/c/model.safetensors"
fresh; truncate -s -100 "$ST"; expect_bad "$T/c" "run past the end of the file" "truncated data"
fresh; truncate -s 4 "$ST"; expect_bad "$T/c" "truncated" "truncated to 4 bytes"
fresh; : >"$ST"; expect_bad "$T/c" "truncated" "empty file"
fresh; printf '\xff\xff\xff\x00\x00\x00\x00\x00' | dd of="$ST" conv=notrunc status=none
expect_bad "$T/c" "header length" "header length past EOF"
fresh; printf '\x00\x00\x00\x00\x00\x00\x00\x00' | dd of="$ST" conv=notrunc status=none
expect_bad "$T/c" "header length" "header length 0"
fresh; printf 'garbage!' | dd of="$ST" bs=1 seek=8 conv=notrunc status=none
expect_bad "$T/c" "not valid JSON" "bad JSON"
fresh; head -c 20000 /dev/urandom >"$ST"; expect_bad "$T/c" "" "random bytes"
fresh; rm "$ST"; mkdir "$ST"; expect_bad "$T/c" "" "directory instead of file"
fresh; rm "$ST"; expect_bad "$T/c" "no model.safetensors" "no weights"
fresh; rm "$T/c/config.json"; expect_bad "$T/c" "config.json" "no config"
fresh; echo '{"hidden_size": 64,' >"$T/c/config.json"; expect_bad "$T/c" "invalid JSON" "bad config"
fresh; sed -i 's/"hidden_size": 64/"hidden_size": 32/' "$T/c/config.json"
expect_bad "$T/c" "'model.embed_tokens.weight'" "config/tensor mismatch"
fresh; sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$T/c/config.json"
expect_bad "$T/c" "num_key_value_heads" "bad kv heads"
# a dtype the engine does not support, patched into the header (same length)
fresh; sed -i '0,/"BF16"/s//"I16\x20"/' "$ST"; expect_bad "$T/c" "I16" "unsupported dtype"
expect_bad "$T/nonexistent" "cannot open" "no directory"
# sharded: broken index, missing shard
rm -rf "$T/s"; cp -r "$T/custom" "$T/s"
echo '{"weight_map": ' >"$T/s/model.safetensors.index.json"; expect_bad "$T/s" "invalid JSON" "bad index"
rm -rf "$T/s"; cp -r "$T/custom" "$T/s"; rm "$T/s/model-00002-of-"*.safetensors
expect_bad "$T/s" "cannot open" "missing shard"

# ---- fuzz: random byte changes in the header must never crash --------------------
hlen=$(od -An -tu4 -N4 "$T/tiny/model.safetensors" | tr -d ' ')
# byte offsets of the digits of the length field and the header
mapfile -t digits < <(head -c $((hlen + 8)) "$T/tiny/model.safetensors" | grep -abo '[0-9]' | cut -d: -f1)
RANDOM=12345
crashes=0
multi=0
for i in $(seq 1 120); do
  fresh
  n=$((1 + RANDOM % 4))
  for j in $(seq 1 $n); do
    if [ $((i % 2)) -eq 0 ]; then  # any byte (mostly breaks the JSON)
      off=$((RANDOM % (hlen + 8)))
      byte=$((RANDOM % 256))
    else  # a digit to another digit: valid JSON, wrong shapes / offsets / lengths
      off=${digits[$((RANDOM % ${#digits[@]}))]}
      byte=$((48 + RANDOM % 10))
    fi
    printf "\\x$(printf %02x $byte)" | dd of="$ST" bs=1 seek=$off conv=notrunc status=none
  done
  "$BIN" info -m "$T/c" >/dev/null 2>"$T/err"
  rc=$?
  lines=$(wc -l <"$T/err")
  if [ "$rc" -ge 128 ]; then crashes=$((crashes + 1)); echo "fuzz $i: exit $rc" >&2; cp "$ST" "$T/../rf_fuzz_crash.$i" 2>/dev/null; fi
  if [ "$rc" -ne 0 ] && [ "$lines" -ne 1 ]; then multi=$((multi + 1)); echo "fuzz $i: $lines lines: $(cat "$T/err")" >&2; fi
done
[ "$crashes" -eq 0 ] && ok || bad "fuzz: $crashes crashes"
[ "$multi" -eq 0 ] && ok || bad "fuzz: $multi failures without exactly one stderr line"

echo "cli_checkpoint: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
