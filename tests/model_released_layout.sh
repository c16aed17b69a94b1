#!/usr/bin/env bash
# model_released_layout.sh - a random checkpoint in exactly the layout of
# the released ReFusion model (fine-tuned from Qwen3-8B by the authors'
# train.py): vocab_size 151,671 (embeddings resized to len(tokenizer)),
# bos_token_id 151669 (<|beginoftext|>), mask_token_id 151670, an untied
# head, the slow tokenizer files (vocab.json, merges.txt, added_tokens.json,
# tokenizer_config.json with added_tokens_decoder: Qwen3's added tokens plus
# ReFusion's two, no tokenizer.json) and chat_template.jinja (Qwen3's). It
# must load, tokenize (never prepending the BOS), render prompts as jinja2
# renders the template (add_generation_prompt, the thinking default: no empty
# think block), decode with every decoder, and convert to GGUF keeping all
# 151,671 rows with add_bos_token = false. And special ids below the
# vocabulary are never guessed: without mask_token_id, a vocabulary of
# 151,670 ids is one error naming mask_token_id.
set -euo pipefail
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup released
rf_qwen_tokenizer
PY=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import jinja2' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "needs python3 with jinja2 (python3-jinja2, scripts/install-deps.sh)"
M=$T/refusion-8b-layout

# a small random model with the released vocabulary and ids, untied
"$BIN" init -o "$M" --preset tiny --vocab 151671 --tied 0 --seed 7 > /dev/null || fail "init"
"$PY" - "$QWEN" "$M" "$SRC/tests/data/templates/qwen3.jinja" <<'EOF'
import json, shutil, sys
src, m, tpl = sys.argv[1:4]
cfg = json.load(open(m + "/config.json"))
cfg.update(vocab_size=151671, bos_token_id=151669, mask_token_id=151670, eos_token_id=151645,
           pad_token_id=151643, tie_word_embeddings=False)
cfg.pop("bot_token_id", None)  # the released config names only the mask
json.dump(cfg, open(m + "/config.json", "w"), indent=2)
tj = json.load(open(src + "/tokenizer.json", encoding="utf-8"))
tc = json.load(open(src + "/tokenizer_config.json", encoding="utf-8"))
json.dump(tj["model"]["vocab"], open(m + "/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
merges = [x if isinstance(x, str) else " ".join(x) for x in tj["model"]["merges"]]
open(m + "/merges.txt", "w", encoding="utf-8").write("#version: 0.2\n" + "\n".join(merges) + "\n")
added = {a["content"]: a["id"] for a in tj["added_tokens"]}
dec = dict(tc["added_tokens_decoder"])
for content, i in (("<|beginoftext|>", 151669), ("<|mask|>", 151670)):  # train.py's add_special_tokens
    added[content] = i
    dec[str(i)] = {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                   "single_word": False, "special": True}
json.dump(added, open(m + "/added_tokens.json", "w", encoding="utf-8"), indent=2, ensure_ascii=False)
tc["added_tokens_decoder"] = dec
tc["additional_special_tokens"] = tc.get("additional_special_tokens", []) + ["<|beginoftext|>", "<|mask|>"]
tc["bos_token"] = None
tc["add_bos_token"] = False
tc.pop("chat_template", None)  # transformers >= 4.43 writes it to chat_template.jinja
json.dump(tc, open(m + "/tokenizer_config.json", "w", encoding="utf-8"), indent=2, ensure_ascii=False)
shutil.copy(tpl, m + "/chat_template.jinja")
EOF
[ ! -e "$M/tokenizer.json" ] || fail "the fixture has a tokenizer.json"

# loads, with the released shape
"$BIN" info -m "$M" --json > "$T/info.json" || fail "info: $(cat "$T/info.json")"
"$PY" - "$T/info.json" <<'EOF' || fail "info: $(cut -c 1-400 "$T/info.json")"
import json, sys
i = json.load(open(sys.argv[1]))
c = i.get("config", i)
flat = json.dumps(i)
assert '"vocab_size": 151671' in flat, "vocab_size"
assert '"mask_id": 151670' in flat and '"bos_id": 151669' in flat, "ids"
EOF
echo "ok   info: vocab 151671, mask 151670, bos 151669"
"$BIN" tokenize -m "$M" --info --json > "$T/tinfo"
grep -q '"vocab_size":151671' "$T/tinfo" && grep -q '"mask":{"id":151670' "$T/tinfo" ||
  fail "tokenizer: $(cat "$T/tinfo" | cut -c 1-300)"
echo "ok   tokenizer from the slow files: $(cut -c 1-110 "$T/tinfo")"

# no BOS is prepended to text or prompts
ids=$("$BIN" tokenize -m "$M" --json "Hello world")
[ "$ids" = "[9707,1879]" ] || fail "tokenize 'Hello world': $ids (Qwen3 gives [9707,1879], no BOS)"
echo "ok   plain text: $ids, no BOS"

# the prompt as the authors render it: Qwen3's template, add_generation_prompt, thinking default
Q="Tom has 12 apples. He buys 7 more. How many apples does he have now?"
printf '{"template": "%s", "vars": {"messages": [{"role": "user", "content": "%s"}], "add_generation_prompt": true, "tools": null, "documents": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "additional_special_tokens": %s}}\n' \
  "$M/chat_template.jinja" "$Q" "$("$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["additional_special_tokens"]))' "$M/tokenizer_config.json")" |
  "$PY" "$SRC/tests/data/templates/hf_render.py" > "$T/ref.json"
