/* train.h - training Qwen3 / ReFusion models on the CPU, in f32.
 *
 * Layout follows karpathy/llm.c: every parameter lives in one contiguous f32
 * block described by a table of tensors (HF name, shape, offset); gradients
 * and the AdamW moments are blocks of the same layout. A micro-batch is a set
 * of examples packed back to back (no padding: a padded token would carry no
 * loss and be masked out of every attention row, so leaving it out computes
 * exactly the same thing). Every token carries an explicit position id (RoPE
 * only); attention is causal over the physical order inside its example, or
 * bidirectional (MDM baseline).
 *
 * The objective is encoded per token as (target, weight): the micro-batch
 * loss is sum_i weight_i * CE(logits_i, target_i). The batch builder chooses
 * the weights so that this sum is exactly the reference's normalisation (see
 * objective.c). */
#ifndef RF_TRAIN_H
#define RF_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "model/model.h"
#include "util/util.h"

/* ---- parameters ------------------------------------------------------------ */

typedef struct {
    char name[80];     /* Hugging Face tensor name, e.g. model.layers.0.mlp.up_proj.weight */
    int ndim;          /* 1 (norm vectors) or 2 (matrices) */
    int64_t shape[2];
    size_t offset;     /* in floats, into the parameter block */
    size_t numel;
    int decay;         /* AdamW weight decay applies: matrices yes, norm vectors no */
    int layer, role;   /* from the model's tensor table (model/tensors.h) */
} rf_ptensor;

/* Pointers into a block (parameters or gradients), shapes as in torch. */
typedef struct {
    float *attn_norm;  /* input_layernorm [d] */
    float *q, *k, *v;  /* q:[nh*hd, d]  k,v:[nkv*hd, d] */
    float *q_norm, *k_norm; /* [hd] */
    float *o;          /* [d, nh*hd] */
    float *ffn_norm;   /* post_attention_layernorm [d] */
    float *gate, *up;  /* [f, d] */
    float *down;       /* [d, f] */
} rf_tlayer;

typedef struct {
    float *embed;      /* [V, d] */
    rf_tlayer *layers; /* [n_layers] */
    float *final_norm; /* [d] */
    float *lm_head;    /* [V, d]; == embed when tied */
} rf_tweights;

typedef struct {
    rf_config cfg;
    int n_tensors;
    rf_ptensor *tensors;  /* HF order */
    size_t n_params;      /* floats in the block */
    float *params, *grads;
    rf_tweights w, g;     /* views of params / grads */
    /* When set, the backward calls grads_final(grads_user, from) on the
     * calling thread, outside any parallel region, a few times per layer:
     * the gradients [from, n_params) are final for this backward (it
     * finishes the block from the top down: lm_head, final_norm, the last
     * layer ... the first, embed). A data-parallel run starts summing them
     * over ranks there while the backward goes on (dist.c's buckets). */
    void (*grads_final)(void *user, size_t from);
    void *grads_user;
} rf_tmodel;

/* Allocate the blocks for cfg (params zero, grads zero). */
void rf_tmodel_init(rf_tmodel *m, const rf_config *cfg);
void rf_tmodel_free(rf_tmodel *m);
/* Matrices ~ N(0, std) (seeded), norm vectors = 1. */
void rf_tmodel_randomize(rf_tmodel *m, float std, uint64_t seed);
const rf_ptensor *rf_tmodel_find(const rf_tmodel *m, const char *name);

/* ---- one micro-batch, as built by an objective ------------------------------- */

typedef enum { RF_OBJ_REFUSION = 0, RF_OBJ_AR = 1, RF_OBJ_MDM = 2 } rf_objective;
const char *rf_objective_name(rf_objective o);
int rf_objective_parse(const char *s, rf_objective *o); /* 0 or -1 */

/* Loss kinds of a token: which part of the loss it feeds (reporting only). */
enum { RF_LOSS_NONE = 0, RF_LOSS_AR = 1, RF_LOSS_MDM = 2 };

typedef struct {
    int n_seq;          /* examples in the micro-batch */
    int n_tok;          /* N: tokens, all examples packed */
    int bidirectional;  /* 1: every token attends to its whole example (MDM) */
    int *off;           /* [n_seq + 1]: example b is tokens [off[b], off[b+1]) */
    int *tokens;        /* [N] input ids, physical order */
    int *pos;           /* [N] position ids */
    int *target;        /* [N] token the logits at i must predict, or -1 */
    float *weight;      /* [N] d(loss)/d(CE_i); 0 where target < 0 */
    uint8_t *kind;      /* [N] RF_LOSS_* */
    /* per example, for tests and logs */
    int *slot_size;     /* [n_seq] refusion slot size (0 otherwise) */
    float *p_mask;      /* [n_seq] masking probability p (0 for ar) */
    int cap_seq, cap_tok;
} rf_tbatch;

