/* api.c - the public API (include/refusion.h) over the internal modules:
 * handles wrap rf_model / rf_tokenizer; a session owns a workspace
 * (model/workspace.h) that rf_generate hands the decoder (rf_params.ws)
 * to borrow its KV cache and run state from; every entry point that
 * allocates catches rf_die so the library returns an error instead of
 * exiting. */
#include "refusion.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "decode/decode_impl.h" /* rf_gen_mem_bytes */
#include "grammar/constraint.h"
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
    rf_token_logprob *logprobs; /* the last generation's (rf_stats.logprobs), grown, never shrunk */
    int logprobs_cap;
    float *call_cost; /* the adaptive rolling slot's cost model (rf_call_cost_get), or NULL */
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

/* CATCH_DIE, END_CATCH, DIED: api/api_internal.h */

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

/* a constraint from GBNF (json 0) or a JSON schema's text (json 1) */
static rf_constraint *constraint_new(const refusion_tokenizer *t, const char *text, int json) {
    if (!t || !text) {
        rf_set_error("%s: bad arguments", json ? "rf_constraint_json_schema" : "rf_constraint_gbnf");
        return NULL;
    }
    rf_constraint *volatile c = NULL;
    CATCH_DIE(return NULL);
    c = json ? rf_constraint_from_json_schema(t->t, text, strlen(text)) : rf_constraint_from_gbnf(t->t, text, strlen(text));
    END_CATCH();
    return c;
}
RF_API rf_constraint *rf_constraint_gbnf(const refusion_tokenizer *t, const char *gbnf) {
    return constraint_new(t, gbnf, 0);
}
RF_API rf_constraint *rf_constraint_json_schema(const refusion_tokenizer *t, const char *schema_json) {
    return constraint_new(t, schema_json, 1);
}

RF_API void rf_tokenizer_close(refusion_tokenizer *t) {
    if (!t) return;
    rf_tok_free(t->t);
    free(t);
}

/* The ids of text into ids[0 .. cap-1]; returns how many it has, or an
 * rf_status. */
