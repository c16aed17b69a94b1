/* cmd_serve.c - `refusion serve`: load a model and answer OpenAI-style HTTP
 * requests with it until SIGINT / SIGTERM (see src/serve/serve.h). */
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "common/args.h"
#include "cli/commands.h"
#include "kernels/cpu.h"
#include "refusion.h"
#include "serve/serve.h"
#include "util/util.h"

typedef struct {
    const char *model, *host, *name, *api_key, *api_key_file, *cors, *path;
    int metrics, slots, no_slots, no_webui, cache_reuse, log_disable;
    int port, parallel, cont_batching, no_cont_batching, max_queue, max_connections, max_per_client, timeout, request_timeout,
        keepalive_requests, http_threads, queue_wait, generation_timeout, max_request_mb, cache_mb, quiet;
    int64_t max_body, max_request_positions;
} serve_args;

#define A(f) offsetof(serve_args, f)
static const rf_opt serve_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "DIR|GGUF",
     .help = "checkpoint directory (its tokenizer.json) or a .gguf file (its tokenizer metadata)"},
    {.name = "host", .type = RF_OPT_STR, .offset = A(host), .metavar = "ADDR", .help = "address to listen on"},
    {.name = "port", .type = RF_OPT_INT, .lo = 0, .hi = 65535, .offset = A(port), .metavar = "N",
     .help = "port (0 = any free port, printed at start)"},
    {.name = "name", .letter = 'a', .alias = "alias", .type = RF_OPT_STR, .offset = A(name), .metavar = "NAME",
     .help = "model id in responses (default: the directory's name)"},
    {.name = "parallel", .alias = "workers", .type = RF_OPT_INT, .lo = 1, .hi = 256, .offset = A(parallel),
     .metavar = "N", .help = "requests decoded at the same time, every decoder's generations as rows of shared "
                             "model calls"},
    {.name = "cont-batching", .type = RF_OPT_FLAG, .offset = A(cont_batching),
     .help = "accepted for llama.cpp's habit: continuous batching is on by default (a generation joins and "
             "leaves the shared model calls at any step)"},
    {.name = "no-cont-batching", .type = RF_OPT_FLAG, .offset = A(no_cont_batching),
     .help = "a generation starts only when none is running (those queued by then start together and share "
             "calls), as llama-server's: no prompt joins running generations"},
    {.name = "api-key", .type = RF_OPT_STR, .offset = A(api_key), .metavar = "KEY",
     .help = "require \"Authorization: Bearer KEY\" on every request but /health (default: the "
             "REFUSION_API_KEY environment variable; none when unset)"},
    {.name = "api-key-file", .type = RF_OPT_STR, .offset = A(api_key_file), .metavar = "FILE",
     .help = "the API key from FILE's first line (llama-server's option; one key: a file with more is refused)"},
    {.name = "cors", .type = RF_OPT_STR, .offset = A(cors), .metavar = "ORIGIN",
     .help = "Access-Control-Allow-Origin of every answer, for web pages of that origin (\"*\": any page may "
             "read the answers); default: no CORS headers"},
    {.name = "max-body", .type = RF_OPT_I64, .lo = 1, .hi = 17179869184.0, .offset = A(max_body), .metavar = "BYTES",
     .help = "larger request bodies get 413"},
    {.name = "max-queue", .type = RF_OPT_INT, .lo = 1, .hi = 100000, .offset = A(max_queue), .metavar = "N",
     .help = "requests queued or running before 503"},
    {.name = "max-connections", .type = RF_OPT_INT, .lo = 1, .hi = 10000, .offset = A(max_connections),
     .metavar = "N", .help = "open connections in all; more are closed at once"},
    {.name = "max-per-client", .type = RF_OPT_INT, .lo = 1, .hi = 10000, .offset = A(max_per_client), .metavar = "N",
     .help = "open connections from one IP address; more are closed at once"},
    {.name = "timeout", .type = RF_OPT_INT, .lo = 1, .hi = 3600, .offset = A(timeout), .metavar = "S",
     .help = "seconds a connection may stay idle"},
    {.name = "request-timeout", .type = RF_OPT_INT, .lo = 1, .hi = 3600, .offset = A(request_timeout), .metavar = "S",
     .help = "seconds to send a whole request (headers and body), however steadily"},
    {.name = "keepalive-requests", .type = RF_OPT_INT, .lo = 1, .hi = 1000000, .offset = A(keepalive_requests),
     .metavar = "N", .help = "requests on one connection (keep-alive); the last answer closes it"},
    {.name = "http-threads", .alias = "threads-http", .type = RF_OPT_INT, .lo = 1, .hi = 64, .offset = A(http_threads), .metavar = "N",
     .help = "event-loop threads serving the connections"},
    {.name = "queue-wait", .type = RF_OPT_INT, .lo = 1, .hi = 86400, .offset = A(queue_wait), .metavar = "S",
     .help = "a request not started after S seconds gets 503"},
    {.name = "generation-timeout", .type = RF_OPT_INT, .lo = 1, .hi = 86400, .offset = A(generation_timeout),
     .metavar = "S", .help = "a generation still running S seconds after it started is stopped before its next "
                             "model call and gets 503 (the client leaving stops it too)"},
    {.name = "max-request-mb", .type = RF_OPT_INT, .lo = 0, .hi = 1 << 30, .offset = A(max_request_mb),
     .metavar = "N", .help = "working memory of one generation; larger requests get 400 (0 = half the RAM)"},
    {.name = "max-request-positions", .type = RF_OPT_I64, .lo = 1, .hi = 1e15, .offset = A(max_request_positions),
     .metavar = "N", .help = "positions one generation may feed the model (an upper bound from prompt, "
     "max_tokens, slot_size, steps and n); more get 400"},
    {.name = "cache-mb", .type = RF_OPT_INT, .lo = 0, .hi = 1 << 30, .offset = A(cache_mb), .metavar = "N",
     .help = "memory for the KV caches of finished AR generations, reused by requests whose prompt begins "
             "with their tokens (a chat's next turn, a shared system prompt); 0 = off"},
    {.name = "quiet", .letter = 'q', .alias = "log-disable", .type = RF_OPT_FLAG, .offset = A(quiet),
     .help = "no log line per request"},
    {.name = "metrics", .type = RF_OPT_FLAG, .offset = A(metrics),
     .help = "accepted for llama-server's habit: GET /metrics (Prometheus text) is always served"},
    {.name = "slots", .type = RF_OPT_FLAG, .offset = A(slots), .help = "GET /slots: each slot's state (the default)"},
    {.name = "no-slots", .type = RF_OPT_FLAG, .offset = A(no_slots), .help = "no GET /slots (404)"},
    {.name = "no-webui", .type = RF_OPT_FLAG, .offset = A(no_webui), .help = "no web page at / (404)"},
    {.name = "path", .type = RF_OPT_STR, .offset = A(path), .metavar = "DIR",
     .help = "serve the files of DIR at / instead of the built-in web page"},
    {.name = "cache-reuse", .type = RF_OPT_INT, .lo = 0, .hi = 1 << 30, .offset = A(cache_reuse), .metavar = "N",
     .help = "accepted for llama-server's habit: prompt-prefix reuse is automatic for AR and rolling-slot "
             "generations (--cache-mb)"},
};

