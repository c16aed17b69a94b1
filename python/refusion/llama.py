"""llama - Llama: llama-cpp-python's class over librefusion.

    from refusion import Llama
    llm = Llama(model_path="models/refusion-demo")
    out = llm("Q: What is 2 + 3? A:", max_tokens=32, stop=["Q:", "\\n"])
    print(out["choices"][0]["text"])

Results are the dicts llama-cpp-python returns (OpenAI's shapes). A setting
not given comes from the model's generation_config.json, as in `refusion
generate` and `refusion serve` (rf_params_recommended), not from
llama-cpp-python's fixed sampling defaults."""
import ctypes
import json
import os
import sys
import time
import uuid

from ._library import MAX_TOP_LOGPROBS, L, RefusionValueError, library_path
from ._model import AR_VERIFY, METHODS, Model, _Run, params_dict, settings_params
from .llama_grammar import JSON_GBNF, LlamaGrammar

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
"""llama.cpp's "a random seed" (also -1)."""

# llama-cpp-python constructor arguments with no counterpart here that change
# nothing: accepted at any value (this build runs on the CPU, maps the
# weights, and sizes its model calls itself)
_CTOR_IGNORED = ("n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "use_mmap", "n_batch", "n_ubatch",
                 "n_threads_batch", "offload_kqv", "flash_attn", "op_offload", "swa_full", "no_perf", "numa",
                 "logits_all")
# ... and those that would change what is computed: accepted only at
# llama-cpp-python's default, refused otherwise (the reason in the message)
_CTOR_REFUSED = {
    "vocab_only": (False, "a model opens with its weights"),
    "use_mlock": (False, "the weights are memory-mapped, not locked"),
    "kv_overrides": (None, "GGUF metadata overrides are not supported"),
    "rope_scaling_type": ((None, -1), "the RoPE settings are the checkpoint's"),
    "pooling_type": ((None, -1), "no embeddings"),
    "attention_type": ((None, -1), "the attention is the checkpoint's"),
    "rope_freq_base": ((0, 0.0), "the RoPE settings are the checkpoint's"),
    "rope_freq_scale": ((0, 0.0), "the RoPE settings are the checkpoint's"),
    "yarn_ext_factor": ((-1, -1.0), "no YaRN"),
    "yarn_attn_factor": ((1, 1.0), "no YaRN"),
    "yarn_beta_fast": ((32, 32.0), "no YaRN"),
    "yarn_beta_slow": ((1, 1.0), "no YaRN"),
    "yarn_orig_ctx": (0, "no YaRN"),
    "embedding": (False, "no embeddings (this engine generates text)"),
    "lora_base": (None, "no LoRA adapters"),
    "lora_path": (None, "no LoRA adapters"),
    "lora_scale": ((1, 1.0), "no LoRA adapters"),
    "chat_handler": (None, "give a Jinja template file as chat_template= instead"),
    "draft_model": (None, "ReFusion drafts with the model itself (its decoders: decoder=)"),
    "tokenizer": (None, "the tokenizer is the model's"),
    "type_k": (None, "the KV cache is float"),
    "type_v": (None, "the KV cache is float"),
    "spm_infill": (False, "no infill prompts"),
}
# completion arguments of llama-cpp-python with nothing behind them here:
# accepted at their neutral value, refused otherwise
_CALL_REFUSED = {
    "suffix": (None, "no infill (suffix) completions"),
    "typical_p": ((1, 1.0), "no locally typical sampling"),
    "tfs_z": ((1, 1.0), "no tail-free sampling"),
    "mirostat_mode": (0, "no mirostat sampling"),
    "stopping_criteria": (None, "use stop= strings"),
    "logits_processor": (None, "no logits processors"),
    "logit_bias": (None, "no logit bias"),
}
_CALL_IGNORED = ("mirostat_tau", "mirostat_eta")  # mirostat_mode 0 is all that is accepted
# llama-cpp-python's sampling arguments that are rf_params fields by the same name
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty")


