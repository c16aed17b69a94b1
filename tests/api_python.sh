#!/usr/bin/env bash
# api_python.sh - the ctypes binding (python/refusion.py) over this build's
# librefusion.so: tokenize gives the CLI's prompt ids; generate gives the
# same answer ids as `refusion generate --json` for ReFusion (also AR-verified
# and sampled), AR (greedy and sampled) and MDM; streamed tokens add up to
# the answer; a session reused across calls of other sizes repeats its
# answers; tokenize_chat (a system message: the CLI's --system prompt),
# token_id, tokenizer_eos_id; cancel and bad paths raise RefusionError. Exit 77 (skipped) when
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
