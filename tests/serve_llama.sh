#!/usr/bin/env bash
# serve_llama.sh - `refusion serve` as a llama-server drop-in, on the demo model:
#  - a llama-server launch line (-a, --metrics, --slots, --threads-http,
#    --cache-reuse, -fa, -ngl, --log-disable, -np, -cb, -c, --api-key-file,
#    --jinja) starts and answers;
#  - llama.cpp's multi-letter short flags: -sys, -no-cnv, -fa [on] work in
#    generate; one serve lacks (-sys, -ctk) is an error naming llama.cpp's
#    option, never "-s" with "ys";
#  - --chat-template NAME renders llama.cpp's built-in templates as
#    llama.cpp's own test (tests/test-chat-template.cpp) expects for its
#    conversation; an unknown name lists the names;
#  - sampling: two requests at temperature 1.5 without a seed differ and
#    each reports its seed (the same seed again reproduces); presence /
#    frequency penalties work with AR and are refused by plan-and-infill,
#    as top_k / top_p are; after a stop string steps and TPF are not 0;
#  - /tokenize equals `refusion tokenize` (with_pieces too), /detokenize
#    inverts it, /apply-template equals `tokenize --chat --text`, /props,
#    /slots has total_slots entries, /completion (plain and streamed, with
#    cache_prompt), /infill, /embeddings 501, timings on every answer;
#  - the web page at /, --no-webui (404), --path DIR.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_llama
DEMO=$SRC/models/refusion-demo
Q="Tom has 12 apples. He buys 7 more. How many apples does he have now?"

# ---- multi-letter short flags -----------------------------------------------------------
run generate -m "$DEMO" -sys "Answer briefly." -no-cnv -fa -p "$Q" --decoder ar -n 2 --threads 1
[ $rc -eq 0 ] && [[ "$err" == *"note: -fa on has no effect"* ]] && ok || bad "generate -sys -no-cnv -fa: exit $rc, $err"
run generate -m "$DEMO" -fa off -p "$Q" --decoder ar -n 2 --threads 1
[ $rc -eq 0 ] && [[ "$err" == *"note: -fa off has no effect"* ]] && ok || bad "generate -fa off: exit $rc, $err"
expect_fail 2 "unknown option '-sys' (llama.cpp's --system-prompt" serve -m "$DEMO" -sys hello
expect_fail 2 "unknown option '-ctk' (llama.cpp's --cache-type-k" serve -m "$DEMO" -ctk q8_0
expect_fail 2 "unknown option '-st' (llama.cpp's --single-turn" generate -m "$DEMO" -st
# an option's value is never taken for a flag: -p -st, --system -ctk
run generate -m "$DEMO" --system -ctk -p -st --decoder ar -n 2 --threads 1
[ $rc -eq 0 ] && ok || bad "values that look like llama.cpp flags: exit $rc, $err"

# ---- --chat-template NAME: llama.cpp's conversation and expected outputs ---------------------
CONV='[{"role":"system","content":"You are a helpful assistant"},{"role":"user","content":"Hello"},{"role":"assistant","content":"Hi there"},{"role":"user","content":"Who are you"},{"role":"assistant","content":"   I am an assistant   "},{"role":"user","content":"Another question"}]'
expect_tpl() { # NAME EXPECTED (printf escapes)
  local got want
  got=$("$BIN" tokenize -m "$DEMO" --chat --text --chat-template "$1" "$CONV" 2>"$T/tpl.err"; echo x)
  want=$(printf "$2"; echo x)
  [ "$got" = "$want" ] && ok || bad "--chat-template $1: got $(printf %q "$got") want $(printf %q "$want") $(cat "$T/tpl.err")"
}
expect_tpl chatml '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n'
expect_tpl llama3 '<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
expect_tpl gemma '<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n'
expect_tpl zephyr '<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n'
expect_tpl phi3 '<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n'
expect_tpl mistral-v7 '[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]'
expect_tpl llama2 '[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]'
expect_tpl llama2-sys '[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]'
run tokenize -m "$DEMO" --chat --text --chat-template no-such-template "$CONV"
[ $rc -ne 0 ] && [[ "$err" == *"neither a file nor a built-in name"*chatml*llama3*gemma* ]] && ok || bad "unknown template: exit $rc, $err"

# ---- a llama-server launch line ----------------------------------------------------------
echo sk-file-key >"$T/keys"
rf_serve_start "$T/server.log" -m "$DEMO" -a my-alias --metrics --slots --threads-http 2 --cache-reuse 256 -fa \
  -ngl 99 --log-disable -np 2 -cb -c 4096 --api-key-file "$T/keys" --jinja -n 32 --threads 1
A=(-H 'Authorization: Bearer sk-file-key' -H 'Content-Type: application/json')
get() { curl -s "${A[@]}" "$URL$1"; }
post_json() { curl -s "${A[@]}" "$URL$1" -d "$2"; }
code() { curl -s -o "$T/body" -w '%{http_code}' "${A[@]}" "$URL$1" ${2:+-d "$2"}; }
field_in() { python3 -c 'import json,sys; o=json.loads(sys.stdin.read()); print(eval(sys.argv[1]))' "$@"; }
check '[ "$(get /v1/models | field_in "o[\"data\"][0][\"id\"]")" = my-alias ]' "-a: the model id"
check '[ "$(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/models")" = 401 ]' "--api-key-file: no key, 401"
check 'grep -q "note: -fa on has no effect" "$T/server.log"' "serve -fa: the note"

