#!/usr/bin/env bash
# bench_batch_llamacpp.sh MODEL.gguf [TOKENS] [REPS] - aggregate AR decoding
# throughput of N sequences at once, this engine's server against llama.cpp
# on the same GGUF file and thread count, interleaved A B B A per N (4 and
# 8), REPS times.
#
# The requests are scripts/bench_batch.sh's: each of the N clients sends two
# requests one after the other, a 16-token prompt of its own then TOKENS
# greedy answer tokens, EOS ignored; a run's figure is all answer tokens
# over its wall time (prefills included).
#  - refusion: `refusion serve --parallel 8 --threads THREADS` (continuous
#    batching: every running generation a row of one model call), N client
#    threads over HTTP;
#  - llama.cpp: node-llama-cpp (scripts/gguf/fetch_ref.sh; its prebuilt CPU
#    build), one context with N sequences evaluating at once (it batches
#    their tokens into shared llama_decode calls), THREADS threads, in
#    process (no HTTP); its model load is outside the timed part.
# llama.cpp needs the tokenizer in the file (random weights, the demo
# tokenizer, as scripts/bench_llamacpp.sh makes it):
#   ./build/refusion init -o /tmp/m06 --preset 0.6b --dtype bf16 --tokenizer models/refusion-demo/tokenizer.json
#   ./build/refusion convert -m /tmp/m06 -o /tmp/m06-q8.gguf --dtype q8_0
#   THREADS=2 flock -x /tmp/rf-cpu.lock scripts/bench_batch_llamacpp.sh /tmp/m06-q8.gguf 32 1
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/refusion}
M=${1:?usage: bench_batch_llamacpp.sh MODEL.gguf [TOKENS] [REPS]}
TOKENS=${2:-32}
REPS=${3:-1}
THREADS=${THREADS:-2}
NPM=$(bash scripts/gguf/fetch_ref.sh) || exit 1
PROG=bench_batch_llamacpp T=$(mktemp -d /tmp/rf_bench_batch_llamacpp.XXXXXX) PIDS=()
. scripts/serve/start.sh
trap rf_bench_cleanup EXIT
rf_bench_header
echo "  model $M, $TOKENS answer tokens per request, 2 requests per sequence, $THREADS threads, $REPS x ABBA per N"
rf_bench_serve refusion --parallel 8 --threads "$THREADS"

python3 - "$(cat "$T/refusion.url")" "$NPM" "$M" "$TOKENS" "$REPS" "$THREADS" <<'EOF'
import json, statistics, subprocess, sys, threading, time, urllib.request
url, npm, model, tokens, reps, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]

def request(client, i):
    prompt = [(client * 131 + i * 17 + k * 7) % 800 + 10 for k in range(16)]
    body = {"prompt": prompt, "max_tokens": tokens, "mode": "ar", "ignore_eos": True, "temperature": 0}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                                      headers={"Content-Type": "application/json"}), timeout=600)
    return json.load(r)["usage"]["completion_tokens"]

def refusion(n):
    done = [0] * n
    def client(c):
        for i in range(2): done[c] += request(c, i)
    ts = [threading.Thread(target=client, args=(c,)) for c in range(n)]
    t0 = time.time()
    for t in ts: t.start()
    for t in ts: t.join()
    return sum(done) / (time.time() - t0)

def llamacpp(n):
    out = subprocess.run(["node", "scripts/gguf/llamacpp.mjs", "batch", npm, model, str(n), str(tokens), threads],
                         capture_output=True, text=True, timeout=600)
    if out.returncode: sys.exit(f"bench_batch_llamacpp: llama.cpp failed: {out.stderr.strip()}")
    r = json.loads(out.stdout)
    if r["tokens"] != n * 2 * tokens: sys.exit(f"bench_batch_llamacpp: llama.cpp decoded {r['tokens']} tokens")
    return r["tokens_per_s"]

run = {"refusion": refusion, "llama.cpp": llamacpp}
request(99, 0)  # warm: weights paged in
res = {}
for n in (4, 8):
    for r in range(reps):
        for name in ("refusion", "llama.cpp", "llama.cpp", "refusion"):
            tps = run[name](n)
            res.setdefault((name, n), []).append(tps)
            print(f"  run: {name:9s} {n} sequences {tps:8.2f} tokens/s", flush=True)
for n in (4, 8):
    ratios = [a / b for a, b in zip(res[("refusion", n)], res[("llama.cpp", n)])]
    print(f"  {n} sequences: refusion {statistics.median(res[('refusion', n)]):.2f}, "
          f"llama.cpp {statistics.median(res[('llama.cpp', n)]):.2f} tokens/s (medians); refusion / llama.cpp "
          f"median {statistics.median(ratios):.2f}x over {len(ratios)} pairs (min {min(ratios):.2f}, max {max(ratios):.2f})")
EOF
