/* cmd_tasks.c - `refusion tasks`: write the generated task suite
 * (train.json / test.json) and, with --show, print a few examples. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "tasks/tasks.h"

typedef struct {
    const char *out, *families;
    int64_t seed;
    int n_train, n_test, show;
} tasks_args;

#define A(f) offsetof(tasks_args, f)
static const rf_opt tasks_opts[] = {
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "DIR", .help = "output folder"},
    {.name = "seed", .type = RF_OPT_I64, .lo = 0, .hi = (double)(1LL << 62), .offset = A(seed), .metavar = "N",
     .help = "suite seed"},
    {.name = "train", .type = RF_OPT_INT, .lo = 0, .hi = 10000000, .offset = A(n_train), .metavar = "N",
     .help = "training examples"},
    {.name = "test", .type = RF_OPT_INT, .lo = 0, .hi = 1000000, .offset = A(n_test), .metavar = "N",
     .help = "test examples"},
    {.name = "families", .type = RF_OPT_STR, .offset = A(families), .metavar = "LIST",
     .help = "comma-separated subset of arith,func,json"},
    {.name = "show", .type = RF_OPT_INT, .lo = 1, .hi = 1000, .offset = A(show), .metavar = "N",
     .help = "print N examples of each family and write nothing"},
};

static void on_drawn(int done, int total, void *meter) {
    (void)total;
    rf_meter_update(meter, done, NULL);
}

/* --families: the family ids into fams (RF_TASK_N at most), their count; -1 after the error line */
static int parse_families(const char *list_arg, int *fams) {
    int n_fam = 0;
    char *list = rf_strdup(list_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int f = rf_task_family_from_name(tok);
        int dup = 0;
        for (int k = 0; k < n_fam; k++) dup |= fams[k] == f;
        if (f < 0 || dup) {
            fprintf(stderr, "refusion: tasks: --families: %s family '%s' (known: arith, func, json)\n",
                    f < 0 ? "unknown" : "repeated", tok);
            free(list);
            return -1;
        }
        fams[n_fam++] = f;
    }
    free(list);
    if (n_fam == 0) {
        fprintf(stderr, "refusion: tasks: --families: empty list\n");
        return -1;
    }
    return n_fam;
}

static void show_examples(uint64_t seed, const int *fams, int n_fam, int show) {
    rf_rng r;
    rf_rng_seed(&r, seed);
    for (int k = 0; k < n_fam; k++)
        for (int i = 0; i < show; i++) {
            json_t *e = rf_task_generate(fams[k], &r);
            printf("--- %s\nQ: %s\nA: %s\n", rf_task_family_name(fams[k]),
                   json_string_value(json_object_get(e, "query")), json_string_value(json_object_get(e, "response")));
            json_decref(e);
        }
}

int cmd_tasks(int argc, char **argv) {
    tasks_args a = {.out = "data", .families = "arith,func,json", .seed = 1, .n_train = 6000, .n_test = 300},
               def_a = a;
    int progress = 0;
    const rf_opt_group groups[] = {
        {NULL, tasks_opts, (int)(sizeof tasks_opts / sizeof tasks_opts[0]), &a, NULL, &def_a},
        RF_PROGRESS_GROUP(&progress),
    };
    int prc = rf_args_parse("tasks", "[options]\n"
                            "Write the task suite: <out>/train.json and <out>/test.json, JSON lists of\n"
                            "{\"query\", \"response\", \"family\", checker data}. The test queries never\n"
                            "appear in the training set; the test set depends only on --seed and --test.",
                            groups, 2, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    int fams[RF_TASK_N];
    int n_fam = parse_families(a.families, fams);
    if (n_fam < 0) return 2;
    if (a.show) {
        show_examples((uint64_t)a.seed, fams, n_fam, a.show);
        return 0;
    }
    const char *out = a.out;
    long long seed = a.seed, n_train = a.n_train, n_test = a.n_test;
    const char *fam_list = a.families;
    json_t *train, *test;
    /* a progress line on a terminal (or with --progress) */
    rf_meter meter;
    rf_meter_init(&meter, "tasks", (int)(n_train + n_test), progress < 0 || (!progress && !isatty(2)));
    if (rf_tasks_make_split_progress((uint64_t)seed, (int)n_train, (int)n_test, fams, n_fam, on_drawn, &meter, &train,
                                     &test)) {
        rf_meter_abort(&meter);
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