def _logprobs(p, on, n_top, stream, where, name):
    """p.logprobs / p.top_logprobs from the call's arguments (on: ask for
    them; n_top: the alternatives per token, 0..20)."""
    if not on:
        return
    if not isinstance(n_top, int) or isinstance(n_top, bool) or not 0 <= n_top <= MAX_TOP_LOGPROBS:
        raise RefusionValueError("%s: %s must be an integer in [0, %d], got %r" % (where, name, MAX_TOP_LOGPROBS,
                                                                                  n_top))
    if stream:
        raise RefusionValueError("%s: logprobs are not streamed by this binding (stream=False, or the server, "
                                 "which streams them)" % where)
    p.logprobs, p.top_logprobs = 1, n_top


def _piece(model, t):
    return model.detokenize_bytes([t], skip_special=False).decode("utf-8", "replace")


def _chat_logprobs(model, run):
    """OpenAI's choices[].logprobs of a chat answer (None: not asked)"""
    lps = run.kept_logprobs()
    if lps is None:
        return None

    def entry(t, lp):
        text = _piece(model, t)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {"content": [dict(entry(t, lp), top_logprobs=[entry(a, b) for a, b in top]) for t, lp, top, _ in lps],
            "refusal": None}


def _completion_logprobs(model, run, shift):
    """llama-cpp-python's (the completions API's) logprobs of an answer
    whose text starts at character shift (None: not asked)"""
    lps = run.kept_logprobs()
    if lps is None:
        return None
    tops = []
    for _, _, top, _ in lps:
        d = {}
        for a, b in top:
            d.setdefault(_piece(model, a), b)  # two tokens of one text: the likelier
        tops.append(d)
    return {"tokens": [_piece(model, t) for t, _, _, _ in lps], "text_offset": [shift + o for _, _, _, o in lps],
            "token_logprobs": [lp for _, lp, _, _ in lps], "top_logprobs": tops}


def _check_refused(table, given, where):
    for k, v in given.items():
        neutral, why = table[k]
        ok = v in neutral if isinstance(neutral, tuple) else v == neutral and type(v) is type(neutral) or v is neutral
        if not ok:
            raise RefusionValueError("%s: %s=%r is not supported: %s" % (where, k, v, why))


def _grammar_arg(grammar, where):
    if grammar is None or isinstance(grammar, LlamaGrammar):
        return grammar
    raise RefusionValueError("%s: grammar must be a LlamaGrammar (LlamaGrammar.from_string(gbnf), .from_file(path) "
                             "or .from_json_schema(schema_text)), got %s" % (where, type(grammar).__name__))


_FORMATS_KEPT = 16  # response_format grammars kept per model (the most recently used)


def _format_grammar(model, rf, where):
    """The LlamaGrammar of a chat's response_format (None: plain text):
    {"type": "text"}; {"type": "json_object"} (any JSON object, or with
    llama-cpp-python's "schema": a document valid under it); OpenAI's
    {"type": "json_schema", "json_schema": {"schema": {...}, "name", "strict",
    "description"}}. Kept per model, as the server's."""
    if rf is None:
        return None
    what = "%s: response_format" % where
    kind = rf.get("type") if isinstance(rf, dict) else None
    allowed = {"text": {"type"}, "json_object": {"type", "schema"}, "json_schema": {"type", "json_schema"}}
    if kind not in allowed:
        raise RefusionValueError("%s must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}, got %r"
                                 % (what, rf))
    extra = sorted(set(rf) - allowed[kind])
    if extra:
        raise RefusionValueError("%s: {\"type\": \"%s\"} takes no %s" % (what, kind, ", ".join(map(repr, extra))))
    if kind == "text":
        return None
    key = None
    if kind == "json_object":
        schema = rf.get("schema")
        key = ("gbnf", JSON_GBNF) if schema is None else None
    else:
        w = rf.get("json_schema")
        if not isinstance(w, dict) or "schema" not in w:
            raise RefusionValueError("%s: {\"type\": \"json_schema\"} needs \"json_schema\": {\"schema\": {...}}"
                                     % what)
        extra = sorted(set(w) - {"schema", "name", "strict", "description"})
        if extra:
            raise RefusionValueError("%s: \"json_schema\" takes no %s" % (what, ", ".join(map(repr, extra))))
        schema = w["schema"]
    if key is None:
        try:
            key = ("json_schema", json.dumps(schema, ensure_ascii=False))
        except (TypeError, ValueError) as e:
            raise RefusionValueError("%s: the schema is not JSON: %s" % (what, e)) from None
    cache = model._format_grammars
    g = cache.pop(key, None)
    if g is None:
        g = LlamaGrammar(_grammar=key[1]) if key[0] == "gbnf" else LlamaGrammar(_json_schema=key[1])
        g._constraint(model, what)  # compiled now: a refused schema is not kept
        while len(cache) >= _FORMATS_KEPT:  # dropped, not freed: a stream not yet read may hold it
            cache.pop(next(iter(cache)))
    cache[key] = g  # the most recent last
    return g


