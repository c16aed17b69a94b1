#!/usr/bin/env bash
# serve_http.sh - `refusion serve` end to end over loopback HTTP with curl, on
# a tiny random checkpoint with a freshly trained tokenizer:
#  - /health, /v1/models;
#  - completions and chat completions (greedy, sampled, AR, custom ReFusion
#    settings) return 200, and their ids, text, usage and model-call counts
#    equal `refusion generate --json` for the same prompt and settings;
#  - "stream": true gives SSE chunks ending in [DONE] whose text and ids
#    concatenate to the non-streamed answer;
#  - three requests at once are queued and all get the sequential answer;
#  - a client leaving in the middle of a stream does not hurt the server;
#  - bad requests get 400 / 404 / 405 / 413 with a one-line JSON error, and
#    the server is alive afterwards;
#  - SIGTERM stops it cleanly (exit status 0).
# Only 127.0.0.1, port chosen by the kernel (--port 0); every curl has a
# time limit. JSON is checked with node (a project dependency).
set -u
for tool in curl node; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is needed (scripts/install-deps.sh)" >&2; exit 1; }
done
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_http

# ---- a checkpoint with a tokenizer: untied and peaked, so that answers are
# varied text rather than one repeated token ------------------------------------------
for i in $(seq 1 200); do
  echo "The model number $i answers the question about diffusion; it's fine. Hello world $((i * 7))."
done >"$T/corpus.txt"
"$BIN" tokenizer-train --input "$T/corpus.txt" --vocab 400 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train"
"$BIN" init -o "$T/m" --preset tiny --tied 0 --std 0.5 --max-pos 256 --seed 3 \
  --tokenizer "$T/tok/tokenizer.json" >/dev/null 2>&1 || bad "init"
M=$T/m

# ---- start the server -------------------------------------------------------------------
rf_serve_start "$T/server.log" -m "$M" --threads 1 -n 24 --max-body 8192
for _ in $(seq 1 50); do alive && break; sleep 0.1; done
alive && ok || bad "/health not 200"

# command-line mistakes: one line on stderr, exit 1 or 2
cli_err() { # want_rc needle args...
  local want=$1 needle=$2
  shift 2
  "$BIN" serve "$@" >/dev/null 2>"$T/cli.err"
  local rc=$? lines
  lines=$(wc -l <"$T/cli.err")
  [ $rc -eq "$want" ] && [ "$lines" -eq 1 ] && grep -q "^refusion: .*$needle" "$T/cli.err" && ok ||
    bad "serve $*: exit $rc, stderr: $(cat "$T/cli.err")"
}
cli_err 1 "cannot listen on 127.0.0.1:$PORT" -m "$M" --port "$PORT" -n 24
cli_err 2 "exceed the model.s context" -m "$M" --port 0
cli_err 2 "need -m" --port 0
cli_err 2 "mode" -m "$M" --mode bert
cli_err 2 "slot-size" -m "$M" --slot-size 0
cli_err 1 "config.json" -m "$T/nothing"

# req NAME METHOD PATH BODY [curl args...]: response in NAME.body, status in
# NAME.code, headers in NAME.hdr
req() {
  local name=$1 method=$2 path=$3 body=$4
  shift 4
  printf '%s' "$body" >"$T/$name.req"
  local data=()
  [ "$method" = POST ] && data=(--data-binary "@$T/$name.req" -H 'Content-Type: application/json')
  curl -s -N -m 30 -X "$method" "${data[@]}" "$@" -D "$T/$name.hdr" -o "$T/$name.body" -w '%{http_code}' \
    "$URL$path" >"$T/$name.code" 2>/dev/null
}
# ref NAME ARGS...: `refusion generate --json` with the same settings
ref() {
  local name=$1
  shift
  "$BIN" generate -m "$M" --threads 1 --json "$@" >"$T/$name.json" 2>"$T/$name.err" || bad "generate $*: $(cat "$T/$name.err")"
}

