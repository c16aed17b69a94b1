/* model_train.c - the Qwen3 stack in f32 for training: the parameter block
 * and its tensor table, the saved activations, forward, loss and backward.
 *
 * Shapes: N tokens (packed micro-batch), d hidden, hd head_dim, nh / nkv
 * query / K-V heads, qd = nh*hd, kvd = nkv*hd, f ffn width, V vocab. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tensors.h"
#include "train/ops.h"
#include "train/train.h"

/* ---- parameter block --------------------------------------------------------- */

/* Point a view (w) at a block, walking the tensor table in its order. */
static void point_view(const rf_tmodel *m, float *block, rf_tweights *w) {
    static const size_t off[] = {
#define OFF(field, hf, gg, r, cl) offsetof(rf_tlayer, field),
        RF_LAYER_TENSORS(OFF)
#undef OFF
    };
    for (int i = 0; i < m->n_tensors; i++) {
        const rf_ptensor *t = &m->tensors[i];
        float *p = block + t->offset;
        if (t->role == RF_T_EMBED) w->embed = p;
        else if (t->role == RF_T_FINAL_NORM) w->final_norm = p;
        else if (t->role == RF_T_LM_HEAD) w->lm_head = p;
        else *(float **)((char *)&w->layers[t->layer] + off[t->role]) = p;
    }
    if (m->cfg.tie_embeddings) w->lm_head = w->embed;
}

void rf_tmodel_init(rf_tmodel *m, const rf_config *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    int n = rf_tensor_count(cfg);
    rf_tdesc *td = rf_calloc((size_t)n, sizeof *td);
    rf_tensor_table(cfg, td);
    m->tensors = rf_calloc((size_t)n, sizeof(rf_ptensor));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        rf_ptensor *t = &m->tensors[i];
        snprintf(t->name, sizeof t->name, "%s", td[i].name);
        t->ndim = td[i].cols ? 2 : 1;
        t->shape[0] = td[i].rows;
        t->shape[1] = td[i].cols ? td[i].cols : 1;
        t->numel = (size_t)t->shape[0] * (size_t)t->shape[1];
        t->offset = off;
        t->decay = t->ndim == 2;
        t->layer = td[i].layer;
        t->role = td[i].role;
        off += t->numel;
    }
    free(td);
    m->n_tensors = n;
    m->n_params = off;
    m->params = rf_aligned_alloc(off * sizeof(float));
    m->grads = rf_aligned_alloc(off * sizeof(float));
    m->w.layers = rf_calloc((size_t)cfg->n_layers, sizeof(rf_tlayer));
    m->g.layers = rf_calloc((size_t)cfg->n_layers, sizeof(rf_tlayer));
    point_view(m, m->params, &m->w);
    point_view(m, m->grads, &m->g);
}

void rf_tmodel_free(rf_tmodel *m) {
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->w.layers);
    free(m->g.layers);
    memset(m, 0, sizeof *m);
}

void rf_tmodel_randomize(rf_tmodel *m, float std, uint64_t seed) {
    rf_rng r;
    rf_rng_seed(&r, seed);
    for (int t = 0; t < m->n_tensors; t++) {
        const rf_ptensor *p = &m->tensors[t];
        float *x = m->params + p->offset;
        for (size_t i = 0; i < p->numel; i++) x[i] = p->ndim == 2 ? std * rf_rng_normal(&r) : 1.0f;
    }
}

const rf_ptensor *rf_tmodel_find(const rf_tmodel *m, const char *name) {
    for (int t = 0; t < m->n_tensors; t++)
        if (!strcmp(m->tensors[t].name, name)) return &m->tensors[t];
    return NULL;
}

/* ---- activations ------------------------------------------------------------ */

#define HEAD_CHUNK 128 /* rows of logits materialised at once: [HEAD_CHUNK, V] */

