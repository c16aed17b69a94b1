/* api.c - the public API (include/refusion.h) over the internal modules:
 * handles wrap rf_model / rf_tokenizer; a session owns a workspace
 * (model/workspace.h) that the decoders borrow their KV cache and run state
 * from; every entry point that allocates catches rf_die so the library
 * returns an error instead of exiting. */
#include "refusion.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "decode/decode_impl.h" /* rf_gen_mem_bytes */
#include "decode/mdm.h"
#include "model/model.h"
#include "api/api_internal.h"
#include "model/workspace.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

struct refusion_model {
    rf_model m;
    char *path;
};

struct refusion_tokenizer {
    rf_tokenizer *t;
};

struct refusion_session {
    const refusion_model *model;
    rf_workspace *ws;
    rf_step *steps; /* the last generation's, for rf_stats.steps */
    int steps_cap;
    float *call_cost; /* the adaptive rolling slot's cost model (rf_call_cost_measure), or NULL */
    int n_call_cost;
};

struct refusion_text_stream {
    rf_tok_stream *st;
};

/* rf_last_error is util's (exported: see CMakeLists.txt's export list) */

RF_API const char *rf_version(void) { return RF_VERSION_STRING; }

/* the public callbacks and events take int32_t arrays, the decoders hand out
 * int arrays: the same type here, so they are passed through as they are */
_Static_assert(sizeof(int) == sizeof(int32_t) && (int)-1 == (int32_t)-1, "int is int32_t");

/* Run body with rf_die turned into an error return; on_die runs after the
 * scoped blocks allocated inside were freed (util.h), and DIED is the status
 * to return: RF_ERR_NOMEM for a failed allocation, else RF_ERR_INTERNAL. */
#define CATCH_DIE(on_die)     \
    rf_catch c_;              \
    rf_catch_push(&c_);       \
    if (setjmp(c_.jb)) {      \
        on_die;               \
    }
#define END_CATCH() rf_catch_pop(&c_)
#define DIED (c_.oom ? RF_ERR_NOMEM : RF_ERR_INTERNAL)

/* A zeroed handle, or NULL with the reason ("<what> is NULL" when arg, the
 * argument it is made from, is NULL). */
static void *new_handle(size_t size, const void *arg, const char *what) {
    if (!arg) {
        rf_set_error("%s is NULL", what);
        return NULL;
    }
    void *h = calloc(1, size);
    if (!h) rf_set_error("out of memory");
    return h;
}

RF_API refusion_model *rf_model_open(const char *path) {
    refusion_model *volatile h = new_handle(sizeof *h, path, "rf_model_open: path");
    if (!h) return NULL;
    CATCH_DIE(free(h); return NULL);
    int rc = rf_model_load(&h->m, path);
    if (!rc) h->path = rf_strdup(path);
    END_CATCH();
    if (rc) {
        free(h);
        return NULL;
    }
    return h;
}

RF_API void rf_model_close(refusion_model *m) {
    if (!m) return;
    rf_model_free(&m->m);
    free(m->path);
    free(m);
}

RF_API int rf_model_n_vocab(const refusion_model *m) { return m->m.cfg.vocab_size; }
RF_API int rf_model_n_ctx(const refusion_model *m) { return m->m.cfg.max_pos; }
RF_API int rf_model_eos_id(const refusion_model *m) { return m->m.cfg.eos_id; }
RF_API int rf_model_mask_id(const refusion_model *m) { return m->m.cfg.mask_id; }
RF_API int rf_model_has_tokenizer(const refusion_model *m) { return rf_tok_model_has_tokenizer(m->path); }

RF_API refusion_tokenizer *rf_tokenizer_open(const refusion_model *m) {
    rf_tokenizer *volatile t = NULL;
    CATCH_DIE(return NULL);
    t = rf_tok_for_model(m->path, NULL);
    END_CATCH();
    if (!t) return NULL;
    refusion_tokenizer *h = new_handle(sizeof *h, t, "rf_tokenizer_open: tokenizer");
    if (!h) {
        rf_tok_free(t);
        return NULL;
    }
    h->t = t;
    return h;
}

