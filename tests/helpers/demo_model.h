/* demo_model.h - the shipped demo model for the C tests, found in one way:
 * models/refusion-demo under $REFUSION_SRC (CTest sets it to the source
 * tree; otherwise the working directory). rf_test_demo_load loads it and
 * records a failed load as a CHECK, so that a test without the model fails
 * instead of passing silently; rf_test_demo_load_chat adds its tokenizer,
 * and rf_test_demo_prompts gives the chat-formatted ids of task questions
 * like those it was trained on. Include check.h first. */
#ifndef RF_TEST_DEMO_MODEL_H
#define RF_TEST_DEMO_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static inline void rf_test_demo_dir(char *dir, size_t n) {
    const char *src = getenv("REFUSION_SRC");
    snprintf(dir, n, "%s/models/refusion-demo", src ? src : ".");
}

/* dir (n bytes) receives the folder; 0, or -1 after a recorded failure */
static inline int rf_test_demo_load(rf_model *m, char *dir, size_t n) {
    rf_test_demo_dir(dir, n);
    if (rf_model_load(m, dir) == 0) return 0;
    CHECK(0, "%s: %s", dir, rf_last_error());
    return -1;
}

/* The model and its tokenizer; 0, or -1 after a recorded failure, with
 * nothing left loaded. */
static inline int rf_test_demo_load_chat(rf_model *m, rf_tokenizer **tok, char *dir, size_t n) {
    if (rf_test_demo_load(m, dir, n)) return -1;
    *tok = rf_tok_for_model(dir, NULL);
    CHECK(*tok != NULL, "%s: no tokenizer: %s", dir, rf_last_error());
    if (*tok) return 0;
    rf_model_free(m);
    return -1;
}

/* Four task questions (arith, func, json, arith) */
#define RF_TEST_DEMO_QUESTIONS 4
static const char *const rf_test_demo_questions[RF_TEST_DEMO_QUESTIONS] = {
    "Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?",
    "Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.",
    "Make a JSON record for a person named Ada, age 36, city London.",
    "A shop sells 4 boxes of 9 pens each and then 6 more pens. How many pens were sold?"};

/* ids[k], n_ids[k]: question k as a chat prompt (the caller frees ids[k];
 * NULL and 0 after a recorded failure) */
static inline void rf_test_demo_prompts(const rf_tokenizer *tok, int *ids[RF_TEST_DEMO_QUESTIONS],
                                        int n_ids[RF_TEST_DEMO_QUESTIONS]) {
    for (int k = 0; k < RF_TEST_DEMO_QUESTIONS; k++) {
        ids[k] = NULL, n_ids[k] = 0;
        CHECK(rf_chat_query_ids(tok, rf_test_demo_questions[k], &ids[k], &n_ids[k]) == 0, "question %d: %s", k,
              rf_last_error());
    }
}

#endif
