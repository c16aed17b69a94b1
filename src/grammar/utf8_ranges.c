/* utf8_ranges.c - code point ranges as UTF-8 byte-range sequences, so that a
 * character class becomes a few alternatives of byte sets (the standard
 * construction: split the range where the encoding length changes, then
 * where the continuation bytes stop spanning their full 0x80..0xBF). */
#include "grammar/grammar_impl.h"

int rf_utf8_put(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12), o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18), o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

void rf_utf8_sequences(uint32_t lo, uint32_t hi,
                       void (*emit)(const uint8_t *, const uint8_t *, int, void *), void *user) {
    if (lo > hi) return;
    /* one encoding length on each side */
    static const uint32_t len_max[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i]) {
            rf_utf8_sequences(lo, len_max[i], emit, user);
            rf_utf8_sequences(len_max[i] + 1, hi, emit, user);
            return;
        }
    /* then ranges whose trailing continuation bytes span 0x80..0xBF fully */
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                rf_utf8_sequences(lo, lo | m, emit, user);
                rf_utf8_sequences((lo | m) + 1, hi, emit, user);
                return;
            }
            if ((hi & m) != m) {
                rf_utf8_sequences(lo, (hi & ~m) - 1, emit, user);
                rf_utf8_sequences(hi & ~m, hi, emit, user);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    int n = rf_utf8_put(lo, a);
    rf_utf8_put(hi, b);
    emit(a, b, n, user);
}
