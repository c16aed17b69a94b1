"""refusion - Python binding of librefusion (include/refusion.h) with ctypes.

No compiled extension. llama-cpp-python's API:

    from refusion import Llama
    llm = Llama(model_path="models/refusion-demo")
    r = llm.create_chat_completion([{"role": "user", "content": "What is 2+3?"}])
    print(r["choices"][0]["message"]["content"])

Constrained decoding: grammar=LlamaGrammar.from_string(gbnf) (or
from_file, from_json_schema) and response_format {"type": "json_object"} /
{"type": "json_schema", ...}, as llama-cpp-python's.

Lower level: Model (tokenize / tokenize_chat / detokenize, recommended
settings) and Session.generate(ids, **settings) over rf_generate. Where the
library is looked for: the docstring of refusion._library (REFUSION_LIB,
the directory recorded at install, the install prefix, the system's
loader, pkg-config).
"""
from ._library import RefusionError, RefusionValueError, library_path, load_library
from ._model import AR_VERIFY, METHODS, ClosedError, Model, Session
from .llama import LLAMA_DEFAULT_SEED, Llama
from .llama_grammar import LlamaGrammar

__all__ = ["Llama", "LlamaGrammar", "Model", "Session", "RefusionError", "RefusionValueError", "ClosedError",
           "load_library", "library_path", "version", "METHODS", "AR_VERIFY", "LLAMA_DEFAULT_SEED"]


def version():
    """The version of the librefusion loaded ("major.minor.patch")."""
    return load_library().rf_version().decode()
