#!/usr/bin/env bash
# serve_hostile_template.sh - `refusion serve` on a copy of the demo model
# whose chat template is hostile (the cases of helpers/hostile_templates.sh):
#  - at start-up: a template refused when read (nesting past the limit, an
#    integer literal past 64 bits; from --chat-template and from
#    tokenizer_config.json) and one that fails to render every conversation
#    stop `serve` with exit 1 and one line naming the problem, never
#    listening;
#  - at request time: a template that renders ordinary conversations but
#    turns hostile on one message (each render-time case behind its own
#    trigger) answers every such chat request, four at a time, with a 400
#    holding one line "chat template: ...", within curl's time limit; a
#    stream and /apply-template too. Meanwhile /health, probed on fresh
#    connections, answers 200 within 1 s every time, and afterwards an
#    ordinary chat request is answered and the server stops cleanly.
# Only 127.0.0.1, port chosen by the kernel; every curl has a time limit.
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
. "$(dirname "$0")/helpers/hostile_templates.sh"
rf_test_setup serve_hostile_template
DEMO=$SRC/models/refusion-demo

# model_with NAME TEMPLATE-FILE: a copy of the demo model in $T/NAME whose
# tokenizer_config.json holds the template
model_with() {
  rm -rf "${T:?}/$1"
  mkdir "$T/$1"
  cp "$DEMO"/config.json "$DEMO"/model.safetensors "$DEMO"/tokenizer.json "$DEMO"/tokenizer_config.json "$T/$1/"
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["chat_template"] = open(sys.argv[2]).read(); json.dump(c, open(sys.argv[1], "w"))' \
    "$T/$1/tokenizer_config.json" "$2"
}

# ---- start-up: refused with one line -----------------------------------------------------------
# start_refused NAME NEEDLE TEMPLATE [MODEL]: serve with the template
# (--chat-template, or MODEL's own) exits 1 with one line; one that starts
# listening, or is still running after 60 s, is killed
start_refused() {
  printf '%s' "$3" >"$T/start.jinja"
  local args=(-m "$DEMO" --chat-template "$T/start.jinja") rc
  [ -n "${4:-}" ] && args=(-m "$4")
  "$BIN" serve "${args[@]}" --host 127.0.0.1 --port 0 >/dev/null 2>"$T/start.err" &
  local pid=$!
  for _ in $(seq 1 600); do
    kill -0 $pid 2>/dev/null || break
    grep -q 'listening on' "$T/start.err" && break
    sleep 0.1
  done
  if kill -0 $pid 2>/dev/null; then
    kill -KILL $pid
    wait $pid 2>/dev/null
    bad "start-up with '$1': the server started (or hung) instead of refusing: $(head -c 300 "$T/start.err")"
    return
  fi
  wait $pid
  rc=$?
  if [ $rc -eq 1 ] && [ "$(grep -c . "$T/start.err")" -eq 1 ] && grep -q "^refusion: .*chat template: " "$T/start.err" &&
    grep -qF -- "$2" "$T/start.err"; then
    ok
  else
    bad "start-up with '$1': exit $rc (want 1 and one line with '$2'): $(head -c 300 "$T/start.err")"
  fi
}
hostile_load_cases start_refused
# the same from the model's tokenizer_config.json
chain 30000 '{{ 1' ' + 1' ' }}' >"$T/plus.jinja"
model_with plus "$T/plus.jinja"
start_refused "chained + (tokenizer_config.json)" "$HOSTILE_DEEP" "" "$T/plus"
# a template that renders no conversation: one case of each class
start_never() { start_refused "$1" "$2" "$3"; grep -q "renders no conversation" "$T/start.err" && ok || bad "$1: $(cat "$T/start.err")"; }
M=$HOSTILE_M
start_never "range overflow" "has 1 items" "$M{{ raise_exception('range(1, M, M) has ' ~ (range(1, M, M)|length) ~ ' items') }}"
start_never "+ overflow" "integer overflow in '+'" '{{ 9223372036854775807 + 1 }}'
start_never "'' * 10**18" "$HOSTILE_STEPS" "{{ '' * 10**18 }}"
start_never "unique of 3M" "more than" '{{ range(3000000)|unique|length }}'
start_never "raise_exception" "raise_exception: no conversation" "{{ raise_exception('no conversation') }}"