RF_API int rf_tokenizer_set_chat_template(refusion_tokenizer *t, const char *spec) {
    if (!t || !spec) {
        rf_set_error("rf_tokenizer_set_chat_template: bad arguments");
        return RF_ERR_INVALID;
    }
    int rc;
    CATCH_DIE(return DIED);
    rc = rf_tok_set_chat_template(t->t, spec);
    END_CATCH();
    return rc ? RF_ERR_INVALID : 0;
}

RF_API void rf_tokenizer_close(refusion_tokenizer *t) {
    if (!t) return;
    rf_tok_free(t->t);
    free(t);
}

/* The ids of text into ids[0 .. cap-1]; returns how many it has, or an
 * rf_status. */
static int encode_out(const rf_tokenizer *t, const char *text, int32_t *ids, int cap) {
    int *volatile v = NULL;
    CATCH_DIE(free(v); return DIED);
    int *out = NULL, n = 0;
    int rc = rf_tok_encode(t, text, strlen(text), &out, &n);
    v = out;
    END_CATCH();
    if (rc) {
        free(v);
        return RF_ERR_INVALID;
    }
    for (int i = 0; i < n && i < cap; i++) ids[i] = v[i];
    free(v);
    return n;
}

RF_API int rf_tokenize(const refusion_tokenizer *t, const char *text, int chat, int32_t *ids, int cap) {
    if (!t || !text || cap < 0 || (cap > 0 && !ids)) {
        rf_set_error("rf_tokenize: bad arguments");
        return RF_ERR_INVALID;
    }
    if (chat) { /* the prompt of a query (tokenizer/chat.c rf_chat_query) */
        rf_chat_message msg = {"user", text};
        return rf_tokenize_chat(t, &msg, 1, 1, ids, cap);
    }
    return encode_out(t->t, text, ids, cap);
}

RF_API int rf_tokenize_chat(const refusion_tokenizer *t, const rf_chat_message *msgs, int n, int think,
                            int32_t *ids, int cap) {
    if (!t || !msgs || n < 1 || cap < 0 || (cap > 0 && !ids)) {
        rf_set_error("rf_tokenize_chat: bad arguments");
        return RF_ERR_INVALID;
    }
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            rf_set_error("rf_tokenize_chat: message %d has no role or content", i);
            return RF_ERR_INVALID;
        }
    /* bad UTF-8 is reported at its offset in what the user typed, not in
     * the templated text */
    int rc = encode_out(t->t, msgs[n - 1].content, NULL, 0);
    if (rc < 0) return rc;
    char *volatile text = NULL;
    rf_chat_msg *volatile cm = NULL;
    CATCH_DIE(free(text); free(cm); return DIED);
    cm = rf_malloc((size_t)n * sizeof *cm);
    for (int i = 0; i < n; i++) cm[i] = (rf_chat_msg){msgs[i].role, msgs[i].content};
    text = rf_chat_apply(t->t, cm, n, 1, think);
    END_CATCH();
    free(cm);
    rc = text ? encode_out(t->t, text, ids, cap) : RF_ERR_INVALID;
    free(text);
    return rc;
}

RF_API int rf_token_id(const refusion_tokenizer *t, const char *piece) {
    return t && piece ? rf_tok_id(t->t, piece) : -1;
}

RF_API int rf_tokenizer_eos_id(const refusion_tokenizer *t) { return t ? rf_tok_eos_id(t->t) : -1; }

RF_API refusion_text_stream *rf_text_stream_new(const refusion_tokenizer *t, int skip_special) {
    refusion_text_stream *volatile h = new_handle(sizeof *h, t, "rf_text_stream_new: tokenizer");
    if (!h) return NULL;
    CATCH_DIE(free(h); return NULL);
    h->st = rf_tok_stream_new(t->t, skip_special);
    END_CATCH();
    return h;
}

/* put and flush only append to the stream's buffer: an allocation failure
 * there is returned as NULL like a bad id */
RF_API const char *rf_text_stream_put(refusion_text_stream *s, int32_t id) {
    const char *volatile r = NULL;
    CATCH_DIE(return NULL);
    r = rf_tok_stream_put(s->st, id);
    END_CATCH();
    if (!r) rf_set_error("rf_text_stream_put: token id %d is outside the vocabulary", (int)id);
    return r;
}

