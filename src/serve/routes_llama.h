/* routes_llama.h - llama-server's own endpoints beside the OpenAI ones, and
 * the pieces of llama-server's answer shapes the generation path uses.
 *
 *   POST /tokenize        {"content", "add_special", "with_pieces"} -> {"tokens"}
 *   POST /detokenize      {"tokens"} -> {"content"}
 *   POST /apply-template  {"messages"} -> {"prompt"}: the chat template's text
 *   GET  /props           default generation settings, total_slots, chat template, model, build
 *   GET  /slots           one entry per slot: id, state, task, progress
 *   POST /completion      the native generation endpoint (also /completions)
 *   POST /infill          fill in the middle, with the model's FIM tokens (501 without)
 *   POST /embeddings      501: the model has no embedding head (also /v1/embeddings)
 *   GET  /                the web page (web/; --no-webui, --path DIR)
 *
 * http.c asks rf_llama_route which of these a request is; the generation
 * ones are translated into the body the OpenAI completions parser reads
 * (rf_llama_translate) and run as RF_REQ_NATIVE jobs, whose answers
 * answer.c builds with rf_llama_chunk / rf_llama_final; the others are
 * answered here (rf_llama_answer). */
#ifndef RF_SERVE_ROUTES_LLAMA_H
#define RF_SERVE_ROUTES_LLAMA_H

#include <jansson.h>

#include "serve/serve_impl.h"

typedef enum {
    RL_TOKENIZE, RL_DETOKENIZE, RL_APPLY_TEMPLATE, RL_PROPS, RL_SLOTS, RL_COMPLETION, RL_COMPLETIONS, RL_INFILL,
    RL_EMBEDDINGS, RL_V1_EMBEDDINGS, RL_PAGE, RL_N
} rf_llama_route_id;

/* The route of a request target (query string excluded by MHD), or -1.
 * RL_PAGE: "/" and, with --path, any other file path the OpenAI routes do
 * not take. */
int rf_llama_route(const rf_server *s, const char *url);
const char *rf_llama_route_method(int route);
/* 1: the route runs a generation (a job): /completion, /completions, /infill */
int rf_llama_is_generation(int route);

/* A complete request to a route that is not a generation: the status, the
 * body (malloc'd, never NULL) and its content type. url: the target (for
 * the page's files). */
int rf_llama_answer(rf_server *s, int route, const char *url, const char *body, size_t len, char **out,
                    const char **type);

/* A generation route's body as the OpenAI completions body rf_serve_parse
 * reads (malloc'd), or NULL with the status in *status (400, 501) and the
 * reason in rf_last_error(), the field at fault in param. */
char *rf_llama_translate(rf_server *s, int route, const char *body, size_t len, int *status, char *param,
                         size_t param_cap);

/* ---- the answers of RF_REQ_NATIVE jobs (answer.c) ---- */
/* a stream's chunk: {"index", "content", "tokens", "stop": false, "id_slot"}, and
 * "completion_probabilities" when probs (consumed) is not NULL */
json_t *rf_llama_chunk(const job *j, const char *piece, const int32_t *ids, int n, json_t *probs);
/* the answer (or a stream's last chunk, text "" and no ids): content, tokens,
 * stop, stop_type ("eos", "limit", "word"), stopping_word, tokens_predicted,
 * tokens_evaluated, generation_settings, model, id_slot; "completion_probabilities"
 * when probs (consumed) is not NULL */
json_t *rf_llama_final(const rf_server *s, const job *j, const char *text, const int32_t *ids, int n,
                       const char *stop_type, const char *stopping_word, json_t *probs);

/* llama-server's "timings" object */
typedef struct {
    int prompt_n;
    double prompt_s;
    int predicted_n;
    double predicted_s;
} rf_serve_timing;
json_t *rf_serve_timings_json(const rf_serve_timing *t);

/* A decoder event of a job that asked for them ("decode_events": true):
 * appended to its stream as "event: decode" with {"kind", "step", "apos",
 * "tok", "text", "accepted"}. s->mu held. */
void rf_serve_decode_event_locked(rf_server *s, job *j, const rf_event *ev);

/* ---- slots: each running job holds one (s->mu held) ---- */
/* One slot per row of the scheduler's calls (--parallel). */
void rf_serve_slots_init(rf_server *s);
void rf_serve_slots_free(rf_server *s);
void rf_serve_slot_take_locked(rf_server *s, job *j);
void rf_serve_slot_give_locked(rf_server *s, job *j);

#endif
