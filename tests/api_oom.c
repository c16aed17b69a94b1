/* api_oom.c - out of memory inside a generation (the library must not exit
 * when an allocation fails). Every allocation a generation makes through the library's
 * allocators is made to fail in turn (rf_fail_alloc_after: the 1st, the
 * 2nd, ... until a generation runs past its last one), for each decoding
 * method, through the public API:
 *  - the failed generation returns RF_ERR_NOMEM with "out of memory" as its
 *    message (not an exit, not a crash);
 *  - it gives back every scoped block it held (rf_scoped_live as before;
 *    built with ASan, LeakSanitizer and the use-after-free checks see the rest:
 *    the suite runs under both);
 *  - the same session's next generation gives the same answer as a clean
 *    run (its KV cache and run state, possibly half grown when the failure
 *    hit, are still sound);
 *  - should the kernels absorb a failure (their f16/bf16 weight-conversion
 *    buffer falls back to converting in registers), the answer is still
 *    right. The kernels' per-thread scratch is dropped before every run, so
 *    its growth is among the allocations that fail.
 * A fresh session per walk step, so that the session's own buffers are
 * grown (and fail) inside the generation too. A generation making more than
 * WALK allocations (24 for the slow no-cache decoder) has the first half of
 * them failed one by one and the other half spread evenly over the rest
 * (the later ones repeat the same sites in the decoding loop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "refusion.h"
#include "util/util.h"

#define WALK 400

typedef struct {
    const char *name;
    rf_params p;
    int n_prompt;
    int walk; /* allocations made to fail at most (WALK; fewer for the slow no-cache decoder) */
} gen_case;

static int same(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && na >= 0 && !memcmp(a, b, (size_t)na * sizeof *a);
}

int main(void) {
    char dir[] = "/tmp/rf_api_oom.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    rf_config c;
    rf_config_preset(&c, "tiny");
    c.max_pos = 256;
    CHECK(rf_model_write_random(&c, dir, RF_BF16, 0, 0.5f, 17) == 0, "write model: %s", rf_last_error());
    refusion_model *model = rf_model_open(dir);
    CHECK(model != NULL, "open: %s", rf_last_error());
    if (!model) return check_summary("api_oom");

    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (i * 29 + 3) % (c.vocab_size - 2);

    gen_case cases[8];
    int n_cases = 0;
    rf_params p = rf_params_default();
    p.gen_length = 24, p.slot_size = 4, p.n_blocks = 2, p.seed = 3;
    cases[n_cases++] = (gen_case){"refusion", p, 24, WALK};
    rf_params q = p;
    q.ar_correct = q.ar_check_first = 1, q.temperature = 0.7f, q.top_k = 20;
    cases[n_cases++] = (gen_case){"refusion ar-verify sampled", q, 24, WALK};
    q = p, q.lookahead = 1;
    cases[n_cases++] = (gen_case){"refusion lookahead", q, 24, WALK};
    q = p, q.rolling = 1;
    cases[n_cases++] = (gen_case){"rolling", q, 24, WALK};
    q = p, q.no_cache = 1, q.gen_length = 8, q.n_blocks = 1; /* slow: every call recomputes all */
    cases[n_cases++] = (gen_case){"refusion no cache", q, 4, 24};
    q = p, q.method = RF_METHOD_AR, q.temperature = 0.8f, q.top_p = 0.9f;
    cases[n_cases++] = (gen_case){"ar sampled", q, 24, WALK};
    q = p, q.method = RF_METHOD_MDM, q.mdm_steps = 8;
    cases[n_cases++] = (gen_case){"mdm", q, 24, WALK};

    long total_failed = 0, total_absorbed = 0;
    for (int k = 0; k < n_cases; k++) {
        const rf_params *cp = &cases[k].p;
        int32_t want[64], out[64];
        refusion_session *s = rf_session_new(model);
        rf_kernels_shutdown(); /* the kernels' per-thread scratch is grown inside the generation, too */
        long a0 = rf_alloc_count();
        int n_want = rf_generate(s, prompt, cases[k].n_prompt, cp, want, 64, NULL);
        long n_allocs = rf_alloc_count() - a0;
        rf_session_free(s);
        CHECK(n_want > 0, "%s: clean run: %s", cases[k].name, rf_last_error());
        if (n_want <= 0) continue;
        long live0 = rf_scoped_live();
        double t0 = rf_now();
        int steps = 0, failed = 0, absorbed = 0, bad = 0;
        const long W = cases[k].walk;
        for (long i = 1; i <= W + 1; i++) {
            long n = n_allocs <= W || i <= W / 2 ? i : W / 2 + (i - W / 2) * (n_allocs - W / 2) / (W / 2);
            if (i == W + 1) n = n_allocs + 1; /* past the end: nothing fails */
            s = rf_session_new(model);
            rf_kernels_shutdown();
            rf_fail_alloc_after(n);
            int rc = rf_generate(s, prompt, cases[k].n_prompt, cp, out, 64, NULL);
            int fired = rf_fail_alloc_fired();
            rf_fail_alloc_after(0);
            steps++;
            if (rc >= 0) { /* past the last allocation, or a failure the kernels absorbed */
                if (!same(out, rc, want, n_want)) {
                    bad++;
                    CHECK(0, "%s: allocation %ld %s: the answer differs from the clean run's", cases[k].name, n,
                          fired ? "failed and was absorbed" : "(none failed)");
                }
                absorbed += fired;
                rf_session_free(s);
                if (!fired) break;
                continue;
            }
            failed++;
            if (rc != RF_ERR_NOMEM || !strstr(rf_last_error(), "out of memory")) {
                bad++;
                CHECK(0, "%s: allocation %ld failed: status %d, '%s' (want RF_ERR_NOMEM, out of memory)",
                      cases[k].name, n, rc, rf_last_error());
            }
            long live = rf_scoped_live();
            if (live != live0) {
                bad++;
                CHECK(0, "%s: allocation %ld failed: %ld scoped blocks left (before: %ld)", cases[k].name, n, live,
                      live0);
            }
            /* the session goes on: the same request again, no failure */
            int rc2 = rf_generate(s, prompt, cases[k].n_prompt, cp, out, 64, NULL);
            if (!same(out, rc2, want, n_want)) {
                bad++;
                CHECK(0, "%s: after allocation %ld failed, the session's next answer differs (%d ids: %s)",
                      cases[k].name, n, rc2, rc2 < 0 ? rf_last_error() : "");
            }
            rf_session_free(s);
            if (bad > 5) break;
        }
        CHECK(failed > 10, "%s: only %d allocations failed inside the generation", cases[k].name, failed);
        CHECK(steps <= W + 1, "%s: the walk did not reach the end of the generation", cases[k].name);
        if (!bad) check_n_pass++;
        printf("%-27s %5.1f s  %d ids, %ld allocations: %d made to fail (%d absorbed by the kernels)%s\n",
               cases[k].name, rf_now() - t0, n_want, n_allocs, failed + absorbed, absorbed,
               bad ? ": FAILED (above)" : ", each an error return, nothing left, the session sound");
        total_failed += failed, total_absorbed += absorbed;
    }
    printf("in all: %ld failed generations, %ld absorbed failures\n", total_failed, total_absorbed);

    rf_model_close(model);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return check_summary("api_oom");
}