P="The model number 12 answers"
req models GET /v1/models ""
# default settings (server: -n 24), greedy
req c1 POST /v1/completions "{\"prompt\": \"$P\"}"
ref r_c1 --no-chat -p "$P" -n 24
req c1s POST /v1/completions "{\"prompt\": \"$P\", \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
# chat with the template, one user message
req h1 POST /v1/chat/completions '{"model": "m", "messages": [{"role": "user", "content": "Hello world"}], "max_tokens": 20}'
ref r_h1 --chat -p "Hello world" -n 20
req h1s POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello world"}], "max_tokens": 20, "stream": true, "stream_options": {"include_usage": true}}'
# AR decoding
req a1 POST /v1/completions "{\"prompt\": \"$P\", \"mode\": \"ar\", \"max_tokens\": 16}"
ref r_a1 --no-chat -p "$P" -n 16 --mode ar
req a1s POST /v1/completions "{\"prompt\": \"$P\", \"mode\": \"ar\", \"max_tokens\": 16, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
# ReFusion settings from the request
req x1 POST /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 20, \"slot_size\": 2, \"serial_num_blocks\": 3, \"slot_threshold\": 0.1, \"token_threshold\": 0.2}"
ref r_x1 --no-chat -p "$P" -n 20 --slot-size 2 --blocks 3 --slot-threshold 0.1 --token-threshold 0.2
# AR-verified with this project's call savers (docs/refusion.md §4), from the request
req v1 POST /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 20, \"slot_size\": 2, \"serial_num_blocks\": 10, \"token_threshold\": 0.5, \"ar_verify\": \"both\", \"lookahead\": true, \"jacobi\": true}"
ref r_v1 --no-chat -p "$P" -n 20 --slot-size 2 --blocks 10 --token-threshold 0.5 --ar-verify both --lookahead --jacobi
req ro1 POST /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 20, \"slot_size\": 3, \"rolling\": true}"
ref r_ro1 --no-chat -p "$P" -n 20 --slot-size 3 --rolling
# sampling with a seed is reproducible
req t1 POST /v1/completions "{\"prompt\": \"$P\", \"temperature\": 0.8, \"seed\": 5}"
ref r_t1 --no-chat -p "$P" -n 24 --temp 0.8 --seed 5
# token-id prompt
req i1 POST /v1/completions '{"prompt": [5, 17, 33, 2], "max_tokens": 12}'
ref r_i1 --ids "5 17 33 2" -n 12

# three at once: queued, each answered as if alone
pids=()
for k in 1 2 3; do
  req par$k POST /v1/completions "{\"prompt\": \"$P\"}" &
  pids+=($!)
done
wait "${pids[@]}"
# a client that leaves after the first bytes of a long stream
curl -s -N -m 10 --data-binary '{"prompt": "Hello", "max_tokens": 200, "mode": "ar", "stream": true}' \
  "$URL/v1/completions" 2>/dev/null | head -c 20 >/dev/null
alive && ok || bad "server dead after a client left mid-stream"

# ---- bad requests: NAME CODE METHOD PATH BODY ------------------------------------------
: >"$T/bad.list"
badreq() {
  req "$1" "$3" "$4" "$5"
  echo "$1 $2" >>"$T/bad.list"
}
badreq b_json 400 POST /v1/completions '{"prompt": "x",'
badreq b_notobj 400 POST /v1/completions '[1, 2]'
badreq b_empty 400 POST /v1/completions ''
badreq b_type 400 POST /v1/completions '{"prompt": 5}'
badreq b_noprompt 400 POST /v1/completions '{"max_tokens": 4}'
badreq b_nomsgs 400 POST /v1/chat/completions '{"prompt": "x"}'
badreq b_msgshape 400 POST /v1/chat/completions '{"messages": [{"role": "user"}]}'
badreq b_role 400 POST /v1/chat/completions '{"messages": [{"role": "robot", "content": "x"}]}'
badreq b_mode 400 POST /v1/completions '{"prompt": "x", "mode": "bert"}'
badreq b_slot0 400 POST /v1/completions '{"prompt": "x", "slot_size": 0}'
badreq b_sthr 400 POST /v1/completions '{"prompt": "x", "slot_threshold": 1.5}'
badreq b_tthr 400 POST /v1/completions '{"prompt": "x", "token_threshold": -0.5}'
badreq b_maxtype 400 POST /v1/completions '{"prompt": "x", "max_tokens": "8"}'
badreq b_context 400 POST /v1/completions '{"prompt": "x", "max_tokens": 300}'
badreq b_vocab 400 POST /v1/completions '{"prompt": [1, 100000]}'
badreq b_temp 400 POST /v1/completions '{"prompt": "x", "temperature": -1}'
badreq b_stream 400 POST /v1/completions '{"prompt": "x", "stream": "yes"}'
badreq b_jacobi 400 POST /v1/completions '{"prompt": "x", "jacobi": "yes", "ar_verify": "both"}'
badreq b_jacobi_a 400 POST /v1/completions '{"prompt": "x", "jacobi": true}'
badreq b_utf8 400 POST /v1/completions $'{"prompt": "\xff\xfe"}'
badreq b_404 404 GET /v1/nothing ''
badreq b_404post 404 POST /v1/nothing '{"input": "x"}'
badreq b_embed 501 POST /v1/embeddings '{"input": "x"}'
badreq b_405 405 GET /v1/completions ''
badreq b_405b 405 POST /health '{}'
big=$(head -c 10000 /dev/zero | tr '\0' a)
badreq b_413 413 POST /v1/completions "{\"prompt\": \"$big\"}"
req b_413c POST /v1/completions "{\"prompt\": \"$big\"}" -H 'Transfer-Encoding: chunked'
echo "b_413c 413" >>"$T/bad.list"
alive && ok || bad "server dead after the bad requests"
grep -q "^Allow: GET" "$T/b_405b.hdr" -i && ok || bad "405 without Allow header"
req health GET /health ""

