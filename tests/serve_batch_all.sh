#!/usr/bin/env bash
# serve_batch_all.sh - continuous batching of every decoder: ReFusion
# plan-and-infill (with and without AR verification), MDM and n = 2 choices
# make their model calls as rows of the scheduler's batched calls, beside
# the AR and rolling-slot rows, and every answer is still exactly the one
# the request gets alone.
#  - the demo model with f32 weights (its kernels give a token the same
#    numbers at every call width on every tier; bf16's do not everywhere,
#    see tests/model_forward_calls.c);
#  - each request alone on a server without continuous batching and alone
#    on the batching server: the same token ids and model calls
#    (serve_batch_solo.sh holds these to `refusion generate`);
#  - all of them at once on the batching server (greedy and sampled, a
#    streamed one): the same token ids and model calls as alone;
#  - /metrics: the plan-and-infill and MDM calls joined batched calls (their
#    rows counted: more rows than calls, plan-and-infill's forked rows;
#    calls where one sat beside another generation's);
#  - without continuous batching requests sent while another generation
#    runs wait for its end (queued), then start together (two running at
#    once, never three) and get their solo answers.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_batch_all
rf_demo_f32
rf_serve_start "$T/solo.log" -m "$M" --parallel 2 --threads 1 --no-cont-batching --draft-policy fixed
URL2=$URL SPID2=$SPID
trap 'kill -KILL "$SPID2" 2>/dev/null; rf_test_cleanup' EXIT
rf_serve_start "$T/server.log" -m "$M" --parallel 8 --threads 1 --draft-policy fixed # exact call counts (the demo's adaptive width follows timing)

rf_py - "$URL" "$URL2" <<'EOF'
import functools, sys
import threading, time
from serve_client import Q, Together, answer, bad, chat, failed, metric
url, url_solo = sys.argv[1:3]

chat = functools.partial(chat, max_tokens=48)
reqs = {
    # plan-and-infill: greedy, sampled, AR verification
    "pi":      chat(Q[0], rolling=False),
    "pi_t":    chat(Q[1], rolling=False, temperature=0.7, seed=5),
    # with fewer blocks than slots, several slots are infilled at once: calls
    # of R > 1 forked rows
    "pi_arv":  chat(Q[2], rolling=False, ar_verify="both", blocks=3),
    "pi_2":    chat(Q[3], rolling=False, blocks=2, slot_threshold=0.3, temperature=0.9, seed=2),
    # MDM (bidirectional calls) and n = 2 choices (each its own generation)
    "mdm":     chat(Q[4], mode="mdm", max_tokens=32),
    "mdm_t":   chat(Q[0], mode="mdm", max_tokens=24, temperature=0.8, seed=4),
    "n2":      chat(Q[1], mode="ar", n=2, temperature=0.9, seed=7, max_tokens=24),
    "n2_pi":   chat(Q[2], rolling=False, n=2, temperature=0.6, seed=1, max_tokens=32),
    # the scheduler's own rows: AR and the rolling slot
    "ar":      chat(Q[3], mode="ar"),
    "roll":    chat(Q[4], temperature=0.5, seed=9),
}
# every choice's ids (the n = 2 requests have two), up to 300 s a request
answer = functools.partial(answer, every=True, timeout=300)

# alone: without batching (the reference), and on the batching server
solo, solo_stats = {}, {}
for k, r in reqs.items():
    solo[k], solo_stats[k] = answer(url_solo, r)
    alone, st = answer(url, r)
    if alone != solo[k]: bad(f"{k}: alone on the batching server, not the answer without batching")
    if st["model_calls"] != solo_stats[k]["model_calls"]:
        bad(f"{k}: alone {st['model_calls']} model calls batched, {solo_stats[k]['model_calls']} without batching")
    if any(len(c) == 0 for c in solo[k]): bad(f"{k}: an empty answer")
if metric(url, "batch_whole_calls_total") <= 0: bad("no plan-and-infill or MDM call joined a batched call")
if metric(url, "batch_whole_mixed_calls_total") != 0: bad("a whole call shared a call while each request ran alone")

# together: all at once (some streamed)
tg = Together(url, every=True, timeout=300)
streamed = ("pi", "mdm")
for k, r in reqs.items(): tg.start(k, r, stream=k in streamed)
tg.join()
got, stats = tg.got, tg.stats
for e in tg.errors: bad(e)
for k in reqs:
    g, s = got.get(k) or [], solo[k]
    if g != s:
        bad(f"{k}: together {[len(c) for c in g]} ids, alone {[len(c) for c in s]}")
    elif stats.get(k, {}).get("model_calls") != solo_stats[k]["model_calls"]:
        bad(f"{k}: together {stats.get(k, {}).get('model_calls')} model calls, alone {solo_stats[k]['model_calls']}")
