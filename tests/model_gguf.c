/* model_gguf.c - a model through GGUF and back:
 *  - safetensors -> GGUF in the same dtype (bf16, f32; tied and untied):
 *    the config (every field, ReFusion's mask / begin ids included) and
 *    every weight come back bit for bit, and the logits are identical;
 *  - GGUF f16 from a bf16 model: every weight is the f16 rounding;
 *  - GGUF Q8_0 / Q4_0: each layer matrix holds exactly the bytes that
 *    rf_model_quantize (the in-memory quantiser) makes of the same weights;
 *    the output matrix of a Q4_0 file is Q8_0; the file runs;
 *  - a file patched to another architecture, a wrong hyper-parameter or an
 *    unknown tensor is refused with one line naming file and problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/quant.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

static char g_dir[256];

static int write_gguf(const rf_model *m, rf_dtype dt, const char *path) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_model_gguf_add(m, w, dt, "test");
    return rf_gguf_writer_finish(w, path);
}

static size_t mat_bytes(const rf_mat *a) { return rf_dtype_row_bytes(a->dtype, a->cols) * (size_t)a->rows; }

/* every matrix and vector of a and b: same dtype, shape and bytes */
static int same_weights(rf_model *a, rf_model *b, const char *what) {
    rf_tspec *ta, *tb;
    int n = rf_model_tensor_list(a, &ta), nb = rf_model_tensor_list(b, &tb), bad = 0;
    CHECK(n == nb, "%s: tensor count", what);
    for (int i = 0; i < n && i < nb; i++) {
        if (ta[i].mat) {
            const rf_mat *x = ta[i].mat, *y = tb[i].mat;
            int ok = x->dtype == y->dtype && x->rows == y->rows && x->cols == y->cols &&
                     !memcmp(x->data, y->data, mat_bytes(x));
            CHECK(ok, "%s: %s differs", what, ta[i].name);
            bad += !ok;
        } else {
            int ok = !memcmp(*ta[i].vec, *tb[i].vec, (size_t)ta[i].rows * sizeof(float));
            CHECK(ok, "%s: %s differs", what, ta[i].name);
            bad += !ok;
        }
    }
    free(ta);
    free(tb);
    return bad == 0;
}

static void logits_of(const rf_model *m, float *out, int n) {
    int tok[8] = {1, 5, 9, 2, 7, 3, 0, 4}, pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(rf_forward_reference(m, n, tok, pos, 0, out) == 0, "reference forward: %s", rf_last_error());
}

