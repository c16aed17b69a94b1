/* kernels_ops.c - the per-token kernels against direct double-precision
 * formulas: rmsnorm, rope (random and large positions, out of order),
 * silu*mul, softmax, add, dot, attention scores and mix. Tolerances are relative to the largest
 * reference magnitude and stated at each CHECK. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "util/util.h"
#include "check.h"

static float *randv(rf_rng *g, size_t n, float scale) {
    float *v = malloc(sizeof(float) * (n + 1));
    for (size_t i = 0; i < n; i++) v[i] = scale * rf_rng_normal(g);
    return v;
}

static void test_rmsnorm(rf_rng *g) {
    const int dims[] = {1, 7, 8, 33, 128, 1024, 1027};
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++) {
        int n = 3, dim = dims[k];
        float *x = randv(g, (size_t)n * dim, 3.0f), *w = randv(g, dim, 1.0f);
        float *y = malloc(sizeof(float) * n * dim), *r = malloc(sizeof(float) * n * dim);
        float eps = 1e-6f;
        for (int i = 0; i < n; i++) {
            double ss = 0;
            for (int j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
            double inv = 1.0 / sqrt(ss / dim + eps);
            for (int j = 0; j < dim; j++) r[i * dim + j] = (float)(w[j] * x[i * dim + j] * inv);
        }
        rf_rmsnorm(y, x, w, n, dim, eps);
        double e = check_rel_err(y, r, (size_t)n * dim);
        CHECK(e < 1e-6, "rmsnorm dim=%d: rel err %.3g (tol 1e-6)", dim, e);
        /* in place (out == x) is allowed: the forward pass normalises in place */
        rf_rmsnorm(x, x, w, n, dim, eps);
        e = check_rel_err(x, r, (size_t)n * dim);
        CHECK(e < 1e-6, "rmsnorm in place dim=%d: rel err %.3g", dim, e);
        free(x); free(w); free(y); free(r);
    }
}

static void test_rope(rf_rng *g) {
    const int hds[] = {2, 8, 64, 128};
    const float thetas[] = {10000.0f, 1000000.0f};
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (size_t b = 0; b < 2; b++) {
            int hd = hds[a], nh = 3, n = 9, half = hd / 2;
            float theta = thetas[b];
            /* out of order and large positions; 0 must be the identity */
            int pos[9] = {5, 0, 30000, 17, 4095, 1, 32767, 2, 12345};
            float *x = randv(g, (size_t)n * nh * hd, 1.0f);
            float *r = malloc(sizeof(float) * n * nh * hd);
            for (int i = 0; i < n; i++)
                for (int h = 0; h < nh; h++)
                    for (int j = 0; j < half; j++) {
                        const float *v = x + ((size_t)i * nh + h) * hd;
                        double ang = pos[i] * pow((double)theta, -2.0 * j / hd);
                        double x1 = v[j], x2 = v[j + half];
                        r[((size_t)i * nh + h) * hd + j] = (float)(x1 * cos(ang) - x2 * sin(ang));
                        r[((size_t)i * nh + h) * hd + j + half] = (float)(x2 * cos(ang) + x1 * sin(ang));
                    }
            /* second reference with torch's f32 rounding of the angle:
             * inv_freq = 1 / theta^(f32(2j) / f32(hd)) in f32, angle =
             * f32(pos) * inv_freq in f32, then cos/sin in double: this
             * must match to ~f32 rounding at every position. */
            float *rt = malloc(sizeof(float) * n * nh * hd);
            for (int i = 0; i < n; i++)
                for (int h = 0; h < nh; h++)
                    for (int j = 0; j < half; j++) {
                        size_t o = ((size_t)i * nh + h) * hd;
                        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)hd);
                        double ang = (float)pos[i] * inv;
                        double x1 = x[o + j], x2 = x[o + j + half];
                        rt[o + j] = (float)(x1 * cos(ang) - x2 * sin(ang));
                        rt[o + j + half] = (float)(x2 * cos(ang) + x1 * sin(ang));
                    }
            float *x0 = malloc(sizeof(float) * nh * hd);
            for (int k = 0; k < nh * hd; k++) x0[k] = x[nh * hd + k]; /* token 1, pos 0 */
            rf_rope(x, pos, n, nh, hd, theta);
            /* The angle is pos * inv_freq with inv_freq rounded to f32 (as torch
             * does); at pos 32767 that rounding moves the angle by up to
             * 32767 * 2^-24 ~ 2e-3 rad, so the tolerance scales with the
             * position: 1e-5 + |pos| * 1.2e-7 relative. */
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * nh * hd;
                double e = check_rel_err(x + off, r + off, (size_t)nh * hd);
                double tol = 1e-5 + pos[i] * 1.2e-7;
                CHECK(e < tol, "rope hd=%d theta=%g pos=%d: rel err %.3g (tol %.3g)", hd, theta, pos[i], e, tol);
                e = check_rel_err(x + off, rt + off, (size_t)nh * hd);
                CHECK(e < 1e-6, "rope hd=%d theta=%g pos=%d vs f32-angle reference: rel err %.3g (tol 1e-6)", hd,
                      theta, pos[i], e);
            }
            int same = 1;
            for (int k = 0; k < nh * hd; k++) same &= x0[k] == x[nh * hd + k];
            CHECK(same, "rope at position 0 is the identity (hd=%d)", hd);
            free(x); free(r); free(rt); free(x0);
        }
}

