/* serve.h - `refusion serve`: an HTTP server with an OpenAI-compatible subset
 * of endpoints around one loaded model.
 *
 *   GET  /health                 {"status": "ok", ...}
 *   GET  /metrics                Prometheus text: requests, tokens, tokens/s, queue, latency
 *   GET  /v1/models[/{id}]       the one model
 *   POST /v1/completions         {"prompt": str | [ids], "max_tokens", ...}
 *   POST /v1/chat/completions    {"messages": [{"role", "content"}], ...}
 *   OPTIONS *                    CORS preflight
 * and llama-server's own endpoints and the web page at / (routes_llama.h).
 *
 * Generation requests go into a FIFO queue served by the scheduler thread:
 * up to --parallel generations at once, each a row of one forward call per
 * step (scheduler.c; every decoder a step machine, decode/step.h), with its
 * own KV cache; the weights are shared read-only. HTTP connections are served by a small pool of
 * libmicrohttpd event loops (http.c, waiters.c): a connection waiting for its job is
 * suspended, not a blocked thread. "stream":
 * true answers with Server-Sent Events as answer tokens become final (every
 * position before them is filled). "n" > 1 runs the job's choices one after
 * the other on its row, choice i sampled with seed + i. A client that
 * leaves raises its job's cancel flag: the decoder stops before its next
 * model call.
 *
 * request.c  JSON body -> settings (all validation); prompt.c its prompt -> ids
 * queue.c    the job queue, cancelling and deadlines
 * scheduler.c one model call per step for every running generation (continuous batching)
 * row.c      one running generation: its step machine, answer and choices
 * answer.c   a choice's answer: max_tokens / stop cuts, SSE chunks, the response
 * tools.c    tool calling: tools / tool_choice, a call's grammar, <tool_call> blocks into tool_calls
 * oai.c      OpenAI's response shapes and error bodies
 * prefix_cache.c the KV caches of finished generations, reused by later prompts
 * http.c     libmicrohttpd's request callbacks: routing, bodies, generation requests to the parser threads
 * reply.c    answers with the common headers; /health, /metrics, /v1/models
 * waiters.c  parked (suspended) connections, the watcher thread, SSE streaming
 * server.c   the listening socket, start and stop
 * routes_llama.c  llama-server's endpoints, answer shapes, slots, the page */
#ifndef RF_SERVE_H
#define RF_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "common/args.h"
#include "decode/decode.h"
#include "model/model.h"
#include "refusion.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *host;        /* numeric address or name to bind (default 127.0.0.1) */
    int port;                /* 0: any free port (see rf_serve_port) */
    const char *model_name;  /* "id" in responses (default: the model dir's basename) */
    size_t max_body;         /* larger request bodies get 413 */
    int max_queue;           /* waiting + running generations; more get 503 */
    int parallel;            /* generations decoded at once (--parallel): rows of the scheduler's model calls */
    int batch;               /* 1: a generation joins the running ones at the next step (continuous batching);
                                0: only when none is running (the ones queued by then start together) */
    size_t cache_bytes;      /* prompt-prefix cache of the generations (0: none; --cache-mb) */
    const char *api_key;     /* non-NULL: every request but /health and OPTIONS needs "Bearer <key>" */
    const char *cors_origin; /* Access-Control-Allow-Origin on every answer (NULL: none, the default: a web
                                page of another origin cannot read the answers) */
    /* resource limits (see README "Reliability") */
    int max_connections;     /* open connections in all (each is a thread) */
    int max_per_client;      /* open connections from one IP address */
    int timeout_s;           /* a connection idle this long is closed */
    int request_timeout_s;   /* a request (headers and body) not complete this long after its connection was
                                ready for it is closed, however steadily it trickles in */
    int keepalive_requests;  /* requests on one connection; the last answer says "Connection: close" */
    int http_threads;        /* MHD's thread pool: event loops that serve every connection */
    int queue_wait_s;        /* a request still queued after this long gets 503 */
    int generation_timeout_s;/* a generation still running this long after it started is stopped before its
                                next model call and answered 503 */
    size_t max_request_bytes;/* a generation's working memory (rf_gen_mem_bytes); 0: half the RAM */
    long long max_request_positions; /* positions a generation may feed the model (rf_serve_work_positions) */
    int verbose;             /* 1: one log line per request (through log) */
    /* where the server's log lines go (each one line, no newline): the
     * library writes nowhere itself; NULL: they are dropped */
    void (*log)(void *user, const char *line);
    void *log_user;
    int webui;               /* 1: GET / serves the web page (web_path's files, or the built-in one) */
    const char *web_path;    /* a folder served at / instead of the built-in page (NULL: built in) */
    int slots_endpoint;      /* 1: GET /slots answers */
    rf_decode_opts defaults; /* decoding settings when a request does not say (threads: the scheduler's OpenMP
                                threads for the model calls; 0: OpenMP's default) */
} rf_serve_config;

/* Sensible defaults: 127.0.0.1:8080, 4 MiB bodies, queue of 64, 512
 * connections of which 16 per client, 10 s idle, 30 s to send a request,
 * 100 requests per connection, 2 HTTP threads, 300 s in the queue, half the
 * RAM and 2^23 fed positions per generation, 2 generations at once, no CORS headers, no
 * API key, the shared decoding defaults (rf_decode_opts_default), verbose. */
void rf_serve_config_default(rf_serve_config *c);

typedef struct rf_server rf_server;

/* Start listening and serving in background threads. m and tok (tok may be
 * NULL: prompts must then be token ids, and chat is refused) must outlive
 * the server. NULL with rf_last_error() on failure (e.g. port in use). */
