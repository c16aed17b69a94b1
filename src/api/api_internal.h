/* api_internal.h - hidden (not exported from the .so): for tests, for the
 * CLI and the server, whose option table fills the decoders' settings
 * (common/args.h), and for the server's request parser, which checks
 * requests against the model's configuration and tokenizer
 * (serve/request.c). */
#ifndef RF_API_INTERNAL_H
#define RF_API_INTERNAL_H

#include "refusion.h"
#include "decode/decode.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Buffer allocations (KV cache, rows, run state) the session has made. */
size_t rf_session_allocs(const refusion_session *s);

/* The decoders' settings as rf_params (the reverse of what rf_generate
 * does; mask_id and the callbacks are not carried): for the CLI and the
 * server, whose option table fills an rf_gen_params. */
rf_params rf_params_from_gen(const rf_gen_params *g);

/* The internal model and tokenizer behind the handles. */
const rf_model *rf_api_model(const refusion_model *m);
const rf_tokenizer *rf_api_tokenizer(const refusion_tokenizer *t);

#endif
