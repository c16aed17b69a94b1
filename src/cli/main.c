/* main.c - the refusion command-line program: dispatch to a subcommand. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "refusion.h"
#include "util/util.h"

#include "common/args.h"
#include "cli/commands.h"
#include "model/tune.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"init", cmd_init, "write a randomly initialised checkpoint (HF layout)"},
    {"info", cmd_info, "load a checkpoint, check it and print its shape"},
    {"convert", cmd_convert, "rewrite a checkpoint in another dtype (e.g. f32 -> bf16)"},
    {"grow", cmd_grow, "grow a checkpoint to a larger shape computing the same function"},
    {"tokenize", cmd_tokenize, "text -> ids (--decode: ids -> text, --chat: template)"},
    {"tokenizer-train", cmd_tokenizer_train, "train a byte-level BPE tokenizer.json"},
    {"generate", cmd_generate, "generate text with ReFusion or AR decoding"},
    {"chat", cmd_chat, "chat with a model in the terminal (multi-turn, streaming)"},
    {"train", cmd_train, "train a model (refusion | ar | mdm objective)"},
    {"tasks", cmd_tasks, "write the task suite (train/test JSON)"},
    {"eval", cmd_eval, "evaluate a model with a decoder on a task set"},
    {"distill", cmd_distill, "self-distillation data: the model's greedy AR answers as a training file"},
    {"probe", cmd_probe, "teacher-forced accuracy of the AR and mask heads per position class"},
    {"logits", cmd_logits, "raw next-token logits and the greedy continuation of ids, as JSON"},
    {"serve", cmd_serve, "serve the model over HTTP (OpenAI-style completions API)"},
    {"tune", cmd_tune, "measure this machine's kernel choices (AMX crossovers, packed bf16 kernel)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: refusion [--no-tune] <command> [options]   (refusion <command> --help)\n"
                 "  --no-tune: ignore the tune cache (`refusion tune`; also REFUSION_TUNE=off)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].help);
}

/* The library's log lines (e.g. tokenizer-train -v progress) on stderr. An
 * rf_die outside the API's catch points ends the program with one line and
 * exit 2 (src/program/fatal.c, linked into every program). */
static void log_to_stderr(rf_log_level level, const char *text, void *user) {
    (void)user;
    fprintf(stderr, "%s%s\n", level == RF_LOG_ERROR ? "refusion: " : level == RF_LOG_WARN ? "refusion: warning: " : "", text);
}

/* Failures the tests inject through the library's fault points (util.h):
 *   REFUSION_TEST_DIE_ONCE=N|oom|oom:N  the N-th model call (default the
 *       first) of the generations in this process fails, once (a broken
 *       invariant, or an allocation): a caller that turns rf_die into an
 *       error return (the server) must survive it
 *   REFUSION_TEST_DIE_ONCE=append:N  the N-th append to a server reply's
 *       output fails as an allocation, once (it runs under the server's
 *       lock: the server must give the lock back)
 *   REFUSION_TEST_STEP_MS=N  every model call of a generation starts N ms
 *       late (a slow model: the server's keep-alive lines, its timeouts)
 *   REFUSION_TEST_KILL_AT=N  the process ends with _exit(86) right after the
 *       N-th step of checkpoint saving (a file staged, half of optimizer.bin
 *       written, the journal, a rename, ...), as a kill -9 at that moment would */
static atomic_int g_die_once; /* 1: rf_die, 2: rf_oom; 0 once fired */
static atomic_long g_die_at;  /* the model call it fires at (counted down) */
static long g_kill_at, g_save_steps;

static long g_step_ms; /* REFUSION_TEST_STEP_MS */

static void generation_fault(void) {
    if (g_step_ms > 0) {
        struct timespec ts = {g_step_ms / 1000, g_step_ms % 1000 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&g_die_once) && atomic_fetch_sub(&g_die_at, 1) > 1) return;
    int kind = atomic_exchange(&g_die_once, 0);
    if (kind == 2) rf_oom((size_t)1 << 40);
    if (kind == 1) rf_die("REFUSION_TEST_DIE_ONCE: a fatal error inside the generation");
}

static atomic_int g_append_die; /* 1 until the append fault fired */
static atomic_long g_append_at;

static int append_fault(void) {
    if (atomic_fetch_sub(&g_append_at, 1) > 1) return 0;
    return atomic_exchange(&g_append_die, 0);
}

static void kill_at(void) {
    if (++g_save_steps == g_kill_at) _exit(86);
}

static void install_test_faults(void) {
    const char *e = getenv("REFUSION_TEST_DIE_ONCE");
    if (e && !strncmp(e, "append:", 7)) {
        atomic_store(&g_append_die, 1);
        atomic_store(&g_append_at, atol(e + 7) > 1 ? atol(e + 7) : 1);
        rf_faults.reply_append = append_fault;
    } else if (e) {
        int oom = !strncmp(e, "oom", 3);
        const char *at = oom ? (e[3] == ':' ? e + 4 : "1") : e;
        atomic_store(&g_die_once, oom ? 2 : 1);
        atomic_store(&g_die_at, atol(at) > 1 ? atol(at) : 1);
        rf_faults.generation_step = generation_fault;
    }
    e = getenv("REFUSION_TEST_STEP_MS");
    if (e && atol(e) > 0) {
        g_step_ms = atol(e);
        rf_faults.generation_step = generation_fault;
    }
    e = getenv("REFUSION_TEST_KILL_AT");
    if (e && atol(e) > 0) {
        g_kill_at = atol(e);
        rf_faults.checkpoint_step = kill_at;
    }
}

int openblas_get_num_threads(void); /* OpenBLAS extension, not in every cblas.h */

/* OpenBLAS starts its threads when the library loads, and each allocates a
 * 128 MiB buffer; under an address-space limit (ulimit -v) that cannot
 * hold them, they retry the allocation for ever, and the process never ends
 * (its exit waits for them). Such a limit gets one BLAS thread, which
 * allocates nothing until a matrix product runs: this command line is run
 * again with OPENBLAS_NUM_THREADS=1 (read only when the library loads).
 * A program that still does not fit then fails on its own allocation, with
 * one line. */
#define BLAS_THREAD_SPACE ((rlim_t)256 << 20) /* its buffer, its stack, a malloc arena */
static void fit_address_limit(char **argv) {
    struct rlimit rl;
    int threads = openblas_get_num_threads();
    if (threads <= 1 || getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY) return;
    if (rl.rlim_cur / BLAS_THREAD_SPACE > (rlim_t)threads) return; /* room for the threads and the rest */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "refusion: the address-space limit (ulimit -v %llu KiB) is too small for %d OpenBLAS threads, "
                    "and running again with one failed: set OPENBLAS_NUM_THREADS=1\n",
            (unsigned long long)(rl.rlim_cur >> 10), threads);
    _exit(2); /* not exit: it would wait for the BLAS threads */
}

int main(int argc, char **argv) {
    fit_address_limit(argv);
    install_test_faults();
    rf_log_set(log_to_stderr, NULL);
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("refusion %s\n", RF_VERSION_STRING);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--no-tune")) { /* before the command: no tune cache */
        rf_tune_cache_disable();
        argc--, argv++;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "refusion: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
