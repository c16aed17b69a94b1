/* decode_grammar.c - decoding under a grammar (rf_params.constraint):
 *  1. on random models (flat and peaky) over a vocabulary of single bytes
 *     and multi-byte pieces (some ending inside a UTF-8 character), with
 *     grammars from GBNF and from a JSON schema, greedy and sampled (top-k,
 *     top-p, min-p, penalties), slot sizes 2-4, the fixed and the adaptive
 *     width: the rolling slot's answer is constrained AR decoding's, token
 *     for token, and so is the step-driven AR sequence's (rf_ar_seq, what
 *     the server runs);
 *  2. every answer's bytes are taken by the grammar, and an answer ending
 *     with EOS is a complete sentence;
 *  3. plan-and-infill (every variant) and MDM under a grammar: every answer
 *     is taken by the grammar; plan-and-infill with (a) and (b) at
 *     token_threshold 0.5, greedy, is constrained greedy AR decoding token
 *     for token (with lookahead and jacobi too);
 *  4. a grammar without an EOS token is refused, and a grammar that forces
 *     its answer gets it from every decoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode/ar_step.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "helpers/small_config.h"
#include "model/forward.h"

#define V 512
enum { EOS = 510, MASK = 511, BOT = 509 };

static unsigned char piece_buf[V][4];
static const unsigned char *bytes[V];
static int lens[V];

/* tokens 0..255: one byte each; 256..508: pieces of 2-3 bytes (JSON-ish
 * ones first, then pairs, some starting or ending a UTF-8 character) */
static void make_vocab(void) {
    static const char *fixed[] = {"{\"", "\":", "\",", "\"}", "tr", "ue", "fa", "lse", "nu", "ll", "12", "34", "0,",
                                  ", ", "[1", "],", "ab", "ba", "+1", "1+", "\xc3\xa9", "a\xc3", "\xa9z", "\"a"};
    int n = (int)(sizeof fixed / sizeof *fixed);
    for (int i = 0; i < 256; i++) piece_buf[i][0] = (unsigned char)i, bytes[i] = piece_buf[i], lens[i] = 1;
    for (int i = 256; i < BOT; i++) {
        int k = i - 256;
        if (k < n) {
            lens[i] = (int)strlen(fixed[k]);
            memcpy(piece_buf[i], fixed[k], (size_t)lens[i]);
        } else {
            const char *alpha = "abc\"{}:,0123456789 []+-tfnrule";
            int a = (int)strlen(alpha);
            piece_buf[i][0] = (unsigned char)alpha[k % a], piece_buf[i][1] = (unsigned char)alpha[(k / a + 3 * k) % a];
            lens[i] = 2;
        }
        bytes[i] = piece_buf[i];
    }
    for (int i = BOT; i < V; i++) bytes[i] = NULL, lens[i] = 0;
}

static rf_constraint *constraint_of(const char *gbnf) {
    rf_grammar *g = rf_grammar_parse(gbnf, strlen(gbnf));
    if (!g) return NULL;
    return rf_constraint_new(g, rf_token_trie_new(bytes, lens, V));
}

/* the answer's bytes are a prefix of a sentence (a sentence when it ended with EOS) */
static void check_answer(const char *gbnf, const rf_gen_result *r, const char *what) {
    rf_grammar *g = rf_grammar_parse(gbnf, strlen(gbnf));
    rf_gmatch *m = rf_gmatch_new(g);
    int ok = 1;
    for (int i = 0; i < r->n_ids && ok; i++) {
        int t = r->ids[i];
        if (t == EOS) {
            ok = i == r->n_ids - 1 && rf_gmatch_complete(m);
            break;
        }
        ok = lens[t] > 0 && rf_gmatch_accept(m, bytes[t], (size_t)lens[t]) == 0;
    }
    CHECK(ok, "%s: the answer leaves the grammar", what);
    rf_gmatch_free(m);
    rf_grammar_free(g);
}

