/* tasks.h - the project's own task suite: three families of generated
 * problems, each with an automatic checker, written as the {"query",
 * "response"} JSON lists the trainer reads.
 *
 *   arith  multi-step arithmetic word problems with a worked solution ending
 *          in "#### <answer>" (GSM8K-like); checked by exact match of the
 *          integer after the last "####".
 *   func   write a small Python function f(x) from an English specification
 *          (MBPP-like); checked by running the answer with a small Python
 *          subset interpreter (tasks/pyfunc.h) on hidden test cases.
 *   json   turn a description of several records into a JSON list of
 *          objects (long structured answers); checked by parsing the answer
 *          and comparing it with the expected value.
 *
 * An example is a JSON object:
 *   {"query": str, "response": str, "family": str,
 *    "answer": int          (arith: the final number)
 *    "tests": [[x, y], ...] (func: hidden inputs and expected outputs)
 *    "answer": value        (json: the expected JSON value)}
 * The trainer reads only query and response. */
#ifndef RF_TASKS_H
#define RF_TASKS_H

#include <stdint.h>
#include <jansson.h>

#include "util/util.h"

typedef enum { RF_TASK_ARITH, RF_TASK_FUNC, RF_TASK_JSON, RF_TASK_N } rf_task_family;

/* "arith" | "func" | "json"; NULL for an out-of-range family. */
const char *rf_task_family_name(int family);
/* -1 for an unknown name. */
int rf_task_family_from_name(const char *name);

/* One new example of the family drawn from rng (a new reference). */
json_t *rf_task_generate(int family, rf_rng *rng);

/* The suite: n_test examples drawn from a stream seeded by (seed, "test"),
 * then n_train from a stream seeded by (seed, "train") whose queries are
 * neither in the test set nor repeated. The test set thus depends only on
 * seed and n_test, never on n_train. Families take turns (families[i % n_fam]).
 * Returns 0 with two new JSON arrays, or -1 (rf_last_error) when the task
 * space runs out of distinct queries. */
int rf_tasks_make_split(uint64_t seed, int n_train, int n_test, const int *families,
                        int n_fam, json_t **train, json_t **test);
/* The same, calling on_drawn (when not NULL) after each example with the
 * examples drawn so far and n_test + n_train. */
typedef void (*rf_tasks_progress_fn)(int done, int total, void *user);
int rf_tasks_make_split_progress(uint64_t seed, int n_train, int n_test, const int *families, int n_fam,
                                 rf_tasks_progress_fn on_drawn, void *user, json_t **train, json_t **test);

/* Check a model's answer against an example. 1 = right, 0 = wrong (any
 * unparsable answer is wrong), -1 = the example itself is malformed
 * (rf_last_error). */
int rf_task_check(const json_t *example, const char *model_answer);

/* Write a JSON list of examples, one object per line, atomically. */
int rf_tasks_write(const char *path, const json_t *examples);
/* Read and validate a task file: a JSON list of objects each with string
 * "query" and "response" (and, for checking, a known "family" plus its
 * metadata). NULL with "<path>: <what is wrong>" in rf_last_error. */
json_t *rf_tasks_load(const char *path, int need_checker);

#endif
