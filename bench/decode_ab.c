/* decode_ab.c - an A/B speed comparison of two decoding settings (and
 * optionally two models) that survives a noisy machine: both are loaded
 * once, and the same task examples are decoded one by one, alternating A
 * and B in ABBA order (example 2k: A then B, example 2k+1: B then A), so a
 * slow second hits both alike. Each generation is timed on its own.
 *
 *   bench_decode_ab -m MODEL_A [--model-b MODEL_B] --data TEST.json
 *                   --a "DECODING OPTIONS" --b "DECODING OPTIONS"
 *                   [--limit N] [--threads T] [--json FILE] [--slow-b PCT]
 *                   [--a-kernels SETTINGS] [--b-kernels SETTINGS]
 *
 * The option strings are `refusion generate`'s decoding options (e.g. "--decoder ar -n 128",
 * "--rolling --slot-size 4 --slot-threshold 0.5 -n 128"). Prints the ratio
 * of total times (B / A and A's time over B's: B's speed-up), the median of
 * the per-example ratios t_B / t_A with a bootstrap 95% interval, tokens
 * per call of each, and how many answers (ids) are identical.
 * --a-kernels / --b-kernels give a side kernel settings (kernel_settings.h,
 * e.g. "amx-int8=0"), applied before each of its generations: the same
 * decoder with and without a kernel path, end to end.
 *
 * --slow-b PCT is for testing the benchmark itself: after each of B's
 * generations it busy-waits PCT% of that generation's time, counted in B's
 * time, so B's true time ratio is known to be (1 + PCT/100) times the
 * natural one. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "kernel_settings.h"
#include "decode/decode.h"
#include "tasks/eval.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define MAX_OPT_WORDS 64

typedef struct {
    const char *text;
    rf_decode_opts d;
    const rf_model *m;
    bench_kernels kern;  /* applied before each generation */
    float call_cost[64]; /* --draft-policy adaptive: the model's call costs, measured once */
    double total_s;
    long tokens, calls;
} setting;

/* "--rolling --slot-size 4" -> the decoding options (the CLI's table) */
static int parse_setting(const char *label, const char *text, rf_decode_opts *d) {
    static char buf[2][4096];
    int which = label[0] == 'B';
    snprintf(buf[which], sizeof buf[which], "%s", text);
    char *argv[MAX_OPT_WORDS + 1];
    int argc = 0;
    argv[argc++] = (char *)label;
    for (char *t = strtok(buf[which], " \t"); t; t = strtok(NULL, " \t")) {
        if (argc == MAX_OPT_WORDS) {
            fprintf(stderr, "decode_ab: %s: more than %d words\n", label, MAX_OPT_WORDS);
            return -1;
        }
        argv[argc++] = t;
    }
    argv[argc] = NULL;
    rf_decode_opts_default(d);
    rf_decode_opts def = *d;
    rf_opt_group g[] = {RF_DECODE_GROUP(d, &def)};
    if (rf_args_parse(label, "\"DECODING OPTIONS\"", g, 1, argc, argv, NULL)) return -1;
    if (d->gen.method == RF_METHOD_MDM) {
        fprintf(stderr, "decode_ab: %s: the mdm decoder is not compared here (refusion or ar)\n", label);
        return -1;
    }
    rf_decode_opts_finish(d);
    return 0;
}

static int generate(setting *s, const int *ids, int n, rf_gen_result *r, double *secs) {
    bench_kernels_apply(&s->kern);
    double t0 = rf_now();
    int rc = rf_decode(s->m, ids, n, &s->d.gen, NULL, r);
    *secs = rf_now() - t0;
    return rc;
}

static void busy_wait(double s) {
    double end = rf_now() + s;
    while (rf_now() < end) {
    }
}

