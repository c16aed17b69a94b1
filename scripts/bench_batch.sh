#!/usr/bin/env bash
# bench_batch.sh [MODEL] [TOKENS] [REPS] - aggregate AR decoding throughput of
# `refusion serve` with 1, 4 and 8 concurrent clients: continuous batching
# (the default: every running generation is a row of one shared model call)
# against --no-cont-batching (a worker thread per generation, the cores
# shared among them), interleaved A B B A per client count, REPS times.
#
# Each client sends one completion request at a time (a 16-token prompt of
# its own, TOKENS answer tokens, AR, greedy, EOS ignored) until the run's
# requests are done; a run's figure is the answer tokens of all its clients
# divided by its wall time (first request sent to last answer received).
# Prints every run, then per client count the median over the runs and the
# median of the per-run ratios to one client. Both servers use --parallel 8
# and their default threads (batched: all cores; workers: cores / 8, at
# least 1). OMP_NUM_THREADS is honoured by neither (--threads is); THREADS=N
# passes --threads N to both.
#
# The 0.6B shape in Q8_0 (a random model of Qwen3-0.6B's shape):
#   ./build/refusion init -o /tmp/sv-06b --preset 0.6b
#   ./build/refusion convert -m /tmp/sv-06b -o /tmp/sv-06b-q8.gguf --dtype q8_0
#   flock -x /tmp/rf-cpu.lock scripts/bench_batch.sh /tmp/sv-06b-q8.gguf 32 2
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/refusion}
M=${1:-models/refusion-demo}
TOKENS=${2:-32}
REPS=${3:-2}
T=$(mktemp -d /tmp/rf_bench_batch.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

start() { # NAME OPTIONS...: a server on a free port; its URL in $T/NAME.url
  local name=$1 port=""
  shift
  "$BIN" serve -m "$M" --port 0 -q --parallel 8 ${THREADS:+--threads $THREADS} "$@" 2>"$T/$name.log" &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$T/$name.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "bench_batch: the server did not start: $(cat "$T/$name.log")" >&2; exit 1; }
  echo "http://127.0.0.1:$port" >"$T/$name.url"
  head -1 "$T/$name.log" | grep -o '(.*)' | sed "s/^/  $name: /"
}
echo "bench_batch: $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "  model $M, $TOKENS answer tokens per request, $REPS x ABBA per client count"
start batched
start workers --no-cont-batching

python3 - "$(cat "$T/batched.url")" "$(cat "$T/workers.url")" "$TOKENS" "$REPS" <<'EOF'
import json, statistics, sys, threading, time, urllib.request
urls = {"batched": sys.argv[1], "workers": sys.argv[2]}
tokens, reps = int(sys.argv[3]), int(sys.argv[4])

def request(url, client, i):
    prompt = [(client * 131 + i * 17 + k * 7) % 800 + 10 for k in range(16)]
    body = {"prompt": prompt, "max_tokens": tokens, "mode": "ar", "ignore_eos": True, "temperature": 0}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                                      headers={"Content-Type": "application/json"}), timeout=600)
    return json.load(r)["usage"]["completion_tokens"]

def run(name, clients, per_client=2):
    done = [0] * clients
    def client(c):
        for i in range(per_client): done[c] += request(urls[name], c, i)
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.time()
    for t in ts: t.start()
    for t in ts: t.join()
    wall = time.time() - t0
    return sum(done) / wall

for name in urls: request(urls[name], 99, 0)  # warm: weights paged in
res = {}
for clients in (1, 4, 8):
    for r in range(reps):
        for name in ("batched", "workers", "workers", "batched"):
            tps = run(name, clients)
            res.setdefault((name, clients), []).append(tps)
            print(f"  run: {name:8s} {clients} clients {tps:8.2f} tokens/s", flush=True)
print("  median aggregate tokens/s (ratio to 1 client, median of runs):")
for name in ("batched", "workers"):
    one = statistics.median(res[(name, 1)])
    line = []
    for clients in (1, 4, 8):
        v = res[(name, clients)]
        line.append(f"{clients}: {statistics.median(v):7.2f} ({statistics.median(x / one for x in v):.2f}x)")
    print(f"  {name:8s} " + "   ".join(line))
for clients in (1, 4, 8):
    ratios = [b / w for b, w in zip(res[("batched", clients)], res[("workers", clients)])]
    print(f"  batched / workers at {clients} clients: median {statistics.median(ratios):.2f}x over {len(ratios)} pairs "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
EOF
