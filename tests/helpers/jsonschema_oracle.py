#!/usr/bin/env python3
"""The JSON-schema oracle of tests/grammar_json_schema.c: Debian's
python3-jsonschema. Reads lines {"schema": S, "doc": TEXT} and writes one
line per input: 1 (TEXT is JSON and valid under S, draft 2020-12), 0 (JSON,
invalid) or E (not JSON). Exit 77 when jsonschema is not installed."""
import json
import sys

try:
    import jsonschema
except ImportError:
    sys.exit(77)

for line in sys.stdin:
    q = json.loads(line)
    try:
        doc = json.loads(q["doc"])
    except ValueError:
        print("E")
        continue
    v = jsonschema.Draft202012Validator(q["schema"])
    print("1" if v.is_valid(doc) else "0")
