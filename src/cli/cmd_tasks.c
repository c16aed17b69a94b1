/* cmd_tasks.c - `refusion tasks`: write the generated task suite
 * (train.json / test.json) and, with --show, print a few examples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tasks/tasks.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion tasks [options]\n"
            "Write the task suite: <out>/train.json and <out>/test.json, JSON lists of\n"
            "{\"query\", \"response\", \"family\", checker data}. The test queries never\n"
            "appear in the training set; the test set depends only on --seed and --test.\n\n"
            "  -o, --out DIR       output folder (default data)\n"
            "  --seed N            suite seed (default 1)\n"
            "  --train N           training examples (default 6000)\n"
            "  --test N            test examples (default 300)\n"
            "  --families LIST     comma-separated subset of arith,func,json (default all)\n"
            "  --show N            print N examples of each family and write nothing\n");
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "refusion: %s: expected an integer in [%lld, %lld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_tasks(int argc, char **argv) {
    const char *out = "data", *fam_list = "arith,func,json";
    long long seed = 1, n_train = 6000, n_test = 300, show = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (i + 1 >= argc) {
            fprintf(stderr, "refusion: tasks: unknown option or missing value: '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--seed")) rc = parse_int(a, v, 0, (1LL << 62), &seed);
        else if (!strcmp(a, "--train")) rc = parse_int(a, v, 0, 10000000, &n_train);
        else if (!strcmp(a, "--test")) rc = parse_int(a, v, 0, 1000000, &n_test);
        else if (!strcmp(a, "--families")) fam_list = v;
        else if (!strcmp(a, "--show")) rc = parse_int(a, v, 1, 1000, &show);
        else {
            fprintf(stderr, "refusion: tasks: unknown option '%s'\n", a);
            return 2;
        }
        if (rc) return 2;
    }
    int fams[RF_TASK_N], n_fam = 0;
    char *list = rf_strdup(fam_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int f = rf_task_family_from_name(tok);
        int dup = 0;
        for (int k = 0; k < n_fam; k++) dup |= fams[k] == f;
        if (f < 0 || dup) {
            fprintf(stderr, "refusion: --families: %s family '%s' (known: arith, func, json)\n",
                    f < 0 ? "unknown" : "repeated", tok);
            free(list);
            return 2;
        }
        fams[n_fam++] = f;
    }
    free(list);
    if (n_fam == 0) {
        fprintf(stderr, "refusion: --families: empty list\n");
        return 2;
    }

    if (show) {
        rf_rng r;
        rf_rng_seed(&r, (uint64_t)seed);
        for (int k = 0; k < n_fam; k++)
            for (int i = 0; i < show; i++) {
                json_t *e = rf_task_generate(fams[k], &r);
                printf("--- %s\nQ: %s\nA: %s\n", rf_task_family_name(fams[k]),
                       json_string_value(json_object_get(e, "query")),
                       json_string_value(json_object_get(e, "response")));
                json_decref(e);
            }
        return 0;
    }

    json_t *train, *test;
    if (rf_tasks_make_split((uint64_t)seed, (int)n_train, (int)n_test, fams, n_fam, &train, &test)) {
        rf_print_error();
        return 1;
    }
    int rc = 0;
    if (rf_mkdir_p(out)) {
        rf_print_error();
        rc = 1;
    }
    char *ptr = rf_path_join(out, "train.json"), *pte = rf_path_join(out, "test.json");
    if (!rc && (rf_tasks_write(ptr, train) || rf_tasks_write(pte, test))) {
        rf_print_error();
        rc = 1;
    }
    if (!rc)
        fprintf(stderr, "refusion: wrote %s (%lld examples) and %s (%lld), seed %lld, families %s\n",
                ptr, n_train, pte, n_test, seed, fam_list);
    free(ptr);
    free(pte);
    json_decref(train);
    json_decref(test);
    return rc;
}