void rf_tbatch_free(rf_tbatch *b);

/* A tokenised example: ids = prompt (chat template, generation prompt)
 * followed by the response and EOS. */
typedef struct {
    int *ids;
    int n_prompt, n_resp;
} rf_example;

typedef struct {
    rf_objective obj;
    int mask_id;
    float eps;            /* p = (1 - eps) t + eps; 1e-3 as the reference */
    int slot_sizes[8];    /* refusion: drawn uniformly from these ({4,8,16,32}) */
    int n_slot_sizes;
    float aux_ar;         /* refusion, beyond the reference (0 = off): also feed each
                           * example in natural order with the plain AR loss, weighted
                           * aux_ar / (its targets in the micro-batch), so the AR head that
                           * verifies (and, AR-verified, writes) tokens keeps learning the
                           * left-to-right task, slot boundaries included */
    float mask_floor;     /* refusion: t ~ U(mask_floor, 1) instead of U(0, 1) (0 = reference) */
    int mdm_pad;          /* mdm: pad each response with EOS up to this many
                           * tokens, as LLaDA's SFT does, so the model learns
                           * to fill a fixed-length answer region (0 = off) */
} rf_objcfg;

/* Sequences one example becomes in a micro-batch (2 with aux_ar). */
int rf_objcfg_seqs_per_example(const rf_objcfg *oc);

/* Response length an example has in the batch: n_resp, or mdm_pad for the
 * MDM objective when that is longer. */
int rf_objcfg_resp_len(const rf_objcfg *oc, const rf_example *e);

void rf_objcfg_default(rf_objcfg *oc, rf_objective obj, int mask_id);

/* Build the micro-batch for n examples, drawing the masking from rng.
 * scale multiplies every weight (1 / gradient-accumulation steps). */
void rf_tbatch_build(rf_tbatch *b, const rf_objcfg *oc, const rf_example *const *ex, int n,
                     float scale, rf_rng *rng);
/* The same with example s's random choices (slot size, mask ratio, masks,
 * shuffle) drawn from its own seeds[s]: an example's sample then does not
 * depend on the others in the batch, nor on which process builds it. */
void rf_tbatch_build_seeded(rf_tbatch *b, const rf_objcfg *oc, const rf_example *const *ex,
                            int n, float scale, const uint64_t *seeds);
/* dst = examples [e0, e1) of src, a batch built from n_ex examples (with
 * their aux_ar copies), weights unchanged: the shard one process trains on,
 * its loss normalised over the whole batch. */
void rf_tbatch_shard(rf_tbatch *dst, const rf_tbatch *src, int n_ex, int e0, int e1);

/* ---- forward / backward ---------------------------------------------------- */

typedef struct {
    double loss;       /* sum_i weight_i * CE_i */
    double ar, mdm;    /* the same sum split by token kind */
    int n_ar, n_mdm;   /* tokens carrying each kind of loss */
} rf_tloss;

typedef struct rf_tacts rf_tacts;
/* Activations and scratch for micro-batches of up to max_tok tokens. */
rf_tacts *rf_tacts_new(const rf_config *cfg, int max_tok);
void rf_tacts_free(rf_tacts *a);
size_t rf_tacts_bytes(const rf_tacts *a);

/* Forward, loss, and (when backward) gradients ADDED to m->grads. */
int rf_train_step_fb(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b, int backward, rf_tloss *out);
/* Logits of every token [N, V] (forward only): for tests against the engine. */
int rf_train_logits(rf_tmodel *m, rf_tacts *a, const rf_tbatch *b, float *logits);
/* FLOPs of forward+backward on a batch (matmuls + attention): 3x forward. */
double rf_train_flops(const rf_config *cfg, const rf_tbatch *b);

/* ---- optimizer ------------------------------------------------------------- */

typedef struct {
    float lr, min_lr;     /* peak and floor of the cosine */
    long warmup, total;   /* steps */
    float beta1, beta2, eps, weight_decay, clip;
} rf_optcfg;

typedef struct {
    rf_optcfg c;
    size_t n;
    float *m, *v;         /* [n] AdamW moments */
    long step;            /* optimizer steps taken */
} rf_adamw;

void rf_optcfg_default(rf_optcfg *c);
void rf_adamw_init(rf_adamw *o, const rf_optcfg *c, size_t n);
void rf_adamw_free(rf_adamw *o);
/* Learning rate at (0-based) step s: linear warm-up then cosine to min_lr. */
float rf_lr_at(const rf_optcfg *c, long s);
/* Clip gradients by global norm (returns the norm before clipping) and take
 * one AdamW step at lr; decay only the tensors marked decay. */
double rf_adamw_step(rf_adamw *o, rf_tmodel *m, float lr);

/* ---- data ------------------------------------------------------------------ */

