/* quant.h - ggml's block formats: their layouts and scalar reference
 * conversions live in formats/blocks.h (below both io and kernels). */
#ifndef RF_QUANT_H
#define RF_QUANT_H
#include "formats/blocks.h"
#include "io/safetensors.h"
#endif
