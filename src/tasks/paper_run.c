/* paper_run.c - see paper_run.h */
#include "tasks/paper_run.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_BYTES ((size_t)1 << 30)

/* one {"completion": TEXT} line into the list of answers */
static int add_answer(json_t *rec, void *out) {
    const char *c = json_string_value(json_object_get(rec, "completion"));
    if (!c) {
        rf_set_error("expected {\"completion\": TEXT}");
        return -1;
    }
    json_array_append_new(out, json_string(c));
    return 0;
}

json_t *rf_paper_load_answers(const char *path) {
    size_t len;
    char *text = rf_read_file_max(path, MAX_FILE_BYTES, &len);
    if (!text) return NULL;
    json_t *out = json_array();
    if (rf_jsonl_foreach(text, path, add_answer, out)) json_decref(out), out = NULL;
    free(text);
    return out;
}

double rf_paper_stderr(double sum, int n) {
    if (n < 2) return NAN;
    double mean = sum / n, var = (sum * (1 - mean) * (1 - mean) + (n - sum) * mean * mean) / (n - 1);
    return sqrt(var / n);
}

static void add_sample(rf_paper_totals *t, int nm, const double *v, long tokens, long calls, double secs, double tpf,
                       int eos) {
    t->n++;
    for (int k = 0; k < nm; k++) t->sum[k] += v[k];
    t->tokens += tokens, t->calls += calls, t->seconds += secs, t->tpf_sum += tpf, t->n_eos += eos;
}

/* Read back the samples a killed run finished: complete lines whose task,
 * index and id match; the file is cut after the last of them (a line the
 * kill cut short goes). Returns how many, or -1. */
static int resume_samples(int fd, const char *path, int task, const json_t *items, int total, rf_paper_totals *t) {
    struct stat st;
    if (fstat(fd, &st)) {
        rf_set_error("%s: %s", path, strerror(errno));
        return -1;
    }
    if ((size_t)st.st_size > MAX_FILE_BYTES) {
        rf_set_error("%s: larger than %zu MB", path, MAX_FILE_BYTES >> 20);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    char *buf = rf_malloc(n + 1);
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)got);
        if (k <= 0) {
            free(buf);
            rf_set_error("%s: read error", path);
            return -1;
        }
        got += (size_t)k;
    }
    buf[n] = 0;
    int nm, done = 0;
    const char *const *names = rf_paper_metrics(task, &nm);
    size_t keep = 0;
    for (char *s = buf; s < buf + n;) {
        char *e = memchr(s, '\n', (size_t)(buf + n - s));
        if (!e) break; /* cut short by the kill */
        *e = 0;
        json_t *o = json_loads(s, 0, NULL);
        const char *id = json_string_value(json_object_get(json_array_get(items, (size_t)done), "id"));
        const char *tname = json_string_value(json_object_get(o, "task"));
        json_t *idx = json_object_get(o, "index"), *mj = json_object_get(o, "metrics");
        if (!o || !tname || strcmp(tname, rf_paper_task_name(task)) || !json_is_integer(idx) ||
            json_integer_value(idx) != done || done >= total || !id ||
            strcmp(id, json_string_value(json_object_get(o, "id")) ? json_string_value(json_object_get(o, "id")) : "") ||
            !json_is_object(mj)) {
            rf_set_error("%s: line %d is not sample %d of this %s data (%s); remove the file to start again", path,
                         done + 1, done, rf_paper_task_name(task), o ? "another task, order or data file" : "not JSON");
            json_decref(o);
            free(buf);
            return -1;
        }
        double v[3] = {0};
        for (int k = 0; k < nm; k++) v[k] = json_number_value(json_object_get(mj, names[k]));
        add_sample(t, nm, v, (long)json_integer_value(json_object_get(o, "tokens")),
                   (long)json_integer_value(json_object_get(o, "calls")),
                   json_number_value(json_object_get(o, "seconds")), json_number_value(json_object_get(o, "tpf")),
                   json_is_true(json_object_get(o, "eos")));
        json_decref(o);
        done++;
        keep = (size_t)(e + 1 - buf);
        s = e + 1;
    }
    free(buf);
    if (keep < n && ftruncate(fd, (off_t)keep)) {
        rf_set_error("%s: cannot cut the unfinished line: %s", path, strerror(errno));
        return -1;
    }
    t->n_resumed = done;
    return done;
}

