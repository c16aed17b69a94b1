/* encode.c - text -> ids.
 *
 * Pipeline, as in the Hugging Face tokenizers library:
 *   1. added tokens (<|im_end|>, <think>, ...) are found in the raw text,
 *      longest match first, leftmost first; they become their own ids;
 *   2. each stretch of text between them is NFC-normalised,
 *   3. split into words by the pre-tokenizer regex,
 *   4. each word's bytes become byte-level symbols, and BPE merges the
 *      adjacent pair with the lowest merge rank (leftmost on ties) until no
 *      pair has a merge. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/heap.h"
#include "tokenizer/tok_internal.h"
#include "util/util.h"

typedef struct {
    int rank, pos; /* heap order: lowest rank, then leftmost */
    int a, b, id;  /* the pair when pushed, and its merged token */
} bpe_cand;

/* Per-call state: scratch for BPE and a small cache of word -> ids, so the
 * tokenizer itself stays read-only (safe to share across threads). */
#define CACHE_MAX_SLOTS 4096
#define CACHE_MAX_WORD 32
typedef struct {
    uint32_t hash;
    uint8_t wlen, nids; /* nids == 0: empty slot */
    char word[CACHE_MAX_WORD];
    int ids[CACHE_MAX_WORD];
} cache_slot;

typedef struct {
    const rf_tokenizer *t;
    rf_ivec *out;
    int *sym, *nxt, *prv; /* [cap] symbol id (-1 = merged away), links */
    size_t cap;
    bpe_cand *heap;
    size_t hn, hcap;
    cache_slot *cache; /* [cache_slots], allocated on first use */
    size_t cache_slots; /* a power of two, scaled to the text so short calls stay cheap */
    int err;
} enc_ctx;

static int cand_less(const bpe_cand *x, const bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

RF_HEAP_DEFINE(enc_ctx, bpe_cand, cand_less, 64)

/* Queue the pair starting at symbol i, if it has a merge. */
static void push_pair(enc_ctx *c, int i) {
    if (i < 0 || c->nxt[i] < 0) return;
    int a = c->sym[i], b = c->sym[c->nxt[i]];
    const rf_pair_slot *m = rf_pairmap_get(&c->t->merges, a, b);
    if (m) heap_push(c, (bpe_cand){m->rank, i, a, b, m->id});
}

/* BPE over one word; appends its ids to c->out. */
static void bpe_word(enc_ctx *c, const unsigned char *w, size_t n) {
    const rf_tokenizer *t = c->t;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[w[i]] < 0) {
            rf_set_error("the vocabulary has no token for byte 0x%02x", w[i]);
            c->err = 1;
            return;
        }
    if (n == 1) {
        rf_ivec_push(c->out, t->byte_id[w[0]]);
        return;
    }
    if (n > c->cap) {
        c->cap = n * 2;
        free(c->sym), free(c->nxt), free(c->prv);
        c->sym = rf_malloc(c->cap * sizeof(int));
        c->nxt = rf_malloc(c->cap * sizeof(int));
        c->prv = rf_malloc(c->cap * sizeof(int));
    }
    int *sym = c->sym, *nxt = c->nxt, *prv = c->prv;
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[w[i]];
        prv[i] = (int)i - 1;
        nxt[i] = i + 1 < n ? (int)i + 1 : -1;
    }
    c->hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(c, (int)i);
    while (c->hn) {
        bpe_cand m = heap_pop(c);
        int i = m.pos, j = nxt[i];
        /* stale: i was merged away, or one side changed since the push */
        if (sym[i] != m.a || j < 0 || sym[j] != m.b) continue;
        sym[i] = m.id;
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] >= 0) prv[nxt[j]] = i;
        push_pair(c, prv[i]);
        push_pair(c, i);
    }
    for (int i = 0; i >= 0; i = nxt[i]) rf_ivec_push(c->out, sym[i]);
}

/* Word -> ids through the per-call cache (short words only). */
static void on_piece(const char *p, size_t n, void *ctx) {
    enc_ctx *c = ctx;
    if (c->err) return;
    if (n > CACHE_MAX_WORD) {
        bpe_word(c, (const unsigned char *)p, n);
        return;
    }
    if (!c->cache) c->cache = rf_calloc(c->cache_slots, sizeof *c->cache);
    uint32_t h = rf_strhash(p, n);
    cache_slot *s = &c->cache[h & (c->cache_slots - 1)];
    if (s->nids && s->hash == h && s->wlen == n && !memcmp(s->word, p, n)) {
        for (int k = 0; k < s->nids; k++) rf_ivec_push(c->out, s->ids[k]);
        return;
    }
    size_t before = c->out->n;
    bpe_word(c, (const unsigned char *)p, n);
    if (c->err) return;
    s->hash = h;
    s->wlen = (uint8_t)n;
    s->nids = (uint8_t)(c->out->n - before); /* <= n <= CACHE_MAX_WORD */
    memcpy(s->word, p, n);
    memcpy(s->ids, c->out->v + before, s->nids * sizeof(int));
}

