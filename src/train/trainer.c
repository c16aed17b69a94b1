/* trainer.c - the training loop, llm.c style: rf_trainer_open / _step /
 * _save / _close, and rf_train_run driving them with gradient accumulation,
 * a CSV log of every step, periodic and final checkpoints and --resume that
 * continues bit for bit. Progress display, Ctrl-C, the loss plot and the BLAS
 * environment belong to the program (src/cli/cmd_train.c), which gets
 * callbacks and sets a stop flag.
 *
 * Reproducibility: everything random flows from the seed. The data order is
 * a fresh permutation per epoch (from seed and epoch number); the objective's
 * random choices for an example (slot size, mask ratio, masks, shuffle) come
 * from that example's own seed, a hash of (seed, epoch, example index). A
 * resumed run therefore draws the same batches and masks as an uninterrupted
 * one, and the samples do not depend on which process builds them.
 *
 * Data parallel (MPI, see dist.c): with N ranks each global micro-batch of
 * `batch` examples is the same on every rank; rank r trains on examples
 * [r*batch/N, (r+1)*batch/N) of it. The batch is built whole on every rank
 * (cheap: token ids only) so each token's loss weight keeps the whole batch's
 * normalisation (1 / AR targets of the micro-batch, 1 / examples, ...); the
 * rank's gradient is then its share of the global gradient, the sum over
 * ranks is the gradient of the one-process run, and every rank takes the
 * same AdamW step. The sum runs in one MPI_Allreduce after the backward, or
 * (--allreduce buckets) in buckets of whole layers (at least --bucket-mb
 * each), each started with MPI_Iallreduce as soon as the last micro-batch's
 * backward has finished it; each float is the same sum of the ranks' values
 * either way, so the two give the same bits. Rank 0
 * alone writes log.csv and checkpoints; a checkpoint holds nothing that
 * depends on N, so --resume works with any number of ranks. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "train/train.h"

void rf_train_opts_default(rf_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->obj = RF_OBJ_REFUSION;
    o->batch = 8;
    o->seq_len = 512;
    o->accum = 1;
    o->epochs = 1.0;
    rf_optcfg_default(&o->opt);
    o->seed = 1;
    o->init_std = 0.02f;
}

struct rf_trainer {
    rf_train_opts o;
    const char *tok_src;      /* tokenizer files copied into checkpoints */
    rf_tokenizer *tok;
    rf_dataset data;
    rf_tmodel m;
    int have_model;
    rf_optcfg oc;             /* o->opt with the run's total steps */
    rf_adamw opt;
    rf_objcfg obj;
    rf_tstate st;
    rf_tacts *acts;
    rf_tbatch full, shard;    /* the global micro-batch; this rank's part of it */
    int *perm;                /* data order of the current epoch */
    const rf_example **mb;    /* [batch] the micro-batch's examples */
    uint64_t *seeds;          /* [batch] their seeds */
    int rank, n_ranks, e0, e1; /* this rank trains on examples [e0, e1) of a micro-batch */
    rf_dist_buckets *buckets; /* the gradient sum overlapped with the backward; NULL: flat */
    long n_clipped;
};

/* ---- data order and per-example seeds ------------------------------------------ */

