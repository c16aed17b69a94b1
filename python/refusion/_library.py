"""_library - finding and loading librefusion.so, and the C signatures.

The library is looked for, in this order (the first that loads wins):

1. the path given to load_library(path) or Llama(..., lib=path);
2. $REFUSION_LIB: the library file, or a directory holding it;
3. the directories recorded when this package was installed: `pip install`
   from the source tree records its build/ (scripts/build.sh), from a
   `cmake --install` prefix P (P/share/refusion/python) records P's lib
   directory, and `--config-settings libdir=DIR` records DIR;
4. this package's own directory (a copy of the library put beside it);
5. where the package sits: P/lib* when it is P/share/refusion/python, the
   source tree's build/ when it is python/refusion in the source tree;
6. the system's loader: librefusion.so.0 through $LD_LIBRARY_PATH, the
   ldconfig cache and the default directories;
7. pkg-config's libdir of refusion (refusion.pc on $PKG_CONFIG_PATH).

An explicit path or $REFUSION_LIB that does not load is an error at once
(no other library is taken in its place). When nothing loads, the error
names every place tried and why each failed."""
import ctypes
import glob
import os
import subprocess

SONAME = "librefusion.so.0"


class RefusionError(RuntimeError):
    """librefusion failed (the message is rf_last_error()), or the library
    cannot be found or used."""


class RefusionValueError(RefusionError, ValueError):
    """A bad argument or setting: what the library or this binding refuses
    (a ValueError, as llama-cpp-python raises for bad arguments)."""


_TOKEN_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_void_p)
MAX_TOP_LOGPROBS = 20  # RF_MAX_TOP_LOGPROBS


class _TokenLogprob(ctypes.Structure):
    """rf_token_logprob"""
    _fields_ = [("token", ctypes.c_int32), ("logprob", ctypes.c_float), ("n_top", ctypes.c_int),
                ("top_token", ctypes.c_int32 * MAX_TOP_LOGPROBS), ("top_logprob", ctypes.c_float * MAX_TOP_LOGPROBS)]


_LOGPROB_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(_TokenLogprob), ctypes.c_int, ctypes.c_void_p)


class _Field(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("offset", ctypes.c_size_t)]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


# rf_field_kind -> ctypes; the two pointers this binding sets get their types
_KINDS = {0: ctypes.c_int, 1: ctypes.c_float, 2: ctypes.c_double, 3: ctypes.c_uint64, 4: ctypes.c_void_p}
_POINTERS = {"on_tokens": _TOKEN_CB, "cancel": ctypes.POINTER(ctypes.c_int), "on_logprobs": _LOGPROB_CB}


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


class _Loaded:
    """The loaded library: lib (the ctypes.CDLL), path, Params, Stats."""
    lib = None
    path = None
    Params = None
    Stats = None


L = _Loaded()


def _recorded_dirs():
    try:
        from . import _install_info
    except ImportError:  # imported in place, not installed by pip
        return []
    return list(getattr(_install_info, "LIBRARY_DIRS", []))


def _pkg_config_libdir():
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "refusion"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "pkg-config: %s" % e
    if r.returncode != 0:
        return None, "pkg-config refusion: %s" % (r.stderr.strip().splitlines() or ["not found"])[0]
    return r.stdout.strip(), None


def _candidates():
    """(description, path to try) in the order of the module docstring,
    after an explicit path and $REFUSION_LIB."""
    out = []
    for d in _recorded_dirs():
        out.append(("recorded at install", os.path.join(d, SONAME)))
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(("the package directory", os.path.join(here, SONAME)))
    share = os.path.dirname(here)  # P/share/refusion/python when installed by cmake
    if os.path.basename(os.path.dirname(share)) == "refusion":
        prefix = os.path.normpath(os.path.join(share, "..", "..", ".."))
        found = sorted(glob.glob(os.path.join(prefix, "lib*", SONAME)) +
                       glob.glob(os.path.join(prefix, "lib*", "*", SONAME)))
        out += [("the install prefix", f) for f in found] or [("the install prefix", os.path.join(prefix, "lib", SONAME))]
    src = os.path.dirname(share)
    if os.path.exists(os.path.join(src, "CMakeLists.txt")) and os.path.isdir(os.path.join(src, "python")):
        out.append(("the source tree's build", os.path.join(src, "build", SONAME)))
    out.append(("the system loader", SONAME))
    return out


def _try(path):
    """(CDLL, None) or (None, why)."""
    if os.sep in path and not os.path.exists(path):
        return None, "no such file"
    try:
        return ctypes.CDLL(path), None
    except OSError as e:
        return None, str(e)


