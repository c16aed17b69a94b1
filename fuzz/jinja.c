/* jinja.c - libFuzzer: any bytes as a chat template, rendered over a fixed
 * conversation with tools (small limits, so that every input is quick).
 * Each input renders or fails with one line "chat template: ..."; nothing
 * may crash, hang or grow without bound: scripts/fuzz.sh runs it with a
 * per-input limit of 2 s and 600 MiB (-timeout, -rss_limit_mb), which the
 * seed corpus's hostile-*.jinja (overflow, nesting, repetition, super-linear
 * filters) would each exceed without the interpreter's bounds. */
#include <jansson.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer/jinja.h"
#include "util/util.h"

static json_t *vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vars) {
        json_error_t je;
        vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                          " {\"role\": \"user\", \"content\": \"Weather in Z\\u00fcrich?\"},"
                          " {\"role\": \"assistant\", \"content\": \"<think>one call</think>ok\", \"tool_calls\":"
                          "  [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": {\"city\": \"Z\"}}}]},"
                          " {\"role\": \"tool\", \"content\": \"11.5\"}],"
                          " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {}}}],"
                          " \"add_generation_prompt\": true, \"eos_token\": \"<|im_end|>\"}",
                          0, &je);
        if (!vars) abort();
    }
    rf_jinja_limits lim = {.max_output = 1u << 20, .max_steps = 200000, .max_depth = 40, .max_memory = 64u << 20};
    size_t n, n_spans;
    rf_text_span *spans;
    /* the conversation as data: its spans are tracked through every operation */
    char *out = rf_jinja_render_data((const char *)data, size, NULL, vars, &lim, &n, &spans, &n_spans);
    for (size_t i = 0; out && i < n_spans; i++) /* sorted, apart, within the output */
        if (spans[i].start >= spans[i].end || spans[i].end > n || (i && spans[i].start <= spans[i - 1].end)) abort();
    free(spans);
    if (out) {
        if (n > lim.max_output) abort(); /* more than the limit came back */
        free(out);
    } else {
        const char *e = rf_last_error();
        if (strncmp(e, "chat template: ", 15) || strchr(e, '\n')) abort(); /* not one clear line */
    }
    return 0;
}
