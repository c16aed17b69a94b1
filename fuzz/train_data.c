/* train_data.c - libFuzzer: a training data file (JSON list or JSON Lines of
 * {"query", "response"}) tokenised with the demo tokenizer; every accepted
 * example must fit the length it was loaded for. */
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"
#include "util/util.h"

static rf_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) {
        char *p = rf_path_join(fuzz_src(), "models/refusion-demo");
        tok = rf_tok_load(p);
        free(p);
        if (!tok) abort();
    }
    rf_dataset d = {0};
    int skipped = 0;
    if (rf_dataset_load(&d, fuzz_file(data, size, "data.jsonl"), tok, 64, 1, &skipped) == 0) {
        for (int i = 0; i < d.n; i++)
            if (d.ex[i].n_prompt < 0 || d.ex[i].n_prompt > 64) abort();
        rf_dataset_free(&d);
    }
    return 0;
}