/* rf_ar_seq driven one call at a time, as the server does */
static int ar_by_steps(const rf_model *m, const int *prompt, int P, const rf_params *p, rf_gen_result *out) {
    rf_ar_seq *q = rf_ar_seq_new(m, prompt, P, p);
    if (!q) return -1;
    rf_runstate *rs = rf_runstate_new(&m->cfg, 256, P + p->gen_length);
    float *logits = malloc((size_t)V * sizeof(float));
    int pos_buf[256], rc = 0;
    while (!rf_ar_seq_done(q) && !rc) {
        const int *tok, *pos;
        int n = rf_ar_seq_next(q, 256, &tok, &pos, pos_buf);
        if (n < 1) {
            rc = -1;
            break;
        }
        int last = n - 1, want = rf_ar_seq_wants_logits(q);
        rf_batch b = {1, n, tok, pos, 0, want, &last, logits};
        rc = rf_forward(m, rf_ar_seq_kv(q), rs, &b);
        if (!rc) rf_ar_seq_after(q, want ? logits : NULL);
    }
    free(logits);
    rf_runstate_free(rs);
    if (rc) {
        rf_ar_seq_free(q);
        return -1;
    }
    return rf_ar_seq_finish(q, out);
}

static long n_runs, n_passed;

static void same_answers(const rf_model *m, const int *prompt, int P, rf_params p, const char *gbnf,
                         const char *what) {
    rf_gen_result a, r, s;
    p.rolling = 0, p.method = RF_METHOD_AR;
    if (rf_generate_ar(m, prompt, P, &p, &a)) {
        CHECK(0, "%s: ar: %s", what, rf_last_error());
        return;
    }
    p.rolling = 1, p.method = RF_METHOD_REFUSION;
    if (rf_generate_refusion(m, prompt, P, &p, &r)) {
        CHECK(0, "%s: rolling: %s", what, rf_last_error());
        rf_gen_result_free(&a);
        return;
    }
    int same = a.n_ids == r.n_ids && !memcmp(a.ids, r.ids, (size_t)a.n_ids * sizeof(int));
    CHECK(same, "%s: rolling (%d ids) differs from constrained AR (%d ids)", what, r.n_ids, a.n_ids);
    p.rolling = 0, p.method = RF_METHOD_AR;
    if (ar_by_steps(m, prompt, P, &p, &s) == 0) {
        CHECK(s.n_ids == a.n_ids && !memcmp(s.ids, a.ids, (size_t)a.n_ids * sizeof(int)),
              "%s: rf_ar_seq differs from rf_generate_ar", what);
        rf_gen_result_free(&s);
    } else CHECK(0, "%s: rf_ar_seq: %s", what, rf_last_error());
    check_answer(gbnf, &a, what);
    n_runs++, n_passed += r.accept.verified;
    rf_gen_result_free(&a), rf_gen_result_free(&r);
}

/* plan-and-infill's variants and MDM under grammar gi: answers taken by
 * the grammar; the AR-exact variants equal constrained greedy AR */
static long n_other, n_other_eos;

