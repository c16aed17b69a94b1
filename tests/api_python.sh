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
# works, its version CMake's and rf_version()'s. Fresh venvs (offline):
# installed from the source tree and from the `cmake --install` prefix, the
# package finds the library with no environment, imported outside the
# source tree; with the recorded library gone the error names each place
# tried. Llama, written as llama-cpp-python's README writes it, on the demo
# model: with no settings the answer of `refusion generate` and of the
# server; llama_types.py's result shapes, streaming, stop strings, echo,
# seeds, n_threads, tokenize/detokenize on bytes, ReFusion settings as
# keyword arguments, refused arguments named, a bad generation_config.json,
# ClosedError after close(). Constrained decoding (python3 itself, for
# Debian's python3-jsonschema): LlamaGrammar GBNF root ::= "yes" | "no"
# gives exactly yes or no (greedy, sampled, streamed, completions,
# from_file); a json_schema response_format parses and validates under its
# schema (also as json_object + schema and from_json_schema); json_object
# gives a JSON object, its grammar the library's; greedy AR answers equal
# the server's for the same requests; bad GBNF, a schema keyword the library
# cannot enforce, grammar + response_format, plan-and-infill / MDM with a
# grammar raise RefusionValueError with one line. Tool calls (Qwen3's
# template): a named tool_choice (and "required" with one tool, legacy
# functions / function_call) gives one call whose arguments validate under
# the function's schema, greedy AR the server's calls; none / auto give
# text; a tool conversation renders and answers as the server's; bad tools,
# streaming, a grammar with a call raise RefusionValueError; compiled
# grammars are kept per model and freed with it. docs/python.md's
# ```python examples run.
# Exit 77 (skipped) when
# python3 is missing or the build is a sanitizer build (its .so cannot be
# loaded into an uninstrumented python3).
set -u
SRC=${REFUSION_SRC:?REFUSION_SRC must point at the source tree}
. "$SRC/tests/helpers/common.sh"
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
BIN=${REFUSION_BIN:?REFUSION_BIN must point at the refusion binary}
BUILD=$(dirname "$BIN")
grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$BUILD/CMakeCache.txt" 2>/dev/null && { echo "sanitizer build: skipped"; exit 77; }
rf_test_setup api_python
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

OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python:$RF_HELPERS" PYTHONDONTWRITEBYTECODE=1 python3 - "$T" "$Q" <<'PY'
import ctypes, json, sys
import refusion

T, Q = sys.argv[1], sys.argv[2]
from pycheck import check, finish

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
finish("api_python")
PY
rc=$?

# ---- the package's Python-level API ----------------------------------------------------
OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python:$RF_HELPERS" PYTHONDONTWRITEBYTECODE=1 python3 - "$T" "$Q" 2>"$T/py2.err" <<'PY'
import ctypes, inspect, json, os, signal, sys
import refusion

T, Q = sys.argv[1], sys.argv[2]
from pycheck import check, finish
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
for cls in (refusion.Model, refusion.Session, refusion.Llama, refusion.LlamaGrammar):
    for name, v in vars(cls).items():
        if not name.startswith("_") and not (getattr(v, "__doc__", None) or "").strip():
            missing.append(cls.__name__ + "." + name)
check(not missing, "no docstring: %s" % missing)
finish("api_python (package)")
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

# ---- pip install into fresh venvs (offline), the library found with no environment ------------
# From the source tree the wheel records the build directory (the default
# build/, else --config-settings libdir=); from the `cmake --install` prefix,
# the prefix's lib directory. With neither there, the error names every
# place tried.
NOENV=(env -u REFUSION_LIB -u LD_LIBRARY_PATH -u PYTHONPATH PKG_CONFIG_PATH= OMP_NUM_THREADS=1)
mkvenv() { # DIR: a fresh venv with its pip (ensurepip: offline), the package pip-installed from $2 with options $3...
  local d=$1 from=$2
  shift 2
  python3 -m venv "$d" >"$d.log" 2>&1 && "$d/bin/python" -m pip install --no-index --no-deps "$@" "$from" >>"$d.log" 2>&1 ||
    { bad "venv $d: pip install $* $from: $(tail -3 "$d.log")"; return 1; }
}
where() { # VENV: whether the package imported (outside the source tree) is the venv's, and the library it loaded
  (cd "$T" && "${NOENV[@]}" "$1/bin/python" -c '
import os, sys, refusion
p = refusion.library_path()
print(refusion.__file__.startswith(sys.argv[1]), os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)))' "$1" 2>&1)
}
real_build=$(cd "$BUILD" && pwd -P)
cs=()
[ "$real_build" = "$(cd "$SRC" && pwd -P)/build" ] || cs=(--config-settings "libdir=$BUILD")
mkvenv "$T/v1" "$SRC/python" "${cs[@]}" && ok
got=$(where "$T/v1")
[ "$got" = "True $real_build/librefusion.so.0" ] && ok || bad "venv from the source tree: '$got', want 'True $real_build/librefusion.so.0'"

