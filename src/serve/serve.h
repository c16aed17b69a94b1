/* serve.h - `refusion serve`: an HTTP server with an OpenAI-compatible subset
 * of endpoints around one loaded model.
 *
 *   GET  /health                 {"status": "ok", ...}
 *   GET  /v1/models              the one model
 *   POST /v1/completions         {"prompt": str | [ids], "max_tokens", ...}
 *   POST /v1/chat/completions    {"messages": [{"role", "content"}], ...}
 *
 * Generation requests go into a FIFO queue served by one worker thread, so
 * the model runs one request at a time with all its OpenMP threads; HTTP
 * connections each get their own thread (libmicrohttpd thread-per-connection)
 * and wait for their job. "stream": true answers with Server-Sent Events as
 * answer tokens become final (every position before them is filled).
 *
 * request.c  JSON body -> prompt ids + rf_gen_params (all validation)
 * worker.c   the job queue and the generation thread, SSE chunk building
 * http.c     libmicrohttpd glue: routing, bodies, responses, start/stop */
#ifndef RF_SERVE_H
#define RF_SERVE_H

#include <stddef.h>

#include "decode/decode.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *host;        /* numeric address or name to bind (default 127.0.0.1) */
    int port;                /* 0: any free port (see rf_serve_port) */
    const char *model_name;  /* "id" in responses (default: the model dir's basename) */
    size_t max_body;         /* larger request bodies get 413 */
    int max_queue;           /* waiting + running generations; more get 503 */
    int threads;             /* OpenMP threads of the worker (0: OpenMP default) */
    /* resource limits (see README "Reliability") */
    int max_connections;     /* open connections in all (each is a thread) */
    int max_per_client;      /* open connections from one IP address */
    int timeout_s;           /* a connection idle this long while sending its request is closed */
    int queue_wait_s;        /* a request still queued after this long gets 503 */
    size_t max_request_bytes;/* a generation's working memory (rf_gen_mem_bytes); 0: half the RAM */
    int verbose;             /* 1: one log line per request on stderr */
    rf_gen_params defaults;  /* decoding settings when a request does not say */
    int default_ar;          /* default mode: 1 = ar, 0 = refusion */
} rf_serve_config;

/* Sensible defaults: 127.0.0.1:8080, 4 MiB bodies, queue of 64, 256
 * connections of which 16 per client, 10 s to send a request, 300 s in the
 * queue, half the RAM per generation, the decoder's defaults
 * (rf_gen_params_default), refusion mode, verbose. */
void rf_serve_config_default(rf_serve_config *c);

typedef struct rf_server rf_server;

/* Start listening and serving in background threads. m and tok (tok may be
 * NULL: prompts must then be token ids, and chat is refused) must outlive
 * the server. NULL with rf_last_error() on failure (e.g. port in use). */
rf_server *rf_serve_start(const rf_model *m, const rf_tokenizer *tok, const rf_serve_config *c);
/* The port actually bound (useful with port 0). */
int rf_serve_port(const rf_server *s);
/* Stop: refuse new requests (503), finish the running generation, fail the
 * queued ones, close every connection, join all threads, free. */
/* Counters for tests and the load test (also in /health). */
typedef struct {
    unsigned long done, cancelled;   /* generations finished; of them, whose client had left */
    long long calls_after_cancel;    /* model calls spent after the client left */
} rf_serve_stats;
void rf_serve_get_stats(rf_server *s, rf_serve_stats *out);
void rf_serve_stop(rf_server *s);

/* ---- request parsing (request.c), exposed for tests -------------------------- */
typedef enum { RF_REQ_COMPLETION, RF_REQ_CHAT } rf_req_kind;

typedef struct {
    rf_req_kind kind;
    int *prompt;             /* [n_prompt] token ids (malloc'd) */
    int n_prompt;
    rf_gen_params p;         /* callbacks left NULL */
    int ar;                  /* 1: AR decoding, 0: ReFusion */
    int stream;              /* "stream": true */
} rf_serve_req;

/* Parse and validate one request body against the model: JSON syntax and
 * types, known mode, slot_size >= 1, thresholds in [0, 1], the prompt within
 * the vocabulary and prompt + answer within the context (rf_gen_check).
 * 0, or -1 with a one-line message in rf_last_error() (HTTP 400). */
int rf_serve_parse(const char *body, size_t len, rf_req_kind kind, const rf_model *m,
                   const rf_tokenizer *tok, const rf_gen_params *defaults, int default_ar,
                   rf_serve_req *out);
void rf_serve_req_free(rf_serve_req *r);

#endif