static void roundtrip(const char *name, int tied, rf_dtype src_dt) {
    rf_config c;
    rf_config_preset(&c, "tiny");
    c.tie_embeddings = tied;
    /* ReFusion's tokens and the other ids at unusual places: they must survive */
    c.mask_id = 3, c.bot_id = 5, c.eos_id = 7, c.bos_id = -1, c.pad_id = 11;
    c.max_pos = 1234, c.rope_theta = 5e5f, c.rms_eps = 3e-6f;
    char dir[300], gg[300];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    snprintf(gg, sizeof gg, "%s/%s.gguf", g_dir, name);
    CHECK(rf_model_write_random(&c, dir, src_dt, 0, 0.3f, 17) == 0, "write_random: %s", rf_last_error());
    rf_model a, b;
    CHECK(rf_model_load(&a, dir) == 0, "load %s: %s", dir, rf_last_error());
    CHECK(write_gguf(&a, src_dt, gg) == 0, "write gguf: %s", rf_last_error());
    int rc = rf_model_load(&b, gg); /* a file path: the GGUF loader */
    CHECK(rc == 0 && b.gguf != NULL, "load %s: %s", gg, rf_last_error());
    if (rc) return;
    const rf_config *x = &a.cfg, *y = &b.cfg;
    CHECK(x->hidden_size == y->hidden_size && x->intermediate_size == y->intermediate_size &&
              x->n_layers == y->n_layers && x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads &&
              x->head_dim == y->head_dim && x->vocab_size == y->vocab_size && x->max_pos == y->max_pos &&
              x->rms_eps == y->rms_eps && x->rope_theta == y->rope_theta &&
              x->tie_embeddings == y->tie_embeddings && x->dtype == y->dtype,
          "%s: shape hyper-parameters differ", name);
    CHECK(y->mask_id == 3 && y->bot_id == 5 && y->eos_id == 7 && y->bos_id == -1 && y->pad_id == 11,
          "%s: token ids mask %d bot %d eos %d bos %d pad %d", name, y->mask_id, y->bot_id, y->eos_id,
          y->bos_id, y->pad_id);
    CHECK(same_weights(&a, &b, name), "%s: weights", name);
    CHECK(tied ? b.lm_head.data == b.embed.data : b.lm_head.data != b.embed.data, "%s: lm head tying", name);
    int V = c.vocab_size, n = 6;
    float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)n * V * sizeof(float));
    logits_of(&a, la, n);
    logits_of(&b, lb, n);
    CHECK(!memcmp(la, lb, (size_t)n * V * sizeof(float)), "%s: logits are not identical", name);

    /* f16 from the same weights: each weight is its f16 rounding */
    snprintf(gg, sizeof gg, "%s/%s-f16.gguf", g_dir, name);
    CHECK(write_gguf(&a, RF_F16, gg) == 0, "write f16: %s", rf_last_error());
    rf_model h;
    if (rf_model_load(&h, gg) == 0) {
        int bad = 0;
        for (int l = 0; l < c.n_layers; l++) {
            const rf_mat *s = &a.layers[l].up, *d = &h.layers[l].up;
            for (int i = 0; i < s->rows * s->cols; i++) {
                float v = src_dt == RF_BF16 ? rf_bf16_to_f32(((const uint16_t *)s->data)[i]) : ((const float *)s->data)[i];
                bad += d->dtype != RF_F16 || ((const uint16_t *)d->data)[i] != rf_f32_to_f16(v);
            }
        }
        CHECK(bad == 0, "%s: %d f16 weights are not the rounding of the source", name, bad);
        rf_model_free(&h);
    } else CHECK(0, "load f16: %s", rf_last_error());

    /* Q8_0 / Q4_0: the layer matrices are what rf_model_quantize makes */
    rf_dtype qs[2] = {RF_Q8_0, RF_Q4_0};
    for (int k = 0; k < 2; k++) {
        snprintf(gg, sizeof gg, "%s/%s-%s.gguf", g_dir, name, rf_dtype_name(qs[k]));
        CHECK(write_gguf(&a, qs[k], gg) == 0, "write %s: %s", rf_dtype_name(qs[k]), rf_last_error());
        rf_model q, ref;
        if (rf_model_load(&q, gg)) {
            CHECK(0, "load %s: %s", gg, rf_last_error());
            continue;
        }
        rf_model_load(&ref, dir);
        CHECK(rf_model_quantize(&ref, qs[k]) == 0, "rf_model_quantize: %s", rf_last_error());
        int bad = 0;
        for (int l = 0; l < c.n_layers; l++) {
            const rf_layer *L = &q.layers[l], *R = &ref.layers[l];
            const rf_mat *ml[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
            const rf_mat *mr[7] = {&R->q, &R->k, &R->v, &R->o, &R->gate, &R->up, &R->down};
            for (int j = 0; j < 7; j++)
                bad += ml[j]->dtype != qs[k] || mr[j]->dtype != qs[k] ||
                       memcmp(ml[j]->data, mr[j]->data, mat_bytes(mr[j]));
        }
        CHECK(bad == 0, "%s %s: %d layer matrices differ from rf_model_quantize's", name,
              rf_dtype_name(qs[k]), bad);
        rf_dtype want_out = qs[k] == RF_Q4_0 ? RF_Q8_0 : qs[k];
        CHECK(q.lm_head.dtype == want_out, "%s %s: output matrix is %s", name, rf_dtype_name(qs[k]),
              rf_dtype_name(q.lm_head.dtype));
        /* (how close Q8_0 / Q4_0 logits come to bf16 is kernels_quant's and
         * model_quantize's business; here: the file runs) */
        float *lq = malloc((size_t)n * V * sizeof(float));
        logits_of(&q, lq, n);
        int finite = 1;
        for (int i = 0; i < n * V; i++) finite &= isfinite(lq[i]);
        CHECK(finite, "%s %s: logits not finite", name, rf_dtype_name(qs[k]));
        free(lq);
        rf_model_free(&q);
        rf_model_free(&ref);
    }
    free(la);
    free(lb);
    rf_model_free(&a);
    rf_model_free(&b);
}

