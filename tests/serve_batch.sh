#!/usr/bin/env bash
# serve_batch.sh - continuous batching: AR generations share the server's
# model calls (one row each, its own KV cache) and each still gets exactly
# the answer it gets alone.
#  - six AR requests (greedy, temperature + seed, top-k, top-p + min-p,
#    penalties-free sampling at several temperatures; more requests than
#    rows: the last ones join as others leave), a rolling-slot request
#    (batched too: tests/serve_batch_rolling.sh) and, joining while the others
#    decode, a 1,500-token prompt fed in chunks across several calls: every
#    answer's token ids equal the one the same request gets alone;
#  - the solo answers are `refusion generate`'s (the library's AR decoder,
#    no server) for the greedy, sampled and long-prompt cases;
#  - the rows really shared calls (/metrics: batch occupancy > 1 row per
#    call, a call with 3 or more rows);
#  - prompt-prefix reuse: a chat's next turn starts from the last turn's
#    cache (63 tokens reused, /metrics) and its answer is still `refusion
#    generate`'s.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_batch
M=$SRC/models/refusion-demo
# without the prefix cache (the same prompts run alone, then together: each
# must be computed, not copied), and a second server with it
rf_serve_start "$T/server2.log" -m "$M" --parallel 4 --threads 1
URL2=$URL SPID2=$SPID
trap 'kill -KILL "$SPID2" 2>/dev/null; rf_test_cleanup' EXIT
rf_serve_start "$T/server.log" -m "$M" --parallel 4 --threads 1 --cache-mb 0

python3 - "$URL" "$BIN" "$M" "$URL2" <<'EOF'
import json, random, subprocess, sys, threading, time, urllib.request
url, bin_, model, url2 = sys.argv[1:5]
fails = 0
def bad(m):
    global fails
    fails += 1
    print("FAIL: " + m, file=sys.stderr)

rng = random.Random(7)
def ids(n): return [rng.randrange(0, 840) for _ in range(n)]
reqs = {
    "greedy":  {"prompt": ids(12), "max_tokens": 40},
    "t08":     {"prompt": ids(5), "max_tokens": 40, "temperature": 0.8, "seed": 5},
    "topk":    {"prompt": ids(20), "max_tokens": 36, "temperature": 1.2, "top_k": 20, "seed": 9},
    "topp":    {"prompt": ids(3), "max_tokens": 40, "temperature": 0.7, "top_p": 0.9, "min_p": 0.05, "seed": 1},
    "t15":     {"prompt": ids(30), "max_tokens": 30, "temperature": 1.5, "seed": 2},
    "short":   {"prompt": ids(8), "max_tokens": 3, "temperature": 0.9, "seed": 4},
    "rolling": {"prompt": ids(9), "max_tokens": 40, "mode": "refusion", "rolling": True},
}
for k, r in reqs.items():
    r["ignore_eos"] = True
    r.setdefault("mode", "ar")
long_req = {"prompt": ids(1500), "max_tokens": 20, "mode": "ar", "ignore_eos": True, "temperature": 0.6, "seed": 3}

def post(body, stream=False):
    b = dict(body, stream=stream)
    return urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=json.dumps(b).encode(),
                                                         headers={"Content-Type": "application/json"}), timeout=120)
def answer(body):
    return json.load(post(body))["choices"][0]["token_ids"]

# alone, one after the other
solo = {k: answer(r) for k, r in reqs.items()}
solo["long"] = answer(long_req)

# the library's AR decoder through the command line: the same ids
def cli(body):
    a = [bin_, "generate", "-m", model, "--no-chat", "--mode", "ar", "--ignore-eos", "--json", "--threads", "1",
         "--ids", ",".join(map(str, body["prompt"])), "-n", str(body["max_tokens"]),
         "--temp", str(body.get("temperature", 0)), "--seed", str(body.get("seed", 0))]
    for k, f in (("top_k", "--top-k"), ("top_p", "--top-p"), ("min_p", "--min-p")):
        if k in body: a += [f, str(body[k])]
    return json.loads(subprocess.run(a, capture_output=True, text=True, check=True).stdout)["answer_ids"]
for k in ("greedy", "t08", "topp"):
    if cli(reqs[k]) != solo[k]: bad(f"{k}: the server's solo answer is not `refusion generate`'s")
if cli(long_req) != solo["long"]: bad("long: the server's solo answer is not `refusion generate`'s")

# together: all at once (7 requests for 4 rows: some wait for a row), the
# long prompt joining once the greedy stream has shown 5 tokens
got, errors = {}, []
def run(k, body):
    try: got[k] = answer(body)
    except Exception as e: errors.append(f"{k}: {e}")
started = threading.Event()
def run_stream(k, body):
    try:
        toks = []
        for line in post(body, stream=True):
            line = line.decode().strip()
            if not line.startswith("data: {"): continue
            o = json.loads(line[6:])
            if o["choices"]: toks += o["choices"][0]["token_ids"]
            if len(toks) >= 5: started.set()
        got[k] = toks
    except Exception as e: errors.append(f"{k}: {e}")
    started.set()
ts = [threading.Thread(target=run_stream, args=("greedy", reqs["greedy"]))]
ts += [threading.Thread(target=run, args=(k, r)) for k, r in reqs.items() if k != "greedy"]
for t in ts: t.start()
started.wait(60)
tl = threading.Thread(target=run, args=("long", long_req)); tl.start(); ts.append(tl)
for t in ts: t.join()
for e in errors: bad(e)
for k in solo:
    if got.get(k) != solo[k]:
        g = got.get(k) or []
        i = next((i for i, (a, b) in enumerate(zip(g, solo[k])) if a != b), min(len(g), len(solo[k])))
        bad(f"{k}: together {len(g)} ids, alone {len(solo[k])}, first difference at {i}")

def metric(n, url=url):
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("refusion_" + n + " "): return float(line.split()[1])
    return -1

# prompt-prefix reuse: a chat's next turn (the last prompt, its answer, new
# tokens) starts from the last turn's cache and still gets the answer
# `refusion generate` computes from scratch
url = url2
if metric("prefix_cache_tokens_total") != 0: bad("--cache-mb 0, yet a prefix was reused")
turn1 = {"prompt": ids(40), "max_tokens": 24, "mode": "ar", "ignore_eos": True}
a1 = answer(turn1)
turn2 = {"prompt": turn1["prompt"] + a1 + ids(10), "max_tokens": 24, "mode": "ar", "ignore_eos": True,
         "temperature": 0.8, "seed": 6}
a2 = answer(turn2)
reused = metric("prefix_cache_tokens_total", url2)
if reused != 40 + 23: bad(f"the next turn reused {reused} cached tokens, want 63 (the last prompt and answer)")
if a2 != cli(turn2): bad("the next turn's answer with a reused prefix is not `refusion generate`'s")
if not (metric("batch_rows_peak") >= 3 and metric("batch_rows_per_call") > 1):
    bad(f"the rows did not share calls: peak {metric('batch_rows_peak')}, per call {metric('batch_rows_per_call')}")
print(f"serve_batch: batch occupancy {metric('batch_rows_per_call'):.2f} rows per call, peak {metric('batch_rows_peak'):.0f}; "
      f"{len(solo)} answers compared, {fails} failures")
sys.exit(1 if fails else 0)
EOF
rc=$?
rf_serve_stop "$SPID" "$T/server.log" || rc=1
rf_serve_stop "$SPID2" "$T/server2.log" || rc=1
SPID=""
[ $rc -eq 0 ] || { echo "server log tail:" >&2; tail -5 "$T/server.log" >&2; }
exit $rc