static void test_silu_softmax_add_dot(rf_rng *g) {
    const int ns[] = {1, 7, 8, 9, 100, 3000};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int n = ns[k];
        float *gt = randv(g, n, 4.0f), *u = randv(g, n, 1.0f), *r = malloc(sizeof(float) * n);
        if (n > 2) { gt[0] = -90.0f; gt[1] = 90.0f; } /* saturated ends */
        for (int i = 0; i < n; i++) r[i] = (float)(gt[i] / (1.0 + exp(-(double)gt[i])) * u[i]);
        rf_silu_mul(gt, u, n);
        /* elementwise: each output within 2e-6 of its own magnitude (+ tiny) */
        int ok = 1;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double e = fabs(gt[i] - r[i]) / (fabs(r[i]) + 1e-30);
            if (fabs(gt[i] - r[i]) > 2e-6 * fabs(r[i]) + 1e-37) ok = 0;
            if (e > worst) worst = e;
        }
        CHECK(ok, "silu_mul n=%d: elementwise rel err %.3g (tol 2e-6)", n, worst);

        /* logits of spread 3 (a flat-ish distribution, so every element
         * matters), shifted by +100: exp would overflow without the max
         * subtraction */
        float *x = randv(g, n, 3.0f), *sr = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) x[i] += 100.0f;
        double m = -INFINITY, s = 0;
        for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
        for (int i = 0; i < n; i++) s += exp(x[i] - m);
        for (int i = 0; i < n; i++) sr[i] = (float)(exp(x[i] - m) / s);
        rf_softmax(x, n);
        /* elementwise relative: exp and the sum are each good to ~1e-7 */
        double e = 0;
        for (int i = 0; i < n; i++) {
            double d = fabs(x[i] - sr[i]) / sr[i];
            e = d > e || d != d ? d : e;
        }
        CHECK(e < 2e-6, "softmax n=%d: elementwise rel err %.3g (tol 2e-6)", n, e);
        double tot = 0;
        for (int i = 0; i < n; i++) tot += x[i];
        CHECK(fabs(tot - 1) < 1e-5, "softmax n=%d sums to %.8f", n, tot);

        float *a = randv(g, n, 1.0f), *b = randv(g, n, 1.0f), *ar = malloc(sizeof(float) * n);
        double dr = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            dr += (double)a[i] * b[i];
            mag += fabs((double)a[i] * b[i]);
            ar[i] = a[i] + b[i];
        }
        float d = rf_dot(a, b, n);
        CHECK(fabs(d - dr) <= 1e-6 * mag + 1e-30, "dot n=%d: %.9g vs %.9g", n, d, dr);
        rf_add(a, b, n);
        CHECK(check_rel_err(a, ar, n) == 0, "add n=%d is exact", n);
        free(gt); free(u); free(r); free(x); free(sr); free(a); free(b); free(ar);
    }
}

/* silu over a dense sweep of [-80, 80] (this exercises the vector exp over
 * its whole useful range), and NaN in -> NaN out */
static void test_silu_sweep(void) {
    int n = 160001;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) { g[i] = -80.0f + 160.0f * i / (n - 1); u[i] = 1.0f; }
    float *g0 = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) g0[i] = g[i];
    rf_silu_mul(g, u, n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double r = g0[i] / (1.0 + exp(-(double)g0[i]));
        double e = fabs(g[i] - r) / (fabs(r) + 1e-300);
        if (e > worst) worst = e;
    }
    CHECK(worst < 2e-6, "silu sweep [-80, 80]: worst elementwise rel err %.3g (tol 2e-6)", worst);
    float nan8[9], one8[9];
    for (int i = 0; i < 9; i++) { nan8[i] = i == 2 || i == 8 ? NAN : 1.0f; one8[i] = 1.0f; }
    rf_silu_mul(nan8, one8, 9);
    CHECK(isnan(nan8[2]) && isnan(nan8[8]) && !isnan(nan8[0]), "silu keeps NaN as NaN (vector and tail lanes)");
    free(g); free(u); free(g0);
}