# ---- request time: one trigger per case --------------------------------------------------------
# The template: case I when the last message is "hostile-I", else the demo
# model's own template.
names=() needles=()
add_case() {
  printf "{%%- if messages[-1].content == 'hostile-%d' -%%}%s{%%- endif -%%}\n" "${#names[@]}" "$3" >>"$T/hostile.jinja"
  names+=("$1")
  needles+=("$2")
}
: >"$T/hostile.jinja"
hostile_render_cases add_case
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["chat_template"], end="")' \
  "$DEMO/tokenizer_config.json" >>"$T/hostile.jinja"
model_with m "$T/hostile.jinja"
rf_serve_start "$T/server.log" -m "$T/m" --threads 1 -n 4 -q

# /health on a fresh connection every 0.2 s until $T/probe.stop exists: each
# answer not 200 within 1 s is a line in $T/probe.bad
: >"$T/probe.bad"
(
  n=0
  while [ ! -e "$T/probe.stop" ]; do
    code=$(curl -s -m 1 -o /dev/null -w '%{http_code}' "$URL/health")
    n=$((n + 1))
    [ "$code" = 200 ] || echo "probe $n: $code" >>"$T/probe.bad"
    sleep 0.2
  done
  echo $n >"$T/probe.count"
) &
PROBER=$!

# chat I [EXTRA-JSON]: the trigger of case I to /v1/chat/completions; the
# answer in $T/c.I.body, the status in $T/c.I.code
chat() {
  curl -s -m 60 -o "$T/c.$1.body" -w '%{http_code}' "$URL/v1/chat/completions" --data-binary \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hostile-$1\"}],\"max_tokens\":4${2:-}}" >"$T/c.$1.code" 2>/dev/null
}
# refused_answer NAME CODE-FILE BODY-FILE NEEDLE: a 400 whose error message
# is one line (no escaped control character) holding "chat template: " and
# NEEDLE (none of the needles has a character JSON escapes)
refused_answer() {
  local code
  code=$(cat "$2" 2>/dev/null)
  if [ "$code" = 400 ] && grep -q '^{"error":{"message":"[^"]*chat template: ' "$3" && grep -qF -- "$4" "$3" &&
    ! grep -q '\\u00\|\\n' "$3"; then
    ok
  else
    bad "$1: want 400 with one line 'chat template: ...$4', got ${code:-nothing}: $(head -c 300 "$3" 2>/dev/null)"
  fi
}

# four hostile requests at a time, every case
n=${#names[@]}
for ((i = 0; i < n; i += 4)); do
  pids=()
  for ((k = i; k < i + 4 && k < n; k++)); do
    chat $k &
    pids+=($!)
  done
  wait "${pids[@]}"
done
for ((i = 0; i < n; i++)); do refused_answer "${names[$i]}" "$T/c.$i.code" "$T/c.$i.body" "${needles[$i]}"; done

# a stream is refused before it starts; /apply-template renders the same way
chat 0 ',"stream":true'
refused_answer "${names[0]} (stream)" "$T/c.0.code" "$T/c.0.body" "${needles[0]}"
last=$((n - 1))
curl -s -m 60 -o "$T/apply.body" -w '%{http_code}' "$URL/apply-template" --data-binary \
  "{\"messages\":[{\"role\":\"user\",\"content\":\"hostile-$last\"}]}" >"$T/apply.code" 2>/dev/null
refused_answer "${names[$last]} (/apply-template)" "$T/apply.code" "$T/apply.body" "${needles[$last]}"

touch "$T/probe.stop"
wait "$PROBER"
probes=$(cat "$T/probe.count" 2>/dev/null || echo 0)
[ -s "$T/probe.bad" ] && bad "/health not 200 within 1 s while hostile requests ran: $(head -n 5 "$T/probe.bad")" || ok
[ "$probes" -ge 3 ] && ok || bad "only $probes /health probes ran"

# still serving: an ordinary conversation through the same template
curl -s -m 60 -o "$T/fine.body" -w '%{http_code}' "$URL/v1/chat/completions" --data-binary \
  '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4}' >"$T/fine.code" 2>/dev/null
[ "$(cat "$T/fine.code")" = 200 ] && grep -q '"object":"chat.completion"' "$T/fine.body" && ok ||
  bad "an ordinary chat after the hostile ones: $(cat "$T/fine.code") $(head -c 300 "$T/fine.body")"
rf_serve_stop "$SPID" "$T/server.log" && ok || bad "the server did not stop cleanly"
SPID=""

echo "serve_hostile_template: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