static int encode_out_spans(const rf_tokenizer *t, const char *text, const rf_text_span *sp, size_t nsp,
                            int32_t *ids, int cap) {
    int *volatile v = NULL;
    CATCH_DIE(free(v); return DIED);
    int *out = NULL, n = 0;
    int rc = rf_tok_encode_spans(t, text, strlen(text), sp, nsp, &out, &n);
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
static int encode_out(const rf_tokenizer *t, const char *text, int32_t *ids, int cap) {
    return encode_out_spans(t, text, NULL, 0, ids, cap);
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
    rf_text_span *volatile sp = NULL;
    CATCH_DIE(free(text); free(cm); free(sp); return DIED);
    cm = rf_malloc((size_t)n * sizeof *cm);
    for (int i = 0; i < n; i++) cm[i] = (rf_chat_msg){msgs[i].role, msgs[i].content};
    rf_text_span *spans = NULL;
    size_t nsp = 0;
    text = rf_chat_apply_spans(t->t, cm, n, 1, think, &spans, &nsp);
    sp = spans;
    END_CATCH();
    free(cm);
    /* the messages' special-token text is text unless the tokenizer says otherwise */
    if (rf_tok_special_in_content(t->t)) nsp = 0;
    rc = text ? encode_out_spans(t->t, text, sp, nsp, ids, cap) : RF_ERR_INVALID;
    free(text);
    free(sp);
    return rc;
}

RF_API void rf_tokenizer_set_special_in_content(refusion_tokenizer *t, int on) {
    if (t) rf_tok_set_special_in_content(t->t, on);
}

RF_API int rf_tokenizer_check_chat_template(const refusion_tokenizer *t) {
    if (!t) return rf_set_error("rf_tokenizer_check_chat_template: tokenizer is NULL"), RF_ERR_INVALID;
    CATCH_DIE(return DIED);
    int rc = rf_tok_check_chat_template(t->t);
    END_CATCH();
    return rc ? RF_ERR_INVALID : 0;
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
    return rf_api_copy_out(s, buf, cap);
}

int rf_api_copy_out(char *s, char *buf, int cap) {
    size_t len = strlen(s);
    if (cap > 0) {
        size_t k = len < (size_t)cap - 1 ? len : (size_t)cap - 1;
        memcpy(buf, s, k);
        buf[k] = 0;
    }
    free(s);
    return len > INT32_MAX ? INT32_MAX : (int)len;
}

/* the one set of defaults: the decoders' (decode/params.c) */
RF_API rf_params rf_params_default(void) {
    rf_params p;
    rf_gen_params_default(&p);
    return p;
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
    free(s->logprobs);
    free(s->call_cost);
    free(s);
}

RF_API size_t rf_session_bytes(const refusion_session *s) { return rf_workspace_bytes(s->ws); }

RF_API int rf_params_check(const refusion_model *m, const int32_t *prompt, int n_prompt, const rf_params *p) {
    if (!m || !p || n_prompt < 0 || (n_prompt > 0 && !prompt)) {
        rf_set_error("rf_params_check: bad arguments");
        return RF_ERR_INVALID;
    }
    return rf_gen_check(&m->m, (const int *)prompt, n_prompt, p, p->method != RF_METHOD_REFUSION) ? RF_ERR_INVALID
                                                                                                 : RF_OK;
}

RF_API int64_t rf_generate_bytes(const refusion_model *m, int n_prompt, const rf_params *p) {
    if (!m || !p || n_prompt < 0) {
        rf_set_error("rf_generate_bytes: bad arguments");
        return RF_ERR_INVALID;
    }
    if (rf_gen_check_settings(p)) return RF_ERR_INVALID;
    return rf_gen_mem_bytes(&m->m, n_prompt, p, p->method == RF_METHOD_AR);
}

/* the result's step statistics into the session's array (grown, never shrunk) */
static void keep_steps(refusion_session *s, const rf_gen_result *r) {
    if (r->n_steps > s->steps_cap) {
        free(s->steps);
        s->steps = NULL;
        s->steps = rf_malloc((size_t)r->n_steps * sizeof *s->steps);
        s->steps_cap = r->n_steps;
    }
    if (r->n_steps) memcpy(s->steps, r->steps, (size_t)r->n_steps * sizeof *s->steps);
    if (r->logprobs && r->n_ids > s->logprobs_cap) {
        free(s->logprobs);
        s->logprobs = NULL;
        s->logprobs = rf_malloc((size_t)r->n_ids * sizeof *s->logprobs);
        s->logprobs_cap = r->n_ids;
    }
    if (r->logprobs && r->n_ids) memcpy(s->logprobs, r->logprobs, (size_t)r->n_ids * sizeof *s->logprobs);
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
    st->logprobs = r->logprobs ? s->logprobs : NULL;
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
    /* p as it is, with the session's buffers lent to the decoder */
    rf_params g = *p;
    g.ws = s->ws;
    const int *ids = (const int *)prompt;
    rf_gen_result r;
    memset(&r, 0, sizeof r);
    CATCH_DIE(rf_workspace_reset(s->ws); return DIED);
    int rc = 0;
    /* the adaptive rolling slot's cost model, measured once per session for
     * the widest call asked for so far (a table the caller gives wins) */
    int need = 2 * (g.slot_size < 32 ? g.slot_size : 32);
    if (g.method == RF_METHOD_REFUSION && g.rolling && g.draft_adaptive && !g.no_cache && !g.call_cost &&
        need > 0) {
        if (s->n_call_cost < need) {
            float *c = realloc(s->call_cost, (size_t)need * sizeof(float));
            if (!c) rf_die("out of memory");
            s->call_cost = c;
            rc = rf_call_cost_get(m, need, c, NULL);
            s->n_call_cost = rc ? 0 : need;
        }
        g.call_cost = s->call_cost, g.n_call_cost = s->n_call_cost;
    }
    if (!rc) rc = rf_decode(m, ids, n_prompt, &g, NULL, &r);
    if (!rc) keep_steps(s, &r);
    END_CATCH();
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

/* ---- rf_params_fields, rf_stats_fields ----
 * offsetof checks each name against the struct; tests/api_layout.c checks
 * that the fields tile the struct (none left out) */
#define FIELD(type, kind, f) {#f, RF_FIELD_##kind, offsetof(type, f)},
static const rf_field params_fields[] = {
    FIELD(rf_params, INT, method) FIELD(rf_params, INT, gen_length) FIELD(rf_params, INT, slot_size)
    FIELD(rf_params, INT, n_blocks) FIELD(rf_params, FLOAT, slot_threshold) FIELD(rf_params, FLOAT, token_threshold)
    FIELD(rf_params, FLOAT, temperature) FIELD(rf_params, INT, top_k) FIELD(rf_params, FLOAT, top_p)
    FIELD(rf_params, U64, seed) FIELD(rf_params, INT, eos_id) FIELD(rf_params, INT, mask_id)
    FIELD(rf_params, INT, ar_correct) FIELD(rf_params, INT, ar_check_first) FIELD(rf_params, INT, lookahead)
    FIELD(rf_params, INT, jacobi) FIELD(rf_params, INT, rolling) FIELD(rf_params, INT, draft_adaptive)
    FIELD(rf_params, PTR, call_cost) FIELD(rf_params, INT, n_call_cost) FIELD(rf_params, INT, no_cache)
    FIELD(rf_params, INT, mdm_steps) FIELD(rf_params, FLOAT, min_p) FIELD(rf_params, FLOAT, repeat_penalty)
    FIELD(rf_params, FLOAT, presence_penalty) FIELD(rf_params, FLOAT, frequency_penalty)
    FIELD(rf_params, INT, penalty_last_n) FIELD(rf_params, PTR, on_tokens) FIELD(rf_params, PTR, on_event)
    FIELD(rf_params, PTR, user) FIELD(rf_params, PTR, cancel) FIELD(rf_params, PTR, ws)
    FIELD(rf_params, PTR, constraint) FIELD(rf_params, INT, logprobs) FIELD(rf_params, INT, top_logprobs)
    FIELD(rf_params, PTR, on_logprobs)
    {NULL, 0, 0}};
static const rf_field stats_fields[] = {
    FIELD(rf_stats, INT, n_tokens) FIELD(rf_stats, INT, hit_eos) FIELD(rf_stats, INT, n_calls)
    FIELD(rf_stats, DOUBLE, seconds) FIELD(rf_stats, DOUBLE, tpf) FIELD(rf_stats, DOUBLE, tokens_per_call)
    FIELD(rf_stats, DOUBLE, tokens_per_s) FIELD(rf_stats, INT, n_steps) FIELD(rf_stats, PTR, steps)
    FIELD(rf_stats, INT, first_free) FIELD(rf_stats, INT, first_checked) FIELD(rf_stats, INT, first_replaced)
    FIELD(rf_stats, INT, verified) FIELD(rf_stats, INT, forced_draft) FIELD(rf_stats, INT, forced_ar)
    FIELD(rf_stats, PTR, logprobs)
    {NULL, 0, 0}};
#undef FIELD
_Static_assert(sizeof(rf_method) == sizeof(int), "rf_params.method is laid out as an int");

static const rf_field *fields(const rf_field *table, size_t struct_size, size_t *size) {
    if (size) *size = struct_size;
    return table;
}
RF_API const rf_field *rf_params_fields(size_t *size) { return fields(params_fields, sizeof(rf_params), size); }
RF_API const rf_field *rf_stats_fields(size_t *size) { return fields(stats_fields, sizeof(rf_stats), size); }

size_t rf_session_allocs(const refusion_session *s) { return rf_workspace_allocs(s->ws); }

const rf_model *rf_api_model(const refusion_model *m) { return &m->m; }
const rf_tokenizer *rf_api_tokenizer(const refusion_tokenizer *t) { return t->t; }
const char *rf_api_model_path(const refusion_model *m) { return m->path; }
