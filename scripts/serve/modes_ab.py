#!/usr/bin/env python3
"""modes_ab.py URL CLIENTS REPS MODES - aggregate tokens/s of one running
`refusion serve` under CLIENTS concurrent chat clients, for each decoder
setting in MODES (comma-separated: "ar", or "fixed:S" / "adaptive:S" for the
rolling slot with slot size S and that draft policy), the settings
interleaved (M1..Mk then reversed, REPS times) so that a busy spell of the
machine hits them alike. Each client sends two chat questions (up to 32
answer tokens, greedy) one after the other; a run's figure is all answer
tokens over its wall time. Prints every run with its tokens per model call,
the median per setting, and whether every question got the same answer
under every setting (it must: the rolling slot's answer is AR's).

  ./build/refusion serve -m runs/grow/demo-0.6b-q8_0.gguf -q --threads 2 --parallel 8 --port 8080 &
  python3 scripts/serve/modes_ab.py http://127.0.0.1:8080 4 2 "ar,fixed:4,adaptive:4"
"""
import json, os, statistics, sys, threading, time, urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_questions import question
if len(sys.argv) != 5 or not sys.argv[2].isdigit() or not sys.argv[3].isdigit():
    sys.exit("usage: modes_ab.py URL CLIENTS REPS MODES (e.g. http://127.0.0.1:8080 4 2 ar,fixed:4,adaptive:4)")
url = sys.argv[1]; clients = int(sys.argv[2]); reps = int(sys.argv[3]); modes = sys.argv[4].split(',')
for m in modes:
    if m != "ar" and not (m.count(":") == 1 and m.split(":")[0] in ("fixed", "adaptive") and m.split(":")[1].isdigit()):
        sys.exit(f"modes_ab.py: mode '{m}' is not ar, fixed:S or adaptive:S")
def request(mode, client, i):
    q = question(client, i)
    body = {"messages": [{"role": "user", "content": q}], "max_tokens": 32, "temperature": 0}
    if mode == "ar": body["mode"] = "ar"
    else:
        pol, slot = mode.split(":")
        body.update(mode="refusion", rolling=True, slot_size=int(slot), draft_policy=pol)
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}), timeout=600)
    o = json.load(r)
    return o["usage"]["completion_tokens"], o["refusion"]["model_calls"], o["choices"][0]["message"]["content"]
answers = {}
def run(mode):
    done = [0] * clients; calls = [0] * clients
    def client(c):
        for i in range(2):
            n, k, txt = request(mode, c, i); done[c] += n; calls[c] += k
            answers.setdefault((c, i), set()).add(txt)
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.time()
    for t in ts: t.start()
    for t in ts: t.join()
    return sum(done) / (time.time() - t0), sum(done) / sum(calls)
request("ar", 99, 0)
for m in modes: request(m, 98, 0)
res = {}
order = modes + modes[::-1]
for r in range(reps):
    for m in order:
        tps, tpc = run(m); res.setdefault(m, []).append(tps)
        print(f"  {m:12s} {clients} clients {tps:7.1f} tok/s  {tpc:.2f} tok/call", flush=True)
for m in modes: print(f"  median {m:12s} {statistics.median(res[m]):7.1f} tok/s over {len(res[m])}")
print("  answers identical across modes:", all(len(v) == 1 for v in answers.values()))
