"""refusion - Python binding of librefusion (include/refusion.h) with ctypes.

No compiled extension: the shared library is found through $REFUSION_LIB (a
path to librefusion.so), then the directories of $LD_LIBRARY_PATH, then the
lib directories of the prefix this package was installed under by `cmake
--install` (PREFIX/share/refusion/python), then the system's loader
(ctypes.util.find_library).

    import refusion
    m = refusion.Model("models/refusion-demo")
    r = m.create_chat_completion([{"role": "user", "content": "What is 2+3?"}], max_tokens=32)
    print(r["choices"][0]["message"]["content"])
    for chunk in m.create_chat_completion([{"role": "user", "content": "Hi"}], stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="")

Lower level: Model.tokenize / tokenize_chat / detokenize and
Session.generate(ids, **settings) over rf_generate.
"""
import ctypes
import ctypes.util
import glob
import os
import queue
import threading
import time

__all__ = ["Model", "Session", "RefusionError", "load_library", "version", "METHODS", "AR_VERIFY"]

METHODS = {"refusion": 0, "ar": 1, "mdm": 2}
"""The decoders by name (rf_method)."""
AR_VERIFY = {"off": 0, "correct": 1, "first": 2, "both": 3}
"""ReFusion's AR verification modes by name: ar_correct + 2 * ar_check_first
(the rf_params fields they set)."""


class RefusionError(RuntimeError):
    """A librefusion call failed (the message is rf_last_error()), or a
    setting given to this binding is not one librefusion has."""


_TOKEN_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_void_p)


class _Field(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("offset", ctypes.c_size_t)]


# rf_field_kind -> ctypes; the two pointers this binding sets get their types
_KINDS = {0: ctypes.c_int, 1: ctypes.c_float, 2: ctypes.c_double, 3: ctypes.c_uint64, 4: ctypes.c_void_p}
_POINTERS = {"on_tokens": _TOKEN_CB, "cancel": ctypes.POINTER(ctypes.c_int)}


def _layout(lib, fn, name):
    """A ctypes structure laid out as the library says (rf_params_fields /
    rf_stats_fields), checked against its offsets and size."""
    f = getattr(lib, fn)
    f.restype = ctypes.POINTER(_Field)
    f.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    size = ctypes.c_size_t(0)
    table = f(ctypes.byref(size))
    fields, offsets = [], []
    i = 0
    while table[i].name:
        n = table[i].name.decode()
        fields.append((n, _POINTERS.get(n, _KINDS[table[i].kind])))
        offsets.append(table[i].offset)
        i += 1
    cls = type(name, (ctypes.Structure,), {"_fields_": fields})
    if ctypes.sizeof(cls) != size.value or any(getattr(cls, n).offset != o for (n, _), o in zip(fields, offsets)):
        raise RefusionError("%s: the library's layout is not one ctypes can declare" % fn)
    return cls


_Params = None
_Stats = None


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


_lib = None


def _candidates(path):
    """Where librefusion may be, in the order load_library tries them."""
    cands = [path, os.environ.get("REFUSION_LIB")]
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            cands.append(os.path.join(d, "librefusion.so.0"))
    # `cmake --install --prefix P` puts this package in P/share/refusion/python
    # and the library in P/lib (or P/lib/<multiarch>)
    here = os.path.dirname(os.path.abspath(__file__))
    prefix = os.path.normpath(os.path.join(here, "..", "..", "..", ".."))
    if os.path.basename(os.path.dirname(os.path.dirname(here))) == "refusion":
        cands += sorted(glob.glob(os.path.join(prefix, "lib*", "librefusion.so.0")))
        cands += sorted(glob.glob(os.path.join(prefix, "lib*", "*", "librefusion.so.0")))
    cands.append(ctypes.util.find_library("refusion"))
    return [c for c in cands if c]


