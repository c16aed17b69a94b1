/* config.c - libFuzzer: rf_config_load on any bytes; an accepted config must
 * pass its own validation again and have a parameter count that fits. */
#include "fuzz_util.h"
#include "io/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rf_config c;
    if (rf_config_load(&c, fuzz_file(data, size, "config.json")) == 0) {
        if (rf_config_check(&c, "again")) abort(); /* load accepted what validation refuses */
        if (rf_config_n_params(&c) <= 0) abort();
    }
    return 0;
}
