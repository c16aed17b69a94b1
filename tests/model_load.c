/* model_load.c - checkpoint round trip and rejection of mismatches.
 *
 *  - rf_model_write_random then rf_model_load gives exactly the weights of
 *    rf_model_init_random with the same seed (bf16 and f32, one file and
 *    shards, tied and untied embeddings);
 *  - the tensor shapes on disk are the HF Qwen3 ones, checked against shapes
 *    written out by hand here (not from the shared tensor list);
 *  - the random init is N(0, std^2) and its bf16 version is the rounding of
 *    its f32 version;
 *  - a checkpoint that disagrees with its config (wrong shape, unsupported
 *    dtype, missing tensor, extra tensor, broken index) is refused with a
 *    message naming the tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

static char g_dir[256];

static rf_config test_config(int tied) {
    rf_config c;
    rf_config_preset(&c, "tiny");
    c.head_dim = 24; /* n_heads * head_dim (96) != hidden (64): catches swapped dims */
    c.vocab_size = 300;
    c.mask_id = 299;
    c.bot_id = 298;
    c.tie_embeddings = tied;
    return c;
}

static char *subdir(const char *name) { return rf_path_join(g_dir, name); }

/* every tensor of a and b holds the same bytes */
static int same_weights(rf_model *a, rf_model *b) {
    rf_tspec *ta, *tb;
    int n = rf_model_tensor_list(a, &ta), nb = rf_model_tensor_list(b, &tb), bad = 0;
    if (n != nb) return 0;
    for (int i = 0; i < n; i++) {
        if (ta[i].mat) {
            const rf_mat *x = ta[i].mat, *y = tb[i].mat;
            size_t bytes = (size_t)x->rows * x->cols * rf_dtype_size(x->dtype);
            if (x->dtype != y->dtype || x->rows != y->rows || x->cols != y->cols ||
                memcmp(x->data, y->data, bytes)) {
                fprintf(stderr, "  tensor %s differs\n", ta[i].name);
                bad++;
            }
        } else if (memcmp(*ta[i].vec, *tb[i].vec, (size_t)ta[i].rows * 4)) {
            fprintf(stderr, "  norm %s differs\n", ta[i].name);
            bad++;
        }
    }
    free(ta);
    free(tb);
    return bad == 0;
}

static int count_files(const char *dir, const char *prefix) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^%s' 2>/dev/null", dir, prefix);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
    return n;
}

static void test_round_trip(int tied, rf_dtype dt, size_t shard_bytes) {
    rf_config c = test_config(tied);
    char name[64];
    snprintf(name, sizeof name, "rt_%d_%s_%zu", tied, rf_dtype_name(dt), shard_bytes);
    char *dir = subdir(name);
    CHECK(rf_model_write_random(&c, dir, dt, shard_bytes, 0.02f, 1234) == 0, "%s: write: %s", name,
          rf_last_error());
    rf_model mem, disk;
    rf_model_init_random(&mem, &c, dt, 0.02f, 1234);
    int rc = rf_model_load(&disk, dir);
    CHECK(rc == 0, "%s: load: %s", name, rf_last_error());
    if (rc == 0) {
        CHECK(same_weights(&mem, &disk), "%s: loaded weights differ from init_random", name);
        CHECK(disk.cfg.dtype == dt && disk.cfg.hidden_size == 64 && disk.cfg.head_dim == 24 &&
                  disk.cfg.tie_embeddings == tied && disk.cfg.mask_id == 299,
              "%s: config", name);
        CHECK(tied ? disk.lm_head.data == disk.embed.data : disk.lm_head.data != disk.embed.data,
              "%s: lm_head tying", name);
        int shards = count_files(dir, "model-0");
        CHECK(shard_bytes ? disk.n_files > 1 && shards == disk.n_files : disk.n_files == 1,
              "%s: %d files, %d shards on disk", name, disk.n_files, shards);
        /* shapes against HF Qwen3, written out by hand */
        const struct { const char *n; int64_t r, c; } want[] = {
            {"model.embed_tokens.weight", 300, 64},
            {"model.layers.0.self_attn.q_proj.weight", 96, 64},
            {"model.layers.1.self_attn.k_proj.weight", 48, 64},
            {"model.layers.1.self_attn.v_proj.weight", 48, 64},
            {"model.layers.0.self_attn.o_proj.weight", 64, 96},
            {"model.layers.1.mlp.gate_proj.weight", 128, 64},
            {"model.layers.1.mlp.up_proj.weight", 128, 64},
            {"model.layers.0.mlp.down_proj.weight", 64, 128},
            {"model.layers.0.self_attn.q_norm.weight", 24, 0},
            {"model.layers.1.self_attn.k_norm.weight", 24, 0},
            {"model.layers.1.input_layernorm.weight", 64, 0},
            {"model.layers.0.post_attention_layernorm.weight", 64, 0},
            {"model.norm.weight", 64, 0},
        };
        int found = 0, total = 0;
        for (int k = 0; k < disk.n_files; k++) total += disk.files[k].n_tensors;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            for (int k = 0; k < disk.n_files; k++) {
                const rf_tensor *t = rf_st_find(&disk.files[k], want[i].n);
                if (!t) continue;
                found++;
                int ok = want[i].c ? t->ndim == 2 && t->shape[0] == want[i].r && t->shape[1] == want[i].c
                                   : t->ndim == 1 && t->shape[0] == want[i].r;
                CHECK(ok && t->dtype == dt, "%s: %s shape/dtype", name, want[i].n);
            }
        CHECK(found == (int)(sizeof want / sizeof want[0]), "%s: found %d", name, found);
        CHECK(total == 2 * 11 + 2 + !tied, "%s: %d tensors on disk", name, total);
        CHECK(disk.final_norm[0] == 1.0f && disk.layers[1].k_norm[23] == 1.0f, "%s: norms = 1", name);
        rf_model_free(&disk);
    }
    rf_model_free(&mem);
    free(dir);
}

