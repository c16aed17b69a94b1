#!/usr/bin/env bash
# loadtest.sh [MODEL_DIR] [CLIENTS] [ROUNDS] - a bounded load test of
# `refusion serve` on loopback (127.0.0.1, a port the kernel picks), which
# stops by itself: CLIENTS concurrent clients each make ROUNDS requests mixing
# /health, /v1/models, completions, streamed completions, chat, malformed
# bodies, clients that disconnect mid-generation and clients that send their
# request slowly. Prints requests answered / failed, p50 / p99 latency, the
# server's RSS before and after, its CPU time, and the model calls spent on
# generations whose client had left (/health "calls_after_cancel").
# Defaults: models/refusion-demo, 16 clients, 12 rounds. BIN=path overrides
# ./build/refusion.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/refusion}
M=${1:-models/refusion-demo}
CLIENTS=${2:-16}
ROUNDS=${3:-12}
T=$(mktemp -d /tmp/rf_loadtest.XXXXXX)
SPID=""
cleanup() { [ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
trap '' PIPE

"$BIN" serve -m "$M" --port 0 -q --max-per-client $((CLIENTS * 2 + 8)) --timeout 5 -n 64 2>"$T/server.log" &
SPID=$!
PORT=""
for _ in $(seq 1 100); do
  PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$T/server.log")
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "loadtest: the server did not start: $(cat "$T/server.log")" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
rss() { awk '/VmRSS/ {print $2 / 1024 " MB"}' "/proc/$SPID/status"; }
cpu() { awk '{printf "%.1f", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$SPID/stat"; }
until curl -s -m 2 -o /dev/null "$URL/health"; do sleep 0.1; done
rss0=$(rss) cpu0=$(cpu)

# one request: "<kind> <status> <seconds>" appended to the client's file
one() {
  local kind=$1 out=$2
  shift 2
  local r
  r=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$@" 2>/dev/null)
  echo "$kind ${r:-000 0}" >>"$out"
}
client() {
  local c=$1 out=$T/client$1
  for r in $(seq 1 "$ROUNDS"); do
    case $(((c + r) % 8)) in
      0) one health "$out" -m 10 "$URL/health" ;;
      1) one models "$out" -m 10 "$URL/v1/models" ;;
      2) one completion "$out" -m 120 --data-binary '{"prompt": "def f(x):", "max_tokens": 32}' "$URL/v1/completions" ;;
      3) one stream "$out" -m 120 -N --data-binary '{"prompt": "Tom has 3 apples.", "max_tokens": 32, "stream": true}' "$URL/v1/completions" ;;
      4) one chat "$out" -m 120 --data-binary '{"messages": [{"role": "user", "content": "What is 12*7?"}], "max_tokens": 32, "mode": "ar"}' "$URL/v1/chat/completions" ;;
      5) one malformed "$out" -m 10 --data-binary '{"prompt": "x", "max_tokens": 2147483647, "slot_size": -1' "$URL/v1/completions" ;;
      6) # leaves after 0.3 s, mid-generation or while queued
        curl -s -o /dev/null -m 0.3 --data-binary '{"prompt": "x", "max_tokens": 256, "mode": "ar"}' "$URL/v1/completions" 2>/dev/null
        echo "disconnect 499 0.3" >>"$out" ;;
      7) # sends its request in pieces, 1 s apart
        local t0 s fd
        t0=$(date +%s.%N)
        if exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"; then
          printf 'GET /health HTTP/1.1\r\n' >&$fd; sleep 1
          printf 'Host: x\r\n' >&$fd; sleep 1
          printf 'Connection: close\r\n\r\n' >&$fd
          s=$(timeout 10 head -n 1 <&$fd | awk '{print $2}')
          exec {fd}<&-
        fi
        echo "slow ${s:-000} $(echo "$(date +%s.%N) - $t0" | bc)" >>"$out" ;;
    esac
  done
}
t_start=$(date +%s.%N)
pids=()
for c in $(seq 1 "$CLIENTS"); do client "$c" & pids+=($!); done
wait "${pids[@]}"
t_all=$(echo "$(date +%s.%N) - $t_start" | bc)
for _ in $(seq 1 600); do # let abandoned generations finish to count their cost
  curl -s -m 2 "$URL/health" | grep -q '"active":0' && break
  sleep 0.5
done
health=$(curl -s -m 5 "$URL/health")
rss1=$(rss) cpu1=$(cpu)
kill -TERM "$SPID"; wait "$SPID" 2>/dev/null; SPID=""

cat "$T"/client* >"$T/all"
total=$(wc -l <"$T/all")
# answered as intended: 2xx; 400 for the malformed ones; the disconnects are counted apart
okn=$(awk '($1 == "malformed" && $2 == 400) || ($1 != "malformed" && $1 != "disconnect" && $2 ~ /^2/)' "$T/all" | wc -l)
left=$(awk '$1 == "disconnect"' "$T/all" | wc -l)
failed=$((total - okn - left))
lat() { awk '$1 != "disconnect" && $1 != "slow" {print $3}' "$T/all" | sort -g | awk -v q="$1" '{a[NR] = $1} END {i = int(NR * q + 0.999); if (i < 1) i = 1; print a[i] " s"}'; }
echo "loadtest: $CLIENTS clients x $ROUNDS rounds on $M in ${t_all} s ($(nproc) CPUs, $(uptime | sed 's/.*load average: //') load)"
echo "  requests: $total ($okn answered as intended, $failed failed, $left disconnected on purpose)"
echo "  by kind:  $(awk '{k[$1]++} END {for (x in k) printf "%s %d  ", x, k[x]}' "$T/all")"
echo "  latency (all but disconnects and slow senders): p50 $(lat 0.5), p99 $(lat 0.99)"
echo "  server RSS: $rss0 before, $rss1 after; server CPU: $(echo "$cpu1 - $cpu0" | bc) s"
echo "  abandoned generations: $(echo "$health" | sed -n 's/.*"requests_cancelled":\([0-9]*\).*"calls_after_cancel":\([0-9]*\).*/\1 cancelled while running, \2 model calls spent after their client left/p')"
[ "$failed" -eq 0 ]
