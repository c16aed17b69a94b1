/* api_internal.h - hidden (not exported from the .so): for tests, for the
 * CLI and the server, and for the server's request parser, which checks
 * requests against the model's configuration and tokenizer
 * (serve/request.c). */
#ifndef RF_API_INTERNAL_H
#define RF_API_INTERNAL_H

#include <setjmp.h>

#include "refusion.h"
#include "decode/decode.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

/* Run body with rf_die turned into an error return; on_die runs after the
 * scoped blocks allocated inside were freed (util.h), and DIED is the status
 * to return: RF_ERR_NOMEM for a failed allocation, else RF_ERR_INTERNAL. */
#define CATCH_DIE(on_die)     \
    rf_catch c_;              \
    rf_catch_push(&c_);       \
    if (setjmp(c_.jb)) {      \
        on_die;               \
    }
#define END_CATCH() rf_catch_pop(&c_)
#define DIED (c_.oom ? RF_ERR_NOMEM : RF_ERR_INTERNAL)

/* Buffer allocations (KV cache, rows, run state) the session has made. */
size_t rf_session_allocs(const refusion_session *s);
/* Copies s (NUL-terminated, malloc'd; freed here) into buf as much as cap
 * allows, NUL-terminated, and returns strlen(s) capped at INT32_MAX: the
 * text-returning calls' convention (rf_detokenize). */
int rf_api_copy_out(char *s, char *buf, int cap);

/* The internal model and tokenizer behind the handles. */
const rf_model *rf_api_model(const refusion_model *m);
const rf_tokenizer *rf_api_tokenizer(const refusion_tokenizer *t);
/* The path the model was opened from (its generation_config.json is beside it). */
const char *rf_api_model_path(const refusion_model *m);

#endif
