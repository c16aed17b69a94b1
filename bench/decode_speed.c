/* decode_speed.c - ReFusion vs AR decoding on one model: throughput and
 * where the model calls go.
 *
 *   bench_decode_speed [-m MODEL_DIR | --preset NAME] [--ids 1,2,3] [-n GEN]
 *                      [--slot S] [--blocks B] [--st X] [--tt X] [--reps R]
 *
 * Without -m an in-memory random model of the preset's shape (default
 * "small", bf16, std 0.5 so that the random logits are peaky enough to make
 * ReFusion plan several slots and take the fast path sometimes) is used.
 * Prints per decoder: tokens, model calls, TPF (the reference's), tokens per
 * call, tokens/s (best of reps), and for ReFusion the per-step averages
 * (slots planned, share of fast-path steps, infill iterations, tokens per
 * step), i.e. the statistics the paper's throughput claims rest on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "util/util.h"

static void report(const char *name, const rf_gen_result *r, double best_s) {
    printf("%-10s %6d tokens %6d calls  TPF %5.2f  tok/call %5.2f  %8.1f tok/s  %7.3f s\n", name, r->n_tokens,
           r->n_calls, r->tpf, r->tokens_per_call, r->n_tokens / best_s, best_s);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *preset = "small", *ids = "1,2,3,4,5,6,7,8";
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 64, p.slot_size = 8, p.n_blocks = 2, p.slot_threshold = 0.6f, p.token_threshold = 0.3f;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m")) dir = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--ids")) ids = v;
        else if (!strcmp(a, "-n")) p.gen_length = atoi(v);
        else if (!strcmp(a, "--slot")) p.slot_size = atoi(v);
        else if (!strcmp(a, "--blocks")) p.n_blocks = atoi(v);
        else if (!strcmp(a, "--st")) p.slot_threshold = (float)atof(v);
        else if (!strcmp(a, "--tt")) p.token_threshold = (float)atof(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    rf_model m;
    if (dir) {
        if (rf_model_load(&m, dir)) {
            rf_print_error();
            return 1;
        }
    } else {
        rf_config c;
        if (rf_config_preset(&c, preset)) {
            rf_print_error();
            return 1;
        }
        rf_model_init_random(&m, &c, RF_BF16, 0.5f, 1);
    }
    int prompt[4096], P = 0;
    for (const char *s = ids; *s && P < 4096;) {
        prompt[P++] = (int)strtol(s, (char **)&s, 10);
        while (*s == ',' || *s == ' ') s++;
    }
    p.eos_id = -1; /* full-length answers: comparable work */
    printf("model %s: d=%d L=%d V=%d; prompt %d, gen %d, slot %d, blocks %d, thresholds %.2f/%.2f\n",
           dir ? dir : preset, m.cfg.hidden_size, m.cfg.n_layers, m.cfg.vocab_size, P, p.gen_length, p.slot_size,
           p.n_blocks, p.slot_threshold, p.token_threshold);
    for (int mode = 0; mode < 2; mode++) {
        rf_gen_result r, best;
        double bs = 1e30;
        memset(&best, 0, sizeof best);
        for (int k = 0; k < reps; k++) {
            int rc = mode ? rf_generate_ar(&m, prompt, P, &p, &r) : rf_generate_refusion(&m, prompt, P, &p, &r);
            if (rc) {
                rf_print_error();
                return 1;
            }
            if (r.wall_s < bs) {
                bs = r.wall_s;
                rf_gen_result_free(&best);
                best = r;
            } else {
                rf_gen_result_free(&r);
            }
        }
        report(mode ? "ar" : "refusion", &best, bs);
        if (!mode) {
            double planned = 0, fast = 0, iters = 0, tok = 0;
            int ninf = 0;
            for (int s = 0; s < best.n_steps; s++) {
                planned += best.steps[s].slots_planned;
                fast += best.steps[s].slots_fast > 0;
                if (best.steps[s].infill_iters) iters += best.steps[s].infill_iters, ninf++;
                tok += best.steps[s].tokens;
            }
            int n = best.n_steps ? best.n_steps : 1;
            printf("           %d steps: %.2f slots planned/step, %.0f%% fast-path steps, %.2f iterations/infill, "
                   "%.2f tokens/step\n",
                   best.n_steps, planned / n, 100.0 * fast / n, ninf ? iters / ninf : 0.0, tok / n);
        }
        rf_gen_result_free(&best);
    }
    rf_model_free(&m);
    return 0;
}
