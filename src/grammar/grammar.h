/* grammar.h - GBNF grammars (llama.cpp's grammar text format) compiled to a
 * pushdown automaton over bytes, and the set of vocabulary tokens it allows
 * next.
 *
 *   g = rf_grammar_parse(text, len);           // NULL + rf_last_error()
 *   m = rf_gmatch_new(g);                      // one run: stacks + memo
 *   rf_gmatch_accept(m, bytes, n);             // 0 taken, 1 refused, -1 error
 *   rf_gmatch_allowed(m, trie, bits);          // tokens that may come next
 *
 * Semantics (docs/grammar.md): a rule is alternatives of sequences of
 * literals, character classes, rule references and groups, with *, +, ?,
 * {m}, {m,}, {m,n}. Character classes and '.' match Unicode code points;
 * they are compiled to UTF-8 byte sequences, so the automaton reads bytes
 * and a token ending inside a character simply leaves the automaton between
 * the bytes of it. Left recursion (as llama.cpp detects it) is refused; the
 * work of a run is bounded (RF_GRAMMAR_MAX_* below) and a run that would
 * exceed a bound fails with an error instead. */
#ifndef RF_GRAMMAR_H
#define RF_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#define RF_GRAMMAR_MAX_TEXT (1u << 20)   /* grammar text bytes */
#define RF_GRAMMAR_MAX_ELEMS (1 << 20)   /* compiled elements (bytes of literals, references, ...) */
#define RF_GRAMMAR_MAX_REPEAT 2000       /* m and n of {m,n} */
#define RF_GRAMMAR_MAX_STACKS 4096       /* parse stacks alive at once (ambiguity) */
#define RF_GRAMMAR_MAX_NODES (1 << 21)   /* stack entries one run may create (nesting depth x states) */

typedef struct rf_grammar rf_grammar;

/* Compile GBNF text (start symbol "root"). NULL with rf_last_error()
 * "grammar: line L, column C: <what>" or "grammar: <what>". */
rf_grammar *rf_grammar_parse(const char *text, size_t len);
void rf_grammar_free(rf_grammar *g);
/* The rule count (generated rules included), for tests. */
int rf_grammar_n_rules(const rf_grammar *g);

/* One run of the automaton: its parse stacks (shared tails, memoised
 * expansions) and the current set of stacks. */
typedef struct rf_gmatch rf_gmatch;
rf_gmatch *rf_gmatch_new(const rf_grammar *g);
void rf_gmatch_free(rf_gmatch *m);
/* Feed n bytes: 0 when the grammar takes them all (state advanced), 1 when
 * it refuses one (state unchanged), -1 when a bound was hit (error set,
 * state unchanged). */
int rf_gmatch_accept(rf_gmatch *m, const unsigned char *s, size_t n);
/* 1 when the input so far is a complete sentence of the grammar. */
int rf_gmatch_complete(const rf_gmatch *m);
/* The bytes the grammar takes next: bits[b >> 6] bit (b & 63) (4 words). */
void rf_gmatch_next_bytes(const rf_gmatch *m, uint64_t bits[4]);
/* A snapshot of the state (the stack set) and its restore, within one run. */
typedef struct {
    int *ids;
    int n;
} rf_gstate;
void rf_gmatch_save(const rf_gmatch *m, rf_gstate *s);   /* s->ids malloc'd */
void rf_gmatch_restore(rf_gmatch *m, const rf_gstate *s); /* s stays valid */

/* The byte strings of a vocabulary's tokens as a trie. Tokens with no bytes
 * (control tokens) are not in it and are never allowed by the grammar. */
typedef struct rf_token_trie rf_token_trie;
/* bytes[i], lens[i]: token i's bytes (lens[i] 0: none). */
rf_token_trie *rf_token_trie_new(const unsigned char *const *bytes, const int *lens, int n_tokens);
void rf_token_trie_free(rf_token_trie *t);
int rf_token_trie_size(const rf_token_trie *t); /* n_tokens */
/* Token i's bytes (NULL, *len 0 when it has none). */
const unsigned char *rf_token_trie_bytes(const rf_token_trie *t, int i, int *len);

/* The tokens whose every byte the grammar takes from the current state:
 * bits[i >> 6] bit (i & 63) for token i (all (rf_token_trie_size(t) + 63) /
 * 64 words are written). The walk of the trie is cached per state (the
 * last few states' answers are kept). 0, or -1 with the error set. */
int rf_gmatch_allowed(rf_gmatch *m, const rf_token_trie *t, uint64_t *bits);

#endif
