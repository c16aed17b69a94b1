#!/usr/bin/env bash
# cli_generate.sh - `refusion generate` end to end on a tiny random checkpoint
# with a freshly trained tokenizer:
#  - text prompts (chat template on by default), ids prompts, both modes;
#  - --json: the fields are there and consistent (answer length, calls,
#    TPF), the streamed stdout text equals the JSON text, the no-cache
#    twin (--naive) gives the same ids and calls, AR calls == tokens,
#    gen_length is padded to whole slots, a block count that does not divide
#    the slots works;
#  - --visualize (not a TTY): one plain line per event, then the text;
#  - nonsense (unknown token id, slot size 0, thresholds outside [0, 1],
#    prompt longer than the context, bad --mode / --ids) gives exit status
#    1 or 2 with exactly one line "refusion: ..." on stderr.
# JSON is read with node (a project dependency).
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_gen
run() { # generate runs single-threaded: the checks are about results, not speed
  if [ "$1" = generate ]; then shift; set -- generate --threads 1 "$@"; fi
  "$BIN" "$@" >"$T/out" 2>"$T/err"
  rc=$?
  out=$(cat "$T/out")
  err=$(cat "$T/err")
}
# jsall EXPR...: evaluate each EXPR with o = the JSON object in $T/out, in one
# node run (node starts slowly); the results land in J[0], J[1], ...
jsall() {
  local prog="const o=JSON.parse(require('fs').readFileSync('$T/out','utf8'));" e
  for e in "$@"; do prog+="console.log(String($e).replace(/\n/g,' '));"; done
  mapfile -t J < <(node -e "$prog")
}

expect_err() { # needle, args...
  local needle=$1
  shift
  run generate "$@"
  local lines
  lines=$(wc -l <"$T/err")
  if [ "$rc" -eq 0 ] || [ "$rc" -gt 2 ]; then bad "generate $*: exit $rc"; return; fi
  if [ "$lines" -ne 1 ]; then bad "generate $*: $lines stderr lines: $err"; return; fi
  case "$err" in refusion:\ *"$needle"*) ok ;; *) bad "generate $*: stderr '$err' lacks '$needle'" ;; esac
}

# ---- a checkpoint with a tokenizer ----------------------------------------------
words="the cat sat on a mat and dog ran to park with ball one two three four plus equals answer is"
awk -v w="$words" 'BEGIN { srand(1); n = split(w, a, " ");
  for (i = 0; i < 300; i++) { for (j = 0; j < 12; j++) printf "%s ", a[int(rand() * n) + 1]; print "" } }' >"$T/corpus.txt"
"$BIN" tokenizer-train --input "$T/corpus.txt" --vocab 400 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train failed"
"$BIN" init -o "$T/m" --preset tiny --seed 3 --std 0.5 --tokenizer "$T/tok/tokenizer.json" >/dev/null 2>&1 ||
  bad "init failed"
M="$T/m"
EOS=$(node -e "const t=JSON.parse(require('fs').readFileSync('$M/tokenizer.json','utf8'));
  console.log(t.added_tokens.find(a=>a.content==='<|im_end|>').id)")

# ---- streaming text == JSON text; chat on by default --------------------------------
run generate -m "$M" -p "one plus two" -n 24 --slot-size 4 --blocks 2
[ "$rc" -eq 0 ] && ok || bad "text prompt: exit $rc: $err"
stream_text=$out
case "$err" in *"model calls"*TPF*) ok ;; *) bad "no statistics line on stderr: $err" ;; esac
run generate -m "$M" -p "one plus two" -n 24 --slot-size 4 --blocks 2 --json
[ "$rc" -eq 0 ] && ok || bad "--json: exit $rc: $err"
fields="prompt_ids answer_ids text model_calls tokens tpf tokens_per_call tokens_per_s wall_s steps"
jsall 'o.text' 'o.prompt_ids.length > 10' "'$fields'.split(' ').every(f => f in o)" \
  'o.tokens === o.answer_ids.length' 'o.model_calls === o.steps.reduce((a,s)=>a+s.calls,0)' \
  'Math.abs(o.tokens_per_call - o.tokens/o.model_calls) < 1e-9' \
  "o.answer_ids.length === 24 || o.answer_ids[o.answer_ids.length-1] === $EOS" \
  'o.steps.every(s => s.slots_planned >= 1 && s.calls === 2 + 2 * s.infill_iters)'
[ "${J[0]}" == "$stream_text" ] && ok || bad "streamed text '$stream_text' != JSON text '${J[0]}'"
[ "${J[1]}" == true ] && ok || bad "chat template not applied by default"
[ "${J[2]}" == true ] && ok || bad "--json lacks one of $fields: $out"
[ "${J[3]}" == true ] && ok || bad "tokens != answer length"
[ "${J[4]}" == true ] && ok || bad "calls != sum of steps"
[ "${J[5]}" == true ] && ok || bad "tokens/call"
[ "${J[6]}" == true ] && ok || bad "answer neither full nor ending in EOS: $out"
[ "${J[7]}" == true ] && ok || bad "step statistics inconsistent: $out"
run generate -m "$M" -p "one plus two" -n 24 --no-chat --json
jsall 'o.prompt_ids.length < 8'
[ "${J[0]}" == true ] && ok || bad "--no-chat still templated"

