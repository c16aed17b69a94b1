#!/usr/bin/env bash
# serve_hostile.sh - the server against requests a hostile client sends, over
# loopback HTTP with curl and bash's /dev/tcp:
#  - error replies that cannot fail: an unknown field whose name, cut to the
#    reply's 64-byte "param", would end inside a UTF-8 character; a --name
#    that is not UTF-8 is refused at start-up with one line;
#  - client errors are 400 before anything is queued: mdm steps below the
#    number of blocks (a stream too never starts with 200);
#  - work bounded by the answer: a slot larger than max_tokens is refused,
#    and so is a request past --max-request-positions;
#  - safe local defaults: no CORS header unless --cors, no model id in
#    /health without the key, a warning when listening beyond loopback
#    without a key;
#  - connections: keep-alive up to --keepalive-requests, pipelined requests
#    answered in order, a NUL byte in the request target answered 400 once;
#    300 slow senders from 20 addresses (scripts/serve/slow_senders.py, a
#    short run) while /health answers within 1 s, all of them closed by
#    --request-timeout although none is ever idle.
# Only 127.0.0.1, port chosen by the kernel; every curl has a time limit.
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_hostile
trap "" PIPE

"$BIN" init -o "$T/m" --preset tiny --hidden 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --max-pos 4096 \
  --seed 5 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init"
M=$T/m

stop() { rf_serve_stopped "$T/server.log"; }

# ---- start-up: ids that cannot go into JSON ----------------------------------------------
# (under a time limit: a server that accepted the name would run on)
name_refused() {
  timeout 20 "$BIN" serve -m "$M" --port 0 --name "$1" >/dev/null 2>"$T/name.err"
  local rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c . "$T/name.err")" -eq 1 ] &&
    grep -q "^refusion: serve: --name: a model id must be" "$T/name.err" && ok ||
    bad "--name $(printf %q "$1"): exit $rc, $(cat "$T/name.err")"
}
name_refused $'bad\xffname'
name_refused $'two\nlines'

rf_serve_start "$T/server.log" -m "$M" --threads 1 -n 8 --max-request-positions 100000
alive && ok || bad "/health not 200 at start"

# ---- the reply that crashed the server -----------------------------------------------------
A62=$(printf 'a%.0s' $(seq 1 62))
post utf8 /v1/completions "{\"prompt\":\"hi\",\"${A62}é\":1}"
expect utf8 400 "\"param\":\"$A62\""
alive && ok || bad "server dead after the 62 a + e-acute field"
post utf8b /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"${A62}aé\":1}"
expect utf8b 400 'unsupported_parameter'
curl -s -m 5 -o "$T/models.body" "$URL/v1/models" && grep -q '"object":"list"' "$T/models.body" && ok || bad "/v1/models"

# ---- client errors are 400, a stream included ---------------------------------------------------
post mdm /v1/completions '{"prompt":"Hello","max_tokens":8,"mode":"mdm","steps":1,"blocks":4}'
expect mdm 400 '"param":"steps"'
post mdm_stream /v1/completions '{"prompt":"Hello","max_tokens":8,"mode":"mdm","steps":1,"blocks":4,"stream":true}'
expect mdm_stream 400 "(1) must be in \\[4, 8\\]"
post mdm_ok /v1/completions '{"prompt":"Hello","max_tokens":8,"mode":"mdm","steps":4,"blocks":4}'
expect mdm_ok 200 '"completion_tokens":8'

# ---- work bounded by what the client gets -------------------------------------------------------------
post slot /v1/completions '{"prompt":"Hello","max_tokens":1,"slot_size":4000}'
expect slot 400 "(4000) must not exceed 32 (max_tokens, or 32 for any length)"
post slot_ok /v1/completions '{"prompt":"Hello","max_tokens":1}'
expect slot_ok 200 '"completion_tokens":1'
# 400 answer tokens in 2 slots of 200: 2 x (2 x 200 + 2 x 200 x 201) > 100000
post budget /v1/completions '{"prompt":"Hello","max_tokens":400,"slot_size":200,"blocks":2}'
expect budget 400 'max-request-positions'
post budget_n /v1/completions '{"prompt":"Hello","max_tokens":3000,"mode":"ar","n":8}'
expect budget_n 200 '"completion_tokens"' # 8 x 3001 positions fit
post budget_mdm /v1/completions '{"prompt":"Hello","max_tokens":400,"mode":"mdm"}'
expect budget_mdm 400 'allows 100000 per request'
alive && ok || bad "server dead at the end"

