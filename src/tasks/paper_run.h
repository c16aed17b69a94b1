/* paper_run.h - a long evaluation run over one paper task: every sample's
 * result appended to a JSON Lines file as it finishes (so a killed run
 * resumes where it stopped), the totals, and the summary in lm-eval's shape
 * plus the speed figures, as JSON and as a Markdown table like the paper's.
 *
 * A sample line: {"task", "index", "id", "completion", "metrics": {name: 0|1},
 * "extracted": {...}, "tokens", "calls", "seconds", "tpf", "eos"} (+ "sandbox"
 * for code). Speed figures are defined as in tasks/eval.h. */
#ifndef RF_PAPER_RUN_H
#define RF_PAPER_RUN_H

#include <jansson.h>

#include "decode/mdm.h"
#include "model/model.h"
#include "tasks/eval.h"
#include "tasks/paper.h"

typedef struct {
    int n;                 /* samples scored (resumed ones included) */
    int n_resumed;         /* of which read back from the samples file */
    double sum[3];         /* per metric: sum of the 0/1 values */
    long tokens, calls;
    double seconds, tpf_sum;
    int n_eos;
} rf_paper_totals;

typedef struct {
    int task;
    int answers;                    /* score answers, no model (else gen.method's decoder) */
    rf_params gen;
    rf_mdm_params mdm;
    int limit;                      /* the first limit items; 0 = all */
    const rf_sandbox_limits *box;   /* code tasks (NULL: rf_sandbox_default) */
    const char *samples_path;       /* the JSON Lines file of per-sample results */
    int resume;                     /* continue the samples file (else it must be empty or absent) */
    /* optional, after each sample (the library prints nothing) */
    void (*on_sample)(int done, int total, const rf_paper_totals *t, void *user);
    void *user;
} rf_paper_run_opts;

/* Read an answers file: one {"completion": TEXT} object per line. A list of
 * strings, or NULL with "<path>: line N: ..." in rf_last_error(). */
json_t *rf_paper_load_answers(const char *path);

/* Run (or, with answers, score) the items. 0 with *t filled, or -1 with
 * rf_last_error() (the samples file then holds every sample finished so far). */
int rf_paper_run(const rf_model *m, const rf_tokenizer *tok, const json_t *items, const json_t *answers,
                 const rf_paper_run_opts *o, rf_paper_totals *t);

/* lm-eval's sample standard error of a mean of 0/1 values (NaN for n < 2) */
double rf_paper_stderr(double sum, int n);

/* {"results": {task: {"alias", "<metric>": v, "<metric stem>_stderr,<filter>": se}},
 *  "n-samples", "speed": {task: {...}}, "table": [{task, metric, value, stderr}],
 *  "config": config (stolen)} */
json_t *rf_paper_summary(int task, const rf_paper_totals *t, json_t *config);
/* | task | lm-eval task | metric | score | stderr | n | tokens/s | TPF | tokens/call | latency | (malloc'd) */
char *rf_paper_markdown(int task, const rf_paper_totals *t);

/* Several runs' summaries (rf_paper_summary's JSON, as read back from
 * PATH.json) as one table in the paper's layout: a row per model and decoder,
 * a column per task in the paper's order (HumanEval, MBPP, GSM8K, MATH, GPQA,
 * MMLU-Pro, ARC-C), each cell the headline score in % and tokens/s.
 * malloc'd, or NULL with the error set (a JSON that is not a summary). */
char *rf_paper_table(json_t *const *summaries, const char *const *paths, int n);

#endif
