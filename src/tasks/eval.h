/* eval.h - run a model with a decoder over a task file, check every answer
 * and aggregate accuracy and speed per family and overall (refusion eval).
 *
 * Definitions, the same for every decoder:
 *   tokens       answer tokens produced, up to and including the first EOS
 *                (the reference's "gen len")
 *   latency      wall time of the decoder call for one example (prompt
 *                encoding and checking excluded)
 *   tokens/s     total tokens / total latency (the reference's TPS)
 *   TPF          mean over examples of the decoder's own TPF (ReFusion: the
 *                reference's per-step mean; AR: 1; MDM: tokens unmasked per
 *                model call)
 *   tokens/call  total tokens / total model calls */
#ifndef RF_EVAL_H
#define RF_EVAL_H

#include <jansson.h>

#include "decode/decode.h"
#include "decode/mdm.h"
#include "model/model.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"

/* The decoder's name in reports: rf_method_name(method), or "answers" when
 * given answers are scored and no model runs. */
const char *rf_decoder_name(rf_method method, int answers);

struct rf_eval_agg;

typedef struct {
    int answers;           /* score the answers given to rf_eval_run; no model runs */
    rf_params gen;         /* the decoder (gen.method) and its settings */
    rf_mdm_params mdm;     /* mdm only */
    int limit;             /* evaluate only the first limit examples; 0 = all */
    /* optional: called after each example with the sums so far (all),
     * e.g. for a progress line; the library itself prints nothing */
    void (*on_example)(int done, int total, const struct rf_eval_agg *all, void *user);
    void *user;
} rf_eval_opts;

/* Sums over a set of examples. */
typedef struct rf_eval_agg {
    int n, n_right;
    long tokens, calls;
    double seconds, tpf_sum;
    int n_eos;             /* answers that ended with an EOS */
    /* how the committed tokens got in (ReFusion; rf_accept_stats summed) */
    long acc_first_free, acc_first_checked, acc_first_replaced, acc_verified, acc_forced_draft,
        acc_forced_ar;
} rf_eval_agg;

typedef struct {
    rf_method decoder;
    int answers;           /* the answers were scored, no decoder ran */
    rf_eval_agg fam[RF_TASK_N], all;
    json_t *examples;      /* per example: family, query, answer, right, tokens, calls, seconds, tpf */
} rf_eval_report;

/* Load the model at model_dir and its tokenizer (tok_path, or the one beside
 * the model: rf_tok_for_model), refusing a tokenizer with more ids than the
 * model. 0, or -1 with rf_last_error() and nothing left loaded. */
int rf_eval_load_model(rf_model *m, rf_tokenizer **tok, const char *model_dir, const char *tok_path);

/* Evaluate examples (a loaded, checker-validated task list). With o->answers
 * no model runs: answers[i] (strings, one per example) are
 * checked instead (m and tok may be NULL). 0, or -1 with rf_last_error()
 * naming the example. */
int rf_eval_run(const rf_model *m, const rf_tokenizer *tok, const json_t *examples,
                const json_t *answers, const rf_eval_opts *o, rf_eval_report *rep);
void rf_eval_report_free(rf_eval_report *rep);

/* The per-family + overall metrics as JSON ({"overall": {...}, "families":
 * {...}}) and as a Markdown table (malloc'd). For the ReFusion decoder both
 * also give the per-token acceptance statistics: counts ("accept") and
 * fractions of the committed tokens, in the JSON of every aggregate and as a
 * second Markdown table. */
json_t *rf_eval_metrics_json(const rf_eval_report *rep);
char *rf_eval_markdown_table(const rf_eval_report *rep);

#endif
