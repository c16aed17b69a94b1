#!/usr/bin/env bash
# cli_generation_config.sh - a checkpoint's generation_config.json gives the
# defaults; flags override it; in the server, request fields override both:
#   1. the demo model ships the rolling slot: without flags its answer is AR
#      decoding's, token for token, in fewer calls than tokens; --json
#      "sources" and --verbose say the settings came from the file;
#      --generation-config none is the built-in default (the reference
#      decoder, another answer); --decoder refusion is plan-and-infill with
#      the file's slot settings, without its rolling;
#   2. Hugging Face's keys: max_new_tokens, temperature, top_k, do_sample
#      (true; false: greedy whatever temperature says), eos_token_id as an id
#      and as a list (the tokenizer's EOS when listed, else the first): the
#      answers equal `--generation-config none` with the same settings as
#      flags; a flag wins over the file and is reported as "flag";
#   3. --generation-config FILE; bad files: one error line naming the file
#      and the key, exit 1;
#   4. serve: "settings_source" of a response says generation_config.json,
#      flag or request for each setting, with the values they give.
set -u
. "$(dirname "$0")/helpers/common.sh"
. "$(dirname "$0")/helpers/small_model.sh"
rf_test_setup cli_generation_config
DEMO=$SRC/models/refusion-demo
Q="Tom has 12 apples. He buys 7 more. How many apples does he have now?"
gen() { # NAME MODEL generate-options...: --json into $T/NAME.json
  local name=$1 model=$2
  shift 2
  "$BIN" generate -m "$model" --threads 1 --json "$@" >"$T/$name.json" 2>"$T/$name.err" ||
    bad "generate -m $model $*: $(cat "$T/$name.err")"
}

# ---- 1. the demo model's shipped settings ---------------------------------------------
gen plain "$DEMO" -p "$Q"
gen ar "$DEMO" -p "$Q" --decoder ar
[ "$(field "$T/plain.json" 'o["answer_ids"]')" = "$(field "$T/ar.json" 'o["answer_ids"]')" ] && ok ||
  bad "the demo's plain answer is not AR's: $(field "$T/plain.json" 'o["text"]') vs $(field "$T/ar.json" 'o["text"]')"
[ "$(field "$T/plain.json" 'o["model_calls"] < o["tokens"]')" = True ] && ok ||
  bad "the demo's plain run: $(field "$T/plain.json" 'o["model_calls"], o["tokens"]') calls, tokens"
[ "$(field "$T/plain.json" 'o["sources"].get("rolling"), o["sources"].get("slot-threshold")')" = \
  "('generation_config.json', 'generation_config.json')" ] && ok || bad "sources: $(field "$T/plain.json" 'o["sources"]')"
# --decoder chooses without the file's rolling (its slot settings stay)
gen dec "$DEMO" -p "$Q" --decoder refusion
gen dec_ref "$DEMO" -p "$Q" --generation-config none --decoder refusion --slot-threshold 0.5
[ "$(field "$T/dec.json" '"rolling" in o["sources"], o["sources"].get("slot-threshold"), o["answer_ids"]')" = \
  "$(field "$T/dec_ref.json" 'False, "generation_config.json", o["answer_ids"]')" ] && ok ||
  bad "--decoder refusion with the file: $(field "$T/dec.json" 'o["sources"], o["model_calls"]')"
gen none "$DEMO" -p "$Q" --generation-config none
[ "$(field "$T/none.json" 'o["sources"].get("generation-config"), "rolling" in o["sources"]')" = "('flag', False)" ] && ok ||
  bad "none: $(field "$T/none.json" 'o["sources"]')"
[ "$(field "$T/none.json" 'o["answer_ids"]')" != "$(field "$T/plain.json" 'o["answer_ids"]')" ] && ok ||
  bad "--generation-config none gives the shipped settings' answer"
