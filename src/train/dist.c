/* dist.c - the processes of a data-parallel training run: Open MPI when the
 * build found it (RF_HAVE_MPI, CMake's FindMPI), one process otherwise.
 *
 * The trainer needs four collectives, all on MPI_COMM_WORLD: a sum of the
 * gradient block (one flat float buffer, reduced in place: in one call after
 * the backward, or in buckets started during it), a sum of a few
 * doubles (losses, token counts, flags), a broadcast from rank 0 (weights,
 * optimizer state) and "did every rank succeed" (a min over ranks). Without
 * MPI, or before rf_dist_init, every call is the one-process identity.
 *
 * Failure of a peer: MPI's default error handler (MPI_ERRORS_ARE_FATAL) is
 * kept, and mpirun ends the whole job with its own message when one rank
 * dies, so no rank waits forever on a collective whose partner is gone. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

#ifdef RF_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_on = 0;

int rf_dist_compiled(void) {
#ifdef RF_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int rf_dist_launched(void) {
    /* Open MPI's mpirun; PMIx and PMI launchers (MPICH's hydra, srun --mpi) */
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    if (getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_RANK")) return 1;
    return 0;
}

int rf_dist_init(void) {
#ifdef RF_HAVE_MPI
    if (g_on) return 0;
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return rf_set_error("MPI_Init failed"), -1;
    if (provided < MPI_THREAD_FUNNELED) { /* OpenMP threads run between our MPI calls */
        MPI_Finalize();
        return rf_set_error("this MPI library does not support threads (MPI_THREAD_FUNNELED)"), -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_on = 1;
    return 0;
#else
    return rf_set_error("this refusion was built without MPI (install libopenmpi-dev, e.g. with "
                        "scripts/install-deps.sh, and rebuild)"), -1;
#endif
}

void rf_dist_finalize(void) {
#ifdef RF_HAVE_MPI
    if (g_on) MPI_Finalize();
#endif
    g_on = 0;
    g_rank = 0;
    g_size = 1;
}

int rf_dist_rank(void) { return g_rank; }
int rf_dist_size(void) { return g_size; }

void rf_dist_sum_f32(float *x, size_t n) {
#ifdef RF_HAVE_MPI
    if (g_size < 2) return;
    while (n > 0) { /* MPI counts are int */
        int c = n > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)n;
        MPI_Allreduce(MPI_IN_PLACE, x, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        x += c;
        n -= (size_t)c;
    }
#else
    (void)x, (void)n;
#endif
}

void rf_dist_sum_f64(double *x, int n) {
#ifdef RF_HAVE_MPI
    if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)x, (void)n;
#endif
}

void rf_dist_bcast(void *p, size_t bytes) {
#ifdef RF_HAVE_MPI
    if (g_size < 2) return;
    char *c = p;
    while (bytes > 0) {
        int k = bytes > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)bytes;
        MPI_Bcast(c, k, MPI_BYTE, 0, MPI_COMM_WORLD);
        c += k;
        bytes -= (size_t)k;
    }
#else
    (void)p, (void)bytes;
#endif
}

int rf_dist_first_failed(int ok) {
#ifdef RF_HAVE_MPI
    if (g_size > 1) {
        int mine = ok ? g_size : g_rank, first;
        MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        return first < g_size ? first : -1;
    }
#endif
    return ok ? -1 : g_rank;
}

/* ---- the gradient sum in buckets, overlapped with the backward -------------------- */

struct rf_dist_buckets {
    float *x;
    size_t *edges;  /* [n + 1] */
    int n, next;    /* next: the highest bucket not started yet (the backward ends at 0) */
    double seconds; /* in MPI calls since _start */
#ifdef RF_HAVE_MPI
    MPI_Request *req; /* [n], MPI_REQUEST_NULL when not started or done */
#endif
};

rf_dist_buckets *rf_dist_buckets_new(float *x, const size_t *edges, int n_buckets) {
    rf_dist_buckets *b = rf_calloc(1, sizeof *b);
    b->x = x;
    b->n = n_buckets;
    b->edges = rf_malloc(sizeof(size_t) * (size_t)(n_buckets + 1));
    memcpy(b->edges, edges, sizeof(size_t) * (size_t)(n_buckets + 1));
#ifdef RF_HAVE_MPI
    b->req = rf_malloc(sizeof(MPI_Request) * (size_t)n_buckets);
    for (int i = 0; i < n_buckets; i++) b->req[i] = MPI_REQUEST_NULL;
#endif
    b->next = -1;
    return b;
}

void rf_dist_buckets_free(rf_dist_buckets *b) {
    if (!b) return;
    free(b->edges);
#ifdef RF_HAVE_MPI
    free(b->req);
#endif
    free(b);
}

void rf_dist_buckets_start(rf_dist_buckets *b) {
    b->next = b->n - 1;
    b->seconds = 0;
}

#ifdef RF_HAVE_MPI
static void start_bucket(rf_dist_buckets *b, int i) {
    MPI_Iallreduce(MPI_IN_PLACE, b->x + b->edges[i], (int)(b->edges[i + 1] - b->edges[i]), MPI_FLOAT,
                   MPI_SUM, MPI_COMM_WORLD, &b->req[i]);
}
#endif

void rf_dist_buckets_ready(rf_dist_buckets *b, size_t from) {
#ifdef RF_HAVE_MPI
    if (g_size < 2) return;
    double t0 = rf_now();
    while (b->next >= 0 && b->edges[b->next] >= from) start_bucket(b, b->next--);
    /* Open MPI moves a non-blocking collective on only inside MPI calls
     * (no progress thread in its default build): each test is a round */
    int done;
    MPI_Testall(b->n, b->req, &done, MPI_STATUSES_IGNORE);
    b->seconds += rf_now() - t0;
#else
    (void)b, (void)from;
#endif
}

void rf_dist_buckets_finish(rf_dist_buckets *b) {
#ifdef RF_HAVE_MPI
    if (g_size < 2) return;
    double t0 = rf_now();
    while (b->next >= 0) start_bucket(b, b->next--);
    MPI_Waitall(b->n, b->req, MPI_STATUSES_IGNORE);
    b->seconds += rf_now() - t0;
#else
    (void)b;
#endif
}

double rf_dist_buckets_seconds(const rf_dist_buckets *b) { return b->seconds; }
