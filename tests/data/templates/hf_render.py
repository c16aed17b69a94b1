#!/usr/bin/env python3
"""The reference renderer: jinja2 set up as transformers' apply_chat_template
sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
controls, a {% generation %} tag, tojson = json.dumps(ensure_ascii=False),
raise_exception, strftime_now). Reads JSON lines {"template": PATH or
"source": TEXT, "vars": {...}} on stdin and writes one JSON line per case:
{"text": rendered} or {"error": message}."""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    src = case["source"] if "source" in case else open(case["template"], encoding="utf-8").read()
    try:
        out = {"text": env.from_string(src).render(**case.get("vars", {}))}
    except Exception as e:  # any failure is one line, as the C side reports it
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out, ensure_ascii=False), flush=True)
