/* tokenizer.c - libFuzzer, two targets by the first byte:
 *  even: the bytes are a tokenizer.json for rf_tok_load (with the demo
 *        model's tokenizer_config.json absent);
 *  odd:  the bytes are text for the demo model's tokenizer: encode, decode,
 *        stream-decode, and decoding must give the text back when it is
 *        valid UTF-8 (byte-level BPE is lossless), up to the tokenizer's
 *        NFC normalizer: "\xcd\x80" (U+0340) comes back as U+0300. */
#include <string.h>
#include <utf8proc.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static rf_tokenizer *demo;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    if (!(data[0] & 1)) {
        rf_tokenizer *t = rf_tok_load(fuzz_file(data + 1, size - 1, "tokenizer.json"));
        if (t) {
            int *ids = NULL, n = 0;
            if (rf_tok_encode(t, "Hello world 123", 15, &ids, &n) == 0) free(rf_tok_decode(t, ids, n, 0));
            free(ids);
            rf_tok_free(t);
        }
        return 0;
    }
    if (!demo) {
        char *p = rf_path_join(fuzz_src(), "models/refusion-demo");
        demo = rf_tok_load(p);
        free(p);
        if (!demo) abort();
    }
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int *ids = NULL, n = 0;
    if (rf_tok_encode(demo, text, len, &ids, &n) == 0) {
        char *back = rf_tok_decode(demo, ids, n, 0);
        /* a NUL in the text ends the decoded C string early: only compare without one */
        if (!memchr(text, 0, len)) {
            char *z = malloc(len + 1);
            memcpy(z, text, len);
            z[len] = 0;
            char *want = (char *)utf8proc_NFC((const utf8proc_uint8_t *)z); /* NULL: not valid UTF-8 */
            const char *ref = want ? want : z;
            if (!back || strcmp(back, ref)) abort();
            free(want);
            free(z);
        }
        free(back);
        rf_tok_stream *s = rf_tok_stream_new(demo, 0);
        for (int i = 0; i < n; i++) rf_tok_stream_put(s, ids[i]);
        rf_tok_stream_flush(s);
        rf_tok_stream_free(s);
    }
    free(ids);
    /* arbitrary ids, in and out of the vocabulary */
    int n_ids = (int)(len / 2);
    int *raw = malloc(sizeof(int) * (size_t)(n_ids + 1));
    for (int i = 0; i < n_ids; i++) raw[i] = (int)(((unsigned)(uint8_t)text[2 * i] << 8 | (uint8_t)text[2 * i + 1]) % 1024);
    free(rf_tok_decode(demo, raw, n_ids, 1));
    free(raw);
    return 0;
}
