#!/usr/bin/env bash
# cli_readme.sh - README.md and docs/*.md stay true: every `./build/refusion ...`
# and `curl ...` line of their command blocks runs as written (in a scratch
# directory holding the repository's models/ and tests/, with ./build/refusion the
# binary under test) and exits 0, except the ones too big or slow for CI or
# interactive: 0.6B / 8B checkpoints, training, the paper's checkpoint,
# `eval` and `probe` over 30 examples and `distill` over a training set
# (minutes on a loaded 2-core machine; tests/cli_tasks.sh, cli_probe.sh and
# cli_distill.sh run them), `chat` (cli_options.sh
# drives it in a pseudo-terminal), scripts/*. The HTTP block runs against the server it starts (its
# port moved to a free one); the demo model's answers must be right: the
# code task's function, the streamed answer cut before the "return" stop,
# /metrics counting the requests. The outputs the pages show are checked
# too (greedy decoding: fixed text): a command line followed by lines
# `# prints: TEXT` must print each TEXT on stdout, and the README's set-up
# command (the refusion part after its `&&`s) must print the block shown
# under it, line for line ("..." standing for any lines), with the token and
# model-call counts its text gives ("here N tokens in M model calls").
set -u
command -v curl >/dev/null || { echo "FAIL: curl is needed (scripts/install-deps.sh)" >&2; exit 1; }
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup cli_readme
export XDG_CACHE_HOME="$T/cache" # the README's `refusion tune` writes its cache there, not in the one the other tests share

W=$T/w
mkdir -p "$W/build"
ln -s "$(cd "$SRC" && pwd)/models" "$W/models"
ln -s "$(cd "$SRC" && pwd)/tests" "$W/tests" # the fixtures some examples read (templates, task files)
ln -s "$BIN" "$W/build/refusion"
cd "$W" || exit 1

# the command lines: indented four spaces, starting with the binary, a pipe into it, or curl
# README.md first, then docs/ in name order; a page's curl lines go to the
# server its own serve line started
for page in "$SRC/README.md" "$SRC"/docs/*.md; do
  grep -E '^    (\./build/refusion |echo .*\| \./build/refusion |curl )' "$page" | sed 's/^    //'
done >"$T/all"
grep -vE -- '--preset (0\.6b|8b)|/tmp/qwen3-8b|runs/paper/| train | chat | eval | probe | distill |scripts/' "$T/all" >"$T/run"
[ "$(wc -l <"$T/run")" -ge 10 ] && ok || bad "only $(wc -l <"$T/run") README/docs commands found"
PORT=$((20000 + $$ % 20000))
n=0
while IFS= read -r line; do
  n=$((n + 1))
  line=${line//8080/$PORT}
  case "$line" in
  *"serve "*"&"*)
    if [ -n "$SPID" ]; then kill -TERM "$SPID"; wait "$SPID" 2>/dev/null; fi
    eval "${line%&} 2>\"$T/server.log\" &"
    SPID=$!
    for _ in $(seq 1 100); do grep -q "listening on" "$T/server.log" 2>/dev/null && break; sleep 0.1; done
    grep -q "listening on" "$T/server.log" && ok || bad "README serve did not start: $(cat "$T/server.log")"
    ;;
  *)
    timeout 120 bash -c "$line" >"$T/out.$n" 2>"$T/err.$n" </dev/null
    rc=$?
    [ $rc -eq 0 ] && ok || bad "README command exits $rc: $line: $(tail -c 300 "$T/err.$n")"
    ;;
  esac
  echo "$line" >"$T/cmd.$n"
done <"$T/run"

# the answers the README promises
out_of() { grep -lF -- "$1" "$T"/cmd.* | head -1 | sed 's/cmd/out/'; }
f=$(out_of 'multiply by 3, then add 2." --slot-size')
grep -q '"text":"def f(x):\\n    y = x \* 3\\n    y = y + 2\\n    return y"' "$f" 2>/dev/null && ok || bad "generate (code task): $(head -c 300 "$f")"
f=$(out_of 'add 4, then multiply by 2')
grep -q 'y = x + 4' "$f" 2>/dev/null && grep -q 'y = y \* 2' "$f" && ok || bad "generate from stdin: $(head -c 300 "$f")"
f=$(out_of 'then add 2."}]}')
grep -q 'def f(x):\\n    y = x \* 3\\n    y = y + 2\\n    return y' "$f" 2>/dev/null && ok || bad "HTTP chat: $(head -c 400 "$f")"
f=$(out_of '"stop": ["return"]')
text=$(sed -n 's/^data: //p' "$f" | grep -v '^\[DONE\]' | node -e '
  let t = ""; for (const l of require("fs").readFileSync(0, "utf8").trim().split("\n")) { const o = JSON.parse(l); if (o.choices.length) t += o.choices[0].delta.content || ""; }
  process.stdout.write(t)' 2>/dev/null)
case "$text" in *"y = x + 5"*) case "$text" in *return*) bad "stop ignored: $text" ;; *) ok ;; esac ;; *) bad "HTTP stream: '$text' $(head -c 300 "$f")" ;; esac
grep -q 'data: \[DONE\]' "$f" && grep -q '"choices":\[\],.*"usage":{"prompt_tokens"' "$f" && ok || bad "stream: no usage chunk / [DONE]"
f=$(out_of 'localhost:'"$PORT"'/metrics')
grep -qE '^refusion_requests_total [2-9]' "$f" 2>/dev/null && ok || bad "/metrics: $(head -c 300 "$f")"

if [ -n "$SPID" ]; then
  kill -TERM "$SPID"
  wait "$SPID" 2>/dev/null
  SPID=""
fi

# the outputs the pages show: `# prints: TEXT` under a command line
for page in "$SRC/README.md" "$SRC"/docs/*.md; do
  awk -v page="${page##*/}" '
    /^    (\.\/build\/refusion |echo .*\| \.\/build\/refusion |curl )/ { cmd = substr($0, 5); next }
    /^    # prints: / { if (cmd != "") print page "\t" cmd "\t" substr($0, 15); else print page "\t\t" substr($0, 15); next }
    { cmd = "" }' "$page"
