#!/usr/bin/env bash
# refusion grow on the shipped demo model: a grown copy (every kind of
# growth at once: hidden 256 -> 320, 4 -> 6 layers, 4/2 -> 8/4 heads,
# head_dim 64 -> 128, FFN 768 -> 1024, vocabulary 850 -> 1000, tied) gives
# the demo's answers (ids) and model calls for the README's prompts, greedy
# AR and the rolling slot, in f32 and in bf16 (its norms are kept in f32, so
# bf16 growth is exact too); a Q8_0 GGUF grown copy loads and answers;
# bad targets get one error line and leave nothing behind.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_grow
DEMO=$SRC/models/refusion-demo
SHAPE=(--hidden 320 --layers 6 --heads 8 --kv-heads 4 --head-dim 128 --ffn 1024 --vocab 1000)

run grow -m "$DEMO" -o "$T/g32" "${SHAPE[@]}" --dtype f32
check '[ $rc = 0 ] && grep -q "grew .* hidden 320, 8/4 heads, head_dim 128, ffn 1024, vocab 1000 tied" "$T/out"' \
  "grow f32: rc $rc, $out $err"
run grow -m "$DEMO" -o "$T/g16" "${SHAPE[@]}"
check '[ $rc = 0 ]' "grow bf16: rc $rc, $err"
check '[ -e "$T/g16/tokenizer.json" ] && [ -e "$T/g16/tokenizer_config.json" ]' "tokenizer not copied"
check '"$BIN" info -m "$T/g16" | grep -q "vocab.*1000\|1000"' "info on the grown model"
check '! ls "$T" | grep -q grow-tmp' "a temporary directory was left behind"

# answer ids and model calls of one generation
answer() { # MODEL PROMPT ARGS...
  local m=$1 p=$2
  shift 2
  "$BIN" generate -m "$m" -p "$p" -n 64 -t 2 "$@" --json | js /dev/stdin 'console.log(JSON.stringify(d.answer_ids), d.model_calls)'
}
prompts=(
  "Write a Python function f(x) that does this: start from x, add 5, square it, then return its absolute value."
  "Tom has 12 apples. He buys 7 more. How many apples does he have now?"
  "Write a Python function f(x) that does this: start from x, add 4, then multiply by 2."
)
for p in "${prompts[@]}"; do
  for mode in "--decoder ar" "--rolling --slot-size 4 --slot-threshold 0.5 --draft-policy fixed"; do
    # shellcheck disable=SC2086
    want=$(answer "$DEMO" "$p" $mode)
    for g in g32 g16; do
      # shellcheck disable=SC2086
      got=$(answer "$T/$g" "$p" $mode)
      check '[ -n "$want" ] && [ "$got" = "$want" ]' "$g $mode '$p': grown '$got', demo '$want'"
    done
  done
done

