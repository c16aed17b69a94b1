/* constraint.h - the hook through which a grammar constrains decoding
 * (rf_params.constraint; implemented in grammar/constraint.c).
 *
 * A decoder that honours a constraint opens a run per generation and, for
 * every answer position in order: masks the logits row the token is drawn
 * from (the tokens the grammar refuses get -inf; EOS is allowed exactly
 * where the answer so far is a complete sentence), draws as it would
 * without the constraint, and accepts the token. Unconstrained decoding
 * never calls these (rf_params.constraint NULL), so it is unchanged.
 * Every decoder honours it: AR decoding and the rolling slot (their
 * answers stay equal), plan-and-infill and MDM by committing answer tokens
 * in position order only (docs/refusion.md, constrained decoding). */
#ifndef RF_DECODE_CONSTRAINT_H
#define RF_DECODE_CONSTRAINT_H

struct rf_constraint;
typedef struct rf_constraint_run rf_constraint_run;

/* A run of c for a model of `vocab` tokens ending answers with eos (>= 0).
 * NULL with rf_last_error(). */
rf_constraint_run *rf_constraint_run_new(const struct rf_constraint *c, int eos, int vocab);
void rf_constraint_run_free(rf_constraint_run *r);
/* logits[t] = -inf for every token t the grammar refuses next. 0, or -1
 * with the error set (a bound of the grammar hit, or no token allowed). */
int rf_constraint_run_mask(rf_constraint_run *r, float *logits);
/* Advance by token t (one the mask allowed). 0, or -1 with the error set. */
int rf_constraint_run_accept(rf_constraint_run *r, int t);
/* The mask for the state after tok[0..n) (each taken in turn), the state
 * left as it was. 0, or -1 with the error set (a token refused too). */
int rf_constraint_run_mask_after(rf_constraint_run *r, const int *tok, int n, float *logits);
/* How many of tok[0..n) in a row the grammar takes from here (drafts),
 * the state left as it was. */
int rf_constraint_run_prefix(rf_constraint_run *r, const int *tok, int n);

#endif
