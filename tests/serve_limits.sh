#!/usr/bin/env bash
# serve_limits.sh - the server under hostile and unlucky clients,
# over loopback HTTP with curl and bash's /dev/tcp:
#  1. the two requests that killed the server ("slot_size": INT_MAX and
#     "max_tokens": INT_MAX) and their neighbours get 400 naming the field,
#     and the server goes on answering;
#  2. a request needing more working memory than --max-request-mb gets 400;
#  3. a garbage request line gets 400; one that never ends is dropped after
#     --timeout;
#  4. slowloris: 300 half-sent requests from 127.0.0.1 do not stop /health
#     answering 127.0.0.2 (the per-client limit closes all but 16 at once),
#     and they are closed after --timeout (serve_hostile.sh: 20 addresses);
#  5. a client that leaves: its queued job never runs, its running job is
#     counted as cancelled (/health "requests_cancelled") and stops within a
#     model call (the decoder's cancel flag: "calls_after_cancel" <= 1 each);
#   - a fatal error inside one generation fails that request (500; 503 for a
#     failed allocation), not the server, nor the generations sharing its
#     calls (they get their solo answers);
#  6. bounded queue wait: a request that cannot start within --queue-wait
#     gets 503 instead of waiting behind a long generation;
#  7. a generation past --generation-timeout is stopped (503) while /health
#     stays responsive.
# Only 127.0.0.x, port chosen by the kernel; every curl has a time limit.
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_limits
trap "" PIPE # writes to connections the server refused

# A random model with the demo tokenizer and a 4096-token context: its AR
# answers run to max_tokens (no early EOS), long enough to leave or queue behind.
"$BIN" init -o "$T/m" --preset tiny --hidden 128 --layers 4 --heads 4 --kv-heads 2 --ffn 384 --max-pos 4096 \
  --seed 5 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init"
M=$T/m

start() { rf_serve_start "$T/server.log" -m "$M" --threads 1 "$@"; } # args: extra serve options
# SIGTERM lets the running generation finish (30 s at most). A clean exit
# (0) also means, in the ASan build, that LeakSanitizer found nothing left
# by the failed, cancelled and aborted generations above
stop() { rf_serve_stopped "$T/server.log"; }
health() { curl -s -m 5 "$@" "$URL/health"; }
json_int() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

# ---- 1-3 ---------------------------------------------------------------------------------
start --timeout 2 --max-request-mb 8
alive && ok || bad "/health not 200 at start"
post crash_slot /v1/completions '{"prompt":"x","slot_size":2147483647,"max_tokens":8}'
expect crash_slot 400 'slot_size.. must be an integer in \[1, 4096\]'
alive && ok || bad "server dead after slot_size INT_MAX"
post crash_len /v1/completions '{"prompt":"x","max_tokens":2147483647}'
expect crash_len 400 'max_tokens.. must be an integer in \[1, 4096\]'
alive && ok || bad "server dead after max_tokens INT_MAX"
post crash_len_ar /v1/completions '{"prompt":"x","max_tokens":2147483647,"mode":"ar"}'
expect crash_len_ar 400 'max_tokens'
post crash_blocks /v1/completions '{"prompt":"x","serial_num_blocks":2147483647,"max_tokens":8}'
expect crash_blocks 400 'serial_num_blocks'
post crash_topk /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_k":2147483647,"mode":"ar"}'
expect crash_topk 400 'top_k'
post crash_ctx /v1/completions '{"prompt":"x","max_tokens":4096,"slot_size":4096}'
expect crash_ctx 400 "context"
# within every bound but over the per-request memory: one 2000-token slot
# needs 2000 rows of logits (2000 x 851 x 4 = 6.8 MB) and of activations
# (2000 x 1408 x 4 = 11 MB)
post mem /v1/completions '{"prompt":"x","max_tokens":2000,"slot_size":2000}'
expect mem 400 "max-request-mb"
post fine /v1/completions '{"prompt":"x","max_tokens":8}'
expect fine 200 '"completion_tokens":8'

