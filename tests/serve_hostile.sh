#!/usr/bin/env bash
# serve_hostile.sh - the server against requests a hostile client sends, over
# loopback HTTP with curl and bash's /dev/tcp:
#  - error replies that cannot fail: an unknown field whose name, cut to the
#    reply's 64-byte "param", would end inside a UTF-8 character; a --name
#    that is not UTF-8 is refused at start-up with one line;
#  - client errors are 400 before anything is queued: mdm steps below the
#    number of blocks (a stream too never starts with 200);
#  - work bounded by the answer: a slot larger than max_tokens is refused,
#    and so is a request past --max-request-positions.
# Only 127.0.0.1, port chosen by the kernel; every curl has a time limit.
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_hostile
trap "" PIPE

"$BIN" init -o "$T/m" --preset tiny --hidden 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --max-pos 4096 \
  --seed 5 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init"
M=$T/m

stop() {
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  wait "$SPID" 2>/dev/null
  local src=$?
  [ $src -eq 0 ] && ok || bad "the server exited $src after SIGTERM: $(tail -n 5 "$T/server.log")"
  SPID=""
}
alive() { [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$@" "$URL/health")" = 200 ]; }
# post NAME PATH BODY [curl args]: body in NAME.body, status in NAME.code
post() {
  local name=$1 path=$2 body=$3
  shift 3
  curl -s -m 60 --data-binary "$body" -o "$T/$name.body" -w '%{http_code}' "$@" "$URL$path" >"$T/$name.code" 2>/dev/null
}
expect() { # NAME CODE NEEDLE
  local code
  code=$(cat "$T/$1.code")
  [ "$code" = "$2" ] && grep -q -- "$3" "$T/$1.body" && ok || bad "$1: want $2 with '$3', got $code: $(head -c 300 "$T/$1.body")"
}

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
expect slot 400 "(4000) must not exceed max_tokens (1)"
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
stop

echo "serve_hostile: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