static void epoch_perm(int *perm, int n, uint64_t seed, long epoch) {
    rf_rng r;
    rf_rng_seed(&r, seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch + 1);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rf_rng_below(&r, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The objective's seed for example idx in epoch epoch. */
static uint64_t example_seed(uint64_t seed, long epoch, int idx) {
    return mix64(mix64(mix64(seed ^ 0x5eedULL) + (uint64_t)epoch) + (uint64_t)idx);
}

/* ---- hashes the ranks compare ---------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_data(const rf_dataset *d) {
    uint64_t h = fnv(1469598103934665603ull, &d->n, sizeof d->n);
    for (int i = 0; i < d->n; i++) {
        const rf_example *e = &d->ex[i];
        h = fnv(h, &e->n_prompt, sizeof(int));
        h = fnv(h, &e->n_resp, sizeof(int));
        h = fnv(h, e->ids, sizeof(int) * (size_t)(e->n_prompt + e->n_resp));
    }
    return h;
}

/* Everything that shapes the run's arithmetic, field by field (no padding). */
static uint64_t hash_setup(const rf_train_opts *o, const rf_config *c, const rf_optcfg *oc) {
    uint64_t h = fnv(1469598103934665603ull, c, sizeof *c);
    double v[] = {o->obj, o->batch, o->seq_len, o->accum, (double)oc->total, oc->lr, oc->min_lr,
                  (double)oc->warmup, oc->beta1, oc->beta2, oc->eps, oc->weight_decay, oc->clip,
                  (double)o->seed, o->init_std, o->n_slot_sizes, o->mdm_pad, o->aux_ar,
                  o->mask_floor, (double)o->save_every, (double)o->stop_at, o->resume,
                  o->init != NULL, o->skip_long, o->bucketed_allreduce, o->bucket_mb};
    h = fnv(h, v, sizeof v);
    return fnv(h, o->slot_sizes, sizeof o->slot_sizes);
}

/* ---- setup ------------------------------------------------------------------------ */

/* Bucket edges of the gradient block for the overlapped sum: the backward
 * finishes it from the top down (final_norm and lm_head, the last layer ...
 * the first, embed), so the candidate edges are where a layer (or the
 * model-wide tensors) begins; going down from the top, a bucket closes at
 * the first candidate at least min_floats below its top (embed, finished
 * last, is its own bucket). No bucket exceeds an MPI count. Ascending edges
 * into edges[0 .. return]; edges has room for n_tensors + 1 + n / 2^30. */
static int bucket_edges(const rf_tmodel *m, size_t min_floats, size_t *edges) {
    const size_t max_floats = (size_t)1 << 30;
    int n = 0;
    size_t top = m->n_params;
    edges[n++] = top;
    for (int t = m->n_tensors - 1; t >= 0; t--) {
        size_t c = m->tensors[t].offset;
        int starts = t == 0 || m->tensors[t].layer != m->tensors[t - 1].layer;
        if (!starts || (c > 0 && top - c < min_floats)) continue;
        while (top - c > max_floats) edges[n++] = top -= max_floats;
        edges[n++] = top = c;
    }
    for (int i = 0, j = n - 1; i < j; i++, j--) { /* ascending */
        size_t x = edges[i];
        edges[i] = edges[j];
        edges[j] = x;
    }
    return n - 1;
}

static void grads_final(void *buckets, size_t from) { rf_dist_buckets_ready(buckets, from); }

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* The tokenizer's special ids go into the config so the checkpoint is
 * self-describing (mask_token_id in config.json). */
static int bind_tokenizer(rf_config *c, const rf_tokenizer *tok, int new_model) {
    int tv = rf_tok_vocab_size(tok);
    if (new_model) c->vocab_size = tv;
    if (tv > c->vocab_size)
        return rf_set_error("tokenizer has %d ids but the model's vocabulary is %d", tv,
                            c->vocab_size), -1;
    c->mask_id = rf_tok_mask_id(tok);
    c->eos_id = rf_tok_eos_id(tok);
    int bot = rf_tok_id(tok, "<|beginoftext|>");
    if (bot >= 0) c->bot_id = bot;
    return 0;
}

/* the work buffer OpenBLAS allocates for a thread's first matrix product */
#define BLAS_BUFFER_BYTES (128LL << 20)

/* A micro-batch's activations against the machine and the address-space
 * limit, before rf_tacts_new allocates them: per token it keeps at least 4 d + 3 q + 3 ffn floats per
 * layer, so `--batch 1000000` is one clear line instead of a 393 GB malloc. */
static int check_batch_memory(const rf_config *c, int64_t n_tok, const rf_train_opts *o) {
    int64_t per_tok = 4 * (int64_t)c->n_layers *
                      (4LL * c->hidden_size + 3LL * c->n_heads * c->head_dim + 3LL * c->intermediate_size);
    int64_t need;
    uint64_t have = rf_phys_mem();
    if (n_tok > INT32_MAX || rf_mul_i64(n_tok, per_tok, &need) || (have && (uint64_t)need > have)) {
        rf_set_error("--batch %d x --seq-len %d (%lld tokens per micro-batch and process) needs at "
                     "least %.1f GB of activations; this machine has %.1f GB (lower --batch, raise "
                     "--accum, or use more processes)",
                     o->batch, o->seq_len, (long long)n_tok, (double)n_tok * per_tok / 1e9, have / 1e9);
        return -1;
    }
    /* under an address-space limit (ulimit -v) the activations and
     * OpenBLAS's work buffer must fit in what the process has left: OpenBLAS
     * retries a buffer it cannot allocate for ever */
    struct rlimit rl;
    unsigned long vm_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu", &vm_pages) != 1) vm_pages = 0;
        fclose(f);
    }
    uint64_t used = (uint64_t)vm_pages * (uint64_t)sysconf(_SC_PAGESIZE), blas = (uint64_t)BLAS_BUFFER_BYTES;
    if (vm_pages && !getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY &&
        (uint64_t)rl.rlim_cur < used + blas + (uint64_t)need) {
        rf_set_error("training needs about %.0f MB more address space (activations and OpenBLAS's %.0f MB "
                     "buffer) than the address-space limit (ulimit -v %llu KiB) leaves: raise it, or lower --batch",
                     ((double)need + blas) / 1e6, blas / 1e6, (unsigned long long)(rl.rlim_cur >> 10));
        return -1;
    }
    return 0;
}

/* Set when this process's error is not its own news: another rank failed,
 * or every rank has the same message; a program prints it on rank 0 only.
 * (One training run per process.) */
static int g_error_shared;

/* Collective success check: 0 when every rank got here with ok. A rank that
 * failed keeps its own message; the others get one naming it. */
static int all_ok(const rf_trainer *t, int ok, const char *what) {
    int bad = rf_dist_first_failed(ok);
    if (bad < 0) return 0;
    if (ok) {
        rf_set_error("rank %d of %d failed %s (its message is above)", bad, t->n_ranks, what);
        g_error_shared = 1;
    }
    return -1;
}

/* Rank 0's value of a hash, compared on every rank. */
static int same_as_rank0(const rf_trainer *t, uint64_t mine, const char *what) {
    uint64_t r0 = mine;
    rf_dist_bcast(&r0, sizeof r0);
    int ok = r0 == mine;
    if (!ok) rf_set_error("%s differs from rank 0's (every rank must be started with the same "
                          "command line and files)", what);
    return all_ok(t, ok, "the agreement check");
}

/* Tokenizer, config and data: every rank. 0 or -1 (this rank's error). */
static int open_inputs(rf_trainer *t, rf_config *cfg, rf_trainer_info *info) {
    const rf_train_opts *o = &t->o;
    const char *src = o->resume ? o->out : o->init;
    if (o->resume) { /* say what is missing, not which of its files cannot be opened */
        char *p = rf_path_join(o->out, "config.json");
        int saved = file_exists(p);
        free(p);
        if (!saved)
            return rf_set_error("--resume: %s holds no checkpoint yet (the run stopped before its first save); "
                                "start it again without --resume", o->out), -1;
    }
    t->tok_src = o->tokenizer ? o->tokenizer : src;
    if (!t->tok_src) return rf_set_error("a new model needs --tokenizer"), -1;
    if (!(t->tok = rf_tok_load(t->tok_src))) return -1;
    if (src) {
        char *p = rf_path_join(src, "config.json");
        int rc = rf_config_load(cfg, p);
        free(p);
        if (rc) return -1;
    } else if (file_exists(o->config ? o->config : "")) {
        if (rf_config_load(cfg, o->config)) return -1;
    } else if (rf_config_preset(cfg, o->config ? o->config : "tiny")) {
        return -1;
    }
    if (bind_tokenizer(cfg, t->tok, !src)) return -1;
    if (o->seq_len > cfg->max_pos)
        return rf_set_error("--seq-len %d exceeds the model's context (max_position_embeddings %d)",
                            o->seq_len, cfg->max_pos), -1;
    if (rf_dataset_load(&t->data, o->data, t->tok, o->seq_len, o->skip_long, &info->n_skipped))
        return -1;
    rf_objcfg_default(&t->obj, o->obj, cfg->mask_id);
    if (o->n_slot_sizes > 0) {
        memcpy(t->obj.slot_sizes, o->slot_sizes, sizeof t->obj.slot_sizes);
        t->obj.n_slot_sizes = o->n_slot_sizes;
    }
    t->obj.mdm_pad = o->mdm_pad;
    t->obj.aux_ar = o->aux_ar;
    t->obj.mask_floor = o->mask_floor;
    for (int i = 0; i < t->data.n; i++)
        if (t->data.ex[i].n_prompt + rf_objcfg_resp_len(&t->obj, &t->data.ex[i]) > o->seq_len)
            return rf_set_error("%s: record %d: prompt + response padded to --mdm-pad %d is longer "
                                "than --seq-len %d", o->data, i, o->mdm_pad, o->seq_len), -1;
    return 0;
}

/* Weights and trainer state: rank 0 reads them (or draws the random init),
 * then sends them to every other rank. */
static int open_state(rf_trainer *t) {
    const rf_train_opts *o = &t->o;
    const char *src = o->resume ? o->out : o->init;
    int ok = 1;
    if (t->rank == 0) {
        if (src) ok = rf_tmodel_load_weights(&t->m, src) == 0;
        else rf_tmodel_randomize(&t->m, o->init_std, o->seed);
        if (ok && o->resume) {
            ok = rf_tstate_load(o->out, &t->st, &t->opt) == 0;
            if (ok && t->st.params_hash != rf_hash_floats(t->m.params, t->m.n_params)) {
                rf_set_error("%s: optimizer.bin does not belong to model.safetensors (a save was "
                             "interrupted?)", o->out);
                ok = 0;
            }
        }
    }
    if (all_ok(t, ok, "to read the checkpoint")) return -1;
    rf_dist_bcast(t->m.params, t->m.n_params * sizeof(float));
    rf_dist_bcast(&t->st, sizeof t->st);
    rf_dist_bcast(&t->opt.step, sizeof t->opt.step);
    if (o->resume) {
        rf_dist_bcast(t->opt.m, t->m.n_params * sizeof(float));
        rf_dist_bcast(t->opt.v, t->m.n_params * sizeof(float));
    }
    return 0;
}

rf_trainer *rf_trainer_open(const rf_train_opts *o, rf_trainer_info *info) {
    rf_trainer_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    if (o->batch < 1 || o->seq_len < 2 || o->accum < 1)
        return rf_set_error("--batch, --seq-len and --accum must be positive"), NULL;
    if (!o->data || !o->out) return rf_set_error("no --data or no output directory"), NULL;
    rf_trainer *t = rf_calloc(1, sizeof *t);
    t->o = *o;
    t->rank = rf_dist_rank();
    t->n_ranks = rf_dist_size();
    if (o->batch < t->n_ranks) {
        rf_set_error("--batch %d is smaller than the %d processes (each trains on its share of "
                     "every micro-batch)", o->batch, t->n_ranks);
        g_error_shared = t->n_ranks > 1;
        goto fail;
    }
    t->e0 = (int)((int64_t)o->batch * t->rank / t->n_ranks);
    t->e1 = (int)((int64_t)o->batch * (t->rank + 1) / t->n_ranks);
    if (o->threads > 0) {
        omp_set_num_threads(o->threads);
        openblas_set_num_threads(o->threads);
    }

    /* an interrupted save in out is finished or undone before anything reads it */
    if (all_ok(t, t->rank != 0 || rf_ckpt_recover(o->out) == 0, "to recover the checkpoint"))
        goto fail;

    /* 1. tokenizer, config, data; nothing is written before the data is read */
    rf_config cfg;
    if (all_ok(t, open_inputs(t, &cfg, info) == 0, "to read its inputs")) goto fail;

    /* 2. model and optimizer */
    rf_tmodel_init(&t->m, &cfg);
    t->have_model = 1;
    long per_step = (long)o->batch * o->accum;
    t->oc = o->opt;
    t->oc.total = o->steps > 0 ? o->steps : (long)ceil(o->epochs * t->data.n / (double)per_step);
    if (t->oc.total < 1) t->oc.total = 1;
    rf_adamw_init(&t->opt, &t->oc, t->m.n_params);
    rf_rng_seed(&t->st.rng, o->seed ^ 0x5eedULL); /* kept in optimizer.bin; masks use example_seed */
    if (t->n_ranks > 1) {
        if (same_as_rank0(t, hash_setup(o, &cfg, &t->oc), "the options or the model config") ||
            same_as_rank0(t, hash_data(&t->data), "the training data (after tokenisation)"))
            goto fail;
    }
    if (open_state(t)) goto fail;

    /* 3. buffers: this rank's share of a micro-batch holds at most e1 - e0
     * examples of seq_len tokens per sequence an example becomes */
    int64_t max_tok = (int64_t)(t->e1 - t->e0) * o->seq_len * rf_objcfg_seqs_per_example(&t->obj);
    if (all_ok(t, check_batch_memory(&cfg, max_tok, o) == 0, "to size its buffers")) goto fail;
    t->acts = rf_tacts_new(&cfg, (int)max_tok);
    if (t->n_ranks > 1 && o->bucketed_allreduce) {
        double mb = o->bucket_mb > 0 ? o->bucket_mb : RF_BUCKET_MB_DEFAULT;
        size_t *edges = rf_malloc(sizeof(size_t) * ((size_t)t->m.n_tensors + 2 + (t->m.n_params >> 30)));
        int nb = bucket_edges(&t->m, (size_t)(mb * 1e6 / sizeof(float)), edges);
        t->buckets = rf_dist_buckets_new(t->m.grads, edges, nb);
        free(edges);
    }
    t->perm = rf_malloc(sizeof(int) * (size_t)t->data.n);
    t->mb = rf_malloc(sizeof(*t->mb) * (size_t)o->batch);
    t->seeds = rf_malloc(sizeof(*t->seeds) * (size_t)o->batch);
    epoch_perm(t->perm, t->data.n, o->seed, t->st.epoch);

    *info = (rf_trainer_info){
        .n_params = t->m.n_params, .n_examples = t->data.n, .n_skipped = info->n_skipped,
        .n_tokens = t->data.n_tokens, .total_steps = t->oc.total, .start_step = t->st.step,
        .act_bytes = rf_tacts_bytes(t->acts), .resumed = o->resume, .rank = t->rank,
        .n_ranks = t->n_ranks};
    return t;
fail:
    rf_trainer_close(t);
    return NULL;
}

void rf_trainer_close(rf_trainer *t) {
    if (!t) return;
    free(t->perm);
    free(t->mb);
    free(t->seeds);
    rf_tbatch_free(&t->full);
    rf_tbatch_free(&t->shard);
    rf_tacts_free(t->acts);
    rf_dist_buckets_free(t->buckets);
    if (t->opt.m) rf_adamw_free(&t->opt);
    if (t->have_model) rf_tmodel_free(&t->m);
    rf_dataset_free(&t->data);
    rf_tok_free(t->tok);
    free(t);
}


/* ---- one step ----------------------------------------------------------------------- */

/* The next global micro-batch: examples in data order, each with its seed. */
static void next_examples(rf_trainer *t) {
    rf_tstate *st = &t->st;
    for (int i = 0; i < t->o.batch; i++) {
        if (st->cursor >= t->data.n) {
            st->epoch++;
            st->cursor = 0;
            epoch_perm(t->perm, t->data.n, t->o.seed, st->epoch);
        }
        int idx = t->perm[st->cursor++];
        t->mb[i] = &t->data.ex[idx];
        t->seeds[i] = example_seed(t->o.seed, st->epoch, idx);
    }
}

int rf_trainer_step(rf_trainer *t, int stop, rf_step_info *s) {
    const rf_train_opts *o = &t->o;
    rf_tmodel *m = &t->m;
    double t0 = rf_now();
    memset(m->grads, 0, m->n_params * sizeof(float));
    rf_tloss sum = {0};
    long ntok = 0;
    int ok = 1;
    if (t->buckets) rf_dist_buckets_start(t->buckets);
    for (int a = 0; a < o->accum; a++) {
        next_examples(t);
        rf_tbatch_build_seeded(&t->full, &t->obj, t->mb, o->batch, 1.0f / (float)o->accum, t->seeds);
        ntok += t->full.n_tok;
        const rf_tbatch *mine = &t->full;
        if (t->n_ranks > 1) {
            rf_tbatch_shard(&t->shard, &t->full, o->batch, t->e0, t->e1);
            mine = &t->shard;
        }
        rf_tloss l;
        if (t->buckets && a == o->accum - 1) { /* the last backward completes the gradients */
            m->grads_final = grads_final;
            m->grads_user = t->buckets;
        }
        if (ok && rf_train_step_fb(m, t->acts, mine, 1, &l) == 0)
            sum.loss += l.loss, sum.ar += l.ar, sum.mdm += l.mdm, sum.n_ar += l.n_ar, sum.n_mdm += l.n_mdm;
        else ok = 0;
        m->grads_final = NULL;
    }
    /* the buckets not started yet (all of them on a rank that failed: the
     * ranks' collectives must match), and the wait for all */
    if (t->buckets) rf_dist_buckets_finish(t->buckets);
    /* losses, failures and stop requests of all ranks in one small reduction,
     * then (flat) the gradient block in one Allreduce */
    double red[7] = {sum.loss, sum.ar, sum.mdm, sum.n_ar, sum.n_mdm, !ok, stop != 0};
    double tr = rf_now(); /* the first call that waits for the slowest rank (flat) */
    rf_dist_sum_f64(red, 7);
    double comm = rf_now() - tr;
    if (red[5] > 0) {
        if (ok) {
            rf_set_error("%g of %d processes failed at step %ld (their messages are above)",
                         red[5], t->n_ranks, t->st.step + 1);
            g_error_shared = 1;
        }
        return -1;
    }
    if (t->buckets) {
        comm += rf_dist_buckets_seconds(t->buckets);
    } else {
        double tc = rf_now();
        rf_dist_sum_f32(m->grads, m->n_params);
        comm += rf_now() - tc;
    }
    sum = (rf_tloss){.loss = red[0], .ar = red[1], .mdm = red[2], .n_ar = (int)red[3], .n_mdm = (int)red[4]};
    g_error_shared = t->n_ranks > 1; /* from here on every rank fails alike */
    if (!isfinite(sum.loss))
        return rf_set_error("loss is %g at step %ld (lower --lr?)", sum.loss, t->st.step + 1), -1;

    g_error_shared = 0;
    float lr = rf_lr_at(&t->oc, t->st.step);
    double gnorm = rf_adamw_step(&t->opt, m, lr);
    t->n_clipped += t->oc.clip > 0 && gnorm > t->oc.clip;
    t->st.step++;
    double dt = rf_now() - t0;
    t->st.elapsed += dt;
    t->st.tokens_seen += (double)ntok;
    *s = (rf_step_info){.step = t->st.step, .total = t->oc.total, .lr = lr, .loss = sum,
                        .grad_norm = gnorm, .tokens = ntok, .seconds = dt, .comm_seconds = comm,
                        .stop = red[6] > 0};
    return 0;
}

int rf_trainer_save(rf_trainer *t) {
    /* the ranks' weights must still be the same bits (one Allreduce result,
     * the same AdamW arithmetic): checked once per save */
    if (t->n_ranks > 1 &&
        same_as_rank0(t, rf_hash_floats(t->m.params, t->m.n_params), "the weights after the step"))
        return -1;
    int ok = t->rank != 0 || rf_ckpt_save(&t->m, t->o.out, t->tok_src, &t->st, &t->opt) == 0;
    return all_ok(t, ok, "to save the checkpoint");
}

/* ---- CSV log ----------------------------------------------------------------------- */

static const char *CSV_HEADER =
    "step,lr,loss,ar_loss,mdm_loss,tokens_per_s,elapsed,grad_norm,allreduce_s\n";

/* Open out/log.csv for appending. A fresh run starts it over; a resumed run
 * keeps the rows up to the resumed step (later rows belong to the lost part
 * of the interrupted run). */
static FILE *open_log(const char *path, long keep_upto, int resume) {
    if (resume) {
        size_t n;
        char *old = rf_read_file(path, &n);
        if (old) {
            size_t cap = n + strlen(CSV_HEADER) + 1, len = 0;
            char *kept = rf_malloc(cap);
            len += (size_t)sprintf(kept, "%s", CSV_HEADER);
            char *save = NULL;
            for (char *line = strtok_r(old, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                long s;
                if (sscanf(line, "%ld,", &s) == 1 && s <= keep_upto)
                    len += (size_t)sprintf(kept + len, "%s\n", line);
            }
            int rc = rf_write_file_atomic(path, kept, len);
            free(kept);
            free(old);
            if (rc) return NULL;
            return fopen(path, "a");
        }
    }
    if (rf_write_file_atomic(path, CSV_HEADER, strlen(CSV_HEADER))) return NULL;
    return fopen(path, "a");
}

/* ---- the run -------------------------------------------------------------------------- */

int rf_train_run(const rf_train_opts *o, const rf_train_hooks *h, rf_train_result *res) {
    rf_train_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    res->rank = rf_dist_rank();
    g_error_shared = 0;
    rf_trainer_info info;
    rf_trainer *t = rf_trainer_open(o, &info);
    if (!t) {
        res->error_shared = g_error_shared;
        return -1;
    }
    int rc = -1, ok = 1;
    FILE *log = NULL;
    if (t->rank == 0) {
        char *p = rf_path_join(o->out, "log.csv");
        if (rf_mkdir_p(o->out) || !(log = open_log(p, t->st.step, o->resume))) {
            rf_set_error("%s: cannot write the log", p);
            ok = 0;
        }
        free(p);
    }
    if (all_ok(t, ok, "to open the log")) goto done;
    if (h && h->on_start) h->on_start(h->user, &info);

    long step0 = t->st.step, last_saved = o->resume ? t->st.step : -1;
    while (t->st.step < t->oc.total) {
        rf_step_info s;
        if (rf_trainer_step(t, h && h->stop && *h->stop, &s)) goto done;
        if (log) {
            fprintf(log, "%ld,%.6e,%.6f,%.6f,%.6f,%.1f,%.3f,%.6f,%.6f\n", s.step, s.lr, s.loss.loss,
                    s.loss.ar, s.loss.mdm, (double)s.tokens / s.seconds, t->st.elapsed, s.grad_norm,
                    s.comm_seconds);
            fflush(log);
        }
        if (h && h->on_step) h->on_step(h->user, &s);
        int last = s.step == t->oc.total || s.step == o->stop_at || s.stop;
        if ((o->save_every > 0 && s.step % o->save_every == 0) || last) {
            if (rf_trainer_save(t)) goto done;
            last_saved = s.step;
        }
        if (s.stop) res->stopped = 1;
        if (s.stop || s.step == o->stop_at) break;
    }
    if (last_saved != t->st.step && rf_trainer_save(t)) goto done;
    res->step = t->st.step;
    res->steps_run = t->st.step - step0;
    res->n_clipped = t->n_clipped;
    res->tokens_seen = t->st.tokens_seen;
    rc = 0;
done:
    res->error_shared = rc && g_error_shared;
    if (log) fclose(log);
    rf_trainer_close(t);
    return rc;
}
