/* decode_replay.c - ReFusion vs AR speed in the regime users run, projected.
 *
 *   bench_decode_replay -m MODEL --data TASKS.json [-n 30] [--replay K] [--replay-8b K8]
 *                       [-8b DIR] [--no-06b] [--threads T]
 *                       [--gen-length 128] [--slot-size 8] [--blocks 2]
 *                       [--slot-threshold 0.9] [--token-threshold 0.4] [--clock wall|cpu]
 *                       [--rolling-slot 4] [--rolling-threshold 0.5]
 *
 * The demo model (3.4M parameters) sits in the CPU cache: every call is
 * compute-bound and costs in proportion to its tokens. The 0.6B and 8B
 * shapes users run are memory-bound at small calls: a call of 8 tokens costs
 * about what a call of 1 costs. So the tokens/s measured on the demo model
 * say little about ReFusion vs AR at those sizes. This benchmark:
 *
 *  1. decodes the first N examples of a task file with the trained model and
 *     each decoder (AR; faithful ReFusion; AR-verified ReFusion, switch (a)
 *     and switches (a)+(b), (a)+(b) with jacobi infilling (the paper table's
 *     headline decoder), with lookahead and jacobi, and the rolling slot
 *     (decode/rolling.c, its own slot size and draft threshold),
 *     docs/refusion.md §4), measuring the wall time, and records the shape
 *     of every forward call through the call log (model/forward.h): rows R,
 *     new tokens per row, cache length before the call (main + each row's
 *     extension), logits rows, attention kind;
 *  2. REPLAYS the calls of the first K of those examples (same shapes, same
 *     number of logits rows - the 151,936-entry vocab makes them cost real
 *     time - token 0 as every id, the KV cache at the recorded length with
 *     zeros in it) on a random-weight model of the Qwen3-0.6B shape (bf16, in
 *     memory) and, with -8b DIR (or env RF8B: a checkpoint written by
 *     `refusion init --preset 8b`), of the 8B shape, timing each call;
 *  3. prints per decoder: calls, tokens, tokens per call, measured tokens/s
 *     on the trained model, and PROJECTED tokens/s at 0.6B / 8B = tokens of
 *     the K examples / the sum of their replayed call times, with ratios to
 *     AR. A projection assumes the big model would make the same decisions
 *     (accept the same tokens) as the trained small one; it measures only
 *     what the calls cost.
 *
 * --clock cpu times every decode and every replayed call by the process's
 * CPU time instead of the wall clock: on a machine loaded by other jobs the
 * wall clock mostly measures the wait for a core. It is meaningful with
 * --threads 1 only (idle or spinning threads would be charged otherwise);
 * memory stalls are CPU time, so memory-bound calls are still costed.
 *
 * The prompt of an example is the chat template of its query, as training
 * and evaluation build it (rf_chat_query_ids). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "decode/decode.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

enum { D_AR, D_REFUSION, D_VERIFIED_A, D_VERIFIED_AB, D_JACOBI, D_FAST, D_ROLLING, N_DEC };
static const char *const dec_name[N_DEC] = {"AR", "ReFusion", "ReFusion AR-verified (a)",
                                            "ReFusion AR-verified (a)+(b)",
                                            "ReFusion AR-verified (a)+(b), jacobi",
                                            "ReFusion AR-verified (a)+(b), lookahead, jacobi",
                                            "ReFusion rolling slot"};

typedef struct {
    int n_prompt, tokens, calls;
    double wall;
    int log_from, log_to; /* this example's entries in the decoder's log */
} example_run;

typedef struct {
    rf_call_log log;
    example_run *ex;
    double replay_s[2];   /* 0.6B, 8B: replayed time of the first K examples */
    long replay_tokens[2], replay_calls[2];
} decoder_run;

