/* favourite_token.h - for the decoder tests: a token the model produces
 * often (the most frequent id of its greedy ReFusion answer to prompt). As
 * the EOS it makes answers end early, with dropped slots. 0 when the
 * generation fails. */
#ifndef RF_TEST_FAVOURITE_TOKEN_H
#define RF_TEST_FAVOURITE_TOKEN_H

#include <stdlib.h>

#include "decode/decode.h"

static int favourite_token(const rf_model *m, const int *prompt, int P) {
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 32, p.slot_size = 4, p.n_blocks = 2, p.eos_id = -1;
    rf_gen_result r;
    if (rf_generate_refusion(m, prompt, P, &p, &r)) return 0;
    int *cnt = calloc((size_t)m->cfg.vocab_size, sizeof *cnt), best = r.ids[0];
    for (int i = 0; i < r.n_ids; i++)
        if (++cnt[r.ids[i]] > cnt[best]) best = r.ids[i];
    free(cnt);
    rf_gen_result_free(&r);
    return best;
}

#endif
