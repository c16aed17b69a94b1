/* write_random.c - randomly initialised Qwen3 models: in memory
 * (rf_model_init_random) or written as a Hugging Face checkpoint
 * (rf_model_write_random). Both draw the same numbers for the same seed.
 *
 * Determinism without a single sequential stream: every tensor has its own
 * seed (hash of the model seed and the tensor name) and is cut into blocks of
 * RF_GEN_BLOCK elements, each with its own RNG seeded from (tensor seed,
 * block index). So blocks can be generated in parallel and in any chunking
 * (the streaming writer asks for 4M elements at a time, the in-memory init
 * for whole tensors) and still give identical weights. */
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

#define RF_GEN_BLOCK ((size_t)1 << 16)

typedef rf_normal_fill gen_ctx;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return mix64(seed ^ mix64(h));
}

static inline void store(void *dst, rf_dtype t, size_t i, float x) {
    switch (t) {
    case RF_F32: ((float *)dst)[i] = x; break;
    case RF_BF16: ((uint16_t *)dst)[i] = rf_f32_to_bf16(x); break;
    case RF_F16: ((uint16_t *)dst)[i] = rf_f32_to_f16(x); break;
    default: break; /* block-quantised dtypes are written by convert, never element-wise */
    }
}

/* Elements [e0, e0 + n) of a N(0, std^2) tensor; e0 % RF_GEN_BLOCK == 0.
 * Box-Muller, both outputs of each pair used. */
static void fill_normal(void *vctx, size_t e0, size_t n, void *dst) {
    const gen_ctx *g = vctx;
    size_t nb = (n + RF_GEN_BLOCK - 1) / RF_GEN_BLOCK, b0 = e0 / RF_GEN_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        rf_rng r;
        rf_rng_seed(&r, g->seed + (b0 + b) * 0x9e3779b97f4a7c15ull);
        size_t i0 = b * RF_GEN_BLOCK, cnt = n - i0 < RF_GEN_BLOCK ? n - i0 : RF_GEN_BLOCK;
        for (size_t i = 0; i < cnt; i += 2) {
            /* one 64-bit draw gives both uniforms (24 bits each, plenty for
             * weights: |z| <= 5.8); u1 in (0, 1] so the log is finite. Float
             * math: an 8B checkpoint needs 8e9 of these. */
            uint64_t x = rf_rng_next(&r);
            float u1 = (float)((x >> 40) + 1) * 0x1.0p-24f;
            float u2 = (float)((x >> 8) & 0xffffff) * 0x1.0p-24f;
            float rad = sqrtf(-2.0f * logf(u1)) * g->std, s, c;
            sincosf(6.28318530717958647f * u2, &s, &c);
            store(dst, g->dtype, i0 + i, rad * c);
            if (i + 1 < cnt) store(dst, g->dtype, i0 + i + 1, rad * s);
        }
    }
}

void rf_normal_fill_init(rf_normal_fill *g, uint64_t seed, const char *name, float std, rf_dtype dtype) {
    *g = (rf_normal_fill){tensor_seed(seed, name), std, dtype};
}

void rf_fill_normal(void *ctx, size_t e0, size_t n, void *dst) { fill_normal(ctx, e0, n, dst); }

/* ---- in memory ----------------------------------------------------------------- */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

void rf_model_init_random(rf_model *m, const rf_config *cfg, rf_dtype dtype, float init_std,
                          uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->cfg.dtype = dtype;
    rf_tspec *ts;
    int n = rf_model_tensor_list(m, &ts);
    size_t es = rf_dtype_size(dtype), total = 0;
    for (int i = 0; i < n; i++)
        total += align64(ts[i].mat ? (size_t)ts[i].rows * ts[i].cols * es : (size_t)ts[i].rows * 4);
    /* one block for everything; not zeroed: every byte that is used gets written */
    m->owned = aligned_alloc(64, total ? total : 64);
    if (!m->owned) rf_die("out of memory: %zu bytes for a random model", total);
    char *p = m->owned;
    for (int i = 0; i < n; i++) {
        if (ts[i].mat) {
            size_t cnt = (size_t)ts[i].rows * ts[i].cols;
            gen_ctx g = {tensor_seed(seed, ts[i].name), init_std, dtype};
            fill_normal(&g, 0, cnt, p);
            *ts[i].mat = (rf_mat){dtype, p, ts[i].rows, ts[i].cols, NULL};
            p += align64(cnt * es);
        } else {
            float *v = (float *)p;
            for (int j = 0; j < ts[i].rows; j++) v[j] = 1.0f; /* RMSNorm weights start at 1 */
            *ts[i].vec = v;
            p += align64((size_t)ts[i].rows * 4);
        }
    }
    if (m->cfg.tie_embeddings) m->lm_head = m->embed;
    free(ts);
    rf_model_pack(m);
}

/* ---- on disk -------------------------------------------------------------------- */

/* norm weights = 1 */
static void fill_ones(void *vctx, size_t e0, size_t n, void *dst) {
    const gen_ctx *g = vctx;
    for (size_t i = 0; i < n; i++) store(dst, g->dtype, i, 1.0f);
}

int rf_model_write_random(const rf_config *cfg, const char *dir, rf_dtype dtype,
                          size_t shard_bytes, float init_std, uint64_t seed) {
    int n = rf_tensor_count(cfg);
    rf_tdesc *td = rf_calloc((size_t)n, sizeof *td);
    rf_tensor_table(cfg, td);
    gen_ctx *g = rf_calloc((size_t)n, sizeof *g);
    rf_st_fill_fn *fill = rf_calloc((size_t)n, sizeof *fill);
    void **ctx = rf_calloc((size_t)n, sizeof *ctx);
    for (int i = 0; i < n; i++) {
        g[i] = (gen_ctx){tensor_seed(seed, td[i].name), init_std, dtype};
        fill[i] = td[i].cols ? fill_normal : fill_ones;
        ctx[i] = &g[i];
    }
    int rc = rf_model_write_tensors(cfg, dir, dtype, NULL, shard_bytes, fill, ctx);
    free(ctx);
    free(fill);
    free(g);
    free(td);
    return rc;
}
