/* model_tune.c - rf_tune_crossover (model/tune.h): the tiles are kept from
 * the smallest width from which they won (the ratio's whole interval below
 * 1) at every wider width measured; off when they did not win at the widest. rf_tune_amx's refusals of what it
 * cannot measure. (The measurement itself: tests/cli_tune.sh.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>
#include <unistd.h>
#include "formats/blocks.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "model/tune.h"
#include "util/util.h"
#include "check.h"

/* points whose interval is ratio +- 0.02 */
static int crossover(const int *w, const double *ratio, int n) {
    rf_tune_point p[RF_TUNE_MAX_WIDTHS];
    memset(p, 0, sizeof p);
    for (int i = 0; i < n; i++) p[i].width = w[i], p[i].ratio = ratio[i], p[i].lo = ratio[i] - 0.02, p[i].hi = ratio[i] + 0.02;
    return rf_tune_crossover(p, n);
}

static int write_choices(int bf16p_kernel, int prefetch_l2) {
    rf_tune_choices set = rf_tune_choices_none();
    set.bf16p_kernel = bf16p_kernel, set.prefetch_l2 = prefetch_l2;
    return rf_tune_cache_write(&set);
}

static int write_table(uint64_t key, int n, const float *cost) {
    rf_tune_choices set = rf_tune_choices_none();
    set.cost_key = key, set.n_cost = n;
    memcpy(set.cost, cost, (size_t)(n < RF_TUNE_MAX_COST ? n : RF_TUNE_MAX_COST) * sizeof *cost);
    return rf_tune_cache_write(&set);
}

/* the stream panels: every cap runs (the capped calls counted) and gives
 * the bits of the kernels' own counts, packed Q8_0, Q4_0 and bf16 (both
 * packed bf16 kernels at avx512), 1..9 tokens, at every tier the CPU has;
 * 200 rows, so that a thread's range holds more panels than any tile */
static void stream_panels_same_bits(void) {
    enum { R = 200, C = 64, NMAX = 9 };
    static float wf[R * C], X[NMAX * C], Y[4][NMAX * R];
    static uint16_t wb[R * C];
    /* values whose sums round (products of small dyadic numbers would add exactly in any order) */
    for (int i = 0; i < R * C; i++) wf[i] = sinf(0.37f * (float)i), wb[i] = rf_f32_to_bf16(wf[i]);
    for (int i = 0; i < NMAX * C; i++) X[i] = cosf(0.61f * (float)i) * 1.7f;
    void *w8 = malloc(rf_dtype_row_bytes(RF_Q8_0, C) * R), *w4 = malloc(rf_dtype_row_bytes(RF_Q4_0, C) * R);
    rf_quantize_row_q8_0(wf, w8, (int64_t)R * C);
    rf_quantize_row_q4_0(wf, w4, (int64_t)R * C);
    rf_mat mats[3] = {{RF_Q8_0, w8, R, C, NULL}, {RF_Q4_0, w4, R, C, NULL}, {RF_BF16, wb, R, C, NULL}};
    void *pk[3];
    for (int mi = 0; mi < 3; mi++) {
        pk[mi] = aligned_alloc(64, (rf_mat_pack_bytes(&mats[mi]) + 63) / 64 * 64);
        rf_mat_pack(&mats[mi], pk[mi]);
    }
    const int caps[4] = {0, 1, 2, 4};
    for (int tier = RF_CPU_AVX2; tier <= RF_CPU_AVX512; tier++) {
        if (tier > (int)rf_cpu_tier_detected()) {
            printf("SKIPPED: %s (cpu lacks it): the stream panels' bits\n", rf_cpu_tier_str((rf_cpu_tier)tier));
            continue;
        }
        rf_cpu_set_tier((rf_cpu_tier)tier);
        for (int mi = 0; mi < 3; mi++)
            for (int kk = 0; kk < (mi == 2 && tier >= RF_CPU_AVX512 ? 2 : 1); kk++) {
                rf_matmul_set_bf16p_kernel(kk);
                for (int n = 1; n <= NMAX; n++)
                    for (int ci = 0; ci < 4; ci++) {
                        rf_matmul_set_stream_panels(caps[ci]);
                        unsigned long before = rf_matmul_stream_panels_calls();
                        rf_matmul(Y[ci], X, &mats[mi], n);
                        CHECK(rf_matmul_stream_panels_calls() == before + (caps[ci] != 0), "cap %d took (%s, n %d)",
                              caps[ci], rf_dtype_name(mats[mi].dtype), n);
                        CHECK(!memcmp(Y[ci], Y[0], sizeof(float) * (size_t)n * R),
                              "%s %s kernel %d n %d: cap %d differs from the kernels' own counts",
                              rf_cpu_tier_str((rf_cpu_tier)tier), rf_dtype_name(mats[mi].dtype), kk, n, caps[ci]);
                    }
            }
    }
    rf_cpu_set_tier(rf_cpu_tier_detected());
    rf_matmul_set_stream_panels(-1), rf_matmul_set_bf16p_kernel(-1);
    for (int mi = 0; mi < 3; mi++) free(pk[mi]);
    free(w8), free(w4);
}

