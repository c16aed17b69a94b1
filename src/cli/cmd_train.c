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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <unistd.h>

#include "cli/commands.h"
#include "train/train.h"
#include "util/cleanup.h"
#include "util/util.h"

/* what this program does around the run */
typedef struct {
    int no_plot, quiet, log_every, want_mpi, json;
    const char *slot_sizes;
} train_cli;
/* the command line's values: the run's options and this program's */
typedef struct {
    rf_train_opts o;
    train_cli c;
} train_args;

_Static_assert(sizeof(rf_objective) == sizeof(int), "--objective stores a choice index (an int)");
_Static_assert(sizeof(long) == sizeof(int64_t), "the step counts are read as 64-bit integers");

#define O(f) offsetof(train_args, o.f)
#define C(f) offsetof(train_args, c.f)
#define ROW_INT(nm, f, lo_, hi_, what) \
    {.name = nm, .type = RF_OPT_INT, .lo = lo_, .hi = hi_, .offset = O(f), .metavar = "N", .help = what}
#define ROW_I64(nm, f, lo_, hi_, what) \
    {.name = nm, .type = RF_OPT_I64, .lo = lo_, .hi = hi_, .offset = O(f), .metavar = "N", .help = what}
#define ROW_REAL(nm, f, lo_, hi_, what) \
    {.name = nm, .type = RF_OPT_FLOAT, .lo = lo_, .hi = hi_, .offset = O(f), .metavar = "X", .help = what}
static const rf_opt model_opts[] = {
    {.name = "data", .type = RF_OPT_STR, .offset = O(data), .metavar = "FILE[,FILE..]",
     .help = "JSON lists of {\"query\", \"response\"} objects (or JSON Lines)"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = O(out), .metavar = "DIR",
     .help = "the checkpoint (config.json, model.safetensors, tokenizer files), optimizer.bin, log.csv, loss.png"},
    {.name = "init", .type = RF_OPT_STR, .offset = O(init), .metavar = "DIR",
     .help = "start from this checkpoint (its tokenizer by default)"},
    {.name = "config", .type = RF_OPT_STR, .offset = O(config), .metavar = "NAME|FILE",
     .help = "new random model: preset (tiny, small, ...) or config.json (default tiny; the vocabulary is sized to "
             "the tokenizer)"},
    {.name = "tokenizer", .type = RF_OPT_STR, .offset = O(tokenizer), .metavar = "PATH",
     .help = "tokenizer.json or a directory holding it"},
    ROW_REAL("init-std", init_std, 0, 10, "std of the random init"),
    {.name = "resume", .type = RF_OPT_FLAG, .offset = O(resume), .help = "continue the run saved in DIR (same data and options)"},
};
static const rf_opt objective_opts[] = {
    {.name = "objective", .type = RF_OPT_CHOICE, .choices = "refusion|ar|mdm", .offset = O(obj), .metavar = "O",
     .help = "refusion, ar or mdm"},
    ROW_INT("mdm-pad", mdm_pad, 0, 1 << 20, "mdm: EOS-pad responses to N tokens as LLaDA's SFT does"),
    ROW_REAL("aux-ar", aux_ar, 0, 100, "refusion, beyond the paper: also train each example in natural order with the "
                                       "AR loss, weight X (0 = off)"),
    ROW_REAL("mask-floor", mask_floor, 0, 0.999, "refusion: draw t ~ U(X, 1) instead of U(0, 1)"),
    {.name = "slot-sizes", .type = RF_OPT_STR, .offset = C(slot_sizes), .metavar = "LIST",
     .help = "refusion slot sizes, comma-separated (default 4,8,16,32)"},
};
static const rf_opt optim_opts[] = {
    ROW_INT("batch", batch, 1, 1 << 20, "examples per micro-batch"),
    ROW_INT("seq-len", seq_len, 2, 1 << 20, "longest example in tokens"),
    ROW_INT("accum", accum, 1, 1 << 20, "micro-batches per optimizer step"),
    ROW_I64("steps", steps, 1, 1e12, "length of the run in optimizer steps (default: --epochs)"),
    {.name = "epochs", .type = RF_OPT_DOUBLE, .lo = 1e-9, .hi = 1e9, .offset = O(epochs), .metavar = "X",
     .help = "length of the run in passes over the data, when --steps is not given"},
    ROW_REAL("lr", opt.lr, 0, 10, "peak learning rate"),
    ROW_REAL("min-lr", opt.min_lr, 0, 10, "end of the cosine decay"),
    ROW_I64("warmup", opt.warmup, 0, 1e12, "linear warm-up steps"),
    ROW_REAL("weight-decay", opt.weight_decay, 0, 10, "AdamW decoupled weight decay on matrices"),
    ROW_REAL("beta2", opt.beta2, 0, 1, "AdamW beta2"),
    ROW_REAL("clip", opt.clip, 0, 1e9, "gradient clipping by global norm, 0 = off"),
    {.name = "seed", .type = RF_OPT_I64, .lo = 0, .hi = 9.3e18, .offset = O(seed), .metavar = "N",
     .help = "data order, masking and init"},
    ROW_INT("threads", threads, 1, 1024, "OpenMP / OpenBLAS threads (per process)"),
};
static const rf_opt run_opts[] = {
    ROW_I64("save-every", save_every, 0, 1e12, "checkpoint every N steps; 0: at the end"),
    ROW_I64("stop-at", stop_at, 1, 1e12, "save and stop after step N (the schedule still spans --steps)"),
    {.name = "skip-long", .type = RF_OPT_FLAG, .offset = O(skip_long),
     .help = "drop examples longer than --seq-len instead of failing"},
    {.name = "allreduce", .type = RF_OPT_CHOICE, .choices = "flat|buckets", .offset = O(bucketed_allreduce),
     .metavar = "M", .help = "several processes: sum the gradients in one call after the backward (flat) or in "
                             "buckets overlapped with it (buckets)"},
    {.name = "bucket-mb", .type = RF_OPT_DOUBLE, .lo = 1e-6, .hi = 1e6, .offset = O(bucket_mb), .metavar = "X",
     .help = "buckets: whole layers, at least X MB each (default 1)"},
    {.name = "log-every", .type = RF_OPT_INT, .lo = 1, .hi = 1e9, .offset = C(log_every), .metavar = "N",
     .help = "progress line period when stderr is not a terminal"},
    {.name = "no-plot", .type = RF_OPT_FLAG, .offset = C(no_plot), .help = "no gnuplot loss curve"},
    {.name = "quiet", .letter = 'q', .type = RF_OPT_FLAG, .offset = C(quiet), .help = "no progress output"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = C(json),
     .help = "at the end, the run's figures as one JSON object on stdout (rank 0)"},
    {.name = "mpi", .type = RF_OPT_FLAG, .offset = C(want_mpi),
     .help = "require an MPI launch (implied under mpirun when built with MPI)"},
};
#define N_ROWS(t) (int)(sizeof t / sizeof t[0])

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