struct rf_tacts {
    int max_tok;
    size_t bytes;
    void *block;   /* every buffer below, one allocation (see act_table) */
    /* saved by the forward, per layer l: [L][N, ...] */
    float *res;    /* [L+1][N, d] residual stream; res[l] is layer l's input */
    float *ln1;    /* [L][N, d] input_layernorm output */
    float *rstd1;  /* [L][N] */
    float *qlin;   /* [L][N, qd] q_proj output (before q_norm) */
    float *qrstd;  /* [L][N, nh] */
    float *klin;   /* [L][N, kvd] */
    float *krstd;  /* [L][N, nkv] */
    float *q, *k;  /* [L][N, qd] / [L][N, kvd] after norm + RoPE */
    float *v;      /* [L][N, kvd] */
    float *att;    /* [L][N, qd] attention output (o_proj input) */
    float *lse;    /* [L][N, nh] */
    float *mid;    /* [L][N, d] residual after attention */
    float *ln2;    /* [L][N, d] */
    float *rstd2;  /* [L][N] */
    float *gate, *up, *act; /* [L][N, f] */
    float *lnf;    /* [N, d] final norm output */
    float *rstdf;  /* [N] */
    float *cs, *sn;/* [N, hd/2] RoPE tables */
    /* backward scratch */
    float *dres, *dln, *dlnf;  /* [N, d] */
    float *dq, *dqlin;         /* [N, qd] */
    float *dk, *dklin, *dv;    /* [N, kvd] */
    float *dgate, *dup, *dact; /* [N, f] */
    /* the loss head, in chunks */
    float *xc, *lc;            /* [C, d], [C, V] */
    double *ce;                /* [C] */
    int *rows, *tgt;           /* [C] */
    float *wgt;                /* [C] */
};

/* Every buffer's size in bytes, in one table (llm.c's act_sizes): one
 * allocation holds them all, each starting on a 64-byte boundary. */
enum { N_ACT_BUFS = 39 };

static void act_table(rf_tacts *a, const rf_config *c, size_t N, void **ptr[N_ACT_BUFS],
                      size_t bytes[N_ACT_BUFS]) {
    size_t L = (size_t)c->n_layers, d = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    size_t nh = (size_t)c->n_heads, nkv = (size_t)c->n_kv_heads, f = (size_t)c->intermediate_size;
    size_t qd = nh * hd, kvd = nkv * hd, V = (size_t)c->vocab_size, C = HEAD_CHUNK, F = sizeof(float);
    int n = 0;
#define BUF(field, size) ptr[n] = (void **)&a->field, bytes[n++] = (size)
    BUF(res, (L + 1) * N * d * F);
    BUF(ln1, L * N * d * F);
    BUF(rstd1, L * N * F);
    BUF(qlin, L * N * qd * F);
    BUF(qrstd, L * N * nh * F);
    BUF(klin, L * N * kvd * F);
    BUF(krstd, L * N * nkv * F);
    BUF(q, L * N * qd * F);
    BUF(k, L * N * kvd * F);
    BUF(v, L * N * kvd * F);
    BUF(att, L * N * qd * F);
    BUF(lse, L * N * nh * F);
    BUF(mid, L * N * d * F);
    BUF(ln2, L * N * d * F);
    BUF(rstd2, L * N * F);
    BUF(gate, L * N * f * F);
    BUF(up, L * N * f * F);
    BUF(act, L * N * f * F);
    BUF(lnf, N * d * F);
    BUF(rstdf, N * F);
    BUF(cs, (N * hd / 2 + 1) * F);
    BUF(sn, (N * hd / 2 + 1) * F);
    BUF(dres, N * d * F);
    BUF(dln, N * d * F);
    BUF(dlnf, N * d * F);
    BUF(dq, N * qd * F);
    BUF(dqlin, N * qd * F);
    BUF(dk, N * kvd * F);
    BUF(dklin, N * kvd * F);
    BUF(dv, N * kvd * F);
    BUF(dgate, N * f * F);
    BUF(dup, N * f * F);
    BUF(dact, N * f * F);
    BUF(xc, C * d * F);
    BUF(lc, C * V * F);
    BUF(wgt, C * F);
    BUF(ce, C * sizeof(double));
    BUF(rows, C * sizeof(int));
    BUF(tgt, C * sizeof(int));
#undef BUF
    if (n != N_ACT_BUFS) rf_die("act_table: %d buffers, expected %d", n, N_ACT_BUFS);
}

