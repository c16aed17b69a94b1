/* decode_logprobs.c - log-probabilities from plan-and-infill (every
 * variant) and MDM (rf_params.logprobs), on random models (flat and peaky):
 *  1. asking for them changes no answer, token id or call count;
 *  2. every answer token has an entry for it (the same token), a
 *     log-probability <= 0 and its alternatives sorted, the token among
 *     them when it is likelier than the last;
 *  3. greedy, every token is the argmax of the row it was drawn from (a
 *     plan's mask, an infilling re-draft, the AR head's row with (a) or
 *     (b)), so its entry is its own row's top-1: a token reported with the
 *     distribution of a value it no longer has fails this;
 *  4. under a grammar the entries still belong to the answer's tokens.
 * AR decoding and the rolling slot: decode_rolling.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "helpers/small_config.h"
#include "model/forward.h"

#define V 300
enum { EOS = 297, MASK = 299, BOT = 298 };

static long n_tokens, n_top1;

static int decode(const rf_model *m, const int *prompt, int P, const rf_params *p, rf_gen_result *r) {
    return p->method == RF_METHOD_MDM ? rf_generate_mdm(m, prompt, P, p, NULL, r)
                                      : rf_generate_refusion(m, prompt, P, p, r);
}

static void check_run(const rf_model *m, const int *prompt, int P, rf_params p, int greedy, const char *what) {
    rf_gen_result plain, with;
    if (decode(m, prompt, P, &p, &plain)) {
        CHECK(0, "%s: %s", what, rf_last_error());
        return;
    }
    p.logprobs = 1, p.top_logprobs = 4;
    if (decode(m, prompt, P, &p, &with)) {
        CHECK(0, "%s with logprobs: %s", what, rf_last_error());
        rf_gen_result_free(&plain);
        return;
    }
    CHECK(plain.n_ids == with.n_ids && !memcmp(plain.ids, with.ids, (size_t)plain.n_ids * sizeof(int)) &&
              plain.n_calls == with.n_calls,
          "%s: asking for logprobs changed the answer", what);
    CHECK(with.logprobs != NULL, "%s: no logprobs", what);
    for (int i = 0; with.logprobs && i < with.n_ids; i++) {
        const rf_token_logprob *x = &with.logprobs[i];
        CHECK(x->token == with.ids[i] && x->n_top == 4 && x->logprob <= 0.0f && isfinite(x->logprob),
              "%s: position %d: entry for token %d (answer %d), logprob %g", what, i, x->token, with.ids[i],
              x->logprob);
        int sorted = 1, own = 0;
        for (int k = 0; k < x->n_top; k++) {
            if (k && x->top_logprob[k] > x->top_logprob[k - 1]) sorted = 0;
            if (x->top_token[k] == x->token) own = x->top_logprob[k] == x->logprob;
        }
        CHECK(sorted, "%s: position %d: alternatives not sorted", what, i);
        if (x->logprob > x->top_logprob[x->n_top - 1])
            CHECK(own, "%s: position %d: the token is missing from its alternatives", what, i);
        if (greedy) {
            CHECK(x->top_token[0] == x->token && x->top_logprob[0] == x->logprob,
                  "%s: position %d: greedy token %d is not its row's top-1 (%d, %g vs %g)", what, i, x->token,
                  x->top_token[0], x->top_logprob[0], x->logprob);
            n_top1++;
        }
        n_tokens++;
    }
    rf_gen_result_free(&plain), rf_gen_result_free(&with);
}

int main(void) {
    const int prompt[5] = {5, 6, 7, 8, 9};
    /* bytes for a grammar: tokens 0..255 one byte each, the rest none */
    static unsigned char one[256];
    const unsigned char *bytes[V];
    int lens[V];
    for (int i = 0; i < V; i++) {
        if (i < 256) one[i] = (unsigned char)i;
        bytes[i] = i < 256 ? &one[i] : NULL, lens[i] = i < 256;
    }
    const char *gbnf = "root ::= [a-z]+ (\" \" [a-z]+)* \".\"";
    rf_constraint *con = rf_constraint_new(rf_grammar_parse(gbnf, strlen(gbnf)), rf_token_trie_new(bytes, lens, V));
    CHECK(con != NULL, "grammar: %s", rf_last_error());
    for (int mi = 0; mi < 2; mi++) {
        rf_config c = rf_test_config(64, 128, 4, 2, 16, V, 256);
        c.eos_id = EOS, c.mask_id = MASK, c.bot_id = BOT;
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, mi ? 1.5f : 0.4f, 40 + mi);
        for (int v = 0; v < 10; v++) {
            rf_params p;
            rf_gen_params_default(&p);
            p.gen_length = 32, p.slot_size = 4, p.n_blocks = 2, p.method = RF_METHOD_REFUSION, p.rolling = 0;
            const char *name = "?";
            int greedy = 1;
            switch (v) {
            case 0: name = "plan-and-infill", p.slot_threshold = 0.1f, p.token_threshold = 0.2f; break;
            case 1: name = "plan-and-infill, default thresholds"; break;
            case 2: name = "lookahead", p.lookahead = 1, p.slot_threshold = 0.05f; break;
            case 3: name = "(a)", p.ar_correct = 1; break;
            case 4: name = "(a)+(b)", p.ar_correct = p.ar_check_first = 1, p.token_threshold = 0.5f; break;
            case 5: name = "(a)+(b)+jacobi", p.ar_correct = p.ar_check_first = p.jacobi = 1; break;
            case 6: name = "sampled", p.temperature = 0.9f, p.seed = 11, greedy = 0; break;
            case 7: name = "mdm", p.method = RF_METHOD_MDM; break;
            case 8: name = "mdm, 8 steps, sampled", p.method = RF_METHOD_MDM, p.mdm_steps = 8, p.temperature = 0.7f,
                    p.seed = 3, greedy = 0; break;
            case 9: name = "mdm, 10 steps", p.method = RF_METHOD_MDM, p.mdm_steps = 10; break;
            }
            char what[128];
            snprintf(what, sizeof what, "model %d: %s", mi, name);
            check_run(&m, prompt, 5, p, greedy, what);
            if (con) { /* under a grammar: the entries are the tokens' */
                p.constraint = con;
                snprintf(what, sizeof what, "model %d: %s, grammar", mi, name);
                check_run(&m, prompt, 5, p, 0, what);
            }
        }
        rf_model_free(&m);
    }
    rf_constraint_free(con);
    printf("decode_logprobs: %ld answer tokens, %ld checked as their row's top-1\n", n_tokens, n_top1);
    CHECK(n_top1 > 100, "too few greedy tokens checked (%ld)", n_top1);
    return check_summary("decode_logprobs");
}
