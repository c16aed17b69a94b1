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
};

/* the node after stack x's top took a byte (its expansion memoised), or -1 */
int gm_after(rf_gmatch *m, int x);
/* the stacks after byte b from the set in[0..n_in): *out (grown as
 * needed), sorted; 0, or -1 with the error set */
int gm_step(rf_gmatch *m, const int *in, int n_in, uint8_t b, int **out, int *n_out, int *cap_out);
void gm_cache_free(rf_gmatch *m);

#endif
