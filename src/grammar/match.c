/* match.c - the pushdown automaton of a compiled grammar, over bytes.
 *
 * A parse stack is a chain of positions (element indices): the top is the
 * byte set to match next, each entry below it is where to go on when the
 * rule above it ends. Stacks share their tails: an entry is a node
 * (position, parent node), interned, so that a stack is one node id and a
 * set of stacks is a sorted array of ids. Node 0 is the empty stack: the
 * input so far is a complete sentence.
 *
 * expand(n) turns a node whose position is anywhere (a reference, the end
 * of an alternative) into the stacks whose tops are byte sets, following
 * references into every alternative and popping at ends; a continuation
 * that is the end of its alternative is skipped (the parent directly), so
 * right recursion (x*) does not grow the stack. Expansions are memoised per
 * node. After a byte b, a stack whose top set holds b becomes expand(the
 * position after its top, same parent): the result does not depend on b,
 * so advancing is a union of memoised lists. The expansion of one node
 * visits each node once (a worklist with marks), which ends the nullable
 * loops that left-recursion detection lets through ((x*)*); everything is
 * bounded by RF_GRAMMAR_MAX_NODES and RF_GRAMMAR_MAX_STACKS. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "grammar/match_impl.h"
#include "util/util.h"

static uint32_t node_hash(int pos, int parent) {
    uint64_t x = (uint64_t)(uint32_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)parent * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(x >> 32 ^ x);
}

static void node_rehash(rf_gmatch *m) {
    int cap = m->hcap ? 2 * m->hcap : 1024;
    free(m->htab);
    m->htab = rf_calloc((size_t)cap, sizeof *m->htab);
    m->hcap = cap;
    for (int i = 1; i < m->n_nodes; i++) {
        uint32_t h = node_hash(m->nodes[i].pos, m->nodes[i].parent) & (cap - 1);
        while (m->htab[h]) h = (h + 1) & (cap - 1);
        m->htab[h] = i;
    }
}

/* the node (pos, parent), -1 past RF_GRAMMAR_MAX_NODES (error set) */
static int node_get(rf_gmatch *m, int pos, int parent) {
    if (2 * (m->n_nodes + 1) > m->hcap) node_rehash(m);
    uint32_t h = node_hash(pos, parent) & (m->hcap - 1);
    for (; m->htab[h]; h = (h + 1) & (m->hcap - 1)) {
        const gnode *x = &m->nodes[m->htab[h]];
        if (x->pos == pos && x->parent == parent) return m->htab[h];
    }
    if (m->n_nodes >= RF_GRAMMAR_MAX_NODES) {
        rf_set_error("grammar: more than %d parse stack entries (nesting too deep, or the grammar too ambiguous)",
                     RF_GRAMMAR_MAX_NODES);
        return -1;
    }
    m->nodes = rf_grow(m->nodes, sizeof *m->nodes, m->n_nodes, &m->cap_nodes, 1024);
    m->mark = rf_grow(m->mark, sizeof *m->mark, m->n_nodes, &m->cap_mark, 1024);
    int id = m->n_nodes++;
    m->nodes[id] = (gnode){pos, parent, -1, 0, 0};
    m->mark[id] = 0;
    m->htab[h] = id;
    return id;
}

/* where to go on after position pos of an alternative: its end is the parent */
static int node_next(rf_gmatch *m, int pos, int parent) {
    return m->g->el[pos].type == G_END ? parent : node_get(m, pos, parent);
}

