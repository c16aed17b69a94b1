/* trie.c - the vocabulary's token byte strings as a trie, and the tokens a
 * grammar state allows: the trie walked depth first, each trie node's
 * stack set the automaton's step of its parent's by the node's byte; a
 * subtree is skipped as soon as the set is empty, so the work is the
 * number of trie nodes whose bytes the grammar can still take (not the
 * vocabulary times its token lengths). The answers of the last GM_CACHE
 * states are kept per run: JSON strings, numbers and whitespace return to
 * the same state again and again. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "grammar/match_impl.h"
#include "util/util.h"

struct rf_token_trie {
    int n_tokens;
    unsigned char **bytes; /* [n_tokens] copies (NULL: none) */
    int *lens;
    /* nodes in preorder; node 0 is the root (no byte) */
    int n_nodes;
    uint8_t *byte;
    int *depth;
    int *end;      /* one past the node's subtree */
    int *tok0;     /* [n_nodes + 1] tokens ending at node i: toks[tok0[i] .. tok0[i+1]) */
    int *toks;
    int max_len;
};

static int by_bytes(const void *a, const void *b, void *user) {
    const rf_token_trie *sort_trie = user;
    int x = *(const int *)a, y = *(const int *)b;
    int lx = sort_trie->lens[x], ly = sort_trie->lens[y], n = lx < ly ? lx : ly;
    int c = memcmp(sort_trie->bytes[x], sort_trie->bytes[y], (size_t)n);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

rf_token_trie *rf_token_trie_new(const unsigned char *const *bytes, const int *lens, int n) {
    rf_token_trie *t = rf_calloc(1, sizeof *t);
    t->n_tokens = n;
    t->bytes = rf_calloc((size_t)n + 1, sizeof *t->bytes);
    t->lens = rf_calloc((size_t)n + 1, sizeof *t->lens);
    int *order = rf_malloc(((size_t)n + 1) * sizeof *order), n_ord = 0;
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        if (lens[i] <= 0 || !bytes[i]) continue;
        t->bytes[i] = rf_malloc((size_t)lens[i]);
        memcpy(t->bytes[i], bytes[i], (size_t)lens[i]);
        t->lens[i] = lens[i];
        if (lens[i] > t->max_len) t->max_len = lens[i];
        order[n_ord++] = i;
        total += (size_t)lens[i];
    }
    qsort_r(order, (size_t)n_ord, sizeof *order, by_bytes, t);

    t->byte = rf_malloc(total), t->depth = rf_malloc(total * sizeof(int)), t->end = rf_malloc(total * sizeof(int));
    int *tok_node = rf_malloc(((size_t)n + 1) * sizeof *tok_node);
    int *path = rf_malloc(((size_t)t->max_len + 1) * sizeof *path);
    t->byte[0] = 0, t->depth[0] = 0, path[0] = 0;
    int nn = 1, cur = 0; /* cur: depth of the last node on the path */
    const unsigned char *prev = NULL;
    int prev_len = 0;
    for (int k = 0; k < n_ord; k++) {
        int i = order[k], len = t->lens[i], lcp = 0;
        const unsigned char *s = t->bytes[i];
        while (lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        for (int d = cur; d > lcp; d--) t->end[path[d]] = nn; /* close the nodes below the common prefix */
        for (int d = lcp + 1; d <= len; d++) {
            t->byte[nn] = s[d - 1], t->depth[nn] = d;
            path[d] = nn++;
        }
        cur = len;
        tok_node[i] = path[len];
        prev = s, prev_len = len;
    }
    for (int d = cur; d >= 0; d--) t->end[path[d]] = nn;
    t->n_nodes = nn;
    t->tok0 = rf_calloc((size_t)nn + 1, sizeof *t->tok0);
    t->toks = rf_malloc(((size_t)n_ord + 1) * sizeof *t->toks);
    for (int k = 0; k < n_ord; k++) t->tok0[tok_node[order[k]] + 1]++;
    for (int i = 0; i < nn; i++) t->tok0[i + 1] += t->tok0[i];
    int *fill = rf_malloc(((size_t)nn + 1) * sizeof *fill);
    memcpy(fill, t->tok0, (size_t)nn * sizeof *fill);
    for (int k = 0; k < n_ord; k++) t->toks[fill[tok_node[order[k]]]++] = order[k];
    free(fill), free(path), free(tok_node), free(order);
    return t;
}

void rf_token_trie_free(rf_token_trie *t) {
    if (!t) return;
    for (int i = 0; i < t->n_tokens; i++) free(t->bytes[i]);
    free(t->bytes), free(t->lens), free(t->byte), free(t->depth), free(t->end), free(t->tok0), free(t->toks);
    free(t);
}

int rf_token_trie_size(const rf_token_trie *t) { return t->n_tokens; }

const unsigned char *rf_token_trie_bytes(const rf_token_trie *t, int i, int *len) {
    if (i < 0 || i >= t->n_tokens || !t->bytes[i]) {
        *len = 0;
        return NULL;
    }
    *len = t->lens[i];
    return t->bytes[i];
}

/* ---- the walk ---- */

static uint64_t set_hash(const int *ids, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 1099511628211ull;
    return h;
}

void gm_cache_free(rf_gmatch *m) {
    for (int i = 0; i < GM_CACHE; i++) free(m->cache[i].ids), free(m->cache[i].bits);
    memset(m->cache, 0, sizeof m->cache);
}

/* the union of the top byte sets of a stack set */
static void top_bytes(const rf_gmatch *m, const int *ids, int n, uint64_t u[4]) {
    u[0] = u[1] = u[2] = u[3] = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] == 0) continue;
        const uint64_t *s = m->g->sets[m->g->el[m->nodes[ids[i]].pos].val];
        u[0] |= s[0], u[1] |= s[1], u[2] |= s[2], u[3] |= s[3];
    }
}