rf_tacts *rf_tacts_new(const rf_config *c, int max_tok) {
    rf_tacts *a = rf_calloc(1, sizeof *a);
    void **ptr[N_ACT_BUFS];
    size_t bytes[N_ACT_BUFS], total = 0;
    a->max_tok = max_tok;
    act_table(a, c, (size_t)max_tok, ptr, bytes);
    for (int i = 0; i < N_ACT_BUFS; i++) total += (bytes[i] + 63) / 64 * 64;
    a->block = rf_aligned_alloc(total);
    a->bytes = total;
    char *p = a->block;
    for (int i = 0; i < N_ACT_BUFS; i++) {
        *ptr[i] = p;
        p += (bytes[i] + 63) / 64 * 64;
    }
    return a;
}

void rf_tacts_free(rf_tacts *a) {
    if (!a) return;
    free(a->block);
    free(a);
}

size_t rf_tacts_bytes(const rf_tacts *a) { return a->bytes; }

/* ---- forward ------------------------------------------------------------------- */

static int check_batch(const rf_tmodel *m, const rf_tacts *a, const rf_tbatch *b) {
    if (b->n_tok > a->max_tok) {
        rf_set_error("train: micro-batch of %d tokens exceeds the %d allocated", b->n_tok,
                     a->max_tok);
        return -1;
    }
    int V = m->cfg.vocab_size;
    for (int i = 0; i < b->n_tok; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= V || b->target[i] >= V) {
            rf_set_error("train: token id %d at %d outside the vocabulary (%d)",
                         b->tokens[i] < 0 || b->tokens[i] >= V ? b->tokens[i] : b->target[i], i, V);
            return -1;
        }
    return 0;
}

/* Layer l's slice of every saved activation array. Each array has a stride
 * of max_tok rows per layer, so a slice does not depend on the batch size. */
typedef struct {
    float *res, *ln1, *rstd1, *qlin, *qrstd, *klin, *krstd, *q, *k, *v, *att, *lse;
    float *mid, *ln2, *rstd2, *gate, *up, *act;
    float *next; /* the residual stream after the layer: res of layer l + 1 */
} layer_acts;

static layer_acts layer_acts_at(const rf_tacts *a, const rf_config *c, int l) {
    size_t L = (size_t)l, M = (size_t)a->max_tok, d = c->hidden_size, f = c->intermediate_size;
    size_t nh = c->n_heads, nkv = c->n_kv_heads, qd = nh * c->head_dim, kvd = nkv * c->head_dim;
    layer_acts s = {
        .res = a->res + L * M * d, .ln1 = a->ln1 + L * M * d, .rstd1 = a->rstd1 + L * M,
        .qlin = a->qlin + L * M * qd, .qrstd = a->qrstd + L * M * nh,
        .klin = a->klin + L * M * kvd, .krstd = a->krstd + L * M * nkv,
        .q = a->q + L * M * qd, .k = a->k + L * M * kvd, .v = a->v + L * M * kvd,
        .att = a->att + L * M * qd, .lse = a->lse + L * M * nh,
        .mid = a->mid + L * M * d, .ln2 = a->ln2 + L * M * d, .rstd2 = a->rstd2 + L * M,
        .gate = a->gate + L * M * f, .up = a->up + L * M * f, .act = a->act + L * M * f,
        .next = a->res + (L + 1) * M * d,
    };
    return s;
}

