/* demo_model.h - the shipped demo model for the C tests, found in one way:
 * models/refusion-demo under $REFUSION_SRC (CTest sets it to the source
 * tree; otherwise the working directory). rf_test_demo_load loads it and
 * records a failed load as a CHECK, so that a test without the model fails
 * instead of passing silently. Include check.h first. */
#ifndef RF_TEST_DEMO_MODEL_H
#define RF_TEST_DEMO_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
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

#endif