wc, wr = metric(url, "batch_whole_calls_total"), metric(url, "batch_whole_rows_total")
wm = metric(url, "batch_whole_mixed_calls_total")
if not (wm >= 10 and wr > wc and metric(url, "batch_rows_peak") >= 4):
    bad(f"the whole calls did not share batched calls: {wc:.0f} calls, {wr:.0f} rows, {wm:.0f} mixed calls, "
        f"peak {metric(url, 'batch_rows_peak'):.0f} rows")

# without continuous batching: "mdm" and "ar", sent while a long AR answer
# streams, wait in the queue until it ends, then start together
if metric(url_solo, "requests_running_peak") != 1: bad("without batching, two requests alone ran at once")
tg = Together(url_solo, every=True, timeout=300)
streaming = threading.Event()
tg.start("long", {"prompt": "One two three", "max_tokens": 400, "ignore_eos": True, "mode": "ar"}, stream=True,
         on_ids=lambda ids: streaming.set() if ids else None)
if not streaming.wait(120): bad("the long answer never streamed")
tg.start("mdm", reqs["mdm"])
tg.start("ar", reqs["ar"])
queued, t0 = False, time.time()
while not queued and time.time() - t0 < 60 and metric(url_solo, "requests_running") > 0:
    queued = metric(url_solo, "queue_depth") == 2 and metric(url_solo, "requests_running") == 1
tg.join()
for e in tg.errors: bad(e)
if not queued: bad("without batching, the requests sent while another ran were never seen both waiting")
if metric(url_solo, "requests_running_peak") != 2:
    bad(f"without batching, {metric(url_solo, 'requests_running_peak'):.0f} generations ran at once at most, not 2 "
        "(the two that waited together)")
for k in ("mdm", "ar"):
    if tg.got.get(k) != solo[k]: bad(f"{k}: after waiting, not its solo answer")
if len((tg.got.get("long") or [[]])[0]) != 400: bad("the long answer is not 400 tokens")
print(f"serve_batch_all: {len(reqs)} requests compared; whole calls {wc:.0f} ({wr:.0f} rows), {wm:.0f} of them "
      f"beside other generations; {metric(url, 'batch_rows_per_call'):.2f} rows per call, peak "
      f"{metric(url, 'batch_rows_peak'):.0f}; {len(failed)} failures")
sys.exit(1 if failed else 0)
EOF
rc=$?

# shutdown while the scheduler runs them: SIGTERM with
# plan-and-infill, MDM and n = 2 generations running; they finish (their
# answers the ones without batching), the server stops (exit 0, within
# rf_serve_stop's 30 s)
rf_py - "$URL" "$URL2" "$SPID" <<'EOF' || rc=1
import functools, os, signal, sys, time
import threading, time
from serve_client import Q, Together, answer, bad, chat, failed, metric
url, url_solo, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
# (small enough to finish well within rf_serve_stop's 30 s in the sanitizer build)
chat = functools.partial(chat, max_tokens=48)
reqs = {"pi": chat(Q[1], rolling=False, blocks=4, ignore_eos=True),
        "mdm": chat(Q[2], mode="mdm", max_tokens=24),
        "n2": chat("Tom has 12 apples. How many apples does he have?", mode="ar", n=2, temperature=0.8, seed=3,
                   max_tokens=32, ignore_eos=True)}
# (the bodies as they are, without a "stream" field; every choice's ids)
solo = {k: answer(url_solo, r, every=True, stream=None)[0] for k, r in reqs.items()}
tg = Together(url, every=True)
for k, r in reqs.items(): tg.start(k, r, stream=None)
# (all three running before the signal: one still queued would get 503)
t0 = time.time()
while (metric(url, "requests_running") < len(reqs) and time.time() - t0 < 30 and
       any(t.is_alive() for t in tg.threads)): time.sleep(0.005)
n_running = metric(url, "requests_running")
os.kill(pid, signal.SIGTERM)
for t in tg.threads: t.join(60)
for t, k in zip(tg.threads, reqs):
    if t.is_alive(): bad(f"shutdown: {k}: still waiting 60 s after SIGTERM")
for e in tg.errors: bad("shutdown: " + e)
for k in reqs:
    if k in tg.got and tg.got[k] != solo[k]:
        bad(f"shutdown: {k}: after SIGTERM {[len(c) for c in tg.got[k]]} ids, alone {[len(c) for c in solo[k]]}")
print(f"serve_batch_all: shutdown with {n_running:.0f} generations running: {len(failed)} failures")
sys.exit(1 if failed else 0)
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
rf_serve_finish "$rc" "$SPID2" "$T/solo.log"
