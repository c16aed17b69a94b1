#!/usr/bin/env bash
# serve_batch_rolling.sh - continuous batching of the rolling slot: each
# rolling-slot generation's calls (the last committed token, its drafts and
# masks) are rows of the server's shared model calls beside other
# generations' rows, and every answer is still exactly the one the same
# request gets alone.
#  - eleven requests at once on the demo model (its default decoder is the
#    rolling slot; the servers' --draft-policy fixed keeps the call counts
#    exact, where the demo's adaptive width follows timing): greedy and sampled rolling ones (temperature + seed,
#    top-k, top-p + min-p, slots of 2 to 8, thresholds 0 to 0.9, the
#    adaptive width), a streamed one, one cut by max_tokens and one by a stop
#    sequence, a 600-token prompt fed in chunks, beside AR requests (greedy,
#    sampled); more requests than rows, so some join as others leave;
#  - the solo answers: each request alone on the same server, and on a
#    server without continuous batching: the same token ids, and for the
#    rolling requests the same number of model calls (serve_batch_solo.sh
#    holds these to `refusion generate`);
#  - the rows really shared calls (/metrics: rolling-slot rows in batched
#    calls, calls where a rolling row sat beside other rows, a call with 4 or
#    more rows) and the drafts passed (more than 1.5 tokens per call);
#  - prompt-prefix reuse: a chat's next turn starts from the cache the last
#    rolling-slot turn left (its prompt and answer but the last token,
#    /metrics) and its answer is still the one without batching.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_batch_rolling
M=$SRC/models/refusion-demo
rf_serve_start "$T/solo.log" -m "$M" --parallel 2 --threads 1 --no-cont-batching --draft-policy fixed
URL2=$URL SPID2=$SPID
trap 'kill -KILL "$SPID2" 2>/dev/null; rf_test_cleanup' EXIT
rf_serve_start "$T/cache.log" -m "$M" --parallel 6 --threads 1 --draft-policy fixed
URL3=$URL SPID3=$SPID
trap 'kill -KILL "$SPID2" "$SPID3" 2>/dev/null; rf_test_cleanup' EXIT
rf_serve_start "$T/server.log" -m "$M" --parallel 6 --threads 1 --cache-mb 0 --draft-policy fixed
TURN1=$("$BIN" tokenize -m "$M" --chat --json --user "Make a JSON record for a person named Ada, age 36, city London.")

rf_py - "$URL" "$URL2" "$URL3" "$TURN1" <<'EOF'
import functools, json, sys
from serve_client import Q, Together, answer, bad, chat, failed, first_difference, metric
url, url_solo, url_cache = sys.argv[1:4]
turn1_ids = json.loads(sys.argv[4])

chat = functools.partial(chat, max_tokens=64)
reqs = {
    "greedy":  chat(Q[0]),
    "t07":     chat(Q[1], temperature=0.7, seed=5, slot_size=8, slot_threshold=0.3),
    "topk":    chat(Q[2], temperature=1.1, top_k=12, seed=9, slot_size=3),
    "topp":    chat(Q[3], temperature=0.8, top_p=0.9, min_p=0.05, seed=1, slot_size=6, slot_threshold=0.0),
    "slot2":   chat(Q[4], slot_size=2, slot_threshold=0.9),
    "adapt":   chat(Q[0], draft_policy="adaptive", temperature=0.6, seed=3),
    "cut":     chat(Q[1], max_tokens=9, temperature=0.9, seed=8),
    "stop":    chat(Q[2], stop=["36"]),
    "ar":      chat(Q[3], mode="ar"),
    "ar_t":    chat(Q[4], mode="ar", temperature=0.9, seed=4),
    # a 600-token prompt: fed in chunks within the calls' prompt budget
    "long":    {"prompt": (turn1_ids * 15)[:600], "max_tokens": 24, "temperature": 0.5, "seed": 7},
}
calls_exact = ("greedy", "t07", "topk", "topp", "slot2", "long")  # no adaptive width, no cut

# alone: on this server (a batch of one row) and on the one without batching
solo, solo_stats = {}, {}
for k, r in reqs.items():
    solo[k], solo_stats[k] = answer(url_solo, r)
    alone, st = answer(url, r)
    if alone != solo[k]: bad(f"{k}: alone on the batching server, not the answer without batching")
    if k in calls_exact and st["model_calls"] != solo_stats[k]["model_calls"]:
        bad(f"{k}: alone {st['model_calls']} model calls batched, {solo_stats[k]['model_calls']} without batching")
    if st["mode"] != ("ar" if k.startswith("ar") else "refusion"): bad(f"{k}: mode {st['mode']}")
