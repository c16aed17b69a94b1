/* fuzz_util.h - what the libFuzzer harnesses share (fuzz/README.md). */
#ifndef RF_FUZZ_UTIL_H
#define RF_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The parsers under test read files: the input goes to one temp file per
 * process, rewritten for every run. */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/rf_fuzz_%d_%s", (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

/* The repository root (for the demo model's tokenizer): REFUSION_SRC or ".". */
static const char *fuzz_src(void) {
    const char *s = getenv("REFUSION_SRC");
    return s ? s : ".";
}

#endif
