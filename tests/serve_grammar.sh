#!/usr/bin/env bash
# serve_grammar.sh - grammars in `refusion serve` (the demo model, whose
# generation_config.json picks the rolling slot):
#  - /v1/chat/completions with response_format json_schema and json_object,
#    and with llama-server's "json_schema"; /v1/completions with "grammar":
#    the answer parses (and, with python3-jsonschema, validates) under it;
#  - the rolling slot's answer equals "mode": "ar"'s under the same schema;
#  - plan-and-infill (the reference's and AR-verified, which equals "mode":
#    "ar"'s answer) and mdm under the schema: valid answers;
#  - refusals are 400 naming the field: a schema keyword it cannot enforce
#    (unsupported_parameter), bad GBNF, two grammars.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_grammar
rf_serve_start "$T/log" -m "$SRC/models/refusion-demo"
have_jsonschema=0
python3 -c 'import jsonschema' 2>/dev/null && have_jsonschema=1

post_code() { # path body: status in $code, body in $T/resp
  code=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$URL$1")
}
S='{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":99}},"required":["name","age"],"additionalProperties":false}'
MSG='[{"role":"user","content":"Give a JSON object with a name and an age."}]'

for extra in '' ', "mode": "ar"' ', "temperature": 0.7, "seed": 5' ', "mode": "ar", "temperature": 0.7, "seed": 5'; do
  post_code /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 40, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", \"schema\": $S}}$extra}"
  [ "$code" = 200 ] && ok || bad "json_schema ($extra): $code $(cat "$T/resp")"
  jq -r '.choices[0].message.content' "$T/resp" >"$T/content.$(echo "$extra" | md5sum | cut -c1-6)"
  if [ "$(jq -r '.choices[0].finish_reason' "$T/resp")" = stop ] && [ "$have_jsonschema" = 1 ]; then
    jq -r '.choices[0].message.content' "$T/resp" >"$T/doc"
    python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))' \
      "$T/doc" "$S" && ok || bad "json_schema ($extra): not valid: $(cat "$T/doc")"
  fi
done
h() { echo "$1" | md5sum | cut -c1-6; }
cmp -s "$T/content.$(h '')" "$T/content.$(h ', "mode": "ar"')" && ok || bad "greedy: rolling != ar"
cmp -s "$T/content.$(h ', "temperature": 0.7, "seed": 5')" "$T/content.$(h ', "mode": "ar", "temperature": 0.7, "seed": 5')" \
  && ok || bad "sampled: rolling != ar"

# plan-and-infill and mdm under the schema (they commit in position order)
for extra in ', "rolling": false' ', "rolling": false, "ar_verify": "both", "token_threshold": 0.5' \
  ', "mode": "mdm", "serial_num_blocks": 1'; do
  post_code /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 40, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", \"schema\": $S}}$extra}"
  [ "$code" = 200 ] && ok || { bad "json_schema ($extra): $code $(cat "$T/resp")"; continue; }
  jq -r '.choices[0].message.content' "$T/resp" >"$T/doc"
  if [ "$(jq -r '.choices[0].finish_reason' "$T/resp")" = stop ] && [ "$have_jsonschema" = 1 ]; then
    python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))' \
      "$T/doc" "$S" && ok || bad "json_schema ($extra): not valid: $(cat "$T/doc")"
  fi
  [[ "$extra" != *ar_verify* ]] || cmp -s "$T/doc" "$T/content.$(h ', "mode": "ar"')" && ok ||
    bad "AR-verified plan-and-infill != ar: $(cat "$T/doc")"
done

post_code /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 40, \"response_format\": {\"type\": \"json_object\"}}"
[ "$code" = 200 ] && jq -r '.choices[0].message.content' "$T/resp" | grep -q '^{' && ok || bad "json_object: $code $(cat "$T/resp")"
post_code /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 40, \"json_schema\": $S}"
[ "$code" = 200 ] && ok || bad "json_schema field: $code $(cat "$T/resp")"
post_code /v1/completions '{"prompt": "Is the sea wet?", "max_tokens": 8, "grammar": "root ::= (\"yes\" | \"no\") \".\""}'
[ "$code" = 200 ] && [[ "$(jq -r '.choices[0].text' "$T/resp")" =~ ^(yes|no)\.?$ ]] && ok || bad "grammar: $code $(cat "$T/resp")"

refused() { # body param code-or-empty
  post_code "$1" "$2"
  local p c
  p=$(jq -r '.error.param' "$T/resp") c=$(jq -r '.error.code' "$T/resp")
  [ "$code" = 400 ] && [ "$p" = "$3" ] && { [ -z "$4" ] || [ "$c" = "$4" ]; } && ok || bad "refusal $2: $code $(cat "$T/resp")"
}
refused /v1/chat/completions "{\"messages\": $MSG, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"string\", \"format\": \"date\"}}}}" response_format unsupported_parameter
refused /v1/chat/completions "{\"messages\": $MSG, \"json_schema\": {\"type\": \"array\", \"uniqueItems\": true}}" json_schema unsupported_parameter
refused /v1/completions '{"prompt": "x", "grammar": "root ::= \"a"}' grammar ""
refused /v1/completions '{"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}}' grammar ""
refused /v1/chat/completions "{\"messages\": $MSG, \"response_format\": {\"type\": \"json_schema\"}}" response_format ""

rf_serve_stop "$SPID" "$T/log" || fails=$((fails + 1))
SPID=""
echo "serve_grammar: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
