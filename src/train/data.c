/* data.c - training data in the reference's format: a JSON list of
 * {"query": ..., "response": ...} objects, or JSON Lines of such objects.
 * Tokenised as the reference's train.py does: the prompt is the chat template
 * of one user turn plus the generation prompt; the answer is the response's
 * tokens followed by EOS. Errors name the file and the record (0-based index
 * in the list, or line number for JSON Lines). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "train/train.h"

typedef struct {
    const rf_tokenizer *tok;
    int max_len, skip_long, n_skipped, eos;
    rf_dataset *d;
    int cap;
} loader;

/* what: "record 3" or "line 7"; 0 or -1 with the error set */
static int add_record(loader *L, const char *file, const char *what, json_t *obj) {
    if (!json_is_object(obj))
        return rf_set_error("%s: %s: not an object with \"query\" and \"response\"", file, what), -1;
    json_t *q = json_object_get(obj, "query"), *r = json_object_get(obj, "response");
    if (!q) return rf_set_error("%s: %s: missing \"query\"", file, what), -1;
    if (!r) return rf_set_error("%s: %s: missing \"response\"", file, what), -1;
    if (!json_is_string(q)) return rf_set_error("%s: %s: \"query\" is not a string", file, what), -1;
    if (!json_is_string(r))
        return rf_set_error("%s: %s: \"response\" is not a string", file, what), -1;

    char *prompt = rf_chat_query(L->tok, json_string_value(q)); /* as evaluation prompts it */
    int *pi = NULL, *ri = NULL, np = 0, nr = 0;
    if (!prompt || rf_tok_encode(L->tok, prompt, strlen(prompt), &pi, &np) ||
        rf_tok_encode(L->tok, json_string_value(r), json_string_length(r), &ri, &nr)) {
        char msgbuf[512];
        snprintf(msgbuf, sizeof msgbuf, "%s", rf_last_error());
        free(prompt), free(pi), free(ri);
        return rf_set_error("%s: %s: cannot tokenise: %s", file, what, msgbuf), -1;
    }
    free(prompt);
    int len = np + nr + 1;
    if (len > L->max_len) {
        free(pi), free(ri);
        if (L->skip_long) {
            L->n_skipped++;
            return 0;
        }
        return rf_set_error("%s: %s: %d tokens (prompt %d + response %d + EOS) exceed the "
                            "sequence length %d (raise --seq-len or pass --skip-long)",
                            file, what, len, np, nr, L->max_len),
               -1;
    }
    rf_dataset *d = L->d;
    d->ex = rf_grow(d->ex, sizeof *d->ex, d->n, &L->cap, 256);
    rf_example *e = &d->ex[d->n++];
    e->ids = rf_malloc((size_t)len * sizeof(int));
    memcpy(e->ids, pi, (size_t)np * sizeof(int));
    memcpy(e->ids + np, ri, (size_t)nr * sizeof(int));
    e->ids[len - 1] = L->eos;
    e->n_prompt = np;
    e->n_resp = nr + 1;
    d->n_tokens += len;
    free(pi), free(ri);
    return 0;
}

static int load_file(loader *L, const char *file) {
    size_t n;
    char *text = rf_read_file(file, &n);
    if (!text) return -1; /* rf_read_file names the file */
    size_t i = 0;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    int rc = 0;
    char what[64];
    if (i < n && text[i] == '[') { /* one JSON list */
        json_error_t err;
        json_t *root = json_loadb(text, n, 0, &err);
        if (!root) {
            rf_set_error("%s: not valid JSON at line %d column %d: %s", file, err.line, err.column,
                         err.text);
            rc = -1;
        } else {
            size_t k;
            json_t *v;
            json_array_foreach(root, k, v) {
                snprintf(what, sizeof what, "record %zu", k);
                if ((rc = add_record(L, file, what, v))) break;
            }
            json_decref(root);
        }
    } else if (i < n && text[i] == '{') { /* JSON Lines */
        int line = 1;
        size_t rec = 0;
        for (char *p = text, *end = text + n; p < end && !rc; line++) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            size_t j = 0;
            while (j < len && (p[j] == ' ' || p[j] == '\t' || p[j] == '\r')) j++;
            if (j < len) {
                json_error_t err;
                json_t *v = json_loadb(p, len, 0, &err);
                if (!v) {
                    rf_set_error("%s: line %d (record %zu): not valid JSON: %s", file, line, rec,
                                 err.text);
                    rc = -1;
                } else {
                    snprintf(what, sizeof what, "line %d (record %zu)", line, rec);
                    rc = add_record(L, file, what, v);
                    json_decref(v);
                }
                rec++;
            }
            p = nl ? nl + 1 : end;
        }
    } else {
        rf_set_error("%s: not JSON: expected a list of {\"query\", \"response\"} objects or "
                     "JSON Lines",
                     file);
        rc = -1;
    }
    free(text);
    return rc;
}

int rf_dataset_load(rf_dataset *d, const char *paths, const rf_tokenizer *tok, int max_len,
                    int skip_long, int *n_skipped) {
    memset(d, 0, sizeof *d);
    loader L = {tok, max_len, skip_long, 0, rf_tok_eos_id(tok), d, 0};
    if (L.eos < 0) return rf_set_error("tokenizer has no EOS token"), -1;
    char *list = rf_strdup(paths);
    int rc = 0;
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f && !rc; f = strtok_r(NULL, ",", &save))
        rc = load_file(&L, f);
    if (!rc && d->n == 0) {
        rf_set_error("%s: no usable examples%s", paths,
                     L.n_skipped ? " (every one was longer than the sequence length)" : "");
        rc = -1;
    }
    free(list);
    if (n_skipped) *n_skipped = L.n_skipped;
    if (rc) rf_dataset_free(d);
    return rc;
}

void rf_dataset_free(rf_dataset *d) {
    for (int i = 0; i < d->n; i++) free(d->ex[i].ids);
    free(d->ex);
    memset(d, 0, sizeof *d);
}