typedef struct rf_tokenizer rf_tokenizer;

typedef struct {
    int n;
    rf_example *ex;
    long n_tokens;
} rf_dataset;

/* Read a JSON list of {"query", "response"} objects or JSON Lines, from one
 * or more comma-separated files, tokenise with the chat template (user turn +
 * generation prompt; response + EOS). Examples longer than max_len tokens are
 * an error naming file and record, or skipped (counted in *n_skipped) when
 * skip_long. -1 with rf_last_error() = "<file>: record N: what". */
int rf_dataset_load(rf_dataset *d, const char *paths, const rf_tokenizer *tok, int max_len,
                    int skip_long, int *n_skipped);
/* The same from (query, response) pairs already split into ids. */
void rf_dataset_free(rf_dataset *d);

/* ---- checkpoints ----------------------------------------------------------- */

/* Load weights (any dtype, single file or shards) of dir into m, which must
 * have been initialised with dir's config. */
int rf_tmodel_load_weights(rf_tmodel *m, const char *dir);

/* Trainer state saved beside the checkpoint (optimizer.bin). */
typedef struct {
    long step;            /* optimizer steps done */
    long epoch, cursor;   /* data order: epoch and index within its permutation */
    rf_rng rng;           /* the masking RNG */
    double tokens_seen, elapsed;
    uint64_t params_hash; /* of the f32 weights in model.safetensors */
} rf_tstate;

uint64_t rf_hash_floats(const float *x, size_t n);
/* The whole checkpoint as one set (model files + optimizer.bin, with
 * st->params_hash set): a kill or an error at any point leaves the previous
 * checkpoint or the new one (see checkpoint.c). */
int rf_ckpt_save(const rf_tmodel *m, const char *dir, const char *tok_src, rf_tstate *st, const rf_adamw *o);
/* Finish or undo an interrupted rf_ckpt_save in dir and remove stale temp
 * files; 0 when dir does not exist. Run before reading a checkpoint. */
int rf_ckpt_recover(const char *dir);
int rf_tstate_load(const char *dir, rf_tstate *s, rf_adamw *o);

/* ---- processes of a data-parallel run (dist.c) ------------------------------ */

/* With MPI (a build that found it) every rank of `mpirun -np N` runs the same
 * training: each trains on its shard of every global micro-batch, the
 * gradients are summed over ranks, every rank takes the same AdamW step.
 * Without MPI or before rf_dist_init: rank 0 of 1, every collective a no-op. */
int rf_dist_compiled(void);      /* 1 when built with MPI */
int rf_dist_launched(void);      /* processes an MPI launcher's environment names; 0: none */
int rf_dist_init(void);          /* MPI_Init; -1 + rf_last_error() without MPI */
void rf_dist_finalize(void);
int rf_dist_rank(void);
int rf_dist_size(void);
void rf_dist_sum_f32(float *x, size_t n);  /* in place, over all ranks */
void rf_dist_sum_f64(double *x, int n);
void rf_dist_bcast(void *p, size_t bytes); /* rank 0's bytes to every rank */
/* Every rank calls with its own ok; returns the lowest failed rank, or -1. */
int rf_dist_first_failed(int ok);

/* The same sum as rf_dist_sum_f32 in buckets overlapped with the backward:
 * bucket b is x[edges[b], edges[b+1]) (edges ascending, edges[0] = 0,
 * edges[n_buckets] = n; each bucket below INT_MAX floats). Every rank must
 * use the same edges. Per step: _start, then _ready(from) whenever
 * x[from, n) is final (a non-blocking MPI_Iallreduce starts on each bucket
 * that is now whole, and the outstanding ones are tested so that Open MPI,
 * which has no progress thread here, moves them on), then _finish (starts
 * the buckets not started yet, waits for all). An element's sum is the same
 * as with the flat call when the reduction order over ranks is (always for
 * 2 ranks). All calls on the thread that called rf_dist_init (MPI_THREAD_FUNNELED). */
typedef struct rf_dist_buckets rf_dist_buckets;
rf_dist_buckets *rf_dist_buckets_new(float *x, const size_t *edges, int n_buckets);
void rf_dist_buckets_start(rf_dist_buckets *b);
void rf_dist_buckets_ready(rf_dist_buckets *b, size_t from);
void rf_dist_buckets_finish(rf_dist_buckets *b);
double rf_dist_buckets_seconds(const rf_dist_buckets *b); /* in MPI calls since _start */
void rf_dist_buckets_free(rf_dist_buckets *b);

/* ---- the trainer (trainer.c) ------------------------------------------------- */

