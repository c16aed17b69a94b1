/* save.c - write a model as a Hugging Face checkpoint directory: config.json
 * and model.safetensors, or shards with model.safetensors.index.json.
 * Tensors are produced chunk by chunk while the files are written
 * (rf_st_writer_add_gen), so neither a conversion nor a random 8B model
 * needs the whole checkpoint in RAM. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/blocks.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

static int write_index(const char *dir, const rf_tdesc *ts, int n, const int *shard, int n_shards,
                       size_t total) {
    /* hand-written JSON: the names are plain ASCII from the tensor table */
    size_t cap = 256 + (size_t)n * 200;
    char *s = rf_malloc(cap);
    size_t len = (size_t)snprintf(s, cap, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n"
                                          "  \"weight_map\": {\n", total);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len,
                                "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n", ts[i].name,
                                shard[i] + 1, n_shards, i + 1 < n ? "," : "");
    len += (size_t)snprintf(s + len, cap - len, "  }\n}\n");
    char *path = rf_path_join(dir, "model.safetensors.index.json");
    int rc = rf_write_file_atomic(path, s, len);
    free(path);
    free(s);
    return rc;
}

/* Files of an earlier checkpoint in the same directory would shadow this one
 * (model.safetensors wins over an index) or linger as orphan shards. */
static void remove_stale(const char *dir, int n_shards) {
    char *p = rf_path_join(dir, n_shards > 1 ? "model.safetensors" : "model.safetensors.index.json");
    unlink(p);
    free(p);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int k, of, len = 0;
        if (sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &k, &of, &len) == 2 &&
            len == (int)strlen(e->d_name) && (n_shards == 1 || of != n_shards)) {
            p = rf_path_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
    }
    closedir(d);
}

int rf_model_write_tensors(const rf_config *cfg, const char *dir, rf_dtype dtype, const rf_dtype *dtypes,
                           size_t shard_bytes, rf_st_fill_fn const *fill, void *const *ctx) {
    int n = rf_tensor_count(cfg);
    for (int i = -1; i < (dtypes ? n : 0); i++) {
        rf_dtype t = i < 0 ? dtype : dtypes[i];
        if (t != RF_F32 && t != RF_F16 && t != RF_BF16) {
            rf_set_error("%s: safetensors checkpoints are written in f32, f16 or bf16, not %s", dir,
                         rf_dtype_name(t));
            return -1;
        }
    }
    if (rf_mkdir_p(dir)) return -1;
    rf_config c = *cfg;
    c.dtype = dtype;
    char *cpath = rf_path_join(dir, "config.json");
    int rc = rf_config_save(&c, cpath);
    free(cpath);
    if (rc) return -1;

    rf_tdesc *ts = rf_calloc((size_t)n, sizeof *ts);
    rf_tensor_table(cfg, ts);
    size_t total = 0;
    /* assign tensors to shards in order: a new shard starts when the next
     * tensor would push the current one past shard_bytes */
    int *shard = rf_calloc((size_t)n, sizeof(int)), n_shards = 1;
    size_t cur = 0;
    for (int i = 0; i < n; i++) {
        size_t es = rf_dtype_size(dtypes ? dtypes[i] : dtype);
        size_t nb = (size_t)ts[i].rows * (ts[i].cols ? (size_t)ts[i].cols : 1) * es;
        if (shard_bytes > 0 && cur > 0 && cur + nb > shard_bytes) {
            n_shards++;
            cur = 0;
        }
        shard[i] = n_shards - 1;
        cur += nb;
        total += nb;
    }
    for (int s = 0; s < n_shards && rc == 0; s++) {
        rf_st_writer *w = rf_st_writer_new();
        for (int i = 0; i < n; i++) {
            if (shard[i] != s) continue;
            int64_t shape[2] = {ts[i].rows, ts[i].cols};
            rf_st_writer_add_gen(w, ts[i].name, dtypes ? dtypes[i] : dtype, ts[i].cols ? 2 : 1, shape, fill[i],
                                 ctx[i]);
        }
        char name[64];
        if (n_shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        char *path = rf_path_join(dir, name);
        rc = rf_st_writer_finish(w, path);
        free(path);
    }
    if (rc == 0 && n_shards > 1) rc = write_index(dir, ts, n, shard, n_shards, total);
    if (rc == 0) remove_stale(dir, n_shards);
    free(shard);
    free(ts);
    return rc;
}

/* ---- an rf_model's tensors, converted while written ----------------------------- */

typedef struct {
    rf_dtype src_dtype, dst_dtype;
    const void *src;
} conv_ctx;

static float load_elem(rf_dtype t, const void *p, size_t i) {
    switch (t) {
        case RF_BF16: return rf_bf16_to_f32(((const uint16_t *)p)[i]);
        case RF_F16: return rf_f16_to_f32(((const uint16_t *)p)[i]);
        default: return ((const float *)p)[i];
    }
}

static void fill_converted(void *vctx, size_t e0, size_t n, void *dst) {
    const conv_ctx *c = vctx;
    if (c->src_dtype == c->dst_dtype) { /* a plain copy: bit for bit */
        size_t es = rf_dtype_size(c->dst_dtype);
        memcpy(dst, (const char *)c->src + e0 * es, n * es);
        return;
    }
    /* a block type (a quantised GGUF): each block dequantised once, the
     * rows being whole blocks */
    const int quant = rf_dtype_is_quant(c->src_dtype);
    const size_t be = (size_t)rf_dtype_block_elems(c->src_dtype), bb = rf_dtype_block_bytes(c->src_dtype);
    float blk[RF_QK_K];
    size_t have = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t e = e0 + i;
        if (quant && e / be != have) {
            have = e / be;
            rf_dequantize_row(c->src_dtype, (const char *)c->src + have * bb, blk, (int64_t)be);
        }
        float x = quant ? blk[e % be] : load_elem(c->src_dtype, c->src, e);
        switch (c->dst_dtype) {
            case RF_BF16: ((uint16_t *)dst)[i] = rf_f32_to_bf16(x); break;
            case RF_F16: ((uint16_t *)dst)[i] = rf_f32_to_f16(x); break;
            default: ((float *)dst)[i] = x;
        }
    }
}

int rf_model_save(const rf_model *m, const char *dir, rf_dtype dtype, size_t shard_bytes) {
    rf_model view = *m; /* the tensor list binds to a model it may write: a copy */
    view.layers = NULL;
    rf_tspec *ts;
    int n = rf_model_tensor_list(&view, &ts);
    /* point the copy's fields at m's tensors: the list holds their addresses
     * in view, whose values are m's */
    memcpy(view.layers, m->layers, (size_t)m->cfg.n_layers * sizeof(rf_layer));
    conv_ctx *cc = rf_calloc((size_t)n, sizeof *cc);
    rf_st_fill_fn *fill = rf_calloc((size_t)n, sizeof *fill);
    void **ctx = rf_calloc((size_t)n, sizeof *ctx);
    for (int i = 0; i < n; i++) {
        cc[i] = ts[i].mat ? (conv_ctx){ts[i].mat->dtype, dtype, ts[i].mat->data}
                          : (conv_ctx){RF_F32, dtype, *ts[i].vec}; /* norms are f32 in memory */
        fill[i] = fill_converted;
        ctx[i] = &cc[i];
    }
    int rc = rf_model_write_tensors(&m->cfg, dir, dtype, NULL, shard_bytes, fill, ctx);
    free(ctx);
    free(fill);
    free(cc);
    free(ts);
    free(view.layers);
    return rc;
}
