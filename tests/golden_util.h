/* golden_util.h - helpers of the golden tests (model_golden_hf.c,
 * decode_golden_ref.c): fixtures in tests/data/golden/ computed once by
 * independent references (scripts/device/golden.py on a machine with
 * PyTorch + transformers), and the checkpoints they were computed on,
 * recreated here by replaying the exact `refusion init` arguments. */
#ifndef RF_GOLDEN_UTIL_H
#define RF_GOLDEN_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "util/util.h"

/* $REFUSION_SRC/tests/data/golden/<name>; caller frees */
static char *golden_path(const char *name) {
    const char *src = getenv("REFUSION_SRC");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/data/golden/%s", src ? src : ".", name);
    return strdup(buf);
}

static json_t *golden_json(const char *name) {
    char *p = golden_path(name);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    if (!j) fprintf(stderr, "FAIL: %s: %s (line %d)\n", p, err.text, err.line);
    free(p);
    return j;
}

/* ints of a JSON array into a new buffer; *n = count */
static int *golden_ints(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int *v = rf_malloc(sizeof(int) * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++) v[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* Run `$REFUSION_BIN init -o DIR <init_args>` into a fresh temp dir (written
 * to dir, PATH_MAX) and load it. 0 on success. */
static int golden_checkpoint(json_t *init_args, char *dir, rf_model *m) {
    const char *bin = getenv("REFUSION_BIN");
    if (!bin) {
        fprintf(stderr, "FAIL: REFUSION_BIN is not set (run through ctest)\n");
        return -1;
    }
    strcpy(dir, "/tmp/rf_golden.XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "FAIL: mkdtemp\n");
        return -1;
    }
    char cmd[8192];
    int len = snprintf(cmd, sizeof cmd, "'%s' init -o '%s'", bin, dir);
    for (size_t i = 0; i < json_array_size(init_args); i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " '%s'",
                        json_string_value(json_array_get(init_args, i)));
    snprintf(cmd + len, sizeof cmd - (size_t)len, " > /dev/null");
    if (system(cmd)) {
        fprintf(stderr, "FAIL: %s\n", cmd);
        return -1;
    }
    if (rf_model_load(m, dir)) {
        fprintf(stderr, "FAIL: load %s: %s\n", dir, rf_last_error());
        return -1;
    }
    return 0;
}

static void golden_rmdir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* The recreated weights are the ones the golden was computed on: the first 8
 * values of embed row 0 and the last 8 of the last row, exactly. A failure
 * here means the random generator or `refusion init` changed, not that the
 * engine computes wrongly: regenerate the fixtures (scripts/device/README.md). */
static int golden_same_weights(const rf_model *m, json_t *ent, const char *name) {
    int V = m->cfg.vocab_size, d = m->cfg.hidden_size, ok = 1;
    float *row = rf_malloc(sizeof(float) * (size_t)d);
    rf_mat_row_f32(row, &m->embed, 0);
    for (int i = 0; i < 8; i++)
        ok &= row[i] == (float)json_real_value(json_array_get(json_object_get(ent, "embed_row0"), (size_t)i));
    rf_mat_row_f32(row, &m->embed, V - 1);
    for (int i = 0; i < 8; i++)
        ok &= row[d - 8 + i] ==
              (float)json_real_value(json_array_get(json_object_get(ent, "embed_last"), (size_t)i));
    free(row);
    CHECK(ok, "%s: `refusion init` no longer writes the weights the golden was computed on "
              "(regenerate the fixtures, scripts/device/README.md)", name);
    return ok;
}

#endif
