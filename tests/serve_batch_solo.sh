#!/usr/bin/env bash
# serve_batch_solo.sh - every decoder through the server's scheduler gives
# what `refusion generate` (the library's rf_generate, no server) gives for
# the same request alone: the same token ids, the same model calls and the
# same text, streamed or not.
#  - the demo model with f32 weights (its kernels give a token the same
#    numbers at every call width on every tier, tests/model_forward_calls.c);
#  - the requests, all at once on one batching server: AR, the rolling slot
#    (fixed and adaptive width), plan-and-infill (plain, AR verification,
#    several slots infilled at once, lookahead with jacobi), MDM and n = 2 choices (choice i is the
#    generation with seed + i), greedy and sampled with fixed seeds; more
#    requests than rows, so some join as others leave; a 900-token prompt
#    joining once a streamed answer has shown tokens; and a streamed request
#    whose client goes away after a few tokens;
#  - each answer's ids, model calls (the adaptive width's calls follow a
#    timed cost table, so only its ids are compared) and text against
#    `refusion generate --json` on the same prompt ids; the streamed text
#    (the deltas joined) equals it too;
#  - the client that went away: its generation leaves (counted cancelled, the
#    server idle again long before its 2,000 tokens could have been decoded)
#    and the answers beside it are unchanged.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_batch_solo
rf_demo_f32
rf_serve_start "$T/server.log" -m "$M" --parallel 6 --threads 1
PROMPTS=$T/prompts.json
{
  echo "["
  i=0
  while IFS= read -r q; do
    [ $i -gt 0 ] && echo ","
    "$BIN" tokenize -m "$M" --chat --json --user "$q" || { echo "FAIL: tokenize" >&2; exit 1; }
    i=$((i + 1))
  done <<'EOF'
Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?
Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.
Make a JSON record for a person named Ada, age 36, city London.
A shop sells 4 boxes of 9 pens each and then 6 more pens. How many pens were sold?
Make a JSON record for a book titled Dune, year 1965, author Frank Herbert.
EOF
  echo "]"
} >"$PROMPTS" || exit 1

rf_py - "$URL" "$BIN" "$M" "$PROMPTS" <<'EOF'
import json, subprocess, sys, threading, time
from serve_client import Together, bad, failed, first_difference, metric, post
url, bin_, model, prompts = sys.argv[1:5]
P = json.load(open(prompts))

def req(q, max_tokens, **kw):
    return dict({"prompt": P[q], "max_tokens": max_tokens, "ignore_eos": True}, **kw)

# (lengths are whole slots and blocks: the answer is not cut after decoding)
reqs = {
    "ar":        req(0, 32, mode="ar"),
    "ar_t":      req(1, 32, mode="ar", temperature=0.9, top_k=20, seed=4),
    "roll":      req(2, 48, rolling=True),
    "roll_t":    req(3, 48, rolling=True, temperature=0.7, seed=5, slot_size=8, slot_threshold=0.3),
    "adapt":     req(4, 48, rolling=True, draft_policy="adaptive", temperature=0.6, seed=3),
    "pi":        req(0, 48, rolling=False),
    "pi_t":      req(1, 48, rolling=False, temperature=0.7, seed=5),
    "pi_arv":    req(2, 48, rolling=False, ar_verify="both", blocks=3),
    "pi_look":   req(3, 40, rolling=False, ar_verify="correct", lookahead=True, jacobi=True, slot_size=8),
    "mdm":       req(4, 32, mode="mdm"),
    "mdm_t":     req(0, 24, mode="mdm", temperature=0.8, seed=4),
    "n2":        req(1, 24, mode="ar", n=2, temperature=0.9, seed=7),
    "n2_pi":     req(2, 32, rolling=False, n=2, temperature=0.6, seed=1),
}
long_req = req(3, 16, mode="ar", temperature=0.5, seed=3)
long_req["prompt"] = (P[0] + P[1] + P[2] + P[3] + P[4]) * 10
long_req["prompt"] = long_req["prompt"][:900]
streamed = ("ar", "roll", "pi", "pi_look", "mdm", "n2")
calls_differ = ("adapt",)  # its widths follow the timed cost table: same ids, not the same calls

# `refusion generate --json` on the same ids: (every choice's (ids, text), model calls of all choices)
FLAGS = {"mode": "--mode", "temperature": "--temp", "top_k": "--top-k", "seed": "--seed",
         "slot_size": "--slot-size", "slot_threshold": "--slot-threshold", "draft_policy": "--draft-policy",
         "ar_verify": "--ar-verify", "blocks": "--blocks", "lookahead": "--lookahead", "jacobi": "--jacobi"}
