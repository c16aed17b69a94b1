"""_model - Model (a checkpoint and its tokenizer), Session (rf_generate)
and the one generation run under every completion (_Run)."""
import ctypes
import json
import os
import queue
import threading
import weakref

from ._library import L, RefusionError, RefusionValueError, _ChatMessage, _LOGPROB_CB, _TOKEN_CB, error, load_library

METHODS = {"refusion": 0, "ar": 1, "mdm": 2}
"""The decoders by name (rf_method)."""
AR_VERIFY = {"off": 0, "correct": 1, "first": 2, "both": 3}
"""ReFusion's AR verification modes by name: ar_correct + 2 * ar_check_first
(the rf_params fields they set)."""

# rf_params fields a caller does not set: the binding owns them
_INTERNAL = ("method", "on_tokens", "user", "cancel", "on_event", "ws", "call_cost", "n_call_cost", "constraint",
             "on_logprobs")


def _ids(seq):
    arr = (ctypes.c_int32 * max(len(seq), 1))(*seq)
    return arr, len(seq)


def _message(m):
    """(role, content) or {"role": ..., "content": ...} -> (role, content).
    A content given as OpenAI's list of parts is its text parts joined."""
    if isinstance(m, dict):
        if "role" not in m or "content" not in m and m.get("role") != "assistant":
            raise RefusionValueError("a chat message needs \"role\" and \"content\" (got keys %s)" % sorted(m))
        role, content = m["role"], m.get("content")
    elif isinstance(m, (str, bytes)):
        raise RefusionValueError("a chat message is a dict with \"role\" and \"content\" or a (role, content) pair, "
                                 "got the string %r" % (m,))
    else:
        try:
            role, content = m
        except (TypeError, ValueError):
            raise RefusionValueError("a chat message is a dict with \"role\" and \"content\" or a (role, content) "
                                     "pair, got %r" % (m,)) from None
    if content is None:
        content = ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RefusionValueError("a message's content parts must be {\"type\": \"text\", \"text\": ...} "
                                         "(this model reads text only; got %r)" % (part,))
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(role, str) or not isinstance(content, str):
        raise RefusionValueError("a chat message's role and content must be strings (got %r)" % (m,))
    return role, content


class ClosedError(RefusionError):
    """A method of a model (or Llama) called after close()."""