# ---- sampling: a fresh seed per request, reported ---------------------------------------
CHAT='{"messages":[{"role":"user","content":"'"$Q"'"}],"mode":"ar","temperature":1.5,"max_tokens":24}'
r1=$(post_json /v1/chat/completions "$CHAT"); r2=$(post_json /v1/chat/completions "$CHAT")
s1=$(echo "$r1" | field_in 'o["refusion"]["settings"]["seed"]'); s2=$(echo "$r2" | field_in 'o["refusion"]["settings"]["seed"]')
t1=$(echo "$r1" | field_in 'o["choices"][0]["token_ids"]'); t2=$(echo "$r2" | field_in 'o["choices"][0]["token_ids"]')
[ "$s1" != "$s2" ] && [ "$s1" -ge 0 ] && [ "$s2" -ge 0 ] && ok || bad "no seed: seeds $s1 $s2"
# the reported seed is the one used: each answer again from its seed
for i in 1 2; do
  s=$(eval echo "\$s$i"); t=$(eval echo "\$t$i")
  r3=$(post_json /v1/chat/completions "${CHAT%\}},\"seed\":$s}")
  [ "$(echo "$r3" | field_in 'o["choices"][0]["token_ids"]')" = "$t" ] && ok || bad "seed $s again: not the same answer"
done
# and the seed matters (two equal answers from two seeds are possible, four are not expected)
answers=$(for s in 1 2 3 4; do post_json /v1/chat/completions "${CHAT%\}},\"seed\":$s}" | field_in 'o["choices"][0]["token_ids"]'; done | sort -u | wc -l)
[ "$answers" -ge 2 ] && ok || bad "seeds 1-4 gave one answer"
echo "$r1" | field_in 'o["timings"]["predicted_n"] == o["usage"]["completion_tokens"] and o["timings"]["prompt_n"] == o["usage"]["prompt_tokens"]' | grep -q True && ok || bad "chat timings: $r1"
# penalties: AR yes, plan-and-infill no (as the CLI); top_k refused by plan-and-infill
check '[ "$(code /v1/completions "{\"prompt\":\"a\",\"mode\":\"ar\",\"max_tokens\":4,\"presence_penalty\":0.5,\"frequency_penalty\":0.5}")" = 200 ]' "presence/frequency penalties with AR"
check '[ "$(code /v1/completions "{\"prompt\":\"a\",\"mode\":\"refusion\",\"rolling\":false,\"max_tokens\":4,\"presence_penalty\":0.5}")" = 400 ]' "penalties refused by plan-and-infill"
check '[ "$(code /v1/completions "{\"prompt\":\"a\",\"mode\":\"refusion\",\"rolling\":false,\"max_tokens\":4,\"top_k\":5}")" = 400 ] && grep -q "\"param\":\"top_k\"" "$T/body"' "top_k refused by plan-and-infill: $(cat "$T/body")"
# steps and TPF after a stop string
plain=$(post_json /v1/completions '{"prompt":"'"$Q"'","mode":"ar","max_tokens":24}' | field_in 'o["choices"][0]["text"]')
stop=$(printf %s "$plain" | python3 -c 'import sys; t=sys.stdin.read(); print(t[len(t)//2:len(t)//2+3])')
rs=$(post_json /v1/completions "$(python3 -c 'import json,sys; print(json.dumps({"prompt":sys.argv[1],"mode":"ar","max_tokens":24,"stop":sys.argv[2]}))' "$Q" "$stop")")
echo "$rs" | field_in 'o["choices"][0]["finish_reason"] == "stop" and o["refusion"]["steps"] > 0 and o["refusion"]["tpf"] > 0' | grep -q True && ok || bad "stop '$stop': $rs"