P=$T/prefix
cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 && ok || bad "cmake --install: $(tail -3 "$T/install.log")"
plib=$(cd "$(dirname "$(find "$P" -name librefusion.so.0 | head -1)")" && pwd -P)
mkvenv "$T/v2" "$P/share/refusion/python" && ok
got=$(where "$T/v2")
[ "$got" = "True $plib/librefusion.so.0" ] && ok || bad "venv from the install prefix: '$got', want 'True $plib/librefusion.so.0'"
# ... and it generates there, the CLI's answer
got=$(cd "$T" && "${NOENV[@]}" "$T/v2/bin/python" -c '
import sys, refusion
llm = refusion.Llama(model_path=sys.argv[1], verbose=False)
print(llm.create_chat_completion([{"role": "user", "content": sys.argv[2]}], max_tokens=10, decoder="ar")["choices"][0]["message"]["content"])' \
  "$T/m" "$Q" 2>&1)
[ "$got" = "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$T/ar.json")" ] && ok ||
  bad "Llama from the install prefix: '$got'"

mkdir -p "$T/gone"
cp "$BUILD/librefusion.so.0" "$T/gone/"
mkvenv "$T/v3" "$SRC/python" --config-settings "libdir=$T/gone" && ok
got=$(where "$T/v3")
[ "$got" = "True $(cd "$T/gone" && pwd -P)/librefusion.so.0" ] && ok || bad "venv with libdir=: '$got'"
rm -rf "$T/gone"
if ! ldconfig -p 2>/dev/null | grep -q 'librefusion\.so\.0'; then
  got=$(cd "$T" && "${NOENV[@]}" "$T/v3/bin/python" -c 'import refusion; refusion.Llama(model_path="m")' 2>&1 | tail -1)
  case "$got" in
  "refusion._library.RefusionError: librefusion not found; tried: recorded at install $T/gone/librefusion.so.0 (no such file);"*"the system loader librefusion.so.0 ("*"REFUSION_LIB"*) ok ;;
  *) bad "no library: '$got'" ;;
  esac
fi
got=$(cd "$T" && REFUSION_LIB=$T/nope "$T/v1/bin/python" -c 'import refusion; refusion.version()' 2>&1 | tail -1)
[ "$got" = "refusion._library.RefusionError: librefusion: REFUSION_LIB ($T/nope) does not load: no such file" ] && ok ||
  bad "a bad REFUSION_LIB: '$got'"

# ---- Llama as llama-cpp-python's README writes it, on the demo model -------------------------
# with no settings: the answer of `refusion generate` and of the server with
# no settings (both start from the model's generation_config.json)
DEMO=$SRC/models/refusion-demo
QD="Tom has 12 apples. He buys 7 more. How many apples does he have now?"
QR="Q: What is 12 plus 7? A: "
demo() { # name, generate options...
  local name=$1
  shift
  OMP_NUM_THREADS=1 "$BIN" generate -m "$DEMO" --json "$@" >"$T/$name.json" 2>"$T/$name.err" ||
    bad "refusion generate $*: $(cat "$T/$name.err")"
}
demo d_chat -p "$QD"
demo d_raw --no-chat -p "$QR"
demo d_readme --no-chat -p "$QR" -n 32
demo d_temp -p "$QD" --temp 0.8 -s 7
demo d_ar -p "$QD" --decoder ar
demo d_lp -p "$QD" --decoder ar --logprobs 3
demo d_sys -p "$QD" --system "Answer with the number."
cat >"$T/tools_def.py" <<'PY2'
# the tool-call requests of the server and of the Python tests
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
           "unit": {"enum": ["C", "F"]}}, "required": ["city", "days"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather of a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
TMSGS = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
NAMED = lambda name: {"type": "function", "function": {"name": name}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}
BACK = TMSGS + [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}]
PY2
rf_serve_start "$T/serve.log" -m "$DEMO" --threads 1 -q
curl -s "$URL/v1/chat/completions" -d "$(python3 -c 'import json,sys; print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}]}))' "$QD")" >"$T/srv_chat.json"
curl -s "$URL/v1/completions" -d "$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1]}))' "$QR")" >"$T/srv_raw.json"
# constrained decoding (the grammar tests below compare): greedy AR, and the
# model's own settings (the rolling slot) for the GBNF
QYN="Is 12 plus 7 equal to 19? Answer yes or no."
GYN='root ::= "yes" | "no"'
SCHEMA='{"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 1000}, "unit": {"enum": ["apples", "pears"]}}, "required": ["answer", "unit"], "additionalProperties": false}'
srv_grammar() { # name, extra request fields as JSON
  curl -s "$URL/v1/chat/completions" -d "$(python3 -c 'import json,sys
b = {"messages": [{"role": "user", "content": sys.argv[1]}]}
b.update(json.loads(sys.argv[2]))
print(json.dumps(b))' "$2" "$3")" >"$T/$1.json"
}
srv_grammar srv_g_yn "$QYN" "$(python3 -c 'import json,sys; print(json.dumps({"grammar": sys.argv[1]}))' "$GYN")"
srv_grammar srv_g_yn_ar "$QYN" "$(python3 -c 'import json,sys; print(json.dumps({"grammar": sys.argv[1], "mode": "ar", "temperature": 0}))' "$GYN")"
srv_grammar srv_g_js "$QD" "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"apples\", \"schema\": $SCHEMA}}, \"mode\": \"ar\", \"temperature\": 0}"
srv_grammar srv_g_jo "$QD" '{"response_format": {"type": "json_object"}, "mode": "ar", "temperature": 0, "max_tokens": 200}'
kill "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
SPID=""
# tool calls (the grammar tests below compare): greedy AR, with Qwen3's
# template, which renders the tools
rf_serve_start "$T/serve_tools.log" -m "$DEMO" --threads 1 -q --chat-template "$SRC/tests/data/templates/qwen3.jinja"
python3 - "$URL" "$T" <<'PY2' || bad "the server's tool-call answers"
import json, sys, urllib.request
URL, T = sys.argv[1:3]
sys.path.insert(0, T)
exec(open(T + "/tools_def.py").read())
def post(path, body, name):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    open("%s/%s.json" % (T, name), "w").write(urllib.request.urlopen(req, timeout=300).read().decode())
post("/v1/chat/completions", {"messages": TMSGS, "tools": TOOLS, "tool_choice": NAMED("get_weather"), "mode": "ar", "temperature": 0}, "srv_tool_named")
post("/v1/chat/completions", {"messages": TMSGS, "tools": TOOLS, "tool_choice": NAMED("add"), "mode": "ar", "temperature": 0}, "srv_tool_add")
post("/v1/chat/completions", {"messages": TMSGS, "tools": TOOLS[1:], "tool_choice": "required", "mode": "ar", "temperature": 0}, "srv_tool_req")
post("/apply-template", {"messages": BACK, "tools": TOOLS}, "srv_tool_tmpl")
post("/v1/chat/completions", {"messages": BACK, "tools": TOOLS, "mode": "ar", "temperature": 0, "max_tokens": 16}, "srv_tool_back")
PY2
kill "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
SPID=""