# ---- check every answer in one node run -------------------------------------------------
node - "$T" <<'EOF' >"$T/node.out" 2>&1
const fs = require('fs'), T = process.argv[2];
let fails = 0, pass = 0;
const ok = (c, m) => { if (c) pass++; else { fails++; console.log('FAIL: ' + m); } };
const rd = n => fs.readFileSync(T + '/' + n, 'utf8');
const code = n => rd(n + '.code').trim();
const json = n => { try { return JSON.parse(rd(n)); } catch (e) { ok(false, n + ': not JSON: ' + e.message); return null; } };
const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const textOf = ch => ch.text !== undefined ? ch.text : (ch.message || ch.delta).content;

// a plain answer == generate --json
function same(name, refName, object) {
  ok(code(name) === '200', `${name}: status ${code(name)}: ${rd(name + '.body')}`);
  const o = json(name + '.body'), r = json(refName + '.json');
  if (!o || !r || !o.choices) return;
  const ch = o.choices[0];
  ok(o.object === object && typeof o.id === 'string' && typeof o.created === 'number', `${name}: envelope`);
  ok(eq(ch.token_ids, r.answer_ids), `${name}: ids ${ch.token_ids} != generate's ${r.answer_ids}`);
  ok(textOf(ch) === r.text, `${name}: text ${JSON.stringify(textOf(ch))} != ${JSON.stringify(r.text)}`);
  ok(r.text.length > 0 || r.answer_ids.length === 0, `${name}: the reference text is empty, weak test`);
  ok(o.usage.prompt_tokens === r.prompt_ids.length && o.usage.completion_tokens === r.answer_ids.length &&
     o.usage.total_tokens === r.prompt_ids.length + r.answer_ids.length, `${name}: usage ${JSON.stringify(o.usage)}`);
  ok(ch.finish_reason === (r.hit_eos ? 'stop' : 'length'), `${name}: finish_reason ${ch.finish_reason}`);
  const s = o.refusion || {};
  ok(s.mode === r.mode && s.model_calls === r.model_calls && Math.abs(s.tpf - r.tpf) < 1e-9,
     `${name}: stats ${JSON.stringify(s)} vs calls ${r.model_calls} tpf ${r.tpf}`);
  ok(s.tokens_per_call > 0 && s.tokens_per_s > 0 && s.wall_s > 0, `${name}: rates`);
}
same('c1', 'r_c1', 'text_completion');
same('h1', 'r_h1', 'chat.completion');
same('a1', 'r_a1', 'text_completion');
same('x1', 'r_x1', 'text_completion');
same('v1', 'r_v1', 'text_completion');
same('ro1', 'r_ro1', 'text_completion');
{ const v = json('v1.body'), r = json('ro1.body');
  ok(v && r && v.refusion.settings.lookahead === true && v.refusion.settings.jacobi === true &&
     r.refusion.settings.rolling === true && v.refusion.settings.rolling === false, 'flags echoed as set'); }
same('t1', 'r_t1', 'text_completion');
same('i1', 'r_i1', 'text_completion');
for (const k of [1, 2, 3]) same('par' + k, 'r_c1', 'text_completion');
{ const x = json('x1.body'); ok(x && x.refusion.settings.slot_size === 2 && x.refusion.settings.blocks === 3, 'x1: settings echoed'); }
{ const c = json('c1.body'), h = json('h1.body');
  ok(c && h && c.id !== h.id && h.choices[0].message.role === 'assistant', 'ids distinct, chat role'); }