/* patch the first occurrence of `from` in a copy of src to `to` (same length) */
static void patched(const char *src, const char *dst, const void *from, const void *to, size_t n) {
    size_t len;
    char *buf = rf_read_file(src, &len);
    char *at = memmem(buf, len, from, n);
    CHECK(at != NULL, "patch target not found");
    if (at) memcpy(at, to, n);
    FILE *f = fopen(dst, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
}

static void expect_refused(const char *path, const char *needle) {
    rf_model m;
    rf_set_error("%s", "");
    int rc = rf_model_load(&m, path);
    CHECK(rc == -1, "%s: should be refused", needle);
    if (rc == 0) rf_model_free(&m);
    const char *e = rf_last_error();
    CHECK(strstr(e, path) && strstr(e, needle) && !strchr(e, '\n'), "want one line with '%s': %s", needle, e);
}

static void refusals(void) {
    char src[300], bad[300];
    snprintf(src, sizeof src, "%s/tied-bf16.gguf", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_dir);
    patched(src, bad, "\x05\0\0\0\0\0\0\0qwen3", "\x05\0\0\0\0\0\0\0llama", 13);
    expect_refused(bad, "architecture 'llama' is not supported");
    /* feed_forward_length 128 -> 160: the ffn tensors no longer match */
    const char key[] = "qwen3.feed_forward_length";
    char from[sizeof key - 1 + 8], to[sizeof from];
    memcpy(from, key, sizeof key - 1);
    memcpy(to, key, sizeof key - 1);
    uint32_t t = RF_GGUF_UINT32, v0 = 128, v1 = 160;
    memcpy(from + sizeof key - 1, &t, 4), memcpy(from + sizeof key + 3, &v0, 4);
    memcpy(to + sizeof key - 1, &t, 4), memcpy(to + sizeof key + 3, &v1, 4);
    patched(src, bad, from, to, sizeof from);
    expect_refused(bad, "does not match the hyper-parameters");
    patched(src, bad, "blk.1.ffn_up.weight", "blk.1.ffn_xx.weight", 19);
    expect_refused(bad, "unexpected tensor 'blk.1.ffn_xx.weight'");
    patched(src, bad, "qwen3.block_count", "qwen3.block_cnt__", 17);
    expect_refused(bad, "missing required key 'qwen3.block_count'");
    /* the refusion.* ids are checked against the vocabulary */
    const char mk[] = "refusion.mask_token_id";
    char f2[sizeof mk - 1 + 8], t2[sizeof f2];
    uint32_t m0 = 3, m1 = 100000;
    memcpy(f2, mk, sizeof mk - 1), memcpy(t2, mk, sizeof mk - 1);
    memcpy(f2 + sizeof mk - 1, &t, 4), memcpy(f2 + sizeof mk + 3, &m0, 4);
    memcpy(t2 + sizeof mk - 1, &t, 4), memcpy(t2 + sizeof mk + 3, &m1, 4);
    patched(src, bad, f2, t2, sizeof f2);
    expect_refused(bad, "outside the vocabulary");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_model_gguf.%d", (int)getpid());
    rf_mkdir_p(g_dir);
    roundtrip("tied-bf16", 1, RF_BF16);
    roundtrip("untied-f32", 0, RF_F32);
    refusals();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_summary("model_gguf");
}
