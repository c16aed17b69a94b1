/* decode.c - the one place that chooses a decoder (see decode.h rf_decode). */
#include "decode/decode.h"

#include "decode/mdm.h"

static const char *const method_names[] = {"refusion", "ar", "mdm"}; /* by rf_method */
_Static_assert(RF_METHOD_REFUSION == 0 && RF_METHOD_AR == 1 && RF_METHOD_MDM == 2, "method_names order");
/* the option table stores a choice's index as an int (common/args.h RF_OPT_CHOICE) */
_Static_assert(sizeof(rf_method) == sizeof(int), "rf_method is stored as an int");

const char *rf_method_name(rf_method method) {
    return (int)method >= 0 && (int)method < (int)(sizeof method_names / sizeof *method_names) ? method_names[method]
                                                                                              : NULL;
}

int rf_decode(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p, const rf_mdm_params *mp,
              rf_gen_result *out) {
    switch (p->method) {
    case RF_METHOD_AR: return rf_generate_ar(m, prompt, n_prompt, p, out);
    case RF_METHOD_MDM: return rf_generate_mdm(m, prompt, n_prompt, p, mp, out); /* mp NULL: rf_mdm_params_of */
    case RF_METHOD_REFUSION:
        return p->no_cache ? rf_generate_refusion_naive(m, prompt, n_prompt, p, out)
                           : rf_generate_refusion(m, prompt, n_prompt, p, out);
    }
    rf_set_error("unknown method %d", (int)p->method);
    return -1;
}