/* The model is opened on a thread of its own that ends before the server
 * starts. Opening packs the weights in OpenMP loops, and libgomp keeps a
 * pool of threads for every thread that ran one: the main thread's pool,
 * idle beside the scheduler's, would make libgomp count more threads than
 * cores and put the scheduler's threads to sleep between model calls (a
 * futex wake-up per call where `refusion generate`, one pool, spins). The
 * pool ends with its thread. */
typedef struct {
    const char *dir;
    refusion_model *m;
} model_open_job;

static void *model_open_main(void *arg) {
    model_open_job *o = arg;
    o->m = rf_model_open(o->dir);
    if (!o->m) rf_print_error(); /* the error is this thread's */
    return NULL;
}

static refusion_model *model_open_alone(const char *dir) {
    model_open_job o = {dir, NULL};
    pthread_t t;
    if (pthread_create(&t, NULL, model_open_main, &o)) {
        fprintf(stderr, "refusion: serve: cannot start a thread to open the model\n");
        return NULL;
    }
    pthread_join(t, NULL);
    return o.m;
}

static int stop_pipe[2];
static volatile sig_atomic_t n_stop_signals;

static void on_stop_signal(int sig) {
    if (n_stop_signals++) _exit(128 + sig);
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(stop_pipe[1], &b, 1);
    (void)w;
}

