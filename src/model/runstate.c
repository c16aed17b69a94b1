/* runstate.c - the scratch buffers of forward calls (forward.h): one set per
 * decoder or per workspace, sized for the largest call it will make. */
#include <omp.h>

#include "model/runstate.h"
#include "util/util.h"

rf_runstate *rf_runstate_new(const rf_config *cfg, int max_tokens, int max_ctx) {
    return rf_runstate_alloc(cfg, max_tokens, max_ctx, 1);
}

void rf_runstate_free(rf_runstate *s) { rf_runstate_release(s); }

int rf_runstate_fits(const rf_runstate *s, int max_tokens, int max_ctx) {
    return s->max_tokens >= max_tokens && s->max_ctx >= max_ctx && s->n_threads >= omp_get_max_threads();
}

size_t rf_runstate_bytes(const rf_runstate *s) { return s->bytes; }

/* scoped: from scoped blocks (an aborted call frees them); else plain
 * buffers for a workspace, all or none: a failure frees what was made
 * before dying, so the workspace never holds half a run state */
rf_runstate *rf_runstate_alloc(const rf_config *cfg, int max_tokens, int max_ctx, int scoped) {
    rf_runstate *s = scoped ? rf_scoped_calloc(1, sizeof *s) : rf_calloc(1, sizeof *s);
    size_t T = (size_t)max_tokens, d = cfg->hidden_size, qd = (size_t)cfg->n_heads * cfg->head_dim,
           kvd = (size_t)cfg->n_kv_heads * cfg->head_dim, ffn = cfg->intermediate_size;
    s->scoped = scoped;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->n_threads = omp_get_max_threads();
    s->x = rf_block_aligned(scoped, T * d * sizeof(float));
    s->xb = rf_block_aligned(scoped, T * d * sizeof(float));
    s->q = rf_block_aligned(scoped, T * qd * sizeof(float));
    s->k = rf_block_aligned(scoped, T * kvd * sizeof(float));
    s->v = rf_block_aligned(scoped, T * kvd * sizeof(float));
    s->att = rf_block_aligned(scoped, T * qd * sizeof(float));
    s->hb = rf_block_aligned(scoped, T * ffn * sizeof(float));
    s->hb2 = rf_block_aligned(scoped, T * ffn * sizeof(float));
    s->rope = rf_block_aligned(scoped, T * cfg->head_dim * sizeof(float));
    s->scores = rf_block_aligned(scoped, (size_t)s->n_threads * RF_ATT_ROWS * (max_ctx + T) * sizeof(float));
    s->bytes = (2 * T * (d + qd + kvd + ffn) + T * cfg->head_dim +
                (size_t)s->n_threads * RF_ATT_ROWS * (max_ctx + T)) * sizeof(float);
    if (!(s->x && s->xb && s->q && s->k && s->v && s->att && s->hb && s->hb2 && s->rope && s->scores)) {
        size_t bytes = s->bytes;
        rf_runstate_release(s);
        rf_oom(bytes);
    }
    return s;
}

void rf_runstate_release(rf_runstate *s) {
    if (!s) return;
    int sc = s->scoped;
    rf_block_free(sc, s->x);
    rf_block_free(sc, s->xb);
    rf_block_free(sc, s->q);
    rf_block_free(sc, s->k);
    rf_block_free(sc, s->v);
    rf_block_free(sc, s->att);
    rf_block_free(sc, s->hb);
    rf_block_free(sc, s->hb2);
    rf_block_free(sc, s->rope);
    rf_block_free(sc, s->scores);
    rf_block_free(sc, s);
}