static int append_line(int fd, const char *path, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(10));
    if (!s) {
        rf_set_error("%s: cannot serialise a sample", path);
        return -1;
    }
    size_t n = strlen(s);
    char *line = rf_malloc(n + 2);
    memcpy(line, s, n);
    line[n] = '\n', line[n + 1] = 0;
    free(s);
    /* one write per line, then to the disk: a kill leaves whole lines and at most one partial one */
    int rc = rf_write_all(fd, line, n + 1, path);
    free(line);
    if (!rc && fdatasync(fd)) {
        rf_set_error("%s: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* decode one prompt with the chosen decoder */
static int decode_one(const rf_model *m, const rf_tokenizer *tok, const json_t *item, const rf_paper_run_opts *o,
                      int index, char **text, rf_gen_result *r, double *secs) {
    char *prompt = rf_paper_prompt(tok, item);
    if (!prompt) return -1;
    int *ids = NULL, n = 0;
    int rc = rf_tok_encode(tok, prompt, strlen(prompt), &ids, &n);
    free(prompt);
    if (rc) return -1;
    double ts = rf_now();
    rc = rf_decode(m, ids, n, &o->gen, &o->mdm, r);
    *secs = rf_now() - ts;
    free(ids);
    if (rc) {
        rf_prefix_error("sample %d", index);
        return -1;
    }
    /* eval.py decodes, cuts at the stop sequences and drops the special
     * tokens; the decoders stop at the EOS, and special tokens are dropped here */
    *text = rf_tok_decode(tok, r->ids, r->n_ids, 1);
    if (!*text) {
        rf_set_error("sample %d: the answer holds an id outside the tokenizer", index);
        rf_gen_result_free(r);
        return -1;
    }
    return 0;
}

int rf_paper_run(const rf_model *m, const rf_tokenizer *tok, const json_t *items, const json_t *answers,
                 const rf_paper_run_opts *o, rf_paper_totals *t) {
    memset(t, 0, sizeof *t);
    int total = (int)json_array_size(items);
    if (o->limit > 0 && o->limit < total) total = o->limit;
    /* one completion per data record, so that a file of another data set or order stands out */
    if (o->answers && json_array_size(answers) != json_array_size(items)) {
        rf_set_error("answers: %zu completions for %zu samples (one line per data record, in order)",
                     json_array_size(answers), json_array_size(items));
        return -1;
    }
    int fd = open(o->samples_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        rf_set_error("%s: %s", o->samples_path, strerror(errno));
        return -1;
    }
    int start = 0;
    if (o->resume) {
        start = resume_samples(fd, o->samples_path, o->task, items, total, t);
        if (start < 0) {
            close(fd);
            return -1;
        }
    } else {
        struct stat st;
        if (!fstat(fd, &st) && st.st_size > 0) {
            close(fd);
            rf_set_error("%s already holds samples: give --resume to continue that run, or remove it",
                         o->samples_path);
            return -1;
        }
    }
    int nm;
    const char *const *names = rf_paper_metrics(o->task, &nm);
    if (o->on_sample && start > 0) o->on_sample(start, total, t, o->user);
    for (int i = start; i < total; i++) {
        const json_t *item = json_array_get(items, (size_t)i);
        char *raw = NULL;
        rf_gen_result r;
        memset(&r, 0, sizeof r);
        double secs = 0;
        if (o->answers) raw = rf_strdup(json_string_value(json_array_get(answers, (size_t)i)));
        else if (decode_one(m, tok, item, o, i, &raw, &r, &secs)) {
            close(fd);
            return -1;
        }
        char *c = rf_paper_completion(o->task, raw);
        double v[3] = {0};
        json_t *detail = NULL;
        if (rf_paper_score(o->task, item, c, o->box, v, &detail)) {
            rf_prefix_error("sample %d", i);
            free(raw), free(c), rf_gen_result_free(&r), close(fd);
            return -1;
        }
        json_t *mj = json_object();
        for (int k = 0; k < nm; k++) json_object_set_new(mj, names[k], json_real(v[k]));
        json_t *line = json_pack("{s:s, s:i, s:O, s:s, s:s, s:o}", "task", rf_paper_task_name(o->task), "index", i,
                                 "id", json_object_get(item, "id"), "completion", c, "raw", raw, "metrics", mj);
        json_object_update(line, detail);
        json_object_set_new(line, "tokens", json_integer(r.n_ids));
        json_object_set_new(line, "calls", json_integer(r.n_calls));
        json_object_set_new(line, "seconds", json_real(secs));
        json_object_set_new(line, "tpf", json_real(r.tpf));
        json_object_set_new(line, "eos", json_boolean(r.hit_eos));
        int rc = append_line(fd, o->samples_path, line);
        json_decref(line), json_decref(detail);
        add_sample(t, nm, v, r.n_ids, r.n_calls, secs, r.tpf, r.hit_eos);
        free(raw), free(c), rf_gen_result_free(&r);
        if (rc) {
            close(fd);
            return -1;
        }
        if (o->on_sample) o->on_sample(i + 1, total, t, o->user);
    }
    if (close(fd)) {
        rf_set_error("%s: %s", o->samples_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* "exact_match,strict-match" -> "exact_match_stderr,strict-match" (lm-eval's naming) */
static void stderr_name(const char *metric, char *buf, size_t cap) {
    const char *comma = strchr(metric, ',');
    if (comma) snprintf(buf, cap, "%.*s_stderr%s", (int)(comma - metric), metric, comma);
    else snprintf(buf, cap, "%s_stderr", metric);
}

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

json_t *rf_paper_summary(int task, const rf_paper_totals *t, json_t *config) {
    const char *name = rf_paper_task_name(task);
    int nm;
    const char *const *metrics = rf_paper_metrics(task, &nm);
    json_t *res = json_pack("{s:s}", "alias", rf_paper_harness_task(task)), *table = json_array();
    for (int k = 0; k < nm; k++) {
        double v = t->n ? t->sum[k] / t->n : 0, se = rf_paper_stderr(t->sum[k], t->n);
        char sn[128];
        stderr_name(metrics[k], sn, sizeof sn);
        json_object_set_new(res, metrics[k], json_real(v));
        json_object_set_new(res, sn, num_or_null(se));
        json_array_append_new(table, json_pack("{s:s, s:s, s:f, s:o}", "task", name, "metric", metrics[k], "value", v,
                                               "stderr", num_or_null(se)));
    }
    json_t *speed = json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f}", "tokens_per_s",
                              t->seconds > 0 ? t->tokens / t->seconds : 0.0, "tokens_per_call",
                              t->calls ? (double)t->tokens / t->calls : 0.0, "tpf", t->n ? t->tpf_sum / t->n : 0.0,
                              "latency_s", t->n ? t->seconds / t->n : 0.0, "tokens", (json_int_t)t->tokens, "calls",
                              (json_int_t)t->calls, "seconds", t->seconds, "eos_rate",
                              t->n ? (double)t->n_eos / t->n : 0.0);
    return json_pack("{s:{s:o}, s:{s:{s:i, s:i}}, s:{s:o}, s:o, s:o}", "results", name, res, "n-samples", name,
                     "effective", t->n, "resumed", t->n_resumed, "speed", name, speed, "table", table, "config",
                     config ? config : json_object());
}

char *rf_paper_markdown(int task, const rf_paper_totals *t) {
    int nm;
    const char *const *metrics = rf_paper_metrics(task, &nm);
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) rf_oom(0);
    fputs("| task | lm-eval task | metric | score | stderr | n | tokens/s | TPF | tokens/call | latency (s) |\n"
          "|------|--------------|--------|------:|-------:|--:|---------:|----:|------------:|------------:|\n",
          f);
    for (int k = 0; k < nm; k++) {
        double se = rf_paper_stderr(t->sum[k], t->n);
        char ses[32];
        if (isfinite(se)) snprintf(ses, sizeof ses, "%.2f", 100 * se);
        else snprintf(ses, sizeof ses, "-");
        fprintf(f, "| %s | %s | %s | %.2f | %s | %d | %.1f | %.2f | %.2f | %.3f |\n", rf_paper_task_name(task),
                rf_paper_harness_task(task), metrics[k], t->n ? 100.0 * t->sum[k] / t->n : 0.0, ses, t->n,
                t->seconds > 0 ? t->tokens / t->seconds : 0.0, t->n ? t->tpf_sum / t->n : 0.0,
                t->calls ? (double)t->tokens / t->calls : 0.0, t->n ? t->seconds / t->n : 0.0);
    }
    if (fclose(f) || !out) rf_oom(n);
    return out;
}

char *rf_paper_table(json_t *const *summaries, const char *const *paths, int n) {
    static const int order[RF_PAPER_N] = {RF_PAPER_HUMANEVAL, RF_PAPER_MBPP,     RF_PAPER_GSM8K, RF_PAPER_MATH,
                                          RF_PAPER_GPQA,      RF_PAPER_MMLU_PRO, RF_PAPER_ARC_C};
    /* rows: the distinct "model, decoder" in the order first seen */
    json_t *rows = json_array(), *cells = json_object();
    for (int i = 0; i < n; i++) {
        const json_t *cfg = json_object_get(summaries[i], "config"), *tab = json_object_get(summaries[i], "table");
        const char *task = json_string_value(json_object_get(cfg, "task")),
                   *model = json_string_value(json_object_get(cfg, "model")),
                   *dec = json_string_value(json_object_get(cfg, "decoder"));
        const json_t *head = json_array_get(tab, 0),
                     *speed = json_object_get(json_object_get(summaries[i], "speed"), task ? task : "");
        if (!task || rf_paper_task_from_name(task) < 0 || !model || !dec || !json_is_number(json_object_get(head, "value"))) {
            rf_set_error("%s: not the summary of an `eval --task` run", paths[i]);
            json_decref(rows), json_decref(cells);
            return NULL;
        }
        char key[1024];
        snprintf(key, sizeof key, "%s, %s", model, dec);
        json_t *row = json_object_get(cells, key);
        if (!row) {
            row = json_object();
            json_object_set_new(cells, key, row);
            json_array_append_new(rows, json_string(key));
        }
        char cell[96];
        snprintf(cell, sizeof cell, "%.2f (%.1f tok/s)", 100 * json_number_value(json_object_get(head, "value")),
                 json_number_value(json_object_get(speed, "tokens_per_s")));
        json_object_set_new(row, task, json_string(cell));
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) rf_oom(0);
    fputs("| model, decoder |", f);
    for (int k = 0; k < RF_PAPER_N; k++) fprintf(f, " %s |", rf_paper_task_name(order[k]));
    fputs("\n|---|", f);
    for (int k = 0; k < RF_PAPER_N; k++) fputs("---:|", f);
    fputc('\n', f);
    for (size_t r = 0; r < json_array_size(rows); r++) {
        const char *key = json_string_value(json_array_get(rows, r));
        const json_t *row = json_object_get(cells, key);
        fprintf(f, "| %s |", key);
        for (int k = 0; k < RF_PAPER_N; k++) {
            const char *c = json_string_value(json_object_get(row, rf_paper_task_name(order[k])));
            fprintf(f, " %s |", c ? c : "-");
        }
        fputc('\n', f);
    }
    if (fclose(f) || !out) rf_oom(len);
    json_decref(rows), json_decref(cells);
    return out;
}