// a stream == the plain answer
function stream(name, plainName, object) {
  ok(code(name) === '200', `${name}: status ${code(name)}`);
  ok(/content-type: text\/event-stream/i.test(rd(name + '.hdr')), `${name}: content type`);
  const ev = rd(name + '.body').split('\n\n').filter(e => !e.startsWith(':')); // keep-alive comments
  ok(ev.pop() === '', `${name}: does not end with a blank line`);
  ok(ev.length >= 3 && ev[ev.length - 1] === 'data: [DONE]', `${name}: does not end with [DONE]`);
  ev.pop();
  // the last event before [DONE]: choices [], usage (stream_options.include_usage) and statistics
  const fin = ev.length ? JSON.parse(ev.pop().slice(6)) : null;
  ok(fin && fin.choices.length === 0 && fin.usage && fin.refusion, `${name}: no final usage chunk`);
  let text = '', ids = [], last = null, good = true;
  for (const e of ev) {
    if (!e.startsWith('data: ')) { good = false; continue; }
    const o = JSON.parse(e.slice(6));
    good = good && o.object === object && o.choices.length === 1;
    if (last) good = good && last.choices[0].finish_reason === null;
    text += textOf(o.choices[0]); ids = ids.concat(o.choices[0].token_ids);
    last = o;
  }
  ok(good, `${name}: malformed chunks`);
  const p = json(plainName + '.body');
  if (!p || !last) return;
  ok(text === textOf(p.choices[0]), `${name}: streamed text ${JSON.stringify(text)} != ${JSON.stringify(textOf(p.choices[0]))}`);
  ok(eq(ids, p.choices[0].token_ids), `${name}: streamed ids differ`);
  ok(last.choices[0].finish_reason === p.choices[0].finish_reason && eq(fin.usage, p.usage) &&
     fin.refusion.model_calls === p.refusion.model_calls, `${name}: last chunks`);
  ok(ev.length >= 3, `${name}: only ${ev.length} chunks`);
}
stream('c1s', 'c1', 'text_completion');
stream('h1s', 'h1', 'chat.completion.chunk');
stream('a1s', 'a1', 'text_completion');
{ const first = JSON.parse(rd('h1s.body').split('\n\n')[0].slice(6));
  ok(first.choices[0].delta.role === 'assistant', 'chat stream opens with the role'); }

// errors: the status, and {"error": {"message": one line}}
for (const line of rd('bad.list').trim().split('\n')) {
  const [name, want] = line.split(' ');
  ok(code(name) === want, `${name}: status ${code(name)}, want ${want}`);
  const o = json(name + '.body');
  const m = o && o.error && o.error.message;
  ok(typeof m === 'string' && m.length > 0 && !m.includes('\n'), `${name}: error body ${rd(name + '.body')}`);
}
{ const m = json('b_context.body'); ok(m && /context/.test(m.error.message), 'context message: ' + JSON.stringify(m)); }
{ const m = json('b_slot0.body'); ok(m && /slot_size/.test(m.error.message), 'slot_size message'); }

const mo = json('models.body');
ok(mo && mo.object === 'list' && mo.data.length === 1 && mo.data[0].id === 'm' &&
   mo.data[0].refusion.context_length === 256, '/v1/models: ' + rd('models.body'));
const he = json('health.body');
ok(he && he.status === 'ok' && he.requests_done >= 12, '/health: ' + rd('health.body'));
console.log(`node: ${pass} passed, ${fails} failed`);
process.exit(fails ? 1 : 0);
EOF
nrc=$?
grep FAIL "$T/node.out" >&2
[ $nrc -eq 0 ] && ok || bad "$(tail -1 "$T/node.out")"

# ---- SIGTERM: a clean stop --------------------------------------------------------------
kill -TERM "$SPID"
for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
  bad "the server ignored SIGTERM"
else
  wait "$SPID"
  src=$?
  SPID=""
  [ $src -eq 0 ] && grep -q "stopped" "$T/server.log" && ok || bad "SIGTERM: exit $src, log: $(tail -2 "$T/server.log")"
fi
grep -q "generation failed" "$T/server.log" && bad "a generation failed: $(grep 'generation failed' "$T/server.log")"

echo "serve_http: $pass passed, $fails failed ($(tail -1 "$T/node.out"))"
[ $fails -eq 0 ]