/* The command line into a: 0 to go on, 1 after --help, -1 after the error line. */
static int parse_train_args(int argc, char **argv, train_args *a) {
    train_args def = *a;
    const rf_opt_group groups[] = {
        {"model", model_opts, N_ROWS(model_opts), a, NULL, &def},
        {"objective", objective_opts, N_ROWS(objective_opts), a, NULL, &def},
        {"optimisation", optim_opts, N_ROWS(optim_opts), a, NULL, &def},
        {"run", run_opts, N_ROWS(run_opts), a, NULL, &def},
    };
    char synopsis[1024];
    snprintf(synopsis, sizeof synopsis,
             "--data FILE[,FILE..] -o DIR [options]\n\n"
             "Train on a JSON list of {\"query\", \"response\"} objects (or JSON Lines), tokenised\n"
             "with the chat template. DIR receives a checkpoint in the Hugging Face layout\n"
             "(config.json, model.safetensors, tokenizer files) plus optimizer.bin, log.csv\n"
             "(every step) and loss.png. Ctrl-C saves and exits; --resume continues.\n\n"
             "Several processes (data parallel, when built with Open MPI):\n"
             "  mpirun -np N refusion train ...   each process trains on 1/N of every\n"
             "  micro-batch; the result equals the one-process run (same --batch, see README)\n"
             "This build: %s.", rf_dist_compiled() ? "with MPI (data-parallel training)" : "without MPI");
    int prc = rf_args_parse("train", synopsis, groups, N_ROWS(groups), argc, argv, NULL);
    if (prc) return prc;
    rf_train_opts *o = &a->o;
    if (a->c.slot_sizes && parse_sizes(a->c.slot_sizes, o)) {
        fprintf(stderr, "refusion: train: --slot-sizes: bad list '%s'\n", a->c.slot_sizes);
        return -1;
    }
    if (!o->data || !o->out) {
        fprintf(stderr, "refusion: train: --data and -o DIR are required (see --help)\n");
        return -1;
    }
    if (o->init && o->resume) {
        fprintf(stderr, "refusion: train: --init and --resume exclude each other\n");
        return -1;
    }
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
        /* the per-step losses jump with each batch's examples and masks: they
         * are drawn faint, under exponential moving averages over about a
         * twentieth of the run (at least 5 steps) that show the trend */
        fprintf(f,
                "set terminal %s\nset output '%s'\nset datafile separator ','\n"
                "stats '%s' using 1 nooutput\n"
                "window = STATS_records / 20 > 5 ? STATS_records / 20 : 5\n"
                "a = 2.0 / (window + 1)\n"
                "n1 = 0; n2 = 0; n3 = 0\n"
                "avg1(x) = (n1 = n1 + 1, m1 = n1 == 1 ? x : m1 + a * (x - m1), m1)\n"
                "avg2(x) = (n2 = n2 + 1, m2 = n2 == 1 ? x : m2 + a * (x - m2), m2)\n"
                "avg3(x) = (n3 = n3 + 1, m3 = n3 == 1 ? x : m3 + a * (x - m3), m3)\n"
                "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n"
                "set title sprintf('training loss (coloured lines: moving averages over %%d steps)', window)\n"
                "plot '%s' skip 1 using 1:3 with lines lc rgb '#c8c8c8' title 'loss, each step', "
                "'' skip 1 using 1:(avg1($3)) with lines lw 2.5 lc rgb '#1f77b4' title 'loss', "
                "'' skip 1 using 1:(avg2($4)) with lines lw 1.5 lc rgb '#ff7f0e' title 'AR part', "
                "'' skip 1 using 1:(avg3($5)) with lines lw 1.5 lc rgb '#2ca02c' title 'MDM part'\n",
                terms[t][0], tmp, csv, csv);
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

/* MPI: under mpirun (its environment names the processes) or --mpi. 0 with
 * *mpi set, or the exit status after the error line. */
static int start_mpi(int want_mpi, int *mpi) {
    int launched = rf_dist_launched();
    *mpi = 0;
    if ((want_mpi || launched > 1) && !rf_dist_compiled()) {
        fprintf(stderr, "refusion: train: %s, but this refusion was built without MPI: the %d "
                "processes would each train alone; install Open MPI (scripts/install-deps.sh: "
                "libopenmpi-dev openmpi-bin) and rebuild\n",
                launched > 1 ? "started by an MPI launcher" : "--mpi given",
                launched > 1 ? launched : 1);
        return 2;
    }
    *mpi = rf_dist_compiled() && (want_mpi || launched > 0);
    if (*mpi && rf_dist_init()) {
        rf_print_error();
        *mpi = 0;
        return 1;
    }
    return 0;
}

/* The run, with Ctrl-C and SIGTERM (kill, a service manager, and mpirun: on
 * Ctrl-C it sends SIGTERM to every rank, then SIGKILL after a grace period)
 * finishing the step, saving and ending it. The stop request is reduced
 * over the ranks with the step's losses, so every rank stops at the same
 * step. */
static int run_with_signals(const rf_train_opts *o, progress_state *ps, rf_train_result *res) {
    rf_train_hooks hooks = {.on_start = on_start, .on_step = on_step, .stop = &g_stop, .user = ps};
    g_stop = 0;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = rf_train_run(o, &hooks, res);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}

/* --json: the run's figures as one object on stdout */
static void print_json(const rf_train_opts *o, const rf_train_result *res, const progress_state *ps) {
    double secs = rf_now() - ps->t_run;
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i}", "out", o->out,
                          "step", (json_int_t)res->step, "steps_run", (json_int_t)res->steps_run,
                          "clipped", (json_int_t)res->n_clipped, "stopped", res->stopped, "tokens_seen",
                          res->tokens_seen, "loss", (double)ps->last_loss.loss, "loss_ar",
                          (double)ps->last_loss.ar, "loss_mdm", (double)ps->last_loss.mdm, "lr",
                          ps->last_lr, "seconds", secs, "tokens_per_s",
                          secs > 0 ? ps->tokens_run / secs : 0.0, "ranks", rf_dist_size());
    json_object_set_new(j, "allreduce_frac", json_real(ps->step_s > 0 ? ps->comm_s / ps->step_s : 0.0));
    char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    printf("%s\n", txt ? txt : "{}");
    free(txt);
    json_decref(j);
}