/* the AMX crossovers: written beside the other choices, applied at load
 * (at any tier: they take effect at amx), the environment over them */
static void amx_choices(const char *path) {
    char warn[4400];
    rf_tune_choices set = rf_tune_choices_none(), c = {.cost_key = 0};
    set.amx_int8 = 9;
    CHECK(rf_tune_cache_write(&set) == 0, "write: %s", rf_last_error());
    set = rf_tune_choices_none(), set.amx_bf16 = 0;
    CHECK(rf_tune_cache_write(&set) == 0, "write: %s", rf_last_error());
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 1 && c.amx_int8 == 9 && c.amx_bf16 == 0 &&
              c.bf16p_kernel == RF_BF16P_DP && c.prefetch_l2 == 12,
          "read back: amx %d/%d, %d %d", c.amx_bf16, c.amx_int8, c.bf16p_kernel, c.prefetch_l2);
    unsetenv("REFUSION_AMX_INT8"), unsetenv("REFUSION_AMX_BF16");
    rf_matmul_set_amx_int8(-1), rf_matmul_set_amx_bf16(-1);
    CHECK(rf_tune_cache_apply() == 1 && rf_matmul_amx_int8() == 9 && rf_matmul_amx_bf16() == 0, "applied: %d %d",
          rf_matmul_amx_int8(), rf_matmul_amx_bf16());
    setenv("REFUSION_AMX_INT8", "5", 1);
    rf_matmul_set_amx_int8(-1);
    CHECK(rf_tune_cache_apply() == 1 && rf_matmul_amx_int8() != 9, "environment over cache: %d", rf_matmul_amx_int8());
    unsetenv("REFUSION_AMX_INT8");
    rf_matmul_set_amx_int8(-1), rf_matmul_set_amx_bf16(-1);
}

/* the call-cost tables: one per key, each written beside the choices and
 * the other keys' tables without disturbing them, read back only whole */