(cd "$T" && OMP_NUM_THREADS=2 TOL=$(rf_width_tol) PYTHONPATH="$RF_HELPERS" PYTHONDONTWRITEBYTECODE=1 "$T/v1/bin/python" - "$T" "$DEMO" "$QD" "$QR" >"$T/llama.out" 2>"$T/llama.err") <<'PY'
import json, os, sys
from refusion import Llama  # llama-cpp-python: from llama_cpp import Llama; the rest is the same
import refusion

T, DEMO, QD, QR = sys.argv[1:5]
import pycheck
from pycheck import check, finish
pycheck.prefix = "Llama: "
def cli(name):
    return json.load(open("%s/%s.json" % (T, name)))
def raises(exc, needle, fn, *a, **kw):
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        fn(*a, **kw)
    except exc as e:
        check(needle in str(e), "%s raised %r, which does not name %r" % (name, str(e), needle))
        return
    except Exception as e:
        check(False, "%s(%s) raised %s (%s), not %s" % (name, kw or a, type(e).__name__, e, exc.__name__))
        return
    check(False, "%s(%s) did not raise" % (name, kw or a))

# the shapes: llama-cpp-python's llama_types.py (OpenAI's)
COMPLETION = {"id", "object", "created", "model", "choices", "usage"}
COMPLETION_CHOICE = {"text", "index", "logprobs", "finish_reason"}
USAGE = {"prompt_tokens", "completion_tokens", "total_tokens"}
CHAT = {"id", "object", "created", "model", "choices", "usage"}
CHAT_CHOICE = {"index", "message", "logprobs", "finish_reason"}
CHUNK = {"id", "model", "object", "created", "choices"}
CHUNK_CHOICE = {"index", "delta", "logprobs", "finish_reason"}
def shape(o, keys, what):
    check(isinstance(o, dict) and set(o) == keys, "%s: keys %s, want %s" % (what, sorted(o) if isinstance(o, dict) else o, sorted(keys)))
def common(o, obj, what):
    check(isinstance(o["id"], str) and o["object"] == obj and isinstance(o["created"], int) and isinstance(o["model"], str)
          and isinstance(o["choices"], list) and len(o["choices"]) == 1, "%s: %s" % (what, o))
def usage(u, what):
    shape(u, USAGE, what + " usage")
    check(all(isinstance(u[k], int) for k in USAGE) and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "%s usage %s" % (what, u))

# ---- the README's completion -----------------------------------------------------------------
llm = Llama(
      model_path=DEMO,
      # n_gpu_layers=-1, # Uncomment to use GPU acceleration
      seed=1337, # Uncomment to set a specific seed
      n_ctx=2048, # Uncomment to increase the context window
      n_threads=1,
      verbose=False,
)
output = llm(
      QR, # Prompt
      max_tokens=32, # Generate up to 32 tokens, set to None to generate up to the end of the context window
      stop=["Q:", "\n"], # Stop generating just before the model would generate a new question
      echo=True # Echo the prompt back in the output
) # Generate a completion, can also call create_completion
shape(output, COMPLETION, "completion")
common(output, "text_completion", "completion")
shape(output["choices"][0], COMPLETION_CHOICE, "completion choice")
usage(output["usage"], "completion")
full = cli("d_readme")["text"]
cuts = [full.index(s) for s in ("Q:", "\n") if s in full]
want = full[:min(cuts)] if cuts else full
check(output["choices"][0]["text"] == QR + want, "echo + stop: %r, want %r" % (output["choices"][0]["text"], QR + want))
check(output["choices"][0]["finish_reason"] == ("stop" if cuts or cli("d_readme")["hit_eos"] else "length"), "finish_reason %s" % output["choices"][0])
check(output["usage"]["prompt_tokens"] == len(cli("d_readme")["prompt_ids"]) and output["usage"]["completion_tokens"] <= 32, "usage %s" % output["usage"])
check(output["model"] == DEMO, "model %r" % output["model"])
# n_threads: OpenMP's setting of the thread that generated (OMP_NUM_THREADS=2 here)
check(refusion._library.L.lib.rf_set_threads(0) == 1, "n_threads=1 not in effect: %d" % refusion._library.L.lib.rf_set_threads(0))
check(llm.n_ctx() == 2048 and llm.n_vocab() == 850 and llm.token_eos() == 845 and llm.token_bos() == -1,
      "n_ctx %d n_vocab %d token_eos %d token_bos %d" % (llm.n_ctx(), llm.n_vocab(), llm.token_eos(), llm.token_bos()))

# ---- tokens ------------------------------------------------------------------------------------
for text in (b"Hello, world!", "12 + 7 = 19 \u2713 caf\u00e9".encode()):
    ids = llm.tokenize(text)
    check(isinstance(ids, list) and ids and all(type(i) is int for i in ids), "tokenize(%r) = %r" % (text, ids))
    back = llm.detokenize(ids)
    check(isinstance(back, bytes) and back == text, "detokenize(tokenize(%r)) = %r" % (text, back))
    check(llm.tokenize(text, add_bos=False) == ids, "add_bos=False changes the ids")
    check(llm.detokenize(ids[1:], prev_tokens=ids[:1]) == text[len(llm.detokenize(ids[:1])):], "prev_tokens")
check(llm.tokenize(b"<|im_end|>", special=True) == [845], "special=True: %s" % llm.tokenize(b"<|im_end|>", special=True))
raises(ValueError, "special=True", llm.tokenize, b"a<|im_end|>")
check(llm.detokenize([845]) == b"" and llm.detokenize([845], special=True) == b"<|im_end|>", "detokenize special")

