#!/usr/bin/env bash
# bench_batch.sh [MODEL] [TOKENS] [REPS] - aggregate decoding throughput of
# `refusion serve` with 1, 4 and 8 concurrent clients: continuous batching
# (the default: every running generation is a row of one shared model call)
# against --no-cont-batching (static batches: a generation starts only when
# none is running), interleaved A B B A per client count, REPS times.
#
# Each client sends one completion request at a time (a 16-token prompt of
# its own, TOKENS answer tokens, greedy, EOS ignored; AR, or with
# MODE=rolling the rolling slot with slots of SLOT tokens, default 4, or
# with MODE=infill ReFusion's plan-and-infill with slots of SLOT tokens:
# DRAFT=adaptive gives the rolling slot the adaptive width, which under
# continuous batching sizes each call for the whole batched call) until
# the run's requests are done; with CHAT=1 the requests are chat questions of
# the demo model's task families instead (numbers varied per client and
# request, up to TOKENS answer tokens, ending at EOS: a trained mask head's
# drafts pass on them); a run's figure is the answer tokens of all its clients
# divided by its wall time (first request sent to last answer received).
# Prints every run, then per client count the median over the runs and the
# median of the per-run ratios to one client. Both servers use --parallel 8
# and all cores. OMP_NUM_THREADS is honoured by neither (--threads is); THREADS=N
# passes --threads N to both. CLIENTS="1 4" picks the client counts (default
# "1 4 8"; the first is the base of the ratios).
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
MODE=${MODE:-ar}
SLOT=${SLOT:-4}
DRAFT=${DRAFT:-fixed}
CHAT=${CHAT:-0}
CLIENTS=${CLIENTS:-1 4 8}
case $MODE in ar | rolling | infill) ;; *) echo "bench_batch: MODE must be ar, rolling or infill (got '$MODE')" >&2; exit 2 ;; esac
case $DRAFT in fixed | adaptive) ;; *) echo "bench_batch: DRAFT must be fixed or adaptive (got '$DRAFT')" >&2; exit 2 ;; esac
PROG=bench_batch T=$(mktemp -d /tmp/rf_bench_batch.XXXXXX) PIDS=()
. scripts/serve/start.sh
trap rf_bench_cleanup EXIT
rf_bench_header
echo "  model $M, $TOKENS answer tokens per request, mode $MODE$([ "$MODE" != ar ] && echo " (slot $SLOT)")$([ "$MODE" = rolling ] && echo " $DRAFT width"), $([ "$CHAT" = 1 ] && echo "chat questions, ")$REPS x ABBA per client count"
rf_bench_serve batched --parallel 8 ${THREADS:+--threads $THREADS}
rf_bench_serve static --parallel 8 ${THREADS:+--threads $THREADS} --no-cont-batching

python3 - "$(cat "$T/batched.url")" "$(cat "$T/static.url")" "$TOKENS" "$REPS" "$MODE" "$SLOT" "$CHAT" "$CLIENTS" "$DRAFT" <<'EOF'
import json, os, statistics, sys, threading, time, urllib.request
sys.path.insert(0, os.path.join(os.getcwd(), "scripts", "serve"))
from chat_questions import question
urls = {"batched": sys.argv[1], "static": sys.argv[2]}
tokens, reps, mode, slot, chat = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7] == "1"
counts = [int(x) for x in sys.argv[8].split()]
draft = sys.argv[9]
calls = {}

def request(url, client, i):
    prompt = [(client * 131 + i * 17 + k * 7) % 800 + 10 for k in range(16)]
    body = {"prompt": prompt, "max_tokens": tokens, "mode": "ar", "ignore_eos": True, "temperature": 0}
    if chat:
        q = question(client, i)
        body = {"messages": [{"role": "user", "content": q}], "max_tokens": tokens, "mode": "ar", "temperature": 0}
    if mode == "rolling": body.update(mode="refusion", rolling=True, slot_size=slot, draft_policy=draft)
    if mode == "infill": body.update(mode="refusion", rolling=False, slot_size=slot)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = urllib.request.urlopen(urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                                      headers={"Content-Type": "application/json"}), timeout=600)
    o = json.load(r)
    n = o["usage"]["completion_tokens"]
    c = calls.setdefault(url, [0, 0])
    c[0] += n
    c[1] += o["refusion"]["model_calls"]
    return n

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
for clients in counts:
    for r in range(reps):
        for name in ("batched", "static", "static", "batched"):
            tps = run(name, clients)
            res.setdefault((name, clients), []).append(tps)
            print(f"  run: {name:8s} {clients} clients {tps:8.2f} tokens/s", flush=True)
print(f"  median aggregate tokens/s (ratio to {counts[0]} client(s), median of runs):")
for name in ("batched", "static"):
    one = statistics.median(res[(name, counts[0])])
    line = []
    for clients in counts:
        v = res[(name, clients)]
        line.append(f"{clients}: {statistics.median(v):7.2f} ({statistics.median(x / one for x in v):.2f}x)")
    print(f"  {name:8s} " + "   ".join(line))
for name in urls:
    c = calls.get(urls[name], [0, 0])
    print(f"  {name:8s} {c[0] / max(c[1], 1):.2f} answer tokens per model call of a generation")
for clients in counts:
    ratios = [b / w for b, w in zip(res[("batched", clients)], res[("static", clients)])]
    print(f"  batched / static at {clients} clients: median {statistics.median(ratios):.2f}x over {len(ratios)} pairs "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
EOF