RF_API const char *rf_text_stream_flush(refusion_text_stream *s) {
    const char *volatile r = NULL;
    CATCH_DIE(return NULL);
    r = rf_tok_stream_flush(s->st);
    END_CATCH();
    return r;
}

RF_API void rf_text_stream_free(refusion_text_stream *s) {
    if (!s) return;
    rf_tok_stream_free(s->st);
    free(s);
}

RF_API int rf_detokenize(const refusion_tokenizer *t, const int32_t *ids, int n, int skip_special,
                         char *buf, int cap) {
    if (!t || n < 0 || (n > 0 && !ids) || cap < 0 || (cap > 0 && !buf)) {
        rf_set_error("rf_detokenize: bad arguments");
        return RF_ERR_INVALID;
    }
    int *volatile v = NULL;
    CATCH_DIE(return DIED);
    v = rf_malloc((size_t)n * sizeof(int) + 1);
    for (int i = 0; i < n; i++) v[i] = ids[i];
    char *s = rf_tok_decode(t->t, v, n, skip_special);
    END_CATCH();
    free(v);
    if (!s) {
        rf_set_error("rf_detokenize: a token id is outside the vocabulary (%d)", rf_tok_vocab_size(t->t));
        return RF_ERR_INVALID;
    }
    size_t len = strlen(s);
    if (cap > 0) {
        size_t k = len < (size_t)cap - 1 ? len : (size_t)cap - 1;
        memcpy(buf, s, k);
        buf[k] = 0;
    }
    free(s);
    return len > INT32_MAX ? INT32_MAX : (int)len;
}

/* the settings rf_params (public) and rf_gen_params (the decoders') both
 * hold under one name; the others are converted one by one below */
#define SAME_PARAMS(X)                                                                                                 \
    X(gen_length) X(slot_size) X(n_blocks) X(slot_threshold) X(token_threshold) X(temperature) X(top_k) X(top_p)     \
    X(seed) X(lookahead) X(jacobi) X(rolling) X(min_p) X(repeat_penalty) X(presence_penalty) X(frequency_penalty)   \
    X(penalty_last_n) X(draft_adaptive)

rf_params rf_params_from_gen(const rf_gen_params *g, rf_method method, int mdm_steps) {
    rf_params p;
    memset(&p, 0, sizeof p);
    p.method = method;
#define FROM_GEN(f) p.f = g->f;
    SAME_PARAMS(FROM_GEN)
#undef FROM_GEN
    p.ar_verify = g->ar_correct + 2 * g->ar_check_first;
    p.mdm_steps = mdm_steps;
    p.eos_id = g->eos_id == RF_ID_FROM_MODEL ? RF_TOKEN_FROM_MODEL : g->eos_id;
    return p;
}

RF_API rf_params rf_params_default(void) {
    rf_gen_params g;
    rf_gen_params_default(&g);
    return rf_params_from_gen(&g, RF_METHOD_REFUSION, 0);
}

RF_API refusion_session *rf_session_new(const refusion_model *m) {
    refusion_session *volatile s = new_handle(sizeof *s, m, "rf_session_new: model");
    if (!s) return NULL;
    CATCH_DIE(free(s); return NULL);
    s->ws = rf_workspace_new();
    END_CATCH();
    s->model = m;
    return s;
}

RF_API void rf_session_free(refusion_session *s) {
    if (!s) return;
    rf_workspace_free(s->ws);
    free(s->steps);
    free(s->call_cost);
    free(s);
}

RF_API size_t rf_session_bytes(const refusion_session *s) { return rf_workspace_bytes(s->ws); }

/* The public callbacks over the decoders' own (see the _Static_assert). */
typedef struct {
    const rf_params *p;
} cb_bridge;

static void on_tokens(const int *ids, int n, void *user) {
    const cb_bridge *b = user;
    b->p->on_tokens((const int32_t *)ids, n, b->p->user);
}