# ---- chat with no settings: the CLI's and the server's answer ---------------------------------
plain = Llama(model_path=DEMO, verbose=False)
msgs = [{"role": "user", "content": QD}]
r = plain.create_chat_completion(messages=msgs)
shape(r, CHAT, "chat")
common(r, "chat.completion", "chat")
shape(r["choices"][0], CHAT_CHOICE, "chat choice")
check(r["choices"][0]["message"] == {"role": "assistant", "content": cli("d_chat")["text"]},
      "chat with no settings: %r, CLI %r" % (r["choices"][0]["message"], cli("d_chat")["text"]))
srv = json.load(open(T + "/srv_chat.json"))
check(r["choices"][0]["message"]["content"] == srv["choices"][0]["message"]["content"],
      "chat with no settings: %r, server %r" % (r["choices"][0]["message"]["content"], srv["choices"][0]["message"]["content"]))
check(r["usage"] == {k: srv["usage"][k] for k in USAGE} and r["choices"][0]["finish_reason"] == srv["choices"][0]["finish_reason"],
      "usage %s finish %s, server %s %s" % (r["usage"], r["choices"][0]["finish_reason"], srv["usage"], srv["choices"][0]["finish_reason"]))
usage(r["usage"], "chat")
raw = plain(QR, max_tokens=None)
srv = json.load(open(T + "/srv_raw.json"))
check(raw["choices"][0]["text"] == cli("d_raw")["text"] == srv["choices"][0]["text"],
      "completion with max_tokens=None: %r, CLI %r, server %r" % (raw["choices"][0]["text"], cli("d_raw")["text"], srv["choices"][0]["text"]))
check(plain(QR)["usage"]["completion_tokens"] <= 16, "llm(prompt) is not 16 tokens at most (llama-cpp-python's default)")
r = plain.create_chat_completion(messages=[{"role": "system", "content": "Answer with the number."}] + msgs)
check(r["choices"][0]["message"]["content"] == cli("d_sys")["text"], "system message: %r, CLI %r" % (r["choices"][0]["message"]["content"], cli("d_sys")["text"]))

# streaming: the role, the text, an empty delta with finish_reason
chunks = list(plain.create_chat_completion(messages=msgs, stream=True))
for i, c in enumerate(chunks):
    shape(c, CHUNK, "chunk %d" % i)
    common(c, "chat.completion.chunk", "chunk %d" % i)
    shape(c["choices"][0], CHUNK_CHOICE, "chunk %d choice" % i)
check(chunks[0]["choices"][0]["delta"] == {"role": "assistant"} and chunks[0]["choices"][0]["finish_reason"] is None, "first chunk %s" % chunks[0])
check(chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == "stop", "last chunk %s" % chunks[-1])
check(all(set(c["choices"][0]["delta"]) == {"content"} and c["choices"][0]["finish_reason"] is None for c in chunks[1:-1]) and len(chunks) > 3,
      "middle chunks %s" % chunks[1:3])
check("".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == cli("d_chat")["text"], "streamed text")
check(len({c["id"] for c in chunks}) == 1, "chunk ids differ")
cchunks = list(plain(QR, max_tokens=None, stream=True))
for i, c in enumerate(cchunks):
    shape(c, COMPLETION - {"usage"}, "completion chunk %d" % i)
    shape(c["choices"][0], COMPLETION_CHOICE, "completion chunk %d choice" % i)
check("".join(c["choices"][0]["text"] for c in cchunks) == cli("d_raw")["text"] and cchunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"),
      "streamed completion")