done >"$T/prints"
[ "$(grep -c "^README.md" "$T/prints")" -ge 3 ] && ok || bad "README: fewer than 3 '# prints:' lines ($(grep -c . "$T/prints"))"
while IFS=$'\t' read -r page cmd text; do
  [ -n "$cmd" ] || { bad "$page: '# prints: $text' under no command line"; continue; }
  f=$(grep -lxF -- "${cmd//8080/$PORT}" "$T"/cmd.* 2>/dev/null | head -1)
  [ -n "$f" ] || { bad "$page: '# prints:' under a command not run here: $cmd"; continue; }
  f=${f/cmd./out.}
  grep -qF -- "$text" "$f" && ok || bad "$page: '$cmd' does not print '$text': $(head -c 300 "$f")"
done <"$T/prints"

# the README's set-up command and the visualisation shown under it
setup=$(sed -n 's/^    bash scripts\/install-deps\.sh && .* && \(\.\/build\/refusion .*\)$/\1/p' "$SRC/README.md")
[ -n "$setup" ] && ok || bad "README: no set-up line 'bash scripts/install-deps.sh && ... && ./build/refusion ...'"
# the first indented block after the prose that follows the set-up line
awk 'f == 0 && /^    bash scripts\/install-deps\.sh && / { f = 1; next }
     f == 1 && /^[^ ]/ { f = 2; next }
     f == 2 && /^    / { f = 3 }
     f == 3 { if ($0 == "") exit; print substr($0, 5) }' "$SRC/README.md" >"$T/shown"
[ "$(grep -c . "$T/shown")" -ge 5 ] && ok || bad "README: no output block under the set-up command"
counts=$(tr '\n' ' ' <"$SRC/README.md" | grep -o 'here [0-9]* tokens in [0-9]* model calls' | head -1)
[ -n "$counts" ] && ok || bad "README: no 'here N tokens in M model calls' after the set-up command"
if [ -n "$setup" ]; then
  timeout 120 bash -c "$setup" >"$T/setup.out" 2>"$T/setup.err" </dev/null
  [ $? -eq 0 ] && ok || bad "README set-up command fails: $setup: $(tail -c 300 "$T/setup.err")"
  # each run of shown lines between "..." must appear as consecutive output lines, in order
  mapfile -t got <"$T/setup.out"
  mapfile -t want <"$T/shown"
  pos=0 i=0 seg_ok=1
  while [ $i -lt ${#want[@]} ] && [ $seg_ok -eq 1 ]; do
    [ "${want[$i]}" = "..." ] && { i=$((i + 1)); continue; }
    j=$i
    while [ $j -lt ${#want[@]} ] && [ "${want[$j]}" != "..." ]; do j=$((j + 1)); done
    found=-1
    for ((s = pos; s + j - i <= ${#got[@]}; s++)); do
      m=1
      for ((k = i; k < j; k++)); do [ "${got[$((s + k - i))]}" = "${want[$k]}" ] || { m=0; break; }; done
      [ $m -eq 1 ] && { found=$s; break; }
    done
    if [ $found -lt 0 ]; then seg_ok=0; bad "README set-up output: lines $((i + 1))-$j of the block shown under it ('${want[$i]}' ...) not printed one after the other; printed: $(head -c 600 "$T/setup.out")"; fi
    pos=$((found + j - i)) i=$j
  done
  [ $seg_ok -eq 1 ] && ok
  read -r _ ntok _ _ ncall _ _ <<<"$counts"
  grep -q "$ntok tokens, $ncall model calls" "$T/setup.err" && ok || bad "README says $counts; the set-up command reports: $(tail -c 200 "$T/setup.err")"
fi

echo "cli_readme: $pass checks passed, $fails failed ($n README commands run)"
[ $fails -eq 0 ]
