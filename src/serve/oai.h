/* oai.h - OpenAI's response shapes and a job's output buffer (oai.c). */
#ifndef RF_SERVE_OAI_H
#define RF_SERVE_OAI_H

#include <jansson.h>

#include "serve/serve_impl.h"

/* one SSE event "data: <json>" (o consumed; s->mu held / taken) */
void rf_job_sse_append_locked(job *j, json_t *o);
void rf_job_sse_text_locked(job *j, char *txt);
/* the line "data: [DONE]" that ends an OpenAI stream (s->mu held) */
void rf_job_sse_done_locked(job *j);
/* one SSE event "event: <name>" with "data: <txt>" (txt consumed; s->mu held) */
void rf_job_sse_named_locked(job *j, const char *name, char *txt);
/* a stream that a fault cut short closed with an error event (oom: out of
 * memory, else an internal error) and [DONE], with nothing allocated where
 * anything was appended before (s->mu held) */
void rf_job_stream_cut_locked(job *j, int oom);
void rf_job_sse_event(rf_server *s, job *j, json_t *o);
/* {"id", "object", "created", "model"} of a response (chunk: a stream's) */
json_t *rf_oai_envelope(const rf_server *s, const job *j, int chunk);
/* choices[index] with its text and token ids; finish NULL: none yet;
 * logprobs (consumed): rf_oai_logprobs's, or NULL */
json_t *rf_oai_choice(const job *j, int index, const char *text, const int32_t *ids, int n, const char *finish,
                      int chunk, json_t *logprobs);
/* The log-probabilities of answer tokens ids[0..n) (lp[i] ids[i]'s; text
 * offset: where each token's text starts in the choice's text), in the
 * request's shape: chat {"content": [{"token", "logprob", "bytes",
 * "top_logprobs"}], "refusal": null}, completions {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}, llama-server's
 * /completion [{"id", "token", "bytes", "logprob", "top_logprobs"}]. Special
 * tokens (not in the text) are left out. NULL when the request did not ask. */
json_t *rf_oai_logprobs(const rf_server *s, const job *j, const int32_t *ids, const rf_token_logprob *lp,
                        const size_t *text_offset, int n);
/* the "refusion" object: the decoder's statistics and settings */
json_t *rf_oai_stats(const job *j, const rf_stats *r);

#endif