/* attention's scores and mix against double-precision sums at every tier;
 * at avx2 the two-query forms bit for bit against two single-query calls,
 * at avx512 (its own kernels) a key's score must not depend on how many
 * keys the call has (the cached decoder's calls see fewer keys than the
 * recomputing twin's); several key counts (tails of 1-3 keys) and head
 * sizes (with and without a tail) */
static void test_attention(rf_rng *g, const char *tier, int exact2) {
    const int hds[] = {16, 64, 128, 40, 12}, ns[] = {1, 3, 4, 7, 150};
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            int hd = hds[hi], n = ns[ni], ld = 3 * hd; /* keys strided as in a KV cache */
            float *q0 = randv(g, hd, 1), *q1 = randv(g, hd, 1), *K = randv(g, (size_t)n * ld, 1);
            float *V = randv(g, (size_t)n * ld, 1), *p0 = randv(g, n, 0.1f), *p1 = randv(g, n, 0.1f);
            float *s0 = malloc(sizeof(float) * n), *s1 = malloc(sizeof(float) * n);
            float *t0 = malloc(sizeof(float) * n), *t1 = malloc(sizeof(float) * n);
            float *o0 = calloc(hd, sizeof(float)), *o1 = calloc(hd, sizeof(float));
            float *u0 = calloc(hd, sizeof(float)), *u1 = calloc(hd, sizeof(float));
            rf_scores(s0, q0, K, ld, n, hd, 0.125f);
            rf_scores(s1, q1, K, ld, n, hd, 0.125f);
            rf_scores2(t0, t1, q0, q1, K, ld, n, hd, 0.125f);
            double err = 0, mx = 1e-30;
            int same = 1;
            for (int t = 0; t < n; t++) {
                double ref = 0;
                for (int i = 0; i < hd; i++) ref += (double)q0[i] * K[(size_t)t * ld + i];
                err = fmax(err, fabs(0.125 * ref - s0[t]));
                mx = fmax(mx, fabs(0.125 * ref));
                same &= s0[t] == t0[t] && s1[t] == t1[t];
            }
            CHECK(err <= 1e-5 * mx, "%s rf_scores hd=%d n=%d: err %.3g of %.3g", tier, hd, n, err, mx);
            double err2 = 0;
            for (int t = 0; t < n; t++) {
                double ref = 0;
                for (int i = 0; i < hd; i++) ref += (double)q1[i] * K[(size_t)t * ld + i];
                err2 = fmax(err2, fabs(0.125 * ref - t1[t]));
            }
            CHECK(err2 <= 1e-5 * mx * 4, "%s rf_scores2 hd=%d n=%d: err %.3g", tier, hd, n, err2);
            if (exact2) CHECK(same, "%s rf_scores2 hd=%d n=%d: not bit for bit rf_scores", tier, hd, n);
            if (n > 2) { /* the first 2 keys alone: the same scores */
                float w0[2], w1[2];
                rf_scores2(w0, w1, q0, q1, K, ld, 2, hd, 0.125f);
                CHECK(w0[0] == t0[0] && w0[1] == t0[1] && w1[0] == t1[0] && w1[1] == t1[1],
                      "%s rf_scores2 hd=%d: a key's score depends on the number of keys (%d vs 2)", tier, hd, n);
            }
            rf_mix(o0, p0, V, ld, n, hd);
            rf_mix(o1, p1, V, ld, n, hd);
            rf_mix2(u0, u1, p0, p1, V, ld, n, hd);
            err = 0, mx = 1e-30, same = 1;
            for (int i = 0; i < hd; i++) {
                double ref = 0;
                for (int t = 0; t < n; t++) ref += (double)p0[t] * V[(size_t)t * ld + i];
                err = fmax(err, fabs(ref - o0[i]));
                mx = fmax(mx, fabs(ref));
                same &= o0[i] == u0[i] && o1[i] == u1[i];
            }
            CHECK(err <= 1e-5 * mx + 1e-6, "%s rf_mix hd=%d n=%d: err %.3g of %.3g", tier, hd, n, err, mx);
            CHECK(same, "%s rf_mix2 hd=%d n=%d: not bit for bit rf_mix", tier, hd, n); /* lane by lane, one FMA per key */
            free(q0), free(q1), free(K), free(V), free(p0), free(p1), free(s0), free(s1), free(t0), free(t1);
            free(o0), free(o1), free(u0), free(u1);
        }
}

/* rf_argmax against the scalar first-index-of-the-max loop: random rows of
 * every length 1..80 and a vocabulary row, with ties (values rounded to a
 * coarse grid), the max first, last, in the tail, and NaNs (never the max;
 * x[0] NaN answers 0) */
