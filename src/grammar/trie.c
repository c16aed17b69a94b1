/* trie.c - the vocabulary's token byte strings as a trie, and the tokens a
 * grammar state allows: the trie walked depth first, each trie node's
 * stack set the automaton's step of its parent's by the node's byte; a
 * subtree is skipped as soon as the set is empty, so the work is the
 * number of trie nodes whose bytes the grammar can still take (not the
 * vocabulary times its token lengths). Stack sets are interned per run with
 * their byte transitions, filled in as walks ask for them: inside a JSON
 * string every character leads back to the same set, so a walk is mostly
 * table lookups. The answers of the last GM_CACHE states are kept as well.
 * The interned sets are dropped between walks once there are more than
 * GS_FLUSH_AT (memory stays bounded on long answers). */
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

static void sets_clear(rf_gmatch *m) {
    for (int i = 0; i < m->n_sets; i++) free(m->sets[i].trans);
    m->n_sets = 0, m->n_set_pool = 0;
    if (m->set_htab) memset(m->set_htab, 0, (size_t)m->set_hcap * sizeof *m->set_htab);
}

void gm_cache_free(rf_gmatch *m) {
    for (int i = 0; i < GM_CACHE; i++) free(m->cache[i].ids), free(m->cache[i].bits);
    memset(m->cache, 0, sizeof m->cache);
    sets_clear(m);
    free(m->sets), free(m->set_pool), free(m->set_htab);
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

static void set_rehash(rf_gmatch *m) {
    int cap = m->set_hcap ? 2 * m->set_hcap : 1024;
    free(m->set_htab);
    m->set_htab = rf_calloc((size_t)cap, sizeof *m->set_htab);
    m->set_hcap = cap;
    for (int i = 0; i < m->n_sets; i++) {
        uint32_t h = (uint32_t)set_hash(m->set_pool + m->sets[i].off, m->sets[i].len) & (cap - 1);
        while (m->set_htab[h]) h = (h + 1) & (cap - 1);
        m->set_htab[h] = i + 1;
    }
}

/* the id of the stack set ids[0..n) (sorted), -2 past GS_MAX (error set) */
static int set_intern(rf_gmatch *m, const int *ids, int n) {
    if (2 * (m->n_sets + 1) > m->set_hcap) set_rehash(m);
    uint32_t h = (uint32_t)set_hash(ids, n) & (m->set_hcap - 1);
    for (; m->set_htab[h]; h = (h + 1) & (m->set_hcap - 1)) {
        const gset *s = &m->sets[m->set_htab[h] - 1];
        if (s->len == n && !memcmp(m->set_pool + s->off, ids, (size_t)n * sizeof *ids)) return m->set_htab[h] - 1;
    }
    if (m->n_sets >= GS_MAX) {
        rf_set_error("grammar: more than %d parser states in one step (the grammar is too ambiguous)", GS_MAX);
        return -2;
    }
    m->sets = rf_grow(m->sets, sizeof *m->sets, m->n_sets, &m->cap_sets, 256);
    while (m->n_set_pool + n + 1 > m->cap_set_pool)
        m->set_pool = rf_grow(m->set_pool, sizeof *m->set_pool, m->cap_set_pool, &m->cap_set_pool, 4096);
    gset *s = &m->sets[m->n_sets];
    s->off = m->n_set_pool, s->len = n, s->trans = NULL;
    memcpy(m->set_pool + s->off, ids, (size_t)n * sizeof *ids);
    m->n_set_pool += n;
    top_bytes(m, ids, n, s->top);
    m->set_htab[h] = m->n_sets + 1;
    return m->n_sets++;
}

/* the set after byte b from set sid: an id, GS_EMPTY, or -2 (error) */
static int set_step(rf_gmatch *m, int sid, uint8_t b, int **scratch, int *cap_scratch) {
    if (!(m->sets[sid].top[b >> 6] >> (b & 63) & 1)) return GS_EMPTY;
    if (!m->sets[sid].trans) {
        m->sets[sid].trans = rf_malloc(256 * sizeof(int));
        for (int i = 0; i < 256; i++) m->sets[sid].trans[i] = GS_UNKNOWN;
    }
    int r = m->sets[sid].trans[b];
    if (r != GS_UNKNOWN) return r;
    int n = 0;
    /* the input set is copied out: interning may move the pool */
    int len = m->sets[sid].len, *in = rf_malloc(((size_t)len + 1) * sizeof *in);
    memcpy(in, m->set_pool + m->sets[sid].off, (size_t)len * sizeof *in);
    int rc = gm_step(m, in, len, b, scratch, &n, cap_scratch);
    free(in);
    if (rc) return -2;
    r = n ? set_intern(m, *scratch, n) : GS_EMPTY;
    if (r == -2) return -2;
    m->sets[sid].trans[b] = r;
    return r;
}

static int walk(rf_gmatch *m, const rf_token_trie *t, uint64_t *bits) {
    if (m->n_sets > GS_FLUSH_AT) sets_clear(m);
    const int D = t->max_len + 1;
    int *sid = rf_malloc((size_t)D * sizeof *sid), *scratch = NULL, cap_scratch = 0, rc = 0;
    sid[0] = set_intern(m, m->cur, m->n_cur);
    if (sid[0] < 0) rc = -1;
    for (int i = 1; i < t->n_nodes && !rc;) {
        int d = t->depth[i];
        int s = set_step(m, sid[d - 1], t->byte[i], &scratch, &cap_scratch);
        if (s == -2) {
            rc = -1;
            break;
        }
        if (s == GS_EMPTY) {
            i = t->end[i];
            continue;
        }
        for (int k = t->tok0[i]; k < t->tok0[i + 1]; k++) bits[t->toks[k] >> 6] |= 1ull << (t->toks[k] & 63);
        sid[d] = s;
        i++;
    }
    free(sid), free(scratch);
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
