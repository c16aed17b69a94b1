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
};

/* rf_last_error is util's (exported: see CMakeLists.txt's export list) */

RF_API const char *rf_version(void) { return "0.1"; }

/* Run body with rf_die turned into an error return. */
#define CATCH_DIE(on_die)                 \
    jmp_buf jb_;                          \
    jmp_buf *prev_ = rf_die_catch(&jb_); \
    if (setjmp(jb_)) {                    \
        rf_die_catch(prev_);              \
        on_die;                           \
    }
#define END_CATCH() rf_die_catch(prev_)

RF_API refusion_model *rf_model_open(const char *path) {
    if (!path) {
        rf_set_error("rf_model_open: path is NULL");
        return NULL;
    }
    refusion_model *volatile h = calloc(1, sizeof *h);
    if (!h) {
        rf_set_error("out of memory");
        return NULL;
    }
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

RF_API refusion_tokenizer *rf_tokenizer_open(const refusion_model *m) {
    rf_tokenizer *volatile t = NULL;
    CATCH_DIE(return NULL);
    t = rf_tok_for_model(m->path, NULL);
    END_CATCH();
    if (!t) return NULL;
    refusion_tokenizer *h = calloc(1, sizeof *h);
    if (!h) {
        rf_tok_free(t);
        rf_set_error("out of memory");
        return NULL;
    }
    h->t = t;
    return h;
}

RF_API void rf_tokenizer_close(refusion_tokenizer *t) {
    if (!t) return;
    rf_tok_free(t->t);
    free(t);
}

RF_API int rf_tokenize(const refusion_tokenizer *t, const char *text, int chat, int32_t *ids, int cap) {
    if (!t || !text || cap < 0 || (cap > 0 && !ids)) {
        rf_set_error("rf_tokenize: bad arguments");
        return RF_ERR_INVALID;
    }
    char *volatile templated = NULL;
    int *volatile v = NULL;
    CATCH_DIE(return RF_ERR_INTERNAL);
    int rc = 0, n = 0;
    const char *src = text;
    if (chat) {
        /* bad UTF-8 is reported at its offset in the caller's text */
        int *probe = NULL, np = 0;
        rc = rf_tok_encode(t->t, text, strlen(text), &probe, &np);
        free(probe);
        if (!rc) {
            templated = rf_chat_query(t->t, text);
            if (!templated) rc = -1;
            src = templated;
        }
    }
    int *out = NULL;
    if (!rc) rc = rf_tok_encode(t->t, src, strlen(src), &out, &n);
    v = out;
    END_CATCH();
    free(templated);
    if (rc) {
        free(v);
        return RF_ERR_INVALID;
    }
    for (int i = 0; i < n && i < cap; i++) ids[i] = v[i];
    free(v);
    return n;
}

RF_API int rf_detokenize(const refusion_tokenizer *t, const int32_t *ids, int n, int skip_special,
                         char *buf, int cap) {
    if (!t || n < 0 || (n > 0 && !ids) || cap < 0 || (cap > 0 && !buf)) {
        rf_set_error("rf_detokenize: bad arguments");
        return RF_ERR_INVALID;
    }
    int *volatile v = NULL;
    CATCH_DIE(return RF_ERR_INTERNAL);
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

RF_API rf_params rf_params_default(void) {
    rf_gen_params g;
    rf_gen_params_default(&g);
    rf_params p;
    memset(&p, 0, sizeof p);
    p.method = RF_METHOD_REFUSION;
    p.gen_length = g.gen_length;
    p.slot_size = g.slot_size;
    p.n_blocks = g.n_blocks;
    p.slot_threshold = g.slot_threshold;
    p.token_threshold = g.token_threshold;
    p.ar_verify = 0;
    p.mdm_steps = 0;
    p.temperature = g.temperature;
    p.top_k = g.top_k;
    p.top_p = g.top_p;
    p.seed = g.seed;
    return p;
}

RF_API refusion_session *rf_session_new(const refusion_model *m) {
    if (!m) {
        rf_set_error("rf_session_new: model is NULL");
        return NULL;
    }
    refusion_session *s = calloc(1, sizeof *s);
    if (!s) {
        rf_set_error("out of memory");
        return NULL;
    }
    CATCH_DIE(free(s); return NULL);
    s->ws = rf_workspace_new();
    END_CATCH();
    s->model = m;
    return s;
}

RF_API void rf_session_free(refusion_session *s) {
    if (!s) return;
    rf_workspace_free(s->ws);
    free(s);
}

RF_API size_t rf_session_bytes(const refusion_session *s) { return rf_workspace_bytes(s->ws); }

/* the streaming callback takes int32_t; the decoders hand out int */
typedef struct {
    rf_token_cb cb;
    void *user;
} cb_bridge;

static void on_tokens(const int *ids, int n, void *user) {
    const cb_bridge *b = user;
    int32_t buf[64];
    for (int i = 0; i < n; i += 64) {
        int k = n - i < 64 ? n - i : 64;
        for (int j = 0; j < k; j++) buf[j] = ids[i + j];
        b->cb(buf, k, b->user);
    }
}

RF_API int rf_generate(refusion_session *s, const int32_t *prompt, int n_prompt, const rf_params *p,
                       int32_t *out, int cap, rf_stats *stats) {
    if (!s || !p || n_prompt < 0 || (n_prompt > 0 && !prompt) || cap < 0 || (cap > 0 && !out)) {
        rf_set_error("rf_generate: bad arguments");
        return RF_ERR_INVALID;
    }
    if (p->method != RF_METHOD_REFUSION && p->method != RF_METHOD_AR && p->method != RF_METHOD_MDM) {
        rf_set_error("rf_generate: unknown method %d", (int)p->method);
        return RF_ERR_INVALID;
    }
    if (p->ar_verify < 0 || p->ar_verify > 3) {
        rf_set_error("rf_generate: ar_verify must be 0..3, got %d", p->ar_verify);
        return RF_ERR_INVALID;
    }
    const rf_model *m = &s->model->m;
    rf_gen_params g;
    rf_gen_params_default(&g);
    g.gen_length = p->gen_length;
    g.slot_size = p->slot_size;
    g.n_blocks = p->n_blocks;
    g.slot_threshold = p->slot_threshold;
    g.token_threshold = p->token_threshold;
    g.ar_correct = p->ar_verify & 1;
    g.ar_check_first = p->ar_verify >> 1;
    g.temperature = p->temperature;
    g.top_k = p->top_k;
    g.top_p = p->top_p;
    g.seed = p->seed;
    g.cancel = p->cancel;
    cb_bridge bridge = {p->on_tokens, p->user};
    if (p->on_tokens) {
        g.on_tokens = on_tokens;
        g.user = &bridge;
    }
    rf_gen_result r;
    memset(&r, 0, sizeof r);
    int *volatile ids = NULL;
    rf_workspace *prev_ws = rf_workspace_attach(s->ws);
    CATCH_DIE(rf_workspace_attach(prev_ws); rf_workspace_reset(s->ws); return RF_ERR_INTERNAL);
    ids = rf_malloc((size_t)n_prompt * sizeof(int) + 1);
    for (int i = 0; i < n_prompt; i++) ids[i] = prompt[i];
    int rc;
    if (p->method == RF_METHOD_AR) {
        rc = rf_generate_ar(m, ids, n_prompt, &g, &r);
    } else if (p->method == RF_METHOD_MDM) {
        rf_mdm_params mp;
        rf_mdm_params_default(&mp, &g);
        if (p->mdm_steps > 0) mp.steps = p->mdm_steps;
        rc = rf_generate_mdm(m, ids, n_prompt, &g, &mp, &r);
    } else {
        rc = rf_generate_refusion(m, ids, n_prompt, &g, &r);
    }
    END_CATCH();
    rf_workspace_attach(prev_ws);
    free(ids);
    if (rc) {
        int cancelled = p->cancel && *p->cancel;
        rf_gen_result_free(&r);
        return cancelled ? RF_ERR_CANCELLED : RF_ERR_INVALID;
    }
    for (int i = 0; i < r.n_ids && i < cap; i++) out[i] = r.ids[i];
    if (stats) {
        stats->n_tokens = r.n_ids;
        stats->hit_eos = r.hit_eos;
        stats->n_calls = r.n_calls;
        stats->seconds = r.wall_s;
    }
    int n = r.n_ids;
    rf_gen_result_free(&r);
    return n;
}

size_t rf_session_allocs(const refusion_session *s) { return rf_workspace_allocs(s->ws); }