static void test_argmax(rf_rng *g) {
    int bad = 0, cases = 0;
    float *x = malloc(sizeof(float) * 151936);
    for (int trial = 0; trial < 400; trial++) {
        int n = trial < 320 ? 1 + trial % 80 : 151936 - trial % 7;
        for (int i = 0; i < n; i++) x[i] = trial % 2 ? rf_rng_normal(g) : (float)(int)(4 * rf_rng_normal(g));
        if (trial % 5 == 1) x[n - 1] = 100;
        if (trial % 5 == 2) x[0] = 100;
        if (trial % 7 == 3) x[(trial * 31) % n] = NAN;
        if (trial % 11 == 4) x[0] = NAN;
        float want_m = x[0], got_m = 0;
        int want = 0;
        for (int i = 1; i < n; i++)
            if (x[i] > want_m) want_m = x[i], want = i;
        int got = rf_argmax(x, n, &got_m);
        cases++;
        bad += got != want || !(got_m == want_m || (got_m != got_m && want_m != want_m));
    }
    CHECK(!bad, "rf_argmax: %d of %d rows differ from the scalar loop", bad, cases);
    free(x);
}

/* rf_sum_exp (a draft's confidence, a sampled token's probability) against
 * the double-precision sum, at the active tier: lengths around the vector
 * widths (tails of 1..31), a 152k vocabulary, logits far below the shift
 * (their terms underflow to 0, most of a row in the second pass), the shift
 * itself a logit (e^0 = 1 counted) */
static void test_sum_exp(rf_rng *g, const char *tier) {
    const int ns[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 100, 1000, 151936};
    int bad = 0, cases = 0;
    double worst = 0;
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int far = 0; far < 2; far++) {
            int n = ns[k];
            float *x = randv(g, n, 4.0f);
            if (far && n > 1) x[n / 2] = -200.0f; /* e^(-200 - m): 0 in float */
            if (far) /* most of a row at -1000, a grown model's unused vocabulary */
                for (int i = 1; i < n; i++)
                    if (i % 5) x[i] = -1000.0f;
            float m = x[0];
            for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
            double want = 0;
            for (int i = 0; i < n; i++) want += exp((double)x[i] - m);
            /* float lanes summed: the error grows with n (~3.5e-5 at 152k) */
            double got = rf_sum_exp(x, n, m), err = fabs(got - want) / want, tol = 1e-5 + 1e-9 * n;
            worst = err > worst ? err : worst;
            bad += !(err <= tol);
            cases++;
            free(x);
        }
    CHECK(!bad, "%s rf_sum_exp: %d of %d lengths beyond rel err 1e-5 + 1e-9 n (worst %.3g)", tier, bad, cases, worst);
}

/* at the avx512 tier rf_silu_mul runs 16 lanes at a time: the same numbers
 * as the avx2 loop, bit for bit (lengths around the vector widths, values
 * over the exp's whole range and beyond) */
static void test_silu_tiers(rf_rng *g) {
    if (rf_cpu_set_tier(RF_CPU_AVX512) != 0) {
        printf("SKIPPED: silu at avx512 against avx2 (cpu lacks avx512)\n");
        return;
    }
    const int ns[] = {1, 8, 15, 16, 17, 24, 31, 33, 3072, 3079};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int n = ns[k];
        float *x = randv(g, n, 40.0f), *u = randv(g, n, 1.0f), *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        if (n > 3) { x[0] = -100.0f; x[1] = 100.0f; x[2] = NAN; }
        memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
        rf_cpu_set_tier(RF_CPU_AVX2);
        rf_silu_mul(a, u, n);
        rf_cpu_set_tier(RF_CPU_AVX512);
        rf_silu_mul(b, u, n);
        CHECK(!memcmp(a, b, sizeof(float) * n), "silu_mul n=%d: avx512 differs from avx2", n);
        free(x), free(u), free(a), free(b);
    }
    test_silu_sweep(); /* its accuracy at avx512 too */
    rf_cpu_set_tier(rf_cpu_tier_detected());
}

int main(void) {
    rf_rng g;
    rf_rng_seed(&g, 99);
    test_rmsnorm(&g);
    test_rope(&g);
    test_silu_softmax_add_dot(&g);
    test_silu_sweep();
    test_silu_tiers(&g);
    test_argmax(&g);
    for (int t = RF_CPU_AVX2; t <= RF_CPU_AVX512; t++) {
        if (rf_cpu_set_tier((rf_cpu_tier)t) != 0) {
            printf("SKIPPED: attention and rf_sum_exp at %s (cpu lacks it)\n", rf_cpu_tier_str((rf_cpu_tier)t));
            continue;
        }
        test_attention(&g, rf_cpu_tier_str((rf_cpu_tier)t), t == RF_CPU_AVX2);
        test_sum_exp(&g, rf_cpu_tier_str((rf_cpu_tier)t));
    }
    return check_summary("kernels_ops");
}
