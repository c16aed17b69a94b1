/* constraint.c - a grammar over a tokenizer's vocabulary: the constraint
 * rf_params.constraint points at (decode/constraint.h is its decoders'
 * side). The constraint (grammar + token trie) is read-only once built, so
 * generations on several threads may share it; each generation's state
 * lives in its own run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "refusion.h" /* RF_API: rf_constraint_free is public */

#include "decode/constraint.h"
#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "util/util.h"

struct rf_constraint {
    rf_grammar *g;
    rf_token_trie *trie;
};

rf_constraint *rf_constraint_new(rf_grammar *g, rf_token_trie *trie) {
    /* the grammar must be able to start: an initial expansion within bounds */
    rf_gmatch *m = rf_gmatch_new(g);
    if (!m) {
        rf_grammar_free(g), rf_token_trie_free(trie);
        return NULL;
    }
    rf_gmatch_free(m);
    rf_constraint *c = rf_calloc(1, sizeof *c);
    c->g = g, c->trie = trie;
    return c;
}

rf_constraint *rf_constraint_from_gbnf(const rf_tokenizer *t, const char *gbnf, size_t len) {
    rf_grammar *g = rf_grammar_parse(gbnf, len);
    if (!g) return NULL;
    int n = rf_tok_vocab_size(t);
    const unsigned char **bytes = rf_calloc((size_t)n + 1, sizeof *bytes);
    int *lens = rf_calloc((size_t)n + 1, sizeof *lens);
    for (int i = 0; i < n; i++) {
        if (rf_tok_is_special(t, i)) continue; /* control tokens have no text for the grammar */
        bytes[i] = (const unsigned char *)rf_tok_bytes(t, i, &lens[i]);
    }
    rf_token_trie *trie = rf_token_trie_new(bytes, lens, n);
    free(lens), free(bytes);
    return rf_constraint_new(g, trie);
}

rf_constraint *rf_constraint_from_json_schema(const rf_tokenizer *t, const char *schema, size_t len) {
    char *gbnf = rf_json_schema_text_to_gbnf(schema, len);
    if (!gbnf) return NULL;
    rf_constraint *c = rf_constraint_from_gbnf(t, gbnf, strlen(gbnf));
    free(gbnf);
    return c;
}

RF_API void rf_constraint_free(rf_constraint *c) {
    if (!c) return;
    rf_grammar_free(c->g);
    rf_token_trie_free(c->trie);
    free(c);
}

/* ---- the decoders' side ---- */

struct rf_constraint_run {
    const rf_constraint *c;
    rf_gmatch *m;
    int eos, vocab;
    uint64_t *bits;
};

rf_constraint_run *rf_constraint_run_new(const rf_constraint *c, int eos, int vocab) {
    if (eos < 0 || eos >= vocab) {
        rf_set_error("a grammar needs an end-of-sequence token to end the answer with (eos %d)", eos);
        return NULL;
    }
    rf_gmatch *m = rf_gmatch_new(c->g);
    if (!m) return NULL;
    rf_constraint_run *r = rf_calloc(1, sizeof *r);
    r->c = c, r->m = m, r->eos = eos, r->vocab = vocab;
    r->bits = rf_malloc(((size_t)rf_token_trie_size(c->trie) + 63) / 64 * sizeof *r->bits + 8);
    return r;
}

void rf_constraint_run_free(rf_constraint_run *r) {
    if (!r) return;
    rf_gmatch_free(r->m);
    free(r->bits);
    free(r);
}

int rf_constraint_run_mask(rf_constraint_run *r, float *logits) {
    if (rf_gmatch_allowed(r->m, r->c->trie, r->bits)) return -1;
    const int nt = rf_token_trie_size(r->c->trie), n = nt < r->vocab ? nt : r->vocab;
    const float eos_logit = logits[r->eos];
    int any = 0;
    for (int w = 0; w * 64 < n; w++) {
        uint64_t b = r->bits[w];
        int lim = n - w * 64 < 64 ? n - w * 64 : 64;
        if (b == ~0ull && lim == 64) {
            any = 1;
            continue;
        }
        any |= b != 0;
        for (int k = 0; k < lim; k++)
            if (!(b >> k & 1)) logits[w * 64 + k] = -INFINITY;
    }
    for (int i = n; i < r->vocab; i++) logits[i] = -INFINITY;
    /* EOS, whatever its bytes, exactly where the answer is complete */
    if (rf_gmatch_complete(r->m)) logits[r->eos] = eos_logit, any = 1;
    else logits[r->eos] = -INFINITY;
    if (!any) {
        rf_set_error("grammar: no token of the vocabulary can continue the answer");
        return -1;
    }
    return 0;
}

/* 0 taken, 1 refused, -1 error */
static int take(rf_constraint_run *r, int t) {
    if (t == r->eos) return rf_gmatch_complete(r->m) ? 0 : 1;
    int len;
    const unsigned char *b = t >= 0 && t < r->vocab ? rf_token_trie_bytes(r->c->trie, t, &len) : NULL;
    if (!b) return 1;
    return rf_gmatch_accept(r->m, b, (size_t)len);
}

int rf_constraint_run_accept(rf_constraint_run *r, int t) {
    int rc = take(r, t);
    if (rc > 0) rf_set_error("grammar: token %d does not continue the answer", t);
    return rc ? -1 : 0;
}

int rf_constraint_run_prefix(rf_constraint_run *r, const int *tok, int n) {
    rf_gstate s;
    rf_gmatch_save(r->m, &s);
    int k = 0;
    while (k < n && tok[k] != r->eos && take(r, tok[k]) == 0) k++;
    if (k < n && tok[k] == r->eos && rf_gmatch_complete(r->m)) k++; /* an EOS draft ends it */
    rf_gmatch_restore(r->m, &s);
    free(s.ids);
    return k;
}

int rf_constraint_run_mask_after(rf_constraint_run *r, const int *tok, int n, float *logits) {
    if (n == 0) return rf_constraint_run_mask(r, logits);
    rf_gstate s;
    rf_gmatch_save(r->m, &s);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = rf_constraint_run_accept(r, tok[i]);
    if (!rc) rc = rf_constraint_run_mask(r, logits);
    rf_gmatch_restore(r->m, &s);
    free(s.ids);
    return rc;
}