def load_library(path=None):
    """Load librefusion (once; path: a given librefusion.so) and declare the
    signatures. Raises RefusionError when it cannot be found."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    err = None
    for c in _candidates(path):
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            err = e
    else:
        raise RefusionError("librefusion not found (set REFUSION_LIB): %s" % err)
    global _Params, _Stats
    _Params = _layout(lib, "rf_params_fields", "_Params")
    _Stats = _layout(lib, "rf_stats_fields", "_Stats")
    P, I, C = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    I32P = ctypes.POINTER(ctypes.c_int32)
    sig = {
        "rf_last_error": (C, []),
        "rf_version": (C, []),
        "rf_model_open": (P, [C]),
        "rf_model_close": (None, [P]),
        "rf_model_n_vocab": (I, [P]),
        "rf_model_n_ctx": (I, [P]),
        "rf_model_eos_id": (I, [P]),
        "rf_model_mask_id": (I, [P]),
        "rf_tokenizer_open": (P, [P]),
        "rf_tokenizer_close": (None, [P]),
        "rf_tokenize": (I, [P, C, I, I32P, I]),
        "rf_detokenize": (I, [P, I32P, I, I, C, I]),
        "rf_tokenize_chat": (I, [P, ctypes.POINTER(_ChatMessage), I, I, I32P, I]),
        "rf_token_id": (I, [P, C]),
        "rf_tokenizer_eos_id": (I, [P]),
        "rf_text_stream_new": (P, [P, I]),
        "rf_text_stream_put": (C, [P, ctypes.c_int32]),
        "rf_text_stream_flush": (C, [P]),
        "rf_text_stream_free": (None, [P]),
        "rf_params_default": (_Params, []),
        "rf_session_new": (P, [P]),
        "rf_session_free": (None, [P]),
        "rf_session_bytes": (ctypes.c_size_t, [P]),
        "rf_generate": (I, [P, I32P, I, ctypes.POINTER(_Params), I32P, I, ctypes.POINTER(_Stats)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _lib = lib
    return lib


def version():
    """The version of the librefusion loaded ("major.minor.patch")."""
    return load_library().rf_version().decode()


def _error():
    return RefusionError(_lib.rf_last_error().decode("utf-8", "replace"))


def _ids(seq):
    arr = (ctypes.c_int32 * max(len(seq), 1))(*seq)
    return arr, len(seq)


def _message(m):
    """(role, content) or {"role": ..., "content": ...} -> (role, content)."""
    if isinstance(m, dict):
        if "role" not in m or "content" not in m:
            raise RefusionError("a chat message needs \"role\" and \"content\" (got keys %s)" % sorted(m))
        role, content = m["role"], m["content"]
    elif isinstance(m, (str, bytes)):
        raise RefusionError("a chat message is a dict with \"role\" and \"content\" or a (role, content) pair, "
                            "got the string %r" % (m,))
    else:
        try:
            role, content = m
        except (TypeError, ValueError):
            raise RefusionError("a chat message is a dict with \"role\" and \"content\" or a (role, content) pair, "
                                "got %r" % (m,)) from None
    if content is None:
        content = ""
    if not isinstance(role, str) or not isinstance(content, str):
        raise RefusionError("a chat message's role and content must be strings (got %r)" % (m,))
    return role, content


# the settings create_chat_completion takes by their OpenAI / llama.cpp names
_OPENAI_NAMES = {"max_tokens": "gen_length", "repeat_penalty": "repeat_penalty", "n_blocks": "n_blocks"}


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
        cut = [self.text.find(s, self.out) for s in self.stops]
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


class Model:
    """A checkpoint directory or .gguf file, with its tokenizer when it has one.

    Use it as a context manager or call close(); sessions keep it alive."""

    def __init__(self, path, lib=None):
        """Open the checkpoint at path (lib: a librefusion.so to load)."""
        load_library(lib)
        self.path = os.fspath(path)
        self._h = _lib.rf_model_open(os.fsencode(path))
        if not self._h:
            raise _error()
        self._tok = _lib.rf_tokenizer_open(self._h)  # None when the model has none
        self._session = None

    def close(self):
        """Free the model and its tokenizer (sessions made from it first)."""
        if getattr(self, "_session", None):
            self._session.close()
            self._session = None
        if getattr(self, "_tok", None):
            _lib.rf_tokenizer_close(self._tok)
            self._tok = None
        if getattr(self, "_h", None):
            _lib.rf_model_close(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        """The model itself."""
        return self

    def __exit__(self, *exc):
        """close()."""
        self.close()

    @property
    def n_vocab(self):
        """The vocabulary size."""
        return _lib.rf_model_n_vocab(self._h)

    @property
    def n_ctx(self):
        """The context length (max_position_embeddings)."""
        return _lib.rf_model_n_ctx(self._h)

    @property
    def eos_id(self):
        """The model config's end-of-sequence id, or -1."""
        return _lib.rf_model_eos_id(self._h)

    def _need_tok(self):
        if not self._tok:
            raise RefusionError("this model has no tokenizer")

    def tokenize(self, text, chat=False):
        """Token ids of text; chat=True wraps it as one user turn of the chat
        template with the generation prompt."""
        self._need_tok()
        b = text.encode("utf-8")
        n = _lib.rf_tokenize(self._tok, b, int(chat), None, 0)
        if n < 0:
            raise _error()
        buf = (ctypes.c_int32 * max(n, 1))()
        _lib.rf_tokenize(self._tok, b, int(chat), buf, n)
        return list(buf[:n])

    def tokenize_chat(self, messages, think=True):
        """Ids of a conversation in the chat template, with the generation
        prompt (think=False: enable_thinking=false). messages: dicts
        {"role": ..., "content": ...} (OpenAI's) or (role, content) pairs."""
        self._need_tok()
        pairs = [_message(m) for m in messages]
        keep = [(r.encode("utf-8"), c.encode("utf-8")) for r, c in pairs]
        msgs = (_ChatMessage * max(len(keep), 1))(*[_ChatMessage(r, c) for r, c in keep])
        n = _lib.rf_tokenize_chat(self._tok, msgs, len(keep), int(think), None, 0)
        if n < 0:
            raise _error()
        buf = (ctypes.c_int32 * max(n, 1))()
        _lib.rf_tokenize_chat(self._tok, msgs, len(keep), int(think), buf, n)
        return list(buf[:n])

    def token_id(self, piece):
        """The id of one token given as its text, or -1."""
        self._need_tok()
        return _lib.rf_token_id(self._tok, piece.encode("utf-8"))

    @property
    def tokenizer_eos_id(self):
        """The tokenizer's end-of-sequence token (e.g. <|im_end|>), or -1."""
        self._need_tok()
        return _lib.rf_tokenizer_eos_id(self._tok)

    def detokenize(self, ids, skip_special=True):
        """Text of ids (special tokens skipped unless skip_special=False)."""
        self._need_tok()
        arr, n = _ids(ids)
        need = _lib.rf_detokenize(self._tok, arr, n, int(skip_special), None, 0)
        if need < 0:
            raise _error()
        buf = ctypes.create_string_buffer(need + 1)
        _lib.rf_detokenize(self._tok, arr, n, int(skip_special), buf, need + 1)
        return buf.raw[:need].decode("utf-8", "replace")

    def session(self):
        """A new Session (KV cache and buffers) on this model."""
        return Session(self)

    def create_chat_completion(self, messages, stream=False, max_tokens=None, stop=None, think=True, **settings):
        """An answer to messages (OpenAI chat format) as OpenAI's
        chat.completion dict, or with stream=True an iterator of
        chat.completion.chunk dicts (the text as it becomes final; the last
        chunk has finish_reason). max_tokens: answer tokens (default: 512, or
        what is left of the context); stop: a string or a list of them (the
        answer is cut before the first). Other settings are Session.generate's
        (method, temperature, top_k, top_p, min_p, seed, presence_penalty,
        frequency_penalty, repeat_penalty, rolling, slot_size, ...). EOS is
        the tokenizer's. Ctrl-C stops the generation and raises
        KeyboardInterrupt."""
        ids = self.tokenize_chat(messages, think=think)
        if max_tokens is None:
            max_tokens = max(1, min(512, self.n_ctx - len(ids)))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise RefusionError("max_tokens must be an integer >= 1 (got %r)" % (max_tokens,))
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        settings = {_OPENAI_NAMES.get(k, k): v for k, v in settings.items()}
        settings["gen_length"] = max_tokens
        if "eos_id" not in settings and self.tokenizer_eos_id >= 0:
            settings["eos_id"] = self.tokenizer_eos_id
        if self._session is None:
            self._session = Session(self)
        cid = "chatcmpl-%x" % int(time.time() * 1e6)
        name = os.path.basename(os.path.normpath(self.path))
        run = _ChatRun(self, self._session, ids, max_tokens, stops, settings)
        if stream:
            return run.chunks(cid, name)
        text = run.run_all()
        return {
            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": run.finish_reason}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": run.n_tokens,
                      "total_tokens": len(ids) + run.n_tokens},
        }


