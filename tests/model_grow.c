/* model_grow.c - function-preserving growth (model/grow.c).
 *
 *  1. For target shapes that exercise every kind of growth (hidden size,
 *     heads, KV heads with more, fewer and equal query heads per KV head,
 *     FFN units, layers, head_dim x2 and x4, vocabulary, tied and untied,
 *     tied -> untied), the grown checkpoint (f32) gives the small model's
 *     logits at every position of several prompts: max |grown - small| over
 *     the small vocabulary <= TOL * max |small| per prompt. The extra
 *     vocabulary rows' logits stay below the position's smallest old logit
 *     minus 50 (they never win, and their softmax mass is < V' e^-50).
 *  2. The comparison catches the mistakes growth must avoid: a RoPE pair
 *     placed at another frequency, a hidden-size norm left unscaled, a
 *     k_norm left unscaled (each done to a grown model in memory).
 *  3. The presets' shapes (0.6b, 1.7b, 4b, 8b) from the demo model's config
 *     are exactly `refusion init`'s presets, and bad targets get an error.
 * TOL = 1e-5: both in f32; the grown sums run over more (zero) terms in
 * another order, and the offset dims add n_off * c^2 <= 2^-19 of a row's
 * squared norm to the mean squares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "model/grow.h"
#include "util/util.h"

#define TOL 1e-5
#define N_PROMPTS 3
#define LEN 18

static char tmp_root[256];

/* logits [n, V] of tokens[0..n) at positions 0..n-1, one cached call */
static void logits_of(const rf_model *m, const int *tok, int n, float *out) {
    rf_kvcache c;
    rf_kv_init(&c, &m->cfg, 64);
    rf_runstate *s = rf_runstate_new(&m->cfg, 64, 64);
    int pos[64], idx[64];
    for (int i = 0; i < n; i++) pos[i] = idx[i] = i;
    rf_batch b = {1, n, tok, pos, 0, n, idx, out};
    CHECK(rf_forward(m, &c, s, &b) == 0, "forward: %s", rf_last_error());
    rf_runstate_free(s);
    rf_kv_free(&c);
}

/* worst over prompts of max |grown - small| / max |small| over the small
 * vocabulary; *margin_out: the smallest (min old logit - max extra logit) */
static double compare(const rf_model *small, const rf_model *big, double *margin_out) {
    int V = small->cfg.vocab_size, V2 = big->cfg.vocab_size;
    float *a = rf_malloc(sizeof(float) * LEN * V), *b = rf_malloc(sizeof(float) * LEN * V2);
    double worst = 0, margin = INFINITY;
    rf_rng rng;
    rf_rng_seed(&rng, 11);
    for (int p = 0; p < N_PROMPTS; p++) {
        int tok[LEN];
        for (int i = 0; i < LEN; i++) tok[i] = (int)rf_rng_below(&rng, V);
        logits_of(small, tok, LEN, a);
        logits_of(big, tok, LEN, b);
        double md = 0, ma = 1e-30;
        for (int i = 0; i < LEN; i++) {
            float lo = INFINITY, hi = -INFINITY;
            for (int t = 0; t < V; t++) {
                double d = fabs((double)b[(size_t)i * V2 + t] - a[(size_t)i * V + t]);
                if (d > md || d != d) md = d != d ? INFINITY : d;
                if (fabs(a[(size_t)i * V + t]) > ma) ma = fabs(a[(size_t)i * V + t]);
                if (b[(size_t)i * V2 + t] < lo) lo = b[(size_t)i * V2 + t];
            }
            for (int t = V; t < V2; t++)
                if (b[(size_t)i * V2 + t] > hi) hi = b[(size_t)i * V2 + t];
            if (V2 > V && lo - hi < margin) margin = lo - hi;
        }
        if (md / ma > worst) worst = md / ma;
    }
    free(a);
    free(b);
    *margin_out = margin;
    return worst;
}

static rf_config src_config(int heads, int kv, int tied) {
    rf_config c = rf_test_config(64, 96, heads, kv, 16, 300, 4096);
    c.tie_embeddings = tied;
    c.eos_id = 1, c.mask_id = 299, c.bot_id = 298;
    return c;
}