rf_server *rf_serve_start(const refusion_model *m, const refusion_tokenizer *tok, const rf_serve_config *c);
/* The port actually bound (useful with port 0). */
int rf_serve_port(const rf_server *s);
/* 1 when the bound address is a loopback one (127.0.0.0/8, ::1). */
int rf_serve_loopback(const rf_server *s);
/* Stop: refuse new requests (503), finish the running generation, fail the
 * queued ones, close every connection, join all threads, free. */
/* Counters for tests and the load test (also in /health). */
typedef struct {
    unsigned long done, cancelled;   /* generations finished; of them, whose client had left */
    long long calls_after_cancel;    /* model calls spent after the client left */
} rf_serve_stats;
void rf_serve_get_stats(rf_server *s, rf_serve_stats *out);
void rf_serve_stop(rf_server *s);

/* ---- request parsing (request.c), exposed for tests --------------------------
 * Checked against the model's configuration and tokenizer themselves (the
 * handles' insides: api/api_internal.h), as the unit test builds them. */
typedef enum { RF_REQ_COMPLETION, RF_REQ_CHAT, RF_REQ_NATIVE } rf_req_kind;
/* "tool_choice": none (no tools, or "none": the answer is text), auto (the
 * model's <tool_call> blocks become tool_calls), required / named (the answer
 * is one call, decoded under its grammar) */
enum { RF_TOOLS_NONE = RF_TOOL_CHOICE_NONE, RF_TOOLS_AUTO = RF_TOOL_CHOICE_AUTO, RF_TOOLS_REQUIRED = RF_TOOL_CHOICE_REQUIRED,
       RF_TOOLS_NAMED = RF_TOOL_CHOICE_NAMED }; /* NATIVE: llama-server's /completion */

#define RF_SERVE_MAX_STOP 4
#define RF_SERVE_STOP_LEN 64
#define RF_SERVE_MAX_N 8     /* "n": at most this many choices per request */
#define RF_SERVE_SMALL_SLOT 32 /* a slot_size allowed whatever max_tokens is (larger ones: up to max_tokens) */
typedef struct {
    rf_req_kind kind;
    int *prompt;             /* [n_prompt] token ids (malloc'd) */
    int n_prompt;
    char *prompt_text;       /* chat: the rendered prompt (malloc'd), else NULL */
    rf_decode_opts d;        /* the request's settings (the table's rows, their sources) */
    rf_params p;             /* = d.gen; callbacks left NULL */
    int ar;                  /* p.method == RF_METHOD_AR */
    int max_tokens;          /* hard cap on the answer's tokens (the decoder pads to whole slots) */
    int stream;              /* "stream": true */
    int include_usage;       /* "stream_options": {"include_usage": true} */
    char stop[RF_SERVE_MAX_STOP][RF_SERVE_STOP_LEN];
    int n_stop;
    int n_choices;           /* "n" in [1, RF_SERVE_MAX_N]: choice i is a generation of its own,
                                sampled with seed + i (identical choices when greedy) */
    int decode_events;       /* "decode_events": true: the decoder's events as SSE "event: decode" (routes_llama.c) */
    char err_param[64];      /* after an error: the field at fault ("" when none) */
    const char *err_code;    /* ... and OpenAI's code for it (NULL: none), e.g. "context_length_exceeded" */
    int err_unsupported;     /* ... and it is one this server does not implement */
    struct rf_constraint *constraint; /* "grammar", "json_schema" or a JSON "response_format" (owned; p.constraint) */
    /* "tools" (the chat template renders them; owned), "tool_choice", and the grammar of a required or
       named call (malloc'd; compiled into constraint) */
    struct json_t *tools;
    int tool_choice;         /* RF_TOOLS_* */
    char *tool_gbnf;
    /* the answer's log-probabilities: p.logprobs / p.top_logprobs from chat's "logprobs": true +
       "top_logprobs": N, completions' "logprobs": N, /completion's "n_probs": N */
} rf_serve_req;

/* Parse and validate one request body against the model: JSON syntax and
 * types, known mode, slot_size >= 1, thresholds in [0, 1], the prompt within
 * the vocabulary and prompt + answer within the context (rf_gen_check).
 * 0, or -1 with a one-line message in rf_last_error() (HTTP 400). */
int rf_serve_parse(const char *body, size_t len, rf_req_kind kind, const rf_model *m,
                   const rf_tokenizer *tok, const rf_decode_opts *defaults, rf_serve_req *out);
void rf_serve_req_free(rf_serve_req *r);
/* An upper bound of the positions the request's decoder feeds the model
 * (prompt and every call's window, over all its choices), from the same
 * sizes the decoders use: what the server's per-request budget
 * (--max-request-positions) is checked against. */
int64_t rf_serve_work_positions(const rf_serve_req *r);
/* dst = src cut to at most n - 1 bytes (n >= 1) on a UTF-8 character
 * boundary, so that valid UTF-8 stays valid. */
void rf_serve_utf8_cut(char *dst, size_t n, const char *src);
/* A string the server may put into JSON output: valid UTF-8, no control
 * characters, 1 .. 256 bytes (model ids). 0, or -1 with the reason in
 * rf_last_error() (what names it: what, e.g. "--name"). */
int rf_serve_check_id(const char *id, const char *what);
/* OpenAI's error body {"error": {"message", "type", "param", "code"}} as
 * compact JSON text (malloc'd, never NULL): a message, param or code that
 * is not UTF-8 is replaced, and should building the JSON fail, a fixed
 * body takes its place. param and code may be NULL (JSON null). */
char *rf_serve_error_body(const char *msg, const char *type, const char *param, const char *code);

#endif
