#!/usr/bin/env bash
# cli_limits.sh - the bounds on the command line: each case gets
# one line "refusion: ..." naming the problem and a non-zero exit, before any
# huge allocation or any write:
#  - config.json with "max_position_embeddings": 2147483647;
#  - a 200 MB tokenizer.json (sparse file) is refused unread;
#  - generate -n 1000000 past the context;
#  - train --batch 1000000 (hundreds of GB of activations);
#  - convert -m X -o X (would rewrite the source in place; X stays intact);
#  - tokenizer-train --input /dev/null (no text);
# and what must work: tokenize --jsonl with "\u0000" in the text (valid
# JSON, the NUL is encoded), a non-UTF-8 prompt reported at its offset in
# the user's text, not in the chat-templated text, and tokenize / generate
# under a 128 MiB address-space limit (ulimit -v), where train is refused.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_limits
DEMO=$SRC/models/refusion-demo

# refused NEEDLE CMD...: non-zero exit, exactly one stderr line with NEEDLE
refused() {
  local needle=$1
  shift
  "$BIN" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^refusion: .*$needle" "$T/err" && ok ||
    bad "$*: exit $rc, stderr: $(head -c 300 "$T/err")"
}

# max_position_embeddings
mkdir -p "$T/big"
cp "$DEMO"/* "$T/big/"
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 2147483647/' "$T/big/config.json"
grep -q 2147483647 "$T/big/config.json" || bad "could not edit the config"
refused 'max_position_embeddings.*larger than 1048576' info -m "$T/big"

# a huge tokenizer.json (sparse: no disk used)
mkdir -p "$T/hugetok"
cp "$DEMO/config.json" "$DEMO/model.safetensors" "$T/hugetok/"
truncate -s 200M "$T/hugetok/tokenizer.json"
refused 'tokenizer.json: 209.7 MB is larger than' tokenize -m "$T/hugetok" "hello"

# lengths past the context and the machine
refused 'context' generate -m "$DEMO" -p "hi" -n 1000000
for i in $(seq 1 20); do echo "{\"query\": \"q$i\", \"response\": \"r$i\"}"; done >"$T/d.jsonl"
refused 'needs at least .* GB of activations' train --data "$T/d.jsonl" --tokenizer "$DEMO" --config tiny \
  --batch 1000000 --seq-len 512 --steps 1 --no-plot -o "$T/tr"
[ ! -e "$T/tr" ] && ok || bad "train --batch 1000000 wrote $T/tr"

# convert into itself
mkdir -p "$T/self"
cp "$DEMO"/* "$T/self/"
sum0=$(cat "$T/self"/* | md5sum)
refused 'is the input checkpoint itself' convert -m "$T/self" -o "$T/self/" --dtype f32
[ "$(cat "$T/self"/* | md5sum)" = "$sum0" ] && ok || bad "convert -m X -o X changed X"

refused 'no text to learn from' tokenizer-train --input /dev/null --vocab 300 -o "$T/tok"
[ ! -e "$T/tok" ] && ok || bad "tokenizer-train /dev/null wrote $T/tok"

# "\u0000" inside a JSON string is valid: it is encoded, not refused
printf '{"text": "a\\u0000b"}\n' | "$BIN" tokenize -m "$DEMO" --jsonl >"$T/nul.out" 2>"$T/nul.err"
rc=$?
[ $rc -eq 0 ] && grep -q '"ids"' "$T/nul.out" && ok || bad "tokenize --jsonl NUL: exit $rc, $(cat "$T/nul.out" "$T/nul.err")"
printf '{"text": "ab"}\n' | "$BIN" tokenize -m "$DEMO" --jsonl >"$T/nonul.out" 2>&1
cmp -s "$T/nul.out" "$T/nonul.out" && bad "the NUL was dropped: same ids as without it" || ok

# non-UTF-8 prompt: the offset in the user's text (2), with the chat template on
refused 'prompt: invalid UTF-8 at byte offset 2 ' generate -m "$DEMO" --chat -p "$(printf 'ab\xffc')" -n 4

# (not in the sanitizer build: AddressSanitizer reserves terabytes of shadow
# memory at start, which no ulimit -v allows)
if grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$(dirname "$BIN")/CMakeCache.txt" 2>/dev/null; then
  echo "cli_limits: the ulimit -v checks are skipped in the sanitizer build"
else
  # a 128 MiB address-space limit (ulimit -v), which cannot hold two OpenBLAS
  # threads' buffers: the commands that fit still work, the same as without
  # it (under a wall-clock kill: the threads' endless retries were a hang)
  for args in "tokenize -m $DEMO hello" "tokenize -m $DEMO --chat --user hello" "generate -m $DEMO -p hello -n 4 --seed 1"; do
    read -r -a argv <<<"$args"
    "$BIN" "${argv[@]}" >"$T/free.out" 2>/dev/null
    (ulimit -v 131072; exec env -u OPENBLAS_NUM_THREADS OMP_NUM_THREADS=2 timeout -s KILL 20 "$BIN" "${argv[@]}") \
      >"$T/vm.out" 2>"$T/vm.err"
    rc=$?
    [ $rc -eq 0 ] && [ -s "$T/vm.out" ] && cmp -s "$T/free.out" "$T/vm.out" && ok ||
      bad "$args under ulimit -v 131072: exit $rc, $(head -c 300 "$T/vm.out" "$T/vm.err")"
  done
  # training under it: OpenBLAS's work buffer cannot fit, refused before the first step
  (ulimit -v 131072; exec env -u OPENBLAS_NUM_THREADS OMP_NUM_THREADS=2 timeout -s KILL 60 "$BIN" train --data "$T/d.jsonl" \
    --tokenizer "$DEMO" --config tiny --batch 2 --seq-len 32 --steps 1 --no-plot -o "$T/vmtr") >"$T/vm.out" 2>"$T/vm.err"
  rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c . "$T/vm.err")" -eq 1 ] && grep -q '^refusion: .*address-space limit (ulimit -v 131072 KiB)' "$T/vm.err" &&
    [ ! -e "$T/vmtr" ] && ok || bad "train under ulimit -v 131072: exit $rc, $(head -c 300 "$T/vm.err")"
fi

echo "cli_limits: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
