# serve_client.py - the HTTP client that the continuous-batching tests
# (tests/serve_batch*.sh) share to drive `refusion serve`: a failure
# record, the chat questions they ask, OpenAI-style requests and their token
# ids (plain or streamed), /metrics, and requests sent at once from threads.
# Python 3's standard library only; the tests run it with tests/helpers on
# PYTHONPATH (rf_py in common.sh).
import json, sys, threading, urllib.request

failed = []  # every bad() message; a test exits 1 when it is not empty


def bad(m):
    failed.append(m)
    print("FAIL: " + m, file=sys.stderr)


Q = ["Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?",
     "Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.",
     "Make a JSON record for a person named Ada, age 36, city London.",
     "A shop sells 4 boxes of 9 pens each and then 6 more pens. How many pens were sold?",
     "Make a JSON record for a book titled Dune, year 1965, author Frank Herbert."]


def chat(q, max_tokens, **kw):
    """A chat request body: one user message q; kw adds or overrides fields."""
    return dict({"messages": [{"role": "user", "content": q}], "max_tokens": max_tokens}, **kw)


def post(u, body, stream=None, timeout=120):
    """POST body to server u: /v1/completions when it has a prompt, else
    /v1/chat/completions. stream True/False sets its "stream" field; None
    sends the body as it is. Returns the open response."""
    b = body if stream is None else dict(body, stream=stream)
    path = "/v1/completions" if "prompt" in b else "/v1/chat/completions"
    return urllib.request.urlopen(urllib.request.Request(u + path, data=json.dumps(b).encode(),
                                                         headers={"Content-Type": "application/json"}), timeout=timeout)


def choice_ids(choices, every):
    """The first choice's token ids, or with every a list of every choice's in index order."""
    if every: return [c["token_ids"] for c in sorted(choices, key=lambda c: c["index"])]
    return choices[0]["token_ids"]


def answer(u, body, every=False, timeout=120, stream=False):
    """A request's (token ids as choice_ids gives them, the response's "refusion" statistics)."""
    o = json.load(post(u, body, stream, timeout))
    return choice_ids(o["choices"], every), o["refusion"]


def answer_stream(u, body, every=False, timeout=120, on_ids=None):
    """A streamed request's (token ids as answer gives them, the last
    "refusion" statistics the events carried or None). on_ids(ids) runs after
    every event with the first choice's ids so far."""
    toks, stats = {}, None
    for line in post(u, body, True, timeout):
        line = line.decode().strip()
        if not line.startswith("data: {"): continue
        o = json.loads(line[6:])
        for c in o["choices"] if every else o["choices"][:1]:
            toks.setdefault(c["index"] if every else 0, []).extend(c["token_ids"])
        if "refusion" in o: stats = o["refusion"]
        if on_ids: on_ids(toks.get(0, []))
    return ([toks[i] for i in sorted(toks)] if every else toks.get(0, [])), stats


def metric(u, name):
    """Server u's /metrics value refusion_<name>; -1 when it has none."""
    for line in urllib.request.urlopen(u + "/metrics").read().decode().splitlines():
        if line.startswith("refusion_" + name + " "): return float(line.split()[1])
    return -1


def first_difference(a, b):
    """The first index where the id lists a and b differ (the shorter one's length when one is the other's prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class Together:
    """Requests to server u sent at once, each from a thread of its own: by
    name, their token ids in got, their statistics in stats (when a stream
    carried some), and "name: error" in errors."""

    def __init__(self, u, every=False, timeout=120):
        self.u, self.every, self.timeout = u, every, timeout
        self.got, self.stats, self.errors, self.threads = {}, {}, [], []

    def start(self, k, body, stream=False, on_ids=None, on_end=None):
        """Send body from a new thread: stream True reads the events
        (answer_stream, with its on_ids), False or None as post takes them.
        on_end() runs when it is done, answered or not."""
        t = threading.Thread(target=self._run, args=(k, body, stream, on_ids, on_end))
        t.start()
        self.threads.append(t)

    def _run(self, k, body, stream, on_ids, on_end):
        try:
            if stream:
                ids, st = answer_stream(self.u, body, self.every, self.timeout, on_ids)
            else:
                ids, st = answer(self.u, body, self.every, self.timeout, stream)
            if st is not None: self.stats[k] = st
            self.got[k] = ids
        except Exception as e:
            self.errors.append(f"{k}: {e}")
        finally:
            if on_end: on_end()

    def join(self):
        for t in self.threads: t.join()