def cli(body):
    out = []
    for i in range(body.get("n", 1)):
        a = [bin_, "generate", "-m", model, "--no-chat", "--ignore-eos", "--json", "--threads", "1",
             "--ids", ",".join(map(str, body["prompt"])), "-n", str(body["max_tokens"])]
        for k, f in FLAGS.items():
            if body.get(k) is True: a += [f]  # a switch
            elif k in body: a += [f, str(body[k] + i if k == "seed" else body[k])]
        # (a --mode flag sets the decoder without the model's "rolling": true)
        if "rolling" in body: a += ["--mode", "refusion"] + (["--rolling"] if body["rolling"] else [])
        o = json.loads(subprocess.run(a, capture_output=True, text=True, check=True).stdout)
        out.append((o["answer_ids"], o["text"], o["model_calls"]))
    return [(i, t) for i, t, _ in out], sum(c for _, _, c in out)

# a request to the server: as cli's (its "refusion" statistics count the
# calls of every choice)
def server(body, stream, on_ids=None):
    if not stream:
        o = json.load(post(url, body, False, 300))
        return [(c["token_ids"], c["text"]) for c in sorted(o["choices"], key=lambda c: c["index"])], \
            o["refusion"]["model_calls"]
    ids, text, stats = {}, {}, None
    for line in post(url, body, True, 300):
        line = line.decode().strip()
        if not line.startswith("data: {"): continue
        o = json.loads(line[6:])
        for c in o["choices"]:
            ids.setdefault(c["index"], []).extend(c["token_ids"])
            text[c["index"]] = text.get(c["index"], "") + c["text"]
        if "refusion" in o: stats = o["refusion"]
        if on_ids: on_ids(ids.get(0, []))
    return [(ids[i], text[i]) for i in sorted(ids)], (stats or {}).get("model_calls")

want = {k: cli(r) for k, r in reqs.items()}
want["long"] = cli(long_req)
for k, w in want.items():
    if any(len(c[0]) == 0 for c in w[0]): bad(f"{k}: `refusion generate` gave an empty answer")

# the cancelled one: a long streamed AR answer whose client leaves after 4 tokens
def cancelled_client():
    r = post(url, {"prompt": P[0], "max_tokens": 2000, "ignore_eos": True, "mode": "ar"}, True, 300)
    n = 0
    for line in r:
        if line.startswith(b"data: {"): n += 1
        if n >= 4: break
    r.close()
    cancel_done.set()
cancel_done = threading.Event()

got = {}
def run(k, body, stream, on_ids=None, on_end=None):
    try: got[k] = server(body, stream, on_ids)
    except Exception as e: bad(f"{k}: {e}")
    finally:
        if on_end: on_end()
started = threading.Event()
threads = [threading.Thread(target=cancelled_client)]
for k, r in reqs.items():
    kw = {"on_ids": lambda t: len(t) >= 5 and started.set(), "on_end": started.set} if k == "ar" else {}
    threads.append(threading.Thread(target=run, args=(k, r, k in streamed), kwargs=kw))
for t in threads: t.start()
started.wait(120)
threads.append(threading.Thread(target=run, args=("long", long_req, True)))
threads[-1].start()
for t in threads: t.join(600)

for k, (w, wc) in want.items():
    if k not in got: continue
    g, gc = got[k]
    how = "streamed" if k in streamed or k == "long" else "plain"
    if len(g) != len(w):
        bad(f"{k} ({how}): {len(g)} choices, `refusion generate` {len(w)}")
        continue
    for i, ((gi, gt), (wi, wt)) in enumerate(zip(g, w)):
        if gi != wi:
            bad(f"{k} choice {i} ({how}): {len(gi)} ids, `refusion generate` {len(wi)}, "
                f"first difference at {first_difference(gi, wi)}")
        elif gt != wt:
            bad(f"{k} choice {i} ({how}): text {gt!r}, `refusion generate` {wt!r}")
    if k not in calls_differ and gc != wc: bad(f"{k} ({how}): {gc} model calls, `refusion generate` {wc}")

# the client that left: its generation ended long before 2,000 tokens
if not cancel_done.is_set(): bad("the cancelled client never read its first tokens")
t0 = time.time()
while metric(url, "requests_running") > 0 and time.time() - t0 < 30: time.sleep(0.1)
if metric(url, "requests_running") != 0: bad("a generation still runs 30 s after every client left")
if metric(url, "requests_cancelled_total") < 1: bad("the client that left was not counted cancelled")
if not (metric(url, "batch_whole_mixed_calls_total") >= 5 and metric(url, "batch_mixed_calls_total") >= 5):
    bad("the generations did not share calls: "
        f"{metric(url, 'batch_whole_mixed_calls_total'):.0f} whole calls beside others, "
        f"{metric(url, 'batch_mixed_calls_total'):.0f} rolling rows beside others")
print(f"serve_batch_solo: {len(want)} requests ({sum(len(w[0]) for w in want.values())} choices) against "
      f"`refusion generate`; {metric(url, 'batch_rows_per_call'):.2f} rows per call, peak "
      f"{metric(url, 'batch_rows_peak'):.0f}; {len(failed)} failures")
sys.exit(1 if failed else 0)
EOF
rf_serve_finish $? "$SPID" "$T/server.log"