# a garbage request line is answered 400; one without an end is dropped
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf '\x01\x02\xff\xfe garbage \x7f\r\n\r\n' >&3
timeout 10 cat <&3 >"$T/garbage.out"
exec 3<&-
head -n 1 "$T/garbage.out" | grep -q '^HTTP/1.1 400' && ok || bad "garbage request line: $(head -c 200 "$T/garbage.out")"
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf '\x01\x02\xff no end' >&3
t0=$(date +%s)
timeout 20 cat <&3 >/dev/null
rc=$?
exec 3<&-
[ $rc -ne 124 ] && ok || bad "an unterminated request line was not dropped after --timeout 2 (waited $(($(date +%s) - t0)) s)"
alive && ok || bad "server dead after garbage"
stop

# ---- 4. slowloris ------------------------------------------------------------------------------
start --timeout 3 --max-per-client 16
fds=()
for i in $(seq 1 300); do
  { exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null || break
  printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n' >&$fd 2>/dev/null
  fds+=($fd)
done
[ ${#fds[@]} -ge 256 ] && ok || bad "opened only ${#fds[@]} connections"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --interface 127.0.0.2 "$URL/health")
[ "$code" = 200 ] && ok || bad "/health from 127.0.0.2 with 300 half-sent requests open: got '$code'"
# the same client's next connection is refused while it holds its share
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$URL/health")
[ "$code" != 200 ] && ok || bad "a 17th connection from 127.0.0.1 was served"
sleep 5 # > --timeout: the half-sent ones are dropped
alive && ok || bad "127.0.0.1 still locked out after --timeout"
for fd in "${fds[@]}"; do exec {fd}<&-; done
stop

# ---- 5-6. clients that leave, bounded queue wait -------------------------------------------------
# a fatal error inside a generation (rf_die, e.g. an allocation that failed;
# REFUSION_TEST_DIE_ONCE raises one before the first model call) fails that
# request with 500 and the server goes on serving
REFUSION_TEST_DIE_ONCE=1 start
post die1 /v1/completions '{"prompt":"x","max_tokens":8}'
expect die1 500 "generation failed: REFUSION_TEST_DIE_ONCE"
alive && ok || bad "the server died with its generation"
post die2 /v1/completions '{"prompt":"x","max_tokens":8}'
expect die2 200 '"completion_tokens":8'
stop
# an allocation that fails inside a generation: 503, and the server serves on
REFUSION_TEST_DIE_ONCE=oom start
post oom1 /v1/completions '{"prompt":"x","max_tokens":8}'
expect oom1 503 "generation failed: out of memory allocating 1099511627776 bytes"
post oom2 /v1/completions '{"prompt":"x","max_tokens":8}'
expect oom2 200 '"completion_tokens":8'
stop
# an allocation that fails while a streamed reply grows (the 5th append, in
# the scheduler thread under the server's lock): the stream gets no broken
# event, ends with the error event and [DONE], and the server, whose lock
# the fault unwound out of, serves on
REFUSION_TEST_DIE_ONCE=append:5 start
curl -s -N -m 15 -o "$T/ap.body" -w '%{http_code}' --data-binary '{"prompt":"x","max_tokens":16,"mode":"ar","stream":true}' \
  "$URL/v1/completions" >"$T/ap.code" 2>/dev/null
[ "$(cat "$T/ap.code")" = 200 ] && grep -q '^data: {"error":{"message":"generation failed: out of memory' "$T/ap.body" &&
  grep -q '^data: \[DONE\]$' "$T/ap.body" && ! grep -v '^data: {.*}$' "$T/ap.body" | grep -qv '^data: \[DONE\]$\|^$' &&
  ok || bad "a failed append to a stream: $(cat "$T/ap.code") $(head -c 600 "$T/ap.body")"
alive && ok || bad "the server stopped answering after a fault under its lock"
post ap2 /v1/completions '{"prompt":"x","max_tokens":8}'
expect ap2 200 '"completion_tokens":8'
stop
# the same fault at a stream's last event (the usage chunk, the 5th append
# of 3 tokens): the job is dropped with the events it had, closed by an
# error event and [DONE] (written into room every append keeps), and the
# answer it was finishing is freed first (in the ASan build the clean exit
# at stop says nothing leaked)
REFUSION_TEST_DIE_ONCE=append:5 start
curl -s -N -m 15 -o "$T/last.body" -w '%{http_code}' --data-binary \
  '{"prompt":"x","max_tokens":3,"mode":"ar","stream":true,"stream_options":{"include_usage":true}}' \
  "$URL/v1/completions" >"$T/last.code" 2>/dev/null
[ "$(cat "$T/last.code")" = 200 ] && grep -q '"finish_reason":"length"' "$T/last.body" && ! grep -q '"usage"' "$T/last.body" &&
  ! grep -v '^data: {.*}$' "$T/last.body" | grep -qv '^data: \[DONE\]$\|^$' &&
  [ "$(grep -v '^$' "$T/last.body" | tail -n 2 | head -n 1 | cut -c1-92)" = \
    'data: {"error":{"message":"generation failed: out of memory while the answer was being sent"' ] &&
  [ "$(grep -v '^$' "$T/last.body" | tail -n 1)" = 'data: [DONE]' ] &&
  ok || bad "a failed append of a stream's last event: $(cat "$T/last.code") $(head -c 600 "$T/last.body")"
alive && ok || bad "the server stopped answering after a fault at a stream's last event"
stop
# a fault inside one of three generations sharing the scheduler's calls
# (the 300th model call of about 600): that one fails with 500, the other
# two finish with the answers they get alone
REFUSION_TEST_DIE_ONCE=300 start --parallel 4
pids=()
for i in 1 2 3; do
  post "f$i" /v1/completions "{\"prompt\":\"Question $i\",\"max_tokens\":200,\"mode\":\"ar\"}" &
  pids+=($!)
done
wait "${pids[@]}"
ids_of() { sed -n 's/.*"token_ids":\(\[[0-9,]*\]\).*/\1/p' "$T/$1.body"; }
failed=0 good=0 same=0
for i in 1 2 3; do
  code=$(cat "$T/f$i.code")
  if [ "$code" = 500 ] && grep -q "generation failed: REFUSION_TEST_DIE_ONCE" "$T/f$i.body"; then
    failed=$((failed + 1))
  elif [ "$code" = 200 ]; then
    good=$((good + 1))
    post "s$i" /v1/completions "{\"prompt\":\"Question $i\",\"max_tokens\":200,\"mode\":\"ar\"}"
    [ -n "$(ids_of "f$i")" ] && [ "$(ids_of "f$i")" = "$(ids_of "s$i")" ] && same=$((same + 1))
  fi
done
peak=$(curl -s -m 5 "$URL/metrics" | sed -n 's/^refusion_batch_rows_peak \([0-9]*\)$/\1/p')
[ "$failed" = 1 ] && [ "$good" = 2 ] && [ "$same" = 2 ] && [ "${peak:-0}" -ge 2 ] && ok ||
  bad "a fault in one of 3 batched generations: $failed failed, $good answered, $same of them as alone, peak $peak rows"
stop

# a generation that shows nothing for a while (each model call 2.3 s late):
# the stream carries an SSE comment line meanwhile, and --timeout (1 s, for
# clients that stall) ends neither the stream nor a plain request waiting
# for its answer
REFUSION_TEST_STEP_MS=2300 start --timeout 1
curl -s -N -m 30 -o "$T/ka.body" -w '%{http_code}' --data-binary '{"prompt":"x","max_tokens":1,"mode":"ar","stream":true}' \
  "$URL/v1/completions" >"$T/ka.code" 2>/dev/null
[ "$(cat "$T/ka.code")" = 200 ] && grep -q '^: keep-alive$' "$T/ka.body" && grep -q '^data: \[DONE\]$' "$T/ka.body" &&
  [ "$(grep -n '^: keep-alive$' "$T/ka.body" | head -1 | cut -d: -f1)" -lt "$(grep -n '"text":"[^"]' "$T/ka.body" | head -1 | cut -d: -f1)" ] &&
  ok || bad "a quiet stream: no keep-alive line before its text, or cut: $(cat "$T/ka.code") $(head -c 400 "$T/ka.body")"
post ka2 /v1/completions '{"prompt":"x","max_tokens":1,"mode":"ar"}'
expect ka2 200 '"completion_tokens":1'
stop

# a slower model (about 25M weights read per token) so that a 4,000-token
# job outlasts every client's wait below on a fast, quiet machine too
"$BIN" init -o "$T/big" --preset tiny --hidden 512 --layers 8 --heads 8 --kv-heads 4 --ffn 1536 --max-pos 4096 \
  --seed 6 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init big"
M=$T/big
start --queue-wait 1 --parallel 1 # one worker: the second long job queues
LONG='{"prompt":"x","max_tokens":4000,"mode":"ar"}'
# a long job whose client leaves after 1 s, and a queued one whose client leaves after 0.3 s
curl -s -m 1 -o /dev/null --data-binary "$LONG" "$URL/v1/completions" &
c1=$!
sleep 0.1
curl -s -m 0.3 -o /dev/null --data-binary "$LONG" "$URL/v1/completions" &
c2=$!
wait $c1 $c2
for _ in $(seq 1 600); do
  h=$(health)
  [ "$(echo "$h" | json_int active)" = 0 ] && break
  sleep 0.1
done
h=$(health)
[ "$(echo "$h" | json_int requests_cancelled)" = 1 ] && ok || bad "requests_cancelled: $h"
# the queued one never ran: only the first job is done
[ "$(echo "$h" | json_int requests_done)" = 1 ] && ok || bad "requests_done (the left queued job must not run): $h"
grep -q "the client left; [0-9]* model calls spent after that" "$T/server.log" && ok || bad "no cancel line in the log"
# while a long job runs (its client waits 4 s), a second request waits at most --queue-wait
curl -s -m 4 -o /dev/null --data-binary "$LONG" "$URL/v1/completions" &
c3=$!
sleep 0.3
post late /v1/completions '{"prompt":"x","max_tokens":4,"mode":"ar"}'
expect late 503 "waited 1 s in the queue"
wait $c3
for _ in $(seq 1 600); do
  [ "$(health | json_int active)" = 0 ] && break
  sleep 0.1
done
[ "$(health | json_int requests_cancelled)" = 2 ] && ok || bad "the long job's client left: $(health)"
# a streamed client that leaves is cancelled the same way
curl -s -N -m 0.5 -o /dev/null --data-binary '{"prompt":"x","max_tokens":4000,"mode":"ar","stream":true}' "$URL/v1/completions"
for _ in $(seq 1 600); do
  [ "$(health | json_int active)" = 0 ] && break
  sleep 0.1
done
[ "$(health | json_int requests_cancelled)" = 3 ] && ok || bad "streamed client leaving: $(health)"
# the cancel flag reaches the decoder: each left job stops before its next
# model call (at most the call in flight when the client was noticed), not
# after its 4,000 tokens
spent=$(health | json_int calls_after_cancel)
[ -n "$spent" ] && [ "$spent" -le 3 ] && ok || bad "model calls after the clients left: $spent (want <= 3, one per job): $(health)"
post after /v1/completions '{"prompt":"x","max_tokens":8}'
expect after 200 '"completion_tokens":8'
stop

# ---- 7. amplified work: a generation's deadline -------------------------------------------------
# One MDM request of 2,000 steps over 4,000 positions is within the
# fed-positions budget (8.0M of 8.4M) yet would hold the model for an hour:
# --generation-timeout stops it before its next model call after 2 s (503),
# while /health answers within 1 s throughout.
M=$T/m
start --generation-timeout 2 --parallel 1
t0=$(date +%s.%N)
post mdm_huge /v1/completions '{"prompt":"x","max_tokens":4000,"mode":"mdm","steps":2000}' &
cpid=$!
slow=0
while kill -0 $cpid 2>/dev/null; do
  tt=$(curl -s -m 5 -o /dev/null -w '%{time_total}' "$URL/health")
  awk -v t="$tt" 'BEGIN { exit !(t == "" || t > 1.0) }' && slow=$((slow + 1))
  sleep 0.2
done
wait $cpid
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
expect mdm_huge 503 '"code":"generation_timeout"'
awk -v t="$took" 'BEGIN { exit !(t < 30) }' && ok || bad "the MDM request was stopped only after $took s (deadline 2 s)"
[ $slow -eq 0 ] && ok || bad "/health took over 1 s $slow times while the MDM request ran"
[ "$(health | json_int generations_timed_out)" = 1 ] && ok || bad "generations_timed_out: $(health)"
post after_mdm /v1/completions '{"prompt":"x","max_tokens":8}'
expect after_mdm 200 '"completion_tokens":8'
stop

echo "serve_limits: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
