/* tok_util.c - hash maps, buffers, UTF-8 and the byte-level alphabet used by
 * the tokenizer. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

/* ---- string map ---------------------------------------------------------- */

uint32_t rf_strhash(const char *s, size_t len) { /* FNV-1a */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

void rf_strmap_init(rf_strmap *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2);
    m->n = 0;
    m->slots = rf_calloc(m->cap, sizeof *m->slots);
}

void rf_strmap_free(rf_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static rf_strmap_slot *strmap_find(const rf_strmap *m, const char *key, int len, uint32_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        rf_strmap_slot *s = &m->slots[i];
        if (!s->key) return s;
        if (s->hash == h && s->len == len && !memcmp(s->key, key, (size_t)len)) return s;
    }
}

rf_strmap_slot *rf_strmap_put(rf_strmap *m, const char *key, int len, int val) {
    if ((m->n + 1) * 2 > m->cap) { /* keep load <= 1/2 */
        rf_strmap old = *m;
        m->cap *= 2;
        m->slots = rf_calloc(m->cap, sizeof *m->slots);
        for (size_t i = 0; i < old.cap; i++)
            if (old.slots[i].key) *strmap_find(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash) = old.slots[i];
        free(old.slots);
    }
    uint32_t h = rf_strhash(key, (size_t)len);
    rf_strmap_slot *s = strmap_find(m, key, len, h);
    if (!s->key) {
        s->key = key;
        s->len = len;
        s->hash = h;
        m->n++;
    }
    s->val = val;
    return s;
}

int *rf_strmap_get(const rf_strmap *m, const char *key, int len) {
    if (!m->cap) return NULL;
    rf_strmap_slot *s = strmap_find(m, key, len, rf_strhash(key, (size_t)len));
    return s->key ? &s->val : NULL;
}

/* ---- pair map ------------------------------------------------------------- */

static inline size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

void rf_pairmap_init(rf_pairmap *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2);
    m->n = 0;
    m->slots = rf_malloc(m->cap * sizeof *m->slots);
    for (size_t i = 0; i < m->cap; i++) m->slots[i].key = UINT64_MAX;
}

void rf_pairmap_free(rf_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static rf_pair_slot *pair_find(const rf_pairmap *m, uint64_t k) {
    size_t mask = m->cap - 1;
    for (size_t i = pair_hash(k) & mask;; i = (i + 1) & mask)
        if (m->slots[i].key == k || m->slots[i].key == UINT64_MAX) return &m->slots[i];
}

void rf_pairmap_put(rf_pairmap *m, int a, int b, int rank, int id) {
    if ((m->n + 1) * 2 > m->cap) {
        rf_pairmap old = *m;
        rf_pairmap_init(m, old.cap);
        for (size_t i = 0; i < old.cap; i++)
            if (old.slots[i].key != UINT64_MAX) {
                *pair_find(m, old.slots[i].key) = old.slots[i];
                m->n++;
            }
        free(old.slots);
    }
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    rf_pair_slot *s = pair_find(m, k);
    if (s->key == UINT64_MAX) m->n++;
    s->key = k;
    s->rank = rank;
    s->id = id;
}

const rf_pair_slot *rf_pairmap_get(const rf_pairmap *m, int a, int b) {
    if (!m->cap) return NULL;
    const rf_pair_slot *s = pair_find(m, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b);
    return s->key == UINT64_MAX ? NULL : s;
}

/* ---- vectors and buffers --------------------------------------------------- */

void rf_ivec_grow(rf_ivec *a, size_t need) {
    a->v = rf_grow_to(a->v, sizeof *a->v, need, &a->cap, 64);
}

void rf_buf_put(rf_buf *b, const void *data, size_t n) {
    b->p = rf_grow_to(b->p, 1, b->n + n + 1, &b->cap, 256);
    if (n) memcpy(b->p + b->n, data, n); /* data may be NULL when n == 0 (UBSan) */
    b->n += n;
}

void rf_buf_puts(rf_buf *b, const char *s) { rf_buf_put(b, s, strlen(s)); }

char *rf_buf_cstr(rf_buf *b) {
    rf_buf_put(b, "", 0);
    b->p[b->n] = 0;
    char *p = b->p;
    memset(b, 0, sizeof *b);
    return p;
}

/* ---- UTF-8 ----------------------------------------------------------------- */

int rf_utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;            /* continuation bytes */
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the first continuation */
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F; /* no surrogates */
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F; /* <= U+10FFFF */
    else return -1;      /* 80..C1, F5..FF never start a sequence */
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0; /* truncated */
        unsigned d = s[k];
        if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return -k;
    }
    return need + 1;
}

int rf_utf8_check(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { /* ASCII run */
            i++;
            continue;
        }
        int r = rf_utf8_seq(u + i, n - i);
        if (r <= 0) {
            if (bad) *bad = i;
            return -1;
        }
        i += (size_t)r;
    }
    return 0;
}

size_t rf_utf8_repair(const unsigned char *s, size_t n, int final, rf_buf *out) {
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < n) {
        int r = s[i] < 0x80 ? 1 : rf_utf8_seq(s + i, n - i);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        rf_buf_put(out, s + run, i - run);
        if (r == 0 && !final) return i; /* hold back the truncated tail */
        rf_buf_put(out, "\xEF\xBF\xBD", 3);
        i += r == 0 ? n - i : (size_t)-r;
        run = i;
    }
    if (i > run) rf_buf_put(out, s + run, i - run); /* s may be NULL when n == 0 (UBSan) */
    return i;
}

int rf_utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

int rf_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- byte-level alphabet ----------------------------------------------------
 * GPT-2's bytes_to_unicode: printable bytes (33..126, 161..172, 174..255)
 * stand for themselves; the other 68 bytes get code points 256.. in byte
 * order, so every byte has a visible, non-space spelling. */
const uint16_t rf_byte_cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int rf_cp_byte(uint32_t cp) {
    if (cp < 256) return rf_byte_cp[cp] == cp ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256; /* k-th non-printable byte: 0..32, 127..160, 173 */
    return k <= 32 ? (int)k : k <= 66 ? (int)(127 + k - 33) : 173;
}
