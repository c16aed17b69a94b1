/* tasks_split.c - the generated suite: deterministic for a seed, every family
 * present, the test queries never in the training set (checked after a round
 * trip through the files, not through the generator's own bookkeeping), and
 * the test set independent of the training size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/check.h"
#include "tasks/tasks.h"

static int count_family(const json_t *a, const char *fam) {
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) n += !strcmp(json_string_value(json_object_get(e, "family")), fam);
    return n;
}

int main(void) {
    const int fams[] = {RF_TASK_ARITH, RF_TASK_FUNC, RF_TASK_JSON};
    json_t *tr, *te, *tr2, *te2, *tr3, *te3;
    CHECK(rf_tasks_make_split(1, 3000, 300, fams, 3, &tr, &te) == 0, "split: %s", rf_last_error());
    CHECK(rf_tasks_make_split(1, 3000, 300, fams, 3, &tr2, &te2) == 0, "split again");
    CHECK(rf_tasks_make_split(1, 500, 300, fams, 3, &tr3, &te3) == 0, "smaller train");
    CHECK(json_array_size(tr) == 3000 && json_array_size(te) == 300, "sizes %zu %zu",
          json_array_size(tr), json_array_size(te));

    /* deterministic: same seed, same files */
    CHECK(json_equal(tr, tr2) && json_equal(te, te2), "same seed gives the same suite");
    CHECK(json_equal(te, te3), "test set does not depend on the training size");
    json_t *tr4, *te4;
    CHECK(rf_tasks_make_split(2, 100, 300, fams, 3, &tr4, &te4) == 0, "seed 2");
    CHECK(!json_equal(te, te4), "another seed gives another test set");

    for (int f = 0; f < RF_TASK_N; f++) {
        const char *name = rf_task_family_name(f);
        CHECK(count_family(tr, name) == 1000 && count_family(te, name) == 100,
              "family %s: %d train %d test", name, count_family(tr, name), count_family(te, name));
    }

    /* write, read back, and cross-check the files by query text */
    char dir[] = "/tmp/rf_tasks_split_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char *ptr = rf_path_join(dir, "train.json"), *pte = rf_path_join(dir, "test.json");
    CHECK(rf_tasks_write(ptr, tr) == 0 && rf_tasks_write(pte, te) == 0, "write: %s", rf_last_error());
    json_t *ltr = rf_tasks_load(ptr, 1), *lte = rf_tasks_load(pte, 1);
    CHECK(ltr && lte, "load: %s", rf_last_error());
    if (ltr && lte) {
        CHECK(json_equal(ltr, tr) && json_equal(lte, te), "round trip through the files");
        json_t *train_q = json_object();
        size_t i;
        json_t *e;
        int dup_train = 0, overlap = 0, dup_test = 0;
        json_array_foreach(ltr, i, e) {
            const char *q = json_string_value(json_object_get(e, "query"));
            dup_train += json_object_get(train_q, q) != NULL;
            json_object_set_new(train_q, q, json_true());
        }
        json_t *test_q = json_object();
        json_array_foreach(lte, i, e) {
            const char *q = json_string_value(json_object_get(e, "query"));
            overlap += json_object_get(train_q, q) != NULL;
            dup_test += json_object_get(test_q, q) != NULL;
            json_object_set_new(test_q, q, json_true());
        }
        CHECK(overlap == 0, "%d test queries appear in the training set", overlap);
        CHECK(dup_train == 0 && dup_test == 0, "duplicates: %d train, %d test", dup_train, dup_test);
        json_decref(train_q);
        json_decref(test_q);
    }

    /* a broken file gives one clear error naming it */
    const char *bad = "[{\"query\": \"q\", \"response\": \"#### 3\", \"family\": \"arith\", \"answer\": 4}]";
    rf_write_file_atomic(pte, bad, strlen(bad));
    CHECK(rf_tasks_load(pte, 1) == NULL && strstr(rf_last_error(), "test.json") &&
              strstr(rf_last_error(), "fails its own checker"),
          "stale example rejected: %s", rf_last_error());
    json_t *plain = rf_tasks_load(pte, 0);
    CHECK(plain != NULL, "without checking, query/response suffice");
    json_decref(plain);
    rf_write_file_atomic(pte, "{\"query\": 1}", 12);
    CHECK(rf_tasks_load(pte, 0) == NULL && strstr(rf_last_error(), "list"), "not a list: %s",
          rf_last_error());
    rf_write_file_atomic(pte, "[{\"query\": 1, \"response\": \"r\"}]", 31);
    CHECK(rf_tasks_load(pte, 0) == NULL && strstr(rf_last_error(), "query"), "bad query: %s",
          rf_last_error());
    rf_write_file_atomic(pte, "[{\"query\": ", 11);
    CHECK(rf_tasks_load(pte, 0) == NULL && strstr(rf_last_error(), "line"), "truncated: %s",
          rf_last_error());
    unlink(ptr);
    unlink(pte);
    rmdir(dir);
    free(ptr);
    free(pte);

    json_decref(ltr);
    json_decref(lte);
    json_decref(tr); json_decref(te); json_decref(tr2); json_decref(te2);
    json_decref(tr3); json_decref(te3); json_decref(tr4); json_decref(te4);
    return check_summary("tasks_split");
}
