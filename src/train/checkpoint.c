/* checkpoint.c - training checkpoints in the Hugging Face layout the engine
 * loads (config.json, model.safetensors in f32, tokenizer.json and
 * tokenizer_config.json), plus the trainer state beside them (optimizer.bin).
 *
 * A checkpoint is saved as a set, so that a kill or a full disk at any moment
 * leaves either the previous checkpoint or the new one, never a mix:
 *   1. every new file is written complete as NAME.next (temp + fsync + rename);
 *   2. the journal checkpoint.commit, listing them, is written atomically:
 *      the commit point;
 *   3. each NAME.next is renamed over NAME, then the journal is removed.
 * rf_ckpt_recover, run before a training job reads or writes its directory,
 * finishes step 3 when a journal is there (roll forward) and otherwise
 * deletes the leftovers of a save that never reached its commit point
 * (NAME.next, NAME.tmp.PID). optimizer.bin also records a hash of the weights
 * it belongs to, which --resume checks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "model/tensors.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"
#include "util/util.h"

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
    /* both sides come from the same tensor table: entry i is the same tensor */
    rf_tspec *ts;
    int n = rf_model_tensor_list(&em, &ts);
    for (int i = 0; i < n; i++) {
        float *dst = m->params + m->tensors[i].offset;
        if (ts[i].mat) copy_mat(dst, ts[i].mat);
        else memcpy(dst, *ts[i].vec, (size_t)ts[i].rows * sizeof(float));
    }
    free(ts);
    rf_model_free(&em);
    return 0;
}

/* ---- saving as a set ------------------------------------------------------------ */

/* The files of a checkpoint set; only these are staged, renamed and cleaned. */
static const char *const SET_FILES[] = {"config.json", "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json", "optimizer.bin"};
#define N_SET_FILES (int)(sizeof SET_FILES / sizeof SET_FILES[0])
#define JOURNAL "checkpoint.commit"
#define JOURNAL_MAGIC "refusion checkpoint set 1\n"

/* A test's kill -9 at this step of a save (rf_faults, util.h;
 * tests/train_ckpt_kill.sh walks it over every step). */