/* rank 0's report: the stop, the saved checkpoint, the plot, --json */
static void report(const rf_train_opts *o, const train_cli *c, const rf_train_result *res, const progress_state *ps) {
    if (res->stopped)
        fprintf(stderr, "refusion: interrupted: saved step %ld to %s (continue with --resume)\n", res->step, o->out);
    if (!c->quiet)
        fprintf(stderr, "saved %s (step %ld, %.0f tokens seen; %ld of %ld steps of this run had "
                "their gradient clipped)\n", o->out, res->step, res->tokens_seen, res->n_clipped, res->steps_run);
    if (!c->no_plot) plot_loss(o->out, c->quiet);
    if (c->json) print_json(o, res, ps);
}

int cmd_train(int argc, char **argv) {
    train_args a = {.c = {.log_every = 10}};
    rf_train_opts_default(&a.o);
    int prc = parse_train_args(argc, argv, &a);
    const rf_train_opts o = a.o;
    const train_cli c = a.c;
    if (prc) return prc > 0 ? 0 : 2;
    env_setup(); /* may re-exec this very command line */
    /* outside the run (its own handlers stop it at a step's end and save):
     * a signal removes the temporary files being written */
    cli_cleanup_on_signals();
    int mpi, mrc = start_mpi(c.want_mpi, &mpi);
    if (mrc) return mrc;
    int rank = rf_dist_rank();
    progress_state ps = {.quiet = c.quiet, .tty = isatty(2) && !c.quiet, .log_every = c.log_every, .rank = rank};
    rf_train_result res;
    if (run_with_signals(&o, &ps, &res)) {
        if (rank == 0 || !res.error_shared) {
            if (rf_dist_size() > 1) fprintf(stderr, "refusion: rank %d: %s\n", rank, rf_last_error());
            else rf_print_error();
        }
        if (mpi) rf_dist_finalize();
        return 1;
    }
    if (rank == 0) report(&o, &c, &res, &ps);
    if (mpi) rf_dist_finalize();
    return 0;
}
