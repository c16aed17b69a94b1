#!/usr/bin/env bash
# serve_nginx.sh - docs/deploy/nginx.conf (Debian's nginx) in front of two
# `refusion serve` processes on loopback:
#  - 40 concurrent generations through nginx (160 tokens each, EOS ignored
#    so that some are running at the kill), started 40 ms apart, every
#    answer equal to the one the instances give directly (greedy AR);
#  - one instance is killed (SIGKILL) while they run: every request that
#    starts after the kill is answered (nginx sends it to the live one);
#    one that was running on the killed instance may fail, nothing else;
#  - least_conn spreads the requests before the kill over both instances
#    (their own /metrics, through the per-instance locations);
#  - a stream passes unbuffered: its first chunk arrives while the
#    generation is still running.
# Skipped (exit 77) only when nginx is not installed.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_nginx
command -v nginx >/dev/null || { echo "serve_nginx: SKIPPED: nginx is not installed (apt-get install nginx-light)"; exit 77; }
# the demo with f32 weights: its kernels give a token the same numbers at
# every call width on every tier (tests/model_forward_calls.c), so an
# answer does not depend on which requests share its calls
DEMO=$T/demo-f32
"$BIN" convert -m "$SRC/models/refusion-demo" -o "$DEMO" --dtype f32 >/dev/null || { echo "FAIL: convert to f32"; exit 1; }

# two instances on free ports
start() { # LOG -> PID in $spid, port in $sport
  local log=$1
  shift
  "$BIN" serve --host 127.0.0.1 --port 0 -m "$DEMO" --parallel 2 --threads 1 --max-per-client 512 -q --ignore-eos "$@" 2>"$log.log" &
  spid=$!
  sport=""
  for _ in $(seq 1 100); do
    sport=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log.log")
    [ -n "$sport" ] && break
    sleep 0.1
  done
  [ -n "$sport" ] || { echo "FAIL: an instance did not start: $(cat "$log.log")" >&2; exit 1; }
}
start "$T/a"; PA=$spid A=$sport
start "$T/b"; PB=$spid B=$sport
NPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s/127.0.0.1:8081/127.0.0.1:$A/g; s/127.0.0.1:8082/127.0.0.1:$B/g; s/listen 127.0.0.1:8080/listen 127.0.0.1:$NPORT/" \
  -e "s|/instance/8081/|/instance/a/|g; s|/instance/8082/|/instance/b/|g" "$SRC/docs/deploy/nginx.conf" >"$T/nginx.conf"
nginx -p "$T" -c "$T/nginx.conf" -e "$T/error.log" || { echo "FAIL: nginx did not start: $(cat "$T/error.log")"; exit 1; }
cleanup() { nginx -p "$T" -c "$T/nginx.conf" -e "$T/error.log" -s stop 2>/dev/null; kill -KILL "$PA" "$PB" 2>/dev/null; rf_test_cleanup; }
trap cleanup EXIT
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$NPORT/health" >/dev/null && break; sleep 0.1; done

NGINX=http://127.0.0.1:$NPORT DIRECT=http://127.0.0.1:$B KILL_PID=$PA timeout 300 python3 - <<'PY'
import json, os, signal, threading, time, urllib.request, urllib.error
nginx, direct = os.environ["NGINX"], os.environ["DIRECT"]
fails = 0
def bad(m):
    global fails
    fails += 1
    print("FAIL: " + m)
def post(base, body, timeout=120):
    r = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=timeout) as f:
        return json.loads(f.read())
def metric(base, name):
    with urllib.request.urlopen(base, timeout=10) as f:
        for line in f.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
prompts = ["Tom has %d apples. He buys 7 more. How many apples does he have now?" % k for k in range(4)]
body = lambda i: {"prompt": prompts[i % 4], "mode": "ar", "temperature": 0, "max_tokens": 160}
want = [post(direct, body(i))["choices"][0]["text"] for i in range(4)]
base_b = metric(nginx + "/instance/b/metrics", "refusion_requests_total")

# 40 requests, started 40 ms apart; instance A killed after the 20th start
results, t_kill = [None] * 40, [None]
def one(i):
    t0 = time.time()
    try:
        results[i] = (t0, post(nginx, body(i))["choices"][0]["text"])
    except Exception as e:
        results[i] = (t0, e)
threads = []
for i in range(40):
    if i == 20:
        # finished and running on each instance
        before_a = sum(metric(nginx + "/instance/a/metrics", m) for m in ("refusion_requests_total", "refusion_requests_running"))
        before_b = sum(metric(nginx + "/instance/b/metrics", m) for m in ("refusion_requests_total", "refusion_requests_running"))
        os.kill(int(os.environ["KILL_PID"]), signal.SIGKILL)
        t_kill[0] = time.time()
    t = threading.Thread(target=one, args=(i,))
    t.start()
    threads.append(t)
    time.sleep(0.04)
for t in threads:
    t.join()
after, during = 0, 0
for i, (t0, r) in enumerate(results):
    ok = isinstance(r, str) and r == want[i % 4]
    if t0 >= t_kill[0]:
        after += 1
        if not ok: bad("request %d (after the kill) failed or differs: %r" % (i, r))
    elif not ok:
        during += 1
        if isinstance(r, str): bad("request %d answered wrongly: %r" % (i, r))
if after < 20: bad("only %d requests started after the kill" % after)
print("serve_nginx: %d requests started after the kill; %d running on the killed instance failed" % (after, during))
before_b -= base_b
if not (before_a >= 1 and before_b >= 1):
    bad("least_conn: instance a finished %s, b %s before the kill" % (before_a, before_b))

# a stream passes unbuffered: the chat stream's first chunk (the role) comes
# at once, while a long MDM generation is still running
r = urllib.request.Request(nginx + "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": prompts[0]}],
    "mode": "mdm", "max_tokens": 1200, "stream": True}).encode(), {"Content-Type": "application/json"})
t0 = time.time()
with urllib.request.urlopen(r, timeout=60) as f:
    first = f.readline()
    t_first = time.time() - t0
    running = metric(nginx + "/instance/b/metrics", "refusion_requests_running")
if not (first.startswith(b"data: ") and running >= 1):
    bad("stream: first line %r after %.2f s, running %s (buffered by the proxy?)" % (first, t_first, running))
exit(1 if fails else 0)
PY
rc=$?
[ $rc -eq 0 ] && echo "serve_nginx: passed" || echo "serve_nginx: failed"
exit $rc
