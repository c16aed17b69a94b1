#!/usr/bin/env bash
# cli_grammar.sh - `refusion generate --grammar / --grammar-file /
# --json-schema` on the demo model:
#  - the answers of AR decoding and of the rolling slot, greedy and sampled,
#    under three JSON schemas and two prompts: the same ids for the same
#    settings, and (when Debian's python3-jsonschema is installed) every
#    answer that ended with EOS is JSON valid under its schema;
#  - a GBNF grammar from a file: the answer is one of its sentences;
#  - plan-and-infill (three settings) and mdm (two) under the schemas: the
#    answers that ended are valid; AR-verified plan-and-infill (--ar-verify
#    both, token threshold 0.5) gives constrained greedy AR's ids;
#  - refusals, one line each: a schema keyword it cannot enforce (named),
#    bad GBNF (line and column), two grammars at once, --grammar outside
#    generate / chat.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_grammar
M="$SRC/models/refusion-demo"
have_jsonschema=0
python3 -c 'import jsonschema' 2>/dev/null && have_jsonschema=1

S1='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false}'
S2='{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":4}'
S3='{"type":"object","properties":{"answer":{"enum":["yes","no"]},"why":{"type":"string","pattern":"^[a-z ]+$"}},"required":["answer"],"additionalProperties":false}'
P1="Give a JSON object with a name and an age."
P2="What is 12 plus 7?"
n_valid=0
for si in 1 2 3; do
  eval "S=\$S$si"
  for pi in 1 2; do
    eval "P=\$P$pi"
    for samp in "--temp 0" "--temp 0.8 -s 3 --top-k 40"; do
      # shellcheck disable=SC2086
      run generate -m "$M" -p "$P" -n 48 --json -j "$S" --decoder ar $samp
      [ "$rc" -eq 0 ] && ok || bad "ar schema $si prompt $pi ($samp): $err"
      cp "$T/out" "$T/ar.json"
      # shellcheck disable=SC2086
      run generate -m "$M" -p "$P" -n 48 --json -j "$S" --rolling --slot-size 4 $samp
      [ "$rc" -eq 0 ] && ok || bad "rolling schema $si prompt $pi ($samp): $err"
      a=$(jq -c .answer_ids "$T/ar.json") r=$(jq -c .answer_ids "$T/out")
      [ -n "$a" ] && [ "$a" = "$r" ] && ok || bad "schema $si prompt $pi ($samp): rolling $r != ar $a"
      if [ "$(jq .hit_eos "$T/ar.json")" = true ] && [ "$have_jsonschema" = 1 ]; then
        jq -r .text "$T/ar.json" >"$T/doc"
        if python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))' \
          "$T/doc" "$S" 2>"$T/why"; then
          ok
          n_valid=$((n_valid + 1))
        else
          bad "schema $si prompt $pi ($samp): answer not valid: $(cat "$T/doc") $(tail -1 "$T/why")"
        fi
      fi
    done
  done
done
[ "$have_jsonschema" = 0 ] || [ "$n_valid" -gt 0 ] && ok || bad "no answer ended with EOS: nothing validated"

# plan-and-infill (the model's settings, the reference's, AR-verified) and mdm under the
# schemas: answers valid; AR-verified with one slot per step is constrained greedy AR
for si in 1 2 3; do
  eval "S=\$S$si"
  run generate -m "$M" -p "$P1" -n 48 --json -j "$S" --decoder ar
  cp "$T/out" "$T/ar.json"
  for dec in "--decoder refusion" "--decoder refusion --generation-config none" \
    "--decoder refusion --ar-verify both --token-threshold 0.5 --lookahead" "--decoder mdm --blocks 1" \
    "--decoder mdm --blocks 2 --steps 12 --temp 0.7 -s 5"; do
    # shellcheck disable=SC2086
    run generate -m "$M" -p "$P1" -n 48 --json -j "$S" $dec
    [ "$rc" -eq 0 ] && ok || { bad "schema $si ($dec): $err"; continue; }
    if [[ "$dec" == *"ar-verify both"* ]]; then
      a=$(jq -c .answer_ids "$T/ar.json") r=$(jq -c .answer_ids "$T/out")
      [ -n "$a" ] && [ "$a" = "$r" ] && ok || bad "schema $si ($dec): $r != ar $a"
    fi
    if [ "$(jq .hit_eos "$T/out")" = true ] && [ "$have_jsonschema" = 1 ]; then
      jq -r .text "$T/out" >"$T/doc"
      python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))' \
        "$T/doc" "$S" 2>"$T/why" && { ok; n_valid=$((n_valid + 1)); } ||
        bad "schema $si ($dec): answer not valid: $(cat "$T/doc") $(tail -1 "$T/why")"
    fi
  done
done

printf '# yes or no, then a full stop\nroot ::= ("yes" | "no") "."\n' >"$T/yn.gbnf"
for dec in "--decoder ar" "--rolling" "--decoder refusion" "--decoder mdm --blocks 1"; do
  # shellcheck disable=SC2086
  run generate -m "$M" -p "$P2" -n 8 --grammar-file "$T/yn.gbnf" $dec
  [ "$rc" -eq 0 ] && [[ "$out" =~ ^(yes|no)\.$ ]] && ok || bad "yes/no grammar ($dec): '$out' $err"
done

expect_fail 1 "'format' is not enforced" generate -m "$M" -p "$P1" --decoder ar -j '{"type":"string","format":"date"}'
expect_fail 1 "'uniqueItems'" generate -m "$M" -p "$P1" --decoder ar --json-schema '{"type":"array","uniqueItems":true}'
expect_fail 1 "line 1, column 10: unterminated literal" generate -m "$M" -p "$P1" --decoder ar --grammar 'root ::= "a'
expect_fail 2 "at most one of" generate -m "$M" -p "$P1" --decoder ar --grammar 'root ::= "a"' -j '{}'
expect_fail 2 "are for generate and chat" eval --grammar 'root ::= "a"' -m "$M"
expect_fail 1 "--grammar-file" generate -m "$M" -p "$P1" --decoder ar --grammar-file "$T/missing.gbnf"

echo "cli_grammar: $pass passed, $fails failed ($n_valid answers validated by jsonschema)"
[ "$fails" -eq 0 ]