"$BIN" generate -m "$DEMO" -p "$Q" -n 4 --slot-size 2 -v >/dev/null 2>"$T/v.err"
grep -qE -- '--rolling +on +\(generation_config.json\)' "$T/v.err" && grep -qE -- '--slot-size +2 +\(flag\)' "$T/v.err" &&
  grep -qE -- '--gen-length +4 +\(flag\)' "$T/v.err" && grep -qE -- '--blocks +32 +\(default\)' "$T/v.err" && ok ||
  bad "--verbose: $(cat "$T/v.err")"

# ---- 2. Hugging Face's keys on a small model ------------------------------------------
rf_small_model "$T/s" || bad "small model"
M=$T/s/m
P="What is 3 plus 4?"
cp -r "$M" "$T/g"
echo '{"max_new_tokens": 9, "temperature": 1.5, "do_sample": true, "top_k": 7, "seed": 5,
       "refusion": {"decoder": "ar", "seed": 11}}' >"$T/g/generation_config.json"
gen g1 "$T/g" -p "$P"
gen f1 "$M" -p "$P" --generation-config none --decoder ar -n 9 --temp 1.5 --top-k 7 -s 11
[ "$(field "$T/g1.json" 'o["answer_ids"], o["settings"]["temperature"], o["settings"]["top_k"]')" = \
  "$(field "$T/f1.json" 'o["answer_ids"], o["settings"]["temperature"], o["settings"]["top_k"]')" ] && ok ||
  bad "HF keys: $(field "$T/g1.json" 'o["answer_ids"], o["settings"]') vs flags $(field "$T/f1.json" 'o["answer_ids"], o["settings"]')"
[ "$(field "$T/g1.json" 'o["mode"], len(o["answer_ids"]) <= 9')" = "('ar', True)" ] && ok || bad "HF keys: mode / length"
gen g2 "$T/g" -p "$P" -n 3 --temp 0
gen f2 "$M" -p "$P" --decoder ar -n 3 --top-k 7 -s 11
[ "$(field "$T/g2.json" 'o["answer_ids"]')" = "$(field "$T/f2.json" 'o["answer_ids"]')" ] && ok || bad "flags over the file"
[ "$(field "$T/g2.json" 'o["sources"]["gen-length"], o["sources"]["temp"], o["sources"]["top-k"]')" = \
  "('flag', 'flag', 'generation_config.json')" ] && ok || bad "flag sources: $(field "$T/g2.json" 'o["sources"]')"
# do_sample false: greedy, whatever temperature says
echo '{"max_new_tokens": 9, "temperature": 1.5, "do_sample": false, "refusion": {"decoder": "ar"}}' >"$T/g/generation_config.json"
gen g3 "$T/g" -p "$P"
gen f3 "$M" -p "$P" --decoder ar -n 9
[ "$(field "$T/g3.json" 'o["answer_ids"], o["settings"]["temperature"]')" = "$(field "$T/f3.json" 'o["answer_ids"], 0.0')" ] && ok ||
  bad "do_sample false: $(field "$T/g3.json" 'o["answer_ids"], o["settings"]')"
# eos_token_id: an id of the greedy answer (its 3rd token) ends the answer there;
# in a list the first counts unless the tokenizer's EOS is listed
x=$(field "$T/f3.json" 'o["answer_ids"][2]')
first=$(field "$T/f3.json" 'o["answer_ids"].index('"$x"') + 1')
other=$(field "$T/f3.json" '[t for t in range(3, 282) if t not in o["answer_ids"]][0]')
for eos in "$x" "[$x, $other]" "[$other, $x]"; do
  echo "{\"max_new_tokens\": 9, \"eos_token_id\": $eos, \"refusion\": {\"decoder\": \"ar\"}}" >"$T/g/generation_config.json"
  gen g4 "$T/g" -p "$P"
  if [ "$eos" = "[$other, $x]" ]; then
    [ "$(field "$T/g4.json" 'o["answer_ids"]')" = "$(field "$T/f3.json" 'o["answer_ids"]')" ] && ok ||
      bad "eos_token_id $eos: $(field "$T/g4.json" 'o["answer_ids"]') (want the whole greedy answer)"
  else
    [ "$(field "$T/g4.json" 'len(o["answer_ids"]), o["hit_eos"]')" = "($first, True)" ] && ok ||
      bad "eos_token_id $eos: $(field "$T/g4.json" 'o["answer_ids"], o["hit_eos"]') (want $first tokens ending at $x)"
  fi
