#!/usr/bin/env bash
# tokenizer_jinja.sh - chat templates rendered by the C Jinja interpreter
# (src/tokenizer/jinja.c, through `refusion tokenize --chat-template FILE
# --jsonl`) against jinja2 set up as transformers' apply_chat_template sets
# it up (tests/data/templates/hf_render.py, Debian's python3-jinja2), byte
# for byte: Qwen3's template (tools, tool calls, thinking on / off,
# multi-turn reasoning), the demo model's own, plain ChatML, and templates in
# the style of Llama 3, Mistral, Gemma and DeepSeek, and one that uses every
# filter the interpreter has (filters.jinja), each over every
# conversation of tests/data/templates/conversations.json. Where jinja2
# raises, we must fail too, with one error line naming a line and column.
# Then: the built-in Qwen3 renderer equals Qwen3's template on the plain
# conversations; the model's own template is used by default (a ChatML
# template with another system prompt is not replaced by the built-in one);
# chat_template.jinja wins over tokenizer_config.json; named template lists
# pick "default"; and templates that are broken, loop too long, recurse too
# deep or grow too large fail with one clear line.
set -uo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup tokenizer_jinja
WORK=$T
D=$SRC/tests/data/templates
DEMO=$SRC/models/refusion-demo

PY=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import jinja2' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "tokenizer_jinja: needs python3 with jinja2 (python3-jinja2, scripts/install-deps.sh)" >&2; exit 1; }

# the demo model's template as a file too
"$PY" -c 'import json,sys; open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["chat_template"])' \
  "$DEMO/tokenizer_config.json" "$WORK/demo.jinja"

# one JSON line per conversation: what our side reads (the template variables)
# and what the reference renders with (the same, plus the tokenizer config's
# special tokens, tools=None and documents=None, as apply_chat_template adds them)
"$PY" - "$D/conversations.json" "$DEMO/tokenizer_config.json" "$WORK" <<'EOF'
import json, sys
convs = json.load(open(sys.argv[1]))
cfg = json.load(open(sys.argv[2]))
special = {}
for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
    v = cfg.get(k)
    if isinstance(v, dict): v = v.get("content")
    if isinstance(v, str): special[k] = v
with open(sys.argv[3] + "/ours.jsonl", "w") as f:
    for c in convs: f.write(json.dumps(c["vars"], ensure_ascii=False) + "\n")
with open(sys.argv[3] + "/vars.jsonl", "w") as f:
    for c in convs:
        v = dict(special, tools=None, documents=None); v.update(c["vars"])
        f.write(json.dumps(v, ensure_ascii=False) + "\n")
with open(sys.argv[3] + "/names.txt", "w") as f:
    for c in convs: f.write(c["name"] + "\n")
EOF

# compare NAME REF OURS: line by line, text for text, error for error
compare() {
  "$PY" - "$@" "$WORK/names.txt" <<'EOF'
import json, sys
tname, ref_path, our_path, names_path = sys.argv[1:5]
ref = [json.loads(l) for l in open(ref_path)]
ours = [json.loads(l) for l in open(our_path)]
names = [l.rstrip("\n") for l in open(names_path)]
if len(ref) != len(ours):
    print(f"FAIL {tname}: {len(ref)} reference lines, {len(ours)} of ours"); sys.exit(1)
bad = 0
for name, r, o in zip(names, ref, ours):
    if "error" in r:
        if "error" not in o or "chat template: line" not in o["error"]:
            print(f"FAIL {tname} / {name}: jinja2 raised ({r['error']}), we gave {str(o)[:300]}"); bad += 1
        else:
            print(f"ok   {tname} / {name}: both fail: {o['error'][o['error'].index('chat template'):][:150]}")
    elif r.get("text") != o.get("text"):
        print(f"FAIL {tname} / {name}:\n  jinja2: {r.get('text')!r}\n  ours:   {o.get('text', o.get('error'))!r}"); bad += 1
    else:
        print(f"ok   {tname} / {name}: {len(r['text'])} bytes identical")
sys.exit(1 if bad else 0)
EOF
}

