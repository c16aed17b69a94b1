/* pretok.c - normalisation (NFC) and the Split pre-tokenizer.
 *
 * Qwen3's tokenizer.json normalises with NFC, then splits text with a
 * Unicode regex into "words"; BPE runs inside each word. The regex is read
 * from the file and compiled with PCRE2 (UTF + Unicode properties). One
 * detail differs between regex engines: what \s means. The Hugging Face
 * tokenizers library (which defines the reference behaviour, through
 * Oniguruma) uses the Unicode White_Space property; PCRE2 also counts
 * U+180E, and JavaScript counts U+FEFF but not U+0085. We rewrite \s and \S
 * to the explicit White_Space set so the split is the library's. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

const char *const RF_QWEN_PRETOK_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Unicode White_Space, as the body of a character class. */
static const char WS_SET[] =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";

/* ---- NFC ------------------------------------------------------------------ */

/* A code point that NFC leaves alone and that cannot combine with the one
 * before it. Runs made only of these are already NFC, which spares the
 * utf8proc call for nearly all ASCII / CJK text. */
static int nfc_inert(uint32_t cp) {
    if (cp < 0x300) return 1; /* nothing below U+0300 reorders, decomposes under NFC or is a second */
    if ((cp >= 0x1160 && cp <= 0x11FF) || (cp >= 0xD7B0 && cp <= 0xD7FF)) return 0; /* Hangul V/T jamo */
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0) return 0;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return 0; /* canonical decomposition */
    if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return 0;  /* second of a composition */
    return 1;
}

/* NFC without running the normaliser over the whole text: a boundary
 * exists before every inert character (nothing before it can reorder past it
 * or compose with it), so only the stretches from the inert character before
 * a non-inert one up to the next inert one go through utf8proc. */
int rf_nfc(const char *s, size_t n, char **out, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)s;
    rf_buf b = {0};
    size_t i = 0, copied = 0, last_inert = 0; /* s[copied..) not yet in b; last_inert >= copied */
    while (i < n) {
        if (u[i] < 0x80) {
            last_inert = i++;
            continue;
        }
        uint32_t cp;
        int l = rf_utf8_decode(u + i, &cp);
        if (nfc_inert(cp)) {
            last_inert = i;
            i += (size_t)l;
            continue;
        }
        size_t from = last_inert; /* a boundary: an inert character's start, or where copying stopped */
        size_t j = i + (size_t)l; /* extend to the next inert character */
        while (j < n) {
            uint32_t c2;
            int l2 = u[j] < 0x80 ? 1 : rf_utf8_decode(u + j, &c2);
            if (u[j] < 0x80 || nfc_inert(c2)) break;
            j += (size_t)l2;
        }
        rf_buf_put(&b, s + copied, from - copied);
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map(u + from, (utf8proc_ssize_t)(j - from), &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0) {
            free(b.p);
            rf_set_error("NFC normalisation failed: %s", utf8proc_errmsg(r));
            return -1;
        }
        rf_buf_put(&b, dst, (size_t)r);
        free(dst);
        copied = last_inert = i = j;
    }
    if (!b.p) { /* already NFC */
        *out = NULL;
        *out_n = n;
        return 0;
    }
    rf_buf_put(&b, s + copied, n - copied);
    *out_n = b.n;
    *out = rf_buf_cstr(&b);
    return 0;
}

/* ---- regex ---------------------------------------------------------------- */

pcre2_code *rf_pretok_compile(const char *pattern) {
    size_t n = strlen(pattern);
    rf_buf b = {0};
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            char d = pattern[++i];
            if (d == 's') {
                if (!in_class) rf_buf_puts(&b, "[");
                rf_buf_puts(&b, WS_SET);
                if (!in_class) rf_buf_puts(&b, "]");
            } else if (d == 'S' && !in_class) {
                rf_buf_puts(&b, "[^");
                rf_buf_puts(&b, WS_SET);
                rf_buf_puts(&b, "]");
            } else { /* any other escape (incl. \S inside a class) is kept */
                rf_buf_put(&b, &c, 1);
                rf_buf_put(&b, &d, 1);
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            rf_buf_put(&b, &c, 1);
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && pattern[i + 1] == '^') rf_buf_put(&b, &pattern[++i], 1);
            if (i + 1 < n && pattern[i + 1] == ']') rf_buf_put(&b, &pattern[++i], 1);
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') { /* [:posix:] */
            const char *end = strstr(pattern + i + 2, ":]");
            size_t stop = end ? (size_t)(end - pattern) + 2 : n;
            rf_buf_put(&b, pattern + i, stop - i);
            i = stop - 1;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        rf_buf_put(&b, &c, 1);
    }
    char *pat = rf_buf_cstr(&b);
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        rf_set_error("pre-tokenizer regex does not compile: %s", (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    return re;
}

int rf_pretokenize(const pcre2_code *re, const char *s, size_t n, rf_piece_fn cb, void *ctx) {
    if (!re) {
        if (n) cb(s, n, ctx);
        return 0;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    size_t pos = 0, gap = 0; /* s[gap..match start) is unmatched text */
    int rc = 0;
    while (pos < n) {
        /* the text was checked once up front; skipping PCRE2's own check
         * avoids re-validating the rest of the subject at every match */
        int r = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its frames on the heap */
            r = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            rf_set_error("pre-tokenizer regex failed: %s", (char *)msg);
            rc = -1;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], e = ov[1];
        if (a > gap) cb(s + gap, a - gap, ctx);
        if (e > a) {
            cb(s + a, e - a, ctx);
            pos = gap = e;
        } else { /* empty match: step over one character */
            pos = a + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
            gap = a;
        }
    }
    if (rc == 0 && gap < n) cb(s + gap, n - gap, ctx);
    pcre2_match_data_free(md);
    return rc;
}
