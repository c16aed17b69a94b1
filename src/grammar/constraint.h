/* constraint.h - building the constraint rf_params.constraint points at
 * (decode/constraint.h: what the decoders do with it). */
#ifndef RF_GRAMMAR_CONSTRAINT_H
#define RF_GRAMMAR_CONSTRAINT_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

typedef struct rf_constraint rf_constraint;

/* A GBNF grammar (grammar.h) or a JSON schema's text (json_schema.h) over
 * t's vocabulary: every token's bytes (control tokens have none and are
 * never allowed; EOS ends a complete answer). NULL with rf_last_error(). */
rf_constraint *rf_constraint_from_gbnf(const rf_tokenizer *t, const char *gbnf, size_t len);
rf_constraint *rf_constraint_from_json_schema(const rf_tokenizer *t, const char *schema, size_t len);
void rf_constraint_free(rf_constraint *c);
/* The constraint of a compiled grammar over a token trie (both owned by it
 * from now on; for vocabularies without a tokenizer, as in tests). NULL
 * with the error set when the grammar cannot start within its bounds. */
struct rf_grammar;
struct rf_token_trie;
rf_constraint *rf_constraint_new(struct rf_grammar *g, struct rf_token_trie *trie);

#endif