static void test_init_stats(void) {
    rf_config c = test_config(1);
    rf_model f, b, other;
    rf_model_init_random(&f, &c, RF_F32, 0.05f, 7);
    rf_model_init_random(&b, &c, RF_BF16, 0.05f, 7);
    rf_model_init_random(&other, &c, RF_F32, 0.05f, 8);
    /* embeddings: 300 x 64 = 19200 samples; mean ~ 0 (se 0.00036), std ~ 0.05 (se 0.5%) */
    const float *e = f.embed.data;
    size_t n = (size_t)300 * 64;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += e[i], s2 += (double)e[i] * e[i];
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    CHECK(fabs(mean) < 0.002 && fabs(sd - 0.05) < 0.0015, "init mean %g std %g", mean, sd);
    /* fraction within one sigma: 68.27% for a normal, 57.7% for a uniform */
    size_t in1 = 0;
    for (size_t i = 0; i < n; i++) in1 += fabsf(e[i]) < 0.05f;
    CHECK(fabs((double)in1 / n - 0.6827) < 0.015, "within 1 sigma: %g", (double)in1 / n);
    /* bf16 weights are the f32 ones rounded */
    size_t bad = 0;
    const uint16_t *h = b.layers[1].down.data;
    const float *x = f.layers[1].down.data;
    for (size_t i = 0; i < (size_t)64 * 128; i++) bad += h[i] != rf_f32_to_bf16(x[i]);
    CHECK(bad == 0, "bf16 != round(f32) at %zu places", bad);
    CHECK(memcmp(f.embed.data, other.embed.data, 64 * 4) != 0, "another seed, other weights");
    CHECK(memcmp(f.layers[0].q.data, f.layers[1].q.data, 64 * 4) != 0, "layers differ");
    rf_model_free(&f);
    rf_model_free(&b);
    rf_model_free(&other);
}

/* ---- tampering ---------------------------------------------------------------- */

typedef enum { T_RESHAPE, T_DROP, T_EXTRA } tamper;

