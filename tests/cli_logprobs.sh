#!/usr/bin/env bash
# cli_logprobs.sh - `refusion generate --logprobs N --json` on the demo model:
#  - AR decoding, greedy and sampled: every answer token's logprob, and its
#    N alternatives, are the log-softmax of the raw logits `refusion logits`
#    prints for that position (computed here, in float64, from its output:
#    the greedy continuation's rows for the greedy answer, one run per
#    position over prompt + answer so far for the sampled one), the
#    alternatives sorted and the likeliest ones;
#  - the rolling slot: the same answer and the same logprobs as AR, greedy
#    and sampled (within rf_width_tol: exactly at avx512);
#  - under a JSON schema the values are still the model's (before the mask);
#  - plan-and-infill and MDM: an entry per answer token, the answer unchanged;
#  - refusals, one line each: --logprobs without --json, N outside [0, 20].
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_logprobs
M="$SRC/models/refusion-demo"
TOL=$(rf_width_tol)
P="Tom has 12 apples. He finds 7 more apples. He loses 5 of them. How many apples does Tom have now?"

# check_ref JSON MODE: the answer's logprobs against `refusion logits`
# (MODE greedy: one run of the greedy continuation; else one run per position)
check_ref() {
  local json=$1 mode=$2 n ids k prefix
  n=$(jq '.answer_ids | length' "$json")
  ids=$(jq -r '.prompt_ids | map(tostring) | join(" ")' "$json")
  rm -f "$T/rows"
  if [ "$mode" = greedy ]; then
    "$BIN" logits -m "$M" --ids "$ids" -n "$n" >"$T/rows" 2>"$T/lerr" || bad "logits: $(cat "$T/lerr")"
  else
    for k in $(seq 0 $((n - 1))); do
      prefix=$(jq -r --argjson k "$k" '(.prompt_ids + .answer_ids[:$k]) | map(tostring) | join(" ")' "$json")
      "$BIN" logits -m "$M" --ids "$prefix" -n 1 >>"$T/rows" 2>"$T/lerr" || bad "logits: $(cat "$T/lerr")"
    done
  fi
  python3 - "$json" "$T/rows" "$mode" "$TOL" <<'EOF' && ok || bad "$mode: logprobs differ from the log-softmax of the logits"
import json, math, sys
gen = json.load(open(sys.argv[1]))
rows = []
for line in open(sys.argv[2]):
    o = json.loads(line)
    rows += o["logits"]
    if sys.argv[3] == "greedy":
        # the greedy continuation is the greedy answer (rows predict its tokens)
        assert o["greedy"][:len(gen["answer_ids"])] == gen["answer_ids"], (o["greedy"], gen["answer_ids"])
lps = gen["logprobs"]
assert len(lps) == len(gen["answer_ids"]) == len(rows) > 0, (len(lps), len(gen["answer_ids"]), len(rows))
def close(a, b):  # `refusion logits` takes the prompt in one call, AR one token per call
    return abs(a - b) <= max(1e-4 + 1e-5 * abs(b), float(sys.argv[4]))
for pos, (lp, row, tok) in enumerate(zip(lps, rows, gen["answer_ids"])):
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    ref = [x - lse for x in row]
    assert lp["token"] == tok, (pos, lp["token"], tok)
    assert close(lp["logprob"], ref[tok]), (pos, lp["logprob"], ref[tok])
    top = lp["top_logprobs"]
    best = sorted(ref, reverse=True)
    assert len(top) == 5, (pos, len(top))
    for k, t in enumerate(top):
        assert close(t["logprob"], ref[t["token"]]), (pos, k, t, ref[t["token"]])
        assert t["logprob"] >= best[k] - max(2e-4, 2 * float(sys.argv[4])), (pos, k, t["logprob"], best[k])
        assert k == 0 or t["logprob"] <= top[k - 1]["logprob"], (pos, "not sorted", top)
print("%d positions checked" % len(lps), file=sys.stderr)
EOF
}

