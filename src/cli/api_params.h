/* api_params.h - the shared decoding options (args.h rf_decode_opts, what
 * the command line and a request body set) as the public API's rf_params,
 * for `refusion generate` and the server, which generate through
 * include/refusion.h. Callbacks and cancel are left for the caller. */
#ifndef RF_API_PARAMS_H
#define RF_API_PARAMS_H

#include "cli/args.h"
#include "refusion.h"

/* g: the settings (d->gen, or a request's copy of it); decoder: RF_DECODER_*;
 * steps: mdm steps (0: gen_length). */
static inline rf_params rf_params_from_opts(const rf_gen_params *g, int decoder, int steps) {
    rf_params p = rf_params_default();
    p.method = decoder == RF_DECODER_AR ? RF_METHOD_AR : decoder == RF_DECODER_MDM ? RF_METHOD_MDM : RF_METHOD_REFUSION;
    p.gen_length = g->gen_length;
    p.slot_size = g->slot_size;
    p.n_blocks = g->n_blocks;
    p.slot_threshold = g->slot_threshold;
    p.token_threshold = g->token_threshold;
    p.ar_verify = g->ar_correct + 2 * g->ar_check_first;
    p.mdm_steps = steps;
    p.temperature = g->temperature;
    p.top_k = g->top_k;
    p.top_p = g->top_p;
    p.seed = g->seed;
    p.lookahead = g->lookahead;
    p.jacobi = g->jacobi;
    p.eos_id = g->eos_id == RF_ID_FROM_MODEL ? RF_TOKEN_FROM_MODEL : g->eos_id;
    return p;
}

#endif
