/* cmd_train.c - `refusion train`: train a ReFusion model (or the AR / MDM
 * baselines) on {"query", "response"} data; see src/train/train.h.
 *
 * The library runs the training (rf_train_run); this program does what a
 * program does around it: the OpenBLAS / OpenMP environment (re-executing
 * itself once to set it), MPI start-up when mpirun launched it, Ctrl-C
 * (a stop flag the trainer checks after each step), the progress bar or
 * progress lines, and the gnuplot loss curve at the end. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <unistd.h>

#include "cli/commands.h"
#include "train/train.h"
#include "util/cleanup.h"
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
"Several processes (data parallel, when built with Open MPI):\n"
"  mpirun -np N refusion train ...   each process trains on 1/N of every\n"
"  micro-batch; the result equals the one-process run (same --batch, see README)\n"
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
"  --threads N          OpenMP / OpenBLAS threads (per process)\n"
"run:\n"
"  --save-every N       checkpoint every N steps (default: at the end)\n"
"  --stop-at N          save and stop after step N (the schedule still spans --steps)\n"
"  --skip-long          drop examples longer than --seq-len instead of failing\n"
"  --log-every N        progress line period when stderr is not a terminal (10)\n"
"  --no-plot            no gnuplot loss curve\n"
"  -q, --quiet          no progress output\n"
"  --json               at the end, the run's figures as one JSON object on stdout (rank 0)\n"
"  --mpi                require an MPI launch (implied under mpirun when built with MPI)\n"
"  --allreduce M        several processes: sum the gradients in one call after the\n"
"                       backward (flat, default) or in buckets overlapped with it (buckets)\n"
"  --bucket-mb X        buckets: whole layers, at least X MB each (default 1)\n"
"\n"
"This build: %s.\n", rf_dist_compiled() ? "with MPI (data-parallel training)" : "without MPI");
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

/* ---- the run environment ------------------------------------------------------- */

/* Set what the library advises (rf_train_env_advice) and re-execute this
 * command line once, since OpenBLAS and OpenMP read those variables only when
 * they load. Returns when nothing needed doing or the exec failed. */
static void env_setup(void) {
    if (getenv("RF_TRAIN_ENV_DONE")) return; /* re-executed already */
    const char *names[2], *values[2];
    int n = rf_train_env_advice(names, values);
    if (n == 0) return;
    for (int i = 0; i < n; i++) setenv(names[i], values[i], 1);
    size_t len;
    char *cmd = rf_read_file("/proc/self/cmdline", &len);
    if (!cmd || len == 0) {
        free(cmd);
        return;
    }
    int argc = 0;
    for (size_t i = 0; i < len; i++) argc += cmd[i] == 0;
    char **argv = rf_calloc((size_t)argc + 1, sizeof(char *));
    for (size_t i = 0, a = 0; i < len && (int)a < argc; a++) {
        argv[a] = cmd + i;
        i += strlen(cmd + i) + 1;
    }
    setenv("RF_TRAIN_ENV_DONE", "1", 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    free(argv); /* exec failed: carry on as we are */
    free(cmd);
}

/* ---- Ctrl-C ---------------------------------------------------------------------- */

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

/* ---- progress --------------------------------------------------------------------- */

typedef struct {
    int quiet, tty, log_every, rank;
    long total, step0;
    double t_run, tokens_run, t_drawn;
    long last_step;
    rf_tloss last_loss; /* of the last step (--json) */
    double last_lr, comm_s, step_s;
} progress_state;

static void fmt_time(char *buf, size_t n, double s) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

static void on_start(void *user, const rf_trainer_info *in) {
    progress_state *p = user;
    p->total = in->total_steps;
    p->step0 = p->last_step = in->start_step;
    p->t_run = rf_now();
    if (p->quiet || p->rank != 0) return;
    if (in->n_skipped)
        fprintf(stderr, "refusion: skipped %d examples longer than --seq-len\n", in->n_skipped);
    char procs[64] = "";
    if (in->n_ranks > 1)
        snprintf(procs, sizeof procs, " on %d processes (MPI)", in->n_ranks);
    fprintf(stderr, "train: %.2fM params, %d examples (%ld tokens), %ld steps%s, %zu MB activations "
            "per process%s\n", in->n_params / 1e6, in->n_examples, in->n_tokens, in->total_steps,
            procs, in->act_bytes >> 20, in->resumed ? " (resumed)" : "");
}

static void on_step(void *user, const rf_step_info *s) {
    progress_state *p = user;
    p->last_step = s->step;
    p->tokens_run += (double)s->tokens;
    p->last_loss = s->loss;
    p->last_lr = s->lr;
    p->comm_s += s->comm_seconds;
    p->step_s += s->seconds;
    if (p->quiet || p->rank != 0) return;
    double run_time = rf_now() - p->t_run, tps = p->tokens_run / (run_time > 0 ? run_time : 1e-9);
    double eta = run_time / (double)(s->step - p->step0) * (double)(s->total - s->step);
    int last = s->step == s->total || s->stop || g_stop;
    char e[32];
    fmt_time(e, sizeof e, eta);
    if (p->tty) {
        if (!last && rf_now() - p->t_drawn < 0.1) return; /* redraw at most 10x a second */
        int width = 24, fill = (int)((double)width * s->step / (s->total ? s->total : 1));
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] step %ld/%ld  loss %.4f (ar %.4f mdm %.4f)  lr %.2e  %.0f tok/s  ETA %s \033[K%s",
                bar, s->step, s->total, s->loss.loss, s->loss.ar, s->loss.mdm, s->lr, tps, e,
                last ? "\n" : "");
        p->t_drawn = rf_now();
    } else if (s->step % p->log_every == 0 || s->step == p->step0 + 1 || last) {
        fprintf(stderr, "step %ld/%ld  loss %.4f (ar %.4f mdm %.4f)  lr %.2e  %.0f tok/s  ETA %s\n",
                s->step, s->total, s->loss.loss, s->loss.ar, s->loss.mdm, s->lr, tps, e);
    }
}

