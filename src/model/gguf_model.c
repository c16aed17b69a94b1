/* gguf_model.c - a Qwen3 / ReFusion model in a GGUF file, as llama.cpp lays
 * it out (convert_hf_to_gguf.py's Qwen3 handling):
 *
 *   HF name                                   GGUF name
 *   model.embed_tokens.weight                 token_embd.weight
 *   model.layers.N.input_layernorm.weight     blk.N.attn_norm.weight
 *   model.layers.N.self_attn.{q,k,v}_proj     blk.N.attn_{q,k,v}
 *   model.layers.N.self_attn.o_proj           blk.N.attn_output
 *   model.layers.N.self_attn.{q,k}_norm       blk.N.attn_{q,k}_norm
 *   model.layers.N.post_attention_layernorm   blk.N.ffn_norm
 *   model.layers.N.mlp.{gate,up,down}_proj    blk.N.ffn_{gate,up,down}
 *   model.norm.weight                         output_norm.weight
 *   lm_head.weight                            output.weight (absent when tied)
 *
 * Unlike llama's, Qwen2/Qwen3's Q and K are NOT permuted by the converter:
 * llama.cpp runs them with NEOX-style RoPE, which is HF's rotate_half, so the
 * bytes of every matrix are the safetensors bytes ([rows, cols] row-major is
 * ne = [cols, rows]). The ReFusion extras travel as refusion.* keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/quant.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

/* ---- loading ------------------------------------------------------------------ */

