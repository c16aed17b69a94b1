#!/usr/bin/env bash
# serve_batch_all.sh - continuous batching of every decoder: the generations
# that run in the worker threads (ReFusion plan-and-infill, with and without
# AR verification, MDM, n = 2 choices) make their model calls as part of the
# scheduler's batched calls, beside the AR and rolling-slot rows, and every
# answer is still exactly the one the request gets alone.
#  - the demo model with f32 weights (its kernels give a token the same
#    numbers at every call width on every tier; bf16's do not everywhere,
#    see tests/model_forward_calls.c);
#  - each request alone on a server without continuous batching (the
#    library's rf_generate in a worker, its own calls) and alone on the
#    batching server: the same token ids and model calls;
#  - all of them at once on the batching server (greedy and sampled, a
#    streamed one): the same token ids and model calls as alone;
#  - /metrics: the workers' calls joined batched calls (their rows counted:
#    more rows than calls, plan-and-infill's forked rows; calls where one
#    sat beside another generation's), none without batching.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_batch_all
"$BIN" convert -m "$SRC/models/refusion-demo" -o "$T/demo32" --dtype f32 >/dev/null 2>&1 ||
  { echo "FAIL: convert the demo model to f32" >&2; exit 1; }
M=$T/demo32
rf_serve_start "$T/solo.log" -m "$M" --parallel 2 --threads 1 --no-cont-batching
URL2=$URL SPID2=$SPID
trap 'kill -KILL "$SPID2" 2>/dev/null; rf_test_cleanup' EXIT
rf_serve_start "$T/server.log" -m "$M" --parallel 8 --threads 1

python3 - "$URL" "$URL2" <<'EOF'
import json, sys, threading, urllib.request
url, url_solo = sys.argv[1:3]
fails = 0
def bad(m):
    global fails
    fails += 1
    print("FAIL: " + m, file=sys.stderr)

Q = ["Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?",
     "Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.",
     "Make a JSON record for a person named Ada, age 36, city London.",
     "A shop sells 4 boxes of 9 pens each and then 6 more pens. How many pens were sold?",
     "Make a JSON record for a book titled Dune, year 1965, author Frank Herbert."]
def chat(q, **kw): return dict({"messages": [{"role": "user", "content": q}], "max_tokens": 48}, **kw)
reqs = {
    # plan-and-infill (the worker threads): greedy, sampled, AR verification
    "pi":      chat(Q[0], rolling=False),
    "pi_t":    chat(Q[1], rolling=False, temperature=0.7, seed=5),
    # with fewer blocks than slots, several slots are infilled at once: calls
    # of R > 1 forked rows
    "pi_arv":  chat(Q[2], rolling=False, ar_verify="both", blocks=3),
    "pi_2":    chat(Q[3], rolling=False, blocks=2, slot_threshold=0.3, temperature=0.9, top_k=20, seed=2),
    # MDM (bidirectional calls) and n = 2 choices (each its own generation)
    "mdm":     chat(Q[4], mode="mdm", max_tokens=32),
    "mdm_t":   chat(Q[0], mode="mdm", max_tokens=24, temperature=0.8, seed=4),
    "n2":      chat(Q[1], mode="ar", n=2, temperature=0.9, seed=7, max_tokens=24),
    "n2_pi":   chat(Q[2], rolling=False, n=2, temperature=0.6, seed=1, max_tokens=32),
    # the scheduler's own rows: AR and the rolling slot
    "ar":      chat(Q[3], mode="ar"),
    "roll":    chat(Q[4], temperature=0.5, seed=9),
}

def post(u, body, stream=False):
    b = dict(body, stream=stream)
    return urllib.request.urlopen(urllib.request.Request(u + "/v1/chat/completions", data=json.dumps(b).encode(),
                                                         headers={"Content-Type": "application/json"}), timeout=300)
def answer(u, body):
    o = json.load(post(u, body))
    return [c["token_ids"] for c in sorted(o["choices"], key=lambda c: c["index"])], o["refusion"]

def metric(n, u=url):
    for line in urllib.request.urlopen(u + "/metrics").read().decode().splitlines():
        if line.startswith("refusion_" + n + " "): return float(line.split()[1])
    return -1

# alone: without batching (the reference), and on the batching server
solo, solo_stats = {}, {}
for k, r in reqs.items():
    solo[k], solo_stats[k] = answer(url_solo, r)
    alone, st = answer(url, r)
    if alone != solo[k]: bad(f"{k}: alone on the batching server, not the answer without batching")
    if st["model_calls"] != solo_stats[k]["model_calls"]:
        bad(f"{k}: alone {st['model_calls']} model calls batched, {solo_stats[k]['model_calls']} without batching")
    if any(len(c) == 0 for c in solo[k]): bad(f"{k}: an empty answer")
if metric("batch_worker_calls_total") <= 0: bad("no worker generation's call joined a batched call")
if metric("batch_worker_mixed_calls_total") != 0: bad("a worker's call shared a call while each request ran alone")

# together: all at once (some streamed)
got, stats, errors = {}, {}, []
def run(k, body):
    try: got[k], stats[k] = answer(url, body)
    except Exception as e: errors.append(f"{k}: {e}")