/* Normalise + pre-tokenize + BPE one stretch of text without added tokens. */
static void encode_segment(enc_ctx *c, const char *s, size_t n) {
    if (!n || c->err) return;
    if (!c->t->nfc) {
        if (rf_pretokenize(c->t->re, s, n, on_piece, c)) c->err = 1;
        return;
    }
    char *norm;
    size_t nn;
    if (rf_nfc(s, n, &norm, &nn)) {
        c->err = 1;
        return;
    }
    if (rf_pretokenize(c->t->re, norm ? norm : s, nn, on_piece, c)) c->err = 1;
    free(norm);
}

/* White_Space at s (what lstrip/rstrip of an added token remove); its length or 0. */
static int ws_len(const char *s, size_t n) {
    unsigned char b = (unsigned char)s[0];
    if (b == ' ' || (b >= 9 && b <= 13)) return 1;
    if (b < 0x80 || rf_utf8_seq((const unsigned char *)s, n) <= 0) return 0;
    uint32_t cp;
    int l = rf_utf8_decode((const unsigned char *)s, &cp);
    int ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
             cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return ws ? l : 0;
}

/* The longest added token at text[pos..], or NULL: a walk down the added
 * tokens' trie, as long as the text follows one of them (a scan of every
 * added token at every position made a tokenizer with 10^6 of them take
 * minutes for a 90 KB prompt). */
static const rf_added_token *match_added(const rf_tokenizer *t, const char *text, size_t len, size_t pos) {
    if (!t->added_trie) { /* no trie built (rf_tok_sort_added not called): the list, longest first */
        for (int k = 0; k < t->n_added; k++) {
            const rf_added_token *a = &t->added[k];
            if ((size_t)a->len <= len - pos && !memcmp(text + pos, a->content, (size_t)a->len)) return a;
        }
        return NULL;
    }
    int node = 0, best = -1;
    for (size_t i = pos; i < len; i++) {
        int c = t->added_trie[node].child;
        while (c >= 0 && t->added_trie[c].byte != (unsigned char)text[i]) c = t->added_trie[c].sibling;
        if (c < 0) break;
        node = c;
        if (t->added_trie[node].token >= 0) best = t->added_trie[node].token;
    }
    return best >= 0 ? &t->added[best] : NULL;
}

int rf_tok_encode(const rf_tokenizer *t, const char *text, size_t len, int **ids, int *n_ids) {
    return rf_tok_encode_spans(t, text, len, NULL, 0, ids, n_ids);
}

int rf_tok_encode_spans(const rf_tokenizer *t, const char *text, size_t len, const rf_text_span *spans,
                        size_t n_spans, int **ids, int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    size_t bad;
    if (rf_utf8_check(text, len, &bad)) {
        rf_set_error("invalid UTF-8 at byte offset %zu (byte 0x%02x)", bad, (unsigned char)text[bad]);
        return -1;
    }
    rf_ivec out = {0};
    enc_ctx c = {.t = t, .out = &out, .cache_slots = 16};
    while (c.cache_slots < CACHE_MAX_SLOTS && c.cache_slots * 8 < len) c.cache_slots *= 2;
    size_t seg = 0, pos = 0, si = 0;
    while (pos < len && !c.err) {
        const rf_added_token *a = t->added_first[(unsigned char)text[pos]] ? match_added(t, text, len, pos) : NULL;
        if (a && a->special && n_spans) { /* plain text where any of it is in a span */
            while (si < n_spans && spans[si].end <= pos) si++;
            if (si < n_spans && spans[si].start < pos + (size_t)a->len) a = NULL;
        }
        if (!a) {
            pos++;
            continue;
        }
        size_t end = pos;
        if (a->lstrip) /* the token swallows white space on its left */
            while (end > seg) {
                size_t k = end - 1;
                while (k > seg && ((unsigned char)text[k] & 0xC0) == 0x80) k--;
                if (!ws_len(text + k, end - k)) break;
                end = k;
            }
        encode_segment(&c, text + seg, end - seg);
        rf_ivec_push(&out, a->id);
        pos += (size_t)a->len;
        if (a->rstrip)
            for (int w; pos < len && (w = ws_len(text + pos, len - pos));) pos += (size_t)w;
        seg = pos;
    }
    encode_segment(&c, text + seg, len - seg);
    free(c.sym), free(c.nxt), free(c.prv), free(c.heap), free(c.cache);
    if (c.err) {
        free(out.v);
        return -1;
    }
    if (out.n > (size_t)0x7fffffff) rf_die("encode: too many tokens");
    *ids = out.v ? out.v : rf_malloc(sizeof(int));
    *n_ids = (int)out.n;
    return 0;
}