static void other_decoders(const rf_model *m, const int *prompt, int P, rf_constraint *con, const char *gbnf,
                           const char *what) {
    rf_params p;
    rf_gen_params_default(&p);
    p.constraint = con, p.gen_length = 36, p.slot_size = 4, p.method = RF_METHOD_AR;
    rf_gen_result ar;
    if (rf_decode(m, prompt, P, &p, NULL, &ar)) {
        CHECK(0, "%s: ar: %s", what, rf_last_error());
        return;
    }
    for (int v = 0; v < 12; v++) {
        rf_params q = p;
        q.method = v < 8 ? RF_METHOD_REFUSION : RF_METHOD_MDM, q.rolling = 0;
        const char *name = "?";
        int exact = 0;
        switch (v) {
        case 0: name = "plan-and-infill", q.slot_threshold = 0.2f, q.token_threshold = 0.3f; break;
        case 1: name = "lookahead", q.lookahead = 1, q.n_blocks = 3; break;
        case 2: name = "sampled", q.temperature = 1.0f, q.seed = 7, q.slot_size = 3; break;
        case 3: name = "(a)", q.ar_correct = 1, q.token_threshold = 0.6f; break;
        case 4: name = "(a)+(b)", q.ar_correct = q.ar_check_first = 1, q.token_threshold = 0.5f, exact = 1; break;
        case 5: name = "(a)+(b)+lookahead", q.ar_correct = q.ar_check_first = q.lookahead = 1, exact = 1;
                q.token_threshold = 0.5f; break;
        case 6: name = "(a)+(b)+jacobi", q.ar_correct = q.ar_check_first = q.jacobi = 1, exact = 1;
                q.token_threshold = 0.5f, q.slot_size = 3; break;
        case 7: name = "(a)+jacobi, 2 blocks", q.ar_correct = q.jacobi = 1, q.n_blocks = 2; break;
        case 8: name = "mdm", q.n_blocks = 1; break;
        case 9: name = "mdm, 9 steps", q.mdm_steps = 9, q.n_blocks = 1; break;
        case 10: name = "mdm, sampled, 3 blocks", q.temperature = 0.8f, q.seed = 3, q.n_blocks = 3; break;
        case 11: name = "mdm, 4 steps, no early stop", q.mdm_steps = 4, q.n_blocks = 2; break;
        }
        rf_mdm_params mp, *mpp = NULL;
        if (v == 11) rf_mdm_params_of(&q, NULL, &mp), mp.early_stop = 0, mpp = &mp;
        char w[200];
        snprintf(w, sizeof w, "%s: %s", what, name);
        rf_gen_result r;
        int rc = q.method == RF_METHOD_MDM ? rf_generate_mdm(m, prompt, P, &q, mpp, &r)
                                           : rf_generate_refusion(m, prompt, P, &q, &r);
        if (rc) {
            CHECK(0, "%s: %s", w, rf_last_error());
            continue;
        }
        check_answer(gbnf, &r, w);
        if (exact)
            CHECK(r.n_ids == ar.n_ids && !memcmp(r.ids, ar.ids, (size_t)ar.n_ids * sizeof(int)),
                  "%s: %d ids, not constrained greedy AR's %d", w, r.n_ids, ar.n_ids);
        n_other++, n_other_eos += r.n_ids > 0 && r.ids[r.n_ids - 1] == EOS;
        rf_gen_result_free(&r);
    }
    rf_gen_result_free(&ar);
}

