/* team.h - the threads of one OpenMP parallel region working as a team,
 * with a spinning barrier and a shared work counter.
 *
 * Why not `#pragma omp barrier` / `omp for`: libgomp's barrier makes a
 * futex(FUTEX_WAKE) system call every time it completes, whether or not a
 * thread sleeps, and on the virtual machines this project runs on a system
 * call costs microseconds. A forward pass of a small model has ~40 steps
 * that must wait for each other and is itself short, so such barriers
 * alone would cost more than a second core gives back. Here a barrier is an atomic counter
 * and a spin on a generation number (yielding the core after a while, for
 * machines with more threads than free cores). */
#ifndef RF_TEAM_H
#define RF_TEAM_H

#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>

struct rf_team {
    int n;                       /* threads in the team */
    atomic_int arrived, gen;     /* the barrier */
    atomic_int next;             /* the shared work counter (rf_team_next) */
    /* the current matmul's prepared activations (rf_matmul_team) */
    int mm_path, mm_single;
    const void *mm_xp;
};
typedef struct rf_team rf_team;

static inline void rf_team_init(rf_team *t, int n) {
    t->n = n;
    atomic_init(&t->arrived, 0);
    atomic_init(&t->gen, 0);
    atomic_init(&t->next, 0);
    t->mm_path = t->mm_single = 0;
    t->mm_xp = 0;
}

/* every thread of the team waits here until all have arrived; what each
 * wrote before is visible to all after */
static inline void rf_team_barrier(rf_team *t) {
    if (t->n <= 1) return;
    int g = atomic_load_explicit(&t->gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&t->arrived, 1, memory_order_acq_rel) == t->n - 1) {
        atomic_store_explicit(&t->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&t->gen, g + 1, memory_order_release);
        return;
    }
    for (long spins = 0; atomic_load_explicit(&t->gen, memory_order_acquire) == g; spins++) {
        if (spins < 20000)
            _mm_pause();
        else
            sched_yield();
    }
}

/* the next item of a shared loop (reset to 0 by one thread between two
 * barriers) */
static inline int rf_team_next(rf_team *t) { return atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed); }

/* share part of parts of n items: [*a, *b), contiguous, sizes within one */
static inline void rf_share(int n, int part, int parts, int *a, int *b) {
    *a = (int)((long)n * part / parts);
    *b = (int)((long)n * (part + 1) / parts);
}

/* this thread's contiguous share [*a, *b) of n items */
static inline void rf_team_share(const rf_team *t, int tid, int n, int *a, int *b) { rf_share(n, tid, t->n, a, b); }

#endif
