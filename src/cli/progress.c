/* progress.c - see progress.h */
#include "cli/progress.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tasks/eval.h"
#include "util/util.h"

const rf_opt rf_progress_table[] = {
    {.name = "progress", .type = RF_OPT_FLAG, .help = "a progress line on stderr (default: when stderr is a terminal)"},
    {.name = "no-progress", .type = RF_OPT_FLAG, .hi = -1, .help = "no progress line, even on a terminal"},
};
const int rf_progress_table_n = (int)(sizeof rf_progress_table / sizeof rf_progress_table[0]);

struct rf_progress {
    const char *what, *path;
    double total, t0;
    int tty;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

/* bytes in the file (its temporary copy while an atomic write of this
 * process fills it), or in the directory's regular files (temporary files
 * of atomic writes included) */
static double bytes_of(const char *path) {
    struct stat st;
    char *tmp = rf_atomic_tmp_path(path);
    int filling = !stat(tmp, &st) && S_ISREG(st.st_mode);
    free(tmp);
    if (filling) return (double)st.st_size;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (double)st.st_size;
    DIR *d = opendir(path);
    if (!d) return 0;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *f = rf_path_join(path, e->d_name);
        if (!stat(f, &st) && S_ISREG(st.st_mode)) sum += (double)st.st_size;
        free(f);
    }
    closedir(d);
    return sum;
}

/* seconds as "1m20s" */
static void minutes_seconds(char *buf, size_t size, double s) {
    snprintf(buf, size, "%dm%02ds", (int)s / 60, (int)s % 60);
}

/* final: the last figure, without the time left */
static void draw(rf_progress *p, int final) {
    double b = bytes_of(p->path), t = rf_now() - p->t0;
    const char *unit = p->total >= 1e9 || b >= 1e9 ? "GB" : "MB";
    double div = unit[0] == 'G' ? 1e9 : 1e6;
    if (p->total > 0) {
        char when[48] = "", mmss[32]; /* the time left at the rate so far */
        if (!final) {
            minutes_seconds(mmss, sizeof mmss, b > 0 && b < p->total ? t / b * (p->total - b) : 0);
            snprintf(when, sizeof when, ", eta %s", b > 0 ? mmss : "?");
        }
        fprintf(stderr, "%s%s: %.1f / %.1f %s (%.0f%%), %.0f s%s%s", p->tty ? "\r" : "", p->what, b / div,
                p->total / div, unit, 100.0 * (b < p->total ? b : p->total) / p->total, t, when,
                p->tty ? "\033[K" : "\n");
    } else
        fprintf(stderr, "%s%s: %.1f %s, %.0f s%s", p->tty ? "\r" : "", p->what, b / div, unit, t,
                p->tty ? "\033[K" : "\n");
    fflush(stderr);
}

static void *run(void *arg) {
    rf_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    double last = 0;
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop) break;
        double now = rf_now();
        if (p->tty || now - last >= 10) { /* not a terminal: a line every 10 s */
            draw(p, 0);
            last = now;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rf_progress *rf_progress_start(const char *what, const char *path, double total, int force) {
    int tty = isatty(2);
    if (force < 0 || (!force && !tty)) return NULL;
    rf_progress *p = rf_calloc(1, sizeof *p);
    p->what = what, p->path = path, p->total = total, p->t0 = rf_now(), p->tty = tty;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, run, p)) {
        free(p);
        return NULL;
    }
    return p;
}

void rf_progress_stop(rf_progress *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    draw(p, 1); /* the final figure */
    if (p->tty) fputc('\n', stderr);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- rf_meter ------------------------------------------------------------------ */
void rf_meter_init(rf_meter *m, const char *what, int total, int quiet) {
    memset(m, 0, sizeof *m);
    m->what = what, m->total = total, m->t0 = rf_now();
    m->tty = isatty(2);
    m->on = !quiet;
}

void rf_meter_update(rf_meter *m, int done, const char *extra) {
    if (!m->on) return;
    double now = rf_now();
    int last = done >= m->total;
    if (m->tty) {
        if (!last && m->last > 0 && now - m->last < 0.25) return;
    } else {
        int tenth = m->total > 0 ? (int)(10.0 * done / m->total) : 10;
        if (!last && tenth <= m->tenth) return;
        m->tenth = tenth;
    }
    m->last = now;
    char bar[31];
    int fill = m->total > 0 ? (int)(30.0 * done / m->total) : 30;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    double t = now - m->t0, eta = done > 0 ? t / done * (m->total - done) : 0;
    char when[48], mmss[32];
    minutes_seconds(mmss, sizeof mmss, last ? t : eta);
    snprintf(when, sizeof when, "%s%s", last ? "" : "eta ", mmss);
    fprintf(stderr, "%s%s: [%s] %d/%d  %s%s%s%s", m->tty ? "\r" : "", m->what, bar, done, m->total,
            extra ? extra : "", extra && *extra ? "  " : "", when, m->tty ? (last ? "\033[K\n" : "\033[K") : "\n");
    fflush(stderr);
    if (last) m->on = 0; /* printed once */
}

void rf_meter_abort(rf_meter *m) {
    if (m->on && m->tty && m->last > 0) fputc('\n', stderr);
    m->on = 0;
}

void rf_meter_eval_example(int done, int total, const rf_eval_agg *all, void *meter) {
    (void)total;
    char extra[64];
    snprintf(extra, sizeof extra, "acc %.1f%%  %.0f tok/s", all->n ? 100.0 * all->n_right / all->n : 0.0,
             all->seconds > 0 ? all->tokens / all->seconds : 0.0);
    rf_meter_update(meter, done, extra);
}