# logits: the demo's vocabulary in bf16 within 1e-5 of the largest (seen
# 4e-7; norms rounded to bf16 would give 7e-4), the extra rows far below. The
# avx2 kernels keep activations in f32 at every tier, so this holds anywhere.
ids=$("$BIN" tokenize -m "$DEMO" "${prompts[1]}" | tail -1)
REFUSION_CPU=avx2 "$BIN" logits -m "$DEMO" --ids "$ids" -n 6 >"$T/la.json"
REFUSION_CPU=avx2 "$BIN" logits -m "$T/g16" --ids "$ids" -n 6 >"$T/lb.json"
cmp=$(node -e '
const a = require(process.argv[1]), b = require(process.argv[2]);
let md = 0, ma = 0, gap = Infinity;
a.logits.forEach((x, k) => {
  const y = b.logits[k];
  let lo = Infinity, hi = -Infinity;
  x.forEach((v, i) => { md = Math.max(md, Math.abs(v - y[i])); ma = Math.max(ma, Math.abs(v)); lo = Math.min(lo, y[i]); });
  for (let i = x.length; i < y.length; i++) hi = Math.max(hi, y[i]);
  gap = Math.min(gap, lo - hi);
});
console.log(md / ma <= 1e-5 && gap > 100 ? "ok" : "bad", (md / ma).toExponential(2), gap.toFixed(0), JSON.stringify(a.greedy) === JSON.stringify(b.greedy));' "$T/la.json" "$T/lb.json")
check '[ "${cmp%% *}" = ok ] && [ "${cmp##* }" = true ]' "bf16 grown logits: rel err, gap, same greedy = $cmp"

run grow -m "$DEMO" -o "$T/g8.gguf" "${SHAPE[@]}" --dtype q8_0
check '[ $rc = 0 ] && [ -f "$T/g8.gguf" ]' "grow q8_0: rc $rc, $err"
got=$(answer "$T/g8.gguf" "${prompts[1]}" --decoder ar | cut -d' ' -f1)
check '[ -n "$got" ] && [ "$got" != "[]" ]' "the q8_0 grown model does not answer ('$got')"
check '! ls "$T" | grep -q grow-tmp' "the q8_0 growth left its temporary checkpoint behind"

# a Q8_0 GGUF source (dequantised while grown): the same answer ids
"$BIN" convert -m "$DEMO" -o "$T/d8.gguf" --dtype q8_0 >/dev/null
run grow -m "$T/d8.gguf" -o "$T/gq" --hidden 320 --head-dim 128 --vocab 900
check '[ $rc = 0 ] && echo "$err" | grep -q "tokenizer .* is not carried over"' "grow from gguf: rc $rc, $err"
pids=$("$BIN" generate -m "$T/d8.gguf" -p "${prompts[1]}" -n 1 --decoder ar --json | js /dev/stdin 'console.log(d.prompt_ids.join(","))')
want=$("$BIN" generate -m "$T/d8.gguf" --ids "$pids" -n 64 --decoder ar --json | js /dev/stdin 'console.log(JSON.stringify(d.answer_ids))')
got=$("$BIN" generate -m "$T/gq" --ids "$pids" -n 64 --decoder ar --json | js /dev/stdin 'console.log(JSON.stringify(d.answer_ids))')
check '[ -n "$want" ] && [ "$got" = "$want" ]' "grown from gguf: '$got' vs '$want'"
rm -rf "$T/gq" "$T/d8.gguf"

# OUT with a trailing slash is the directory; a .gguf name with a float dtype is a GGUF file
run grow -m "$DEMO" -o "$T/slash/" --layers 5
check '[ $rc = 0 ] && [ -f "$T/slash/config.json" ] && ! ls "$T" | grep -q grow-tmp' "trailing slash: rc $rc, $err"
run grow -m "$DEMO" -o "$T/g.gguf" --layers 5 --dtype bf16
check '[ $rc = 0 ] && [ -f "$T/g.gguf" ] && "$BIN" info -m "$T/g.gguf" | grep -q "layers 5"' "bf16 gguf: rc $rc, $err"
rm -rf "$T/slash" "$T/g.gguf"

# bad targets: one line, a non-zero exit, nothing written
one_line() { [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [ "${err#refusion: }" != "$err" ]; }
run grow -m "$DEMO" -o "$T/x" --hidden 128
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "hidden size 128 is smaller than the source.s 256"' "smaller: $rc $err"
run grow -m "$DEMO" -o "$T/x" --heads 6 --kv-heads 4
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "do not divide"' "heads: $rc $err"
run grow -m "$DEMO" -o "$T/x" --head-dim 96
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "even multiple"' "head_dim: $rc $err"
run grow -m "$DEMO" -o "$T/x" --vocab 900
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "more hidden dims"' "vocab without hidden: $rc $err"
run grow -m "$DEMO" -o "$T/x" --preset 70b
check '[ $rc = 2 ] && one_line && echo "$err" | grep -q "unknown model preset"' "preset: $rc $err"
run grow -m "$DEMO" -o "$T/x"
check '[ $rc = 2 ] && one_line' "no target shape: $rc $err"
run grow -m "$DEMO" -o "$T/g16" --layers 5
check '[ $rc = 2 ] && one_line && echo "$err" | grep -q "exists"' "existing output: $rc $err"
run grow -m "$T/missing" -o "$T/x" --layers 5
check '[ $rc = 1 ] && one_line' "missing source: $rc $err"
run grow -m "$DEMO" -o "$T/x" --preset 8b --hidden 16384 --ffn 65536 --layers 4096
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "needs 27772.88 GB of disk"' "28 TB target not refused: $rc $err"
check '[ ! -e "$T/x" ]' "a failed growth left $T/x"
# Q4_0 needs columns in blocks of 32
run grow -m "$DEMO" -o "$T/bad.gguf" --ffn 1000 --dtype q4_0
check '[ $rc = 1 ] && one_line && echo "$err" | grep -q "blocks of 32" && [ ! -e "$T/bad.gguf" ]' "q4_0 shape: $rc $err"
check '! ls "$T" | grep -q "tmp"' "temporary files left: $(ls "$T")"

# init and grow read the model shape from one option table: the same rows,
# ranges and messages; --max-pos and --theta are init's alone
expect_fail 2 "--tied expects an integer in [0, 1], got '2'" grow -m "$DEMO" -o "$T/x" --tied 2
expect_fail 2 "--tied expects an integer in [0, 1], got '2'" init -o "$T/x" --tied 2
expect_fail 2 "--layers expects an integer in [1, 4096], got '0'" grow -m "$DEMO" -o "$T/x" --layers 0
expect_fail 2 "--layers expects an integer in [1, 4096], got '0'" init -o "$T/x" --layers 0
expect_fail 2 "unknown option '--max-pos'" grow -m "$DEMO" -o "$T/x" --layers 5 --max-pos 64
expect_fail 2 "-m SMALL and -o BIG are required" grow -o "$T/x" --layers 5
expect_fail 2 "--dtype must be bf16, f32 or f16" init -o "$T/x" --dtype q4_0
check '[ ! -e "$T/x" ]' "a refused command line wrote $T/x"
for c in init grow; do
  run "$c" --help
  for o in preset hidden layers heads kv-heads head-dim ffn vocab tied progress no-progress; do
    check 'grep -q -- "--$o\b" "$T/out"' "$c --help lacks --$o"
  done
done

echo "cli_grow: $pass passed, $fails failed"
[ "$fails" = 0 ]
