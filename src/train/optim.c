/* optim.c - AdamW (torch semantics: decoupled weight decay), global-norm
 * gradient clipping, and the learning-rate schedule (linear warm-up, then
 * cosine decay to min_lr). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

void rf_optcfg_default(rf_optcfg *c) {
    c->lr = 3e-4f;
    c->min_lr = 0.0f;
    c->warmup = 0;
    c->total = 1;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f; /* torch / HF defaults */
    c->eps = 1e-8f;
    c->weight_decay = 0.0f; /* the reference's train.sh */
    c->clip = 1.0f;         /* HF max_grad_norm */
}

void rf_adamw_init(rf_adamw *o, const rf_optcfg *c, size_t n) {
    o->c = *c;
    o->n = n;
    o->m = rf_aligned_alloc(n * sizeof(float));
    o->v = rf_aligned_alloc(n * sizeof(float));
    o->step = 0;
}

void rf_adamw_free(rf_adamw *o) {
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

float rf_lr_at(const rf_optcfg *c, long s) {
    /* warm-up reaches the peak at step warmup-1 (step 0 already learns, unlike
     * HF's s/warmup which spends step 0 at lr 0) */
    if (s < c->warmup) return c->lr * (float)(s + 1) / (float)c->warmup;
    long span = c->total - c->warmup;
    double progress = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    double cosv = 0.5 * (1.0 + cos(M_PI * progress));
    return (float)(c->min_lr + (c->lr - c->min_lr) * cosv);
}

/* Sum of squares in fixed chunks, then summed serially: the same result for
 * any thread count or schedule. */
static double sumsq(const float *g, size_t n) {
    enum { CH = 1 << 16 };
    size_t nc = (n + CH - 1) / CH;
    double *part = rf_malloc((nc ? nc : 1) * sizeof(double));
#pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t e = (c + 1) * CH < n ? (c + 1) * CH : n;
        double s = 0;
        for (size_t i = c * CH; i < e; i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    double s = 0;
    for (size_t c = 0; c < nc; c++) s += part[c];
    free(part);
    return s;
}

double rf_adamw_step(rf_adamw *o, rf_tmodel *m, float lr) {
    double norm = sqrt(sumsq(m->grads, m->n_params));
    float gscale = 1.0f;
    if (o->c.clip > 0 && norm > o->c.clip) gscale = (float)(o->c.clip / (norm + 1e-6));
    o->step++;
    float b1 = o->c.beta1, b2 = o->c.beta2, eps = o->c.eps;
    float bc1 = 1.0f - powf(b1, (float)o->step), bc2 = 1.0f - powf(b2, (float)o->step);
    for (int t = 0; t < m->n_tensors; t++) {
        const rf_ptensor *pt = &m->tensors[t];
        float decay = pt->decay ? lr * o->c.weight_decay : 0.0f;
        float *p = m->params + pt->offset, *g = m->grads + pt->offset;
        float *mm = o->m + pt->offset, *vv = o->v + pt->offset;
        long n = (long)pt->numel;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
        for (long i = 0; i < n; i++) {
            float gi = g[i] * gscale;
            mm[i] = b1 * mm[i] + (1.0f - b1) * gi;
            vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
            float mh = mm[i] / bc1, vh = vv[i] / bc2;
            p[i] -= decay * p[i] + lr * mh / (sqrtf(vh) + eps);
        }
    }
    return norm;
}
