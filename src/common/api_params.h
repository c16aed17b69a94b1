/* api_params.h - the shared decoding options (args.h rf_decode_opts, what
 * the command line and a request body set) as the public API's rf_params,
 * for `refusion generate` and the server, which generate through
 * include/refusion.h. Callbacks and cancel are left for the caller. */
#ifndef RF_API_PARAMS_H
#define RF_API_PARAMS_H

#include "api/api_internal.h"
#include "common/args.h"
#include "refusion.h"

/* g: the settings (d->gen, or a request's copy of it); decoder: RF_DECODER_*;
 * steps: mdm steps (0: gen_length). */
static inline rf_params rf_params_from_opts(const rf_gen_params *g, int decoder, int steps) {
    return rf_params_from_gen(g, decoder == RF_DECODER_AR ? RF_METHOD_AR
                                 : decoder == RF_DECODER_MDM ? RF_METHOD_MDM
                                                              : RF_METHOD_REFUSION,
                              steps);
}

#endif
