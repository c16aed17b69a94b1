/* llama_quantize.c - llama.cpp's own quantizer (llama_model_quantize in the
 * prebuilt libllama of npm node-llama-cpp), as a command for the tests:
 *   llama_quantize IN.gguf OUT.gguf FTYPE [pure] [requant]
 * FTYPE is llama.cpp's enum llama_ftype number (0 = all F32, 15 = Q4_K_M,
 * ...); "pure" quantizes every matrix to the ftype's base type,
 * "requant" allows quantized inputs (dequantized first, as llama-quantize
 * --allow-requantize does). No importance matrix. Built by
 * scripts/gguf/fetch_quantize.sh against the headers of the llama.cpp
 * source the same npm package ships. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: llama_quantize IN.gguf OUT.gguf FTYPE [pure] [requant]\n");
        return 2;
    }
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)atoi(argv[3]);
    p.nthread = 2;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "pure")) p.pure = true;
        else if (!strcmp(argv[i], "requant")) p.allow_requantize = true;
    }
    uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
    llama_backend_free();
    if (rc) fprintf(stderr, "llama_quantize: llama_model_quantize failed (%u)\n", rc);
    return rc ? 1 : 0;
}