# ---- fast vs naive at the CLI, several settings -------------------------------------
# The twin computes in double precision (model/forward_ref.c): the default
# rounding of the activations to bf16 (up to 2^-9 per term) flips choices on
# this random (std 0.5) model; the f32-grade split agrees to rounding.
export REFUSION_BF16_ACT=split
for args in "-n 24 --slot-size 4 --blocks 2" "-n 10 --slot-size 4 --blocks 3 --slot-threshold 0.2" \
            "-n 20 --slot-size 8 --blocks 1 --token-threshold 0.1" "-n 9 --slot-size 2 --blocks 4 --temp 0.7 --seed 5"; do
  run generate -m "$M" --ids "5,6,7,8" $args --json
  jsall 'o.answer_ids.join(",")' o.model_calls 'o.answer_ids.length' 'o.answer_ids[o.answer_ids.length-1]'
  fast_ids=${J[0]} fast_calls=${J[1]} fast_len=${J[2]} last=${J[3]}
  run generate -m "$M" --ids "5,6,7,8" $args --json --naive
  [ "$rc" -eq 0 ] && ok || bad "--naive $args: exit $rc: $err"
  jsall 'o.answer_ids.join(",")' o.model_calls
  [ "${J[0]}" == "$fast_ids" ] && ok || bad "$args: naive ids differ"
  [ "${J[1]}" == "$fast_calls" ] && ok || bad "$args: naive calls differ"
  n=$(echo "$args" | sed 's/.*-n \([0-9]*\).*/\1/'); s=$(echo "$args" | sed 's/.*--slot-size \([0-9]*\).*/\1/')
  padded=$(( (n + s - 1) / s * s ))
  if [ "$fast_len" -eq "$padded" ] || [ "$last" == "$EOS" ]; then ok; else bad "$args: $fast_len tokens, want $padded"; fi
done
unset REFUSION_BF16_ACT

# ---- AR ------------------------------------------------------------------------------
run generate -m "$M" --ids "5,6,7,8" --mode ar -n 12 --json
[ "$rc" -eq 0 ] && ok || bad "ar: exit $rc: $err"
jsall 'o.model_calls === o.tokens && o.tpf === 1 && o.mode === "ar"'
[ "${J[0]}" == true ] && ok || bad "ar: calls != tokens: $out"
run generate -m "$M" --ids "5,6,7,8" --mode ar -n 12 --temp 0.9 --top-k 5 --top-p 0.9 --seed 3 --json
[ "$rc" -eq 0 ] && ok || bad "ar sampling: exit $rc: $err"

# ---- visualize (plain, stdout is a file) ---------------------------------------------
run generate -m "$M" --ids "5,6,7,8" -n 16 --slot-size 4 --blocks 2 --visualize
[ "$rc" -eq 0 ] && ok || bad "--visualize: exit $rc"
nsteps=$(grep -c '^step ' "$T/out")
[ "$nsteps" -ge 4 ] && ok || bad "--visualize: $nsteps step lines"
grep -q $'\033' "$T/out" && bad "--visualize wrote ANSI codes to a file" || ok
grep -Eq '^step +[0-9]+ (fast|commit) +[FI.x]+$' "$T/out" && ok || bad "--visualize: no commit line: $out"
tail -n +2 "$T/out" | grep -q '^step ' || bad "--visualize: nothing after the steps"

# ---- nonsense --------------------------------------------------------------------------
expect_err "outside the vocabulary" -m "$M" --ids "1,2,99999"
expect_err "--slot-size expects an integer in [1," -m "$M" --ids "1,2" --slot-size 0
expect_err "--slot-threshold expects a number in [0, 1]" -m "$M" --ids "1,2" --slot-threshold 1.5
expect_err "--token-threshold expects a number in [0, 1]" -m "$M" --ids "1,2" --token-threshold -0.1
expect_err "exceed the model's context" -m "$M" --ids "1,2" -n 5000
expect_err "--mode" -m "$M" --ids "1,2" --mode fast
expect_err "not a token id" -m "$M" --ids "1,x"
expect_err "expects a number" -m "$M" --ids "1" --temperature hot
expect_err "unknown option" -m "$M" --ids "1" --frobnicate 3
expect_err "needs a value" -m "$M" --ids "1" --slot-size
expect_err "stdin is empty" -m "$M" </dev/null
expect_err "at most one of" -m "$M" -p "a" --ids "1"
"$BIN" init -o "$T/short" --preset tiny --max-pos 16 >/dev/null 2>&1
expect_err "longer than the model's context" -m "$T/short" --ids "$(seq -s, 1 20)" -n 4
expect_err "no tokenizer (tokenizer.json or GGUF tokenizer metadata)" -m "$T/short" -p "hello"
run generate -m "$T/nonexistent" --ids 1
[ "$rc" -ne 0 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && ok || bad "missing model dir: exit $rc, stderr $err"

echo "cli_generate: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
