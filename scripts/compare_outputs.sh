#!/usr/bin/env bash
# compare_outputs.sh - record what a build answers on a fixed set of prompts
# and decoding settings, through the three ways in: `refusion generate
# --json`, `refusion serve` (curl) and the Python binding. Two builds of
# different source trees that should decode alike give identical files.
#
#   scripts/compare_outputs.sh BUILD_DIR OUT_DIR [SRC_DIR]
#   diff -r OUT_A OUT_B        # nothing: the same answers, byte for byte
#
# BUILD_DIR holds the refusion binary and librefusion.so; SRC_DIR (default:
# the tree above this script) gives python/ and models/. Timings (seconds,
# tokens per second) are removed from the JSON, keys are sorted; everything
# else (ids, text, model calls, steps, acceptance counts) is kept.
set -u
BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
OUT=${2:?OUT_DIR}
SRC=$(cd "${3:-$(dirname "$0")/..}" && pwd)
BIN=$BUILD/refusion
RF=$SRC/models/refusion-demo
AR=$SRC/models/ar-demo
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
# drop what depends on the clock (and the seed a server draws per request
# when none is given), sort keys
clean() { jq -S 'walk(if type == "object" then with_entries(select(.key | test("second|per_s|_s$|_ms$|^created$|^id$|^seed$|time") | not)) else . end)' | sed "s|$SRC|SRC|g"; }

Q1="What is 12 plus 5?"
Q2="Write one sentence about the sea."
gen() { # name, generate options...
  local name=$1
  shift
  "$BIN" generate --threads 1 --json "$@" 2>"$OUT/$name.err" | clean >"$OUT/$name.json"
  echo "exit ${PIPESTATUS[0]}" >>"$OUT/$name.err"
}
gen rf_cfg -m "$RF" -p "$Q1" -n 32
gen rf_plain -m "$RF" -p "$Q1" -n 32 --decoder refusion --generation-config none
gen rf_blocks -m "$RF" -p "$Q2" -n 24 --blocks 3 --slot-size 2 --generation-config none
gen rf_both -m "$RF" -p "$Q1" -n 24 --ar-verify both --generation-config none
gen rf_look -m "$RF" -p "$Q1" -n 24 --ar-verify correct --lookahead --jacobi --generation-config none
gen rf_temp -m "$RF" -p "$Q2" -n 24 --temp 0.8 -s 7 --blocks 2 --generation-config none
gen rf_roll -m "$RF" -p "$Q1" -n 32 --rolling --slot-size 3
gen rf_roll_s -m "$RF" -p "$Q2" -n 32 --rolling --temp 0.7 --top-k 20 --top-p 0.9 --min-p 0.05 -s 5
gen rf_pen -m "$RF" -p "$Q2" -n 24 --rolling --repeat-penalty 1.3 --presence-penalty 0.5 --frequency-penalty 0.2 --repeat-last-n 16
gen rf_preset -m "$RF" -p "$Q1" --preset gsm8k -n 16
gen rf_ign -m "$RF" -p "$Q1" -n 16 --ignore-eos --generation-config none
gen ar -m "$AR" -p "$Q1" -n 24 --decoder ar
gen ar_samp -m "$AR" -p "$Q2" -n 24 --decoder ar --temp 0.9 --top-k 20 --top-p 0.9 -s 3
gen ar_rf -m "$RF" -p "$Q1" -n 24 --decoder ar --generation-config none
gen mdm -m "$RF" -p "$Q1" -n 16 --decoder mdm --blocks 2 --generation-config none
gen mdm_steps -m "$RF" -p "$Q1" -n 16 --decoder mdm --steps 8 --generation-config none
gen bad_slot -m "$RF" -p "$Q1" --slot-size 0
gen bad_dec -m "$RF" -p "$Q1" --decoder xx
# eval: the task decoders over a fixed task file
"$BIN" tasks -o "$OUT/tasks.tmp" --seed 3 --train 10 --test 9 >/dev/null 2>&1
for dec in refusion ar mdm; do
  "$BIN" eval -m "$RF" --data "$OUT/tasks.tmp/test.json" --decoder $dec --limit 3 --gen-length 16 --threads 1 \
    --generation-config none --json --quiet -o "$OUT/eval.tmp" 2>"$OUT/eval_$dec.err" | clean |
    sed "s|$OUT|OUT|g" >"$OUT/eval_$dec.json"
  echo "exit ${PIPESTATUS[0]}" >>"$OUT/eval_$dec.err"