class Llama:
    """A model as llama-cpp-python's Llama: the constructor's arguments that
    mean something here (model_path, n_ctx, n_threads, seed, verbose,
    chat_format, chat_template; n_batch and the GPU arguments accepted and
    ignored), completions (__call__, create_completion), chat completions,
    tokenize / detokenize on bytes, n_ctx(), n_vocab(), token_eos(),
    token_bos(), close() and the context manager; grammar= (a LlamaGrammar)
    and a JSON response_format constrain the answer. Extra keyword arguments
    are ReFusion's own settings (decoder, slot_size, n_blocks,
    slot_threshold, token_threshold, rolling, ar_verify, ...), the
    defaults of every call, over the model's generation_config.json."""

    def __init__(self, model_path, *, n_ctx=0, n_threads=None, seed=None, verbose=True, chat_format=None,
                 chat_template=None, last_n_tokens_size=None, lib=None, **kwargs):
        """Open the checkpoint directory or .gguf file at model_path.
        n_ctx: the prompt + answer limit in tokens (0: the model's context,
        not llama-cpp-python's 512); n_threads: the OpenMP threads (None:
        OMP_NUM_THREADS or every core); seed: the sampling seed of every call
        (None: the model's, 0 unless its generation_config.json says; -1 or
        LLAMA_DEFAULT_SEED: a random one per call); verbose: a line on
        stderr saying what was loaded and the recommended settings;
        chat_format: None (the model's template) or "chatml" (the built-in
        Qwen3 ChatML renderer); chat_template: a Jinja template file, or
        "builtin", in place of the model's; last_n_tokens_size: the
        penalties' window (penalty_last_n); lib: a librefusion.so to load.
        Other keyword arguments: llama-cpp-python's that change nothing here
        (n_gpu_layers, n_batch, use_mmap, ...) are accepted; those that
        would change what is computed (lora_path, embedding=True,
        draft_model, ...) raise ValueError unless at their default; the
        rest must be ReFusion settings."""
        self._model = None
        ignored = {k: kwargs.pop(k) for k in list(kwargs) if k in _CTOR_IGNORED}
        _check_refused(_CTOR_REFUSED, {k: kwargs.pop(k) for k in list(kwargs) if k in _CTOR_REFUSED}, "Llama")
        if chat_format is not None and chat_format != "chatml":
            raise RefusionValueError("Llama: chat_format=%r: the chat formats are None (the model's template) and "
                                     "\"chatml\" (the built-in renderer); give a Jinja file as chat_template=" %
                                     (chat_format,))
        if chat_format == "chatml" and chat_template is not None:
            raise RefusionValueError("Llama: give chat_format or chat_template, not both")
        if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 0:
            raise RefusionValueError("Llama: n_ctx must be an integer >= 0 (0: the model's context), got %r" % (n_ctx,))
        if n_threads is not None and (not isinstance(n_threads, int) or isinstance(n_threads, bool) or n_threads < 1):
            raise RefusionValueError("Llama: n_threads must be an integer >= 1 or None, got %r" % (n_threads,))
        self.model_path = os.fspath(model_path)
        if not os.path.exists(self.model_path):
            raise RefusionValueError("Model path does not exist: %s" % self.model_path)
        self.verbose = verbose
        self.chat_format = chat_format
        self._model = Model(self.model_path, lib=lib,
                            chat_template="builtin" if chat_format == "chatml" else chat_template)
        try:
            self._n_ctx = min(n_ctx, self._model.n_ctx) if n_ctx else self._model.n_ctx
            self.n_threads = n_threads
            self._session = self._model._shared_session()
            self._session.threads = n_threads or 0
            self._recommended = self._model.recommended()
            self._settings = dict(kwargs)  # ReFusion settings given here: every call's defaults
            if last_n_tokens_size is not None:
                self._settings["penalty_last_n"] = last_n_tokens_size
            self._base = settings_params(self._recommended, self._settings)  # checked now, not at the first call
        except BaseException:
            self._model.close()
            raise
        self._seed = None
        self.set_seed(seed)
        if verbose:
            self._say_loaded(ignored)

    def _say_loaded(self, ignored):
        rec = params_dict(self._recommended)
        default = params_dict(L.lib.rf_params_default())
        changed = " ".join("%s=%s" % (k, rec[k]) for k in rec if rec[k] != default[k])
        print("refusion: %s: vocabulary %d, context %d, librefusion %s (%s)%s%s" % (
            self.model_path, self.n_vocab(), self._n_ctx, L.lib.rf_version().decode(), library_path(),
            "; recommended settings: " + changed if changed else "",
            "; ignored: " + ", ".join(sorted(ignored)) if ignored else ""), file=sys.stderr)

    # ---- the model ----------------------------------------------------------------
    def _m(self, what):
        if self._model is None:
            raise RefusionValueError("Llama.%s: the model did not open" % what)
        self._model._open("Llama." + what)
        return self._model

    def close(self):
        """Free the model from memory; any later call raises ClosedError."""
        if self._model is not None:
            self._model.close()

    def __del__(self):
        """close()."""
        self.close()

    def __enter__(self):
        """The Llama itself."""
        return self

    def __exit__(self, *exc):
        """close()."""
        self.close()

    def n_ctx(self):
        """The context window: prompt + answer tokens at most."""
        self._m("n_ctx")
        return self._n_ctx

    def n_vocab(self):
        """The vocabulary size."""
        return self._m("n_vocab").n_vocab

    def token_eos(self):
        """The token an answer ends at: generation_config.json's
        eos_token_id, else the tokenizer's (<|im_end|>), else config.json's."""
        self._m("token_eos")
        e = self._recommended.eos_id
        return e if e >= 0 else self._model.eos_id

    def token_bos(self):
        """-1: these tokenizers (Qwen3's) have no beginning-of-sequence token."""
        self._m("token_bos")
        return -1

    def set_seed(self, seed):
        """The sampling seed of the calls that give none (None: the model's;
        -1 or LLAMA_DEFAULT_SEED: a random one per call)."""
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < -1):
            raise RefusionValueError("seed must be an integer >= 0, -1 (random) or None, got %r" % (seed,))
        self._seed = seed

    # ---- tokens ------------------------------------------------------------------
    def tokenize(self, text, add_bos=True, special=False):
        """Token ids of text (UTF-8 bytes). add_bos adds nothing: token_bos()
        is -1. special=True: special tokens' text (<|im_start|>) becomes
        those tokens; special=False (llama.cpp's plain text) raises
        ValueError when the text holds one, which this tokenizer cannot read
        as plain text."""
        m = self._m("tokenize")
        if not isinstance(text, (bytes, bytearray, str)):
            raise TypeError("Llama.tokenize: text must be bytes, got %s" % type(text).__name__)
        ids = m.tokenize(text.encode("utf-8") if isinstance(text, str) else bytes(text))
        if not special and ids and m.detokenize_bytes(ids, True) != m.detokenize_bytes(ids, False):
            raise RefusionValueError("Llama.tokenize: the text holds a special token's text (such as <|im_end|>), "
                                     "which this tokenizer reads only as that token: pass special=True")
        return ids

    def detokenize(self, tokens, prev_tokens=None, special=False):
        """The UTF-8 bytes of tokens (special tokens left out unless
        special=True); with prev_tokens, the bytes tokens add after them."""
        m = self._m("detokenize")
        if prev_tokens:
            before = m.detokenize_bytes(list(prev_tokens), not special)
            whole = m.detokenize_bytes(list(prev_tokens) + list(tokens), not special)
            return whole[len(before):] if whole.startswith(before) else whole
        return m.detokenize_bytes(list(tokens), not special)

    # ---- completions ----------------------------------------------------------------
    def _params(self, call, settings, where):
        """rf_params for one call: the recommended settings < the
        constructor's < this call's (sampling arguments by their
        llama-cpp-python names, then ReFusion's)."""
        given = {k: v for k, v in call.items() if v is not None}
        seed = given.pop("seed", self._seed)
        if seed is not None:
            if not isinstance(seed, int) or isinstance(seed, bool) or seed < -1:
                raise RefusionValueError("%s: seed must be an integer >= 0 or -1 (random), got %r" % (where, seed))
            given["seed"] = int.from_bytes(os.urandom(8), "little") >> 1 if seed in (-1, LLAMA_DEFAULT_SEED) else seed
        return settings_params(self._base, dict(given, **settings))

    def _limit(self, n_prompt, max_tokens, p, where):
        if n_prompt >= self._n_ctx:
            raise RefusionValueError("Requested tokens (%d) exceed context window of %d" % (n_prompt, self._n_ctx))
        room = self._n_ctx - n_prompt
        if max_tokens is None:
            max_tokens = p.gen_length  # the model's recommendation
        elif not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise RefusionValueError("%s: max_tokens must be an integer or None, got %r" % (where, max_tokens))
        elif max_tokens <= 0:
            max_tokens = room  # llama-cpp-python: until the end of the context
        return min(max_tokens, room)

    def _start(self, ids, max_tokens, stop, p, where, grammar=None):
        if stop is None:
            stop = []
        stops = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stops):
            raise RefusionValueError("%s: stop must be a string or a list of strings, got %r" % (where, stop))
        n = self._limit(len(ids), max_tokens, p, where)
        p.gen_length = n
        if grammar is not None:  # the decoders that cannot honour it refuse it in rf_generate
            p.constraint = grammar._constraint(self._model, where)
        run = _Run(self._model, self._session, ids, p, n, stops)
        run.grammar = grammar
        return run

    def create_completion(self, prompt, suffix=None, max_tokens=16, temperature=None, top_p=None, min_p=None,
                          typical_p=1.0, logprobs=None, echo=False, stop=None, frequency_penalty=None,
                          presence_penalty=None, repeat_penalty=None, top_k=None, stream=False, seed=None,
                          tfs_z=1.0, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, model=None,
                          stopping_criteria=None, logits_processor=None, grammar=None, logit_bias=None, **settings):
        """Text that follows prompt (a string, or token ids), as
        llama-cpp-python's text_completion dict, or with stream=True an
        iterator of its chunks. max_tokens: 16 as llama-cpp-python (None:
        the model's recommendation; <= 0: the rest of the context); stop: a
        string or a list of them (the text is cut before the first); echo:
        the prompt's text first. Sampling arguments not given (None) are the
        model's recommendation. settings: ReFusion's (decoder, slot_size,
        rolling, ...). logprobs=N: each answer token's log-probability and its
        N likeliest alternatives (0..20) in choices[0]["logprobs"] (every
        decoder; not with stream=True). grammar: a LlamaGrammar
        the text must be a sentence of (every decoder; plan-and-infill and
        MDM commit in position order under it; an error in the grammar is a RefusionValueError with the library's
        message). Arguments with nothing behind them here (suffix,
        typical_p, mirostat, ...) raise ValueError unless at their neutral
        value. Ctrl-C stops the generation and raises KeyboardInterrupt."""
        where = "create_completion"
        _check_refused(_CALL_REFUSED, dict(suffix=suffix, typical_p=typical_p, tfs_z=tfs_z,
                                           mirostat_mode=mirostat_mode, stopping_criteria=stopping_criteria,
                                           logits_processor=logits_processor, logit_bias=logit_bias), where)
        grammar = _grammar_arg(grammar, where)
        m = self._m(where)
        if isinstance(prompt, (bytes, bytearray)):
            prompt = bytes(prompt).decode("utf-8")
        if isinstance(prompt, str):
            ids, prompt_text = m.tokenize(prompt), prompt
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids, prompt_text = list(prompt), m.detokenize(list(prompt), skip_special=False)
        else:
            raise RefusionValueError("%s: prompt must be a string or a list of token ids, got %r" % (where, prompt))
        p = self._params(dict(temperature=temperature, top_p=top_p, min_p=min_p, frequency_penalty=frequency_penalty,
                              presence_penalty=presence_penalty, repeat_penalty=repeat_penalty, top_k=top_k,
                              seed=seed), settings, where)
        _logprobs(p, logprobs is not None and logprobs is not False, logprobs, stream, where, "logprobs")
        run = self._start(ids, max_tokens, stop, p, where, grammar)
        cid = "cmpl-%s" % uuid.uuid4()
        name = model if model is not None else self.model_path
        created = int(time.time())

        def chunk(text, finish=None):
            return {"id": cid, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

        if stream:
            def chunks():
                if echo and prompt_text:
                    yield chunk(prompt_text)
                for piece in run.pieces():
                    yield chunk(piece)
                yield chunk("", run.finish_reason)
            return chunks()
        text = run.run_all()
        out = chunk((prompt_text if echo else "") + text, run.finish_reason)
        out["choices"][0]["logprobs"] = _completion_logprobs(m, run, len(prompt_text) if echo else 0)
        out["usage"] = {"prompt_tokens": len(ids), "completion_tokens": run.n_tokens,
                        "total_tokens": len(ids) + run.n_tokens}
        return out

    def __call__(self, prompt, *args, **kwargs):
        """create_completion(prompt, ...)."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(self, messages, functions=None, function_call=None, tools=None, tool_choice=None,
                               temperature=None, top_p=None, top_k=None, min_p=None, typical_p=1.0, stream=False,
                               stop=None, seed=None, response_format=None, max_tokens=None, presence_penalty=None,
                               frequency_penalty=None, repeat_penalty=None, tfs_z=1.0, mirostat_mode=0,
                               mirostat_tau=5.0, mirostat_eta=0.1, model=None, logits_processor=None, grammar=None,
                               logit_bias=None, logprobs=None, top_logprobs=None, think=True, **settings):
        """An answer to messages (OpenAI's chat format: dicts with role and
        content) in the model's chat template, as llama-cpp-python's
        chat.completion dict, or with stream=True an iterator of
        chat.completion.chunk dicts (the role, the text as it becomes final,
        an empty delta with finish_reason). max_tokens None: the model's
        recommendation (generation_config.json's max_new_tokens, else 512),
        within the context. Sampling arguments not given are the model's
        recommendation; think=False renders the template with
        enable_thinking=false; settings: ReFusion's. logprobs=True (with
        top_logprobs=N alternatives, 0..20): choices[0]["logprobs"]["content"]
        as OpenAI gives it (every decoder; not with stream=True). grammar: a LlamaGrammar the answer must be a sentence
        of; response_format: {"type": "text"}, {"type": "json_object"} (any
        JSON object; with "schema": a document valid under it, as
        llama-cpp-python) or {"type": "json_schema", "json_schema":
        {"schema": {...}}} (OpenAI's), the same grammars as `refusion serve`
        (docs/grammar.md); not both grammar and a JSON response_format.
        Every decoder decodes under the constraint (plan-and-infill and
        MDM commit in position order then); a schema keyword
        the library cannot enforce or bad GBNF raises RefusionValueError with
        the library's message. tools (OpenAI's [{"type": "function",
        "function": {"name", "description", "parameters"}}]) and tool_choice
        ("none", "auto" - the default with tools -, "required", or
        {"type": "function", "function": {"name": ...}}): the server's tool
        calling, from the library (the tools rendered by the chat template,
        a required or named call decoded under the grammar of the
        function's parameters schema - AR decoding or the rolling slot);
        the answer's calls are choices[0]["message"]["tool_calls"] (id,
        type "function", function {name, arguments as JSON text}) with
        finish_reason "tool_calls". Messages may hold assistant turns with
        tool_calls and tool results (role "tool"). llama-cpp-python's
        functions / function_call map onto them (the message then also has
        function_call). Not with stream=True."""
        where = "create_chat_completion"
        _check_refused(_CALL_REFUSED, dict(typical_p=typical_p, tfs_z=tfs_z,
                                           mirostat_mode=mirostat_mode, logits_processor=logits_processor,
                                           logit_bias=logit_bias), where)
        grammar = _grammar_arg(grammar, where)
        if logprobs not in (None, True, False):
            raise RefusionValueError("%s: logprobs must be True or False, got %r" % (where, logprobs))
        if top_logprobs is not None and not logprobs:
            raise RefusionValueError("%s: top_logprobs needs logprobs=True" % where)
        lp = (bool(logprobs), 0 if top_logprobs is None else top_logprobs)
        m = self._m(where)
        fmt = _format_grammar(m, response_format, where)
        if grammar is not None and fmt is not None:
            raise RefusionValueError("%s: give grammar or a JSON response_format, not both" % where)
        tools, tool_choice, legacy = _legacy_functions(tools, tool_choice, functions, function_call, where)
        call = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, presence_penalty=presence_penalty,
                    frequency_penalty=frequency_penalty, repeat_penalty=repeat_penalty, seed=seed)
        return _chat_completion(self._model, self, messages, stream=stream, max_tokens=max_tokens, stop=stop,
                                think=think, settings=settings, call=call,
                                name=model if model is not None else self.model_path, logprobs=lp,
                                grammar=grammar if grammar is not None else fmt, tools=tools,
                                tool_choice=tool_choice, legacy=legacy)


def _legacy_functions(tools, tool_choice, functions, function_call, where):
    """tools and tool_choice, with llama-cpp-python's (OpenAI's deprecated)
    functions / function_call mapped onto them; legacy: they were used."""
    if functions is None and function_call is None:
        return tools, tool_choice, False
    if tools is not None or tool_choice is not None:
        raise RefusionValueError("%s: give tools / tool_choice or the deprecated functions / function_call, not both"
                                 % where)
    if functions is not None and not isinstance(functions, (list, tuple)):
        raise RefusionValueError("%s: functions must be a list of {\"name\", \"parameters\", ...}, got %r"
                                 % (where, functions))
    tools = None if functions is None else [{"type": "function", "function": f} for f in functions]
    if isinstance(function_call, dict):
        tool_choice = {"type": "function", "function": {"name": function_call.get("name")}}
    else:
        tool_choice = function_call  # "none" / "auto" (anything else: refused with tool_choice's message)
    return tools, tool_choice, True


def _tool_choice(model, tools, tool_choice, where):
    """(rf_tool_choice, the rf_constraint of a required or named call or
    None), checked by the library as the server checks them."""
    try:
        tj = None if tools is None else json.dumps(tools, ensure_ascii=False).encode("utf-8")
        cj = None if tool_choice is None else json.dumps(tool_choice, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise RefusionValueError("%s: tools / tool_choice are not JSON: %s" % (where, e)) from None
    model._need_tok(where)
    h = ctypes.c_void_p()
    mode = L.lib.rf_constraint_tool_calls(model._tok, tj, cj, ctypes.byref(h))
    if mode < 0:
        raise RefusionValueError("%s: %s" % (where, L.lib.rf_last_error().decode("utf-8", "replace")))
    return mode, h.value


class _ToolGrammar:
    """The call's constraint as _start takes a grammar (freed by free())."""

    def __init__(self, h):
        self.h = h

    def _constraint(self, model, where):
        return self.h

    def free(self):
        if self.h:
            L.lib.rf_constraint_free(self.h)
            self.h = None


