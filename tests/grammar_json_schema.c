/* grammar_json_schema.c - JSON schemas as grammars (grammar/json_schema.c)
 * against Debian's python3-jsonschema (tests/helpers/jsonschema_oracle.py):
 *  1. for every schema of tests/data/grammar/schemas.json, each listed
 *     document is accepted by the grammar exactly when jsonschema finds it
 *     JSON and valid (cases include llama.cpp's test-grammar-integration
 *     schema cases);
 *  2. documents sampled at random from each grammar (random walks over the
 *     bytes it allows) are JSON and valid under jsonschema;
 *  3. every schema of refused_schemas.json is refused with an error naming
 *     its keyword.
 * Exits 77 (skipped) when python3 or its jsonschema module is missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "util/util.h"

enum { SAMPLES = 12, BUDGET = 60, MAX_LEN = 3000 };

/* 1: complete sentence, 0: not, -1 error */
static int grammar_accepts(const rf_grammar *g, const char *doc) {
    rf_gmatch *m = rf_gmatch_new(g);
    if (!m) return -1;
    int rc = rf_gmatch_accept(m, (const unsigned char *)doc, strlen(doc));
    int ok = rc < 0 ? -1 : rc == 0 && rf_gmatch_complete(m);
    rf_gmatch_free(m);
    return ok;
}

static int has(const uint64_t b[4], int c) { return (int)(b[c >> 6] >> (c & 63) & 1); }

/* a random sentence: random allowed bytes (mostly printable ASCII) for
 * BUDGET bytes, then bytes that tend to close (quotes, brackets, digits)
 * and a stop as soon as it is complete. NULL when it did not end. */
static char *sample(const rf_grammar *g, rf_rng *rng) {
    rf_gmatch *m = rf_gmatch_new(g);
    if (!m) return NULL;
    char *out = malloc(MAX_LEN + 1);
    int n = 0;
    while (n < MAX_LEN) {
        if (rf_gmatch_complete(m) && (n >= BUDGET || rf_rng_uniform(rng) < 0.15)) break;
        uint64_t b[4];
        rf_gmatch_next_bytes(m, b);
        int cand[256], nc = 0;
        if (n >= BUDGET) {
            const char *closers = "\"}]0";
            for (const char *q = closers; *q && !nc; q++)
                if (has(b, (unsigned char)*q)) cand[nc++] = (unsigned char)*q;
            if (!nc)
                for (int ch = 0x21; ch < 0x7F; ch++)
                    if (has(b, ch) && !strchr(",[{:\\", ch)) cand[nc++] = ch;
        } else if (rf_rng_uniform(rng) < 0.9) {
            for (int ch = 0x20; ch < 0x7F; ch++)
                if (has(b, ch)) cand[nc++] = ch;
        }
        if (!nc)
            for (int ch = 0; ch < 256; ch++)
                if (has(b, ch)) cand[nc++] = ch;
        if (!nc) break;
        unsigned char pick = (unsigned char)cand[(int)(rf_rng_uniform(rng) * nc) % nc];
        if (rf_gmatch_accept(m, &pick, 1) != 0) break;
        out[n++] = (char)pick;
    }
    out[n] = 0;
    int done = rf_gmatch_complete(m);
    rf_gmatch_free(m);
    if (!done) {
        free(out);
        return NULL;
    }
    return out;
}

static json_t *load(const char *name) {
    const char *src = getenv("REFUSION_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/grammar/%s", src ? src : ".", name);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) fprintf(stderr, "%s: %s\n", path, err.text);
    return j;
}

typedef struct {
    int schema;
    int expect;      /* grammar's answer: 1 / 0; 2: a sample (must be valid) */
    const char *doc; /* owned by the caller */
} query;

