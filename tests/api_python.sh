#!/usr/bin/env bash
# api_python.sh - the ctypes binding (the refusion package, python/refusion) over this build's
# librefusion.so: tokenize gives the CLI's prompt ids; generate gives the
# same answer ids as `refusion generate --json` for ReFusion (also AR-verified
# and sampled), AR (greedy and sampled) and MDM; streamed tokens add up to
# the answer; a session reused across calls of other sizes repeats its
# answers; tokenize_chat (a system message: the CLI's --system prompt),
# token_id, tokenizer_eos_id; cancel and bad paths raise RefusionError. The
# package: dict messages everywhere (rendered, not an empty turn);
# create_chat_completion (OpenAI's dicts, the CLI's text; streamed chunks
# adding up to it; stop strings); a Ctrl-C (SIGINT to the process) during a
# generation with a callback, and during a stream, stops the generation
# through the cancel flag and raises KeyboardInterrupt, and the session
# still answers right; method="xx" and unknown settings raise RefusionError
# naming the allowed values; every public name has a docstring;
# `pip install ./python` builds offline (--no-index) and the installed copy
# works, its version CMake's and rf_version()'s. Exit 77 (skipped) when
# python3 is missing or the build is a sanitizer build (its .so cannot be
# loaded into an uninstrumented python3).
set -u
BIN=${REFUSION_BIN:?REFUSION_BIN must point at the refusion binary}
SRC=${REFUSION_SRC:?REFUSION_SRC must point at the source tree}
BUILD=$(dirname "$BIN")
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$BUILD/CMakeCache.txt" 2>/dev/null && { echo "sanitizer build: skipped"; exit 77; }
T=$(mktemp -d /tmp/rf_api_python.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$SRC/tests/helpers/small_model.sh"
rf_small_model "$T" || { echo "FAIL: small model"; exit 1; }

Q="What is 12 plus 5?"
cli() { # name, generate options...
  local name=$1
  shift
  OMP_NUM_THREADS=1 "$BIN" generate -m "$T/m" -p "$Q" --threads 1 --json "$@" >"$T/$name.json" 2>"$T/$name.err" ||
    echo "FAIL: refusion generate $*: $(cat "$T/$name.err")" >&2
}
cli rf -n 12 --blocks 1
cli rf_both -n 12 --blocks 1 --ar-verify both
cli rf_temp -n 12 --blocks 2 --slot-size 2 --temp 0.8 -s 7
cli ar --decoder ar -n 10
cli ar_temp --decoder ar -n 10 --temp 0.9 --top-k 20 --top-p 0.9 -s 3
cli mdm --decoder mdm -n 8 --blocks 2
cli rf_sys -n 4 --blocks 1 --system "Be brief."
cli rf_roll -n 12 --rolling --slot-size 3 --temp 0.7 -s 5

OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python" python3 - "$T" "$Q" <<'PY'
import ctypes, json, sys
import refusion

T, Q = sys.argv[1], sys.argv[2]
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what, file=sys.stderr)

def cli(name):
    return json.load(open("%s/%s.json" % (T, name)))

m = refusion.Model(T + "/m")
ids = m.tokenize(Q, chat=True)
check(ids == cli("rf")["prompt_ids"], "tokenize: %s vs CLI %s" % (ids, cli("rf")["prompt_ids"]))
check(m.tokenize_chat([("user", Q)]) == ids, "tokenize_chat of one user message")
check(m.tokenize_chat([("system", "Be brief."), ("user", Q)]) == cli("rf_sys")["prompt_ids"], "tokenize_chat with a system message vs CLI --system")
check(m.token_id("<|im_start|>") == ids[0] and m.token_id("<|nope|>") == -1, "token_id")
check(m.tokenizer_eos_id == m.token_id("<|im_end|>"), "tokenizer_eos_id %d" % m.tokenizer_eos_id)
s = m.session()
cases = [
    ("rf", dict(gen_length=12, n_blocks=1)),
    ("rf_both", dict(gen_length=12, n_blocks=1, ar_verify="both")),
    ("rf_temp", dict(gen_length=12, n_blocks=2, slot_size=2, temperature=0.8, seed=7)),
    ("ar", dict(method="ar", gen_length=10)),
    ("ar_temp", dict(method="ar", gen_length=10, temperature=0.9, top_k=20, top_p=0.9, seed=3)),
    ("mdm", dict(method="mdm", gen_length=8, n_blocks=2)),
    ("rf_roll", dict(gen_length=12, rolling=1, slot_size=3, temperature=0.7, seed=5)),
]
first = {}
for rnd in range(2):  # the second round reuses the session after every other size
    for name, kw in cases:
        streamed = []
        got = s.generate(ids, on_tokens=streamed.extend, **kw)
        want = cli(name)["answer_ids"]
        check(got == want, "%s round %d: %s, CLI %s" % (name, rnd, got, want))
        check(streamed == got, "%s: streamed %s != %s" % (name, streamed, got))
        check(s.stats["n_calls"] == cli(name)["model_calls"], "%s: calls %s vs CLI %s" % (name, s.stats, cli(name)["model_calls"]))