# stop strings, plain and streamed
full = cli("d_chat")["text"]
stop = full[len(full) // 2:len(full) // 2 + 3]
check(len(full) > 8 and stop.strip() != "", "the demo's answer %r is too short for a stop test" % full)
r = plain.create_chat_completion(messages=msgs, stop=[stop, "never said"])
check(r["choices"][0]["message"]["content"] == full[:full.index(stop)] and r["choices"][0]["finish_reason"] == "stop",
      "stop %r: %s" % (stop, r["choices"][0]))
st = "".join(c["choices"][0]["delta"].get("content", "") for c in plain.create_chat_completion(messages=msgs, stop=stop, stream=True))
check(st == full[:full.index(stop)], "streamed stop %r: %r" % (stop, st))

# seeds and sampling: the CLI's --temp 0.8 -s 7, the same twice
a = plain.create_chat_completion(messages=msgs, temperature=0.8, seed=7)["choices"][0]["message"]["content"]
b = plain.create_chat_completion(messages=msgs, temperature=0.8, seed=7)["choices"][0]["message"]["content"]
check(a == b == cli("d_temp")["text"], "temperature 0.8 seed 7: %r, %r, CLI %r" % (a, b, cli("d_temp")["text"]))
# ReFusion's settings as keyword arguments (here and in the constructor)
check(plain.create_chat_completion(messages=msgs, decoder="ar")["choices"][0]["message"]["content"] == cli("d_ar")["text"], "decoder=ar")
with Llama(model_path=DEMO, verbose=False, decoder="ar") as l2:
    check(l2.create_chat_completion(messages=msgs)["choices"][0]["message"]["content"] == cli("d_ar")["text"], "Llama(decoder=ar)")
raises(refusion.ClosedError, "closed", l2.tokenize, b"x")

# refused, by name: what nothing here provides
raises(ValueError, "response_format", plain.create_chat_completion, msgs, response_format={"type": "xml"})
raises(ValueError, "top_logprobs needs logprobs", plain.create_chat_completion, msgs, top_logprobs=3)
raises(ValueError, "not streamed", plain.create_chat_completion, msgs, logprobs=True, stream=True)
raises(ValueError, "logprobs must be an integer in [0, 20]", plain.create_completion, QR, logprobs=21)
# logprobs: the CLI's --logprobs values, chat (AR and the rolling slot) and completions
lp = cli("d_lp")
want = [e for e in lp["logprobs"] if not (lp["hit_eos"] and e is lp["logprobs"][-1])]
# within rf_width_tol for the rolling slot's rows (calls of other widths)
close = lambda a, b: abs(a - b) <= max(1e-5 * max(1.0, abs(b)), float(os.environ["TOL"]))
for extra in ({"decoder": "ar"}, {"decoder": "refusion", "rolling": True}):
    r = plain.create_chat_completion(messages=msgs, logprobs=True, top_logprobs=3, **extra)["choices"][0]
    content = r["logprobs"]["content"]
    check(len(content) == len(want) and all(close(e["logprob"], w["logprob"]) and len(e["top_logprobs"]) == 3 and
                                            all(close(t["logprob"], u["logprob"]) for t, u in zip(e["top_logprobs"], w["top_logprobs"]))
                                            for e, w in zip(content, want)), "chat logprobs (%s) differ from the CLI's" % extra)
    check("".join(e["token"] for e in content) == r["message"]["content"], "chat logprobs (%s): tokens do not join into the text" % extra)
# plan-and-infill and MDM report them too: an entry per token, the answer unchanged
for extra in ({"decoder": "refusion", "rolling": False}, {"decoder": "mdm"}):
    a = plain.create_chat_completion(messages=msgs, **extra)["choices"][0]["message"]["content"]
    r = plain.create_chat_completion(messages=msgs, logprobs=True, top_logprobs=2, **extra)["choices"][0]
    content = r["logprobs"]["content"]
    check(r["message"]["content"] == a and "".join(e["token"] for e in content) == a and
          all(e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 for e in content),
          "chat logprobs (%s): %r for %r" % (extra, content[:3], a))
c = plain.create_completion(lp["prompt_ids"], max_tokens=len(lp["answer_ids"]), decoder="ar", logprobs=2)["choices"][0]
check(len(c["logprobs"]["token_logprobs"]) == len(want) and
      all(close(x, w["logprob"]) for x, w in zip(c["logprobs"]["token_logprobs"], want)) and
      all(len(t) <= 2 for t in c["logprobs"]["top_logprobs"]) and "".join(c["logprobs"]["tokens"]) == c["text"],
      "completion logprobs: %r" % c["logprobs"])
raises(ValueError, "grammar", plain.create_completion, QR, grammar=object())
raises(ValueError, "slot_size", plain.create_chat_completion, msgs, slot_sise=3)
raises(ValueError, "lora_path", Llama, model_path=DEMO, lora_path="x.gguf", verbose=False)
raises(ValueError, "chat_format", Llama, model_path=DEMO, chat_format="llama-2", verbose=False)
raises(ValueError, "does not exist", Llama, model_path=T + "/nope")
# a bad generation_config.json: the library's message, naming the file and the key
import shutil
shutil.copytree(DEMO, T + "/badcfg")
open(T + "/badcfg/generation_config.json", "w").write('{"refusion": {"slots": 3}}')
raises(ValueError, "badcfg/generation_config.json: unknown setting \"refusion.slots\"", Llama, model_path=T + "/badcfg", verbose=False)
raises(ValueError, "exceed context window", Llama(model_path=DEMO, n_ctx=8, verbose=False).create_chat_completion, msgs)
neutral = plain.create_chat_completion(messages=msgs, response_format={"type": "text"}, logprobs=False)["choices"][0]
check(neutral["message"]["content"] == cli("d_chat")["text"] and neutral["logprobs"] is None, "neutral response_format / logprobs")
Llama(model_path=DEMO, n_gpu_layers=-1, n_batch=64, use_mmap=True, verbose=False).close()

# after close(): a clear error, a RuntimeError
llm.close()
for fn, a in ((llm, (QR,)), (llm.tokenize, (b"x",)), (llm.create_chat_completion, (msgs,)), (llm.n_vocab, ())):
    raises(refusion.ClosedError, "closed", fn, *a)
check(issubclass(refusion.ClosedError, RuntimeError), "ClosedError is not a RuntimeError")
llm.close()  # twice: nothing
finish("api_python (Llama)")
PY
rc4=$?
grep "^FAIL" "$T/llama.err" >&2
grep -v "^FAIL" "$T/llama.err" | grep -q . && { echo "FAIL: stderr of the Llama tests: $(grep -v "^FAIL" "$T/llama.err" | tail -20)"; rc4=1; }
[ -s "$T/llama.out" ] || { echo "FAIL: the Llama tests did not finish"; rc4=1; }

# ---- constrained decoding: LlamaGrammar, grammar=, response_format ---------------------------
# (python3 itself, for Debian's python3-jsonschema; the same package from the source tree)
(cd "$T" && OMP_NUM_THREADS=1 REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python:$RF_HELPERS" PYTHONDONTWRITEBYTECODE=1 python3 - "$T" "$DEMO" "$SRC" \
  "$QD" "$QR" "$QYN" "$GYN" "$SCHEMA" >"$T/grammar.out" 2>"$T/grammar.err") <<'PY'
import ast, gc, json, re, sys
import refusion
from refusion import Llama, LlamaGrammar
try:
    import jsonschema  # Debian's python3-jsonschema
except ImportError:
    jsonschema = None

T, DEMO, SRC, QD, QR, QYN, GYN, SCHEMA = sys.argv[1:9]
S = json.loads(SCHEMA)
import pycheck
from pycheck import check, finish
pycheck.prefix = "grammar: "
def raises(exc, needle, fn, *a, **kw):
    """fn raises exc whose message names needle, in one line"""
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        fn(*a, **kw)
    except exc as e:
        check(needle in str(e) and "\n" not in str(e), "%s raised %r, which does not name %r in one line" % (name, str(e), needle))
        return e
    except Exception as e:
        check(False, "%s(%s) raised %s (%s), not %s" % (name, kw or a, type(e).__name__, e, exc.__name__))
        return None
    check(False, "%s(%s) did not raise" % (name, kw or a))
def content(r):
    return r["choices"][0]["message"]["content"]
def srv(name):
    return json.load(open("%s/%s.json" % (T, name)))["choices"][0]["message"]["content"]
def valid(text, what):
    """text is a JSON document valid under S (python3-jsonschema's draft 2020-12)"""
    try:
        doc = json.loads(text)
    except ValueError as e:
        check(False, "%s: %r is not JSON: %s" % (what, text, e))
        return
    if jsonschema is not None:
        try:
            jsonschema.Draft202012Validator(S).validate(doc)
        except jsonschema.ValidationError as e:
            check(False, "%s: %r is not valid under the schema: %s" % (what, text, e.message))
    else:
        check(isinstance(doc, dict) and set(doc) == {"answer", "unit"} and type(doc["answer"]) is int and
              0 <= doc["answer"] <= 1000 and doc["unit"] in ("apples", "pears"), "%s: %r" % (what, text))

llm = Llama(model_path=DEMO, n_threads=1, verbose=False)
yn = [{"role": "user", "content": QYN}]
msgs = [{"role": "user", "content": QD}]

# ---- GBNF: root ::= "yes" | "no" gives exactly yes or no ----------------------------------------
YN = LlamaGrammar.from_string(GYN)
free = content(llm.create_chat_completion(yn, max_tokens=16))
check(free not in ("yes", "no"), "the demo answers %r without a grammar: the test shows nothing" % free)
seen = set()
for kw in [{}, {"decoder": "ar"}, {"decoder": "ar", "temperature": 0}, {"rolling": True},
           {"decoder": "refusion", "rolling": False}, {"decoder": "mdm"}] + \
          [{"temperature": 1.5, "seed": s} for s in range(12)] + [{"decoder": "ar", "temperature": 1.5, "seed": s} for s in range(4)]:
    r = llm.create_chat_completion(yn, grammar=YN, **kw)
    seen.add(content(r))
    check(content(r) in ("yes", "no") and r["choices"][0]["finish_reason"] == "stop", "grammar %s: %r, %s" % (kw, content(r), r["choices"][0]["finish_reason"]))
check(seen == {"yes", "no"}, "sampled under the grammar: only %s" % seen)
greedy = content(llm.create_chat_completion(yn, grammar=YN, decoder="ar", temperature=0))
check(greedy == srv("srv_g_yn_ar"), "grammar, greedy AR: %r, the server %r" % (greedy, srv("srv_g_yn_ar")))
check(content(llm.create_chat_completion(yn, grammar=YN)) == srv("srv_g_yn"), "grammar, no settings: the server's %r" % srv("srv_g_yn"))
st = "".join(c["choices"][0]["delta"].get("content", "") for c in llm.create_chat_completion(yn, grammar=YN, stream=True))
check(st == content(llm.create_chat_completion(yn, grammar=YN)), "streamed under the grammar: %r" % st)
c = llm(QR, grammar=YN)["choices"][0]
check(c["text"] in ("yes", "no") and c["finish_reason"] == "stop", "create_completion with the grammar: %s" % c)
c = llm.create_completion(QR, grammar=YN, stream=True, decoder="ar")
check("".join(x["choices"][0]["text"] for x in c) in ("yes", "no"), "streamed completion with the grammar")
open(T + "/yn.gbnf", "w").write("# yes or no\n" + GYN + "\n")
check(content(llm.create_chat_completion(yn, grammar=LlamaGrammar.from_file(T + "/yn.gbnf", verbose=False))) == content(llm.create_chat_completion(yn, grammar=YN)),
      "LlamaGrammar.from_file")
three = LlamaGrammar.from_string('root ::= [a-c] [a-c] [a-c]')
r = llm.create_chat_completion(msgs, grammar=three, decoder="ar", temperature=1.0, seed=5)
check(re.fullmatch("[a-c]{3}", content(r)) is not None, "a class grammar: %r" % content(r))

# ---- JSON schema: parsed with json, validated with python3-jsonschema ------------------------
rf_js = {"type": "json_schema", "json_schema": {"name": "apples", "strict": True, "schema": S}}
r = llm.create_chat_completion(msgs, response_format=rf_js, decoder="ar", temperature=0)
valid(content(r), "json_schema, greedy AR")
check(r["choices"][0]["finish_reason"] == "stop", "json_schema: the answer was cut: %s" % r["choices"][0])
check(content(r) == srv("srv_g_js"), "json_schema, greedy AR: %r, the server %r" % (content(r), srv("srv_g_js")))
for kw in [{}, {"temperature": 1.0, "seed": 3}, {"decoder": "ar", "temperature": 0.8, "seed": 9}]:
    valid(content(llm.create_chat_completion(msgs, response_format=rf_js, **kw)), "json_schema %s" % kw)
# llama-cpp-python's spelling (a schema in json_object) and the schema as a LlamaGrammar: the same answer
same = [content(llm.create_chat_completion(msgs, response_format={"type": "json_object", "schema": S}, decoder="ar", temperature=0)),
        content(llm.create_chat_completion(msgs, grammar=LlamaGrammar.from_json_schema(SCHEMA), decoder="ar", temperature=0))]
check(same == [content(r)] * 2, "json_object with a schema, from_json_schema: %s, want %r" % (same, content(r)))

# ---- json_object: any JSON object (the server's grammar) ---------------------------------------
r = llm.create_chat_completion(msgs, response_format={"type": "json_object"}, decoder="ar", temperature=0, max_tokens=200)
try:
    check(isinstance(json.loads(content(r)), dict), "json_object: %r is not an object" % content(r))
except ValueError as e:
    check(False, "json_object: %r is not JSON: %s" % (content(r), e))
check(content(r) == srv("srv_g_jo"), "json_object, greedy AR: %r, the server %r" % (content(r), srv("srv_g_jo")))
# JSON_GBNF is the library's rf_json_object_gbnf (written out in the package: the library does not export it)
src = open(SRC + "/src/grammar/json_schema.c").read()
m = re.search(r'#define BASE_RULES \\\n((?:[ \t]*".*"[ \t]*\\?\n)+)', src)
lib_gbnf = "root ::= object\n" + "".join(ast.literal_eval(l.strip().rstrip("\\").strip()) for l in m.group(1).splitlines()) if m else None
check(refusion.llama_grammar.JSON_GBNF == lib_gbnf, "JSON_GBNF differs from src/grammar/json_schema.c's BASE_RULES")

# ---- tool calls: the library's tool calling (the server's), Qwen3's template -------------------
exec(open(T + "/tools_def.py").read())
tl = Llama(model_path=DEMO, n_threads=1, verbose=False, chat_template=SRC + "/tests/data/templates/qwen3.jinja")
def srv_msg(name):
    return json.load(open("%s/%s.json" % (T, name)))["choices"][0]["message"]
def call_of(r, name, what):
    """r's answer is one call of name (OpenAI's shape), its arguments valid under the function's schema"""
    c = r["choices"][0]
    calls = c["message"].get("tool_calls") or []
    check(c["finish_reason"] == "tool_calls", "%s: finish_reason %s" % (what, c["finish_reason"]))
    check(len(calls) == 1 and calls[0]["type"] == "function" and isinstance(calls[0]["id"], str) and calls[0]["id"] and
          calls[0]["function"]["name"] == name and isinstance(calls[0]["function"]["arguments"], str), "%s: tool_calls %s" % (what, calls))
    check(c["message"]["content"] in (None, "") and c["message"]["role"] == "assistant", "%s: message %s" % (what, c["message"]))
    if not calls:
        return None
    try:
        args = json.loads(calls[0]["function"]["arguments"])
    except ValueError as e:
        check(False, "%s: arguments %r are not JSON: %s" % (what, calls[0]["function"]["arguments"], e))
        return calls[0]
    if jsonschema is not None:
        try:
            jsonschema.Draft202012Validator(SCHEMAS[name]).validate(args)
        except jsonschema.ValidationError as e:
            check(False, "%s: arguments %r are not valid under the schema: %s" % (what, args, e.message))
    else:
        check(isinstance(args, dict), "%s: arguments %r" % (what, args))
    return calls[0]
def same_calls(r, srv, what):
    mine = [(c["function"]["name"], c["function"]["arguments"]) for c in r["choices"][0]["message"].get("tool_calls") or []]
    theirs = [(c["function"]["name"], c["function"]["arguments"]) for c in srv_msg(srv).get("tool_calls") or []]
    check(mine and mine == theirs, "%s: %s, the server %s" % (what, mine, theirs))
for name in ("get_weather", "add"):
    r = tl.create_chat_completion(TMSGS, tools=TOOLS, tool_choice=NAMED(name), decoder="ar", temperature=0)
    call_of(r, name, "named %s, greedy AR" % name)
    same_calls(r, "srv_tool_named" if name == "get_weather" else "srv_tool_add", "named %s, greedy AR" % name)
    for seed in (1, 2):
        call_of(tl.create_chat_completion(TMSGS, tools=TOOLS, tool_choice=NAMED(name), rolling=True, temperature=0.9, seed=seed),
                name, "named %s, rolling, seed %d" % (name, seed))
r = tl.create_chat_completion(TMSGS, tools=TOOLS[1:], tool_choice="required", decoder="ar", temperature=0)
call_of(r, "add", "required, one tool")
same_calls(r, "srv_tool_req", "required, one tool")
for choice in ("none", "auto", None):
    c = tl.create_chat_completion(TMSGS, tools=TOOLS, tool_choice=choice, decoder="ar", max_tokens=24)["choices"][0]
    check(isinstance(c["message"]["content"], str) and "tool_calls" not in c["message"] and c["finish_reason"] != "tool_calls",
          "tool_choice %s: %s" % (choice, c))
# llama-cpp-python's legacy functions / function_call: the same call
r = tl.create_chat_completion(TMSGS, functions=[t["function"] for t in TOOLS], function_call={"name": "get_weather"}, decoder="ar", temperature=0)
call_of(r, "get_weather", "functions + function_call")
same_calls(r, "srv_tool_named", "functions + function_call")
check(r["choices"][0]["message"].get("function_call") == r["choices"][0]["message"]["tool_calls"][0]["function"]
      if r["choices"][0]["message"].get("tool_calls") else False, "function_call: %s" % r["choices"][0]["message"])
# a call and its result sent back: rendered as the server renders them, answered as the server answers
srv_prompt = json.load(open(T + "/srv_tool_tmpl.json"))["prompt"]
check("<tool_response>" in srv_prompt and "<tool_call>" in srv_prompt, "the server's prompt: %r" % srv_prompt[-300:])
check(tl._model.tokenize_chat_json(BACK, tools=TOOLS) == tl.tokenize(srv_prompt.encode(), special=True), "the tool conversation's ids differ from the server's prompt")
back = tl.create_chat_completion(BACK, tools=TOOLS, decoder="ar", temperature=0, max_tokens=16)["choices"][0]["message"]
check(back["content"] == srv_msg("srv_tool_back")["content"], "after a tool result: %r, the server %r" % (back["content"], srv_msg("srv_tool_back")["content"]))
# refused, one line
raises(refusion.RefusionValueError, "function.name must be", tl.create_chat_completion, TMSGS,
       tools=[{"type": "function", "function": {"parameters": ADD}}], tool_choice="required")
raises(refusion.RefusionValueError, "parameters must be a JSON schema object", tl.create_chat_completion, TMSGS,
       tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}])
