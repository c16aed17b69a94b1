"""refusion.py - Python binding of librefusion (include/refusion.h) with ctypes.

No compiled extension: the shared library is found through $REFUSION_LIB (a
path to librefusion.so), then the directories of $LD_LIBRARY_PATH, then the
system's loader (ctypes.util.find_library).

    import refusion
    m = refusion.Model("models/refusion-demo")
    ids = m.tokenize("What is 2+3?", chat=True)
    s = m.session()
    out = s.generate(ids, method="refusion", gen_length=32, n_blocks=1,
                     on_tokens=lambda new: print(m.detokenize(new), end=""))
    print(m.detokenize(out))
"""
import ctypes
import ctypes.util
import os

__all__ = ["Model", "Session", "RefusionError", "load_library"]

METHODS = {"refusion": 0, "ar": 1, "mdm": 2}
AR_VERIFY = {"off": 0, "correct": 1, "first": 2, "both": 3}


class RefusionError(RuntimeError):
    """A librefusion call failed; the message is rf_last_error()."""


_TOKEN_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_void_p)


class _Params(ctypes.Structure):
    _fields_ = [
        ("method", ctypes.c_int),
        ("gen_length", ctypes.c_int),
        ("slot_size", ctypes.c_int),
        ("n_blocks", ctypes.c_int),
        ("slot_threshold", ctypes.c_float),
        ("token_threshold", ctypes.c_float),
        ("ar_verify", ctypes.c_int),
        ("mdm_steps", ctypes.c_int),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("on_tokens", _TOKEN_CB),
        ("user", ctypes.c_void_p),
        ("cancel", ctypes.POINTER(ctypes.c_int)),
        # since 0.2
        ("lookahead", ctypes.c_int),
        ("jacobi", ctypes.c_int),
        ("no_cache", ctypes.c_int),
        ("eos_id", ctypes.c_int),
        ("on_event", ctypes.c_void_p),  # events are not offered in Python (NULL)
        ("rolling", ctypes.c_int),
        # since 0.3
        ("min_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("penalty_last_n", ctypes.c_int),
    ]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("n_tokens", ctypes.c_int),
        ("hit_eos", ctypes.c_int),
        ("n_calls", ctypes.c_int),
        ("seconds", ctypes.c_double),
        # since 0.2
        ("tpf", ctypes.c_double),
        ("tokens_per_call", ctypes.c_double),
        ("tokens_per_s", ctypes.c_double),
        ("n_steps", ctypes.c_int),
        ("steps", ctypes.c_void_p),
        ("first_free", ctypes.c_int),
        ("first_checked", ctypes.c_int),
        ("first_replaced", ctypes.c_int),
        ("verified", ctypes.c_int),
        ("forced_draft", ctypes.c_int),
        ("forced_ar", ctypes.c_int),
    ]


_lib = None