/* the shape fields of cfg replaced */
static rf_config shape_of(const rf_config *c, int d, int ffn, int L, int H, int KV, int hd, int V, int tied) {
    rf_config s = *c;
    s.hidden_size = d, s.intermediate_size = ffn, s.n_layers = L, s.n_heads = H, s.n_kv_heads = KV;
    s.head_dim = hd, s.vocab_size = V, s.tie_embeddings = tied;
    return s;
}

/* grow small to shape, write f32 into a fresh directory, load it into big */
static int grow_load(const rf_model *small, const rf_config *shape, rf_model *big, const char *name) {
    rf_config dst;
    if (rf_grow_config(&small->cfg, shape, &dst)) {
        CHECK(0, "%s: grow config: %s", name, rf_last_error());
        return -1;
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    if (rf_model_grow(small, &dst, dir, RF_F32, 5)) {
        CHECK(0, "%s: grow: %s", name, rf_last_error());
        return -1;
    }
    if (rf_model_load(big, dir)) {
        CHECK(0, "%s: load grown: %s", name, rf_last_error());
        return -1;
    }
    return 0;
}

static void case_logits(const char *name, const rf_model *small, const rf_config *shape) {
    rf_model big;
    if (grow_load(small, shape, &big, name)) return;
    double margin, e = compare(small, &big, &margin);
    CHECK(e <= TOL, "%s: grown logits vs small rel err %.3g > %g", name, e, TOL);
    if (big.cfg.vocab_size > small->cfg.vocab_size)
        CHECK(margin > 50, "%s: extra vocabulary rows only %.1f below the old ones", name, margin);
    printf("%-28s rel err %.2e", name, e);
    if (big.cfg.vocab_size > small->cfg.vocab_size) printf(", extra rows >= %.0f below", margin);
    printf("\n");
    rf_model_free(&big);
}

/* a copy of matrix W's data in f32 on the heap, W pointed at it */
static float *own_f32(rf_mat *W) {
    float *p = rf_malloc(sizeof(float) * (size_t)W->rows * W->cols);
    for (int r = 0; r < W->rows; r++) rf_mat_row_f32(p + (size_t)r * W->cols, W, r);
    W->data = p;
    W->dtype = RF_F32;
    W->packed = NULL;
    return p;
}

static void swap_rows(float *p, int cols, int a, int b) {
    for (int j = 0; j < cols; j++) {
        float t = p[(size_t)a * cols + j];
        p[(size_t)a * cols + j] = p[(size_t)b * cols + j];
        p[(size_t)b * cols + j] = t;
    }
}

/* 2. each mistake, made in memory in a correctly grown model, fails the comparison */
static void case_mistakes(const rf_model *small, const rf_config *shape) {
    rf_model big;
    if (grow_load(small, shape, &big, "mistakes")) return;
    double margin, e0 = compare(small, &big, &margin);
    CHECK(e0 <= TOL, "mistakes: the unmodified grown model fails (%.3g)", e0);
    rf_model_unpack(&big);
    rf_layer *L = &big.layers[0];
    int hd2 = big.cfg.head_dim, half2 = hd2 / 2, r = hd2 / small->cfg.head_dim;
    /* (a) RoPE: old dim 1 (and its partner) moved from new dim r*1 to dim 1,
     * in q and k and their norm weights alike: only its frequency is wrong */
    float *q = own_f32(&L->q), *k = own_f32(&L->k);
    for (int h = 0; h < big.cfg.n_heads; h++)
        swap_rows(q, L->q.cols, h * hd2 + r, h * hd2 + 1), swap_rows(q, L->q.cols, h * hd2 + half2 + r, h * hd2 + half2 + 1);
    for (int h = 0; h < big.cfg.n_kv_heads; h++)
        swap_rows(k, L->k.cols, h * hd2 + r, h * hd2 + 1), swap_rows(k, L->k.cols, h * hd2 + half2 + r, h * hd2 + half2 + 1);
    float *norms[] = {L->q_norm, L->k_norm};
    for (int i = 0; i < 2; i++) {
        float t = norms[i][r];
        norms[i][r] = norms[i][1], norms[i][1] = t;
        t = norms[i][half2 + r];
        norms[i][half2 + r] = norms[i][half2 + 1], norms[i][half2 + 1] = t;
    }
    double e = compare(small, &big, &margin);
    CHECK(e > 100 * TOL, "mistakes: a RoPE pair at the wrong frequency is not seen (rel err %.3g)", e);
    printf("mistake: RoPE pair misplaced  rel err %.2e\n", e);
    /* undo (a): swapping back restores the model */
    for (int h = 0; h < big.cfg.n_heads; h++)
        swap_rows(q, L->q.cols, h * hd2 + r, h * hd2 + 1), swap_rows(q, L->q.cols, h * hd2 + half2 + r, h * hd2 + half2 + 1);
    for (int h = 0; h < big.cfg.n_kv_heads; h++)
        swap_rows(k, L->k.cols, h * hd2 + r, h * hd2 + 1), swap_rows(k, L->k.cols, h * hd2 + half2 + r, h * hd2 + half2 + 1);
    for (int i = 0; i < 2; i++) {
        float t = norms[i][r];
        norms[i][r] = norms[i][1], norms[i][1] = t;
        t = norms[i][half2 + r];
        norms[i][half2 + r] = norms[i][half2 + 1], norms[i][half2 + 1] = t;
    }
    e = compare(small, &big, &margin);
    CHECK(e <= TOL, "mistakes: undoing the RoPE change does not restore the model (%.3g)", e);
    /* (b) layer 1's ffn_norm without the sqrt(H/H') scale */
    float sc = sqrtf((float)small->cfg.hidden_size / (float)big.cfg.hidden_size);
    for (int i = 0; i < big.cfg.hidden_size; i++) big.layers[1].ffn_norm[i] /= sc;
    e = compare(small, &big, &margin);
    CHECK(e > 100 * TOL, "mistakes: an unscaled norm is not seen (rel err %.3g)", e);
    printf("mistake: norm not scaled      rel err %.2e\n", e);
    for (int i = 0; i < big.cfg.hidden_size; i++) big.layers[1].ffn_norm[i] *= sc;
    /* (c) k_norm without 1/sqrt(r) */
    for (int i = 0; i < hd2; i++) L->k_norm[i] *= sqrtf((float)r);
    e = compare(small, &big, &margin);
    CHECK(e > 100 * TOL, "mistakes: an unscaled k_norm is not seen (rel err %.3g)", e);
    printf("mistake: k_norm not scaled    rel err %.2e\n", e);
    free(q);
    free(k);
    rf_model_free(&big);
}

/* 3. presets and bad targets */
static void case_shapes(void) {
    rf_config demo;
    char demo_path[512];
    const char *src = getenv("REFUSION_SRC");
    snprintf(demo_path, sizeof demo_path, "%s/models/refusion-demo/config.json", src ? src : ".");
    CHECK(rf_config_load(&demo, demo_path) == 0, "demo config: %s",
          rf_last_error());
    const char *names[] = {"0.6b", "1.7b", "4b", "8b"};
    for (int i = 0; i < 4; i++) {
        rf_config p, d;
        CHECK(rf_config_preset(&p, names[i]) == 0, "preset %s", names[i]);
        CHECK(rf_grow_config(&demo, &p, &d) == 0, "grow demo to %s: %s", names[i], rf_last_error());
        CHECK(d.hidden_size == p.hidden_size && d.intermediate_size == p.intermediate_size &&
                  d.n_layers == p.n_layers && d.n_heads == p.n_heads && d.n_kv_heads == p.n_kv_heads &&
                  d.head_dim == p.head_dim && d.vocab_size == p.vocab_size && d.tie_embeddings == p.tie_embeddings,
              "grown %s shape differs from the preset's", names[i]);
        CHECK(rf_config_n_params(&d) == rf_config_n_params(&p), "grown %s: %lld params, preset %lld", names[i],
              rf_config_n_params(&d), rf_config_n_params(&p));
        /* what must stay the source's */
        CHECK(d.mask_id == demo.mask_id && d.bot_id == demo.bot_id && d.eos_id == demo.eos_id &&
                  d.rope_theta == demo.rope_theta && d.max_pos == demo.max_pos,
              "grown %s: special ids / RoPE / context not the source's", names[i]);
    }
    rf_config s = src_config(4, 2, 1), d;
    struct { rf_config shape; const char *err; } bad[] = {
        {shape_of(&s, 32, 96, 2, 4, 2, 16, 300, 1), "hidden size 32 is smaller"},
        {shape_of(&s, 64, 96, 1, 4, 2, 16, 300, 1), "layer count 1 is smaller"},
        {shape_of(&s, 64, 96, 2, 6, 4, 16, 300, 1), "do not divide"},
        {shape_of(&s, 64, 96, 2, 4, 2, 24, 300, 1), "not an even multiple"},
        {shape_of(&s, 64, 96, 2, 4, 2, 16, 400, 1), "more hidden dim"},
        {shape_of(&s, 65, 96, 2, 4, 2, 16, 400, 1), "more hidden dim"},
        {shape_of(&s, 64, 64, 2, 4, 2, 16, 300, 1), "FFN size 64 is smaller"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = rf_grow_config(&s, &bad[i].shape, &d);
        CHECK(rc == -1 && strstr(rf_last_error(), bad[i].err), "bad target %zu: rc %d, error '%s' (want '%s')", i,
              rc, rc ? rf_last_error() : "", bad[i].err);
    }
    /* 4 query heads per KV head in groups of 3: 2 KV heads each, 4 > 3 */
    rf_config g4 = src_config(8, 2, 1), g3 = shape_of(&g4, 64, 96, 2, 9, 3, 16, 300, 1);
    CHECK(rf_grow_config(&g4, &g3, &d) == -1 && strstr(rf_last_error(), "cannot hold"), "kv groups: '%s'",
          rf_last_error());
    rf_config u = src_config(4, 2, 0);
    CHECK(rf_grow_config(&u, &s, &d) == -1 && strstr(rf_last_error(), "untied"), "untied -> tied accepted");
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/rf_model_grow.%d", (int)getpid());
    rf_mkdir_p(tmp_root);
    for (int tied = 0; tied < 2; tied++) {
        rf_config c = src_config(4, 2, tied);
        rf_model small;
        rf_model_init_random(&small, &c, RF_F32, 0.3f, 3 + tied);
        char name[64];
        rf_config s;
#define CASE(label, ...)                                                          \
        s = shape_of(&c, __VA_ARGS__);                                            \
        snprintf(name, sizeof name, "%s%s", label, tied ? " (tied)" : "");        \
        case_logits(name, &small, &s)
        CASE("same shape", 64, 96, 2, 4, 2, 16, 300, tied);
        CASE("every kind", 128, 160, 5, 8, 4, 32, 400, tied);
        CASE("hidden + vocab", 96, 96, 2, 4, 2, 16, 333, tied);
        CASE("head_dim x4", 64, 96, 2, 4, 2, 64, 300, tied);
        CASE("kv: 4 q heads per kv", 96, 128, 3, 8, 2, 16, 300, tied);
        CASE("layers 2 -> 7", 64, 96, 7, 4, 2, 16, 300, tied);
        if (tied) {
            CASE("tied -> untied + vocab", 96, 96, 2, 4, 2, 32, 512, 0);
        } else {
            s = shape_of(&c, 128, 160, 3, 8, 4, 32, 400, 0);
            case_mistakes(&small, &s);
        }
        rf_model_free(&small);
    }
    /* fewer query heads per KV head: the KV heads are duplicated */
    rf_config c = src_config(4, 1, 0);
    rf_model small;
    rf_model_init_random(&small, &c, RF_F32, 0.3f, 9);
    rf_config s = shape_of(&c, 96, 96, 2, 8, 4, 32, 300, 0);
    case_logits("kv: 4 -> 2 q heads per kv", &small, &s);
    rf_model_free(&small);
    case_shapes();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    CHECK(system(cmd) == 0, "cleanup");
    return check_summary("model_grow");
}
