/* model_call_timing.c - rf_call_timing_run (model/call_timing.h) on the demo
 * model: the sides are applied in B A A B order for the untimed round, then
 * A B B A / B A A B by round; after each apply come the side's calls of
 * every width in order, each handing over its logits; every slot of the
 * seconds array is filled with the mean of the side's calls (the seconds
 * after_call returns); one side takes all four places; bad parameters are
 * refused with a reason. (Nothing here is timed.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/call_timing.h"
#include "util/util.h"
#include "check.h"
#include "helpers/demo_model.h"

enum { MAX_APPLY = 64, MAX_CALLS = 256 };

typedef struct {
    int applied[MAX_APPLY], n_applied;
    int call_round[MAX_CALLS], call_side[MAX_CALLS], call_w[MAX_CALLS], n_calls;
    int null_logits;
} trace;

static void apply(int side, void *arg) {
    trace *x = arg;
    if (x->n_applied < MAX_APPLY) x->applied[x->n_applied] = side;
    x->n_applied++;
}

/* records the call; the seconds recorded are a known value per side and
 * width, so that the mean the routine stores can be checked exactly */
static double after_call(int round, int side, int w, const float *logits, double s, void *arg) {
    trace *x = arg;
    (void)s;
    if (x->n_calls < MAX_CALLS)
        x->call_round[x->n_calls] = round, x->call_side[x->n_calls] = side, x->call_w[x->n_calls] = w;
    x->n_calls++;
    x->null_logits += !logits;
    return 1 + side * 10 + w;
}

int main(void) {
    char dir[4096];
    rf_model m;
    if (rf_test_demo_load(&m, dir, sizeof dir)) return check_summary("model_call_timing");
    const int widths[] = {1, 3, 2}, nw = 3, rounds = 3;
    double sec[3 * 2 * 3];

    trace x;
    memset(&x, 0, sizeof x);
    rf_call_timing p = {8, widths, nw, 2, rounds, apply, after_call, &x};
    for (size_t i = 0; i < sizeof sec / sizeof *sec; i++) sec[i] = -1;
    CHECK(rf_call_timing_run(&m, &p, sec) == 0, "two sides: %s", rf_last_error());
    /* the untimed round (-1) in B A A B order, then A B B A, B A A B, A B B A */
    static const int want[16] = {1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0};
    CHECK(x.n_applied == 16, "%d applies, want 16", x.n_applied);
    for (int i = 0; i < 16 && i < x.n_applied; i++)
        CHECK(x.applied[i] == want[i], "apply %d: side %d, want %d", i, x.applied[i], want[i]);
    CHECK(x.n_calls == 16 * nw, "%d calls, want %d", x.n_calls, 16 * nw);
    for (int i = 0; i < x.n_calls && i < MAX_CALLS; i++) {
        const int a = i / nw;
        CHECK(x.call_round[i] == a / 4 - 1 && x.call_side[i] == want[a] && x.call_w[i] == i % nw,
              "call %d: round %d side %d width %d, want %d %d %d", i, x.call_round[i], x.call_side[i], x.call_w[i],
              a / 4 - 1, want[a], i % nw);
    }
    CHECK(x.null_logits == 0, "%d calls without logits", x.null_logits);
    for (int r = 0; r < rounds; r++)
        for (int sd = 0; sd < 2; sd++)
            for (int w = 0; w < nw; w++) {
                const double got = sec[(r * 2 + sd) * nw + w];
                CHECK(got == 1 + sd * 10 + w, "round %d side %d width %d: %g, want %d", r, sd, w, got, 1 + sd * 10 + w);
            }

    /* one side: all four places, the mean of its four calls */
    memset(&x, 0, sizeof x);
    p.n_sides = 1;
    CHECK(rf_call_timing_run(&m, &p, sec) == 0, "one side: %s", rf_last_error());
    CHECK(x.n_applied == 16, "one side: %d applies, want 16", x.n_applied);
    for (int i = 0; i < 16 && i < x.n_applied; i++) CHECK(x.applied[i] == 0, "one side: apply %d: side %d", i, x.applied[i]);
    for (int i = 0; i < rounds * nw; i++) CHECK(sec[i] == 1 + i % nw, "one side: slot %d: %g, want %d", i, sec[i], 1 + i % nw);

    /* the measured seconds themselves, without after_call */
    p.n_sides = 2, p.after_call = NULL;
    CHECK(rf_call_timing_run(&m, &p, sec) == 0, "measured: %s", rf_last_error());
    for (int i = 0; i < rounds * 2 * nw; i++) CHECK(sec[i] > 0, "measured: slot %d: %g", i, sec[i]);

    /* refusals */
    p.n_sides = 3;
    CHECK(rf_call_timing_run(&m, &p, sec) == -1 && strstr(rf_last_error(), "sides"), "3 sides: %s", rf_last_error());
    p.n_sides = 2, p.rounds = 0;
    CHECK(rf_call_timing_run(&m, &p, sec) == -1 && strstr(rf_last_error(), "rounds"), "0 rounds: %s", rf_last_error());
    p.rounds = 1, p.ctx = m.cfg.max_pos;
    CHECK(rf_call_timing_run(&m, &p, sec) == -1 && strstr(rf_last_error(), "fit"), "too long: %s", rf_last_error());
    const int zero[] = {0};
    p.ctx = 8, p.widths = zero, p.n_widths = 1;
    CHECK(rf_call_timing_run(&m, &p, sec) == -1 && strstr(rf_last_error(), "0 tokens"), "width 0: %s", rf_last_error());

    rf_model_free(&m);
    return check_summary("model_call_timing");
}