/* llama-server's --api-key-file: keys one per line; this server checks one
 * key, so a file with more than one is refused rather than half honoured.
 * The key (in a static buffer: it lives as long as the server), or NULL with
 * the reason in rf_last_error(). */
static char *read_api_key_file(const char *path) {
    static char key[1024];
    char *text = rf_read_text(path);
    if (!text) return NULL;
    int n = 0, too_long = 0;
    for (char *line = strtok(text, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        while (*line == ' ' || *line == '\t') line++;
        if (!*line) continue;
        if (n++ == 0) too_long = snprintf(key, sizeof key, "%s", line) >= (int)sizeof key;
    }
    free(text);
    if (n != 1 || too_long) {
        rf_set_error("%s: %s (one key of at most %zu bytes, on one line)", path,
                     too_long ? "the key is too long" : n ? "holds more than one key" : "holds no key", sizeof key - 1);
        return NULL;
    }
    return key;
}

/* The server's configuration from the parsed options (the API key from
 * --api-key-file when given). 0, or -1 with the error printed. */
/* the server's log lines, as this program prints them */
static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "refusion serve: %s\n", line);
}

static int config_of_args(rf_serve_config *c, serve_args *a) {
    c->host = a->host, c->port = a->port, c->model_name = a->name, c->parallel = a->parallel;
    if (a->api_key_file) {
        char *file_key = read_api_key_file(a->api_key_file);
        if (!file_key) {
            fprintf(stderr, "refusion: serve: --api-key-file %s\n", rf_last_error());
            return -1;
        }
        a->api_key = file_key;
    }
    c->api_key = a->api_key && *a->api_key ? a->api_key : NULL;
    c->webui = !a->no_webui, c->web_path = a->path, c->slots_endpoint = !a->no_slots;
    c->cors_origin = a->cors && *a->cors ? a->cors : NULL;
    c->request_timeout_s = a->request_timeout, c->keepalive_requests = a->keepalive_requests;
    c->http_threads = a->http_threads;
    c->max_body = (size_t)a->max_body, c->max_queue = a->max_queue, c->max_connections = a->max_connections;
    c->max_per_client = a->max_per_client, c->timeout_s = a->timeout, c->queue_wait_s = a->queue_wait;
    c->generation_timeout_s = a->generation_timeout;
    c->max_request_bytes = (size_t)a->max_request_mb << 20;
    c->cache_bytes = (size_t)a->cache_mb << 20;
    c->max_request_positions = a->max_request_positions;
    c->verbose = !a->quiet;
    c->log = log_line;
    c->batch = !a->no_cont_batching;
    return 0;
}

/* The requests' defaults settled against the model: a fresh seed per
 * request unless fixed, the EOS of the checkpoint's files, the values taken
 * from generation_config.json reported. */
static void settle_defaults(rf_decode_opts *d, const refusion_tokenizer *tok) {
    rf_params *p = &d->gen;
    /* llama-server's default: a request without a seed gets a fresh one
     * (request.c draws it), unless --seed or the checkpoint's file fixes it */
    const rf_opt *seed_row = rf_opt_find(rf_decode_table, rf_decode_table_n, "seed");
    if (d->src[seed_row - rf_decode_table] == RF_SRC_DEFAULT) p->seed = RF_SEED_RANDOM;
    if (d->config_eos >= 0 && !d->ignore_eos) p->eos_id = d->config_eos;
    else if (tok && rf_tokenizer_eos_id(tok) >= 0 && !d->ignore_eos)
        p->eos_id = rf_tokenizer_eos_id(tok); /* as `generate` does */
    int from_config = 0;
    for (int i = 0; i < rf_decode_table_n; i++) from_config |= d->src[i] == RF_SRC_CONFIG;
    if (!from_config) return;
    fprintf(stderr, "refusion serve: defaults from %s:",
            d->generation_config ? d->generation_config : "the model's generation_config.json");
    for (int i = 0; i < rf_decode_table_n; i++)
        if (d->src[i] == RF_SRC_CONFIG) {
            char v[64];
            rf_opt_format(&rf_decode_table[i], d, v, sizeof v);
            fprintf(stderr, " %s=%s", rf_decode_table[i].http ? rf_decode_table[i].http : rf_decode_table[i].name, v);
        }
    fputc('\n', stderr);
}