static void forward(const rf_tmodel *m, rf_tacts *a, const rf_tbatch *b) {
    const rf_config *c = &m->cfg;
    int N = b->n_tok, d = c->hidden_size, hd = c->head_dim, nh = c->n_heads;
    int nkv = c->n_kv_heads, qd = nh * hd, kvd = nkv * hd, f = c->intermediate_size;
    size_t Nd = (size_t)N * d;
    for (int i = 0; i < N; i++) /* embedding lookup */
        memcpy(a->res + (size_t)i * d, m->w.embed + (size_t)b->tokens[i] * d, d * sizeof(float));
    op_rope_tables(a->cs, a->sn, b->pos, N, hd, c->rope_theta);
    for (int l = 0; l < c->n_layers; l++) {
        const rf_tlayer *w = &m->w.layers[l];
        layer_acts s = layer_acts_at(a, c, l);

        /* each line has its backward in backward(), in reverse order */
        op_rmsnorm_fwd(s.ln1, s.rstd1, s.res, w->attn_norm, N, d, c->rms_eps); /* [N,d] -> [N,d], rstd [N] */
        op_matmul_fwd(s.qlin, s.ln1, w->q, N, d, qd);    /* [N,d] . [qd,d]^T -> [N,qd] */
        op_matmul_fwd(s.klin, s.ln1, w->k, N, d, kvd);   /* [N,d] -> [N,kvd] */
        op_matmul_fwd(s.v, s.ln1, w->v, N, d, kvd);      /* [N,d] -> [N,kvd] */
        op_rmsnorm_fwd(s.q, s.qrstd, s.qlin, w->q_norm, N * nh, hd, c->rms_eps); /* per head: [N*nh,hd] */
        op_rmsnorm_fwd(s.k, s.krstd, s.klin, w->k_norm, N * nkv, hd, c->rms_eps); /* [N*nkv,hd] */
        op_rope_fwd(s.q, a->cs, a->sn, N, nh, hd);       /* in place [N,nh,hd] */
        op_rope_fwd(s.k, a->cs, a->sn, N, nkv, hd);      /* in place [N,nkv,hd] */
        op_attention_fwd(s.att, s.lse, s.q, s.k, s.v, b->off, b->n_seq, nh, nkv, hd,
                         b->bidirectional);              /* -> att [N,qd], lse [N,nh] */
        memcpy(s.mid, s.res, Nd * sizeof(float)); /* mid = res + att . Wo^T */
        op_matmul_fwd_acc(s.mid, s.att, w->o, N, qd, d); /* [N,qd] . [d,qd]^T += [N,d] */
        op_rmsnorm_fwd(s.ln2, s.rstd2, s.mid, w->ffn_norm, N, d, c->rms_eps); /* [N,d] */
        op_matmul_fwd(s.gate, s.ln2, w->gate, N, d, f);  /* [N,d] -> [N,f] */
        op_matmul_fwd(s.up, s.ln2, w->up, N, d, f);      /* [N,d] -> [N,f] */
        op_swiglu_fwd(s.act, s.gate, s.up, (size_t)N * f); /* [N,f] */
        memcpy(s.next, s.mid, Nd * sizeof(float)); /* next = mid + act . Wdown^T */
        op_matmul_fwd_acc(s.next, s.act, w->down, N, f, d); /* [N,f] . [d,f]^T += [N,d] */
    }
    float *last = a->res + (size_t)c->n_layers * a->max_tok * d;
    op_rmsnorm_fwd(a->lnf, a->rstdf, last, m->w.final_norm, N, d, c->rms_eps);
}

/* The loss head over the tokens that carry a target, HEAD_CHUNK rows at a
 * time so [N, V] logits are never held: logits, CE and (backward) dlogits,
 * dW_lm_head and dlnf. */