def _explicit(path, what):
    if os.path.isdir(path):
        path = os.path.join(path, SONAME)
    lib, why = _try(path)
    if lib is None:
        raise RefusionError("librefusion: %s (%s) does not load: %s" % (what, path, why))
    return lib, path


def _find():
    tried = []
    for what, path in _candidates():
        lib, why = _try(path)
        if lib is not None:
            return lib, path
        tried.append("%s %s (%s)" % (what, path, why))
    libdir, why = _pkg_config_libdir()
    if libdir:
        path = os.path.join(libdir, SONAME)
        lib, why = _try(path)
        if lib is not None:
            return lib, path
        tried.append("pkg-config's libdir %s (%s)" % (path, why))
    else:
        tried.append(why)
    raise RefusionError("librefusion not found; tried: %s. Build it (bash scripts/build.sh) and reinstall this "
                        "package, or set REFUSION_LIB to the library's path" % "; ".join(tried))


_SIGNATURES = None


def _declare(lib):
    P, I, C = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    I32P = ctypes.POINTER(ctypes.c_int32)
    Params = _layout(lib, "rf_params_fields", "_Params")
    Stats = _layout(lib, "rf_stats_fields", "_Stats")
    sig = {
        "rf_last_error": (C, []),
        "rf_version": (C, []),
        "rf_model_open": (P, [C]),
        "rf_model_close": (None, [P]),
        "rf_model_n_vocab": (I, [P]),
        "rf_model_n_ctx": (I, [P]),
        "rf_model_eos_id": (I, [P]),
        "rf_model_mask_id": (I, [P]),
        "rf_model_has_tokenizer": (I, [P]),
        "rf_tokenizer_open": (P, [P]),
        "rf_tokenizer_close": (None, [P]),
        "rf_tokenizer_set_chat_template": (I, [P, C]),
        "rf_tokenize": (I, [P, C, I, I32P, I]),
        "rf_detokenize": (I, [P, I32P, I, I, C, I]),
        "rf_tokenize_chat": (I, [P, ctypes.POINTER(_ChatMessage), I, I, I32P, I]),
        "rf_token_id": (I, [P, C]),
        "rf_tokenizer_eos_id": (I, [P]),
        "rf_text_stream_new": (P, [P, I]),
        "rf_text_stream_put": (C, [P, ctypes.c_int32]),
        "rf_text_stream_flush": (C, [P]),
        "rf_text_stream_free": (None, [P]),
        "rf_params_default": (Params, []),
        "rf_params_recommended": (I, [P, P, ctypes.POINTER(Params)]),
        "rf_set_threads": (I, [I]),
        "rf_session_new": (P, [P]),
        "rf_session_free": (None, [P]),
        "rf_session_bytes": (ctypes.c_size_t, [P]),
        "rf_generate": (I, [P, I32P, I, ctypes.POINTER(Params), I32P, I, ctypes.POINTER(Stats)]),
        "rf_constraint_gbnf": (P, [P, C]),
        "rf_constraint_json_schema": (P, [P, C]),
        "rf_constraint_free": (None, [P]),
        "rf_tokenize_chat_json": (I, [P, C, C, I, I32P, I]),
        "rf_constraint_tool_calls": (I, [P, C, C, ctypes.POINTER(P)]),
        "rf_tool_calls_parse_json": (I, [C, C, C, I]),
    }
    for name, (res, args) in sig.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise RefusionError("librefusion %s lacks %s: it is older than this package (%s); rebuild and "
                                "reinstall it" % (lib.rf_version().decode(), name, _package_version())) from None
        f.restype = res
        f.argtypes = args
    return Params, Stats


def _package_version():
    try:
        from . import _install_info
        return _install_info.VERSION
    except (ImportError, AttributeError):
        return "the source tree's"


def load_library(path=None):
    """Load librefusion once (path: a librefusion.so file or its directory;
    else the search order of this module's docstring) and declare the
    signatures. Returns the ctypes.CDLL. Raises RefusionError naming the
    places tried when none loads."""
    if L.lib is not None and path is None:
        return L.lib
    env = os.environ.get("REFUSION_LIB")
    if path is not None:
        lib, where = _explicit(os.fspath(path), "the path given")
    elif env:
        lib, where = _explicit(env, "REFUSION_LIB")
    else:
        lib, where = _find()
    L.Params, L.Stats = _declare(lib)
    L.lib, L.path = lib, where
    return lib


def library_path():
    """The path the loaded librefusion came from (loading it first)."""
    load_library()
    return L.path


def error(cls=None):
    """The library's last error as an exception: RefusionValueError for a
    refused argument (cls=None: RefusionError)."""
    return (cls or RefusionError)(L.lib.rf_last_error().decode("utf-8", "replace"))