/* Rewrite dir/file with one change to tensor `target`. */
static void rewrite(const char *dir, const char *file, tamper how, const char *target) {
    char *p = rf_path_join(dir, file);
    rf_st_file f;
    if (rf_st_open(&f, p)) rf_die("test setup: %s", rf_last_error());
    rf_st_writer *w = rf_st_writer_new();
    for (int i = 0; i < f.n_tensors; i++) {
        const rf_tensor *t = &f.tensors[i];
        int is_target = !strcmp(t->name, target);
        if (is_target && how == T_DROP) continue;
        int64_t shape[RF_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (is_target && how == T_RESHAPE) { /* same bytes, transposed shape */
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
        }
        rf_st_writer_add(w, t->name, t->dtype, t->ndim, shape, t->data);
        if (is_target && how == T_EXTRA) rf_st_writer_add(w, "model.layers.0.self_attn.q_proj.bias",
                                                          t->dtype, 1, shape, t->data);
    }
    if (rf_st_writer_finish(w, p)) rf_die("test setup: %s", rf_last_error());
    rf_st_close(&f);
    free(p);
}

/* Patch the dtype string of one tensor in the header in place (same length). */
static void patch_dtype(const char *path, const char *tensor, const char *from, const char *to) {
    size_t len;
    char *raw = rf_read_file(path, &len);
    char key[128];
    snprintf(key, sizeof key, "\"%s\"", tensor);
    char *at = strstr(raw + 8, key), *d = at ? strstr(at, from) : NULL;
    if (!d) rf_die("test setup: no %s in header", tensor);
    memcpy(d, to, strlen(to));
    FILE *f = fopen(path, "wb");
    fwrite(raw, 1, len, f);
    fclose(f);
    free(raw);
}

static void expect_load_fail(const char *what, const char *dir, const char *n1, const char *n2) {
    rf_model m;
    rf_set_error("%s", "");
    int rc = rf_model_load(&m, dir);
    CHECK(rc == -1, "%s: load should fail", what);
    if (rc == 0) rf_model_free(&m);
    const char *e = rf_last_error();
    CHECK(strstr(e, n1) && (!n2 || strstr(e, n2)), "%s: message should contain '%s' '%s': %s",
          what, n1, n2 ? n2 : "", e);
}

static char *fresh(const char *name, int tied, rf_dtype dt, size_t shard) {
    rf_config c = test_config(tied);
    char *dir = subdir(name);
    if (rf_model_write_random(&c, dir, dt, shard, 0.02f, 5)) rf_die("setup: %s", rf_last_error());
    return dir;
}

static void test_rejections(void) {
    const char *up = "model.layers.1.mlp.up_proj.weight";
    char *d = fresh("shape", 1, RF_BF16, 0);
    rewrite(d, "model.safetensors", T_RESHAPE, up);
    expect_load_fail("wrong shape", d, "'model.layers.1.mlp.up_proj.weight'", "expected [128, 64]");
    free(d);

    d = fresh("dtype", 1, RF_F32, 0);
    char *p = rf_path_join(d, "model.safetensors");
    patch_dtype(p, "model.layers.0.self_attn.k_proj.weight", "F32", "I32");
    expect_load_fail("I32 tensor", d, "'model.layers.0.self_attn.k_proj.weight'", "I32");
    free(p);
    free(d);

    d = fresh("missing", 1, RF_BF16, 0);
    rewrite(d, "model.safetensors", T_DROP, "model.layers.1.self_attn.k_norm.weight");
    expect_load_fail("missing tensor", d, "missing tensor 'model.layers.1.self_attn.k_norm.weight'",
                     NULL);
    free(d);

    d = fresh("extra", 1, RF_BF16, 0);
    rewrite(d, "model.safetensors", T_EXTRA, "model.norm.weight");
    expect_load_fail("extra tensor", d, "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'",
                     NULL);
    free(d);

    /* untied without lm_head: missing; tied with an lm_head present: ignored */
    d = fresh("nolm", 0, RF_BF16, 0);
    rewrite(d, "model.safetensors", T_DROP, "lm_head.weight");
    expect_load_fail("untied, no lm_head", d, "missing tensor 'lm_head.weight'", NULL);
    rf_config c = test_config(1);
    char *cp = rf_path_join(d, "config.json");
    rf_config_save(&c, cp);
    rewrite(d, "model.safetensors", T_DROP, "none");
    rf_model m;
    CHECK(rf_model_load(&m, d) == 0, "tied model loads: %s", rf_last_error());
    rf_model_free(&m);
    free(d);
    d = fresh("tiedlm", 0, RF_BF16, 0);
    free(cp);
    cp = rf_path_join(d, "config.json");
    rf_config_save(&c, cp); /* now tied, but the file still has lm_head.weight */
    CHECK(rf_model_load(&m, d) == 0, "tied with lm_head present loads: %s", rf_last_error());
    if (m.layers) CHECK(m.lm_head.data == m.embed.data, "tied: lm_head is embed");
    rf_model_free(&m);
    /* config disagrees with every tensor: the first mismatch is named */
    c.hidden_size = 32;
    c.head_dim = 8;
    rf_config_save(&c, cp);
    expect_load_fail("config shape", d, "'model.embed_tokens.weight'", "expected [300, 32]");
    free(cp);
    free(d);

    /* sharded: an index pointing at a missing shard, and a tensor in the
     * wrong shard */
    d = fresh("shards", 0, RF_F32, 40000);
    int ns = count_files(d, "model-0");
    CHECK(ns >= 3, "setup: %d shards", ns);
    char n2[64], n3[64];
    snprintf(n2, sizeof n2, "model-00002-of-%05d.safetensors", ns);
    snprintf(n3, sizeof n3, "model-00003-of-%05d.safetensors", ns);
    char *s2 = rf_path_join(d, n2), *s3 = rf_path_join(d, n3);
    char *tmp = rf_path_join(d, "swap");
    CHECK(!rename(s2, tmp) && !rename(s3, s2) && !rename(tmp, s3), "setup: swap shards");
    free(tmp);
    expect_load_fail("swapped shards", d, "the index maps it to", NULL);
    unlink(s3);
    expect_load_fail("missing shard", d, n3, "cannot open");
    free(s2);
    free(s3);
    char *ip = rf_path_join(d, "model.safetensors.index.json");
    FILE *f = fopen(ip, "w");
    fputs("{\"weight_map\": {\"model.norm.weight\": \"../../etc/passwd\"}}", f);
    fclose(f);
    expect_load_fail("index path", d, "not a plain file name", NULL);
    unlink(ip);
    expect_load_fail("no weights", d, "no model.safetensors", NULL);
    free(ip);
    free(d);

    d = subdir("nothing");
    rf_mkdir_p(d);
    expect_load_fail("no config", d, "config.json", NULL);
    free(d);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_test_model_load.%d", (int)getpid());
    rf_mkdir_p(g_dir);
    for (int tied = 0; tied < 2; tied++) {
        test_round_trip(tied, RF_BF16, 0);
        test_round_trip(tied, RF_F32, 0);
        test_round_trip(tied, RF_BF16, 30000);
        test_round_trip(tied, RF_F32, 50000);
    }
    test_round_trip(0, RF_F16, 0);
    test_init_stats();
    test_rejections();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return check_summary("model_load");
}
