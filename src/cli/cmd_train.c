/* cmd_train.c - `refusion train`: train a ReFusion model (or the AR / MDM
 * baselines) on {"query", "response"} data; see src/train/train.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "train/train.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: refusion train --data FILE[,FILE..] -o DIR [options]\n"
"\n"
"Train on a JSON list of {\"query\", \"response\"} objects (or JSON Lines), tokenised\n"
"with the chat template. DIR receives a checkpoint in the Hugging Face layout\n"
"(config.json, model.safetensors, tokenizer files) plus optimizer.bin, log.csv\n"
"(every step) and loss.png. Ctrl-C saves and exits; --resume continues.\n"
"\n"
"model:\n"
"  --init DIR           start from this checkpoint (its tokenizer by default)\n"
"  --config NAME|FILE   new random model: preset (tiny, small, ...) or config.json\n"
"                       (default tiny; the vocabulary is sized to the tokenizer)\n"
"  --tokenizer PATH     tokenizer.json or a directory holding it\n"
"  --init-std X         std of the random init (default 0.02)\n"
"  --resume             continue the run saved in DIR (same data and options)\n"
"objective:\n"
"  --objective O        refusion (default) | ar | mdm\n"
"  --slot-sizes LIST    refusion slot sizes (default 4,8,16,32)\n"
"  --mdm-pad N          mdm: EOS-pad responses to N tokens as LLaDA's SFT does\n"
"  --aux-ar W           refusion, beyond the paper: also train each example in natural\n"
"                       order with the AR loss, weight W (default 0 = off)\n"
"  --mask-floor F       refusion: draw t ~ U(F, 1) instead of U(0, 1) (default 0)\n"
"optimisation:\n"
"  --batch N            examples per micro-batch (default 8)\n"
"  --seq-len N          longest example in tokens (default 512)\n"
"  --accum N            micro-batches per optimizer step (default 1)\n"
"  --steps N | --epochs X   length of the run (default 1 epoch)\n"
"  --lr X               peak learning rate (default 3e-4)\n"
"  --min-lr X           end of the cosine decay (default 0)\n"
"  --warmup N           linear warm-up steps (default 0)\n"
"  --weight-decay X     AdamW decoupled weight decay on matrices (default 0)\n"
"  --beta2 X            AdamW beta2 (default 0.999)\n"
"  --clip X             gradient clipping by global norm, 0 = off (default 1)\n"
"  --seed N             data order, masking and init (default 1)\n"
"  --threads N          OpenMP / OpenBLAS threads\n"
"run:\n"
"  --save-every N       checkpoint every N steps (default: at the end)\n"
"  --stop-at N          save and stop after step N (the schedule still spans --steps)\n"
"  --skip-long          drop examples longer than --seq-len instead of failing\n"
"  --log-every N        progress line period when stderr is not a terminal (10)\n"
"  --no-plot            no gnuplot loss curve\n"
"  -q, --quiet          no progress output\n");
}

static int parse_sizes(const char *s, rf_train_opts *o) {
    o->n_slot_sizes = 0;
    char *copy = rf_strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 4096 || o->n_slot_sizes == 8) {
            free(copy);
            return -1;
        }
        o->slot_sizes[o->n_slot_sizes++] = (int)v;
    }
    free(copy);
    return o->n_slot_sizes ? 0 : -1;
}

static int num(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (*v == 0 || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "refusion: %s: bad value '%s'\n", opt, v);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_train(int argc, char **argv) {
    rf_train_opts o;
    rf_train_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--resume")) { o.resume = 1; continue; }
        if (!strcmp(a, "--skip-long")) { o.skip_long = 1; continue; }
        if (!strcmp(a, "--no-plot")) { o.plot = 0; continue; }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o.quiet = 1; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "refusion: train: unknown option or missing value: %s\n", a);
            return 2;
        }
        const char *v = argv[++i];
        double x = 0;
#define NUM(lo, hi) if (num(a, v, lo, hi, &x)) return 2
        if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--init")) o.init = v;
        else if (!strcmp(a, "--config")) o.config = v;
        else if (!strcmp(a, "--tokenizer")) o.tokenizer = v;
        else if (!strcmp(a, "--objective")) {
            if (rf_objective_parse(v, &o.obj)) {
                fprintf(stderr, "refusion: --objective: '%s' is not refusion, ar or mdm\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--slot-sizes")) {
            if (parse_sizes(v, &o)) {
                fprintf(stderr, "refusion: --slot-sizes: bad list '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--batch")) { NUM(1, 1 << 20); o.batch = (int)x; }
        else if (!strcmp(a, "--seq-len")) { NUM(2, 1 << 20); o.seq_len = (int)x; }
        else if (!strcmp(a, "--accum")) { NUM(1, 1 << 20); o.accum = (int)x; }
        else if (!strcmp(a, "--mdm-pad")) { NUM(0, 1 << 20); o.mdm_pad = (int)x; }
        else if (!strcmp(a, "--aux-ar")) { NUM(0, 100); o.aux_ar = (float)x; }
        else if (!strcmp(a, "--mask-floor")) { NUM(0, 0.999); o.mask_floor = (float)x; }
        else if (!strcmp(a, "--steps")) { NUM(1, 1e12); o.steps = (long)x; }
        else if (!strcmp(a, "--epochs")) { NUM(1e-9, 1e9); o.epochs = x; }
        else if (!strcmp(a, "--lr")) { NUM(0, 10); o.opt.lr = (float)x; }
        else if (!strcmp(a, "--min-lr")) { NUM(0, 10); o.opt.min_lr = (float)x; }
        else if (!strcmp(a, "--warmup")) { NUM(0, 1e12); o.opt.warmup = (long)x; }
        else if (!strcmp(a, "--weight-decay")) { NUM(0, 10); o.opt.weight_decay = (float)x; }
        else if (!strcmp(a, "--beta2")) { NUM(0, 1); o.opt.beta2 = (float)x; }
        else if (!strcmp(a, "--clip")) { NUM(0, 1e9); o.opt.clip = (float)x; }
        else if (!strcmp(a, "--seed")) { NUM(0, 1.8e19); o.seed = (uint64_t)x; }
        else if (!strcmp(a, "--threads")) { NUM(1, 1024); o.threads = (int)x; }
        else if (!strcmp(a, "--save-every")) { NUM(0, 1e12); o.save_every = (long)x; }
        else if (!strcmp(a, "--stop-at")) { NUM(1, 1e12); o.stop_at = (long)x; }
        else if (!strcmp(a, "--init-std")) { NUM(0, 10); o.init_std = (float)x; }
        else if (!strcmp(a, "--log-every")) { NUM(1, 1e9); o.log_every = (int)x; }
        else {
            fprintf(stderr, "refusion: train: unknown option %s (see --help)\n", a);
            return 2;
        }
#undef NUM
    }
    if (!o.data || !o.out) {
        fprintf(stderr, "refusion: train: --data and -o DIR are required (see --help)\n");
        return 2;
    }
    if (o.init && o.resume) {
        fprintf(stderr, "refusion: train: --init and --resume exclude each other\n");
        return 2;
    }
    rf_train_env_setup(); /* may re-exec this very command line */
    if (rf_train_run(&o)) {
        rf_print_error();
        return 1;
    }
    return 0;
}
