/* cmd_tune.c - `refusion tune`: on this machine and a model's weights
 * (model/tune.h): from how many tokens the AMX tiles beat the avx512
 * kernels; which packed bf16 kernel is faster at avx512 and up; the
 * panels' prefetch level; how many panels a tile streams at once: each
 * printed as the environment setting that
 * applies it and saved to the tune cache that model loads apply; then
 * the adaptive rolling slot's call costs under those choices, saved to
 * the same cache per model shape, tier and thread count. */
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/args.h"
#include "kernels/cpu.h"
#include "decode/decode.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/tune.h"
#include "util/util.h"

typedef struct {
    const char *model;
    int rounds, threads, no_save;
} tune_args;

/* the call-cost widths timed: the adaptive rolling slot's calls of slots of
 * up to 16 (feeding up to twice the slot) */
enum { TUNE_COST_WIDTHS = 32 };

#define A(f) offsetof(tune_args, f)
static const rf_opt tune_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "MODEL",
     .help = "checkpoint directory or .gguf file: bf16 weights tune the bf16 tiles, Q8_0 / Q4_0 the int8 tiles"},
    {.name = "rounds", .type = RF_OPT_INT, .lo = 3, .hi = 1000, .offset = A(rounds), .metavar = "N",
     .help = "rounds of interleaved calls per width (more: tighter intervals)"},
    {.name = "threads", .letter = 't', .type = RF_OPT_INT, .lo = 0, .hi = 4096, .offset = A(threads), .metavar = "N",
     .help = "OpenMP threads (0: OpenMP's default); tune with the threads you decode with"},
    {.name = "no-save", .type = RF_OPT_FLAG, .offset = A(no_save),
     .help = "print the choices without writing them to the tune cache"},
};

/* one measured choice between two settings: the rows (side a against side
 * b per width; the verdict where the interval excludes 1) and how their
 * logits differed */
static void print_sides(const tune_args *a, double seconds, const char *what, const char *sa, const char *sb,
                        const rf_tune_point *points, int n, double max_logit_diff) {
    char ms_a[16], ms_b[16], ratio[32];
    snprintf(ms_a, sizeof ms_a, "%s ms", sa);
    snprintf(ms_b, sizeof ms_b, "%s ms", sb);
    snprintf(ratio, sizeof ratio, "%s / %s [95%%]", sa, sb);
    printf("# %s, %d threads, %d rounds per width (%.0f s); %s (tier %s, %s)\n", a->model, omp_get_max_threads(),
           a->rounds, seconds, what, rf_cpu_tier_name(), rf_tune_cpu_model());
    printf("%7s %10s %10s %26s\n", "tokens", ms_a, ms_b, ratio);
    for (int i = 0; i < n; i++) {
        const rf_tune_point *p = &points[i];
        printf("%7d %10.2f %10.2f %10.3f [%.3f, %.3f]%s%s\n", p->width, p->ms_tiles, p->ms_other, p->ratio, p->lo, p->hi,
               p->hi < 1 || p->lo > 1 ? "  " : "", p->hi < 1 ? sa : p->lo > 1 ? sb : "");
    }
    printf("# logits: max |%s - %s| = %.2g of max |logit|\n", sa, sb, max_logit_diff);
}

/* writes set's choices or table to the tune cache unless no_save; 0, or
 * 1 after printing the error */
static int save(const tune_args *a, const rf_tune_choices *set, const char *what) {
    if (a->no_save) return 0;
    char path[4096];
    if (rf_tune_cache_write(set) || rf_tune_cache_path(path, sizeof path)) {
        rf_print_error();
        return 1;
    }
    printf("# saved to %s, %s (REFUSION_TUNE=off or --no-tune ignores it)\n", path, what);
    return 0;
}

/* the packed bf16 kernels at avx512 and up: printed, saved unless no_save */
static int tune_bf16p(const rf_model *m, const tune_args *a) {
    rf_tune_bf16p_result r;
    double t0 = rf_now();
    if (rf_tune_bf16p(m, a->rounds, &r)) {
        rf_print_error();
        return 1;
    }
    print_sides(a, rf_now() - t0, "packed bf16: vdpbf16ps against fma", "dp", "fma", r.points, r.n_points,
                r.max_logit_diff);
    rf_tune_choices set = rf_tune_choices_none();
    set.bf16p_kernel = r.kernel;
    if (save(a, &set, "applied at model load")) return 1;
    if (!rf_env_bf16p()) rf_matmul_set_bf16p_kernel(r.kernel); /* as the next load runs (the call costs) */
    printf("REFUSION_BF16P=%s\n", r.kernel == RF_BF16P_DP ? "dp" : "fma");
    return 0;
}