static void head(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b, int backward, rf_tloss *out) {
    int d = m->cfg.hidden_size, V = m->cfg.vocab_size, N = b->n_tok;
    memset(out, 0, sizeof *out);
    if (backward) memset(a->dlnf, 0, (size_t)N * d * sizeof(float));
    int i = 0;
    while (i < N) {
        int n = 0;
        for (; i < N && n < HEAD_CHUNK; i++) {
            if (b->target[i] < 0) continue;
            a->rows[n] = i;
            a->tgt[n] = b->target[i];
            a->wgt[n] = b->weight[i];
            memcpy(a->xc + (size_t)n * d, a->lnf + (size_t)i * d, d * sizeof(float));
            n++;
        }
        if (!n) break;
        op_matmul_fwd(a->lc, a->xc, m->w.lm_head, n, d, V);
        op_xent_fwd_bwd(a->lc, a->ce, a->tgt, a->wgt, n, V, backward);
        for (int r = 0; r < n; r++) { /* serial: a fixed summation order */
            double l = (double)a->wgt[r] * a->ce[r];
            out->loss += l;
            if (b->kind[a->rows[r]] == RF_LOSS_MDM) {
                out->mdm += l;
                out->n_mdm++;
            } else {
                out->ar += l;
                out->n_ar++;
            }
        }
        if (backward) {
            /* reuse xc's rows: dX = dlogits . W_lm computed into a scratch then scattered */
            float *dx = a->dln; /* free until the layer backward starts */
            op_matmul_bwd(dx, m->g.lm_head, a->lc, a->xc, m->w.lm_head, n, d, V, 0);
            for (int r = 0; r < n; r++)
                memcpy(a->dlnf + (size_t)a->rows[r] * d, dx + (size_t)r * d, d * sizeof(float));
        }
    }
}

/* Gradients [from, n_params) are final (see rf_tmodel.grads_final). Called
 * again with the same from only to let a pending reduction progress. */
static void grads_final(const rf_tmodel *m, size_t from) {
    if (m->grads_final) m->grads_final(m->grads_user, from);
}

/* Where layer l's tensors start in the block (they are contiguous). */
static size_t layer_start(const rf_tmodel *m, int l) {
    size_t off = m->n_params;
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].layer == l && m->tensors[t].offset < off) off = m->tensors[t].offset;
    return off;
}