class Model:
    """A checkpoint directory or .gguf file, with its tokenizer when it has one.

    Use it as a context manager or call close(); sessions keep it alive."""

    def __init__(self, path, lib=None, chat_template=None):
        """Open the checkpoint at path (lib: a librefusion.so to load;
        chat_template: a Jinja template file, or "builtin", in place of the
        model's)."""
        load_library(lib)
        self.path = os.fspath(path)
        self._h = None
        self._tok = None
        self._session = None
        self._grammars = weakref.WeakSet()  # LlamaGrammars compiled against this model's tokenizer
        self._format_grammars = {}  # response_format -> LlamaGrammar (llama._format_grammar)
        self._h = L.lib.rf_model_open(os.fsencode(self.path))
        if not self._h:
            raise error(RefusionValueError if not os.path.exists(self.path) else None)
        if L.lib.rf_model_has_tokenizer(self._h):
            self._tok = L.lib.rf_tokenizer_open(self._h)
            if not self._tok:
                e = error()
                self.close()
                raise e
            if chat_template is not None and L.lib.rf_tokenizer_set_chat_template(
                    self._tok, os.fsencode(chat_template)):
                e = error(RefusionValueError)
                self.close()
                raise e

    def close(self):
        """Free the model and its tokenizer (sessions made from it first).
        Using it afterwards raises ClosedError."""
        if getattr(self, "_session", None):
            self._session.close()
            self._session = None
        for g in list(getattr(self, "_grammars", None) or ()):
            g._release(self)  # the grammars compiled against the tokenizer
        self._format_grammars = {}
        if getattr(self, "_tok", None):
            L.lib.rf_tokenizer_close(self._tok)
            self._tok = None
        if getattr(self, "_h", None):
            L.lib.rf_model_close(self._h)
            self._h = None
        self._closed = True

    __del__ = close

    def __enter__(self):
        """The model itself."""
        return self

    def __exit__(self, *exc):
        """close()."""
        self.close()

    def _open(self, what):
        if not self._h:
            raise ClosedError("%s: the model was closed (close() or the end of its with block)" % what)

    @property
    def n_vocab(self):
        """The vocabulary size."""
        self._open("n_vocab")
        return L.lib.rf_model_n_vocab(self._h)

    @property
    def n_ctx(self):
        """The context length (max_position_embeddings)."""
        self._open("n_ctx")
        return L.lib.rf_model_n_ctx(self._h)

    @property
    def eos_id(self):
        """The model config's end-of-sequence id, or -1."""
        self._open("eos_id")
        return L.lib.rf_model_eos_id(self._h)

    def _need_tok(self, what):
        self._open(what)
        if not self._tok:
            raise RefusionValueError("%s: the model %s has no tokenizer (no tokenizer.json beside it, no tokenizer "
                                     "in the GGUF file)" % (what, self.path))

    def tokenize(self, text, chat=False):
        """Token ids of text; chat=True wraps it as one user turn of the chat
        template with the generation prompt."""
        self._need_tok("tokenize")
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        n = L.lib.rf_tokenize(self._tok, b, int(chat), None, 0)
        if n < 0:
            raise error(RefusionValueError)
        buf = (ctypes.c_int32 * max(n, 1))()
        L.lib.rf_tokenize(self._tok, b, int(chat), buf, n)
        return list(buf[:n])

    def tokenize_chat(self, messages, think=True):
        """Ids of a conversation in the chat template, with the generation
        prompt (think=False: enable_thinking=false). messages: dicts
        {"role": ..., "content": ...} (OpenAI's) or (role, content) pairs."""
        self._need_tok("tokenize_chat")
        pairs = [_message(m) for m in messages]
        keep = [(r.encode("utf-8"), c.encode("utf-8")) for r, c in pairs]
        msgs = (_ChatMessage * max(len(keep), 1))(*[_ChatMessage(r, c) for r, c in keep])
        n = L.lib.rf_tokenize_chat(self._tok, msgs, len(keep), int(think), None, 0)
        if n < 0:
            raise error(RefusionValueError)
        buf = (ctypes.c_int32 * max(n, 1))()
        L.lib.rf_tokenize_chat(self._tok, msgs, len(keep), int(think), buf, n)
        return list(buf[:n])

    def tokenize_chat_json(self, messages, tools=None, think=True):
        """Ids of a conversation in OpenAI's format rendered as `refusion
        serve` renders it (rf_tokenize_chat_json): messages may hold tool
        results (role "tool") and assistant turns with "tool_calls"; tools
        (a list of {"type": "function", "function": {...}}, or None) are
        rendered by the chat template. (role, content) pairs are taken too."""
        self._need_tok("tokenize_chat_json")
        msgs = []
        for m in messages:
            if isinstance(m, dict):
                msgs.append(m)
            else:
                role, content = _message(m)
                msgs.append({"role": role, "content": content})
        try:
            mj = json.dumps(msgs, ensure_ascii=False).encode("utf-8")
            tj = None if tools is None else json.dumps(tools, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise RefusionValueError("tokenize_chat_json: the messages or tools are not JSON: %s" % e) from None
        n = L.lib.rf_tokenize_chat_json(self._tok, mj, tj, int(think), None, 0)
        if n < 0:
            raise error(RefusionValueError)
        buf = (ctypes.c_int32 * max(n, 1))()
        L.lib.rf_tokenize_chat_json(self._tok, mj, tj, int(think), buf, n)
        return list(buf[:n])

    def token_id(self, piece):
        """The id of one token given as its text, or -1."""
        self._need_tok("token_id")
        return L.lib.rf_token_id(self._tok, piece.encode("utf-8"))

    @property
    def tokenizer_eos_id(self):
        """The tokenizer's end-of-sequence token (e.g. <|im_end|>), or -1."""
        self._need_tok("tokenizer_eos_id")
        return L.lib.rf_tokenizer_eos_id(self._tok)

    def detokenize_bytes(self, ids, skip_special=True):
        """The UTF-8 bytes of ids (special tokens skipped unless
        skip_special=False)."""
        self._need_tok("detokenize")
        arr, n = _ids(ids)
        need = L.lib.rf_detokenize(self._tok, arr, n, int(skip_special), None, 0)
        if need < 0:
            raise error(RefusionValueError)
        buf = ctypes.create_string_buffer(need + 1)
        L.lib.rf_detokenize(self._tok, arr, n, int(skip_special), buf, need + 1)
        return buf.raw[:need]

    def detokenize(self, ids, skip_special=True):
        """Text of ids (special tokens skipped unless skip_special=False)."""
        return self.detokenize_bytes(ids, skip_special).decode("utf-8", "replace")

    def recommended(self):
        """The model's recommended settings (rf_params_recommended: the
        defaults with generation_config.json applied, the answer's EOS) as
        an rf_params structure."""
        self._open("recommended")
        p = L.Params()
        if L.lib.rf_params_recommended(self._h, self._tok, ctypes.byref(p)):
            raise error(RefusionValueError)
        return p

    def session(self):
        """A new Session (KV cache and buffers) on this model."""
        return Session(self)

    def _shared_session(self):
        self._open("generate")
        if self._session is None:
            self._session = Session(self)
        return self._session

    def create_chat_completion(self, messages, stream=False, max_tokens=None, stop=None, think=True, **settings):
        """An answer to messages (OpenAI chat format) as OpenAI's
        chat.completion dict, or with stream=True an iterator of
        chat.completion.chunk dicts: Llama.create_chat_completion's (one code
        path), with the settings by their rf_params names (method,
        temperature, top_k, top_p, min_p, seed, presence_penalty,
        frequency_penalty, repeat_penalty, rolling, slot_size, ...) over the
        model's recommended ones. max_tokens: answer tokens (default: the
        model's recommendation, within the context)."""
        from .llama import _chat_completion
        return _chat_completion(self, None, messages, stream=stream, max_tokens=max_tokens, stop=stop, think=think,
                                settings=settings)


def settings_params(base, settings):
    """A copy of the rf_params base with settings (rf_params field names,
    method/decoder by name, ar_verify by name or 0..3) set: RefusionValueError
    naming the allowed values for a bad one. A decoder named without rolling
    is that decoder: the base's rolling slot (a choice of decoder the model
    recommends) is not kept."""
    p = L.Params.from_buffer_copy(base)
    settings = dict(settings)
    if "decoder" in settings:
        if "method" in settings:
            raise RefusionValueError("give the decoder once: decoder or method, not both")
        settings["method"] = settings.pop("decoder")
    if "blocks" in settings:
        settings["n_blocks"] = settings.pop("blocks")
    if "method" in settings:
        m = settings.pop("method")
        if m not in METHODS:
            raise RefusionValueError("method must be one of %s (got %r)" % (", ".join(METHODS), m))
        p.method = METHODS[m]
        if "rolling" not in settings:
            p.rolling = L.lib.rf_params_default().rolling
    if "ar_verify" in settings:
        a = settings.pop("ar_verify")
        v = AR_VERIFY.get(a, -1) if isinstance(a, str) else a
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 3:
            raise RefusionValueError("ar_verify must be one of %s (got %r)" % (", ".join(AR_VERIFY), a))
        p.ar_correct, p.ar_check_first = v & 1, v >> 1
    fields = dict(L.Params._fields_)
    for k, v in settings.items():
        if k not in fields or k in _INTERNAL:
            known = ["decoder", "method", "ar_verify"] + [f for f in fields if f not in _INTERNAL]
            raise RefusionValueError("unknown generate setting %r (the settings: %s)" % (k, ", ".join(known)))
        if isinstance(v, bool):
            v = int(v)
        try:
            setattr(p, k, v)
        except TypeError:
            raise RefusionValueError("%s: %r is not %s" % (
                k, v, "a number" if fields[k] in (ctypes.c_float,) else "an integer")) from None
    return p


def params_dict(p):
    """The settings of an rf_params as a dict (no pointers)."""
    d = {n: getattr(p, n) for n, t in L.Params._fields_ if n not in _INTERNAL}
    d["method"] = {v: k for k, v in METHODS.items()}.get(p.method, p.method)
    return d


class Session:
    """Owns the KV cache and buffers; reuse it for many generate calls."""

    def __init__(self, model):
        """A session on model (kept alive by the session)."""
        model._open("session")
        self.model = model  # keeps the model alive
        self._h = L.lib.rf_session_new(model._h)
        if not self._h:
            raise error()
        self.stats = None
        self.threads = 0  # > 0: rf_set_threads on the generating thread

    def close(self):
        """Free the session's memory."""
        if getattr(self, "_h", None):
            L.lib.rf_session_free(self._h)
            self._h = None

    __del__ = close

    @property
    def bytes(self):
        """Bytes the session holds between generations."""
        return L.lib.rf_session_bytes(self._h)

    def generate(self, prompt_ids, method="refusion", on_tokens=None, cancel=None, ar_verify="off", **kw):
        """Answer ids for prompt_ids, from the library's defaults
        (rf_params_default; Model.recommended() has the model's). method:
        "refusion", "ar" or "mdm"; ar_verify: "off", "correct", "first",
        "both" (or 0..3), which sets the fields ar_correct and
        ar_check_first. Keyword arguments are the other rf_params fields
        (gen_length, slot_size, n_blocks, slot_threshold, token_threshold,
        temperature, top_k, top_p, seed, eos_id, mask_id, ar_correct,
        ar_check_first, lookahead, jacobi, rolling, no_cache, mdm_steps,
        min_p, repeat_penalty, presence_penalty, frequency_penalty,
        penalty_last_n). on_tokens(list of ids) is called as tokens become
        final. cancel: a ctypes.c_int that another thread may set to 1 to
        stop the generation. An exception in on_tokens (KeyboardInterrupt
        from Ctrl-C included) stops the generation through that flag and is
        raised here. Bad settings raise RefusionValueError with the library's
        message; statistics of the last call are in self.stats."""
        self.model._open("generate")
        p = settings_params(L.lib.rf_params_default(), dict(kw, method=method, ar_verify=ar_verify))
        return self.run(prompt_ids, p, on_tokens, cancel)

    def run(self, prompt_ids, p, on_tokens=None, cancel=None, on_logprobs=None):
        """generate with the settings p (an rf_params structure). With
        p.logprobs, on_logprobs(list of (token, logprob, [(token, logprob),
        ...])) is called just before on_tokens with the same tokens, and
        self.logprobs holds the answer's after the call."""
        if not self._h:
            raise ClosedError("generate: the session was closed")
        flag = cancel if cancel is not None else ctypes.c_int(0)
        p.cancel = ctypes.pointer(flag)
        raised = []
        self.logprobs = [] if p.logprobs else None

        def lp_bridge(lp, n, user):
            if raised:
                return
            try:
                got = [(e.token, e.logprob, [(e.top_token[k], e.top_logprob[k]) for k in range(e.n_top)])
                       for e in lp[:n]]
                self.logprobs.extend(got)
                if on_logprobs is not None:
                    on_logprobs(got)
            except BaseException as e:
                raised.append(e)
                flag.value = 1

        lp_cb = _LOGPROB_CB(lp_bridge)
        if p.logprobs:
            p.on_logprobs = lp_cb

        # Always a callback: Python code runs between model calls, so a
        # Ctrl-C (KeyboardInterrupt, raised in the next Python code the main
        # thread runs) arrives here, not after the whole generation; ctypes
        # would print and drop an exception that left the callback.
        def bridge(ids, n, user):
            if raised:
                return
            try:
                if on_tokens is not None:
                    on_tokens(list(ids[:n]))
            except BaseException as e:
                raised.append(e)
                flag.value = 1  # the decoder stops before its next model call

        cb = _TOKEN_CB(bridge)
        p.on_tokens = cb
        arr, n = _ids(prompt_ids)
        cap = max(p.gen_length + p.slot_size, 1)
        out = (ctypes.c_int32 * cap)()
        st = L.Stats()
        if self.threads > 0:
            L.lib.rf_set_threads(self.threads)  # OpenMP's setting is the calling thread's
        try:
            k = L.lib.rf_generate(self._h, arr, n, ctypes.byref(p), out, cap, ctypes.byref(st))
        except BaseException as e:  # a Ctrl-C that arrived outside the callback, as it returned
            raised.append(e)
            k = -2
        if raised:
            raise raised[0]
        if k < 0:
            raise error(RefusionValueError if k == -1 else None)
        self.stats = {"n_tokens": st.n_tokens, "hit_eos": bool(st.hit_eos),
                      "n_calls": st.n_calls, "seconds": st.seconds, "tpf": st.tpf,
                      "tokens_per_call": st.tokens_per_call, "tokens_per_s": st.tokens_per_s}
        return list(out[:min(k, cap)])


class _StopCut:
    """Text cut before the first of the stop strings, fed piece by piece:
    feed returns the text that can no longer be the start of a stop string."""

    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self.text = ""
        self.out = 0
        self.hit = False

    def feed(self, piece):
        """Add piece; the newly final text (cut at a stop string once found)."""
        if self.hit:
            return ""
        self.text += piece
        cut = [self.text.find(s, max(0, self.out - len(s) + 1)) for s in self.stops]
        cut = [c for c in cut if c >= 0]
        if cut:
            self.hit = True
            self.text = self.text[:min(cut)]
            upto = len(self.text)
        else:
            hold = max([len(s) - 1 for s in self.stops] + [0])
            upto = max(self.out, len(self.text) - hold)
        new, self.out = self.text[self.out:upto], upto
        return new

    def flush(self):
        """The rest of the text (no stop string can start there any more)."""
        new, self.out = self.text[self.out:], len(self.text)
        return new


class _Run:
    """One completion: the answer's text from the generation's token
    callback, cut at max_tokens, at the answer's EOS and at the stop
    strings; finish_reason "stop" (EOS or a stop string) or "length"."""

    def __init__(self, model, session, ids, p, max_tokens, stops):
        self.model, self.session, self.ids, self.p = model, session, ids, p
        self.max_tokens = max_tokens
        self.eos = model.eos_id if p.eos_id == -2 else p.eos_id  # -2: RF_TOKEN_FROM_MODEL
        self.cut = _StopCut(stops)
        self.cancel = ctypes.c_int(0)
        self.n_tokens = 0
        self.finish_reason = "length"
        self.on_text = None  # streaming: called with each final piece
        self.logprobs = [] if p.logprobs else None  # the kept tokens': (token, logprob, top, text offset)
        self._lp_next = []   # the decoder's for the tokens it reports next
        self._raw_len = 0    # characters of the kept tokens' text so far
        self.grammar = None  # the LlamaGrammar behind p.constraint: kept alive while the generation runs

    def _done(self):
        return self.cut.hit or self.n_tokens >= self.max_tokens or self.finish_reason == "stop"

    def _tokens(self, new, stream):
        for i, t in enumerate(new):
            if self._done():
                break
            self.n_tokens += 1  # the EOS too, as the server counts completion_tokens
            if t == self.eos:
                self.finish_reason = "stop"
                break
            if self.logprobs is not None and i < len(self._lp_next):
                tok, lp, top = self._lp_next[i]
                self.logprobs.append((tok, lp, top, self._raw_len))
                self._raw_len += len(self.model.detokenize_bytes([t]).decode("utf-8", "replace"))
            piece = L.lib.rf_text_stream_put(stream, t)
            if piece:
                text = self.cut.feed(piece.decode("utf-8", "replace"))
                if text and self.on_text:
                    self.on_text(text)
        if self._done():
            self.cancel.value = 1  # nothing more is kept: stop before the next model call

    def _set_lp_next(self, lps):
        self._lp_next = lps

    def kept_logprobs(self):
        """The log-probabilities of the tokens whose text begins before a
        stop string's cut (all of them without one)."""
        if self.logprobs is None:
            return None
        end = len(self.cut.text) if self.cut.hit else None
        return [e for e in self.logprobs if end is None or e[3] < end]

    def _emit(self, text):
        if text and self.on_text:
            self.on_text(text)

    def _generate(self):
        stream = L.lib.rf_text_stream_new(self.model._tok, 1)
        try:
            try:
                self.session.run(self.ids, self.p, on_tokens=lambda new: self._tokens(new, stream),
                                 cancel=self.cancel, on_logprobs=self._set_lp_next)
            except RefusionError:
                if not self._done():
                    raise  # not our own stop
            rest = L.lib.rf_text_stream_flush(stream)
            if rest and not self.cut.hit:
                self._emit(self.cut.feed(rest.decode("utf-8", "replace")))
            self._emit(self.cut.flush())
            if self.cut.hit:
                self.finish_reason = "stop"
        finally:
            L.lib.rf_text_stream_free(stream)

    def run_all(self):
        """Generate on this thread; the whole answer text."""
        self._generate()
        return self.cut.text

    def pieces(self):
        """Generate on a thread; yield the text as it becomes final (Ctrl-C
        and a consumer that stops early cancel the generation)."""
        q = queue.Queue()
        self.on_text = q.put
        box = {}

        def work():
            try:
                self._generate()
            except BaseException as e:  # handed to the consumer
                box["error"] = e
            q.put(None)

        th = threading.Thread(target=work, daemon=True)
        th.start()
        try:
            while True:
                try:
                    piece = q.get(timeout=0.1)  # a timeout, so that Ctrl-C gets through
                except queue.Empty:
                    continue
                if piece is None:
                    break
                yield piece
            if "error" in box:
                raise box["error"]
        finally:  # done, broken off (GeneratorExit) or Ctrl-C: stop the decoder
            self.cancel.value = 1
            th.join()