static void call_cost_tables(const char *path) {
    const float a[4] = {1.0f, 1.05f, 1.2f, 1.5f}, a2[4] = {1.0f, 1.5f, 2.0f, 2.5f}, b[3] = {1.0f, 2.0f, 3.0f};
    const uint64_t ka = 0x1234567890abcdefull, kb = 0x77ull;
    float got[RF_TUNE_MAX_COST];
    char warn[4400];
    CHECK(write_table(ka, 4, a) == 0 && write_table(kb, 3, b) == 0, "write: %s", rf_last_error());
    CHECK(rf_tune_cache_call_cost(ka, got) == 4 && !memcmp(got, a, sizeof a), "key a: %g %g %g %g", got[0], got[1],
          got[2], got[3]);
    CHECK(rf_tune_cache_call_cost(kb, got) == 3 && got[2] == 3.0f, "key b");
    CHECK(rf_tune_cache_call_cost(0x99ull, got) == 0, "an unknown key");
    /* rewriting a key replaces its table; the choices and the other table stay */
    CHECK(write_table(ka, 4, a2) == 0, "rewrite: %s", rf_last_error());
    CHECK(rf_tune_cache_call_cost(ka, got) == 4 && got[3] == 2.5f, "key a rewritten: %g", got[3]);
    CHECK(rf_tune_cache_call_cost(kb, got) == 3, "key b kept");
    rf_tune_choices c = {.cost_key = ka};
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 1 && c.bf16p_kernel == RF_BF16P_DP && c.prefetch_l2 == 12 &&
          c.n_cost == 4, "choices kept: %d %d %d", c.bf16p_kernel, c.prefetch_l2, c.n_cost);
    FILE *f = fopen(path, "r");
    int lines = 0;
    for (char line[1024]; f && fgets(line, sizeof line, f);) lines += !strncmp(line, "call-cost: ", 11);
    if (f) fclose(f);
    CHECK(lines == 2, "%d call-cost lines, want 2 (one per key)", lines);
    const float bad[2] = {1.0f, NAN};
    float many[RF_TUNE_MAX_COST + 1];
    for (int i = 0; i <= RF_TUNE_MAX_COST; i++) many[i] = 1.0f + 0.1f * (float)i;
    CHECK(write_table(ka, RF_TUNE_MAX_COST + 1, many) == -1 && write_table(ka, 2, bad) == -1 && write_table(0, 2, a) == -1,
          "a table of too many widths, a NaN cost, no key: refused");
    setenv("REFUSION_TUNE", "off", 1);
    CHECK(rf_tune_cache_call_cost(ka, got) == 0, "REFUSION_TUNE=off: no table");
    unsetenv("REFUSION_TUNE");
    /* malformed tables make the file corrupt */
    static const char *const malformed[] = {"zz 2 1 1", "0123 3 1.0 1.1", "0123 2 1.0 nan", "0123 0", "0123 2 1.0 1.1 x"};
    for (int i = 0; i < (int)(sizeof malformed / sizeof *malformed); i++) {
        f = fopen(path, "w");
        fprintf(f, "refusion tune cache 1\ncpu: %s\nbuild: %s\ncall-cost: %s\n", rf_tune_cpu_model(),
                rf_tune_build_id(), malformed[i]);
        fclose(f);
        CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == -1 && strstr(warn, "corrupt") && c.n_cost == 0,
              "'%s': %s", malformed[i], warn);
        CHECK(rf_tune_cache_call_cost(0x123ull, got) == 0, "'%s' gave a table", malformed[i]);
    }
    /* a file of call costs alone is valid; the choices are written beside it */
    remove(path);
    CHECK(write_table(kb, 3, b) == 0 && rf_tune_cache_call_cost(kb, got) == 3, "costs alone");
    CHECK(write_choices(RF_BF16P_DP, 12) == 0 && rf_tune_cache_call_cost(kb, got) == 3, "choices beside");
}