def _tool_calls(text, prefix):
    """The library's parse of an answer: (content, tool_calls list)."""
    b = text.encode("utf-8")
    pb = prefix.encode("utf-8")
    n = L.lib.rf_tool_calls_parse_json(b, pb, None, 0)
    if n < 0:
        raise RefusionValueError("create_chat_completion: %s" % L.lib.rf_last_error().decode("utf-8", "replace"))
    buf = ctypes.create_string_buffer(n + 1)
    L.lib.rf_tool_calls_parse_json(b, pb, buf, n + 1)
    out = json.loads(buf.raw[:n].decode("utf-8"))
    return out["content"], out["tool_calls"]


def _chat_completion(model, llama, messages, stream, max_tokens, stop, think, settings, call=None, name=None,
                     logprobs=(False, 0), grammar=None, tools=None, tool_choice=None, legacy=False):
    """The chat completion of Llama and Model (llama None: the model's own
    session, recommended settings and context). With tools: the library's
    tool calling (rf_constraint_tool_calls, rf_tokenize_chat_json,
    rf_tool_calls_parse_json), as `refusion serve` answers."""
    where = "create_chat_completion"
    if llama is None:
        llama = _ModelAsLlama(model)
    mode, tool_grammar = 0, None
    if tools is not None or tool_choice is not None:
        if stream:
            raise RefusionValueError("%s: tool calls are not streamed by this binding (stream=False, or the "
                                     "server, which streams them)" % where)
        mode, h = _tool_choice(model, tools, tool_choice, where)
        if h:
            tool_grammar = _ToolGrammar(h)
            if grammar is not None:
                tool_grammar.free()
                raise RefusionValueError("%s: give at most one of grammar, a JSON response_format and a required "
                                         "or named tool_choice" % where)
            grammar = tool_grammar
    try:
        if tools or any(isinstance(m, dict) and (m.get("tool_calls") is not None or m.get("role") == "tool")
                        for m in messages):
            ids = model.tokenize_chat_json(messages, tools=tools or None, think=think)
        else:
            ids = model.tokenize_chat(messages, think=think)
        p = llama._params(call or {}, settings, where)
        _logprobs(p, logprobs[0], logprobs[1], stream, where, "top_logprobs")
        run = llama._start(ids, max_tokens, stop, p, where, grammar)
        if not stream:
            text = run.run_all()
    finally:
        if tool_grammar is not None:
            tool_grammar.free()
    cid = "chatcmpl-%s" % uuid.uuid4()
    name = name if name is not None else model.path
    created = int(time.time())

    def chunk(delta, finish=None):
        return {"id": cid, "model": name, "created": created, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    if stream:
        def chunks():
            yield chunk({"role": "assistant"})
            for piece in run.pieces():
                yield chunk({"content": piece})
            yield chunk({}, run.finish_reason)
        return chunks()
    message, finish = {"role": "assistant", "content": text}, run.finish_reason
    if mode:  # RF_TOOL_CHOICE_AUTO and up: the answer's <tool_call> blocks
        content, calls = _tool_calls(text, "call_%s_0_" % cid[len("chatcmpl-"):])
        if calls:
            message = {"role": "assistant", "content": content, "tool_calls": calls}
            if legacy:
                message["function_call"] = dict(calls[0]["function"])
            finish = "tool_calls"
    return {"id": cid, "object": "chat.completion", "created": created, "model": name,
            "choices": [{"index": 0, "message": message,
                         "logprobs": _chat_logprobs(model, run),
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": run.n_tokens,
                      "total_tokens": len(ids) + run.n_tokens}}


class _ModelAsLlama(Llama):
    """Model.create_chat_completion's view of its model: the recommended
    settings, the model's context, its shared session."""

    def __init__(self, model):  # pylint: disable=super-init-not-called
        self._model = model
        self._n_ctx = model.n_ctx
        self._session = model._shared_session()
        self._base = model.recommended()
        self._seed = None

    def __del__(self):
        """The model is the caller's: nothing to free."""


__all__ = ["Llama", "LlamaGrammar", "LLAMA_DEFAULT_SEED", "METHODS", "AR_VERIFY"]