static void test_random_models(void) {
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3},"
                         "\"c\":{\"type\":\"string\",\"maxLength\":5}},\"required\":[\"a\"],"
                         "\"additionalProperties\":false}";
    char *json_gbnf = rf_json_schema_text_to_gbnf(schema, strlen(schema));
    CHECK(json_gbnf, "schema: %s", rf_last_error());
    const char *grammars[] = {
        json_gbnf,
        "root ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" root \")\"",
        "root ::= [a-c\\u00e9]+ \".\"",
    };
    const int prompts[2][5] = {{5, 6, 7, 8, 9}, {300, 1, 2}};
    const int plen[2] = {5, 3};
    for (int mi = 0; mi < 2; mi++) {
        rf_config c = rf_test_config(64, 128, 4, 2, 16, V, 256);
        c.eos_id = EOS, c.mask_id = MASK, c.bot_id = BOT;
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, mi ? 1.5f : 0.5f, 90 + mi);
        for (int gi = 0; gi < 3; gi++) {
            rf_constraint *con = constraint_of(grammars[gi]);
            CHECK(con, "grammar %d: %s", gi, rf_last_error());
            if (!con) continue;
            for (int pi = 0; pi < 2; pi++) {
                char what[64];
                snprintf(what, sizeof what, "model %d grammar %d prompt %d", mi, gi, pi);
                other_decoders(&m, prompts[pi], plen[pi], con, grammars[gi], what);
            }
            for (int pi = 0; pi < 2; pi++)
                for (int mode = 0; mode < 6; mode++)
                    for (int si = 0; si < 3; si++) {
                        rf_params p;
                        rf_gen_params_default(&p);
                        p.constraint = con, p.gen_length = 30 + 7 * pi, p.slot_size = 2 + si;
                        p.slot_threshold = mode % 2 ? 0.0f : 0.3f, p.draft_adaptive = si == 2;
                        if (mode >= 1) p.temperature = 0.9f, p.seed = 5u * mode + pi + 17u * si;
                        if (mode == 2) p.top_k = 7;
                        if (mode == 3) p.top_p = 0.85f;
                        if (mode == 4)
                            p.temperature = 0, p.repeat_penalty = 1.3f, p.frequency_penalty = 0.4f,
                            p.presence_penalty = 0.2f, p.penalty_last_n = 6;
                        if (mode == 5) p.min_p = 0.05f, p.repeat_penalty = 1.1f, p.penalty_last_n = -1;
                        char what[128];
                        snprintf(what, sizeof what, "model %d grammar %d prompt %d mode %d slot %d", mi, gi, pi,
                                 mode, p.slot_size);
                        same_answers(&m, prompts[pi], plen[pi], p, grammars[gi], what);
                    }
            rf_constraint_free(con);
        }
        rf_model_free(&m);
    }
    free(json_gbnf);
    printf("decode_grammar: %ld constrained runs, %ld drafts passed in the rolling slot; %ld plan-and-infill and MDM "
           "runs, %ld ended with EOS\n", n_runs, n_passed, n_other, n_other_eos);
    CHECK(n_passed > 0, "no draft ever passed: the rolling slot was not exercised");
    CHECK(n_other_eos > 0, "no plan-and-infill or MDM answer ended: a grammar was never completed");
}

static void test_refusals(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, V, 256);
    c.eos_id = EOS, c.mask_id = MASK, c.bot_id = BOT;
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 3);
    rf_constraint *con = constraint_of("root ::= \"ab\"");
    int prompt[2] = {1, 2};
    rf_params p;
    rf_gen_params_default(&p);
    p.constraint = con, p.gen_length = 8;
    rf_gen_result r;
    const struct {
        rf_method method;
        const char *name;
    } dec[] = {{RF_METHOD_AR, "ar"}, {RF_METHOD_REFUSION, "plan-and-infill"}, {RF_METHOD_MDM, "mdm"}};
    for (int d = 0; d < 3; d++) {
        p.method = dec[d].method, p.rolling = 0, p.eos_id = -1;
        CHECK(rf_decode(&m, prompt, 2, &p, NULL, &r) == -1 && strstr(rf_last_error(), "end-of-sequence"),
              "%s, no eos: %s", dec[d].name, rf_last_error());
        /* and a grammar that forces its answer */
        p.eos_id = RF_TOKEN_FROM_MODEL;
        if (rf_decode(&m, prompt, 2, &p, NULL, &r)) {
            CHECK(0, "%s: %s", dec[d].name, rf_last_error());
            continue;
        }
        char text[64] = {0};
        int n = 0, ends = r.n_ids > 0 && r.ids[r.n_ids - 1] == EOS;
        for (int i = 0; i < r.n_ids - ends && n + 4 < (int)sizeof text; i++) {
            memcpy(text + n, bytes[r.ids[i]], (size_t)lens[r.ids[i]]);
            n += lens[r.ids[i]];
        }
        CHECK(ends && !strcmp(text, "ab"), "%s: the forced answer is \"%s\" (%s EOS)", dec[d].name, text,
              ends ? "with" : "without");
        rf_gen_result_free(&r);
    }
    rf_constraint_free(con);
    rf_model_free(&m);
}

int main(void) {
    make_vocab();
    test_refusals();
    test_random_models();
    return check_summary("decode_grammar");
}
