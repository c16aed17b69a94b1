"""llama_grammar - LlamaGrammar: llama-cpp-python's grammar class over the
library's constrained decoding (rf_constraint_gbnf, rf_constraint_json_schema;
docs/grammar.md).

    from refusion import Llama, LlamaGrammar
    llm = Llama(model_path="models/refusion-demo", verbose=False)
    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    r = llm.create_chat_completion([{"role": "user", "content": "Is 7 odd?"}], grammar=g)

A LlamaGrammar holds the text it was made from. The library compiles a
grammar against a tokenizer's vocabulary, so the text is compiled when a
call first uses it with a model, and the compiled grammar is kept for that
model (the next calls reuse it) until the model is closed or the
LlamaGrammar is garbage-collected. Errors in the text - bad GBNF, a JSON
schema keyword the library cannot enforce - are found then: the call raises
RefusionValueError (a ValueError) with the library's one-line message."""
import threading
import weakref

from ._library import L, RefusionError, RefusionValueError

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"
"""The start symbol of a GBNF grammar (the library's, as llama.cpp's)."""

JSON_GBNF = r'''root ::= object
space ::= | " " | "\n" [ \t]{0,20}
null ::= "null" space
boolean ::= ("true" | "false") space
int-digits ::= "-"? ([0-9] | [1-9] [0-9]{0,15})
integer ::= int-digits space
number ::= int-digits ("." [0-9]+)? ([eE] [-+]? [0-9]+)? space
hex ::= [0-9a-fA-F]
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2}))
string ::= "\"" char* "\"" space
value ::= object | array | string | number | boolean | null
member ::= string ":" space value
object ::= "{" space (member ("," space member)*)? "}" space
array ::= "[" space (value ("," space value)*)? "]" space
'''
"""GBNF of any JSON object: the grammar of `response_format` {"type":
"json_object"} here and in `refusion serve` (the library's
rf_json_object_gbnf, src/grammar/json_schema.c, written out: the library
does not export it; tests/api_python.sh checks that the two agree)."""


def _text(value, what):
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RefusionValueError("%s: not UTF-8: %s" % (what, e)) from None
    if not isinstance(value, str):
        raise RefusionValueError("%s must be a string, got %s" % (what, type(value).__name__))
    if "\0" in value:
        raise RefusionValueError("%s holds a NUL character" % what)
    return value


class LlamaGrammar:
    """A grammar the answer must be a sentence of, as llama-cpp-python's
    llama_cpp.LlamaGrammar: made by from_string (GBNF, llama.cpp's format),
    from_file (a GBNF file) or from_json_schema (a JSON schema as text),
    given as grammar= to Llama's completions and chat completions.

    Every decoder honours it: AR decoding and the rolling slot (the same
    answer), plan-and-infill and MDM (committing in position order under a
    grammar: docs/refusion.md, constrained decoding). The supported GBNF and JSON-schema
    keywords: docs/grammar.md; anything else is refused when the grammar is
    first used with a model (compiling needs that model's vocabulary), with
    the library's message naming what and where. The compiled grammar is
    kept per model and freed with the model or with this object."""

    def __init__(self, *, _grammar=None, _json_schema=None):
        """Use from_string, from_file or from_json_schema."""
        if (_grammar is None) == (_json_schema is None):
            raise RefusionValueError("LlamaGrammar: give GBNF or a JSON schema (LlamaGrammar.from_string, "
                                     "from_file, from_json_schema)")
        self._grammar = _grammar          # GBNF text, or None
        self._json_schema = _json_schema  # a JSON schema's text, or None
        self._root = LLAMA_GRAMMAR_DEFAULT_ROOT
        self._lock = threading.Lock()
        self._compiled = {}  # id(model) -> (weakref to the model, its tokenizer handle, the rf_constraint)

    @classmethod
    def from_string(cls, grammar, verbose=True):
        """A grammar from GBNF text (start symbol root). verbose is accepted
        as llama-cpp-python takes it and prints nothing (the library never
        prints)."""
        return cls(_grammar=_text(grammar, "LlamaGrammar.from_string: grammar"))

    @classmethod
    def from_file(cls, file, verbose=True):
        """A grammar from a GBNF file (UTF-8). A file that cannot be read
        raises RefusionError, an empty one RefusionValueError."""
        try:
            with open(file, encoding="utf-8") as f:
                grammar = f.read()
        except (OSError, UnicodeDecodeError) as err:
            raise RefusionError("LlamaGrammar.from_file: error reading grammar file: %s" % err) from None
        if not grammar:
            raise RefusionValueError("LlamaGrammar.from_file: the grammar file %s is empty" % (file,))
        return cls.from_string(grammar, verbose=verbose)

    @classmethod
    def from_json_schema(cls, json_schema, verbose=True):
        """A grammar whose sentences are the JSON documents valid under
        json_schema (its text, as llama-cpp-python takes it: json.dumps of
        the schema). The library turns the schema into a grammar itself
        (src/grammar/json_schema.c, as `refusion generate -j` and the
        server); a keyword it cannot enforce is refused, naming it, when
        the grammar is first used."""
        return cls(_json_schema=_text(json_schema, "LlamaGrammar.from_json_schema: json_schema"))

    def __repr__(self):
        """The kind and the start of the text."""
        kind, text = ("json_schema", self._json_schema) if self._grammar is None else ("gbnf", self._grammar)
        return "<LlamaGrammar %s %r>" % (kind, text if len(text) <= 60 else text[:57] + "...")

    # ---- the compiled grammar, per model ------------------------------------------------
    def _constraint(self, model, where):
        """The rf_constraint of this grammar over model's vocabulary
        (compiled at the first use with that model, then kept)."""
        model._need_tok(where)
        with self._lock:
            e = self._compiled.get(id(model))
            if e is not None and e[0]() is model and e[1] == model._tok:
                return e[2]
            if e is not None:  # another model that had this id, or a reopened tokenizer
                self._free(self._compiled.pop(id(model)))
            if self._grammar is not None:
                h = L.lib.rf_constraint_gbnf(model._tok, self._grammar.encode("utf-8"))
            else:
                h = L.lib.rf_constraint_json_schema(model._tok, self._json_schema.encode("utf-8"))
            if not h:
                raise RefusionValueError("%s: %s" % (where, L.lib.rf_last_error().decode("utf-8", "replace")))
            self._compiled[id(model)] = (weakref.ref(model), model._tok, h)
        model._grammars.add(self)
        return h

    @staticmethod
    def _free(entry):
        lib = L.lib
        if lib is not None and entry[2]:
            lib.rf_constraint_free(entry[2])

    def _release(self, model):
        """Free what was compiled for model (the model is closing)."""
        with self._lock:
            e = self._compiled.pop(id(model), None)
        if e is not None:
            self._free(e)

    def __del__(self):
        """Free the compiled grammars."""
        compiled = getattr(self, "_compiled", None) or {}
        self._compiled = {}
        for e in compiled.values():
            try:
                self._free(e)
            except Exception:  # pylint: disable=broad-except  # interpreter shutdown
                pass


__all__ = ["LlamaGrammar", "JSON_GBNF", "LLAMA_GRAMMAR_DEFAULT_ROOT"]