for samp in "--temp 0" "--temp 0.9 -s 7 --top-k 40"; do
  mode=greedy
  [ "$samp" = "--temp 0" ] || mode=sampled
  # shellcheck disable=SC2086
  run generate -m "$M" -p "$P" -n 16 --json --logprobs 5 --decoder ar $samp
  [ "$rc" -eq 0 ] && ok || bad "ar ($samp): $err"
  cp "$T/out" "$T/ar.json"
  check_ref "$T/ar.json" "$mode"
  # the rolling slot: AR's answer, and AR's logprobs (a fixed width: the
  # demo's adaptive one may choose 1 token per call where wide calls cost more)
  # shellcheck disable=SC2086
  run generate -m "$M" -p "$P" -n 16 --json --logprobs 5 --rolling --slot-size 4 --draft-policy fixed $samp
  [ "$rc" -eq 0 ] && ok || bad "rolling ($samp): $err"
  a=$(jq -c .answer_ids "$T/ar.json") r=$(jq -c .answer_ids "$T/out")
  [ -n "$a" ] && [ "$a" != null ] && [ "$a" = "$r" ] && ok || bad "rolling ($samp): answer $r != ar $a"
  jq .logprobs "$T/ar.json" >"$T/lp_ar.json" && jq .logprobs "$T/out" >"$T/lp_rolling.json"
  rf_py -m logprobs_close "$T/lp_ar.json" "$T/lp_rolling.json" "$TOL" && ok ||
    bad "rolling ($samp): logprobs differ from AR's beyond $TOL: $(head -c 600 "$T/lp_rolling.json")"
  check "[ \"\$(jq '.tokens_per_call > 1' \"\$T/out\")\" = true ]" "rolling ($samp): one token per call"
done

# under a schema: the model's values, not the masked row's (the top list
# holds tokens the grammar refused)
run generate -m "$M" -p "$P" -n 12 --json --logprobs 5 --decoder ar -j '{"type":"integer"}'
[ "$rc" -eq 0 ] && ok || bad "ar with a schema: $err"
cp "$T/out" "$T/schema.json"
check_ref "$T/schema.json" sampled
# --logprobs 0: each token's own value, no alternatives
run generate -m "$M" -p "$P" -n 6 --json --logprobs 0 --decoder ar
check "[ \"\$(jq -c '[(.logprobs | length), (.logprobs | map(.top_logprobs | length) | add)]' \"\$T/out\")\" = '[6,0]' ]" \
  "--logprobs 0: $(head -c 300 "$T/out")"

# plan-and-infill and MDM: the same answer as without them, one entry per
# answer token naming that token, each <= 0, 2 alternatives sorted (their
# values against the model's rows: tests/decode_logprobs.c)
for dec in refusion mdm; do
  run generate -m "$M" -p "$P" -n 16 --decoder $dec --generation-config none --json
  plain=$(jq -c .answer_ids "$T/out")
  run generate -m "$M" -p "$P" -n 16 --decoder $dec --generation-config none --json --logprobs 2
  [ "$rc" -eq 0 ] && ok || bad "$dec with --logprobs: $err"
  check "[ \"\$(jq -c .answer_ids \"\$T/out\")\" = '$plain' ]" "$dec: --logprobs changed the answer"
  check "jq -e '(.logprobs | length) == (.answer_ids | length) and (.answer_ids | length) > 0
    and ([.logprobs, .answer_ids] | transpose | all(.[0].token == .[1] and .[0].logprob <= 0
      and (.[0].top_logprobs | length) == 2 and .[0].top_logprobs[0].logprob >= .[0].top_logprobs[1].logprob))' \
    \"\$T/out\" >/dev/null" "$dec: logprobs: $(head -c 400 "$T/out")"
done
expect_fail 2 "give --json too" generate -m "$M" -p "$P" --decoder ar --logprobs 2
expect_fail 2 "--logprobs" generate -m "$M" -p "$P" --decoder ar --json --logprobs 21

echo "cli_logprobs: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