/* the panel kernels' prefetch level (packed weights, every tier): printed,
 * saved unless no_save; the two levels' logits are the same bits */
static int tune_prefetch(const rf_model *m, const tune_args *a) {
    rf_tune_prefetch_result r;
    double t0 = rf_now();
    if (rf_tune_prefetch(m, a->rounds, &r)) {
        rf_print_error();
        return 1;
    }
    print_sides(a, rf_now() - t0, "prefetch into L2 against L1", "L2", "L1", r.points, r.n_points, r.max_logit_diff);
    rf_tune_choices set = rf_tune_choices_none();
    set.prefetch_l2 = r.max_tokens;
    if (save(a, &set, "applied at model load")) return 1;
    if (!rf_env_prefetch_l2()) rf_matmul_set_prefetch_l2(r.max_tokens);
    if (r.max_tokens) printf("REFUSION_PREFETCH_L2=%d\n", r.max_tokens);
    else printf("REFUSION_PREFETCH_L2=off\n");
    return 0;
}

/* the panel kernels' stream count (packed weights, every tier): printed,
 * saved unless no_save; the logits are the same bits either way */
static int tune_stream_panels(const rf_model *m, const tune_args *a) {
    rf_tune_panels_result r;
    double t0 = rf_now();
    if (rf_tune_stream_panels(m, a->rounds, &r)) {
        rf_print_error();
        return 1;
    }
    print_sides(a, rf_now() - t0, "one stream panel per tile against the kernels' own counts", "one", "own", r.points,
                r.n_points, r.max_logit_diff);
    rf_tune_choices set = rf_tune_choices_none();
    set.stream_panels = r.panels;
    if (save(a, &set, "applied at model load")) return 1;
    if (!rf_env_stream_panels()) rf_matmul_set_stream_panels(r.panels);
    printf("REFUSION_STREAM_PANELS=%d\n", r.panels);
    return 0;
}

/* the adaptive rolling slot's call costs under the settings chosen above
 * (model/tune.h): printed, saved unless no_save; every tier and weight type */
static int tune_call_cost(const rf_model *m, const tune_args *a) {
    float cost[TUNE_COST_WIDTHS];
    _Static_assert((int)TUNE_COST_WIDTHS <= (int)RF_TUNE_MAX_COST, "the cache holds the widths timed");
    int n = m->cfg.max_pos / 2 < TUNE_COST_WIDTHS ? m->cfg.max_pos / 2 : TUNE_COST_WIDTHS;
    double t0 = rf_now();
    if (n < 1 || rf_call_cost_measure_rounds(m, n, a->rounds, cost)) {
        if (n < 1) rf_set_error("tune: the model's context (%d) is too short to time calls", m->cfg.max_pos);
        rf_print_error();
        return 1;
    }
    printf("# %s, %d threads, %d rounds (%.0f s); call cost c(n) = n-token call / 1-token call (tier %s), "
           "the adaptive rolling slot's cost model, n = 1..%d:\n", a->model, omp_get_max_threads(), a->rounds,
           rf_now() - t0, rf_cpu_tier_name(), n);
    for (int i = 0; i < n; i++) printf("%s%.2f", i ? " " : "", cost[i]);
    printf("\n");
    rf_tune_choices set = rf_tune_choices_none();
    set.cost_key = rf_call_cost_key(m, omp_get_max_threads()), set.n_cost = n;
    memcpy(set.cost, cost, (size_t)n * sizeof *cost);
    return save(a, &set, "for this model's shapes and weight types, this tier and thread count");
}