raises(refusion.RefusionValueError, "'format' is not enforced", tl.create_chat_completion, TMSGS, decoder="ar",
       tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}],
       tool_choice=NAMED("f"))
raises(refusion.RefusionValueError, "which is not one of \"tools\"", tl.create_chat_completion, TMSGS, tools=TOOLS, tool_choice=NAMED("nope"))
raises(refusion.RefusionValueError, "not streamed", tl.create_chat_completion, TMSGS, tools=TOOLS, tool_choice="required", stream=True)
raises(refusion.RefusionValueError, "at most one of", tl.create_chat_completion, TMSGS, tools=TOOLS, tool_choice="required", grammar=YN)
raises(refusion.RefusionValueError, "not both", tl.create_chat_completion, TMSGS, tools=TOOLS, functions=[TOOLS[0]["function"]])
tl.close()

# ---- refused, with the library's one-line message ----------------------------------------------
e = raises(refusion.RefusionValueError, "line 1, column 14: undefined rule 'foo'", llm.create_chat_completion, yn,
           grammar=LlamaGrammar.from_string('root ::= "a" foo'))
check(isinstance(e, ValueError), "a bad grammar's error is not a ValueError")
raises(refusion.RefusionValueError, "expected ')'", llm, QR, grammar=LlamaGrammar.from_string('root ::= ("a"'))
raises(refusion.RefusionValueError, "no 'root' rule", llm.create_chat_completion, yn, grammar=LlamaGrammar.from_string('answer ::= "a"'))
bad_schema = {"type": "object", "properties": {"date": {"type": "string", "format": "date"}}}
raises(refusion.RefusionValueError, "/properties/date: 'format' is not enforced", llm.create_chat_completion, msgs,
       response_format={"type": "json_schema", "json_schema": {"schema": bad_schema}})
