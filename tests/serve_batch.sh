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

rf_py - "$URL" "$BIN" "$M" "$URL2" <<'EOF'
import json, random, subprocess, sys, threading
from serve_client import Together, answer, bad, failed, first_difference, metric
url, bin_, model, url2 = sys.argv[1:5]

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

# alone, one after the other
solo = {k: answer(url, r)[0] for k, r in reqs.items()}
solo["long"] = answer(url, long_req)[0]

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
tg = Together(url)
started = threading.Event()
tg.start("greedy", reqs["greedy"], stream=True, on_ids=lambda t: len(t) >= 5 and started.set(), on_end=started.set)
for k, r in reqs.items():
    if k != "greedy": tg.start(k, r)
started.wait(60)
tg.start("long", long_req)
tg.join()
got = tg.got
for e in tg.errors: bad(e)
for k in solo:
    if got.get(k) != solo[k]:
        g = got.get(k) or []
        bad(f"{k}: together {len(g)} ids, alone {len(solo[k])}, first difference at {first_difference(g, solo[k])}")

# prompt-prefix reuse: none on the first server (--cache-mb 0); on the
# second, a chat's next turn (the last prompt, its answer, new tokens) starts
# from the last turn's cache and still gets the answer `refusion generate`
# computes from scratch
if metric(url, "prefix_cache_tokens_total") != 0: bad("--cache-mb 0, yet a prefix was reused")
turn1 = {"prompt": ids(40), "max_tokens": 24, "mode": "ar", "ignore_eos": True}
a1 = answer(url2, turn1)[0]
turn2 = {"prompt": turn1["prompt"] + a1 + ids(10), "max_tokens": 24, "mode": "ar", "ignore_eos": True,
         "temperature": 0.8, "seed": 6}
a2 = answer(url2, turn2)[0]
reused = metric(url2, "prefix_cache_tokens_total")
if reused != 40 + 23: bad(f"the next turn reused {reused} cached tokens, want 63 (the last prompt and answer)")
if a2 != cli(turn2): bad("the next turn's answer with a reused prefix is not `refusion generate`'s")
if not (metric(url, "batch_rows_peak") >= 3 and metric(url, "batch_rows_per_call") > 1):
    bad(f"the rows did not share calls: peak {metric(url, 'batch_rows_peak')}, per call {metric(url, 'batch_rows_per_call')}")
print(f"serve_batch: batch occupancy {metric(url, 'batch_rows_per_call'):.2f} rows per call, "
      f"peak {metric(url, 'batch_rows_peak'):.0f}; {len(solo)} answers compared, {len(failed)} failures")
sys.exit(1 if failed else 0)
EOF
rf_serve_finish $? "$SPID" "$T/server.log" "$SPID2" "$T/server2.log"
