/* match_impl.h - the automaton's run state, shared by match.c (stacks) and
 * trie.c (allowed tokens). Not part of any API. */
#ifndef RF_MATCH_IMPL_H
#define RF_MATCH_IMPL_H

#include <stdint.h>

#include "grammar/grammar.h"

typedef struct {
    int pos, parent;  /* element index (a byte set, or a continuation); the entry below */
    int memo_off;     /* expansion: pool[memo_off .. + memo_len), -1 not yet */
    int memo_len;
    int after_memo;   /* 1 + the node after this top took a byte (its expansion is memoised), 0 not yet */
} gnode;

/* the allowed-token answers of recent states */
typedef struct {
    uint64_t hash;
    int *ids, n;      /* the state (stack set) */
    uint64_t *bits;   /* the allowed tokens */
    int n_words;
} gm_cache_entry;
enum { GM_CACHE = 32 };

/* an interned stack set with its byte transitions, filled as the trie
 * walks ask for them */
typedef struct {
    int off, len;     /* its stacks: set_pool[off .. + len) */
    uint64_t top[4];  /* the bytes some stack of it takes */
    int *trans;       /* [256] the set after byte b: a set id, GS_EMPTY, or GS_UNKNOWN; NULL: none known */
} gset;
enum { GS_EMPTY = -1, GS_UNKNOWN = -3, GS_FLUSH_AT = 8192, GS_MAX = 65536 };

struct rf_gmatch {
    const rf_grammar *g;
    gnode *nodes;
    int n_nodes, cap_nodes;
    int *htab, hcap;
    unsigned *mark;
    int cap_mark;
    unsigned stamp;
    int *work, cap_work, *out, cap_out;
    int *pool, n_pool, cap_pool;
    int *cur, n_cur, cap_cur; /* the current stack set, sorted */
    int *tmp, cap_tmp;
    gm_cache_entry cache[GM_CACHE];
    int cache_next;
    gset *sets;
    int n_sets, cap_sets;
    int *set_pool, n_set_pool, cap_set_pool;
    int *set_htab, set_hcap;
};

/* the node after stack x's top took a byte (its expansion memoised), or -1 */
int gm_after(rf_gmatch *m, int x);
/* the stacks after byte b from the set in[0..n_in): *out (grown as
 * needed), sorted; 0, or -1 with the error set */
int gm_step(rf_gmatch *m, const int *in, int n_in, uint8_t b, int **out, int *n_out, int *cap_out);
void gm_cache_free(rf_gmatch *m);

#endif
