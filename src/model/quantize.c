/* quantize.c - rf_model_quantize: turn a loaded model's large matrices into
 * ggml's Q8_0 / Q4_0 blocks (formats/blocks.h) in heap memory.
 *
 * Quantised: every layer's q, k, v, o, gate, up, down and the lm head.
 * Kept as they are: the embeddings (a lookup reads one row per token, so
 * their size costs memory, not time; llama.cpp files may still quantise
 * them, which the loaders accept) and the f32 norm vectors. With tied
 * embeddings the lm head becomes a quantised copy of the embeddings, so
 * m->lm_head.data != m->embed.data afterwards although cfg.tie_embeddings
 * stays 1 (the checkpoint's shape did not change).
 *
 * Memory: the quantised matrices, the norm vectors and anything else that
 * lived in the old heap block (m->owned: the embeddings of an in-memory
 * random model) go to one new heap block, which replaces m->owned; weights
 * in the mmap'd files stay mapped and untouched. */
#include <malloc.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "io/quant.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* W (any dtype) -> Q8_0 / Q4_0 blocks at dst, rows in parallel */
static void quantize_mat(void *dst, const rf_mat *W, rf_dtype dt) {
    const size_t rb = rf_dtype_row_bytes(dt, W->cols);
#pragma omp parallel
    {
        float *row = rf_malloc(sizeof(float) * W->cols);
#pragma omp for schedule(static)
        for (int r = 0; r < W->rows; r++) {
            rf_mat_row_f32(row, W, r);
            if (dt == RF_Q8_0) rf_quantize_row_q8_0(row, (char *)dst + (size_t)r * rb, W->cols);
            else rf_quantize_row_q4_0(row, (char *)dst + (size_t)r * rb, W->cols);
        }
        free(row);
    }
}

int rf_model_quantize(rf_model *m, rf_dtype dtype) {
    if (dtype != RF_Q8_0 && dtype != RF_Q4_0) {
        rf_set_error("quantize: target dtype must be Q8_0 or Q4_0, not %s", rf_dtype_name(dtype));
        return -1;
    }
    rf_mat **tg = rf_malloc(sizeof(*tg) * (7 * (size_t)m->cfg.n_layers + 1));
    int nt = rf_model_matmuls(m, tg);
    for (int i = 0; i < nt; i++)
        if (tg[i]->cols % RF_QK) {
            rf_set_error("quantize: a matrix of %d columns is not a whole number of %d-blocks", tg[i]->cols,
                         RF_QK);
            free(tg);
            return -1;
        }
    rf_model_unpack(m); /* the packed copies are of the bf16 weights being replaced */
    /* what lives in the old heap block must move to the new one */
    const char *old = m->owned;
    size_t old_size = old ? malloc_usable_size(m->owned) : 0;
#define IN_OLD(p) (old && (const char *)(p) >= old && (const char *)(p) < old + old_size)
    rf_tspec *ts;
    int n = rf_model_tensor_list(m, &ts);
    int copy_embed = IN_OLD(m->embed.data);
    size_t embed_bytes = rf_dtype_row_bytes(m->embed.dtype, m->embed.cols) * m->embed.rows;
    size_t total = copy_embed ? align64(embed_bytes) : 0;
    for (int i = 0; i < nt; i++) total += align64(rf_dtype_row_bytes(dtype, tg[i]->cols) * tg[i]->rows);
    for (int i = 0; i < n; i++)
        if (ts[i].vec) total += align64((size_t)ts[i].rows * sizeof(float));
    char *blk = rf_aligned_alloc(total), *p = blk;
    for (int i = 0; i < nt; i++) {
        size_t bytes = rf_dtype_row_bytes(dtype, tg[i]->cols) * tg[i]->rows;
        quantize_mat(p, tg[i], dtype);
        tg[i]->dtype = dtype;
        tg[i]->data = p;
        p += align64(bytes);
    }
    if (copy_embed) { /* after the lm head read it when tied */
        memcpy(p, m->embed.data, embed_bytes);
        m->embed.data = p;
        p += align64(embed_bytes);
    }
    for (int i = 0; i < n; i++)
        if (ts[i].vec) {
            memcpy(p, *ts[i].vec, (size_t)ts[i].rows * sizeof(float));
            *ts[i].vec = (float *)p;
            p += align64((size_t)ts[i].rows * sizeof(float));
        }
#undef IN_OLD
    free(ts);
    free(tg);
    free(m->owned);
    m->owned = blk;
    /* the Q8_0 matrices' packed copies (the originals stay in m->owned:
     * in-memory quantisation holds the weights twice on an avx512 CPU) */
    return rf_model_pack(m);
}