# ---- safe defaults: no CORS header, nothing about the model without the key ----------------
curl -s -m 5 -D "$T/h.hdr" -o /dev/null -H 'Origin: http://example.com' "$URL/health"
grep -qi '^access-control' "$T/h.hdr" && bad "a CORS header by default: $(cat "$T/h.hdr")" || ok
curl -s -m 5 -D "$T/o.hdr" -o /dev/null -X OPTIONS -H 'Origin: http://example.com' "$URL/v1/completions"
grep -qi '^access-control' "$T/o.hdr" && bad "a CORS preflight answer by default: $(cat "$T/o.hdr")" || ok

# ---- keep-alive, pipelining, the request target ------------------------------------------------
# raw NAME BYTES: BYTES (printf format) on one connection; the reply in NAME.out
raw() {
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  printf "$2" >&3
  timeout 10 cat <&3 >"$T/$1.out"
  exec 3<&-
}
raw pipe 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
[ "$(grep -ao 'HTTP/1.1 200' "$T/pipe.out" | wc -l)" = 2 ] && grep -q '"object":"list"' "$T/pipe.out" && ok ||
  bad "two pipelined requests: $(head -c 600 "$T/pipe.out")"
raw nul 'GET /health\x00 HTTP/1.1\r\nHost: x\r\n\r\n'
[ "$(grep -ao 'HTTP/1.1 ' "$T/nul.out" | wc -l)" = 1 ] && grep -q '^HTTP/1.1 400' "$T/nul.out" && grep -q 'NUL byte' "$T/nul.out" && ok ||
  bad "a NUL in the target: $(head -c 300 "$T/nul.out")"
# curl re-uses its connection when the answers allow it
curl -sv -m 10 "$URL/health" "$URL/health" -o /dev/null -o /dev/null 2>"$T/ka.err"
grep -q 'Re-using existing connection' "$T/ka.err" && ok || bad "no keep-alive for GET: $(grep -i 'connection' "$T/ka.err")"
curl -sv -m 30 -o /dev/null --data-binary '{"prompt":"x","max_tokens":2}' "$URL/v1/completions" --next -o /dev/null \
  --data-binary '{"prompt":"x","max_tokens":2}' "$URL/v1/completions" 2>"$T/kap.err"
grep -q 'Re-using existing connection' "$T/kap.err" && ok || bad "no keep-alive for POST: $(grep -i 'connection' "$T/kap.err")"
stop

# ---- --keepalive-requests, --cors, slow senders, the warning beyond loopback -------------------------
rf_serve_start "$T/server.log" -m "$M" --threads 1 -n 8 --keepalive-requests 2 --cors http://localhost:3000 \
  --request-timeout 2 -q
curl -sv -m 10 "$URL/health" "$URL/health" "$URL/health" -o /dev/null -o /dev/null -o /dev/null 2>"$T/ka2.err"
[ "$(grep -c 'Connected to' "$T/ka2.err")" = 2 ] && grep -qi '^< Connection: close' "$T/ka2.err" && ok ||
  bad "--keepalive-requests 2: $(grep -i 'connect' "$T/ka2.err")"
curl -s -m 5 -D "$T/c.hdr" -o /dev/null "$URL/health"
grep -qi '^Access-Control-Allow-Origin: http://localhost:3000' "$T/c.hdr" && ok || bad "--cors: $(cat "$T/c.hdr")"
if command -v python3 >/dev/null; then
  # 4 s of one byte each 0.5 s: never idle, yet past the 2 s request deadline
  python3 "$SRC/scripts/serve/slow_senders.py" --port "$PORT" --duration 4 --interval 0.5 --probe 0.25 >"$T/slow.out" 2>&1
  src=$?
  [ $src -eq 0 ] && grep -q ' 300 closed by the server, 0 still open' "$T/slow.out" && ok || bad "slow senders: $(cat "$T/slow.out")"
else
  bad "python3 is needed for scripts/serve/slow_senders.py"
fi
alive && ok || bad "server dead after the slow senders"
curl -s -m 5 "$URL/metrics" >"$T/metrics.txt"
n=$(sed -n 's/^refusion_request_timeouts_total \([0-9]*\)$/\1/p' "$T/metrics.txt")
[ -n "$n" ] && [ "$n" -ge 300 ] && ok || bad "/metrics request_timeouts_total: '$n'"
stop
"$BIN" serve -m "$M" --host 0.0.0.0 --port 0 >/dev/null 2>"$T/wide.log" &
SPID=$!
for _ in $(seq 1 100); do grep -q 'listening on' "$T/wide.log" && break; sleep 0.1; done
grep -q 'warning: listening on 0.0.0.0 without an API key' "$T/wide.log" && ok || bad "no warning: $(cat "$T/wide.log")"
stop

echo "serve_hostile: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