int cmd_tune(int argc, char **argv) {
    tune_args a = {.rounds = 8};
    const rf_opt_group groups[] = {{NULL, tune_opts, (int)(sizeof tune_opts / sizeof tune_opts[0]), &a, NULL, NULL}};
    int prc = rf_args_parse("tune", "-m MODEL [--rounds N] [-t N] [--no-save]\n"
                            "Measure, on this machine and the model's own weights: at the amx tier, from how\n"
                            "many tokens a forward call is faster on the AMX tiles than on the avx512\n"
                            "kernels (printed as the REFUSION_AMX_BF16 / REFUSION_AMX_INT8 setting); at\n"
                            "avx512 and up with bf16 weights, which packed bf16 kernel is faster (vdpbf16ps\n"
                            "or widened FMAs), printed as REFUSION_BF16P; with packed weights (bf16,\n"
                            "Q8_0, Q4_0, K-quants) up to how many tokens a call streams faster with its\n"
                            "prefetches into L2 than into L1, printed as REFUSION_PREFETCH_L2, and whether\n"
                            "its few-token tiles stream faster one weight panel at a time, printed as\n"
                            "REFUSION_STREAM_PANELS; and, under\n"
                            "those choices, what a call of n tokens costs against one of 1 token (n = 1..32):\n"
                            "the adaptive rolling slot's cost model (--draft-policy adaptive), kept per model\n"
                            "shape, weight types, tier and thread count. All are saved to the tune cache\n"
                            "($XDG_CACHE_HOME/refusion, per CPU model and build) that model loads and the\n"
                            "adaptive rolling slot apply.",
                            groups, 1, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    if (!a.model) {
        fprintf(stderr, "refusion: tune: -m MODEL is required (see --help)\n");
        return 2;
    }
    if (a.threads > 0) omp_set_num_threads(a.threads);
    rf_tune_cache_disable(); /* measured from the built-in settings, not the last choice */
    rf_model m; /* loaded first: a bad model is an error on every tier */
    if (rf_model_load(&m, a.model)) {
        rf_print_error();
        return 1;
    }
    const rf_mat *q = &m.layers[0].q;
    const int bf16p = rf_cpu_tier_active() >= RF_CPU_AVX512 && q->dtype == RF_BF16 && q->packed;
    if (rf_cpu_tier_active() != RF_CPU_AMX) {
        int rc = 0;
        if (bf16p) rc = tune_bf16p(&m, &a);
        if (!rc && q->packed) rc = tune_prefetch(&m, &a);
        else if (!rc)
            printf("tier %s: no kernel setting to tune (the tile settings apply at the amx tier, the packed bf16 "
                   "kernels to bf16 weights at avx512 and up, the prefetch level and stream panels to packed "
                   "weights)\n",
                   rf_cpu_tier_name());
        if (!rc && q->packed) rc = tune_stream_panels(&m, &a);
        if (!rc) rc = tune_call_cost(&m, &a);
        rf_model_free(&m);
        return rc;
    }
    rf_tune_result r;
    double t0 = rf_now();
    int rc = rf_tune_amx(&m, a.rounds, &r);
    if (rc) {
        rf_print_error();
        rf_model_free(&m);
        return 1;
    }
    const char *var = r.int8 ? "REFUSION_AMX_INT8" : "REFUSION_AMX_BF16";
    printf("# %s, %d threads, %d rounds per width (%.0f s); the %s tiles against %s\n", a.model, omp_get_max_threads(),
           a.rounds, rf_now() - t0, r.int8 ? "int8" : "bf16", r.int8 ? "vpdpbusd" : "the avx512 kernel");
    printf("%7s %10s %10s %26s\n", "tokens", "tiles ms", "other ms", "tiles / other [95%]");
    for (int i = 0; i < r.n_points; i++) {
        const rf_tune_point *p = &r.points[i];
        printf("%7d %10.2f %10.2f %10.3f [%.3f, %.3f]%s\n", p->width, p->ms_tiles, p->ms_other, p->ratio, p->lo, p->hi,
               p->hi < 1 ? "  tiles" : "");
    }
    rf_tune_choices set = rf_tune_choices_none();
    *(r.int8 ? &set.amx_int8 : &set.amx_bf16) = r.min_tokens;
    if (save(&a, &set, "applied at model load")) {
        rf_model_free(&m);
        return 1;
    }
    if (!(r.int8 ? rf_env_amx_int8() : rf_env_amx_bf16())) /* as the next load runs (the call costs) */
        (r.int8 ? rf_matmul_set_amx_int8 : rf_matmul_set_amx_bf16)(r.min_tokens);
    if (r.min_tokens) printf("%s=%d\n", var, r.min_tokens);
    else printf("%s=off\n", var);
    rc = bf16p ? tune_bf16p(&m, &a) : 0;
    if (!rc && q->packed) rc = tune_prefetch(&m, &a);
    if (!rc && q->packed) rc = tune_stream_panels(&m, &a);
    if (!rc) rc = tune_call_cost(&m, &a);
    rf_model_free(&m);
    return rc;
}
