#!/usr/bin/env bash
# cli_llamacpp_flags.sh - llama.cpp's spellings in the shared option table
# (src/common/args.c), each flag doing what llama.cpp's does:
#   -cnv / --conversation  the chat (generate -i);
#   -np N / -cb            serve's --parallel N / accepted (llama-server's);
#   -ngl N                 accepted, one note line: this build runs on the CPU;
#   -hf REPO               one clear error, exit 2 (nothing is downloaded);
#   -n -1                  until EOS or the end of the context (--ctx-size);
#   --ignore-eos           the answer runs past EOS to -n;
#   --repeat-penalty, --presence-penalty, --frequency-penalty, --min-p
#                          change AR's answer; the rolling slot still gives
#                          AR's answer with them, in fewer calls; refused by
#                          plan-and-infill;
#   -r / --reverse-prompt  the answer stops where its text holds the string
#                          (printed and --json text cut before it);
#   --threads above the online CPUs  a warning, capped.
# The demo model (a trained mask head) with explicit --decoder, and a tiny
# random model for the refusals.
set -u
. "$(dirname "$0")/helpers/common.sh"
. "$(dirname "$0")/helpers/small_model.sh"
rf_test_setup cli_llamacpp_flags
DEMO=$SRC/models/refusion-demo
Q="Tom has 12 apples. He buys 7 more. How many apples does he have now?"
gen() { # NAME generate-options...: --json into $T/NAME.json
  local name=$1
  shift
  "$BIN" generate -m "$DEMO" -p "$Q" --threads 1 --json "$@" >"$T/$name.json" 2>"$T/$name.err" ||
    bad "generate $*: $(cat "$T/$name.err")"
}

# ---- -cnv / --conversation: the chat ------------------------------------------------
for sp in -cnv --conversation; do
  out=$(printf '%s\n/exit\n' "$Q" | "$BIN" generate -m "$DEMO" $sp --decoder ar -n 8 --threads 1 2>"$T/cnv.err")
  rc=$?
  [ $rc -eq 0 ] && grep -q "^refusion chat:" "$T/cnv.err" && [[ "$out" == *"> "* ]] && ok ||
    bad "$sp: exit $rc, stderr $(cat "$T/cnv.err"), stdout $out"
done

# ---- serve: -np N is --parallel N, -cb is accepted -------------------------------------
"$BIN" serve -m "$DEMO" -np 2 -cb --help >/dev/null 2>"$T/np.err" && ok || bad "serve -np 2 -cb: $(cat "$T/np.err")"
expect_fail 2 "--parallel expects an integer in [1, 256], got '0'" serve -m "$DEMO" -np 0

# ---- -ngl: a note; -hf: an error -----------------------------------------------------
run generate -m "$DEMO" -p "$Q" --decoder ar -n 2 -ngl 99 --threads 1
[ $rc -eq 0 ] && [ "$(grep -c 'note: -ngl 99 ignored: this build runs on the CPU' "$T/err")" -eq 1 ] && ok ||
  bad "-ngl 99: exit $rc, $err"
expect_fail 2 "-hf Qwen/Qwen3-8B: this build downloads nothing" generate -m "$DEMO" -p "$Q" -hf Qwen/Qwen3-8B

# ---- --threads above the online CPUs: warned and capped ---------------------------------
cpus=$(getconf _NPROCESSORS_ONLN)
run generate -m "$DEMO" -p "$Q" --decoder ar -n 2 --threads 1000
[ $rc -eq 0 ] && [[ "$err" == *"warning: --threads 1000 is more than the $cpus online CPUs; using $cpus"* ]] && ok ||
  bad "--threads 1000: exit $rc, $err"

# ---- -n -1 and --ignore-eos ---------------------------------------------------------------
gen ar --decoder ar -n 64
[ "$(field "$T/ar.json" 'o["hit_eos"]')" = True ] && ok || bad "the demo's AR answer should end at EOS"
n_ar=$(field "$T/ar.json" 'o["tokens"]')
gen ign --decoder ar -n 64 --ignore-eos
[ "$(field "$T/ign.json" 'o["tokens"], o["hit_eos"]')" = "(64, False)" ] && ok ||
  bad "--ignore-eos: $(field "$T/ign.json" 'o["tokens"], o["hit_eos"]') (want 64 tokens, no EOS)"
gen all --decoder ar -n -1
[ "$(field "$T/all.json" 'o["answer_ids"]')" = "$(field "$T/ar.json" 'o["answer_ids"]')" ] && ok ||
  bad "-n -1 should end at EOS as -n 64 does"
gen ctx --decoder ar -n -1 --ignore-eos -c 80
[ "$(field "$T/ctx.json" 'len(o["prompt_ids"]) + o["tokens"], len(o["prompt_ids"]) + o["settings"]["gen_length"]')" = "(80, 80)" ] && ok ||
  bad "-n -1 --ignore-eos -c 80: prompt + answer = $(field "$T/ctx.json" 'len(o["prompt_ids"]) + o["tokens"]')"
