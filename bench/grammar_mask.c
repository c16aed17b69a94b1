/* grammar_mask.c - the cost per token of decoding under a grammar: the
 * allowed-token mask (trie walk, cached per state) and the advance by the
 * token, along a document the grammar accepts, over a real vocabulary.
 *   bench_grammar_mask TOKENIZER SCHEMA.json DOC.json [REPEATS]
 * Each repeat is one generation's run (its caches start empty): the
 * document's tokens (its encoding) are masked and accepted one by one.
 * Reports the mean microseconds per token of mask and accept, and the
 * constraint's build time (trie of the vocabulary). The last line is
 * machine-readable:
 *   RESULT us_per_token_mean us_per_token_best build_ms n_tokens
 * Compare with the time of one model call (bench_model_forward) at the
 * model's shape: docs/grammar.md gives the commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/constraint.h"
#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER SCHEMA.json DOC.json [REPEATS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    rf_tokenizer *t = rf_tok_load(argv[1]);
    size_t slen, dlen;
    char *schema = t ? rf_read_file(argv[2], &slen) : NULL, *doc = schema ? rf_read_file(argv[3], &dlen) : NULL;
    if (!doc) {
        rf_print_error();
        return 1;
    }
    double t0 = rf_now();
    rf_constraint *c = rf_constraint_from_json_schema(t, schema, slen);
    double build = rf_now() - t0;
    if (!c) {
        rf_print_error();
        return 1;
    }
    int *ids, n;
    while (dlen && (doc[dlen - 1] == '\n' || doc[dlen - 1] == ' ')) doc[--dlen] = 0;
    if (rf_tok_encode(t, doc, dlen, &ids, &n)) {
        rf_print_error();
        return 1;
    }
    const int V = rf_tok_vocab_size(t), eos = rf_tok_eos_id(t) >= 0 ? rf_tok_eos_id(t) : 0;
    float *row = malloc((size_t)V * sizeof(float));
    double best = 1e30, sum = 0;
    for (int r = 0; r < reps; r++) {
        rf_constraint_run *run = rf_constraint_run_new(c, eos, V);
        if (!run) {
            rf_print_error();
            return 1;
        }
        double s = rf_now();
        for (int i = 0; i <= n; i++) {
            for (int k = 0; k < V; k++) row[k] = 0.0f;
            if (rf_constraint_run_mask(run, row)) {
                rf_print_error();
                return 1;
            }
            int tok = i < n ? ids[i] : eos;
            if (row[tok] != 0.0f) {
                fprintf(stderr, "token %d (id %d) of the document is masked: the document is not valid\n", i, tok);
                return 1;
            }
            if (i < n && rf_constraint_run_accept(run, tok)) {
                rf_print_error();
                return 1;
            }
        }
        double us = (rf_now() - s) * 1e6 / (n + 1);
        sum += us;
        if (us < best) best = us;
        rf_constraint_run_free(run);
    }
    printf("grammar mask over %d tokens: %.1f us/token mean, %.1f best of %d; constraint built in %.1f ms (%d tokens "
           "in its trie)\n",
           n + 1, sum / reps, best, reps, build * 1e3, V);
    printf("RESULT %.2f %.2f %.2f %d\n", sum / reps, best, build * 1e3, n + 1);
    free(row), free(ids), free(doc), free(schema);
    rf_constraint_free(c);
    rf_tok_free(t);
    return 0;
}