done
sed -i "s|$OUT|OUT|g" "$OUT"/eval_*.err
rm -rf "$OUT/tasks.tmp" "$OUT"/eval.tmp*
"$BIN" generate --help >"$OUT/generate_help.txt" 2>&1
"$BIN" serve --help >"$OUT/serve_help.txt" 2>&1
"$BIN" eval --help >"$OUT/eval_help.txt" 2>&1
"$BIN" generate -m "$RF" -p "$Q1" -n 8 -v --threads 1 2>&1 >/dev/null | grep -v 'second\|tokens/s\|time' | sed "s|$SRC|SRC|g" >"$OUT/generate_verbose.txt"

# ---- the server ------------------------------------------------------------------------
LOG=$OUT/server.log.tmp
"$BIN" serve --host 127.0.0.1 --port 0 -m "$RF" --threads 1 -n 24 2>"$LOG" &
SPID=$!
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o 'http://127.0.0.1:[0-9]*' "$LOG" | head -1 | sed 's/.*://')
  [ -n "$PORT" ] && break
  sleep 0.1
done
URL=http://127.0.0.1:$PORT
post() { # name, path, body
  curl -s -m 120 -H 'Content-Type: application/json' -d "$3" -w '\n%{http_code}\n' "$URL$2" >"$OUT/$1.raw"
  head -n -1 "$OUT/$1.raw" | head -1 | clean >"$OUT/$1.json" 2>/dev/null
  tail -1 "$OUT/$1.raw" >"$OUT/$1.code"
  rm -f "$OUT/$1.raw"
}
post srv_chat /v1/chat/completions '{"messages":[{"role":"user","content":"What is 12 plus 5?"}],"max_tokens":16}'
post srv_comp /v1/completions '{"prompt":"The sea is","max_tokens":16,"temperature":0.7,"seed":9}'
post srv_ar /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":12,"mode":"ar","temperature":0.8,"top_k":10,"seed":2}'
post srv_rf /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"mode":"refusion","rolling":false,"slot_size":2,"blocks":2,"ar_verify":"both"}'
post srv_mdm /v1/completions '{"prompt":"One two","max_tokens":8,"mode":"mdm","steps":4}'
post srv_bad /v1/completions '{"prompt":"x","slot_size":0}'
post srv_bad2 /v1/completions '{"prompt":"x","mode":"bert"}'
kill -TERM "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
rm -f "$LOG"

# ---- the Python binding ----------------------------------------------------------------
REFUSION_LIB="$BUILD/librefusion.so" PYTHONPATH="$SRC/python" python3 - "$RF" "$AR" 2>&1 <<'PY' | sed "s|$SRC|SRC|g" >"$OUT/python.txt"
import json, sys
import refusion
rf, ar = sys.argv[1], sys.argv[2]
m = refusion.Model(rf)
ids = m.tokenize("What is 12 plus 5?", chat=True)
s = m.session()
cases = [
    dict(gen_length=16, n_blocks=1),
    dict(gen_length=16, n_blocks=2, slot_size=2, ar_verify="both"),
    dict(gen_length=16, temperature=0.8, seed=7),
    dict(gen_length=16, rolling=1, slot_size=3, temperature=0.7, seed=5, min_p=0.05),
    dict(method="ar", gen_length=12),
    dict(method="ar", gen_length=12, temperature=0.9, top_k=20, top_p=0.9, seed=3, repeat_penalty=1.2),
    dict(method="mdm", gen_length=8, n_blocks=2),
    dict(gen_length=12, lookahead=1, jacobi=1, ar_verify="correct"),
    dict(gen_length=12, no_cache=1),
]
for kw in cases:
    got = s.generate(ids, **kw)
    st = {k: v for k, v in s.stats.items() if "second" not in k and "per_s" not in k}
    print(json.dumps(kw, sort_keys=True), got, json.dumps(st, sort_keys=True, default=str))
r = m.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=12)
print(r["choices"][0]["message"]["content"])
for bad in [dict(slot_size=0), dict(method="xx"), dict(nope=1)]:
    try:
        s.generate(ids, **bad)
        print("accepted", bad)
    except refusion.RefusionError as e:
        print("error", e)
PY
echo "exit ${PIPESTATUS[0]}" >>"$OUT/python.txt"
ls "$OUT" | wc -l