check(m.detokenize(s.generate(ids, gen_length=12, n_blocks=1)) == cli("rf")["text"], "detokenize vs CLI text")

flag = ctypes.c_int(1)
try:
    s.generate(ids, gen_length=8, n_blocks=1, cancel=flag)
    check(False, "cancel did not raise")
except refusion.RefusionError as e:
    check("cancel" in str(e), "cancel message: %s" % e)
try:
    s.generate(ids, gen_length=8, slot_size=0)
    check(False, "slot_size 0 did not raise")
except refusion.RefusionError as e:
    check("slot" in str(e), "slot_size 0 message: %s" % e)
try:
    refusion.Model(T + "/nope")
    check(False, "a missing model did not raise")
except refusion.RefusionError as e:
    check("nope" in str(e), "missing model message: %s" % e)
print("api_python: %d failed" % fails)
sys.exit(1 if fails else 0)
PY
rc=$?

# ---- the package's Python-level API ----------------------------------------------------
OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python" python3 - "$T" "$Q" 2>"$T/py2.err" <<'PY'
import ctypes, inspect, json, os, signal, sys
import refusion

T, Q = sys.argv[1], sys.argv[2]
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what, file=sys.stderr)
def cli(name):
    return json.load(open("%s/%s.json" % (T, name)))

m = refusion.Model(T + "/m")
# dict messages: the content is rendered
d = m.tokenize_chat([{"role": "user", "content": Q}])
check(d == cli("rf")["prompt_ids"], "tokenize_chat(dicts) %s vs CLI %s" % (d, cli("rf")["prompt_ids"]))
check(m.tokenize_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": Q}]) == cli("rf_sys")["prompt_ids"],
      "tokenize_chat(dicts) with a system message")
check(m.tokenize_chat([{"role": "user", "content": "hi"}]) != m.tokenize_chat([{"role": "user", "content": ""}]),
      "a dict message renders as an empty turn")
for bad in [[{"content": "hi"}], ["hi"], [{"role": "user", "content": 3}]]:
    try:
        m.tokenize_chat(bad)
        check(False, "bad message %r accepted" % (bad,))
    except refusion.RefusionError as e:
        check("role" in str(e) or "content" in str(e), "bad message %r: %s" % (bad, e))

# errors: RefusionError naming what is allowed
s = m.session()
for kw, needle in [(dict(method="xx"), "refusion, ar, mdm"), (dict(ar_verify="sometimes"), "off, correct, first, both"),
                   (dict(slots=3), "unknown generate setting 'slots'"), (dict(gen_length="x"), "gen_length")]:
    try:
        s.generate(d, **kw)
        check(False, "%s accepted" % kw)
    except refusion.RefusionError as e:
        check(needle in str(e), "%s: %s" % (kw, e))
    except Exception as e:
        check(False, "%s raised %s, not RefusionError" % (kw, type(e).__name__))

# create_chat_completion: the CLI's answer, as OpenAI's dicts
msgs = [{"role": "user", "content": Q}]
r = m.create_chat_completion(msgs, max_tokens=10, method="ar")
want = cli("ar")
check(r["object"] == "chat.completion" and r["choices"][0]["message"] == {"role": "assistant", "content": want["text"]},
      "create_chat_completion: %s vs CLI text %r" % (r, want["text"]))
check(r["usage"] == {"prompt_tokens": len(want["prompt_ids"]), "completion_tokens": want["tokens"],
                     "total_tokens": len(want["prompt_ids"]) + want["tokens"]}, "usage %s" % r["usage"])
check(r["choices"][0]["finish_reason"] == ("stop" if want["hit_eos"] else "length"), "finish_reason %s" % r["choices"][0])
r = m.create_chat_completion(msgs, max_tokens=12, n_blocks=1)
check(r["choices"][0]["message"]["content"] == cli("rf")["text"], "refusion chat completion vs CLI: %s" % r)
chunks = list(m.create_chat_completion(msgs, stream=True, max_tokens=10, method="ar"))
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
check(chunks[0]["choices"][0]["delta"] == {"role": "assistant"} and all(c["object"] == "chat.completion.chunk" for c in chunks),
      "stream chunks: %s" % chunks[:2])