def load_library(path=None):
    """Load librefusion (once) and declare the signatures."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    cands = [path, os.environ.get("REFUSION_LIB")]
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            cands.append(os.path.join(d, "librefusion.so.0"))
    cands.append(ctypes.util.find_library("refusion"))
    err = None
    for c in cands:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            err = e
    else:
        raise RefusionError("librefusion not found (set REFUSION_LIB): %s" % err)
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


def _error():
    return RefusionError(_lib.rf_last_error().decode("utf-8", "replace"))


def _ids(seq):
    arr = (ctypes.c_int32 * max(len(seq), 1))(*seq)
    return arr, len(seq)


class Model:
    """A checkpoint directory or .gguf file, with its tokenizer when it has one."""

    def __init__(self, path, lib=None):
        load_library(lib)
        self._h = _lib.rf_model_open(os.fsencode(path))
        if not self._h:
            raise _error()
        self._tok = _lib.rf_tokenizer_open(self._h)  # None when the model has none

    def close(self):
        if getattr(self, "_tok", None):
            _lib.rf_tokenizer_close(self._tok)
            self._tok = None
        if getattr(self, "_h", None):
            _lib.rf_model_close(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def n_vocab(self):
        return _lib.rf_model_n_vocab(self._h)

    @property
    def eos_id(self):
        return _lib.rf_model_eos_id(self._h)

    def _need_tok(self):
        if not self._tok:
            raise RefusionError("this model has no tokenizer")

    def tokenize(self, text, chat=False):
        self._need_tok()
        b = text.encode("utf-8")
        n = _lib.rf_tokenize(self._tok, b, int(chat), None, 0)
        if n < 0:
            raise _error()
        buf = (ctypes.c_int32 * max(n, 1))()
        _lib.rf_tokenize(self._tok, b, int(chat), buf, n)
        return list(buf[:n])

    def tokenize_chat(self, messages, think=True):
        """Ids of a conversation [(role, content), ...] in the chat template,
        with the generation prompt (think=False: enable_thinking=false)."""
        self._need_tok()
        msgs = (_ChatMessage * max(len(messages), 1))(
            *[_ChatMessage(r.encode("utf-8"), c.encode("utf-8")) for r, c in messages])
        n = _lib.rf_tokenize_chat(self._tok, msgs, len(messages), int(think), None, 0)
        if n < 0:
            raise _error()
        buf = (ctypes.c_int32 * max(n, 1))()
        _lib.rf_tokenize_chat(self._tok, msgs, len(messages), int(think), buf, n)
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
        self._need_tok()
        arr, n = _ids(ids)
        need = _lib.rf_detokenize(self._tok, arr, n, int(skip_special), None, 0)
        if need < 0:
            raise _error()
        buf = ctypes.create_string_buffer(need + 1)
        _lib.rf_detokenize(self._tok, arr, n, int(skip_special), buf, need + 1)
        return buf.raw[:need].decode("utf-8", "replace")

    def session(self):
        return Session(self)


class Session:
    """Owns the KV cache and buffers; reuse it for many generate calls."""

    def __init__(self, model):
        self.model = model  # keeps the model alive
        self._h = _lib.rf_session_new(model._h)
        if not self._h:
            raise _error()
        self.stats = None

    def close(self):
        if getattr(self, "_h", None):
            _lib.rf_session_free(self._h)
            self._h = None

    __del__ = close

    @property
    def bytes(self):
        return _lib.rf_session_bytes(self._h)

    def generate(self, prompt_ids, method="refusion", on_tokens=None, cancel=None, ar_verify="off", **kw):
        """Answer ids for prompt_ids. Keyword arguments are the rf_params fields
        (gen_length, slot_size, n_blocks, slot_threshold, token_threshold,
        mdm_steps, temperature, top_k, top_p, seed, lookahead, jacobi, no_cache,
        eos_id, rolling). on_tokens(list_of_ids) is
        called as tokens become final. cancel: a ctypes.c_int that another
        thread may set to 1 to stop the generation."""
        p = _lib.rf_params_default()
        p.method = METHODS[method]
        p.ar_verify = AR_VERIFY[ar_verify] if isinstance(ar_verify, str) else int(ar_verify)
        for k, v in kw.items():
            if k not in dict(_Params._fields_) or k in ("method", "on_tokens", "user", "cancel", "on_event"):
                raise TypeError("unknown generate parameter %r" % k)
            setattr(p, k, v)
        if on_tokens is not None:
            cb = _TOKEN_CB(lambda ids, n, user: on_tokens(list(ids[:n])))
            p.on_tokens = cb
        if cancel is not None:
            p.cancel = ctypes.pointer(cancel)
        arr, n = _ids(prompt_ids)
        cap = max(p.gen_length + p.slot_size, 1)
        out = (ctypes.c_int32 * cap)()
        st = _Stats()
        k = _lib.rf_generate(self._h, arr, n, ctypes.byref(p), out, cap, ctypes.byref(st))
        if k < 0:
            raise _error()
        self.stats = {"n_tokens": st.n_tokens, "hit_eos": bool(st.hit_eos),
                      "n_calls": st.n_calls, "seconds": st.seconds, "tpf": st.tpf,
                      "tokens_per_call": st.tokens_per_call, "tokens_per_s": st.tokens_per_s}
        return list(out[:min(k, cap)])
