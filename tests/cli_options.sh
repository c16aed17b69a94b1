#!/usr/bin/env bash
# cli_options.sh - the shared option table at the command line:
#  - generate, chat, eval, probe and serve list the same decoding options
#    with the same defaults (--help);
#  - --version; --opt=value == --opt value; -t is threads (an integer);
#  - the prompt from -p, -f FILE, -f -, -p - and stdin gives the same answer;
#  - the chat REPL through a pseudo-terminal (script): two turns keep the
#    history (the second prompt holds the first turn), /reset forgets it,
#    Ctrl-C stops a long answer and the chat goes on, /exit ends it (0).
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_options

# ---- one table, one set of defaults -------------------------------------------------------
rows() { "$BIN" "$1" --help | sed -n '/^decoding/,/^$/p' | grep -v '^decoding' | grep -v '^ *$'; }
rows generate >"$T/generate.rows"
[ "$(wc -l <"$T/generate.rows")" -ge 20 ] && ok || bad "generate --help: no decoding section"
tr -s ' \n' ' ' <"$T/generate.rows" | grep -q -- '-n, --gen-length N .*default 512; --n-predict; HTTP "max_tokens"' && ok ||
  bad "generate --help: gen-length row: $(grep -A1 gen-length "$T/generate.rows")"
for cmd in chat eval probe serve; do
  rows $cmd >"$T/$cmd.rows"
  cmp -s "$T/generate.rows" "$T/$cmd.rows" && ok || { bad "$cmd --help: decoding options differ from generate's:"; diff "$T/generate.rows" "$T/$cmd.rows" >&2; }
done
v=$("$BIN" --version) && [[ "$v" =~ ^refusion\ [0-9]+\.[0-9]+\.[0-9]+$ ]] && ok || bad "--version: $v"
v2=$("$BIN" generate --version) && [ "$v2" = "$v" ] && ok || bad "generate --version: $v2"

# ---- a model and one prompt given five ways ------------------------------------------------
"$BIN" init -o "$T/m" --preset tiny --hidden 128 --layers 4 --heads 4 --kv-heads 2 --ffn 384 --max-pos 4096 \
  --seed 5 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init"
M=$T/m
P="Tom has 12 apples."
G=(generate -m "$M" --threads=1 -n 16 --json)
ids() { node -e "process.stdout.write(JSON.parse(require('fs').readFileSync(0,'utf8')).answer_ids.join(','))"; }
ref=$("$BIN" "${G[@]}" -p "$P" | ids)
[ -n "$ref" ] && ok || bad "generate -p: no answer"
printf '%s\n' "$P" >"$T/prompt.txt"
for how in "-f $T/prompt.txt" "-f -" "-p -" ""; do
  # shellcheck disable=SC2086
  got=$("$BIN" "${G[@]}" $how <"$T/prompt.txt" | ids)
  [ "$got" = "$ref" ] && ok || bad "prompt via '${how:-stdin}': $got != $ref"
done
a=$("$BIN" generate -m "$M" -t 1 -n 16 --json --temp 0.7 -s 3 -p "$P" | ids)
b=$("$BIN" generate -m "$M" --threads=1 --n-predict=16 --json --temperature=0.7 --seed=3 -p "$P" | ids)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "--opt=value / aliases: $a != $b"
err=$("$BIN" generate -m "$M" -t 0.7 -p "$P" 2>&1 >/dev/null)
[ $? -eq 2 ] && [[ "$err" == *"-t expects an integer"* ]] && ok || bad "-t 0.7 (threads) accepted: $err"

# ---- the chat REPL in a pseudo-terminal ----------------------------------------------------------
# chat IN_FIFO OUT ARGS...: script(1) gives the REPL a terminal; lines are
# written to the fifo when the output shows the REPL is ready for them
mkfifo "$T/in"
wait_for() { # FILE PATTERN COUNT: up to 60 s
  for _ in $(seq 1 600); do
    [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
    sleep 0.1
  done
  bad "timed out waiting for '$2' x$3 in $1: $(tail -c 300 "$1")"
  return 1
}
exec 7<>"$T/in"
timeout 120 script -qfec "exec $BIN chat -m $M -t 1 -n 8 --decoder ar" /dev/null <&7 >"$T/chat1.out" 2>&1 &
cpid=$!
printf 'hello there\n' >&7
wait_for "$T/chat1.out" 'answer [0-9]* tokens' 1
printf 'and again\n' >&7
wait_for "$T/chat1.out" 'answer [0-9]* tokens' 2
printf '/reset\n' >&7
wait_for "$T/chat1.out" 'history cleared' 1
printf 'hello there\n' >&7
wait_for "$T/chat1.out" 'answer [0-9]* tokens' 3
printf '/exit\n' >&7
wait "$cpid"
crc=$?
[ $crc -eq 0 ] && ok || bad "chat: exit $crc: $(tail -c 300 "$T/chat1.out")"
mapfile -t pt < <(sed -n 's/.*prompt \([0-9]*\) tokens, answer \([0-9]*\) tokens.*/\1 \2/p' "$T/chat1.out")
read -r p1 a1 <<<"${pt[0]:-0 0}"
read -r p2 _ <<<"${pt[1]:-0 0}"
read -r p3 _ <<<"${pt[2]:-0 0}"
[ "$p1" -gt 0 ] && [ "$p2" -gt $((p1 + a1)) ] && ok || bad "chat: the second prompt ($p2 tokens) does not hold the first turn ($p1 + $a1)"
[ "$p3" = "$p1" ] && ok || bad "chat: after /reset the prompt has $p3 tokens, the first had $p1"

# Ctrl-C during a long answer stops it; the chat goes on. The answer must
# outlast the test's reaction on a fast machine: an MDM decode of 1,024
# tokens in 1,024 steps is 1,024 calls over the whole answer (minutes),
# where 4,000 greedy AR tokens of this model take well under a second.
timeout 120 script -qfec "exec $BIN chat -m $M -t 1 -n 1024 --decoder mdm --steps 1024" /dev/null <&7 >"$T/chat2.out" 2>&1 &
cpid=$!
wait_for "$T/chat2.out" '/reset clears' 1
printf 'tell me a long story\n' >&7
sleep 1
printf '\003' >&7
wait_for "$T/chat2.out" 'interrupted' 1
printf '/exit\n' >&7
wait "$cpid"
crc=$?
[ $crc -eq 0 ] && ok || bad "chat after Ctrl-C: exit $crc: $(tail -c 300 "$T/chat2.out")"
grep -q 'answer [0-9]* tokens' "$T/chat2.out" && bad "Ctrl-C did not stop the answer" || ok
exec 7>&-

echo "cli_options: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