if metric(url, "batch_rolling_rows_total") <= 0: bad("no rolling-slot row in the batched calls")
mixed0 = metric(url, "batch_mixed_calls_total")
if mixed0 != 0: bad(f"{mixed0} mixed calls while each request ran alone")

# together: all at once (10 requests for 6 rows), "greedy" streamed
tg = Together(url)
for k, r in reqs.items(): tg.start(k, r, stream=k == "greedy")
tg.join()
got, stats = tg.got, tg.stats
for e in tg.errors: bad(e)
for k in reqs:
    g, s = got.get(k) or [], solo[k]
    if g != s:
        bad(f"{k}: together {len(g)} ids, alone {len(s)}, first difference at {first_difference(g, s)}")
    elif k in calls_exact and stats.get(k, {}).get("model_calls") != solo_stats[k]["model_calls"]:
        bad(f"{k}: together {stats.get(k, {}).get('model_calls')} model calls, alone {solo_stats[k]['model_calls']}")
asked = [k for k in calls_exact if k != "long"]  # the chat questions, where drafts pass
tok = sum(len(got.get(k) or []) for k in asked)
calls = sum(stats.get(k, {}).get("model_calls", 0) for k in asked)
if not calls or tok / calls <= 1.5: bad(f"rolling requests: {tok} tokens in {calls} calls: the drafts hardly passed")
mixed = metric(url, "batch_mixed_calls_total")
if not (mixed >= 10 and metric(url, "batch_rows_peak") >= 4 and metric(url, "batch_rows_per_call") > 1):
    bad(f"the rolling rows did not share calls: {mixed} mixed calls, peak {metric(url, 'batch_rows_peak')}, "
        f"{metric(url, 'batch_rows_per_call')} rows per call")
if metric(url_solo, "batch_rows_peak") != 1: bad("without batching, requests sent one by one shared a call")

# prompt-prefix reuse: the next turn (the last prompt, its answer, a new
# question) starts from the last rolling turn's cache, greedy and sampled
turn1 = {"prompt": turn1_ids, "max_tokens": 48}
a1, st1 = answer(url_cache, turn1)
if st1["mode"] != "refusion" or st1["model_calls"] >= len(a1) - 4:
    bad(f"turn 1: {st1['mode']}, {st1['model_calls']} calls for {len(a1)} tokens: the drafts hardly passed")
if metric(url_cache, "prefix_cache_tokens_total") != 0: bad("the first turn reused a prefix")
more = turn1_ids[:12]
for i, extra in enumerate(({}, {"temperature": 0.8, "seed": 6})):
    turn2 = dict({"prompt": turn1_ids + a1 + more, "max_tokens": 24, "ignore_eos": True}, **extra)
    before = metric(url_cache, "prefix_cache_tokens_total")
    a2, st2 = answer(url_cache, turn2)
    reused = metric(url_cache, "prefix_cache_tokens_total") - before
    want = len(turn1_ids) + len(a1) - 1 if i == 0 else len(turn1_ids) + len(a1) + len(more) - 1
    if reused != want: bad(f"turn 2 ({i}) reused {reused} cached tokens, want {want}")
    s2, sst2 = answer(url_solo, turn2)
    if a2 != s2 or st2["model_calls"] != sst2["model_calls"]:
        bad(f"turn 2 ({i}): with a reused prefix {len(a2)} ids / {st2['model_calls']} calls, without batching "
            f"{len(s2)} / {sst2['model_calls']}")
print(f"serve_batch_rolling: {len(reqs)} answers compared; {metric(url, 'batch_rolling_rows_total'):.0f} rolling rows, "
      f"{mixed:.0f} mixed calls, {metric(url, 'batch_rows_per_call'):.2f} rows per call, "
      f"peak {metric(url, 'batch_rows_peak'):.0f}; rolling {tok / max(calls, 1):.2f} tokens per call; {len(failed)} failures")
sys.exit(1 if failed else 0)
EOF
rf_serve_finish $? "$SPID" "$T/server.log" "$SPID2" "$T/solo.log" "$SPID3" "$T/cache.log"