int main(int argc, char **argv) {
    const char *dir_a = NULL, *dir_b = NULL, *data = NULL, *json_out = NULL;
    const char *text[2] = {NULL, NULL}, *kern_text[2] = {NULL, NULL};
    int limit = 0, threads = 0;
    double slow_b = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "decode_ab: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) dir_a = v;
        else if (!strcmp(a, "--model-b")) dir_b = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--a")) text[0] = v;
        else if (!strcmp(a, "--b")) text[1] = v;
        else if (!strcmp(a, "--json")) json_out = v;
        else if (!strcmp(a, "--limit")) limit = atoi(v);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "--slow-b")) slow_b = atof(v);
        else if (!strcmp(a, "--a-kernels")) kern_text[0] = v;
        else if (!strcmp(a, "--b-kernels")) kern_text[1] = v;
        else {
            fprintf(stderr, "decode_ab: unknown option %s\n", a);
            return 2;
        }
    }
    if (!dir_a || !data || !text[0] || !text[1] || limit < 0 || threads < 0 || slow_b < 0) {
        fprintf(stderr, "usage: bench_decode_ab -m MODEL_A [--model-b MODEL_B] --data TEST.json --a \"OPTS\" "
                        "--b \"OPTS\" [--limit N] [--threads T] [--json FILE] [--slow-b PCT] [--a-kernels SETTINGS] "
                        "[--b-kernels SETTINGS]\n");
        return 2;
    }
    setting S[2];
    memset(S, 0, sizeof S);
    for (int k = 0; k < 2; k++) {
        S[k].text = text[k];
        if (parse_setting(k ? "B" : "A", text[k], &S[k].d)) return 2;
        if (bench_kernels_parse(&S[k].kern, kern_text[k] ? kern_text[k] : "") != 0) {
            fprintf(stderr, "decode_ab: --%c-kernels: bad SETTINGS '%s' (%s; a tier this CPU has)\n", "ab"[k],
                    kern_text[k], BENCH_KERNELS_HELP);
            return 2;
        }
    }
    if (threads) omp_set_num_threads(threads);
    rf_model ma, mb;
    rf_tokenizer *tok, *tok_b = NULL;
    if (rf_eval_load_model(&ma, &tok, dir_a, NULL) ||
        (dir_b && rf_eval_load_model(&mb, &tok_b, dir_b, NULL))) {
        rf_print_error();
        return 1;
    }
    S[0].m = &ma;
    S[1].m = dir_b ? &mb : &ma;
    for (int k = 0; k < 2; k++) { /* as a session does at its first adaptive generation */
        rf_params *g = &S[k].d.gen;
        if (!g->rolling || !g->draft_adaptive) continue;
        int need = 2 * (g->slot_size < 32 ? g->slot_size : 32);
        bench_kernels_apply(&S[k].kern);
        int cached;
        if (rf_call_cost_get(S[k].m, need, S[k].call_cost, &cached)) {
            rf_print_error();
            return 1;
        }
        g->call_cost = S[k].call_cost, g->n_call_cost = need;
        printf("# %c: call cost (n tokens / 1 token; %s), n = 1..%d:", "AB"[k], cached ? "the tune cache's" : "timed", need);
        for (int i = 0; i < need; i++) printf(" %.2f", S[k].call_cost[i]);
        printf("\n");
    }
    json_t *ex = rf_tasks_load(data, 0);
    if (!ex) {
        rf_print_error();
        return 1;
    }
    int n = (int)json_array_size(ex);
    if (limit && limit < n) n = limit;
    if (n < 1) {
        fprintf(stderr, "decode_ab: %s: no examples\n", data);
        return 1;
    }
    double *ta = rf_calloc((size_t)n, sizeof(double)), *tb = rf_calloc((size_t)n, sizeof(double));
    double *ratio = rf_calloc((size_t)n, sizeof(double));
    int same = 0;
    json_t *per = json_array();
    /* warm-up: the first example once each, untimed (page faults, packed copies, thread start) */
    for (int k = 0; k < 2; k++) {
        int *ids, np;
        rf_gen_result r;
        double s;
        if (rf_chat_query_ids(tok, json_string_value(json_object_get(json_array_get(ex, 0), "query")), &ids, &np) ||
            generate(&S[k], ids, np, &r, &s)) {
            rf_print_error();
            return 1;
        }
        rf_gen_result_free(&r);
        free(ids);
    }
    for (int i = 0; i < n; i++) {
        int *ids, np;
        if (rf_chat_query_ids(tok, json_string_value(json_object_get(json_array_get(ex, i), "query")), &ids, &np)) {
            fprintf(stderr, "decode_ab: example %d: %s\n", i, rf_last_error());
            return 1;
        }
        rf_gen_result r[2];
        double t[2];
        for (int j = 0; j < 2; j++) {
            int k = i % 2 ? 1 - j : j; /* ABBA */
            if (generate(&S[k], ids, np, &r[k], &t[k])) {
                fprintf(stderr, "decode_ab: example %d, setting %c: %s\n", i, "AB"[k], rf_last_error());
                return 1;
            }
            if (k == 1 && slow_b > 0) {
                double t0 = rf_now();
                busy_wait(t[1] * slow_b / 100);
                t[1] += rf_now() - t0;
            }
        }
        free(ids);
        ta[i] = t[0], tb[i] = t[1], ratio[i] = t[1] / t[0];
        int eq = r[0].n_ids == r[1].n_ids && !memcmp(r[0].ids, r[1].ids, sizeof(int) * (size_t)r[0].n_ids);
        same += eq;
        for (int k = 0; k < 2; k++) {
            S[k].total_s += t[k];
            S[k].tokens += r[k].n_tokens;
            S[k].calls += r[k].n_calls;
        }
        json_array_append_new(per, json_pack("{s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:b}", "example", i, "a_s", t[0],
                                             "b_s", t[1], "a_tokens", r[0].n_tokens, "b_tokens", r[1].n_tokens,
                                             "a_calls", r[0].n_calls, "b_calls", r[1].n_calls, "same", eq));
        rf_gen_result_free(&r[0]);
        rf_gen_result_free(&r[1]);
    }
    /* the median per-example ratio and its bootstrap interval */
    double st[3];
    rf_median_ci(ratio, n, st);
    double med = st[0], lo = st[1], hi = st[2], tot = S[1].total_s / S[0].total_s;
    static char with_kernels[2][4400];
    for (int k = 0; k < 2; k++) /* kernel settings: with the option text */
        if (kern_text[k] && kern_text[k][0]) {
            snprintf(with_kernels[k], sizeof with_kernels[k], "%s [kernels %s]", S[k].text, kern_text[k]);
            S[k].text = with_kernels[k];
        }
    printf("# A: %s%s%s\n# B: %s%s%s%s\n", S[0].text, dir_b ? " on " : "", dir_b ? dir_a : "", S[1].text,
           dir_b ? " on " : "", dir_b ? dir_b : "", slow_b > 0 ? " (with the injected slowdown)" : "");
    if (slow_b > 0) printf("# B slowed by %.1f%% of each generation's time (--slow-b)\n", slow_b);
    printf("examples %d (ABBA), threads %d\n", n, threads ? threads : omp_get_max_threads());
    for (int k = 0; k < 2; k++)
        printf("%c: %.3f s total, %ld tokens, %ld calls, %.2f tokens/call, %.1f tokens/s\n", "AB"[k], S[k].total_s,
               S[k].tokens, S[k].calls, S[k].calls ? (double)S[k].tokens / S[k].calls : 0.0,
               S[k].total_s > 0 ? S[k].tokens / S[k].total_s : 0.0);
    printf("time B/A: total %.3f (B's speed-up %.3fx), median per example %.3f [95%% CI %.3f, %.3f]\n", tot, 1 / tot,
           med, lo, hi);
    printf("answers identical: %d of %d\n", same, n);
    if (json_out) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s?, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, "
                              "s:i, s:f, s:o}",
                              "a", S[0].text, "b", S[1].text, "model_a", dir_a, "model_b", dir_b, "examples", n,
                              "threads", threads ? threads : omp_get_max_threads(), "a_total_s", S[0].total_s,
                              "b_total_s", S[1].total_s, "ratio_total", tot, "ratio_median", med, "ratio_ci_lo", lo,
                              "ratio_ci_hi", hi, "a_tokens", (json_int_t)S[0].tokens, "a_calls",
                              (json_int_t)S[0].calls, "b_tokens", (json_int_t)S[1].tokens, "b_calls",
                              (json_int_t)S[1].calls, "same", same, "slow_b_pct", slow_b, "per_example", per);
        if (json_dump_file(o, json_out, JSON_INDENT(1))) {
            fprintf(stderr, "decode_ab: cannot write %s\n", json_out);
            return 1;
        }
        json_decref(o);
    } else {
        json_decref(per);
    }
    free(ta), free(tb), free(ratio);
    json_decref(ex);
    rf_tok_free(tok);
    rf_tok_free(tok_b);
    if (dir_b) rf_model_free(&mb);
    rf_model_free(&ma);
    return 0;
}