static int push_int(int **a, int *n, int *cap, int v) {
    *a = rf_grow(*a, sizeof **a, *n, cap, 64);
    (*a)[(*n)++] = v;
    return 0;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* sort and drop duplicates */
static int sort_unique(int *a, int n) {
    if (n < 2) return n;
    qsort(a, (size_t)n, sizeof *a, cmp_int);
    int k = 1;
    for (int i = 1; i < n; i++)
        if (a[i] != a[k - 1]) a[k++] = a[i];
    return k;
}

/* the memoised expansion of node n: m->pool[off .. off + len), or -1 */
static int expand(rf_gmatch *m, int n) {
    if (m->nodes[n].memo_off >= 0) return 0;
    const rf_grammar *g = m->g;
    int n_work = 0, n_out = 0;
    unsigned stamp = ++m->stamp;
    if (stamp == 0) { /* wrapped: clear the marks */
        memset(m->mark, 0, (size_t)m->n_nodes * sizeof *m->mark);
        stamp = m->stamp = 1;
    }
    push_int(&m->work, &n_work, &m->cap_work, n);
    int rc = 0;
    while (n_work > 0) {
        int x = m->work[--n_work];
        if (m->mark[x] == stamp) continue;
        m->mark[x] = stamp;
        if (x == 0) {
            push_int(&m->out, &n_out, &m->cap_out, 0);
            continue;
        }
        int pos = m->nodes[x].pos, parent = m->nodes[x].parent;
        const gelem e = g->el[pos];
        if (e.type == G_SET) {
            push_int(&m->out, &n_out, &m->cap_out, x);
        } else if (e.type == G_END) {
            push_int(&m->work, &n_work, &m->cap_work, parent);
        } else { /* a reference: every alternative, continuing after it */
            int cont = node_next(m, pos + 1, parent);
            if (cont < 0) {
                rc = -1;
                break;
            }
            for (int a = g->rule_alt0[e.val]; a < g->rule_alt0[e.val + 1]; a++) {
                int y = node_next(m, g->alt[a], cont);
                if (y < 0) {
                    rc = -1;
                    break;
                }
                push_int(&m->work, &n_work, &m->cap_work, y);
            }
            if (rc) break;
        }
        if (n_out > RF_GRAMMAR_MAX_STACKS) {
            rf_set_error("grammar: more than %d parse stacks at once (the grammar is too ambiguous)",
                         RF_GRAMMAR_MAX_STACKS);
            rc = -1;
            break;
        }
    }
    if (rc) return -1;
    n_out = sort_unique(m->out, n_out);
    if (m->n_pool + n_out > RF_GRAMMAR_MAX_NODES * 4) {
        rf_set_error("grammar: the parse tables outgrew %d entries", RF_GRAMMAR_MAX_NODES * 4);
        return -1;
    }
    int off = m->n_pool;
    for (int i = 0; i < n_out; i++) push_int(&m->pool, &m->n_pool, &m->cap_pool, m->out[i]);
    m->nodes[n].memo_off = off, m->nodes[n].memo_len = n_out;
    return 0;
}

/* the stacks after a stack's top byte set took a byte */
int gm_after(rf_gmatch *m, int x) {
    if (m->nodes[x].after_memo) return m->nodes[x].after_memo - 1;
    int nx = node_next(m, m->nodes[x].pos + 1, m->nodes[x].parent);
    if (nx < 0 || expand(m, nx)) return -1;
    m->nodes[x].after_memo = nx + 1;
    return nx;
}

int gm_step(rf_gmatch *m, const int *in, int n_in, uint8_t b, int **out, int *n_out, int *cap_out) {
    int k = 0;
    for (int i = 0; i < n_in; i++) {
        int x = in[i];
        if (x == 0) continue;
        const uint64_t *set = m->g->sets[m->g->el[m->nodes[x].pos].val];
        if (!(set[b >> 6] >> (b & 63) & 1)) continue;
        int nx = gm_after(m, x);
        if (nx < 0) return -1;
        const gnode *nn = &m->nodes[nx];
        for (int j = 0; j < nn->memo_len; j++) push_int(out, &k, cap_out, m->pool[nn->memo_off + j]);
    }
    k = sort_unique(*out, k);
    if (k > RF_GRAMMAR_MAX_STACKS) {
        rf_set_error("grammar: more than %d parse stacks at once (the grammar is too ambiguous)", RF_GRAMMAR_MAX_STACKS);
        return -1;
    }
    *n_out = k;
    return 0;
}

rf_gmatch *rf_gmatch_new(const rf_grammar *g) {
    rf_gmatch *m = rf_calloc(1, sizeof *m);
    m->g = g;
    m->nodes = rf_grow(NULL, sizeof *m->nodes, 0, &m->cap_nodes, 1024);
    m->mark = rf_grow(NULL, sizeof *m->mark, 0, &m->cap_mark, 1024);
    m->nodes[0] = (gnode){-1, -1, -1, 0, 0}; /* the empty stack */
    m->mark[0] = 0;
    m->n_nodes = 1;
    node_rehash(m);
    /* the start: root's alternatives over the empty stack */
    int rc = 0;
    for (int a = g->rule_alt0[g->root]; a < g->rule_alt0[g->root + 1] && !rc; a++) {
        int y = node_next(m, g->alt[a], 0);
        if (y < 0 || expand(m, y)) rc = -1;
        else {
            const gnode *yn = &m->nodes[y];
            for (int j = 0; j < yn->memo_len; j++) push_int(&m->cur, &m->n_cur, &m->cap_cur, m->pool[yn->memo_off + j]);
        }
    }
    if (rc) {
        rf_gmatch_free(m);
        return NULL;
    }
    m->n_cur = sort_unique(m->cur, m->n_cur);
    return m;
}

void rf_gmatch_free(rf_gmatch *m) {
    if (!m) return;
    free(m->nodes), free(m->mark), free(m->htab), free(m->work), free(m->out), free(m->pool);
    free(m->cur), free(m->tmp);
    gm_cache_free(m);
    free(m);
}

int rf_gmatch_accept(rf_gmatch *m, const unsigned char *s, size_t n) {
    /* work on a copy: the state changes only when every byte is taken */
    int *a = NULL, na = 0, cap_a = 0;
    for (int i = 0; i < m->n_cur; i++) push_int(&a, &na, &cap_a, m->cur[i]);
    for (size_t i = 0; i < n; i++) {
        int nb = 0;
        if (gm_step(m, a, na, s[i], &m->tmp, &nb, &m->cap_tmp)) {
            free(a);
            return -1;
        }
        if (nb == 0) {
            free(a);
            return 1;
        }
        int *t = a;
        int tcap = cap_a;
        a = m->tmp, cap_a = m->cap_tmp, na = nb;
        m->tmp = t, m->cap_tmp = tcap;
    }
    free(m->cur);
    m->cur = a, m->n_cur = na, m->cap_cur = cap_a;
    return 0;
}

int rf_gmatch_complete(const rf_gmatch *m) { return m->n_cur > 0 && m->cur[0] == 0; }

void rf_gmatch_next_bytes(const rf_gmatch *m, uint64_t bits[4]) {
    memset(bits, 0, 4 * sizeof *bits);
    for (int i = 0; i < m->n_cur; i++) {
        if (m->cur[i] == 0) continue;
        const uint64_t *set = m->g->sets[m->g->el[m->nodes[m->cur[i]].pos].val];
        for (int k = 0; k < 4; k++) bits[k] |= set[k];
    }
}

void rf_gmatch_save(const rf_gmatch *m, rf_gstate *s) {
    s->n = m->n_cur;
    s->ids = rf_malloc(((size_t)m->n_cur + 1) * sizeof *s->ids);
    memcpy(s->ids, m->cur, (size_t)m->n_cur * sizeof *s->ids);
}

void rf_gmatch_restore(rf_gmatch *m, const rf_gstate *s) {
    m->n_cur = 0;
    for (int i = 0; i < s->n; i++) push_int(&m->cur, &m->n_cur, &m->cap_cur, s->ids[i]);
}