int main(void) {
    json_t *cases = load("schemas.json"), *refused = load("refused_schemas.json");
    if (!cases || !refused) return 1;
    char in_path[] = "/tmp/rf_schema_in_XXXXXX", out_path[] = "/tmp/rf_schema_out_XXXXXX";
    int fd_in = mkstemp(in_path), fd_out = mkstemp(out_path);
    if (fd_in < 0 || fd_out < 0) return 1;
    close(fd_out);
    FILE *in = fdopen(fd_in, "w");
    query *qs = NULL;
    int nq = 0, cap = 0, gave_up = 0, sampled = 0;
    char **samples = NULL;
    int n_samples = 0, cap_samples = 0;
    rf_rng rng;
    rf_rng_seed(&rng, 1234);
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        json_t *schema = json_object_get(c, "schema");
        char *gbnf = rf_json_schema_to_gbnf(schema);
        CHECK(gbnf, "schema %zu refused: %s", ci, rf_last_error());
        if (!gbnf) continue;
        rf_grammar *g = rf_grammar_parse(gbnf, strlen(gbnf));
        CHECK(g, "schema %zu: its grammar does not compile: %s\n%s", ci, rf_last_error(), gbnf);
        free(gbnf);
        if (!g) continue;
        size_t di;
        json_t *d;
        json_array_foreach(json_object_get(c, "docs"), di, d) {
            qs = rf_grow(qs, sizeof *qs, nq, &cap, 64);
            qs[nq++] = (query){(int)ci, grammar_accepts(g, json_string_value(d)), json_string_value(d)};
        }
        for (int k = 0; k < SAMPLES; k++) {
            char *s = sample(g, &rng);
            sampled++;
            if (!s) {
                gave_up++;
                continue;
            }
            samples = rf_grow(samples, sizeof *samples, n_samples, &cap_samples, 64);
            samples[n_samples++] = s;
            qs = rf_grow(qs, sizeof *qs, nq, &cap, 64);
            qs[nq++] = (query){(int)ci, 2, s};
        }
        rf_grammar_free(g);
    }
    for (int i = 0; i < nq; i++) {
        json_t *line = json_pack("{s:O,s:s}", "schema", json_object_get(json_array_get(cases, (size_t)qs[i].schema), "schema"),
                                 "doc", qs[i].doc);
        char *txt = json_dumps(line, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(in, "%s\n", txt);
        free(txt);
        json_decref(line);
    }
    fclose(in);
    const char *src = getenv("REFUSION_SRC");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/helpers/jsonschema_oracle.py < %s > %s", src ? src : ".", in_path,
             out_path);
    int st = system(cmd);
    if (WEXITSTATUS(st) == 77 || WEXITSTATUS(st) == 127) {
        printf("grammar_json_schema: skipped (python3-jsonschema missing)\n");
        unlink(in_path), unlink(out_path);
        return 77;
    }
    CHECK(st == 0, "oracle failed: %d", st);
    FILE *out = fopen(out_path, "r");
    char ans[16];
    for (int i = 0; i < nq && out; i++) {
        if (!fgets(ans, sizeof ans, out)) {
            CHECK(0, "oracle answered %d of %d", i, nq);
            break;
        }
        int valid = ans[0] == '1';
        if (qs[i].expect == 2)
            CHECK(valid, "schema %d: sampled document not valid (%c): %s", qs[i].schema, ans[0], qs[i].doc);
        else
            CHECK(qs[i].expect == valid, "schema %d: grammar %s, jsonschema %c: %s", qs[i].schema,
                  qs[i].expect ? "accepts" : "rejects", ans[0], qs[i].doc);
    }
    if (out) fclose(out);
    unlink(in_path), unlink(out_path);
    CHECK(gave_up * 10 <= sampled, "%d of %d random walks did not end", gave_up, sampled);
    printf("grammar_json_schema: %d documents checked, %d sampled (%d walks did not end)\n", nq, n_samples, gave_up);
    /* refusals name the keyword */
    size_t ri;
    json_t *r;
    json_array_foreach(refused, ri, r) {
        char *gbnf = rf_json_schema_to_gbnf(json_array_get(r, 0));
        const char *kw = json_string_value(json_array_get(r, 1));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", kw);
        CHECK(!gbnf && strstr(rf_last_error(), quoted), "refusal %zu: expected %s, got %s", ri, quoted,
              gbnf ? "a grammar" : rf_last_error());
        free(gbnf);
    }
    for (int i = 0; i < n_samples; i++) free(samples[i]);
    free(samples), free(qs);
    json_decref(cases), json_decref(refused);
    return check_summary("grammar_json_schema");
}