static void on_event(const rf_decode_event *ev, void *user) {
    const cb_bridge *b = user;
    /* the enums name the same kinds in the same order (checked below) */
    rf_event e = {(rf_event_type)ev->kind, ev->step, ev->n, (const int32_t *)ev->apos, (const int32_t *)ev->tok,
                  ev->accepted};
    b->p->on_event(&e, b->p->user);
}
_Static_assert((int)RF_EVENT_PLAN == (int)RF_EV_PLAN && (int)RF_EVENT_FAST_COMMIT == (int)RF_EV_FAST_COMMIT &&
                   (int)RF_EVENT_INFILL_ITER == (int)RF_EV_INFILL_ITER &&
                   (int)RF_EVENT_INFILL_COMMIT == (int)RF_EV_INFILL_COMMIT && (int)RF_EVENT_DROP == (int)RF_EV_DROP &&
                   (int)RF_EVENT_AR_TOKEN == (int)RF_EV_AR_TOKEN,
               "rf_event_type = rf_event_kind");

/* p as the decoders' settings; 0, or RF_ERR_INVALID for a setting they
 * have no field to refuse */
static int gen_params(const rf_params *p, rf_gen_params *g, cb_bridge *bridge) {
    if (p->method != RF_METHOD_REFUSION && p->method != RF_METHOD_AR && p->method != RF_METHOD_MDM) {
        rf_set_error("unknown method %d", (int)p->method);
        return RF_ERR_INVALID;
    }
    if (p->ar_verify < 0 || p->ar_verify > 3) {
        rf_set_error("ar_verify must be 0..3, got %d", p->ar_verify);
        return RF_ERR_INVALID;
    }
    if (p->eos_id < RF_TOKEN_FROM_MODEL) {
        rf_set_error("eos_id must be a token id, -1 (none) or RF_TOKEN_FROM_MODEL, got %d", p->eos_id);
        return RF_ERR_INVALID;
    }
    rf_gen_params_default(g);
#define TO_GEN(f) g->f = p->f;
    SAME_PARAMS(TO_GEN)
#undef TO_GEN
    g->ar_correct = p->ar_verify & 1;
    g->ar_check_first = p->ar_verify >> 1;
    g->eos_id = p->eos_id == RF_TOKEN_FROM_MODEL ? RF_ID_FROM_MODEL : p->eos_id;
    g->cancel = p->cancel;
    bridge->p = p;
    g->user = bridge;
    if (p->on_tokens) g->on_tokens = on_tokens;
    if (p->on_event) g->on_event = on_event;
    return 0;
}

RF_API int rf_params_check(const refusion_model *m, const int32_t *prompt, int n_prompt, const rf_params *p) {
    if (!m || !p || n_prompt < 0 || (n_prompt > 0 && !prompt)) {
        rf_set_error("rf_params_check: bad arguments");
        return RF_ERR_INVALID;
    }
    rf_gen_params g;
    cb_bridge bridge;
    if (gen_params(p, &g, &bridge)) return RF_ERR_INVALID;
    return rf_gen_check(&m->m, (const int *)prompt, n_prompt, &g, p->method != RF_METHOD_REFUSION) ? RF_ERR_INVALID
                                                                                                  : RF_OK;
}

RF_API int64_t rf_generate_bytes(const refusion_model *m, int n_prompt, const rf_params *p) {
    rf_gen_params g;
    cb_bridge bridge;
    if (!m || !p || n_prompt < 0) {
        rf_set_error("rf_generate_bytes: bad arguments");
        return RF_ERR_INVALID;
    }
    if (gen_params(p, &g, &bridge)) return RF_ERR_INVALID;
    return rf_gen_mem_bytes(&m->m, n_prompt, &g, p->method == RF_METHOD_AR);
}

/* the result's step statistics into the session's array (grown, never shrunk) */
static void keep_steps(refusion_session *s, const rf_gen_result *r) {
    if (r->n_steps > s->steps_cap) {
        free(s->steps);
        s->steps = NULL;
        s->steps = rf_malloc((size_t)r->n_steps * sizeof *s->steps);
        s->steps_cap = r->n_steps;
    }
    for (int i = 0; i < r->n_steps; i++) {
        const rf_step_stat *t = &r->steps[i];
        s->steps[i] = (rf_step){t->block, t->slots_planned, t->slots_fast, t->slots_infilled, t->infill_iters,
                                t->tokens, t->calls};
    }
}

