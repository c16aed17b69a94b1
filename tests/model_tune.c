/* model_tune.c - rf_tune_crossover (model/tune.h): the tiles are kept from
 * the smallest width from which they won (the ratio's whole interval below
 * 1) at every wider width measured; off when they did not win at the widest. rf_tune_amx's refusals of what it
 * cannot measure. (The measurement itself: tests/cli_tune.sh.) */
#include <string.h>

#include "kernels/cpu.h"
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
    return check_summary("model_tune");
}
