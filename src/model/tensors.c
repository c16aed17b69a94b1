/* tensors.c - the tensor table of tensors.h, expanded for a config, and its
 * binding to an rf_model. */
#include "model/tensors.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

rf_dims rf_dims_of(const rf_config *c) {
    return (rf_dims){.d = c->hidden_size,
                     .q = c->n_heads * c->head_dim,
                     .kv = c->n_kv_heads * c->head_dim,
                     .hd = c->head_dim,
                     .ffn = c->intermediate_size,
                     .vocab = c->vocab_size,
                     .none = 0};
}

int rf_tensor_count(const rf_config *c) {
    return RF_LAYER_N_TENSORS * c->n_layers + 2 + !c->tie_embeddings;
}

static void set(rf_tdesc *t, const char *hf, const char *gg, int rows, int cols, int layer, int role) {
    snprintf(t->name, sizeof t->name, "%s", hf);
    snprintf(t->gguf, sizeof t->gguf, "%s", gg);
    t->rows = rows;
    t->cols = cols;
    t->layer = layer;
    t->role = role;
}

int rf_tensor_table(const rf_config *c, rf_tdesc *out) {
    rf_dims D = rf_dims_of(c);
    static const struct { const char *hf, *gg; } layer[] = {
#define NAMES(field, hf, gg, r, cl) {hf, gg},
        RF_LAYER_TENSORS(NAMES)
#undef NAMES
    };
    const int rows[] = {
#define ROWS(field, hf, gg, r, cl) D.r,
        RF_LAYER_TENSORS(ROWS)
#undef ROWS
    };
    const int cols[] = {
#define COLS(field, hf, gg, r, cl) D.cl,
        RF_LAYER_TENSORS(COLS)
#undef COLS
    };
    int n = 0;
#define TOP(role, hf, gg, r, cl) \
    if (role != RF_T_LM_HEAD || !c->tie_embeddings) set(&top[role - RF_T_EMBED], hf, gg, D.r, D.cl, -1, role);
    rf_tdesc top[3];
    RF_TOP_TENSORS(TOP)
#undef TOP
    out[n++] = top[0];
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < RF_LAYER_N_TENSORS; i++) {
            char hf[96], gg[96];
            snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", l, layer[i].hf);
            snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, layer[i].gg);
            set(&out[n++], hf, gg, rows[i], cols[i], l, i);
        }
    out[n++] = top[1];
    if (!c->tie_embeddings) out[n++] = top[2];
    return n;
}

int rf_model_tensor_list(rf_model *m, rf_tspec **out) {
    static const size_t off[] = {
#define OFF(field, hf, gg, r, cl) offsetof(rf_layer, field),
        RF_LAYER_TENSORS(OFF)
#undef OFF
    };
    const rf_config *c = &m->cfg;
    if (!m->layers) m->layers = rf_calloc((size_t)c->n_layers, sizeof(rf_layer));
    int n = rf_tensor_count(c);
    rf_tspec *ts = rf_calloc(1, (size_t)n * (sizeof(rf_tspec) + sizeof(rf_tdesc)));
    rf_tdesc *td = (rf_tdesc *)(ts + n);
    rf_tensor_table(c, td);
    for (int i = 0; i < n; i++) {
        const rf_tdesc *t = &td[i];
        rf_tspec *s = &ts[i];
        snprintf(s->name, sizeof s->name, "%s", t->name);
        s->rows = t->rows;
        s->cols = t->cols;
        s->desc = t;
        void *dst = t->role == RF_T_EMBED        ? (void *)&m->embed
                  : t->role == RF_T_FINAL_NORM ? (void *)&m->final_norm
                  : t->role == RF_T_LM_HEAD    ? (void *)&m->lm_head
                                               : (void *)((char *)&m->layers[t->layer] + off[t->role]);
        if (t->cols) s->mat = dst;
        else s->vec = dst;
    }
    *out = ts;
    return n;
}

int rf_model_matmuls(rf_model *m, rf_mat **out) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        rf_layer *L = &m->layers[l];
        rf_mat *ls[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        for (int j = 0; j < 7; j++) out[n++] = ls[j];
    }
    out[n++] = &m->lm_head;
    return n;
}

float *rf_model_norm_block(rf_model *m, const rf_tspec *ts, int n) {
    size_t n_vec = 0;
    for (int i = 0; i < n; i++)
        if (!ts[i].cols) n_vec += (size_t)ts[i].rows;
    m->owned = rf_aligned_alloc(n_vec * sizeof(float));
    return m->owned;
}

void rf_model_bind_norm(const rf_tspec *s, rf_dtype dtype, const void *data, float **dst) {
    float *v = *dst;
    const uint16_t *h = data;
    for (int i = 0; i < s->rows; i++)
        v[i] = dtype == RF_F32    ? ((const float *)data)[i]
             : dtype == RF_BF16 ? rf_bf16_to_f32(h[i])
                                : rf_f16_to_f32(h[i]);
    *s->vec = v;
    *dst = v + s->rows;
}