done
# the demo's tokenizer EOS (<|im_end|>, 845) listed second is the one chosen
mkdir -p "$T/d" && cp "$DEMO"/config.json "$DEMO"/model.safetensors "$DEMO"/tokenizer*.json "$T/d/"
for eos in "[5, 845]:845" "[5, 7]:5"; do
  echo "{\"eos_token_id\": ${eos%%:*}}" >"$T/d/generation_config.json"
  "$BIN" generate -m "$T/d" -p "$Q" -n 1 -v >/dev/null 2>"$T/v.err"
  grep -qE "eos_token_id +${eos##*:} +\(generation_config.json\)" "$T/v.err" && ok || bad "eos_token_id ${eos%%:*}: $(grep eos "$T/v.err")"
done

# ---- 3. --generation-config FILE and bad files ------------------------------------------
echo '{"max_new_tokens": 2, "refusion": {"decoder": "ar"}}' >"$T/two.json"
gen g5 "$M" -p "$P" --generation-config "$T/two.json"
[ "$(field "$T/g5.json" 'len(o["answer_ids"]), o["mode"]')" = "(2, 'ar')" ] && ok || bad "--generation-config FILE"
bad_file() { # JSON NEEDLE
  echo "$1" >"$T/g/generation_config.json"
  expect_fail 1 "$T/g/generation_config.json: $2" generate -m "$T/g" -p "$P"
}
bad_file '{"refusion": {"slot_size": "four"}}' '"refusion.slot_size" must be an integer'
bad_file '{"refusion": {"slot_size": 0}}' 'refusion.slot_size expects an integer in [1,'
bad_file '{"refusion": {"slots": 4}}' 'unknown setting "refusion.slots"'
bad_file '{"refusion": {"decoder": "fast"}}' 'refusion.decoder expects one of refusion,ar,mdm'
bad_file '{"eos_token_id": ["x"]}' '"eos_token_id" must be a token id or a list of them'
bad_file '{"do_sample": "yes"}' '"do_sample" must be true or false'
bad_file '{"max_new_tokens": 5,' 'line '

# ---- 4. serve: default < generation_config.json < flag < request -------------------------
echo '{"max_new_tokens": 6, "top_k": 3, "refusion": {"decoder": "ar", "slot_size": 3}}' >"$T/g/generation_config.json"
rf_serve_start "$T/server.log" -m "$T/g" --threads 1 --slot-size 5 -q
grep -q "defaults from the model's generation_config.json: mode=ar max_tokens=6 top_k=3" "$T/server.log" && ok ||
  bad "serve: no settings line: $(cat "$T/server.log")"
curl -s "$URL/v1/completions" -d '{"prompt": "What is 3 plus 4?"}' >"$T/r1.json"
curl -s "$URL/v1/completions" -d '{"prompt": "What is 3 plus 4?", "max_tokens": 2, "top_k": 1}' >"$T/r2.json"
[ "$(field "$T/r1.json" '[(o["refusion"]["settings"][k], o["refusion"]["settings_source"][k]) for k in ("max_tokens", "mode", "slot_size", "top_k", "blocks")]')" = \
  "[(6, 'generation_config.json'), ('ar', 'generation_config.json'), (5, 'flag'), (3, 'generation_config.json'), (32, 'default')]" ] &&
  ok || bad "serve defaults: $(cat "$T/r1.json")"
[ "$(field "$T/r2.json" '[(o["refusion"]["settings"][k], o["refusion"]["settings_source"][k]) for k in ("max_tokens", "top_k", "mode")]')" = \
  "[(2, 'request'), (1, 'request'), ('ar', 'generation_config.json')]" ] && ok || bad "serve request: $(cat "$T/r2.json")"
[ "$(field "$T/r2.json" 'o["usage"]["completion_tokens"]')" = 2 ] && ok || bad "serve: max_tokens 2 not honoured"

echo "cli_generation_config: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
