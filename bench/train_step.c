/* train_step.c - training throughput: tokens/s and achieved GFLOP/s of one
 * full step (forward + loss + backward + AdamW) against this machine's
 * measured f32 FMA peak, for a small model and a ~50M-parameter one.
 *
 *   bench_train_step [--model small|50m|both] [--steps N] [--batch B] [--seq T]
 *                    [--objective refusion|ar|mdm] [--threads N]
 *
 * FLOPs counted: 3 x forward (backward ~ 2 x forward), forward = 2 x params
 * x tokens for the matmuls + 4 x head_dim per attended (query, key) pair per
 * head + the vocabulary projection of the tokens that carry a loss. The batch
 * is synthetic (random ids; prompt 1/8 of each example), built by the real
 * objective. The figure is the fastest step after one warm-up step. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/roofline.h"
#include "train/train.h"

char *openblas_get_corename(void);

static void shape(rf_config *c, const char *name) {
    memset(c, 0, sizeof *c);
    c->rms_eps = 1e-6f;
    c->rope_theta = 1e6f;
    c->max_pos = 4096;
    c->tie_embeddings = 1;
    c->bos_id = c->pad_id = -1;
    if (!strcmp(name, "small")) { /* ~3.5M: the size the test-suite models grow to */
        c->hidden_size = 256, c->intermediate_size = 768, c->n_layers = 4;
        c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 64, c->vocab_size = 4096;
    } else { /* ~52M: d 512, 14 layers, GQA 8/4, vocab 16384 tied */
        c->hidden_size = 512, c->intermediate_size = 1536, c->n_layers = 14;
        c->n_heads = 8, c->n_kv_heads = 4, c->head_dim = 64, c->vocab_size = 16384;
    }
    c->eos_id = 1;
    c->mask_id = c->vocab_size - 1;
    c->bot_id = c->vocab_size - 2;
}

static void run(const char *name, rf_objective obj, int B, int T, int steps, double peak) {
    rf_config c;
    shape(&c, name);
    rf_tmodel m;
    rf_tmodel_init(&m, &c);
    rf_tmodel_randomize(&m, 0.02f, 1);
    rf_optcfg oc;
    rf_optcfg_default(&oc);
    oc.total = steps + 1;
    rf_adamw opt;
    rf_adamw_init(&opt, &oc, m.n_params);
    rf_rng r;
    rf_rng_seed(&r, 7);
    rf_example *ex = calloc((size_t)B, sizeof *ex);
    const rf_example **ep = calloc((size_t)B, sizeof *ep);
    for (int s = 0; s < B; s++) {
        ex[s].n_prompt = T / 8;
        ex[s].n_resp = T - T / 8;
        ex[s].ids = malloc(sizeof(int) * (size_t)T);
        for (int i = 0; i < T; i++) ex[s].ids[i] = 2 + (int)rf_rng_below(&r, (uint64_t)c.vocab_size - 4);
        ep[s] = &ex[s];
    }
    rf_objcfg obc;
    rf_objcfg_default(&obc, obj, c.mask_id);
    rf_tbatch b = {0};
    rf_tacts *a = rf_tacts_new(&c, B * T);
    double best = 1e30, flops = 0;
    int ntok = 0;
    for (int it = 0; it <= steps; it++) {
        rf_tbatch_build(&b, &obc, ep, B, 1.0f, &r);
        double t0 = rf_now();
        memset(m.grads, 0, m.n_params * sizeof(float));
        rf_tloss l;
        if (rf_train_step_fb(&m, a, &b, 1, &l)) {
            fprintf(stderr, "%s\n", rf_last_error());
            exit(1);
        }
        rf_adamw_step(&opt, &m, rf_lr_at(&oc, it));
        double dt = rf_now() - t0;
        if (it > 0 && dt < best) { /* step 0 warms caches and page tables */
            best = dt;
            flops = rf_train_flops(&c, &b);
            ntok = b.n_tok;
        }
    }
    double gf = flops / best / 1e9;
    printf("%-6s %6.1fM params  %-8s batch %dx%d  %6.3f s/step  %8.0f tok/s  %7.1f GFLOP/s  "
           "%5.1f%% of FMA peak  (act %zu MB)\n",
           name, m.n_params / 1e6, rf_objective_name(obj), B, T, best, ntok / best, gf,
           100.0 * gf / peak, rf_tacts_bytes(a) >> 20);
    rf_tacts_free(a);
    rf_tbatch_free(&b);
    for (int s = 0; s < B; s++) free(ex[s].ids);
    free(ex);
    free(ep);
    rf_adamw_free(&opt);
    rf_tmodel_free(&m);
}

int main(int argc, char **argv) {
    const char *model = "both";
    int steps = 3, B = 8, T = 256, threads = 0;
    rf_objective obj = RF_OBJ_REFUSION;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--objective") && !rf_objective_parse(argv[i + 1], &obj)) {}
        else {
            fprintf(stderr, "usage: bench_train_step [--model small|50m|both] [--steps N] "
                            "[--batch B] [--seq T] [--objective O] [--threads N]\n");
            return 2;
        }
    }
    const char *names[2], *values[2]; /* OpenBLAS / OpenMP read these only at load: re-exec */
    int n_env = getenv("RF_TRAIN_ENV_DONE") ? 0 : rf_train_env_advice(names, values);
    for (int i = 0; i < n_env; i++) setenv(names[i], values[i], 1);
    if (n_env && !setenv("RF_TRAIN_ENV_DONE", "1", 1)) execv("/proc/self/exe", argv);
    if (threads > 0) omp_set_num_threads(threads), openblas_set_num_threads(threads);
    double peak = rf_measure_fma_gflops();
    printf("threads %d, OpenBLAS kernels %s, measured f32 FMA peak %.1f GFLOP/s\n",
           omp_get_max_threads(), openblas_get_corename(), peak);
    if (strcmp(model, "50m")) run("small", obj, B, T, steps, peak);
    if (strcmp(model, "small")) run("50m", obj, B, T, steps, peak);
    return 0;
}
