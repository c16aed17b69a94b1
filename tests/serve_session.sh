#!/usr/bin/env bash
# serve_session.sh - the server's scheduler keeps its shared buffers (the
# run state of its model calls, the packed tokens and logits) and reuses
# them across requests: none before the first request; after one request of
# each decoder (ReFusion, AR, MDM) the next 32 requests make no buffer
# allocation (/health "buffer_allocs" stays put), the buffers stay held
# between requests ("buffer_bytes" > 0, unchanged), and every repeated
# request gets the answer of its first run (reused buffers hold the previous
# request's data). Each generation's KV cache is its own.
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
. "$(dirname "$0")/helpers/small_model.sh"
rf_test_setup serve_session
rf_small_model "$T" --max-pos 256 || bad "small model"

rf_serve_start "$T/server.log" -m "$T/m" --parallel 1 --threads 1 -n 16 --quiet
json_int() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
health() { curl -s -m 5 "$URL/health"; }
ids() { # the answer's token ids of one completion request
  curl -s -m 60 --data-binary "$1" "$URL/v1/completions" | sed -n 's/.*"token_ids":\(\[[0-9,]*\]\).*/\1/p'
}

[ "$(health | json_int buffer_allocs)" = 0 ] && [ "$(health | json_int buffer_bytes)" = 0 ] && ok ||
  bad "buffers before any request: $(health)"
reqs=('{"prompt":"What is 3 plus 4?","max_tokens":16}'
  '{"prompt":"What is 3 plus 4?","max_tokens":16,"mode":"ar"}'
  '{"prompt":"What is 3 plus 4?","max_tokens":16,"mode":"mdm","blocks":2}'
  '{"prompt":"What is 10 plus 2?","max_tokens":12,"slot_size":2}')
first=()
for r in "${reqs[@]}"; do first+=("$(ids "$r")"); done
for i in "${!first[@]}"; do [ -n "${first[$i]}" ] || bad "no answer to ${reqs[$i]}"; done
allocs=$(health | json_int buffer_allocs)
bytes=$(health | json_int buffer_bytes)
[ "${allocs:-0}" -gt 0 ] && [ "${bytes:-0}" -gt 0 ] && ok || bad "no buffers after the first requests: $(health)"
same=0
for round in $(seq 1 8); do
  for i in "${!reqs[@]}"; do [ "$(ids "${reqs[$i]}")" = "${first[$i]}" ] && same=$((same + 1)); done
done
[ "$same" = 32 ] && ok || bad "$((32 - same)) of 32 repeated requests answered differently from their first run"
[ "$(health | json_int buffer_allocs)" = "$allocs" ] && ok ||
  bad "32 requests after the warm-up allocated buffers: $allocs -> $(health | json_int buffer_allocs)"
[ "$(health | json_int buffer_bytes)" = "$bytes" ] && ok || bad "held bytes changed: $bytes -> $(health)"

echo "serve_session: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