gen ctxr --generation-config none --decoder refusion -n -1 --ignore-eos -c 80 --slot-size 8 --blocks 2
[ "$(field "$T/ctxr.json" 'o["tokens"]')" = "$(field "$T/ctxr.json" '(80 - len(o["prompt_ids"])) // 8 * 8')" ] && ok ||
  bad "refusion -n -1 -c 80: $(field "$T/ctxr.json" 'o["tokens"]') tokens, want whole slots of 8 up to 80"
expect_fail 2 "expects an integer in [1, 1000000] or -1, got '-2'" generate -m "$DEMO" -p "$Q" -n -2

# ---- penalties and min_p: AR's answer changes; the rolling slot gives AR's ----------------
pen="--repeat-penalty 1.5 --presence-penalty 0.5 --frequency-penalty 0.5"
gen ar_pen --decoder ar -n 40 $pen
[ "$(field "$T/ar_pen.json" 'o["answer_ids"]')" != "$(field "$T/ar.json" 'o["answer_ids"][:40]')" ] && ok ||
  bad "the penalties did not change AR's answer"
gen roll_pen --decoder refusion --rolling --slot-size 4 --slot-threshold 0.5 -n 40 $pen
[ "$(field "$T/roll_pen.json" 'o["answer_ids"]')" = "$(field "$T/ar_pen.json" 'o["answer_ids"]')" ] && ok ||
  bad "rolling with penalties: $(field "$T/roll_pen.json" 'o["answer_ids"]') differs from AR's $(field "$T/ar_pen.json" 'o["answer_ids"]')"
[ "$(field "$T/roll_pen.json" 'o["model_calls"] < o["tokens"]')" = True ] && ok || bad "rolling with penalties: no fewer calls than tokens"
for p in "--repeat-penalty 1.3" "--presence-penalty 1" "--frequency-penalty 1" "--min-p 0.5 --temp 1 -s 3"; do
  gen a1 --decoder ar -n 24 $p
  gen r1 --decoder refusion --rolling --slot-size 4 --slot-threshold 0.5 -n 24 $p
  [ "$(field "$T/a1.json" 'o["answer_ids"]')" = "$(field "$T/r1.json" 'o["answer_ids"]')" ] && ok ||
    bad "$p: rolling differs from AR"
done
# min_p 1 at temperature 1: only the top token can be drawn, so it is greedy's answer
gen minp --decoder ar -n 24 --temp 1 -s 9 --min-p 1
[ "$(field "$T/minp.json" 'o["answer_ids"]')" = "$(field "$T/ar.json" 'o["answer_ids"][:24]')" ] && ok ||
  bad "--min-p 1 --temp 1 is not greedy"
rf_small_model "$T/s" || bad "small model"
expect_fail 1 "AR sampling settings" generate -m "$T/s/m" -p "What is 1 plus 2?" -n 8 --repeat-penalty 1.2
expect_fail 2 "--min-p expects a number in [0, 1], got '2'" generate -m "$DEMO" -p "$Q" --min-p 2

# ---- -r / --reverse-prompt: a stop string ------------------------------------------------
full=$(field "$T/ar.json" 'o["text"]')
[[ "$full" == *"####"* ]] && ok || bad "the demo's AR answer has no '####': $full"
for sp in -r --reverse-prompt; do
  out=$("$BIN" generate -m "$DEMO" -p "$Q" --decoder ar -n 64 --threads 1 $sp "####" 2>"$T/r.err")
  [ "$out" = "${full%%####*}" ] && grep -q "stopped at the reverse prompt" "$T/r.err" && ok ||
    bad "$sp '####': printed '$out', want '${full%%####*}' ($(cat "$T/r.err"))"
done
gen rj --decoder ar -n 64 -r "####"
[ "$(field "$T/rj.json" 'o["text"]')" = "${full%%####*}" ] && [ "$(field "$T/rj.json" 'o["tokens"] < '"$n_ar")" = True ] && ok ||
  bad "-r with --json: text '$(field "$T/rj.json" 'o["text"]')', $(field "$T/rj.json" 'o["tokens"]') tokens"
# in the chat (-cnv) too: the turn ends at the stop text
out=$(printf '%s\n/exit\n' "$Q" | "$BIN" generate -m "$DEMO" -cnv --decoder ar -n 64 --threads 1 -r "####" 2>"$T/rc.err")
[[ "$out" == *"${full%%####*}"* ]] && [[ "$out" != *"####"* ]] && grep -q "stopped at the reverse prompt" "$T/rc.err" && ok ||
  bad "-cnv -r '####': stdout '$out', stderr $(cat "$T/rc.err")"
# a stop text the answer never holds changes nothing
out=$("$BIN" generate -m "$DEMO" -p "$Q" --decoder ar -n 64 --threads 1 -r "never there" 2>/dev/null)
[ "$out" = "$full" ] && ok || bad "-r 'never there': '$out', want '$full'"

echo "cli_llamacpp_flags: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
