/* checkpoint.c - training checkpoints in the Hugging Face layout the engine
 * loads (config.json, model.safetensors in f32, tokenizer.json and
 * tokenizer_config.json), plus the trainer state beside them (optimizer.bin).
 *
 * Every file is written atomically (temp + fsync + rename). model.safetensors
 * is written before optimizer.bin, and optimizer.bin records a hash of the
 * weights it belongs to: a save interrupted between the two leaves a pair that
 * --resume detects and refuses instead of silently mixing states. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "train/train.h"

/* ---- weights in ---------------------------------------------------------------- */

static void copy_mat(float *dst, const rf_mat *src) {
    for (int r = 0; r < src->rows; r++) rf_mat_row_f32(dst + (size_t)r * src->cols, src, r);
}

int rf_tmodel_load_weights(rf_tmodel *m, const char *dir) {
    rf_model em;
    if (rf_model_load(&em, dir)) return -1; /* the engine's own checks */
    const rf_config *a = &em.cfg, *b = &m->cfg;
    if (a->hidden_size != b->hidden_size || a->n_layers != b->n_layers ||
        a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads || a->head_dim != b->head_dim ||
        a->intermediate_size != b->intermediate_size || a->vocab_size != b->vocab_size ||
        a->tie_embeddings != b->tie_embeddings) {
        rf_model_free(&em);
        return rf_set_error("%s: checkpoint shape differs from the training config", dir), -1;
    }
    int d = b->hidden_size, hd = b->head_dim;
    copy_mat(m->w.embed, &em.embed);
    for (int l = 0; l < b->n_layers; l++) {
        const rf_layer *s = &em.layers[l];
        rf_tlayer *t = &m->w.layers[l];
        memcpy(t->attn_norm, s->attn_norm, (size_t)d * sizeof(float));
        copy_mat(t->q, &s->q);
        copy_mat(t->k, &s->k);
        copy_mat(t->v, &s->v);
        copy_mat(t->o, &s->o);
        memcpy(t->q_norm, s->q_norm, (size_t)hd * sizeof(float));
        memcpy(t->k_norm, s->k_norm, (size_t)hd * sizeof(float));
        memcpy(t->ffn_norm, s->ffn_norm, (size_t)d * sizeof(float));
        copy_mat(t->gate, &s->gate);
        copy_mat(t->up, &s->up);
        copy_mat(t->down, &s->down);
    }
    memcpy(m->w.final_norm, em.final_norm, (size_t)d * sizeof(float));
    if (!b->tie_embeddings) copy_mat(m->w.lm_head, &em.lm_head);
    rf_model_free(&em);
    return 0;
}

/* ---- weights out --------------------------------------------------------------- */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Copy src to dst atomically if src exists; 0 if absent. */
static int copy_if_exists(const char *src, const char *dst) {
    if (access(src, R_OK) != 0) return 0;
    size_t n;
    char *buf = rf_read_file(src, &n);
    if (!buf) return -1;
    int rc = rf_write_file_atomic(dst, buf, n);
    free(buf);
    return rc;
}