/* ---- gnuplot ------------------------------------------------------------------------ */

static void plot_loss(const char *dir, int quiet) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "refusion: warning: gnuplot not found, no loss plot\n");
        return;
    }
    char *csv = rf_path_join(dir, "log.csv"), *script = rf_path_join(dir, "loss.gp.tmp");
    /* the script and the image being drawn go if a signal ends train meanwhile */
    int script_slot = rf_cleanup_add_path(script);
    const char *terms[2][3] = {{"pngcairo size 1000,600", "loss.png", "png"},
                               {"svg size 1000,600", "loss.svg", "svg"}};
    for (int t = 0; t < 2; t++) {
        char *outp = rf_path_join(dir, terms[t][1]);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", outp);
        FILE *f = fopen(script, "w");
        if (!f) {
            free(outp);
            break;
        }
        int tmp_slot = rf_cleanup_add_path(tmp);
        fprintf(f,
                "set terminal %s\nset output '%s'\nset datafile separator ','\n"
                "set key autotitle columnhead\nset xlabel 'step'\nset ylabel 'loss'\nset grid\n"
                "set title 'training loss'\n"
                "plot '%s' using 1:3 with lines lw 2 title 'loss', "
                "'' using 1:4 with lines title 'AR part', '' using 1:5 with lines title 'MDM part'\n",
                terms[t][0], tmp, csv);
        fclose(f);
        char cmd[8800];
        snprintf(cmd, sizeof cmd, "gnuplot '%s' >/dev/null 2>&1", script);
        int ok = system(cmd) == 0 && access(tmp, F_OK) == 0 && rename(tmp, outp) == 0;
        if (!ok) unlink(tmp);
        rf_cleanup_drop(tmp_slot);
        if (ok && !quiet) fprintf(stderr, "loss curve: %s\n", outp);
        free(outp);
        if (ok) break;
        if (t == 1) fprintf(stderr, "refusion: warning: gnuplot failed, no loss plot\n");
    }
    unlink(script);
    rf_cleanup_drop(script_slot);
    free(csv);
    free(script);
}