static int walk(rf_gmatch *m, const rf_token_trie *t, uint64_t *bits) {
    const int D = t->max_len + 1;
    int *off = rf_malloc((size_t)D * sizeof *off), *len = rf_malloc((size_t)D * sizeof *len);
    uint64_t (*uni)[4] = rf_malloc((size_t)D * sizeof *uni);
    int *buf = NULL, n_buf = 0, cap_buf = 0, *step = NULL, n_step = 0, cap_step = 0, rc = 0;
    buf = rf_grow(buf, sizeof *buf, 0, &cap_buf, m->n_cur + 64);
    memcpy(buf, m->cur, (size_t)m->n_cur * sizeof *buf);
    off[0] = 0, len[0] = m->n_cur, n_buf = m->n_cur;
    top_bytes(m, m->cur, m->n_cur, uni[0]);
    for (int i = 1; i < t->n_nodes;) {
        int d = t->depth[i];
        uint8_t b = t->byte[i];
        n_buf = off[d - 1] + len[d - 1]; /* the sets of depths >= d are gone */
        if (!(uni[d - 1][b >> 6] >> (b & 63) & 1)) {
            i = t->end[i];
            continue;
        }
        if (gm_step(m, buf + off[d - 1], len[d - 1], b, &step, &n_step, &cap_step)) {
            rc = -1;
            break;
        }
        if (n_step == 0) {
            i = t->end[i];
            continue;
        }
        for (int k = t->tok0[i]; k < t->tok0[i + 1]; k++) bits[t->toks[k] >> 6] |= 1ull << (t->toks[k] & 63);
        while (n_buf + n_step > cap_buf) buf = rf_grow(buf, sizeof *buf, cap_buf, &cap_buf, 64);
        memcpy(buf + n_buf, step, (size_t)n_step * sizeof *buf);
        off[d] = n_buf, len[d] = n_step;
        top_bytes(m, step, n_step, uni[d]);
        i++;
    }
    free(off), free(len), free(uni), free(buf), free(step);
    return rc;
}

int rf_gmatch_allowed(rf_gmatch *m, const rf_token_trie *t, uint64_t *bits) {
    const int W = (t->n_tokens + 63) / 64;
    uint64_t h = set_hash(m->cur, m->n_cur);
    for (int c = 0; c < GM_CACHE; c++) {
        gm_cache_entry *e = &m->cache[c];
        if (e->bits && e->hash == h && e->n == m->n_cur && e->n_words == W &&
            !memcmp(e->ids, m->cur, (size_t)m->n_cur * sizeof *m->cur)) {
            memcpy(bits, e->bits, (size_t)W * sizeof *bits);
            return 0;
        }
    }
    memset(bits, 0, (size_t)W * sizeof *bits);
    if (walk(m, t, bits)) return -1;
    gm_cache_entry *e = &m->cache[m->cache_next];
    m->cache_next = (m->cache_next + 1) % GM_CACHE;
    free(e->ids), free(e->bits);
    e->hash = h, e->n = m->n_cur, e->n_words = W;
    e->ids = rf_malloc(((size_t)m->n_cur + 1) * sizeof *e->ids);
    memcpy(e->ids, m->cur, (size_t)m->n_cur * sizeof *e->ids);
    e->bits = rf_malloc((size_t)W * sizeof *e->bits);
    memcpy(e->bits, bits, (size_t)W * sizeof *bits);
    return 0;
}
