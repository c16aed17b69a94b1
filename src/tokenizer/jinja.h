/* jinja.h - a Jinja2 interpreter for the subset Hugging Face chat templates
 * use, rendering as transformers' apply_chat_template does: trim_blocks and
 * lstrip_blocks on, the loop controls (break / continue), a tojson that is
 * json.dumps(ensure_ascii=False), raise_exception() and strftime_now().
 *
 * Supported: text, {{ }}, {% %}, {# #}, whitespace control ({%- -%},
 * {%+ +%}), {% raw %}; statements for (with else, an if filter, tuple
 * targets and loop.*), if / elif / else, set (name, tuple, ns.attr, block
 * form), macro, call (caller()), filter, generation, break, continue;
 * expressions with Python's semantics for the values a chat template meets
 * (None, booleans, integers, floats, strings, lists, dicts, namespaces): literals, lists,
 * dicts, attribute / index / slice access, calls with keyword arguments,
 * arithmetic, comparisons, in, not, and, or, ~, conditional expressions,
 * filters and tests (the tables in jinja.c), string and dict methods.
 *
 * Every render is bounded: output size, evaluation steps, nesting depth and
 * memory have limits, and hitting one is an error like any other: the
 * function returns NULL with one line in rf_last_error():
 *   "chat template: line L, column C: what went wrong". */
#ifndef RF_JINJA_H
#define RF_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h" /* rf_text_span */

typedef struct {
    size_t max_output; /* bytes of rendered text */
    long max_steps;    /* statements executed + expressions evaluated */
    int max_depth;     /* nesting of macro calls (and of the template's syntax) */
    size_t max_memory; /* bytes of values and syntax tree */
} rf_jinja_limits;

/* 16 MiB output, 10 M steps, depth 100, 512 MiB memory */
void rf_jinja_limits_default(rf_jinja_limits *lim);

/* Render the template src[0..len) with the variables of vars (a JSON
 * object: messages, tools, add_generation_prompt, ...; NULL: none). lim NULL
 * means the defaults. A malloc'd NUL-terminated string (*out_len its
 * length when out_len is not NULL), or NULL with the error set. */
char *rf_jinja_render(const char *src, size_t len, const json_t *vars, const rf_jinja_limits *lim,
                      size_t *out_len);

/* rf_jinja_render with more variables, data (a JSON object, NULL: none),
 * whose strings are the conversation's rather than the template's: when
 * spans is not NULL, *spans (malloc'd, NULL when none) gets the *n_spans
 * byte ranges of the output, sorted and apart, that were copied from data's
 * strings (through any variable, filter or operator that keeps bytes as
 * they are; what escaping, tojson or repr made of them counts whole). */
char *rf_jinja_render_data(const char *src, size_t len, const json_t *vars, const json_t *data,
                           const rf_jinja_limits *lim, size_t *out_len, rf_text_span **spans, size_t *n_spans);

/* Only parse src: 0, or -1 with the error set (a syntax error's line). */
int rf_jinja_check(const char *src, size_t len);

#endif
