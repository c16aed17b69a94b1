/* tokenizer_encode.c - encode throughput of the tokenizer.
 *   bench_tokenizer_encode TOKENIZER TEXTFILE [REPEATS]
 * Encodes the whole file in one call, and line by line (one call per line,
 * as prompts arrive), REPEATS times each; reports the best run in MB/s
 * (10^6 bytes of UTF-8 input per second). The last line is machine-readable:
 *   RESULT whole_MBps lines_MBps n_tokens n_bytes
 * scripts/tokenizer/bench.sh runs this next to the JavaScript reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER TEXTFILE [REPEATS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    double t0 = rf_now();
    rf_tokenizer *t = rf_tok_load(argv[1]);
    if (!t) {
        rf_print_error();
        return 1;
    }
    double t_load = rf_now() - t0;
    size_t len;
    char *text = rf_read_file(argv[2], &len);
    if (!text) {
        rf_print_error();
        return 1;
    }
    double best_whole = 1e30, best_lines = 1e30;
    int n_whole = 0;
    long n_lines_tok = 0;
    for (int r = 0; r < reps; r++) {
        int *ids, n;
        double a = rf_now();
        if (rf_tok_encode(t, text, len, &ids, &n)) {
            rf_print_error();
            return 1;
        }
        double dt = rf_now() - a;
        if (dt < best_whole) best_whole = dt;
        n_whole = n;
        free(ids);
        a = rf_now();
        n_lines_tok = 0;
        for (size_t s = 0; s < len;) { /* one call per line, newline included */
            const char *nl = memchr(text + s, '\n', len - s);
            size_t e = nl ? (size_t)(nl - text) + 1 : len;
            if (rf_tok_encode(t, text + s, e - s, &ids, &n)) {
                rf_print_error();
                return 1;
            }
            n_lines_tok += n;
            free(ids);
            s = e;
        }
        dt = rf_now() - a;
        if (dt < best_lines) best_lines = dt;
    }
    printf("C tokenizer: load %.2f s; %zu bytes -> %d tokens (%.2f bytes/token); per-line calls: %ld tokens\n", t_load, len,
           n_whole, (double)len / n_whole, n_lines_tok);
    printf("C encode whole text: %.2f MB/s   line by line: %.2f MB/s   (best of %d)\n", len / best_whole / 1e6,
           len / best_lines / 1e6, reps);
    printf("RESULT %.3f %.3f %d %zu\n", len / best_whole / 1e6, len / best_lines / 1e6, n_whole, len);
    free(text);
    rf_tok_free(t);
    return 0;
}