typedef struct {
    const char *data;       /* comma-separated JSON / JSON Lines files */
    const char *out;        /* checkpoint directory written (and resumed from) */
    const char *init;       /* start from this checkpoint directory, or NULL */
    const char *config;     /* new model: preset name or config.json path */
    const char *tokenizer;  /* tokenizer.json or a directory; default: init / out */
    int resume;             /* continue the run saved in out */
    rf_objective obj;
    int batch, seq_len, accum; /* batch: examples per micro-batch, over all ranks */
    long steps;             /* optimizer steps; 0: from epochs */
    double epochs;
    rf_optcfg opt;          /* lr, min_lr, warmup, weight decay, clip (total is set here) */
    uint64_t seed;
    int threads;            /* 0: leave OpenMP / OpenBLAS defaults */
    long save_every;        /* steps; 0: only at the end */
    long stop_at;           /* stop (and save) after this step; 0: run to the end */
    int skip_long;
    float init_std;
    int slot_sizes[8], n_slot_sizes; /* 0: the reference's {4,8,16,32} */
    int mdm_pad;            /* mdm objective: EOS-pad responses to this length */
    float aux_ar, mask_floor; /* refusion variants, see rf_objcfg */
    int bucketed_allreduce; /* several ranks: sum the gradients in buckets overlapped with
                             * the backward instead of one MPI_Allreduce after it (flat,
                             * the default: cheaper on one machine, see the README) */
    double bucket_mb;       /* buckets: at least this many MB each (0: RF_BUCKET_MB_DEFAULT) */
} rf_train_opts;

#define RF_BUCKET_MB_DEFAULT 1.0

void rf_train_opts_default(rf_train_opts *o);

typedef struct rf_trainer rf_trainer;

/* What rf_trainer_open set up (for the program's banner). */
typedef struct {
    size_t n_params;
    int n_examples, n_skipped; /* skipped: longer than seq_len (skip_long) */
    long n_tokens;
    long total_steps, start_step;
    size_t act_bytes;          /* this rank's activation buffers */
    int resumed, rank, n_ranks;
} rf_trainer_info;

/* One optimizer step, the same on every rank. */
typedef struct {
    long step, total;          /* steps done (1-based) and of the whole run */
    float lr;
    rf_tloss loss;             /* of the global batch, all ranks summed */
    double grad_norm;          /* before clipping */
    long tokens;               /* tokens of the global batch */
    double seconds;            /* wall time of the step */
    double comm_seconds;       /* of it, in MPI calls after the forward (this rank): the
                                * gradient sum (with buckets: starting, testing and waiting
                                * for them) and the losses' sum; includes waiting for the
                                * slowest rank */
    int stop;                  /* some rank was asked to stop */
} rf_step_info;

/* Tokenizer, config, data, model, optimizer and buffers; with o->resume the
 * state saved in o->out. Under MPI every rank calls it: rank 0 alone reads
 * the checkpoint's weights and state and sends them to the others, and the
 * ranks check that they agree on options, config and data. NULL with
 * rf_last_error() (the same on every rank for a collective failure). */
rf_trainer *rf_trainer_open(const rf_train_opts *o, rf_trainer_info *info);
/* One optimizer step over accum micro-batches. stop: this process was asked
 * to stop; s->stop tells every rank that one was. -1 on error. */
int rf_trainer_step(rf_trainer *t, int stop, rf_step_info *s);
/* The checkpoint set in o->out (rank 0 writes; every rank learns the result). */
int rf_trainer_save(rf_trainer *t);
void rf_trainer_close(rf_trainer *t);

/* The whole run: steps until o->steps, o->stop_at or *stop, log.csv (one row
 * per step) and checkpoints every save_every steps and at the end, written
 * by rank 0. The program draws progress from the callbacks and sets *stop
 * (e.g. from a SIGINT handler); the library prints nothing. */
typedef struct {
    void (*on_start)(void *user, const rf_trainer_info *info);
    void (*on_step)(void *user, const rf_step_info *s);
    const volatile sig_atomic_t *stop;
    void *user;
} rf_train_hooks;

typedef struct {
    long step, steps_run, n_clipped; /* where it ended; steps of this run; clipped of them */
    double tokens_seen;
    int stopped;                     /* by *stop: saved, continue with resume */
    int rank;
    int error_shared;                /* on error: every rank has this message (print once) */
} rf_train_result;

/* 0 on success (also when stopped: the state is saved), -1 with
 * rf_last_error(). hooks and res may be NULL. */
int rf_train_run(const rf_train_opts *o, const rf_train_hooks *hooks, rf_train_result *res);

/* Environment variables the training run should start with (blas_env.c):
 * OPENBLAS_CORETYPE=Haswell when OpenBLAS fell back to its SSE3 kernels on
 * an AVX2 CPU it does not know, OMP_WAIT_POLICY=PASSIVE when unset. Both are
 * read only when the libraries load, so a program that wants them sets them
 * and re-executes itself. Returns how many (at most 2) it filled in. */
int rf_train_env_advice(const char *names[2], const char *values[2]);

#endif