static void backward(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b) {
    const rf_config *c = &m->cfg;
    int N = b->n_tok, d = c->hidden_size, hd = c->head_dim, nh = c->n_heads;
    int nkv = c->n_kv_heads, qd = nh * hd, kvd = nkv * hd, f = c->intermediate_size;
    size_t M = (size_t)a->max_tok;
    float *dres = a->dres;
    memset(dres, 0, (size_t)N * d * sizeof(float));
    float *last = a->res + (size_t)c->n_layers * M * d;
    op_rmsnorm_bwd(dres, m->g.final_norm, a->dlnf, last, m->w.final_norm, a->rstdf, N, d);
    size_t done = (size_t)(m->w.final_norm - m->params); /* final_norm and (untied) lm_head after it */
    grads_final(m, done);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        const rf_tlayer *w = &m->w.layers[l];
        rf_tlayer *g = &m->g.layers[l];
        layer_acts s = layer_acts_at(a, c, l);

        /* the forward's lines in reverse; dX [N,in] from dY [N,out], dW += */
        /* next = mid + act . Wdown^T: dres flows on to mid unchanged */
        op_matmul_bwd(a->dact, g->down, dres, s.act, w->down, N, f, d, 0); /* [N,d] -> dact [N,f] */
        op_swiglu_bwd(a->dgate, a->dup, a->dact, s.gate, s.up, (size_t)N * f); /* -> [N,f] x2 */
        op_matmul_bwd(a->dln, g->gate, a->dgate, s.ln2, w->gate, N, d, f, 0); /* [N,f] -> [N,d] */
        op_matmul_bwd(a->dln, g->up, a->dup, s.ln2, w->up, N, d, f, 1);       /* += [N,d] */
        op_rmsnorm_bwd(dres, g->ffn_norm, a->dln, s.mid, w->ffn_norm, s.rstd2, N, d); /* += [N,d] */
        grads_final(m, done);
        /* mid = res + att . Wo^T: dres flows on to res unchanged */
        float *datt = a->dqlin; /* scratch; dqlin is filled only after attention */
        op_matmul_bwd(datt, g->o, dres, s.att, w->o, N, qd, d, 0); /* [N,d] -> datt [N,qd] */
        op_attention_bwd(a->dq, a->dk, a->dv, datt, s.att, s.lse, s.q, s.k, s.v, b->off, b->n_seq,
                         nh, nkv, hd, b->bidirectional); /* -> dq [N,qd], dk dv [N,kvd] */
        grads_final(m, done);
        op_rope_bwd(a->dq, a->cs, a->sn, N, nh, hd);   /* in place */
        op_rope_bwd(a->dk, a->cs, a->sn, N, nkv, hd);
        memset(a->dqlin, 0, (size_t)N * qd * sizeof(float));
        memset(a->dklin, 0, (size_t)N * kvd * sizeof(float));
        op_rmsnorm_bwd(a->dqlin, g->q_norm, a->dq, s.qlin, w->q_norm, s.qrstd, N * nh, hd); /* [N*nh,hd] */
        op_rmsnorm_bwd(a->dklin, g->k_norm, a->dk, s.klin, w->k_norm, s.krstd, N * nkv, hd);
        op_matmul_bwd(a->dln, g->q, a->dqlin, s.ln1, w->q, N, d, qd, 0); /* [N,qd] -> [N,d] */
        op_matmul_bwd(a->dln, g->k, a->dklin, s.ln1, w->k, N, d, kvd, 1); /* += [N,d] */
        op_matmul_bwd(a->dln, g->v, a->dv, s.ln1, w->v, N, d, kvd, 1);    /* += [N,d] */
        op_rmsnorm_bwd(dres, g->attn_norm, a->dln, s.res, w->attn_norm, s.rstd1, N, d); /* += [N,d] */
        done = layer_start(m, l);
        grads_final(m, done);
    }
    for (int i = 0; i < N; i++) { /* embedding: serial, rows may repeat */
        float *ge = m->g.embed + (size_t)b->tokens[i] * d;
        const float *gi = dres + (size_t)i * d;
        for (int j = 0; j < d; j++) ge[j] += gi[j];
    }
    grads_final(m, 0);
}

int rf_train_step_fb(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b, int bwd, rf_tloss *out) {
    if (check_batch(m, a, b)) return -1;
    forward(m, a, b);
    head(m, a, b, bwd, out);
    if (bwd) backward(m, a, b);
    return 0;
}

int rf_train_logits(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b, float *logits) {
    if (check_batch(m, a, b)) return -1;
    forward(m, a, b);
    op_matmul_fwd(logits, a->lnf, m->w.lm_head, b->n_tok, m->cfg.hidden_size, m->cfg.vocab_size);
    return 0;
}

double rf_train_flops(const rf_config *c, const rf_tbatch *b) {
    double d = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    double f = c->intermediate_size, V = c->vocab_size;
    double per_tok = c->n_layers * 2.0 * (d * nh * hd * 2 + d * nkv * hd * 2 + 3 * d * f);
    double fwd = per_tok * b->n_tok, keys = 0;
    for (int s = 0; s < b->n_seq; s++) {
        double n = b->off[s + 1] - b->off[s];
        keys += b->bidirectional ? n * n : n * (n + 1) / 2;
    }
    fwd += c->n_layers * nh * keys * 4.0 * hd; /* QK^T and PV */
    for (int i = 0; i < b->n_tok; i++)
        if (b->target[i] >= 0) fwd += 2.0 * d * V;
    return 3.0 * fwd; /* backward ~ 2x forward */
}