"$PY" -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"])' "$T/ref.json" > "$T/ref.txt"
"$BIN" tokenize -m "$M" --chat --text --user "$Q" > "$T/ours.txt"
cmp -s "$T/ref.txt" "$T/ours.txt" || fail "chat prompt differs from jinja2's: $(od -c "$T/ours.txt" | head -5)"
grep -q '<think>' "$T/ours.txt" && fail "the thinking default rendered a think block"
echo "ok   chat prompt == jinja2's rendering of chat_template.jinja ($(wc -c < "$T/ours.txt") bytes, no think block)"
want=$("$BIN" tokenize -m "$M" --chat --json --user "$Q")

# every decoder: prompt ids are the template's, never a BOS first
for dec in "--decoder refusion" "--decoder refusion --rolling" "--decoder refusion --ar-verify both" "--decoder ar" "--decoder mdm"; do
  # shellcheck disable=SC2086
  "$BIN" generate -m "$M" -p "$Q" $dec -n 8 --slot-size 4 --json > "$T/gen.json" 2> "$T/gen.err" ||
    fail "generate $dec: $(cat "$T/gen.err")"
  "$PY" - "$T/gen.json" "$want" <<'EOF' || fail "generate $dec: $(cut -c 1-300 "$T/gen.json")"
import json, sys
g = json.load(open(sys.argv[1]))
assert g["prompt_ids"] == json.loads(sys.argv[2]), "prompt ids"
assert g["prompt_ids"][0] != 151669, "BOS prepended"
assert 1 <= len(g["answer_ids"]) <= 8 and all(0 <= i < 151671 for i in g["answer_ids"]), "answer"
EOF
  echo "ok   generate $dec: $(grep -o '"answer_ids":\[[^]]*\]' "$T/gen.json")"
done

# GGUF: all 151,671 rows, add_bos_token false, the same tokenizer
"$BIN" convert -m "$M" -o "$M.gguf" --no-progress > /dev/null || fail "convert to GGUF"
"$PY" - "$M.gguf" <<'EOF' || fail "GGUF metadata"
import struct, sys
f = open(sys.argv[1], "rb")
def rd(fmt): return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
def s(): return f.read(rd("Q")).decode()
SC = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def val(t):
    if t == 8: return s()
    if t == 9:
        et, n = rd("I"), rd("Q")
        return [val(et) for _ in range(n)]
    return rd(SC[t])
assert f.read(4) == b"GGUF"
ver, nt, nkv = rd("I"), rd("Q"), rd("Q")
kv = {}
for _ in range(nkv):
    k = s(); kv[k] = val(rd("I"))
dims = {}
for _ in range(nt):
    name = s(); nd = rd("I"); d = [rd("Q") for _ in range(nd)]; rd("I"); rd("Q"); dims[name] = d
assert len(kv["tokenizer.ggml.tokens"]) == 151671, len(kv["tokenizer.ggml.tokens"])
assert kv["tokenizer.ggml.add_bos_token"] is False, kv["tokenizer.ggml.add_bos_token"]
assert kv["tokenizer.ggml.tokens"][151669] == "<|beginoftext|>" and kv["tokenizer.ggml.tokens"][151670] == "<|mask|>"
assert dims["token_embd.weight"][1] == 151671 and dims["output.weight"][1] == 151671, dims["token_embd.weight"]
assert "tokenizer.chat_template" in kv and "enable_thinking" in kv["tokenizer.chat_template"]
print("ok   GGUF: 151671 tokens, token_embd and output 151671 rows, add_bos_token false, the chat template kept")
EOF
[ "$("$BIN" tokenize -m "$M.gguf" --chat --json --user "$Q")" = "$want" ] || fail "GGUF: chat prompt ids differ"
"$BIN" generate -m "$M.gguf" -p "$Q" -n 4 --slot-size 4 --json > "$T/gen.json" 2>&1 || fail "generate from GGUF: $(cat "$T/gen.json")"
echo "ok   GGUF: same prompt ids, generates"

# special ids below the vocabulary are never guessed
N=$T/no-mask
mkdir "$N"
"$PY" - "$M/config.json" "$N/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c.pop("mask_token_id"); c["vocab_size"] = 151670
json.dump(c, open(sys.argv[2], "w"))
EOF
if "$BIN" info -m "$N" > /dev/null 2> "$T/err"; then fail "a config without mask_token_id (vocab 151670) loaded"; fi
grep -q 'no "mask_token_id"' "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] || fail "no mask_token_id: $(cat "$T/err")"
echo "ok   no mask_token_id, vocab 151670: $(cat "$T/err")"
echo "model_released_layout: OK"
