/* cmd_serve.c - `refusion serve`: load a model and answer OpenAI-style HTTP
 * requests with it until SIGINT / SIGTERM (see src/serve/serve.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "serve/serve.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion serve -m MODEL_DIR [options]\n"
            "Serve the model over HTTP (OpenAI-compatible subset):\n"
            "  GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions\n"
            "Requests run one at a time in arrival order; \"stream\": true sends Server-Sent Events.\n\n"
            "  -m, --model DIR|GGUF    checkpoint directory (tokenizer.json read from it if present)\n"
            "                          or a .gguf file (its tokenizer metadata)\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0 = any free port, printed at start)\n"
            "  --name NAME             model id in responses (default: the directory's name)\n"
            "  --threads N             OpenMP threads for generation\n"
            "  --max-body BYTES        larger request bodies get 413 (default 4194304)\n"
            "  --max-queue N           requests queued or running before 503 (default 64)\n"
            "  --max-connections N     open connections in all, one thread each (default 256)\n"
            "  --max-per-client N      open connections from one IP address (default 16)\n"
            "  --timeout S             seconds a client may stall while sending a request (default 10)\n"
            "  --queue-wait S          a request not started after S seconds gets 503 (default 300)\n"
            "  --max-request-mb N      working memory of one generation; larger requests get 400\n"
            "                          (default: half the RAM)\n"
            "  -q, --quiet             no log line per request\n"
            "Defaults for requests that do not set them:\n"
            "  --mode refusion|ar      decoder (request field \"mode\"; default refusion)\n"
            "  -n, --gen-length N      answer length (\"max_tokens\"; default 512)\n"
            "  --slot-size N           ReFusion slot size (\"slot_size\"; default 4)\n"
            "  --blocks N              ReFusion serial blocks (\"serial_num_blocks\"; default 32)\n"
            "  --slot-threshold X      (\"slot_threshold\"; default 0.6)\n"
            "  --token-threshold X     (\"token_threshold\"; default 0.3)\n"
            "  -t, --temperature X     (\"temperature\"; default 0 = greedy)\n"
            "  --seed N                (\"seed\"; default 0)\n");
}

static int stop_pipe[2];
static volatile sig_atomic_t n_stop_signals;

static void on_stop_signal(int sig) {
    if (n_stop_signals++) _exit(128 + sig);
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(stop_pipe[1], &b, 1);
    (void)w;
}

int cmd_serve(int argc, char **argv) {
    const char *model_dir = NULL, *mode = "refusion";
    rf_serve_config c;
    rf_serve_config_default(&c);
    rf_gen_params *p = &c.defaults;
    long lv;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            c.verbose = 0;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "refusion: serve: unknown option or missing value: '%s' (see --help)\n", a);
            return 2;
        }
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--port")) bad = rf_arg_long("serve", a, v, 0, 65535, &lv), c.port = (int)lv;
        else if (!strcmp(a, "--name")) c.model_name = v;
        else if (!strcmp(a, "--threads")) bad = rf_arg_long("serve", a, v, 1, 1024, &lv), c.threads = (int)lv;
        else if (!strcmp(a, "--max-body")) bad = rf_arg_long("serve", a, v, 1, 1L << 34, &lv), c.max_body = (size_t)lv;
        else if (!strcmp(a, "--max-queue")) bad = rf_arg_long("serve", a, v, 1, 100000, &lv), c.max_queue = (int)lv;
        else if (!strcmp(a, "--max-connections")) bad = rf_arg_long("serve", a, v, 1, 10000, &lv), c.max_connections = (int)lv;
        else if (!strcmp(a, "--max-per-client")) bad = rf_arg_long("serve", a, v, 1, 10000, &lv), c.max_per_client = (int)lv;
        else if (!strcmp(a, "--timeout")) bad = rf_arg_long("serve", a, v, 1, 3600, &lv), c.timeout_s = (int)lv;
        else if (!strcmp(a, "--queue-wait")) bad = rf_arg_long("serve", a, v, 1, 86400, &lv), c.queue_wait_s = (int)lv;
        else if (!strcmp(a, "--max-request-mb")) bad = rf_arg_long("serve", a, v, 1, 1L << 30, &lv), c.max_request_bytes = (size_t)lv << 20;
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--gen-length")) bad = rf_arg_long("serve", a, v, 1, 1000000, &lv), p->gen_length = (int)lv;
        else if (!strcmp(a, "--slot-size")) bad = rf_arg_long("serve", a, v, 1, 1000000, &lv), p->slot_size = (int)lv;
        else if (!strcmp(a, "--blocks")) bad = rf_arg_long("serve", a, v, 1, 1000000, &lv), p->n_blocks = (int)lv;
        else if (!strcmp(a, "--slot-threshold")) bad = rf_arg_float("serve", a, v, &p->slot_threshold);
        else if (!strcmp(a, "--token-threshold")) bad = rf_arg_float("serve", a, v, &p->token_threshold);
        else if (!strcmp(a, "-t") || !strcmp(a, "--temperature")) bad = rf_arg_float("serve", a, v, &p->temperature);
        else if (!strcmp(a, "--seed")) bad = rf_arg_long("serve", a, v, 0, 0x7fffffffffffffffL, &lv), p->seed = (uint64_t)lv;
        else {
            fprintf(stderr, "refusion: serve: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad) return 2;
    }
    c.default_ar = !strcmp(mode, "ar");
    if (!c.default_ar && strcmp(mode, "refusion")) {
        fprintf(stderr, "refusion: serve: --mode must be refusion or ar, got '%s'\n", mode);
        return 2;
    }
    if (!model_dir) {
        fprintf(stderr, "refusion: serve: need -m MODEL_DIR (see --help)\n");
        return 2;
    }

    rf_model m;
    memset(&m, 0, sizeof m);
    if (rf_model_load(&m, model_dir)) {
        rf_print_error();
        return 1;
    }
    rf_tokenizer *tok = NULL;
    int have_tok = rf_tok_model_has_tokenizer(model_dir); /* tokenizer.json or GGUF metadata */
    if (have_tok && !(tok = rf_tok_load(model_dir))) {
        rf_print_error();
        rf_model_free(&m);
        return 1;
    }
    if (tok && rf_tok_eos_id(tok) >= 0) p->eos_id = rf_tok_eos_id(tok); /* as `generate` does */
    /* the server-wide defaults must be usable on their own (a one-token prompt) */
    int probe = 0;
    if (rf_gen_check(&m, &probe, 1, p, c.default_ar)) {
        fprintf(stderr, "refusion: serve: default settings (see --help): %s\n", rf_last_error());
        if (tok) rf_tok_free(tok);
        rf_model_free(&m);
        return 2;
    }

    /* SIGINT / SIGTERM: the first wakes the main thread through a pipe for a
     * clean stop, a second one exits at once. */
    if (pipe2(stop_pipe, O_CLOEXEC)) {
        fprintf(stderr, "refusion: serve: pipe: %s\n", strerror(errno));
        if (tok) rf_tok_free(tok);
        rf_model_free(&m);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* the server's threads inherit a mask without them, so the handler runs
     * here in the main thread, which waits in read() */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    rf_server *s = rf_serve_start(&m, tok, &c);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    if (!s) {
        fprintf(stderr, "refusion: serve: %s\n", rf_last_error());
        if (tok) rf_tok_free(tok);
        rf_model_free(&m);
        return 1;
    }
    const char *h = c.host;
    int bracket = strchr(h, ':') != NULL; /* IPv6 literal */
    fprintf(stderr, "refusion serve: %s (%s%s) listening on http://%s%s%s:%d\n", model_dir,
            c.default_ar ? "ar" : "refusion", tok ? "" : ", no tokenizer", bracket ? "[" : "", h, bracket ? "]" : "",
            rf_serve_port(s));
    fflush(stderr);

    unsigned char sig = 0;
    while (read(stop_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    fprintf(stderr, "refusion serve: %s, finishing the running request (again to abort)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    rf_serve_stop(s);
    if (tok) rf_tok_free(tok);
    rf_model_free(&m);
    close(stop_pipe[0]), close(stop_pipe[1]);
    fprintf(stderr, "refusion serve: stopped\n");
    return 0;
}