for t in "$D"/*.jinja "$WORK/demo.jinja"; do
  name=$(basename "$t" .jinja)
  "$PY" -c 'import json,sys
for l in open(sys.argv[1]): print(json.dumps({"template": sys.argv[2], "vars": json.loads(l)}, ensure_ascii=False))' \
    "$WORK/vars.jsonl" "$t" | "$PY" "$D/hf_render.py" > "$WORK/ref_$name.jsonl"
  "$BIN" tokenize -m "$DEMO" --chat-template "$t" --jsonl < "$WORK/ours.jsonl" > "$WORK/our_$name.jsonl" 2> "$WORK/err_$name"
  out=$(compare "$name" "$WORK/ref_$name.jsonl" "$WORK/our_$name.jsonl")
  rc=$?
  echo "$out" | grep '^ok' || true
  if [ $rc -ne 0 ]; then bad "$name: $(echo "$out" | grep -A2 '^FAIL' | head -c 2000)"; fi
done

# the built-in renderer is Qwen3's template for plain conversations: role +
# string content, no tools, no tool calls, no reasoning_content
"$PY" - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
ours = [json.loads(l) for l in open(w + "/ours.jsonl")]
ref = [json.loads(l) for l in open(w + "/ref_qwen3.jsonl")]
with open(w + "/plain.jsonl", "w") as f, open(w + "/plain_ref.jsonl", "w") as g:
    for v, r in zip(ours, ref):
        ms = v["messages"]
        if ms and not v.get("tools") and "text" in r and all(
                set(m) <= {"role", "content"} and isinstance(m.get("content"), str) for m in ms):
            f.write(json.dumps(v, ensure_ascii=False) + "\n"); g.write(json.dumps(r, ensure_ascii=False) + "\n")
EOF
"$BIN" tokenize -m "$DEMO" --chat-template builtin --jsonl < "$WORK/plain.jsonl" > "$WORK/plain_ours.jsonl"
n_plain=$(wc -l < "$WORK/plain.jsonl")
if [ "$n_plain" -ge 5 ] && "$PY" -c 'import json,sys
a=[json.loads(l)["text"] for l in open(sys.argv[1])]; b=[json.loads(l).get("text") for l in open(sys.argv[2])]
sys.exit(0 if a == b else 1)' "$WORK/plain_ref.jsonl" "$WORK/plain_ours.jsonl"; then
  ok "built-in renderer == Qwen3's template on $n_plain plain conversations"
else
  bad "built-in renderer differs from Qwen3's template ($n_plain plain conversations)"
fi

# the model's own template is the default: a ChatML template with another
# system prompt in tokenizer_config.json, then the same in chat_template.jinja
# (which wins), then a named list whose "default" is the one taken
M=$WORK/model
mkdir -p "$M"
cp "$DEMO/tokenizer.json" "$M/"
"$PY" - "$DEMO/tokenizer_config.json" "$D/chatml_system.jinja" "$M" <<'EOF'
import json, sys
cfg = json.load(open(sys.argv[1])); tpl = open(sys.argv[2]).read()
cfg["chat_template"] = tpl
json.dump(cfg, open(sys.argv[3] + "/tokenizer_config.json", "w"))
cfg["chat_template"] = [{"name": "tool_use", "template": "TOOLS {{ messages|length }}"}, {"name": "default", "template": tpl}]
json.dump(cfg, open(sys.argv[3] + "/named.json", "w"))
EOF
msgs='[{"role": "user", "content": "hi"}]'
want=$(printf '<|im_start|>system\nYou are a careful assistant that answers briefly.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')
got=$("$BIN" tokenize -m "$M" --chat --text "$msgs")
[ "$got" = "$want" ] && ok "tokenizer_config.json's template is used, not the built-in one" ||
  bad "tokenizer_config.json's template: got $(printf %q "$got")"
got=$("$BIN" tokenize -m "$M" --chat --text --jinja "$msgs")
[ "$got" = "$want" ] && ok "--jinja: the model's template" || bad "--jinja: got $(printf %q "$got")"
got=$("$BIN" tokenize -m "$M" --chat --text --chat-template builtin "$msgs")
[ "$got" = "$(printf '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')" ] && ok "--chat-template builtin" ||
  bad "--chat-template builtin: got $(printf %q "$got")"
printf '{{ "FROM JINJA FILE " + messages[0].content }}\n' > "$M/chat_template.jinja"
got=$("$BIN" tokenize -m "$M" --chat --text "$msgs")
[ "$got" = "FROM JINJA FILE hi" ] && ok "chat_template.jinja wins over tokenizer_config.json" ||
  bad "chat_template.jinja: got $(printf %q "$got")"
rm "$M/chat_template.jinja"
mv "$M/named.json" "$M/tokenizer_config.json"
got=$("$BIN" tokenize -m "$M" --chat --text "$msgs")
[ "$got" = "$want" ] && ok "a named template list: \"default\" is taken" || bad "named list: got $(printf %q "$got")"

# errors: one line, status 1, naming the file and the position
expect_error() {
  local name=$1 pat=$2; shift 2
  "$@" > "$WORK/out" 2> "$WORK/err"
  local rc=$? lines
  lines=$(wc -l < "$WORK/err")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pat" "$WORK/err"; then
    bad "$name: status $rc, stderr ($lines lines): $(head -c 300 "$WORK/err")"
  else
    ok "$name: $(cut -c 1-200 "$WORK/err")"
  fi
}
tpl_error() { # NAME PATTERN TEMPLATE-TEXT
  printf '%s' "$3" > "$WORK/bad.jinja"
  expect_error "$1" "$2" "$BIN" tokenize -m "$DEMO" --chat --text --chat-template "$WORK/bad.jinja" "$msgs"
}
tpl_error "unclosed block" 'bad.jinja: chat template: line 2, column 3: this block is never closed \(expected .\{% endif %\}.' $'x\n  {% if true %}\nyes'
tpl_error "stray endfor" "line 1, column 4: unexpected 'endfor'" '{% endfor %}'
tpl_error "unknown filter" "line 1, column 15: no filter named 'nosuch'" '{{ messages | nosuch }}'
tpl_error "incomplete expression" 'line 1, column 8: unexpected .* in an expression' '{{ 1 + }}'
tpl_error "unterminated string" 'line 1, column 4: unterminated string literal' "{{ 'abc }}"
tpl_error "raise_exception" 'line 1, column 5: raise_exception: no system message' "{{- raise_exception('no system message') }}"
tpl_error "raise_exception, a message of several lines" 'line 1, column 5: raise_exception: two  lines' $'{{- raise_exception(\'two\n\tlines\') }}'
tpl_error "undefined attribute" "line 1, column 20: 'dict object' has no attribute 'nope'" '{{ messages[0].nope.deeper }}'
tpl_error "endless loop" 'ran more than [0-9]+ steps' '{% for a in range(100000) %}{% for b in range(300) %}{% set x = b %}{% endfor %}{% endfor %}'
tpl_error "endless recursion" 'macro calls nest more than 100 deep' '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}'
tpl_error "huge output" 'the output is longer than' "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
tpl_error "huge value" 'more than 512 MiB of memory|too long' "{{ ('x' * 1000000) * 1000 }}"
tpl_error "deep syntax" 'nests too deeply' "{{ $(printf '(%.0s' $(seq 1 300))1$(printf ')%.0s' $(seq 1 300)) }}"
tpl_error "self-containing value" 'nests more than 100 levels' '{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}'
expect_error "missing template file" "nope.jinja" "$BIN" tokenize -m "$DEMO" --chat --text --chat-template "$WORK/nope.jinja" "$msgs"
expect_error "tools without a template" 'renders no tools' "$BIN" tokenize -m "$DEMO" --chat --text --chat-template builtin \
  '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}'

echo "tokenizer_jinja: $pass checks passed, $fails failed"
[ "$fails" -eq 0 ]