class _ChatRun:
    """One create_chat_completion: the answer's text from the generation's
    token callback, cut at max_tokens and at the stop strings."""

    def __init__(self, model, session, ids, max_tokens, stops, settings):
        self.model, self.session, self.ids = model, session, ids
        self.max_tokens, self.settings = max_tokens, settings
        self.cut = _StopCut(stops)
        self.cancel = ctypes.c_int(0)
        self.n_tokens = 0
        self.finish_reason = "length"
        self.on_text = None  # streaming: called with each final piece

    def _tokens(self, new, stream):
        for t in new:
            if self.cut.hit or self.n_tokens >= self.max_tokens:
                break
            self.n_tokens += 1
            if t == self.settings.get("eos_id"):
                self.finish_reason = "stop"
                break
            piece = _lib.rf_text_stream_put(stream, t)
            if piece:
                text = self.cut.feed(piece.decode("utf-8", "replace"))
                if text and self.on_text:
                    self.on_text(text)
        if self.cut.hit or self.n_tokens >= self.max_tokens:
            self.cancel.value = 1  # nothing more is kept: stop before the next model call

    def _generate(self):
        stream = _lib.rf_text_stream_new(self.model._tok, 1)
        try:
            try:
                self.session.generate(self.ids, on_tokens=lambda new: self._tokens(new, stream),
                                      cancel=self.cancel, **self.settings)
            except RefusionError:
                if not (self.cut.hit or self.n_tokens >= self.max_tokens):
                    raise  # not our own stop
            rest = _lib.rf_text_stream_flush(stream)
            if rest and not self.cut.hit:
                text = self.cut.feed(rest.decode("utf-8", "replace"))
                if text and self.on_text:
                    self.on_text(text)
            text = self.cut.flush()
            if text and self.on_text:
                self.on_text(text)
            if self.cut.hit:
                self.finish_reason = "stop"
        finally:
            _lib.rf_text_stream_free(stream)

    def run_all(self):
        """Generate on this thread; the whole answer text."""
        self._generate()
        return self.cut.text

    def chunks(self, cid, name):
        """Generate on a thread; yield OpenAI chunks as the text becomes final."""
        q = queue.Queue()
        self.on_text = q.put
        box = {}

        def work():
            try:
                self._generate()
            except BaseException as e:  # handed to the consumer
                box["error"] = e
            q.put(None)

        def chunk(delta, finish=None):
            return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": name,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        th = threading.Thread(target=work, daemon=True)
        th.start()
        try:
            yield chunk({"role": "assistant"})
            while True:
                try:
                    piece = q.get(timeout=0.1)  # a timeout, so that Ctrl-C gets through
                except queue.Empty:
                    continue
                if piece is None:
                    break
                yield chunk({"content": piece})
            if "error" in box:
                raise box["error"]
            yield chunk({}, self.finish_reason)
        finally:  # done, broken off (GeneratorExit) or Ctrl-C: stop the decoder
            self.cancel.value = 1
            th.join()