/* seconds on the chosen clock */
static int use_cpu_clock;
static double now(void) {
    if (!use_cpu_clock) return rf_now();
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Replay entries [from, to) of a log on model m; returns the summed seconds
 * of the rf_forward calls (set-up excluded), or -1. */
static double replay(const rf_model *m, const rf_call_log *log, int from, int to) {
    int max_T = 1, max_main = 1, max_R = 1, row_cap = 1, max_logits = 1, max_ctx = 1;
    for (int i = from; i < to; i++) {
        const rf_call_rec *c = &log->rec[i];
        int T = c->n_rows * c->n_tok, per_row = c->forked ? (c->ctx_rows + c->n_rows - 1) / c->n_rows : 0;
        if (T > max_T) max_T = T;
        if (c->ctx_main + (c->forked ? 0 : c->n_tok) > max_main) max_main = c->ctx_main + (c->forked ? 0 : c->n_tok);
        if (c->forked && c->n_rows > max_R) max_R = c->n_rows;
        if (c->forked && per_row + c->n_tok > row_cap) row_cap = per_row + c->n_tok;
        if (c->n_logits > max_logits) max_logits = c->n_logits;
    }
    max_ctx = max_main + row_cap + max_T; /* what rf_forward checks a forked call against */
    rf_kvcache kv;
    rf_kv_init(&kv, &m->cfg, max_main);
    size_t main_bytes = (size_t)kv.n_layers * kv.cap * kv.kv_dim * sizeof(float);
    memset(kv.k, 0, main_bytes);
    memset(kv.v, 0, main_bytes);
    /* allocate the rows once, at their largest, and zero them */
    rf_kv_fork(&kv, max_R, row_cap);
    size_t row_bytes = (size_t)max_R * kv.n_layers * row_cap * kv.kv_dim * sizeof(float);
    memset(kv.row_k, 0, row_bytes);
    memset(kv.row_v, 0, row_bytes);
    rf_kv_unfork(&kv);
    rf_runstate *rs = rf_runstate_new(&m->cfg, max_T, max_ctx);
    float *logits = rf_malloc((size_t)max_logits * m->cfg.vocab_size * sizeof(float));
    int *tok = rf_calloc((size_t)max_T, sizeof(int)), *pos = rf_malloc((size_t)max_T * sizeof(int));
    int *lidx = rf_malloc((size_t)max_logits * sizeof(int));
    for (int i = 0; i < max_logits; i++) lidx[i] = i;
    double total = 0;
    for (int i = from; i < to && total >= 0; i++) {
        const rf_call_rec *c = &log->rec[i];
        if (kv.n_rows) rf_kv_unfork(&kv);
        kv.len = c->ctx_main; /* the contents do not change the cost: only the length */
        if (c->forked) {
            rf_kv_fork(&kv, c->n_rows, row_cap);
            for (int r = 0; r < c->n_rows; r++) kv.row_len[r] = c->ctx_rows / c->n_rows + (r < c->ctx_rows % c->n_rows);
        }
        for (int r = 0; r < c->n_rows; r++)
            for (int j = 0; j < c->n_tok; j++) pos[r * c->n_tok + j] = c->pos_min + j;
        rf_batch b = {c->n_rows, c->n_tok, tok, pos, c->bidirectional, c->n_logits, lidx, logits};
        double t0 = now();
        if (rf_forward(m, &kv, rs, &b)) total = -1;
        else total += now() - t0;
    }
    free(logits), free(tok), free(pos), free(lidx);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return total;
}

/* one 1-token call through every weight, twice: pages in an mmap'd model and
 * wakes the threads, so that the first replayed call is not charged for it */
static void warm_up(const rf_model *m) {
    rf_call_log log = {0};
    rf_call_rec c = {1, 1, 0, 16, 0, 1, 0, 16, 16};
    log.rec = &c, log.n = 1;
    replay(m, &log, 0, 1);
    replay(m, &log, 0, 1);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_decode_replay -m MODEL --data TASKS.json [-n 30] [--replay K] [--replay-8b K8]\n"
            "       [-8b DIR] [--no-06b] [--threads T] [--gen-length N] [--slot-size S] [--blocks B]\n"
            "       [--slot-threshold X] [--token-threshold X] [--rolling-slot W] [--rolling-threshold X]\n"
            "       [--clock wall|cpu]\n");
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *data = NULL, *dir8b = getenv("RF8B");
    int n_ex = 30, k06 = 6, k8 = 3, do06 = 1, threads = 0;
    rf_params base;
    rf_gen_params_default(&base);
    base.gen_length = 128, base.slot_size = 8, base.n_blocks = 2;
    int rolling_slot = 4; /* the rolling decoder's slot and draft threshold */
    float rolling_thr = 0.5f;
    base.slot_threshold = 0.9f, base.token_threshold = 0.4f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-06b")) {
            do06 = 0;
            continue;
        }
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) model_dir = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "-8b") || !strcmp(a, "--8b")) dir8b = v;
        else if (!strcmp(a, "-n")) n_ex = atoi(v);
        else if (!strcmp(a, "--replay")) k06 = atoi(v);
        else if (!strcmp(a, "--replay-8b")) k8 = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--gen-length")) base.gen_length = atoi(v);
        else if (!strcmp(a, "--slot-size")) base.slot_size = atoi(v);
        else if (!strcmp(a, "--blocks")) base.n_blocks = atoi(v);
        else if (!strcmp(a, "--rolling-slot")) rolling_slot = atoi(v);
        else if (!strcmp(a, "--rolling-threshold")) rolling_thr = (float)atof(v);
        else if (!strcmp(a, "--slot-threshold")) base.slot_threshold = (float)atof(v);
        else if (!strcmp(a, "--token-threshold")) base.token_threshold = (float)atof(v);
        else if (!strcmp(a, "--clock") && (!strcmp(v, "wall") || !strcmp(v, "cpu"))) use_cpu_clock = !strcmp(v, "cpu");
        else {
            usage();
            return 2;
        }
    }
    if (!model_dir || !data || n_ex < 1 || k06 < 0 || k8 < 0) {
        usage();
        return 2;
    }
    if (dir8b && !*dir8b) dir8b = NULL;
    if (threads > 0) omp_set_num_threads(threads);
    if (use_cpu_clock && omp_get_max_threads() > 1)
        fprintf(stderr, "bench_decode_replay: warning: --clock cpu with %d threads charges idle/spinning threads too\n",
                omp_get_max_threads());
    if (k06 > n_ex) k06 = n_ex;
    if (k8 > n_ex) k8 = n_ex;

    rf_model m;
    if (rf_model_load(&m, model_dir)) {
        rf_print_error();
        return 1;
    }
    rf_tokenizer *tok = rf_tok_load(model_dir);
    if (!tok) {
        rf_print_error();
        return 1;
    }
    json_error_t jerr;
    json_t *examples = json_load_file(data, 0, &jerr);
    if (!json_is_array(examples)) {
        fprintf(stderr, "bench_decode_replay: %s: not a JSON list (line %d: %s)\n", data, jerr.line, jerr.text);
        return 1;
    }
    if ((int)json_array_size(examples) < n_ex) n_ex = (int)json_array_size(examples);
    base.eos_id = rf_tok_eos_id(tok);
    base.mask_id = rf_tok_mask_id(tok);
    int **prompts = rf_calloc((size_t)n_ex, sizeof(int *)), *plen = rf_calloc((size_t)n_ex, sizeof(int));
    for (int i = 0; i < n_ex; i++) {
        const char *q = json_string_value(json_object_get(json_array_get(examples, i), "query"));
        if (!q || rf_chat_query_ids(tok, q, &prompts[i], &plen[i])) {
            fprintf(stderr, "bench_decode_replay: %s: example %d has no usable \"query\"\n", data, i);
            return 1;
        }
    }

    /* 1. decode with the trained model, logging every call */
    decoder_run run[N_DEC];
    memset(run, 0, sizeof run);
    for (int d = 0; d < N_DEC; d++) {
        rf_params p = base;
        p.ar_correct = d == D_VERIFIED_A || d == D_VERIFIED_AB || d == D_JACOBI || d == D_FAST;
        p.ar_check_first = d == D_VERIFIED_AB || d == D_JACOBI || d == D_FAST;
        p.jacobi = d == D_JACOBI || d == D_FAST;
        p.lookahead = d == D_FAST;
        if (d == D_ROLLING) p.rolling = 1, p.slot_size = rolling_slot, p.slot_threshold = rolling_thr;
        run[d].ex = rf_calloc((size_t)n_ex, sizeof(example_run));
        for (int i = 0; i < n_ex; i++) {
            rf_gen_result r;
            example_run *e = &run[d].ex[i];
            e->log_from = run[d].log.n;
            rf_call_log_attach(&run[d].log);
            double t0 = now();
            int rc = d == D_AR ? rf_generate_ar(&m, prompts[i], plen[i], &p, &r)
                               : rf_generate_refusion(&m, prompts[i], plen[i], &p, &r);
            e->wall = now() - t0;
            rf_call_log_attach(NULL);
            if (rc) {
                fprintf(stderr, "bench_decode_replay: %s, example %d: %s\n", dec_name[d], i, rf_last_error());
                return 1;
            }
            e->log_to = run[d].log.n;
            e->n_prompt = plen[i];
            e->tokens = r.n_tokens;
            e->calls = r.n_calls;
            int own_prefill = d == D_AR || d == D_ROLLING; /* both count the prefill as a call */
            int logged = rf_call_log_model_calls(&run[d].log, e->log_from, e->log_to, plen[i], own_prefill);
            if (logged != r.n_calls) {
                fprintf(stderr, "bench_decode_replay: %s, example %d: the log holds %d model calls, the decoder %d\n",
                        dec_name[d], i, logged, r.n_calls);
                return 1;
            }
            rf_gen_result_free(&r);
        }
    }

    /* 2. replay on the big shapes */
    const char *size_name[2] = {"0.6B", "8B"};
    int k_of[2] = {do06 ? k06 : 0, dir8b ? k8 : 0};
    double warm_s[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
        if (k_of[s] == 0) continue;
        rf_model big;
        double t0 = rf_now();
        if (s == 0) {
            rf_config c;
            rf_config_preset(&c, "0.6b");
            rf_model_init_random(&big, &c, RF_BF16, 0.02f, 1);
        } else if (rf_model_load(&big, dir8b)) {
            rf_print_error();
            return 1;
        }
        warm_up(&big);
        warm_s[s] = rf_now() - t0;
        for (int d = 0; d < N_DEC; d++) {
            int K = k_of[s];
            double t = replay(&big, &run[d].log, run[d].ex[0].log_from, run[d].ex[K - 1].log_to);
            if (t < 0) {
                rf_print_error();
                return 1;
            }
            run[d].replay_s[s] = t;
            for (int i = 0; i < K; i++) {
                run[d].replay_tokens[s] += run[d].ex[i].tokens;
                run[d].replay_calls[s] += run[d].ex[i].calls;
            }
            fprintf(stderr, "replayed %s on %s: %ld calls in %.1f s\n", dec_name[d], size_name[s],
                    run[d].replay_calls[s], t);
        }
        rf_model_free(&big);
    }

    /* 3. the table */
    printf("model %s (d=%d, L=%d, V=%d), %s: first %d examples; gen %d, slot %d, blocks %d, thresholds %g / %g; "
           "%d threads\n",
           model_dir, m.cfg.hidden_size, m.cfg.n_layers, m.cfg.vocab_size, data, n_ex, base.gen_length,
           base.slot_size, base.n_blocks, (double)base.slot_threshold, (double)base.token_threshold,
           omp_get_max_threads());
    printf("clock: %s\n", use_cpu_clock ? "process CPU time (the machine is shared: wall time would measure the wait)"
                                        : "wall");
    printf("PROJECTED = the trained model's call shapes (first K examples) replayed on random-weight models of the "
           "Qwen3 shape: tokens / replayed seconds. K = %d (0.6B), %d (8B).\n\n",
           k_of[0], k_of[1]);
    printf("| decoder | calls | tokens | tokens/call | measured tokens/s | vs AR | projected 0.6B tokens/s | vs AR | "
           "0.6B ms/call | projected 8B tokens/s | vs AR | 8B ms/call |\n");
    printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    double ar_meas = 0, ar_proj[2] = {0, 0};
    for (int d = 0; d < N_DEC; d++) {
        long calls = 0, tokens = 0;
        double wall = 0;
        for (int i = 0; i < n_ex; i++) calls += run[d].ex[i].calls, tokens += run[d].ex[i].tokens, wall += run[d].ex[i].wall;
        double meas = tokens / wall, proj[2];
        if (d == D_AR) ar_meas = meas;
        printf("| %s | %ld | %ld | %.2f | %.1f | %.2fx |", dec_name[d], calls, tokens, (double)tokens / calls, meas,
               meas / ar_meas);
        for (int s = 0; s < 2; s++) {
            if (!k_of[s]) {
                printf(" - | - | - |");
                continue;
            }
            proj[s] = run[d].replay_tokens[s] / run[d].replay_s[s];
            if (d == D_AR) ar_proj[s] = proj[s];
            printf(" %.2f | %.2fx | %.1f |", proj[s], proj[s] / ar_proj[s],
                   1000.0 * run[d].replay_s[s] / run[d].replay_calls[s]);
        }
        printf("\n");
    }
    printf("\n(model set-up + warm-up: 0.6B %.1f s, 8B %.1f s; not in the figures)\n", warm_s[0], warm_s[1]);

    for (int d = 0; d < N_DEC; d++) {
        rf_call_log_free(&run[d].log);
        free(run[d].ex);
    }
    for (int i = 0; i < n_ex; i++) free(prompts[i]);
    free(prompts), free(plen);
    json_decref(examples);
    rf_tok_free(tok);
    rf_model_free(&m);
    return 0;
}