static void fill_stats(const refusion_session *s, const rf_gen_result *r, rf_stats *st) {
    memset(st, 0, sizeof *st);
    st->n_tokens = r->n_ids;
    st->hit_eos = r->hit_eos;
    st->n_calls = r->n_calls;
    st->seconds = r->wall_s;
    st->tpf = r->tpf;
    st->tokens_per_call = r->tokens_per_call;
    st->tokens_per_s = r->tokens_per_s;
    st->n_steps = r->n_steps;
    st->steps = s->steps;
    const rf_accept_stats *a = &r->accept;
    st->first_free = a->first_free, st->first_checked = a->first_checked, st->first_replaced = a->first_replaced;
    st->verified = a->verified, st->forced_draft = a->forced_draft, st->forced_ar = a->forced_ar;
}

RF_API int rf_generate(refusion_session *s, const int32_t *prompt, int n_prompt, const rf_params *p,
                       int32_t *out, int cap, rf_stats *stats) {
    if (!s || !p || n_prompt < 0 || (n_prompt > 0 && !prompt) || cap < 0 || (cap > 0 && !out)) {
        rf_set_error("rf_generate: bad arguments");
        return RF_ERR_INVALID;
    }
    const rf_model *m = &s->model->m;
    rf_gen_params g;
    cb_bridge bridge;
    if (gen_params(p, &g, &bridge)) return RF_ERR_INVALID;
    const int *ids = (const int *)prompt;
    rf_gen_result r;
    memset(&r, 0, sizeof r);
    rf_workspace *prev_ws = rf_workspace_attach(s->ws);
    CATCH_DIE(rf_workspace_attach(prev_ws); rf_workspace_reset(s->ws); return DIED);
    int rc;
    if (p->method == RF_METHOD_AR) {
        rc = rf_generate_ar(m, ids, n_prompt, &g, &r);
    } else if (p->method == RF_METHOD_MDM) {
        rf_mdm_params mp;
        rf_mdm_params_default(&mp, &g);
        if (p->mdm_steps > 0) mp.steps = p->mdm_steps;
        rc = rf_generate_mdm(m, ids, n_prompt, &g, &mp, &r);
    } else if (p->no_cache) {
        rc = rf_generate_refusion_naive(m, ids, n_prompt, &g, &r);
    } else {
        rc = 0;
        /* the adaptive rolling slot's cost model, measured once per session
         * for the widest call asked for so far */
        int need = 2 * (g.slot_size < 32 ? g.slot_size : 32);
        if (g.rolling && g.draft_adaptive && s->n_call_cost < need) {
            float *c = realloc(s->call_cost, (size_t)need * sizeof(float));
            if (!c) rf_die("out of memory");
            s->call_cost = c;
            rc = rf_call_cost_measure(m, need, c);
            s->n_call_cost = rc ? 0 : need;
        }
        g.call_cost = s->call_cost, g.n_call_cost = s->n_call_cost;
        if (!rc) rc = rf_generate_refusion(m, ids, n_prompt, &g, &r);
    }
    if (!rc) keep_steps(s, &r);
    END_CATCH();
    rf_workspace_attach(prev_ws);
    if (rc) {
        int cancelled = p->cancel && *p->cancel;
        rf_gen_result_free(&r);
        return cancelled ? RF_ERR_CANCELLED : RF_ERR_INVALID;
    }
    for (int i = 0; i < r.n_ids && i < cap; i++) out[i] = r.ids[i];
    if (stats) fill_stats(s, &r, stats);
    int n = r.n_ids;
    rf_gen_result_free(&r);
    return n;
}

size_t rf_session_allocs(const refusion_session *s) { return rf_workspace_allocs(s->ws); }

const rf_model *rf_api_model(const refusion_model *m) { return &m->m; }
const rf_tokenizer *rf_api_tokenizer(const refusion_tokenizer *t) { return t->t; }