/* an integer hyper-parameter in [lo, hi]; def when absent (required: error) */
static int hparam(const rf_gguf_file *f, const char *key, int required, int64_t def, int64_t lo,
                  int64_t hi, int *out) {
    int64_t v = def;
    int r = rf_gguf_get_int(f, key, &v);
    if (r < 0) return -1;
    if (r == 1 && required) {
        rf_set_error("%s: missing required key '%s'", f->path, key);
        return -1;
    }
    if (v < lo || v > hi) {
        rf_set_error("%s: key '%s' = %lld is out of range [%lld, %lld]", f->path, key, (long long)v,
                     (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int fparam(const rf_gguf_file *f, const char *key, double def, float *out) {
    double v = def;
    if (rf_gguf_get_float(f, key, &v) < 0) return -1;
    *out = (float)v;
    return 0;
}

/* id of a token spelled s in tokenizer.ggml.tokens, or -1 */
static int find_token(const rf_gguf_file *f, const char *s) {
    const rf_gguf_kv *kv = rf_gguf_find(f, "tokenizer.ggml.tokens");
    if (!kv || kv->type != RF_GGUF_ARRAY || kv->arr_type != RF_GGUF_STRING) return -1;
    size_t n = strlen(s);
    for (uint64_t i = 0; i < kv->arr_n && i < INT32_MAX; i++)
        if (kv->strs[i].len == n && !memcmp(kv->strs[i].s, s, n)) return (int)i;
    return -1;
}

static int config_from_gguf(rf_config *c, const rf_gguf_file *f) {
    memset(c, 0, sizeof *c);
    rf_gguf_str arch;
    int r = rf_gguf_get_str(f, "general.architecture", &arch);
    if (r < 0) return -1;
    if (r == 1) {
        rf_set_error("%s: missing required key 'general.architecture'", f->path);
        return -1;
    }
    if (arch.len != 5 || memcmp(arch.s, "qwen3", 5)) {
        rf_set_error("%s: architecture '%.*s' is not supported (only qwen3)", f->path,
                     arch.len > 40 ? 40 : (int)arch.len, arch.s);
        for (char *p = (char *)rf_last_error(); *p; p++) /* keep the line clean */
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        return -1;
    }
    const rf_gguf_tensor *emb = rf_gguf_find_tensor(f, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        rf_set_error("%s: %s", f->path, emb ? "token_embd.weight is not a matrix"
                                            : "missing tensor 'token_embd.weight'");
        return -1;
    }
    const int64_t big = 1 << 24;
    if (emb->ne[1] < 1 || emb->ne[1] > big) {
        rf_set_error("%s: token_embd.weight has %lld rows (the vocabulary): out of range", f->path,
                     (long long)emb->ne[1]);
        return -1;
    }
    c->vocab_size = (int)emb->ne[1];
    if (hparam(f, "qwen3.block_count", 1, 0, 1, 4096, &c->n_layers) ||
        hparam(f, "qwen3.embedding_length", 1, 0, 1, big, &c->hidden_size) ||
        hparam(f, "qwen3.feed_forward_length", 1, 0, 1, big, &c->intermediate_size) ||
        hparam(f, "qwen3.attention.head_count", 1, 0, 1, big, &c->n_heads) ||
        hparam(f, "qwen3.attention.head_count_kv", 0, c->n_heads, 1, big, &c->n_kv_heads) ||
        hparam(f, "qwen3.context_length", 0, 40960, 1, INT32_MAX, &c->max_pos) ||
        hparam(f, "qwen3.attention.key_length", 0, c->hidden_size / c->n_heads, 1, big,
               &c->head_dim))
        return -1;
    int vlen;
    if (hparam(f, "qwen3.attention.value_length", 0, c->head_dim, 1, big, &vlen)) return -1;
    if (vlen != c->head_dim) {
        rf_set_error("%s: qwen3.attention.value_length (%d) differs from key_length (%d): not "
                     "supported", f->path, vlen, c->head_dim);
        return -1;
    }
    if (fparam(f, "qwen3.attention.layer_norm_rms_epsilon", 1e-6, &c->rms_eps) ||
        fparam(f, "qwen3.rope.freq_base", 10000.0, &c->rope_theta))
        return -1;
    if (rf_gguf_find(f, "qwen3.rope.scaling.type") || rf_gguf_find(f, "qwen3.rope.scaling.factor")) {
        rf_gguf_str st = {"none", 4};
        if (rf_gguf_get_str(f, "qwen3.rope.scaling.type", &st) < 0) return -1;
        if (!(st.len == 4 && !memcmp(st.s, "none", 4))) {
            rf_set_error("%s: RoPE scaling (qwen3.rope.scaling.*) is not supported", f->path);
            return -1;
        }
    }
    c->tie_embeddings = rf_gguf_find_tensor(f, "output.weight") == NULL;
    c->dtype = emb->dtype;
    /* token ids: -1 when absent; ReFusion's two from refusion.*, else found
     * by spelling in the vocabulary, else the defaults of config.json */
    const int64_t none = -1, top = INT32_MAX;
    c->eos_id = c->bos_id = c->pad_id = -1;
    if (hparam(f, "tokenizer.ggml.bos_token_id", 0, none, -1, top, &c->bos_id) ||
        hparam(f, "tokenizer.ggml.eos_token_id", 0, none, -1, top, &c->eos_id) ||
        hparam(f, "refusion.eos_token_id", 0, c->eos_id, -1, top, &c->eos_id) ||
        hparam(f, "tokenizer.ggml.padding_token_id", 0, none, -1, top, &c->pad_id))
        return -1;
    rf_config_known_special_ids(c);
    int mask = find_token(f, "<|mask|>"), bot = find_token(f, "<|beginoftext|>");
    if (mask >= 0) c->mask_id = mask;
    if (bot >= 0) c->bot_id = bot;
    if (hparam(f, "refusion.mask_token_id", 0, c->mask_id, -1, top, &c->mask_id) ||
        hparam(f, "refusion.bot_token_id", 0, c->bot_id, -1, top, &c->bot_id))
        return -1;
    return rf_config_check(c, f->path);
}

int rf_model_load_gguf(rf_model *m, const char *path) {
    memset(m, 0, sizeof *m);
    m->dir = rf_strdup(path);
    m->gguf = rf_calloc(1, sizeof(rf_gguf_file));
    if (rf_gguf_open(m->gguf, path)) {
        free(m->gguf);
        m->gguf = NULL;
        rf_model_free(m);
        return -1;
    }
    const rf_gguf_file *f = m->gguf;
    rf_tspec *ts = NULL;
    int rc = -1;
    if (config_from_gguf(&m->cfg, f)) goto done;
    int n = rf_model_tensor_list(m, &ts);
    /* every tensor of the file must be one we expect (nothing is silently
     * ignored: an extra tensor means a model this engine would run wrong) */
#define gname(i) (ts[i].desc->gguf)
    for (int j = 0; j < f->n_tensors; j++) {
        int i = 0;
        while (i < n && strcmp(gname(i), f->tensors[j].name)) i++;
        if (i == n) {
            rf_set_error("%s: unexpected tensor '%s' (not part of a qwen3 model of this shape)", path,
                         f->tensors[j].name);
            goto done;
        }
    }
    float *vdst = rf_model_norm_block(m, ts, n);
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        const rf_tspec *s = &ts[i];
        const rf_gguf_tensor *t = rf_gguf_find_tensor(f, gname(i));
        bad = 1;
        if (!t) {
            rf_set_error("%s: missing tensor '%s'", path, gname(i));
            break;
        }
        /* ggml order: a [rows, cols] matrix is ne = [cols, rows] */
        int ok = s->cols ? t->n_dims == 2 && t->ne[0] == s->cols && t->ne[1] == s->rows
                         : t->n_dims == 1 && t->ne[0] == s->rows;
        if (!ok) {
            char got[96];
            int len = snprintf(got, sizeof got, "[");
            for (int d = 0; d < t->n_dims; d++)
                len += snprintf(got + len, sizeof got - (size_t)len, "%s%lld", d ? ", " : "",
                                (long long)t->ne[d]);
            snprintf(got + len, sizeof got - (size_t)len, "]");
            if (s->cols)
                rf_set_error("%s: tensor '%s': ne %s does not match the hyper-parameters (expected "
                             "[%d, %d])", path, gname(i), got, s->cols, s->rows);
            else
                rf_set_error("%s: tensor '%s': ne %s does not match the hyper-parameters (expected "
                             "[%d])", path, gname(i), got, s->rows);
            break;
        }
        if (s->mat) {
            *s->mat = (rf_mat){t->dtype, t->data, s->rows, s->cols, NULL};
            bad = 0;
            continue;
        }
        if (rf_dtype_is_quant(t->dtype)) {
            rf_set_error("%s: tensor '%s': a norm vector in %s is not supported (F32, F16 or BF16)",
                         path, gname(i), rf_dtype_name(t->dtype));
            break;
        }
        rf_model_bind_norm(s, t->dtype, t->data, &vdst);
        bad = 0;
    }
#undef gname
    if (bad) goto done;
    if (m->cfg.tie_embeddings) m->lm_head = m->embed;
    /* the storage type of the bulk of the weights (a Q4_0 file keeps its
     * embeddings in Q8_0) */
    m->cfg.dtype = m->layers[0].up.dtype;
    rc = rf_model_pack(m);
done:
    free(ts);
    if (rc) rf_model_free(m);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

/* One tensor being written: a matrix of the model, or an f32 norm vector. */
typedef struct {
    rf_mat src;      /* for vectors: {RF_F32, data, 1, len} */
    rf_dtype dst;
} gguf_fill;

/* row r of src as f32 */
static void src_row(const rf_mat *W, int64_t r, float *out) {
    size_t rb = rf_dtype_row_bytes(W->dtype, W->cols);
    rf_dequantize_row(W->dtype, (const uint8_t *)W->data + (size_t)r * rb, out, W->cols);
}

static void fill_rows(void *vctx, int64_t row0, int64_t n_rows, void *dst) {
    const gguf_fill *g = vctx;
    int cols = g->src.cols;
    size_t out_rb = rf_dtype_row_bytes(g->dst, cols);
    float *row = rf_malloc((size_t)cols * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *o = (uint8_t *)dst + (size_t)r * out_rb;
        if (g->src.dtype == g->dst) { /* same type: the bytes as they are */
            memcpy(o, (const uint8_t *)g->src.data + (size_t)(row0 + r) * out_rb, out_rb);
            continue;
        }
        src_row(&g->src, row0 + r, row);
        switch (g->dst) {
        case RF_F32: memcpy(o, row, (size_t)cols * 4); break;
        case RF_BF16:
            for (int i = 0; i < cols; i++) ((uint16_t *)o)[i] = rf_f32_to_bf16(row[i]);
            break;
        case RF_F16:
            for (int i = 0; i < cols; i++) ((uint16_t *)o)[i] = rf_f32_to_f16(row[i]);
            break;
        default: rf_quantize_row(g->dst, row, o, cols); break; /* rf_ftype_tensor_type: never Q8_K */
        }
    }
    free(row);
}

void rf_model_gguf_add(const rf_model *m, rf_gguf_writer *w, rf_dtype dtype, const char *name) {
    rf_ftype ft = RF_FTYPE_F32;
    rf_ftype_of_dtype(dtype, &ft);
    rf_model_gguf_add_ftype(m, w, ft, name);
}

void rf_model_gguf_add_ftype(const rf_model *m, rf_gguf_writer *w, rf_ftype ft, const char *name) {
    const rf_config *c = &m->cfg;
    rf_gguf_w_str(w, "general.architecture", "qwen3");
    rf_gguf_w_str(w, "general.name", name);
    rf_gguf_w_u32(w, "general.file_type", (uint32_t)ft);
    rf_gguf_w_u32(w, "general.quantization_version", 2);
    rf_gguf_w_u32(w, "qwen3.block_count", (uint32_t)c->n_layers);
    rf_gguf_w_u32(w, "qwen3.context_length", (uint32_t)c->max_pos);
    rf_gguf_w_u32(w, "qwen3.embedding_length", (uint32_t)c->hidden_size);
    rf_gguf_w_u32(w, "qwen3.feed_forward_length", (uint32_t)c->intermediate_size);
    rf_gguf_w_u32(w, "qwen3.attention.head_count", (uint32_t)c->n_heads);
    rf_gguf_w_u32(w, "qwen3.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    rf_gguf_w_f32(w, "qwen3.rope.freq_base", c->rope_theta);
    rf_gguf_w_f32(w, "qwen3.attention.layer_norm_rms_epsilon", c->rms_eps);
    rf_gguf_w_u32(w, "qwen3.attention.key_length", (uint32_t)c->head_dim);
    rf_gguf_w_u32(w, "qwen3.attention.value_length", (uint32_t)c->head_dim);
    if (c->bos_id >= 0) rf_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_id);
    if (c->eos_id >= 0) rf_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_id);
    if (c->pad_id >= 0) rf_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)c->pad_id);
    /* ReFusion's tokens; the loader falls back to the spellings otherwise */
    rf_gguf_w_u32(w, "refusion.mask_token_id", (uint32_t)c->mask_id);
    if (c->bot_id >= 0) rf_gguf_w_u32(w, "refusion.bot_token_id", (uint32_t)c->bot_id);

    rf_model tmp = *m; /* tensor_list wants a mutable model; it only reads cfg/layers */
    rf_tspec *ts;
    int n = rf_model_tensor_list(&tmp, &ts);
    gguf_fill *fills = rf_calloc((size_t)n, sizeof *fills);
    for (int i = 0; i < n; i++) {
        const char *gname = ts[i].desc->gguf;
        gguf_fill *g = &fills[i];
        if (ts[i].mat) {
            g->src = *ts[i].mat;
            const rf_ftype_tensor ti = {gname, ts[i].desc->layer, c->n_layers, ts[i].cols, c->tie_embeddings,
                                        c->n_heads / c->n_kv_heads};
            g->dst = rf_ftype_tensor_type(ft, &ti);
            int64_t ne[2] = {ts[i].cols, ts[i].rows};
            rf_gguf_w_tensor(w, gname, g->dst, 2, ne, fill_rows, g);
        } else {
            g->src = (rf_mat){RF_F32, *ts[i].vec, 1, ts[i].rows, NULL};
            g->dst = RF_F32;
            int64_t ne[1] = {ts[i].rows};
            rf_gguf_w_tensor(w, gname, RF_F32, 1, ne, fill_rows, g);
        }
    }
    free(ts);
    rf_gguf_w_own(w, fills); /* freed when w is finished */
}