/* SIGINT / SIGTERM: the first wakes the main thread through a pipe for a
 * clean stop, a second one exits at once. The signals are left blocked in
 * *stop, for the server's threads to inherit a mask without them (the
 * caller unblocks them once the server runs, so the handler runs in the
 * main thread, which waits in read()). 0, or -1 with the error printed. */
static int install_stop_signals(sigset_t *stop) {
    if (pipe2(stop_pipe, O_CLOEXEC)) {
        fprintf(stderr, "refusion: serve: pipe: %s\n", strerror(errno));
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(stop);
    sigaddset(stop, SIGINT);
    sigaddset(stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, stop, NULL);
    return 0;
}

/* The line that says what listens where. */
static void print_listening(const rf_server *s, const rf_serve_config *c, const char *model_dir, int have_tok) {
    const char *h = c->host;
    int bracket = strchr(h, ':') != NULL; /* IPv6 literal */
    fprintf(stderr,
            "refusion serve: %s (%s%s, %d rows%s x %d threads, %s kernels%s) listening on http://%s%s%s:%d\n",
            model_dir, rf_method_name(c->defaults.gen.method), have_tok ? "" : ", no tokenizer", c->parallel,
            c->batch ? "" : " without continuous batching", c->defaults.threads, rf_cpu_tier_name(),
            c->api_key ? ", API key" : "", bracket ? "[" : "", h, bracket ? "]" : "", rf_serve_port(s));
    if (!c->api_key && !rf_serve_loopback(s))
        fprintf(stderr, "refusion serve: warning: listening on %s without an API key: anyone who can reach it can "
                "use the model (--api-key or REFUSION_API_KEY)\n", h);
    fflush(stderr);
}

int cmd_serve(int argc, char **argv) {
    rf_serve_config c;
    rf_serve_config_default(&c);
    serve_args a = {.host = c.host, .port = c.port, .parallel = c.parallel, .cors = c.cors_origin,
                    .max_body = (int64_t)c.max_body, .max_queue = c.max_queue, .max_connections = c.max_connections,
                    .max_per_client = c.max_per_client, .timeout = c.timeout_s, .queue_wait = c.queue_wait_s,
                    .generation_timeout = c.generation_timeout_s,
                    .request_timeout = c.request_timeout_s, .keepalive_requests = c.keepalive_requests,
                    .http_threads = c.http_threads, .cache_mb = (int)(c.cache_bytes >> 20),
                    .max_request_positions = c.max_request_positions, .api_key = getenv("REFUSION_API_KEY")};
    serve_args def_a = a;
    def_a.api_key = NULL; /* never print a key in --help */
    rf_decode_opts def = c.defaults;
    rf_chat_template_opts tpl = {0};
    const rf_opt_group groups[] = {
        {NULL, serve_opts, (int)(sizeof serve_opts / sizeof serve_opts[0]), &a, NULL, &def_a},
        {"decoding: the defaults of requests that do not set them (the same options and defaults in generate, "
         "chat, eval, probe and serve; the model's generation_config.json replaces the defaults, flags override "
         "it; HTTP: the request field, which overrides both; responses say where each value came from)",
         rf_decode_table, rf_decode_table_n, &c.defaults, c.defaults.src, &def},
        RF_CHAT_TEMPLATE_GROUP(&tpl),
    };
    int prc = rf_args_parse("serve", "-m MODEL [options]\n"
                            "Serve the model over HTTP (OpenAI-compatible): GET /health, /metrics, /v1/models[/ID];\n"
                            "POST /v1/completions, /v1/chat/completions (\"stream\": true for Server-Sent Events).\n"
                            "llama-server's too: /tokenize, /detokenize, /apply-template, /props, /slots, /completion,\n"
                            "/infill; a chat page with a live view of the decoding at / (--no-webui, --path DIR).\n"
                            "--parallel requests are decoded at once, the rest wait in arrival order.",
                            groups, 3, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    rf_decode_opts_finish(&c.defaults);
    if (rf_decode_opts_cli("serve", &c.defaults)) return 2;
    const char *model_dir = a.model;
    if (config_of_args(&c, &a)) return 2;
    if (!model_dir) {
        fprintf(stderr, "refusion: serve: need -m MODEL_DIR (see --help)\n");
        return 2;
    }
    /* OpenMP threads: the model calls get every core unless --threads says */
    if (c.defaults.threads == 0) c.defaults.threads = omp_get_num_procs();

    refusion_model *m = model_open_alone(model_dir);
    if (!m) return 1;
    refusion_tokenizer *tok = NULL;
    int have_tok = rf_model_has_tokenizer(m); /* tokenizer.json or GGUF metadata */
    /* a template that renders no conversation is refused here, not at every request */
    if (have_tok && (!(tok = rf_tokenizer_open(m)) ||
                     (tpl.chat_template && rf_tokenizer_set_chat_template(tok, tpl.chat_template)) ||
                     rf_tokenizer_check_chat_template(tok))) {
        rf_print_error();
        rf_tokenizer_close(tok);
        rf_model_close(m);
        return 1;
    }
    if (tok) rf_tokenizer_set_special_in_content(tok, tpl.special_in_content);
    /* the checkpoint's recommended settings under the flags; requests override both */
    if (rf_decode_opts_from_config(&c.defaults, model_dir, tok ? rf_tokenizer_eos_id(tok) : -1)) {
        fprintf(stderr, "refusion: serve: %s\n", rf_last_error());
        rf_tokenizer_close(tok);
        rf_model_close(m);
        return 1;
    }
    settle_defaults(&c.defaults, tok);
    /* the server-wide defaults must be usable on their own (a one-token prompt) */
    int32_t probe = 0;
    if (rf_params_check(m, &probe, 1, &c.defaults.gen)) {
        fprintf(stderr, "refusion: serve: default settings (see --help): %s\n", rf_last_error());
        rf_tokenizer_close(tok);
        rf_model_close(m);
        return 2;
    }

    sigset_t stop;
    if (install_stop_signals(&stop)) {
        rf_tokenizer_close(tok);
        rf_model_close(m);
        return 1;
    }
#ifdef __GLIBC__
    /* Every generation allocates its KV cache (megabytes: the 0.6B shape's
     * is 11 MB for 48 tokens) and frees it when done. By default glibc
     * serves such blocks with fresh mmaps, or trims them off the heap when
     * freed, so the next request's cache page-faults in again, the kernel
     * clearing every page while the batched call waits for the scheduler
     * thread (about 2% of the 8-client wall time on the 0.6B shape). Kept in
     * the heap, freed caches are reused as they are. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
    rf_server *s = rf_serve_start(m, tok, &c);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    if (!s) {
        fprintf(stderr, "refusion: serve: %s\n", rf_last_error());
        rf_tokenizer_close(tok);
        rf_model_close(m);
        return 1;
    }
    print_listening(s, &c, model_dir, tok != NULL);

    unsigned char sig = 0;
    while (read(stop_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    fprintf(stderr, "refusion serve: %s, finishing the running requests (again to abort)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    rf_serve_stop(s);
    rf_tokenizer_close(tok);
    rf_model_close(m);
    close(stop_pipe[0]), close(stop_pipe[1]);
    /* every generation has returned, finished or failed: any scoped block
     * (util.h) still held is a leak that LeakSanitizer cannot see (the
     * blocks are listed, so reachable); the tests read this exit status */
    long held = rf_scoped_live();
    if (held) {
        fprintf(stderr, "refusion serve: %ld blocks of generation memory were never freed\n", held);
        return 3;
    }
    fprintf(stderr, "refusion serve: stopped\n");
    return 0;
}
