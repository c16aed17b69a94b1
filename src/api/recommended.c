/* recommended.c - the settings a program starts from: the model's
 * generation_config.json over rf_params_default() (read by the same code as
 * the command-line tools and the server: common/args.c), and the OpenMP
 * threads of the calling thread. */
#include "refusion.h"

#include <omp.h>
#include <setjmp.h>

#include "api/api_internal.h"
#include "common/args.h"
#include "util/util.h"

RF_API int rf_params_recommended(const refusion_model *m, const refusion_tokenizer *t, rf_params *p) {
    if (!m || !p) {
        rf_set_error("rf_params_recommended: bad arguments");
        return RF_ERR_INVALID;
    }
    int tok_eos = t ? rf_tokenizer_eos_id(t) : -1;
    rf_decode_opts d;
    rf_decode_opts_default(&d);
    int rc;
    rf_catch c;
    rf_catch_push(&c);
    if (setjmp(c.jb)) return c.oom ? RF_ERR_NOMEM : RF_ERR_INTERNAL;
    rc = rf_decode_opts_from_config(&d, rf_api_model_path(m), tok_eos);
    rf_catch_pop(&c);
    if (rc) return RF_ERR_INVALID;
    /* the answer ends at the file's EOS, else the tokenizer's (as `generate`
     * and `serve` do), else the model config's */
    if (d.config_eos >= 0) d.gen.eos_id = d.config_eos;
    else if (tok_eos >= 0) d.gen.eos_id = tok_eos;
    *p = d.gen;
    return RF_OK;
}

RF_API int rf_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
    return omp_get_max_threads();
}