check(text == want["text"] and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), "stream text %r" % text)
full = want["text"]
stop = full[len(full) // 2:len(full) // 2 + 2]
if len(full) >= 4 and stop.strip():
    r = m.create_chat_completion(msgs, max_tokens=10, method="ar", stop=[stop])
    check(r["choices"][0]["message"]["content"] == full[:full.index(stop)] and r["choices"][0]["finish_reason"] == "stop",
          "stop %r: %r" % (stop, r["choices"][0]))
    st = "".join(c["choices"][0]["delta"].get("content", "") for c in
                 m.create_chat_completion(msgs, max_tokens=10, method="ar", stop=stop, stream=True))
    check(st == full[:full.index(stop)], "streamed stop %r: %r" % (stop, st))
else:
    check(False, "the CLI answer %r is too short for a stop test" % full)

# Ctrl-C during generate with a callback: SIGINT to this process from the
# callback; KeyboardInterrupt is raised in the next Python code, the callback
long = dict(method="ar", gen_length=200, eos_id=-1)
seen = []
def interrupt(new):
    seen.extend(new)
    if len(seen) == len(new):  # the first tokens
        os.kill(os.getpid(), signal.SIGINT)
try:
    s.generate(d, on_tokens=interrupt, **long)
    check(False, "Ctrl-C during generate: no KeyboardInterrupt")
except KeyboardInterrupt:
    pass
check(0 < len(seen) < 50, "Ctrl-C during generate: %d tokens streamed (the generation ran on)" % len(seen))
check(s.generate(d, gen_length=12, n_blocks=1) == cli("rf")["answer_ids"], "the session after Ctrl-C")
# ... and during a stream: the consumer gets KeyboardInterrupt, the decoder thread is cancelled
n = 0
try:
    for c in m.create_chat_completion(msgs, stream=True, max_tokens=400, method="ar", eos_id=-1):
        n += 1
        if n == 3:
            os.kill(os.getpid(), signal.SIGINT)
    check(False, "Ctrl-C during a stream: no KeyboardInterrupt")
except KeyboardInterrupt:
    pass
check(n < 100, "Ctrl-C during a stream: %d chunks" % n)
check(m.create_chat_completion(msgs, max_tokens=10, method="ar")["choices"][0]["message"]["content"] == want["text"],
      "a completion after Ctrl-C")

# docstrings on every public name
missing = [n for n in refusion.__all__ if not getattr(refusion, n).__doc__ and n not in ("METHODS", "AR_VERIFY")]
for cls in (refusion.Model, refusion.Session):
    for name, v in vars(cls).items():
        if not name.startswith("_") and not (getattr(v, "__doc__", None) or "").strip():
            missing.append(cls.__name__ + "." + name)
check(not missing, "no docstring: %s" % missing)
print("api_python (package): %d failed" % fails)
sys.exit(1 if fails else 0)
PY
rc2=$?
grep -v "^FAIL\|^api_python" "$T/py2.err" | grep -q . && { echo "FAIL: stderr of the package tests: $(head -5 "$T/py2.err")"; rc2=1; }
grep "^FAIL" "$T/py2.err" >&2

# ---- pip install ./python, offline, and the installed copy --------------------------------------
want_v=$(sed -n 's/^project(refusion VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
rc3=0
python3 -m pip install --no-index --no-deps --target "$T/site" "$SRC/python" >"$T/pip.log" 2>&1 ||
  { echo "FAIL: pip install ./python (offline): $(tail -5 "$T/pip.log")"; rc3=1; }
got=$(cd "$T" && OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$T/site" python3 -c '
import importlib.metadata as md, refusion, sys
assert refusion.__file__.startswith(sys.argv[1]), refusion.__file__
m = refusion.Model(sys.argv[1] + "/../m")
r = m.create_chat_completion([{"role": "user", "content": sys.argv[2]}], max_tokens=10, method="ar")
print(md.version("refusion"), refusion.version(), r["choices"][0]["message"]["content"] == sys.argv[3])' "$T/site" "$Q" \
  "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$T/ar.json")" 2>&1)
[ "$got" = "$want_v $want_v True" ] || { echo "FAIL: the pip-installed package: '$got', want '$want_v $want_v True'"; rc3=1; }
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ]