int rf_tmodel_save(const rf_tmodel *m, const char *dir, const char *tok_src) {
    if (rf_mkdir_p(dir)) return -1;
    int rc = 0;
    char *p = rf_path_join(dir, "model.safetensors");
    rf_st_writer *w = rf_st_writer_new();
    for (int t = 0; t < m->n_tensors; t++) {
        const rf_ptensor *pt = &m->tensors[t];
        rf_st_writer_add(w, pt->name, RF_F32, pt->ndim, pt->shape, m->params + pt->offset);
    }
    rc = rf_st_writer_finish(w, p);
    free(p);
    if (rc) return -1;
    rf_config c = m->cfg;
    c.dtype = RF_F32; /* the weights as trained: resume continues bit for bit */
    p = rf_path_join(dir, "config.json");
    rc = rf_config_save(&c, p);
    free(p);
    if (rc || !tok_src) return rc;
    /* tokenizer files: from a directory, or a tokenizer.json plus its
     * directory's tokenizer_config.json */
    char *sdir = is_dir(tok_src) ? rf_strdup(tok_src) : NULL;
    if (!sdir) {
        sdir = rf_strdup(tok_src);
        char *slash = strrchr(sdir, '/');
        if (slash) *slash = 0;
        else strcpy(sdir, ".");
    }
    char *same_a = realpath(sdir, NULL), *same_b = realpath(dir, NULL);
    int same = same_a && same_b && !strcmp(same_a, same_b);
    free(same_a), free(same_b);
    if (!same) {
        const char *names[] = {"tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; i < 2 && !rc; i++) {
            char *src = i == 0 && !is_dir(tok_src) ? rf_strdup(tok_src) : rf_path_join(sdir, names[i]);
            char *dst = rf_path_join(dir, names[i]);
            rc = copy_if_exists(src, dst);
            free(src), free(dst);
        }
    }
    free(sdir);
    return rc;
}

/* ---- trainer state ------------------------------------------------------------- */

#define OPT_MAGIC "RFOPT001"

typedef struct {
    char magic[8];
    uint64_t n_params;
    int64_t step, epoch, cursor;
    uint64_t rng[4];
    double tokens_seen, elapsed;
    uint64_t params_hash;
} opt_header;

uint64_t rf_hash_floats(const float *x, size_t n) {
    /* FNV-1a over 32-bit words: cheap, and any changed bit changes it */
    uint64_t h = 1469598103934665603ull;
    const uint32_t *u = (const uint32_t *)x;
    for (size_t i = 0; i < n; i++) {
        h ^= u[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int rf_tstate_save(const char *dir, const rf_tstate *s, const rf_adamw *o) {
    char *path = rf_path_join(dir, "optimizer.bin");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rf_set_error("%s: cannot create: %s", tmp, strerror(errno));
        free(path);
        return -1;
    }
    opt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, OPT_MAGIC, 8);
    h.n_params = o->n;
    h.step = s->step;
    h.epoch = s->epoch;
    h.cursor = s->cursor;
    memcpy(h.rng, s->rng.s, sizeof h.rng);
    h.tokens_seen = s->tokens_seen;
    h.elapsed = s->elapsed;
    h.params_hash = s->params_hash;
    int rc = write_all(f, &h, sizeof h) || write_all(f, o->m, o->n * sizeof(float)) ||
             write_all(f, o->v, o->n * sizeof(float)) || fflush(f) || fsync(fileno(f));
    if (fclose(f)) rc = -1;
    if (rc || rename(tmp, path)) {
        rf_set_error("%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        free(path);
        return -1;
    }
    free(path);
    return 0;
}

int rf_tstate_load(const char *dir, rf_tstate *s, rf_adamw *o) {
    char *path = rf_path_join(dir, "optimizer.bin");
    FILE *f = fopen(path, "rb");
    int rc = -1;
    opt_header h;
    if (!f) {
        rf_set_error("%s: cannot open: %s", path, strerror(errno));
    } else if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, OPT_MAGIC, 8)) {
        rf_set_error("%s: not a refusion optimizer state", path);
    } else if (h.n_params != o->n) {
        rf_set_error("%s: holds %llu parameters, the model has %zu", path,
                     (unsigned long long)h.n_params, o->n);
    } else if (fread(o->m, sizeof(float), o->n, f) != o->n ||
               fread(o->v, sizeof(float), o->n, f) != o->n || fgetc(f) != EOF) {
        rf_set_error("%s: truncated or oversized", path);
    } else {
        memset(s, 0, sizeof *s);
        s->step = h.step;
        s->epoch = h.epoch;
        s->cursor = h.cursor;
        memcpy(s->rng.s, h.rng, sizeof h.rng);
        s->tokens_seen = h.tokens_seen;
        s->elapsed = h.elapsed;
        s->params_hash = h.params_hash;
        o->step = h.step;
        rc = 0;
    }
    if (f) fclose(f);
    free(path);
    return rc;
}
