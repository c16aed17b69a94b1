/* load.c - open a Hugging Face Qwen3 / ReFusion checkpoint directory.
 *
 * config.json gives the shapes; the weights come from model.safetensors or
 * from the shards named in model.safetensors.index.json. Matrices stay in the
 * mmap (rf_mat points into it, any of F32/F16/BF16); the small RMSNorm vectors
 * are converted to f32 once, into a single heap block (m->owned), because
 * every token reads them. Loading is therefore a header parse plus a few KB
 * of copies, whatever the model size. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "model/tensors.h"
#include "model/tune.h"
#include "util/util.h"

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void shape_str(char *buf, size_t cap, const rf_tensor *t) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                (long long)t->shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* Check one found tensor against its spec and hook it into the model. The
 * norm vectors are converted to f32 at *vec_dst (advanced past them). */
static int bind_tensor(const rf_tspec *s, const rf_tensor *t, const char *file, float **vec_dst) {
    int ok = s->cols ? (t->ndim == 2 && t->shape[0] == s->rows && t->shape[1] == s->cols)
                     : (t->ndim == 1 && t->shape[0] == s->rows);
    if (!ok) {
        char got[96];
        shape_str(got, sizeof got, t);
        if (s->cols)
            rf_set_error("%s: tensor '%s': shape %s does not match the config (expected [%d, %d])",
                         file, s->name, got, s->rows, s->cols);
        else
            rf_set_error("%s: tensor '%s': shape %s does not match the config (expected [%d])",
                         file, s->name, got, s->rows);
        return -1;
    }
    if (!s->vec) {
        if (s->mat) *s->mat = (rf_mat){t->dtype, t->data, s->rows, s->cols, NULL};
        return 0;
    }
    rf_model_bind_norm(s, t->dtype, t->data, vec_dst);
    return 0;
}

/* error messages are one line: names with control characters are refused */
static int has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

/* Names of the shard files, in first-seen order, from the index's weight_map;
 * for each expected tensor, which shard holds it (-1: not listed). */
static int read_index(const char *path, const rf_tspec *ts, int n, char ***files_out,
                      int *n_files_out, int *where) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        for (char *c = jerr.text; *c; c++) /* one-line message */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        rf_set_error("%s: invalid JSON: %s (line %d)", path, jerr.text, jerr.line);
        return -1;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        rf_set_error("%s: no \"weight_map\" object", path);
        json_decref(root);
        return -1;
    }
    char **files = NULL;
    int nf = 0, rc = 0;
    for (int i = 0; i < n; i++) where[i] = -1;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        const char *f = json_string_value(val);
        if (has_control(key) || (f && has_control(f))) {
            rf_set_error("%s: weight_map holds names with control characters", path);
            rc = -1;
            break;
        }
        /* shard names are plain file names beside the index, nothing else */
        if (!f || !*f || strchr(f, '/') || !strcmp(f, "..") || !strcmp(f, ".")) {
            rf_set_error("%s: weight_map entry '%s' is not a plain file name", path, key);
            rc = -1;
            break;
        }
        int k = 0;
        while (k < nf && strcmp(files[k], f)) k++;
        if (k == nf) {
            files = realloc(files, (size_t)(nf + 1) * sizeof(char *));
            if (!files) rf_die("out of memory");
            files[nf++] = rf_strdup(f);
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(ts[i].name, key)) where[i] = k;
    }
    json_decref(root);
    *files_out = files;
    *n_files_out = nf;
    return rc;
}

int rf_model_load(rf_model *m, const char *dir) {
    struct stat st;
    rf_tune_cache_apply(); /* the kernel choices measured on this CPU, if any */
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) return rf_model_load_gguf(m, dir);
    memset(m, 0, sizeof *m);
    m->dir = rf_strdup(dir);
    char *cpath = rf_path_join(dir, "config.json");
    int rc = rf_config_load(&m->cfg, cpath);
    free(cpath);
    if (rc) {
        rf_model_free(m);
        return -1;
    }
    rf_tspec *ts;
    int n = rf_model_tensor_list(m, &ts);
    int *where = rf_calloc((size_t)n, sizeof(int));
    char **names = NULL;
    int n_names = 0;
    rc = -1;

    char *single = rf_path_join(dir, "model.safetensors");
    char *index = rf_path_join(dir, "model.safetensors.index.json");
    if (file_exists(single)) { /* as transformers: the single file wins */
        names = rf_malloc(sizeof(char *));
        names[n_names++] = rf_strdup("model.safetensors");
        for (int i = 0; i < n; i++) where[i] = 0;
    } else if (file_exists(index)) {
        if (read_index(index, ts, n, &names, &n_names, where)) goto done;
    } else {
        rf_set_error("%s: no model.safetensors or model.safetensors.index.json", dir);
        goto done;
    }

    m->files = rf_calloc((size_t)(n_names ? n_names : 1), sizeof(rf_st_file));
    for (int k = 0; k < n_names; k++) {
        char *p = rf_path_join(dir, names[k]);
        int r = rf_st_open(&m->files[k], p);
        free(p);
        if (r) goto done;
        m->n_files = k + 1;
    }

    /* every tensor in every file must be one we expect, in the file the index
     * names (a tied lm_head.weight is tolerated and ignored, as in transformers) */
    for (int k = 0; k < m->n_files; k++) {
        const rf_st_file *f = &m->files[k];
        for (int j = 0; j < f->n_tensors; j++) {
            const char *tn = f->tensors[j].name;
            int i = 0;
            while (i < n && strcmp(ts[i].name, tn)) i++;
            if (i == n && m->cfg.tie_embeddings && !strcmp(tn, "lm_head.weight")) {
                continue;
            }
            if (i == n) {
                rf_set_error("%s: unexpected tensor '%s' (not part of a Qwen3 model with this config)",
                             f->path, tn);
                goto done;
            }
            if (where[i] != k) {
                rf_set_error("%s: tensor '%s' is here but the index maps it to %s", f->path, tn,
                             where[i] >= 0 ? names[where[i]] : "no file");
                goto done;
            }
        }
    }

    float *vdst = rf_model_norm_block(m, ts, n); /* one f32 block for all norm vectors */
    for (int i = 0; i < n; i++) {
        const char *where_name = where[i] >= 0 ? m->files[where[i]].path : index;
        const rf_tensor *t = where[i] >= 0 ? rf_st_find(&m->files[where[i]], ts[i].name) : NULL;
        if (!t) {
            rf_set_error("%s: missing tensor '%s'", where_name, ts[i].name);
            goto done;
        }
        if (bind_tensor(&ts[i], t, m->files[where[i]].path, &vdst)) goto done;
    }
    if (m->cfg.tie_embeddings) m->lm_head = m->embed;
    /* the weights' real storage type, whatever config.json's torch_dtype said */
    m->cfg.dtype = m->embed.dtype;
    rc = rf_model_pack(m);
done:
    for (int k = 0; k < n_names; k++) free(names[k]);
    free(names);
    free(single);
    free(index);
    free(where);
    free(ts);
    if (rc) rf_model_free(m);
    return rc;
}

void rf_model_free(rf_model *m) {
    for (int k = 0; k < m->n_files; k++) rf_st_close(&m->files[k]);
    free(m->files);
    if (m->gguf) rf_gguf_close(m->gguf);
    free(m->gguf);
    free(m->layers);
    free(m->owned);
    free(m->packed_mem);
    free(m->dir);
    memset(m, 0, sizeof *m);
}
