#!/usr/bin/env bash
# bench_prefix.sh [MODEL] [HISTORY] [REPS] - how much sooner a chat's second
# turn starts answering when the server reuses the first turn's KV entries
# (prompt-prefix cache, the default --cache-mb) than when it prefills the
# whole history again (--cache-mb 0). Two servers, one of each, interleaved
# A B B A, REPS times.
#
# A chat of its own per measurement (its history tokens differ from every
# other's, so nothing is shared between measurements): turn 1 is a
# completion of HISTORY prompt tokens (8 answer tokens, AR, greedy); turn 2,
# streamed, is turn 1's prompt and answer followed by a 24-token user
# message, as a chat client sends it. The figure is turn 2's time to its
# first streamed text (request sent to the first chunk carrying a choice).
# Turn 1 runs on both servers, so each one's second turn meets the state a
# real chat leaves (on --cache-mb 0 it leaves nothing behind).
# Prints every run, the medians and the median of the per-pair ratios.
# THREADS=N passes --threads N to both servers.
#
# The 0.6B shape in Q8_0 (a random model of Qwen3-0.6B's shape):
#   ./build/refusion init -o /tmp/sv-06b --preset 0.6b --dtype bf16
#   ./build/refusion convert -m /tmp/sv-06b -o /tmp/sv-06b-q8.gguf --dtype q8_0
#   THREADS=2 flock -x /tmp/rf-cpu.lock scripts/bench_prefix.sh /tmp/sv-06b-q8.gguf 1000 2
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/refusion}
M=${1:-models/refusion-demo}
HISTORY=${2:-1000}
REPS=${3:-2}
PROG=bench_prefix T=$(mktemp -d /tmp/rf_bench_prefix.XXXXXX) PIDS=()
. scripts/serve/start.sh
trap rf_bench_cleanup EXIT
rf_bench_header
echo "  model $M, $HISTORY history tokens, $REPS x ABBA"
rf_bench_serve reuse -c $((HISTORY + 256)) ${THREADS:+--threads $THREADS}
rf_bench_serve noreuse -c $((HISTORY + 256)) ${THREADS:+--threads $THREADS} --cache-mb 0

python3 - "$(cat "$T/reuse.url")" "$(cat "$T/noreuse.url")" "$HISTORY" "$REPS" <<'EOF'
import json, statistics, sys, time, urllib.request
urls = {"reuse": sys.argv[1], "noreuse": sys.argv[2]}
history, reps = int(sys.argv[3]), int(sys.argv[4])

def post(url, body):
    return urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                                         headers={"Content-Type": "application/json"}), timeout=600)

chat_no = 0
def chat(name):
    """turn 1, then turn 2 streamed: seconds to turn 2's first text chunk"""
    global chat_no
    chat_no += 1
    base = {"mode": "ar", "ignore_eos": True, "temperature": 0}
    prompt = [(chat_no * 7919 + k * 131) % 800 + 10 for k in range(history)]
    answer = json.load(post(urls[name], dict(base, prompt=prompt, max_tokens=8)))["choices"][0]["token_ids"]
    turn2 = prompt + answer + [(chat_no * 31 + k * 17) % 800 + 10 for k in range(24)]
    t0 = time.time()
    r = post(urls[name], dict(base, prompt=turn2, max_tokens=4, stream=True))
    first = None
    for line in r:
        line = line.decode().strip()
        if first is None and line.startswith("data: {") and json.loads(line[6:]).get("choices"):
            first = time.time() - t0
    if first is None: sys.exit(f"bench_prefix: {name}: no text streamed")
    return first

chat("reuse"); chat("noreuse")  # warm: weights paged in
res = {"reuse": [], "noreuse": []}
for r in range(reps):
    for name in ("reuse", "noreuse", "noreuse", "reuse"):
        s = chat(name)
        res[name].append(s)
        print(f"  run: {name:8s} second turn's first text after {s:7.3f} s", flush=True)
ratios = [b / a for a, b in zip(res["reuse"], res["noreuse"])]
print(f"  median time to first text: reuse {statistics.median(res['reuse']):.3f} s, "
      f"--cache-mb 0 {statistics.median(res['noreuse']):.3f} s")
print(f"  --cache-mb 0 / reuse: median {statistics.median(ratios):.2f}x over {len(ratios)} pairs "
      f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
EOF