static void kill_point(void) {
    if (rf_faults.checkpoint_step) rf_faults.checkpoint_step();
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* dir/name + suffix, malloc'd */
static char *set_path(const char *dir, const char *name, const char *suffix) {
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *p = rf_malloc(n);
    snprintf(p, n, "%s/%s%s", dir, name, suffix);
    return p;
}

/* Make renames and unlinks in dir durable. */
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return rf_set_error("%s: cannot open: %s", dir, strerror(errno)), -1;
    int rc = fsync(fd);
    close(fd);
    if (rc) return rf_set_error("%s: fsync failed: %s", dir, strerror(errno)), -1;
    return 0;
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

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

/* config.json, model.safetensors and the tokenizer files as NAME<suffix>;
 * staged[i] = 1 for each SET_FILES[i] written. */
static int write_model_files(const rf_tmodel *m, const char *dir, const char *tok_src, const char *suffix,
                             int *staged) {
    char *p = set_path(dir, "model.safetensors", suffix);
    rf_st_writer *w = rf_st_writer_new();
    for (int t = 0; t < m->n_tensors; t++) {
        const rf_ptensor *pt = &m->tensors[t];
        rf_st_writer_add(w, pt->name, RF_F32, pt->ndim, pt->shape, m->params + pt->offset);
    }
    int rc = rf_st_writer_finish(w, p);
    free(p);
    if (rc) return -1;
    staged[1] = 1;
    kill_point();
    rf_config c = m->cfg;
    c.dtype = RF_F32; /* the weights as trained: resume continues bit for bit */
    p = set_path(dir, "config.json", suffix);
    rc = rf_config_save(&c, p);
    free(p);
    if (rc) return -1;
    staged[0] = 1;
    kill_point();
    if (!tok_src) return 0;
    /* the tokenizer's files, found by the tokenizer's own rule */
    char *src[2];
    rf_tok_files(tok_src, &src[0], &src[1]);
    char *slash = strrchr(src[0], '/');
    char *sdir = slash ? strndup(src[0], (size_t)(slash - src[0])) : rf_strdup(".");
    char *same_a = realpath(sdir, NULL), *same_b = realpath(dir, NULL);
    int same = same_a && same_b && !strcmp(same_a, same_b);
    free(same_a), free(same_b);
    for (int i = 2; i < 4 && !rc && !same; i++) {
        char *dst = set_path(dir, SET_FILES[i], suffix);
        int had = exists(src[i - 2]);
        rc = copy_if_exists(src[i - 2], dst);
        if (!rc && had) staged[i] = 1, kill_point();
        free(dst);
    }
    free(src[0]), free(src[1]);
    free(sdir);
    return rc;
}

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

/* optimizer.bin as path (temp + fsync + rename) */
static int write_tstate(const char *path, const rf_tstate *s, const rf_adamw *o) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return rf_set_error("%s: cannot create: %s", tmp, strerror(errno)), -1;
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
    int rc = write_all(f, &h, sizeof h) || write_all(f, o->m, o->n * sizeof(float)) || fflush(f);
    if (!rc) kill_point(); /* a half-written temp file */
    rc = rc || write_all(f, o->v, o->n * sizeof(float)) || fflush(f) || fsync(fileno(f));
    if (fclose(f)) rc = -1;
    if (rc || rename(tmp, path)) {
        rf_set_error("%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Step 3 of a save (and of a recovery): every staged NAME.next over NAME,
 * then the journal away. Renaming is idempotent: a NAME.next that is gone
 * was renamed before an interruption. */
static int commit_staged(const char *dir, const int *staged) {
    for (int i = 0; i < N_SET_FILES; i++) {
        if (!staged[i]) continue;
        char *from = set_path(dir, SET_FILES[i], ".next"), *to = set_path(dir, SET_FILES[i], "");
        int rc = exists(from) && rename(from, to) ? -1 : 0;
        if (rc) rf_set_error("%s: rename failed: %s", to, strerror(errno));
        free(from), free(to);
        if (rc) return -1;
        kill_point();
    }
    if (sync_dir(dir)) return -1;
    char *j = set_path(dir, JOURNAL, "");
    int rc = unlink(j) && errno != ENOENT ? -1 : 0;
    if (rc) rf_set_error("%s: cannot remove: %s", j, strerror(errno));
    free(j);
    if (rc || sync_dir(dir)) return -1;
    kill_point();
    return 0;
}

/* Stage the files (tstate may be NULL: no optimizer.bin), commit, apply. */
static int save_set(const rf_tmodel *m, const char *dir, const char *tok_src, const rf_tstate *st,
                    const rf_adamw *o) {
    if (rf_mkdir_p(dir) || rf_ckpt_recover(dir)) return -1;
    int staged[N_SET_FILES] = {0};
    if (write_model_files(m, dir, tok_src, ".next", staged)) goto fail;
    if (st) {
        char *p = set_path(dir, "optimizer.bin", ".next");
        int rc = write_tstate(p, st, o);
        free(p);
        if (rc) goto fail;
        staged[4] = 1;
        kill_point();
    }
    if (sync_dir(dir)) goto fail;
    /* the commit point: from here on the new set wins */
    char journal[512] = JOURNAL_MAGIC;
    for (int i = 0; i < N_SET_FILES; i++)
        if (staged[i]) strcat(journal, SET_FILES[i]), strcat(journal, "\n");
    char *jp = set_path(dir, JOURNAL, "");
    int rc = rf_write_file_atomic(jp, journal, strlen(journal));
    free(jp);
    if (rc || sync_dir(dir)) goto fail;
    kill_point();
    return commit_staged(dir, staged);
fail:; /* the previous checkpoint is untouched: drop what was staged */
    char why[1024];
    snprintf(why, sizeof why, "%s", rf_last_error());
    for (int i = 0; i < N_SET_FILES; i++) {
        char *p = set_path(dir, SET_FILES[i], ".next");
        unlink(p);
        free(p);
    }
    rf_set_error("%s", why);
    return -1;
}

/* NAME.next, NAME.next.tmp.PID or NAME.tmp.PID of a set file; NAME.tmp.PID
 * of the journal and of log.csv. (No known name is a prefix of another.) */
static int is_leftover(const char *f) {
    const char *known[N_SET_FILES + 2];
    for (int i = 0; i < N_SET_FILES; i++) known[i] = SET_FILES[i];
    known[N_SET_FILES] = JOURNAL, known[N_SET_FILES + 1] = "log.csv";
    for (int i = 0; i < N_SET_FILES + 2; i++) {
        size_t k = strlen(known[i]);
        if (strncmp(f, known[i], k)) continue;
        const char *r = f + k;
        if (i < N_SET_FILES && !strncmp(r, ".next", 5)) {
            r += 5;
            if (!*r) return 1;
        }
        return !strncmp(r, ".tmp.", 5) && r[5] && strspn(r + 5, "0123456789") == strlen(r + 5);
    }
    return 0;
}

int rf_ckpt_recover(const char *dir) {
    if (!is_dir(dir)) return 0;
    char *jp = set_path(dir, JOURNAL, "");
    size_t n = 0;
    char *journal = exists(jp) ? rf_read_file_max(jp, 4096, &n) : NULL;
    free(jp);
    if (journal) {
        /* committed: finish moving the new set in */
        if (strncmp(journal, JOURNAL_MAGIC, strlen(JOURNAL_MAGIC))) {
            free(journal);
            return rf_set_error("%s/%s: not a refusion checkpoint journal", dir, JOURNAL), -1;
        }
        int staged[N_SET_FILES] = {0};
        for (char *save = NULL, *line = strtok_r(journal + strlen(JOURNAL_MAGIC), "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            for (int i = 0; i < N_SET_FILES; i++)
                if (!strcmp(line, SET_FILES[i])) staged[i] = 1;
        free(journal);
        if (commit_staged(dir, staged)) return -1;
    }
    /* leftovers of a save that never committed, and temp files of any writer */
    DIR *d = opendir(dir);
    if (!d) return rf_set_error("%s: cannot list: %s", dir, strerror(errno)), -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)))
        if (is_leftover(e->d_name)) {
            char *p = set_path(dir, e->d_name, "");
            if (unlink(p) && errno != ENOENT) rc = -1, rf_set_error("%s: cannot remove: %s", p, strerror(errno));
            free(p);
        }
    closedir(d);
    return rc;
}

int rf_ckpt_save(const rf_tmodel *m, const char *dir, const char *tok_src, rf_tstate *st, const rf_adamw *o) {
    st->params_hash = rf_hash_floats(m->params, m->n_params);
    return save_set(m, dir, tok_src, st, o);
}

/* ---- trainer state ------------------------------------------------------------- */

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
