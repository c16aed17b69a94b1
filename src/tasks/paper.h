/* paper.h - the paper's seven benchmarks (GSM8K, MATH, HumanEval, MBPP,
 * ARC-Challenge, MMLU-Pro, GPQA) as the authors evaluate them: lm-eval
 * harness tasks, 0-shot, with the chat template (docs/eval.md says where each
 * prompt and each extraction rule comes from).
 *
 * An item is the data set's own record read into one JSON object of fixed
 * fields, the same for every task:
 *   "id"          the record's id, or its index
 *   "system"      the system message (the task's description), or absent
 *   "user"        the user message (the task's doc_to_text)
 *   "prefix"      the start of the assistant's turn the model continues
 *                 (gen_prefix), or absent
 *   "target"      what the answer is compared with: a number (GSM8K), the
 *                 normalised \boxed{} answer (MATH), a letter (ARC-C,
 *                 MMLU-Pro), "(X)" (GPQA)
 *   "choices"     [str] (multiple choice)
 *   "code_prompt", "entry_point", "test"   (code: the program's head, the
 *                 function the tests call, the test code)
 * Library code: nothing here prints. */
#ifndef RF_PAPER_H
#define RF_PAPER_H

#include <jansson.h>

#include "tasks/sandbox.h"
#include "util/util.h"
#include "tokenizer/tokenizer.h"

typedef enum {
    RF_PAPER_GSM8K,
    RF_PAPER_MATH,
    RF_PAPER_HUMANEVAL,
    RF_PAPER_MBPP,
    RF_PAPER_ARC_C,
    RF_PAPER_MMLU_PRO,
    RF_PAPER_GPQA,
    RF_PAPER_N
} rf_paper_task;

/* "gsm8k" "math" "humaneval" "mbpp" "arc-c" "mmlu-pro" "gpqa": also the
 * names of the decoding presets (decode/presets.h) */
const char *rf_paper_task_name(int task);
int rf_paper_task_from_name(const char *name); /* -1 if unknown */
/* the lm-eval task the authors ran ("gsm8k_cot", ...) */
const char *rf_paper_harness_task(int task);

/* ---- reading -------------------------------------------------------------- */
/* Read a data file: JSON Lines (one record per line) or one JSON array of
 * records, in the data set's public format. A list of items (see above), or
 * NULL with "<path>: line N: <what>" in rf_last_error(). */
json_t *rf_paper_load(int task, const char *path);
/* The JSON Lines text of path (modified in place): each non-blank line
 * parsed and handed to fn (which keeps nothing of it: the record is freed
 * after the call). 0, or -1 with "<path>: line N: <what>" in rf_last_error()
 * when a line is not JSON or fn returns -1 with the error set. */
int rf_jsonl_foreach(char *text, const char *path, int (*fn)(json_t *record, void *user), void *user);
/* One record (as the data set publishes it) as an item; index gives the id
 * when the record has none. NULL with the error set. */
json_t *rf_paper_item(int task, const json_t *record, int index);

/* ---- the prompt ----------------------------------------------------------- */
/* The text the model sees: the chat template over the item's system and
 * user messages with the generation prompt, and the prefix, which the
 * assistant's turn then continues (continue_final_message). malloc'd, or
 * NULL with the error set (a tokenizer whose template is not ChatML). */
char *rf_paper_prompt(const rf_tokenizer *t, const json_t *item);

/* ---- the answer ----------------------------------------------------------- */
/* What the authors' harness does to the decoded text before the task's
 * filters see it: cut at the first of the task's stop sequences, then, if
 * it holds a ```python ... ``` block, keep that block's code. malloc'd. */
char *rf_paper_completion(int task, const char *decoded);

/* The task's metrics, the first is the headline one (lm-eval's names:
 * "exact_match,strict-match", "pass@1", ...). n set to their number. */
const char *const *rf_paper_metrics(int task, int *n);

/* Score one completion: values[k] (0 or 1) for each metric, and a JSON
 * object with what was extracted from the answer ("extracted": {...}) and,
 * for code, the sandbox's verdict. Code runs in the sandbox with box (NULL:
 * rf_sandbox_default). 0, or -1 with the error set when the item cannot be
 * scored (a bad item, the sandbox could not start). */
int rf_paper_score(int task, const json_t *item, const char *completion, const rf_sandbox_limits *box,
                   double *values, json_t **detail);

/* ---- the pieces, for tests ------------------------------------------------ */
/* lm-eval's regex filter: the group_select-th match (negative: from the
 * end) of pattern in text, its first non-empty group (or the whole match),
 * stripped; NULL when nothing matches. malloc'd. */
char *rf_paper_regex_pick(const char *pattern, const char *text, int group_select);
/* lm-eval's exact_match: the regexes_to_ignore removed from both, then
 * lowercase (ignore_case) and ASCII punctuation removed (ignore_punct). */
int rf_paper_exact_match(const char *pred, const char *ref, const char *const *ignore, int n_ignore,
                         int ignore_case, int ignore_punct);

/* MATH (paper_math.c): the last \boxed{...} (or \fbox) of s without the
 * box, or NULL; minerva's normalize_final_answer; Hendrycks' strip_string;
 * and the equivalence used to score (see paper_math.c). */
char *rf_math_last_boxed(const char *s);
char *rf_math_normalize_final(const char *s);
char *rf_math_strip_string(const char *s);
int rf_math_equiv(const char *a, const char *b);

#endif