int cmd_train(int argc, char **argv) {
    rf_train_opts o;
    rf_train_opts_default(&o);
    int plot = 1, quiet = 0, log_every = 10, want_mpi = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--resume")) { o.resume = 1; continue; }
        if (!strcmp(a, "--skip-long")) { o.skip_long = 1; continue; }
        if (!strcmp(a, "--no-plot")) { plot = 0; continue; }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--mpi")) { want_mpi = 1; continue; }
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
        else if (!strcmp(a, "--log-every")) { NUM(1, 1e9); log_every = (int)x; }
        else if (!strcmp(a, "--bucket-mb")) { NUM(1e-6, 1e6); o.bucket_mb = x; }
        else if (!strcmp(a, "--allreduce")) {
            if (strcmp(v, "flat") && strcmp(v, "buckets")) {
                fprintf(stderr, "refusion: --allreduce: '%s' is not buckets or flat\n", v);
                return 2;
            }
            o.bucketed_allreduce = !strcmp(v, "buckets");
        }
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
    env_setup(); /* may re-exec this very command line */
    /* outside the run (its own handlers stop it at a step's end and save):
     * a signal removes the temporary files being written */
    cli_cleanup_on_signals();

    /* MPI: under mpirun (its environment names the processes) or --mpi */
    int launched = rf_dist_launched();
    if ((want_mpi || launched > 1) && !rf_dist_compiled()) {
        fprintf(stderr, "refusion: train: %s, but this refusion was built without MPI: the %d "
                "processes would each train alone; install Open MPI (scripts/install-deps.sh: "
                "libopenmpi-dev openmpi-bin) and rebuild\n",
                launched > 1 ? "started by an MPI launcher" : "--mpi given",
                launched > 1 ? launched : 1);
        return 2;
    }
    int mpi = rf_dist_compiled() && (want_mpi || launched > 0);
    if (mpi && rf_dist_init()) {
        rf_print_error();
        return 1;
    }
    int rank = rf_dist_rank();

    progress_state ps = {.quiet = quiet, .tty = isatty(2) && !quiet, .log_every = log_every,
                         .rank = rank};
    rf_train_hooks hooks = {.on_start = on_start, .on_step = on_step, .stop = &g_stop, .user = &ps};
    g_stop = 0;
    /* Ctrl-C, and SIGTERM (kill, a service manager, and mpirun: on Ctrl-C
     * it sends SIGTERM to every rank, then SIGKILL after a grace period):
     * finish the step, save, exit 0. The stop request is reduced over the
     * ranks with the step's losses, so every rank stops at the same step. */
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rf_train_result res;
    int rc = rf_train_run(&o, &hooks, &res);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc) {
        if (rank == 0 || !res.error_shared) {
            if (rf_dist_size() > 1) fprintf(stderr, "refusion: rank %d: %s\n", rank, rf_last_error());
            else rf_print_error();
        }
        if (mpi) rf_dist_finalize();
        return 1;
    }
    if (rank == 0) {
        if (res.stopped)
            fprintf(stderr, "refusion: interrupted: saved step %ld to %s (continue with --resume)\n",
                    res.step, o.out);
        if (!quiet)
            fprintf(stderr, "saved %s (step %ld, %.0f tokens seen; %ld of %ld steps of this run had "
                    "their gradient clipped)\n", o.out, res.step, res.tokens_seen, res.n_clipped,
                    res.steps_run);
        if (plot) plot_loss(o.out, quiet);
        if (json) {
            double secs = rf_now() - ps.t_run;
            json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i}", "out", o.out,
                                  "step", (json_int_t)res.step, "steps_run", (json_int_t)res.steps_run,
                                  "clipped", (json_int_t)res.n_clipped, "stopped", res.stopped, "tokens_seen",
                                  res.tokens_seen, "loss", (double)ps.last_loss.loss, "loss_ar",
                                  (double)ps.last_loss.ar, "loss_mdm", (double)ps.last_loss.mdm, "lr",
                                  ps.last_lr, "seconds", secs, "tokens_per_s",
                                  secs > 0 ? ps.tokens_run / secs : 0.0, "ranks", rf_dist_size());
            json_object_set_new(j, "allreduce_frac", json_real(ps.step_s > 0 ? ps.comm_s / ps.step_s : 0.0));
            char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
            printf("%s\n", txt ? txt : "{}");
            free(txt);
            json_decref(j);
        }
    }
    if (mpi) rf_dist_finalize();
    return 0;
}