raises(refusion.RefusionValueError, "'uniqueItems' is not supported", llm.create_chat_completion, msgs,
       grammar=LlamaGrammar.from_json_schema('{"type": "array", "uniqueItems": true}'))
raises(refusion.RefusionValueError, "'minimum' on a number", llm.create_chat_completion, msgs,
       response_format={"type": "json_object", "schema": {"type": "number", "minimum": 1.5}})
raises(refusion.RefusionValueError, "json schema: not JSON", llm.create_chat_completion, msgs, grammar=LlamaGrammar.from_json_schema("{nope"))
raises(refusion.RefusionValueError, "not both", llm.create_chat_completion, msgs, grammar=YN, response_format={"type": "json_object"})
raises(refusion.RefusionValueError, "grammar must be a LlamaGrammar", llm.create_chat_completion, yn, grammar=GYN)
raises(refusion.RefusionValueError, "needs \"json_schema\": {\"schema\"", llm.create_chat_completion, msgs, response_format={"type": "json_schema"})
raises(refusion.RefusionValueError, "response_format must be", llm.create_chat_completion, msgs, response_format={"type": "xml"})
raises(refusion.RefusionError, "error reading grammar file", LlamaGrammar.from_file, T + "/nope.gbnf")
open(T + "/empty.gbnf", "w").close()
raises(refusion.RefusionValueError, "is empty", LlamaGrammar.from_file, T + "/empty.gbnf")
# the Llama answers as before after the refusals
check(content(llm.create_chat_completion(yn, grammar=YN, decoder="ar", temperature=0)) == greedy, "after the refusals")

