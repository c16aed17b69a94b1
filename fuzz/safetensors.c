/* safetensors.c - libFuzzer: rf_st_open on any bytes (header JSON, offsets,
 * dtypes, shapes), then every tensor's bytes are read through the index. */
#include "fuzz_util.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rf_st_file f;
    if (rf_st_open(&f, fuzz_file(data, size, "model.safetensors")) == 0) {
        /* every accepted tensor must lie inside the file: touch its bytes */
        volatile uint8_t sink = 0;
        for (int i = 0; i < f.n_tensors; i++) {
            const rf_tensor *t = &f.tensors[i];
            const uint8_t *p = t->data;
            for (size_t k = 0; k < t->nbytes; k += 64) sink ^= p[k];
            if (t->nbytes) sink ^= p[t->nbytes - 1];
        }
        (void)sink;
        rf_st_close(&f);
    }
    return 0;
}