# ---- utility endpoints against the CLI ------------------------------------------------------
want=$("$BIN" tokenize -m "$DEMO" --json "$Q")
got=$(post_json /tokenize "{\"content\":\"$Q\"}" | field_in 'json.dumps(o["tokens"], separators=(",", ":"))')
[ "$got" = "$(echo "$want" | tr -d ' ')" ] && ok || bad "/tokenize $got != tokenize $want"
pieces=$(post_json /tokenize "{\"content\":\"$Q\",\"with_pieces\":true,\"add_special\":false}")
echo "$pieces" | field_in '"".join(p["piece"] for p in o["tokens"]) == sys.argv[2]' "$Q" | grep -q True && ok || bad "/tokenize with_pieces: $pieces"
back=$(post_json /detokenize "{\"tokens\":$got}" | field_in 'o["content"]')
[ "$back" = "$Q" ] && ok || bad "/detokenize: $back"
MSGS='[{"role":"system","content":"Be brief."},{"role":"user","content":"'"$Q"'"}]'
want=$("$BIN" tokenize -m "$DEMO" --chat --text "$MSGS")
got=$(post_json /apply-template "{\"messages\":$MSGS}" | field_in 'o["prompt"]')
[ "$got" = "$want" ] && ok || bad "/apply-template: $(printf %q "$got") != $(printf %q "$want")"
props=$(get /props)
n_slots=$(echo "$props" | field_in 'o["total_slots"]')
[ "$n_slots" -ge 2 ] && [ "$(get /slots | field_in 'len(o)')" = "$n_slots" ] && ok || bad "/slots length != total_slots $n_slots"
echo "$props" | field_in 'o["default_generation_settings"]["params"]["max_tokens"] == 32 and "build_info" in o and o["model_alias"] == "my-alias"' | grep -q True && ok || bad "/props: $props"
# /completion: native shape, timings, cache_prompt accepted
c=$(post_json /completion '{"prompt":"'"$Q"'","n_predict":8,"cache_prompt":true,"mode":"ar","temperature":0}')
echo "$c" | field_in 'o["stop"] is True and o["stop_type"] in ("eos","limit") and len(o["tokens"]) == o["tokens_predicted"] <= 8 and o["timings"]["predicted_n"] == o["tokens_predicted"] and o["tokens_evaluated"] > 5' | grep -q True && ok || bad "/completion: $c"
content=$(echo "$c" | field_in 'o["content"]')
curl -sN "${A[@]}" "$URL/completion" -d '{"prompt":"'"$Q"'","n_predict":8,"stream":true,"mode":"ar","temperature":0}' >"$T/stream"
python3 - "$T/stream" "$content" <<'PY' && ok || bad "/completion stream: $(cat "$T/stream")"
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
text = "".join(e["content"] for e in ev)
assert text == sys.argv[2], (text, sys.argv[2])
assert ev[-1]["stop"] is True and "timings" in ev[-1] and all(e["stop"] is False for e in ev[:-1])
PY
# /completion under a grammar (GBNF) and a JSON schema, as llama-server takes them
g=$(post_json /completion '{"prompt":"'"$Q"'","n_predict":8,"grammar":"root ::= \"yes\" | \"no\"","mode":"ar"}' | field_in 'o["content"]')
check '[ "$g" = yes ] || [ "$g" = no ]' "/completion with a grammar: '$g'"
post_json /completion '{"prompt":"'"$Q"'","n_predict":64,"json_schema":{"type":"object","properties":{"n":{"type":"boolean"}},"required":["n"],"additionalProperties":false},"mode":"ar"}' >"$T/js"
python3 - "$T/js" <<'PY' && ok || bad "/completion with a json_schema: $(cat "$T/js")"
import json, sys
o = json.load(open(sys.argv[1]))
v = json.loads(o["content"])
assert set(v) == {"n"} and isinstance(v["n"], bool), v
PY
check '[ "$(code /embeddings "{\"content\":\"x\"}")" = 501 ]' "/embeddings: 501"
ic=$(code /infill '{"input_prefix":"def f(x):\n    return ","input_suffix":"\n","n_predict":4,"mode":"ar"}')
if "$BIN" tokenize -m "$DEMO" --info | grep -q .; then
  fim=$(curl -s "${A[@]}" "$URL/tokenize" -d '{"content":"<|fim_prefix|>"}' | field_in 'len(o["tokens"]) == 1')
  if [ "$fim" = True ]; then [ "$ic" = 200 ] && ok || bad "/infill with FIM tokens: $ic $(cat "$T/body")"
  else [ "$ic" = 501 ] && ok || bad "/infill without FIM tokens: $ic"; fi
fi
check '[ "$(curl -s -o /dev/null -w "%{http_code} %{content_type}" "$URL/")" = "200 text/html; charset=utf-8" ]' "GET / serves the page"
check 'curl -s "$URL/app.js" | grep -q decode_events' "GET /app.js"
check 'get /metrics | grep -q "^refusion_requests_total"' "/metrics"
rf_serve_stop "$SPID" "$T/server.log" || fails=$((fails + 1))
SPID=""

# ---- --no-webui, --path ---------------------------------------------------------------------
mkdir -p "$T/site" && echo '<p>my page</p>' >"$T/site/index.html"
rf_serve_start "$T/s2.log" -m "$DEMO" --path "$T/site" --threads 1 -q
check '[ "$(curl -s "$URL/")" = "<p>my page</p>" ] && [ "$(curl -s -o /dev/null -w %{http_code} "$URL/../etc/passwd")" != 200 ]' "--path DIR"
rf_serve_stop "$SPID" "$T/s2.log" || fails=$((fails + 1))
rf_serve_start "$T/s3.log" -m "$DEMO" --no-webui --no-slots --threads 1 -q
check '[ "$(curl -s -o /dev/null -w %{http_code} "$URL/")" = 404 ] && [ "$(curl -s -o /dev/null -w %{http_code} "$URL/slots")" = 404 ]' "--no-webui, --no-slots"
rf_serve_stop "$SPID" "$T/s3.log" || fails=$((fails + 1))
SPID=""

echo "serve_llama: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