# ---- compiled once per model, freed with the model or the grammar -----------------------------
h = YN._compiled[id(llm._model)][2]
llm.create_chat_completion(yn, grammar=YN, max_tokens=2)
check(len(YN._compiled) == 1 and YN._compiled[id(llm._model)][2] == h, "the grammar was compiled again for the same model")
other = Llama(model_path=DEMO, n_threads=1, verbose=False)
check(content(other.create_chat_completion(yn, grammar=YN, decoder="ar", temperature=0)) == greedy, "a second Llama")
check(len(YN._compiled) == 2, "one compiled grammar per model: %d" % len(YN._compiled))
other.close()
check(len(YN._compiled) == 1, "close() left the compiled grammar: %d" % len(YN._compiled))
check(len(llm._model._format_grammars) >= 2, "response_format grammars are not kept per model")
for i in range(20):  # at most 16 kept
    llm.create_chat_completion(msgs, max_tokens=1, response_format={"type": "json_object", "schema": {"const": i}})
check(len(llm._model._format_grammars) == 16, "response_format grammars kept: %d" % len(llm._model._format_grammars))
llm.close()
check(not YN._compiled and not llm._model._format_grammars, "close() kept compiled grammars")
del YN, three, other
gc.collect()
finish("api_python (grammar)")
PY
rc5=$?
grep "^FAIL" "$T/grammar.err" >&2
grep -v "^FAIL" "$T/grammar.err" | grep -q . && { echo "FAIL: stderr of the grammar tests: $(grep -v "^FAIL" "$T/grammar.err" | tail -20)"; rc5=1; }
[ -s "$T/grammar.out" ] || { echo "FAIL: the grammar tests did not finish"; rc5=1; }

# ---- docs/python.md: its ```python examples run as written (from the source tree) -------------
python3 - "$SRC/docs/python.md" "$T/doc.py" <<'PY'
import re, sys
blocks = re.findall(r"^```python\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M)
open(sys.argv[2], "w").write("\n".join(blocks))
sys.exit(0 if len(blocks) >= 3 else 1)
PY
[ $? -eq 0 ] && ok || bad "docs/python.md: fewer than 3 python examples"
(cd "$SRC" && "${NOENV[@]}" "$T/v1/bin/python" "$T/doc.py" >"$T/doc.out" 2>"$T/doc.err") && ok ||
  bad "docs/python.md's examples: $(tail -5 "$T/doc.err")"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ $rc5 -eq 0 ] && [ $fails -eq 0 ]
