/* grammar_impl.h - the compiled grammar shared by the parser (parse.c) and
 * the automaton (match.c). Not part of any API. */
#ifndef RF_GRAMMAR_IMPL_H
#define RF_GRAMMAR_IMPL_H

#include <stdint.h>

#include "grammar/grammar.h"

/* An element of a sequence. Every alternative is a run of elements ending
 * with G_END, so "the element after" a position is always defined. */
enum { G_END = 0, G_REF = 1, G_SET = 2 };
typedef struct {
    int type; /* G_* */
    int val;  /* G_REF: rule; G_SET: index of a 256-bit byte set */
} gelem;

struct rf_grammar {
    gelem *el;
    int n_el;
    int *alt;              /* [n_alt] the first element of each alternative */
    int n_alt;
    int *rule_alt0;        /* [n_rules] rule r's alternatives: alt[rule_alt0[r] .. rule_alt0[r+1]) */
    int n_rules;
    uint64_t (*sets)[4];   /* [n_sets] byte sets */
    int n_sets;
    int root;
};

/* The code points [lo, hi] (no surrogates inside) as UTF-8 byte-range
 * sequences: emit(seq_lo, seq_hi, len, user) once per sequence of len bytes
 * whose byte k lies in [seq_lo[k], seq_hi[k]]. The sequences cover exactly
 * the encodings of the code points. */
void rf_utf8_sequences(uint32_t lo, uint32_t hi,
                       void (*emit)(const uint8_t *seq_lo, const uint8_t *seq_hi, int len, void *user),
                       void *user);
/* UTF-8 encoding of a code point (<= 0x10FFFF) into out (4 bytes): its length. */
int rf_utf8_put(uint32_t cp, uint8_t *out);

#endif
