/* gguf.c - libFuzzer: rf_gguf_open on any bytes (header, metadata of every
 * type, tensor infos), then the first row of every accepted tensor is
 * dequantized (every block type's reference dequantizer on whatever bytes
 * the file holds). */
#include <stdlib.h>

#include "formats/blocks.h"
#include "fuzz_util.h"
#include "io/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rf_gguf_file f;
    if (rf_gguf_open(&f, fuzz_file(data, size, "model.gguf")) == 0) {
        int64_t x;
        double d;
        rf_gguf_str s;
        rf_gguf_get_int(&f, "qwen3.block_count", &x);
        rf_gguf_get_float(&f, "qwen3.rope.freq_base", &d);
        rf_gguf_get_str(&f, "general.architecture", &s);
        for (int i = 0; i < f.n_tensors; i++) {
            const rf_gguf_tensor *t = &f.tensors[i];
            if (t->ne[0] <= 0 || t->ne[0] > (1 << 16) || t->nbytes < rf_dtype_row_bytes(t->dtype, t->ne[0])) continue;
            float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
            if (row) rf_dequantize_row(t->dtype, t->data, row, t->ne[0]);
            free(row);
        }
        rf_gguf_close(&f);
    }
    return 0;
}