int main(void) {
    const int w[] = {4, 5, 6, 8, 9, 10, 12, 16};
    const double all_win[] = {0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9};
    const double from9[] = {1.2, 1.1, 1.0, 1.3, 0.95, 0.9, 0.8, 0.7};
    const double dip[] = {0.8, 1.1, 0.9, 1.05, 0.9, 0.9, 0.8, 0.7}; /* a win at 4 and 6 does not count: 8 lost */
    const double lose_widest[] = {0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 1.01};
    const double tie[] = {1.2, 1.1, 1.0, 1.3, 0.99, 0.9, 0.8, 0.7}; /* 0.99 [0.97, 1.01] is a tie, not a win */
    CHECK(crossover(w, all_win, 8) == 4, "all won: %d, want 4", crossover(w, all_win, 8));
    CHECK(crossover(w, from9, 8) == 9, "won from 9: %d", crossover(w, from9, 8));
    CHECK(crossover(w, dip, 8) == 9, "won at 4 and 6, lost at 8, won from 9: %d, want 9", crossover(w, dip, 8));
    CHECK(crossover(w, lose_widest, 8) == 0, "lost at the widest: %d, want 0 (off)", crossover(w, lose_widest, 8));
    CHECK(crossover(w, tie, 8) == 10, "a tie at 9: %d, want 10", crossover(w, tie, 8));
    CHECK(crossover(w, all_win, 0) == 0, "no widths: %d, want 0", crossover(w, all_win, 0));

    /* what it cannot measure is refused with a reason, not measured */
    rf_model m;
    memset(&m, 0, sizeof m);
    rf_layer L;
    memset(&L, 0, sizeof L);
    L.q.dtype = RF_F32;
    m.layers = &L;
    m.cfg.n_layers = 1;
    rf_tune_result r;
    CHECK(rf_tune_amx(&m, 2, &r) == -1 && strstr(rf_last_error(), "rounds"), "2 rounds: %s", rf_last_error());
    if (rf_cpu_tier_active() == RF_CPU_AMX) {
        CHECK(rf_tune_amx(&m, 3, &r) == -1 && strstr(rf_last_error(), "F32"), "f32 weights: %s", rf_last_error());
        L.q.dtype = RF_Q8_0; /* without a packed copy */
        CHECK(rf_tune_amx(&m, 3, &r) == -1 && strstr(rf_last_error(), "packed"), "unpacked Q8_0: %s", rf_last_error());
    } else {
        CHECK(rf_tune_amx(&m, 3, &r) == -1 && strstr(rf_last_error(), "amx tier only"), "tier %s: %s",
              rf_cpu_tier_name(), rf_last_error());
        printf("SKIPPED: amx (cpu lacks it): the dtype refusals\n");
    }
    /* the packed bf16 kernel's choice: dp only when it won at the widest and lost nowhere */
    const int bw[] = {1, 4, 8, 12, 16};
    const double dp_wins[] = {1.0, 0.9, 0.8, 0.7, 0.7}, dp_loses_1[] = {1.1, 0.9, 0.8, 0.7, 0.7}, tie16[] = {1, 0.9, 0.9, 0.9, 0.99};
    rf_tune_point bp[5];
    const double *cases[3] = {dp_wins, dp_loses_1, tie16};
    const int want[3] = {RF_BF16P_DP, RF_BF16P_FMA, RF_BF16P_FMA};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < 5; i++) bp[i] = (rf_tune_point){bw[i], cases[c][i], cases[c][i] - 0.02, cases[c][i] + 0.02, 0, 0};
        CHECK(rf_tune_bf16p_choice(bp, 5) == want[c], "bf16p choice case %d: %d", c, rf_tune_bf16p_choice(bp, 5));
    }

    /* the prefetch level: L2 up to the widest width where it was not slower, when it won at the narrowest */
    const double l2_wins[] = {0.8, 0.85, 0.99, 0.95, 0.97}, l2_ties_1[] = {0.99, 0.8, 0.8, 0.8, 0.8},
                 l2_loses_12[] = {0.8, 0.85, 0.9, 1.09, 0.95}, l2_worse_8[] = {0.8, 0.9, 1.01, 0.9, 0.9};
    const double *pcases[4] = {l2_wins, l2_ties_1, l2_loses_12, l2_worse_8};
    const int pwant[4] = {16, 0, 8, 4};
    for (int c = 0; c < 4; c++) {
        for (int i = 0; i < 5; i++) bp[i] = (rf_tune_point){bw[i], pcases[c][i], pcases[c][i] - 0.02, pcases[c][i] + 0.02, 0, 0};
        CHECK(rf_tune_prefetch_choice(bp, 5) == pwant[c], "prefetch choice case %d: %d, want %d", c,
              rf_tune_prefetch_choice(bp, 5), pwant[c]);
    }
    /* either level runs (the L2 calls counted) and gives the same bits, packed Q8_0 and bf16, 1..9 tokens */
    {
        enum { R = 48, C = 64 };
        float wf[R * C], X[9 * C], Y[2][9 * R];
        for (int i = 0; i < R * C; i++) wf[i] = (float)((i * 7919) % 23 - 11) * 0.05f;
        for (int i = 0; i < 9 * C; i++) X[i] = (float)((i * 104729) % 17 - 8) * 0.125f;
        uint16_t wb[R * C];
        for (int i = 0; i < R * C; i++) wb[i] = rf_f32_to_bf16(wf[i]);
        void *wq = malloc(rf_dtype_row_bytes(RF_Q8_0, C) * R);
        rf_quantize_row_q8_0(wf, wq, (int64_t)R * C);
        rf_mat mats[2] = {{RF_Q8_0, wq, R, C, NULL}, {RF_BF16, wb, R, C, NULL}};
        for (int mi = 0; mi < 2; mi++) {
            void *pk = aligned_alloc(64, (rf_mat_pack_bytes(&mats[mi]) + 63) / 64 * 64);
            rf_mat_pack(&mats[mi], pk);
            for (int n = 1; n <= 9; n++) {
                for (int lv = 0; lv < 2; lv++) {
                    rf_matmul_set_prefetch_l2(lv ? 1 << 20 : 0);
                    unsigned long before = rf_matmul_prefetch_l2_calls();
                    rf_matmul(Y[lv], X, &mats[mi], n);
                    CHECK(rf_matmul_prefetch_l2_calls() == before + (unsigned long)lv, "level %d took (%s, n %d)", lv,
                          rf_dtype_name(mats[mi].dtype), n);
                }
                CHECK(!memcmp(Y[0], Y[1], sizeof(float) * (size_t)n * R), "L1 and L2 differ: %s, n %d",
                      rf_dtype_name(mats[mi].dtype), n);
            }
            free(pk);
        }
        free(wq);
        rf_matmul_set_prefetch_l2(-1);
    }

    /* the stream panels: one panel when it won at the narrowest width and lost clearly at none */
    const double sp_wins[] = {0.7, 0.9, 1.01, 1.0, 0.99}, sp_ties_1[] = {0.99, 0.8, 0.8, 0.8, 0.8},
                 sp_loses_16[] = {0.7, 0.9, 1.0, 1.0, 1.05};
    const double *scases[3] = {sp_wins, sp_ties_1, sp_loses_16};
    const int swant[3] = {1, 0, 0};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < 5; i++) bp[i] = (rf_tune_point){bw[i], scases[c][i], scases[c][i] - 0.02, scases[c][i] + 0.02, 0, 0};
        CHECK(rf_tune_stream_panels_choice(bp, 5) == swant[c], "stream panels choice case %d: %d, want %d", c,
              rf_tune_stream_panels_choice(bp, 5), swant[c]);
    }
    stream_panels_same_bits();

    /* the cache: a good file applies (and the forced kernel is the one that runs), a corrupt or stale one is ignored */
    char dir[] = "/tmp/model_tune_XXXXXX", path[4096], warn[4400];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("REFUSION_BF16P"), unsetenv("REFUSION_TUNE");
    CHECK(rf_tune_cache_path(path, sizeof path) == 0 && strstr(path, dir) == path, "cache path %s", path);
    rf_tune_choices c = {.cost_key = 0};
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 0, "no file: nothing");
    CHECK(write_choices(RF_BF16P_DP, -1) == 0, "write: %s", rf_last_error());
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 1 && c.bf16p_kernel == RF_BF16P_DP && c.prefetch_l2 == -1,
          "read back: %d %d", c.bf16p_kernel, c.prefetch_l2);
    /* the other choice written later keeps the first */
    CHECK(write_choices(-1, 12) == 0, "write: %s", rf_last_error());
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 1 && c.bf16p_kernel == RF_BF16P_DP && c.prefetch_l2 == 12,
          "read back: %d %d", c.bf16p_kernel, c.prefetch_l2);
    call_cost_tables(path);
    amx_choices(path);
    unsetenv("REFUSION_PREFETCH_L2");
    rf_matmul_set_prefetch_l2(0);
    CHECK(rf_tune_cache_apply() == 1 && rf_matmul_prefetch_l2() == 12, "prefetch applied: %d", rf_matmul_prefetch_l2());
    setenv("REFUSION_PREFETCH_L2", "off", 1); /* the environment wins */
    rf_matmul_set_prefetch_l2(-1);
    CHECK(rf_tune_cache_apply() == 1 && rf_matmul_prefetch_l2() == 0, "environment over cache: %d", rf_matmul_prefetch_l2());
    unsetenv("REFUSION_PREFETCH_L2");
    {   /* the stream panels beside the others, applied, the environment over them */
        rf_tune_choices set = rf_tune_choices_none();
        set.stream_panels = 2;
        CHECK(rf_tune_cache_write(&set) == 0, "write: %s", rf_last_error());
        CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == 1 && c.stream_panels == 2 && c.prefetch_l2 == 12,
              "read back: %d %d", c.stream_panels, c.prefetch_l2);
        unsetenv("REFUSION_STREAM_PANELS");
        rf_matmul_set_stream_panels(0);
        CHECK(rf_tune_cache_apply() == 1 && rf_matmul_stream_panels() == 2, "stream panels applied: %d",
              rf_matmul_stream_panels());
        setenv("REFUSION_STREAM_PANELS", "4", 1);
        rf_matmul_set_stream_panels(-1);
        CHECK(rf_tune_cache_apply() == 1 && rf_matmul_stream_panels() == 4, "environment over cache: %d",
              rf_matmul_stream_panels());
        unsetenv("REFUSION_STREAM_PANELS");
        rf_matmul_set_stream_panels(-1);
    }
    rf_matmul_set_bf16p_kernel(RF_BF16P_FMA);
    CHECK(rf_tune_cache_apply() == 1 && rf_matmul_bf16p_kernel() == RF_BF16P_DP, "applied: %s", rf_tune_cache_state());
    if (rf_cpu_tier_active() >= RF_CPU_AVX512) {
        uint16_t w[32 * 32];
        for (int i = 0; i < 32 * 32; i++) w[i] = rf_f32_to_bf16((float)(i % 7) - 3);
        rf_mat W = {RF_BF16, w, 32, 32, NULL};
        void *pk = aligned_alloc(64, (rf_mat_pack_bytes(&W) + 63) / 64 * 64);
        rf_mat_pack(&W, pk);
        float X[2 * 32], Y[2][2 * 32];
        for (int i = 0; i < 64; i++) X[i] = (float)(i % 5) * 0.25f;
        for (int kk = 0; kk < 2; kk++) {
            rf_matmul_set_bf16p_kernel(kk);
            unsigned long before = rf_matmul_bf16p_calls(kk), other = rf_matmul_bf16p_calls(!kk);
            rf_matmul(Y[kk], X, &W, 2);
            CHECK(rf_matmul_bf16p_calls(kk) == before + 1 && rf_matmul_bf16p_calls(!kk) == other, "kernel %d ran", kk);
        }
        for (int i = 0; i < 64; i++) CHECK(fabsf(Y[0][i] - Y[1][i]) <= 1e-5f * (1 + fabsf(Y[0][i])), "y[%d] %g vs %g", i, Y[0][i], Y[1][i]);
        free(pk);
    } else {
        printf("SKIPPED: avx512 (cpu lacks it): which packed bf16 kernel runs\n");
    }
    FILE *f = fopen(path, "w");
    fputs("refusion tune cache 1\ncpu: x\nbf16p: maybe\n", f);
    fclose(f);
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == -1 && strstr(warn, "corrupt"), "corrupt: %s", warn);
    f = fopen(path, "w");
    fprintf(f, "refusion tune cache 1\ncpu: %s\nbuild: %s\nprefetch-l2: -3\n", rf_tune_cpu_model(), rf_tune_build_id());
    fclose(f);
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == -1 && strstr(warn, "corrupt"), "corrupt prefetch: %s", warn);
    f = fopen(path, "w");
    fprintf(f, "refusion tune cache 1\ncpu: %s\nbuild: %s\nstream-panels: 3\n", rf_tune_cpu_model(), rf_tune_build_id());
    fclose(f);
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == -1 && strstr(warn, "corrupt"), "corrupt stream panels: %s", warn);
    f = fopen(path, "w");
    fprintf(f, "refusion tune cache 1\ncpu: %s\nbuild: an older one\nbf16p: dp\n", rf_tune_cpu_model());
    fclose(f);
    CHECK(rf_tune_cache_read(path, &c, warn, sizeof warn) == -1 && strstr(warn, "stale"), "stale: %s", warn);
    rf_matmul_set_bf16p_kernel(RF_BF16P_FMA);
    CHECK(rf_tune_cache_apply() == -1 && rf_matmul_bf16p_kernel() == RF_BF16P_FMA, "stale applied: %s", rf_tune_cache_state());
    setenv("REFUSION_TUNE", "off", 1);
    CHECK(rf_tune_cache_apply() == 0 && !strcmp(rf_tune_cache_state(), "off"), "REFUSION_TUNE=off: %s", rf_tune_cache_state());
    remove(path);
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/refusion", dir);
    rmdir(sub), rmdir(dir);
    return check_summary("model_tune");
}
