/* gguf.c - libFuzzer: rf_gguf_open on any bytes (header, metadata of every
 * type, tensor infos), then every accepted tensor's bytes are touched. */
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
        rf_gguf_close(&f);
    }
    return 0;
}