def run_stream(k, body):
    try:
        toks = {}
        for line in post(url, body, stream=True):
            line = line.decode().strip()
            if not line.startswith("data: {"): continue
            o = json.loads(line[6:])
            for c in o["choices"]: toks.setdefault(c["index"], []).extend(c.get("token_ids", []))
            if "refusion" in o: stats[k] = o["refusion"]
        got[k] = [toks[i] for i in sorted(toks)]
    except Exception as e: errors.append(f"{k}: {e}")
streamed = ("pi", "mdm")
ts = [threading.Thread(target=run_stream if k in streamed else run, args=(k, r)) for k, r in reqs.items()]
for t in ts: t.start()
for t in ts: t.join()
for e in errors: bad(e)
for k in reqs:
    g, s = got.get(k) or [], solo[k]
    if g != s:
        bad(f"{k}: together {[len(c) for c in g]} ids, alone {[len(c) for c in s]}")
    elif stats.get(k, {}).get("model_calls") != solo_stats[k]["model_calls"]:
        bad(f"{k}: together {stats.get(k, {}).get('model_calls')} model calls, alone {solo_stats[k]['model_calls']}")
wc, wr, wm = metric("batch_worker_calls_total"), metric("batch_worker_rows_total"), metric("batch_worker_mixed_calls_total")
if not (wm >= 10 and wr > wc and metric("batch_rows_peak") >= 4):
    bad(f"the workers' calls did not share batched calls: {wc:.0f} calls, {wr:.0f} rows, {wm:.0f} mixed calls, "
        f"peak {metric('batch_rows_peak'):.0f} rows")
if metric("batch_calls_total", url_solo) != 0 or metric("batch_worker_calls_total", url_solo) != 0:
    bad("--no-cont-batching, yet batched calls were made")
print(f"serve_batch_all: {len(reqs)} requests compared; workers' calls {wc:.0f} ({wr:.0f} rows), {wm:.0f} of them "
      f"beside other generations; {metric('batch_rows_per_call'):.2f} rows per call, peak "
      f"{metric('batch_rows_peak'):.0f}; {fails} failures")
sys.exit(1 if fails else 0)
EOF
rc=$?

# shutdown while the workers' calls wait for the scheduler: SIGTERM with
# plan-and-infill, MDM and n = 2 generations running; they finish (their
# answers the ones without batching), the server stops (exit 0, within
# rf_serve_stop's 30 s)
python3 - "$URL" "$URL2" "$SPID" <<'EOF' || rc=1
import json, os, signal, sys, threading, time, urllib.request
url, url_solo, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
# (small enough to finish well within rf_serve_stop's 30 s in the sanitizer build)
def chat(q, **kw): return dict({"messages": [{"role": "user", "content": q}], "max_tokens": 48}, **kw)
reqs = {"pi": chat("Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.",
                   rolling=False, blocks=4, ignore_eos=True),
        "mdm": chat("Make a JSON record for a person named Ada, age 36, city London.", mode="mdm", max_tokens=24),
        "n2": chat("Tom has 12 apples. How many apples does he have?", mode="ar", n=2, temperature=0.8, seed=3,
                   max_tokens=32, ignore_eos=True)}
def answer(u, body):
    r = urllib.request.Request(u + "/v1/chat/completions", data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    o = json.load(urllib.request.urlopen(r, timeout=120))
    return [c["token_ids"] for c in sorted(o["choices"], key=lambda c: c["index"])]
solo = {k: answer(url_solo, r) for k, r in reqs.items()}
got, errors = {}, []
def run(k):
    try: got[k] = answer(url, reqs[k])
    except Exception as e: errors.append(f"{k}: {e}")
ts = [threading.Thread(target=run, args=(k,)) for k in reqs]
for t in ts: t.start()
def running():
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("refusion_requests_running "): return float(line.split()[1])
    return 0
# (all three running before the signal: one still queued would get 503)
t0 = time.time()
while running() < len(reqs) and time.time() - t0 < 30 and any(t.is_alive() for t in ts): time.sleep(0.005)
n_running = running()
os.kill(pid, signal.SIGTERM)
for t in ts: t.join(60)
fails = [f"{k}: still waiting 60 s after SIGTERM" for t, k in zip(ts, reqs) if t.is_alive()] + errors
fails += [f"{k}: after SIGTERM {[len(c) for c in got.get(k, [])]} ids, alone {[len(c) for c in solo[k]]}"
          for k in reqs if k in got and got[k] != solo[k]]
for f in fails: print("FAIL: shutdown: " + f, file=sys.stderr)
print(f"serve_batch_all: shutdown with {n_running:.0f} worker generations running: {len(fails)} failures")
sys.exit(1 if fails else 0)
EOF
# (the signal was sent above: a second one would abort) it ends by itself, status 0
for _ in $(seq 1 300); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
  echo "FAIL: the server did not stop within 30 s of SIGTERM" >&2
  kill -KILL "$SPID" 2>/dev/null
  rc=1
fi
wait "$SPID" 2>/dev/null
st=$?
[ $st -eq 0 ] || { echo "FAIL: the server exited $st after SIGTERM" >&2; rc=1; }
rf_serve_stop "$SPID2" "$T/solo.log" || rc=1
SPID=""
[ $rc -eq 0 ] || { echo "server log tail:" >&2; tail -5 "$T/server.log" >&2; }
exit $rc