class Session:
    """Owns the KV cache and buffers; reuse it for many generate calls."""

    def __init__(self, model):
        """A session on model (kept alive by the session)."""
        self.model = model  # keeps the model alive
        self._h = _lib.rf_session_new(model._h)
        if not self._h:
            raise _error()
        self.stats = None

    def close(self):
        """Free the session's memory."""
        if getattr(self, "_h", None):
            _lib.rf_session_free(self._h)
            self._h = None

    __del__ = close

    @property
    def bytes(self):
        """Bytes the session holds between generations."""
        return _lib.rf_session_bytes(self._h)

    def generate(self, prompt_ids, method="refusion", on_tokens=None, cancel=None, ar_verify="off", **kw):
        """Answer ids for prompt_ids. method: "refusion", "ar" or "mdm";
        ar_verify: "off", "correct", "first", "both" (or 0..3), which sets
        the fields ar_correct and ar_check_first. Keyword arguments are the
        other rf_params fields (gen_length, slot_size, n_blocks,
        slot_threshold, token_threshold, temperature, top_k, top_p, seed,
        eos_id, mask_id, ar_correct, ar_check_first, lookahead, jacobi,
        rolling, no_cache, mdm_steps, min_p, repeat_penalty,
        presence_penalty, frequency_penalty, penalty_last_n). on_tokens(list
        of ids) is called as tokens become final. cancel: a ctypes.c_int that
        another thread may set to 1 to stop the generation. An exception in
        on_tokens (KeyboardInterrupt from Ctrl-C included) stops the
        generation through that flag and is raised here. Bad settings raise
        RefusionError with the library's message; statistics of the last
        call are in self.stats."""
        if method not in METHODS:
            raise RefusionError("method must be one of %s (got %r)" % (", ".join(METHODS), method))
        v = AR_VERIFY.get(ar_verify, -1) if isinstance(ar_verify, str) else ar_verify
        if not isinstance(v, int) or not 0 <= v <= 3:
            raise RefusionError("ar_verify must be one of %s (got %r)" % (", ".join(AR_VERIFY), ar_verify))
        p = _lib.rf_params_default()
        p.method = METHODS[method]
        p.ar_correct, p.ar_check_first = v & 1, v >> 1
        fields = dict(_Params._fields_)
        internal = ("method", "on_tokens", "user", "cancel", "on_event", "ws", "call_cost", "n_call_cost", "constraint")
        for k, v in kw.items():
            if k not in fields or k in internal:
                known = ["ar_verify"] + [f for f in fields if f not in internal]
                raise RefusionError("unknown generate setting %r (the settings: %s)" % (k, ", ".join(known)))
            try:
                setattr(p, k, v)
            except TypeError:
                raise RefusionError("%s: %r is not %s" % (
                    k, v, "a number" if fields[k] in (ctypes.c_float,) else "an integer")) from None
        flag = cancel if cancel is not None else ctypes.c_int(0)
        p.cancel = ctypes.pointer(flag)
        raised = []

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
        st = _Stats()
        try:
            k = _lib.rf_generate(self._h, arr, n, ctypes.byref(p), out, cap, ctypes.byref(st))
        except BaseException as e:  # a Ctrl-C that arrived outside the callback, as it returned
            raised.append(e)
            k = -2
        if raised:
            raise raised[0]
        if k < 0:
            raise _error()
        self.stats = {"n_tokens": st.n_tokens, "hit_eos": bool(st.hit_eos),
                      "n_calls": st.n_calls, "seconds": st.seconds, "tpf": st.tpf,
                      "tokens_per_call": st.tokens_per_call, "tokens_per_s": st.tokens_per_s}
        return list(out[:min(k, cap)])
