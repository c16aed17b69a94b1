/* eval.c - see eval.h. */
#include "tasks/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rf_eval_load_model(rf_model *m, rf_tokenizer **tok, const char *model_dir, const char *tok_path) {
    if (rf_model_load(m, model_dir)) return -1;
    *tok = rf_tok_for_model(model_dir, tok_path);
    if (*tok && rf_tok_vocab_size(*tok) > m->cfg.vocab_size) {
        rf_set_error("%s: the tokenizer has %d ids but the model only %d", tok_path ? tok_path : model_dir,
                     rf_tok_vocab_size(*tok), m->cfg.vocab_size);
        rf_tok_free(*tok);
        *tok = NULL;
    }
    if (!*tok) {
        rf_model_free(m);
        return -1;
    }
    return 0;
}

const char *rf_decoder_name(rf_method method, int answers) {
    const char *name = rf_method_name(method);
    return answers ? "answers" : name ? name : "?";
}

static void agg_add(rf_eval_agg *a, int right, long tokens, long calls, double s, double tpf, int eos,
                    const rf_accept_stats *acc) {
    a->acc_first_free += acc->first_free;
    a->acc_first_checked += acc->first_checked;
    a->acc_first_replaced += acc->first_replaced;
    a->acc_verified += acc->verified;
    a->acc_forced_draft += acc->forced_draft;
    a->acc_forced_ar += acc->forced_ar;
    a->n++;
    a->n_right += right;
    a->tokens += tokens;
    a->calls += calls;
    a->seconds += s;
    a->tpf_sum += tpf;
    a->n_eos += eos;
}

/* The acceptance counts in a fixed order, with their names. */
#define N_ACCEPT 6
static const char *const accept_names[N_ACCEPT] = {"first_free",   "first_checked", "first_replaced",
                                                   "verified",     "forced_draft",  "forced_ar"};
static void accept_counts(const rf_eval_agg *a, long *c) {
    c[0] = a->acc_first_free, c[1] = a->acc_first_checked, c[2] = a->acc_first_replaced;
    c[3] = a->acc_verified, c[4] = a->acc_forced_draft, c[5] = a->acc_forced_ar;
}

/* {"accept": {name: count}, "accept_frac": {name: count / tokens}} */
static void accept_json(json_t *o, const rf_eval_agg *a) {
    long c[N_ACCEPT];
    accept_counts(a, c);
    json_t *cnt = json_object(), *frac = json_object();
    for (int i = 0; i < N_ACCEPT; i++) {
        json_object_set_new(cnt, accept_names[i], json_integer(c[i]));
        json_object_set_new(frac, accept_names[i], json_real(a->tokens ? (double)c[i] / a->tokens : 0.0));
    }
    json_object_set_new(o, "accept", cnt);
    json_object_set_new(o, "accept_frac", frac);
}

int rf_eval_run(const rf_model *m, const rf_tokenizer *tok, const json_t *examples,
                const json_t *answers, const rf_eval_opts *o, rf_eval_report *rep) {
    memset(rep, 0, sizeof *rep);
    rep->decoder = o->gen.method, rep->answers = o->answers;
    rep->examples = json_array();
    int total = (int)json_array_size(examples);
    if (o->limit > 0 && o->limit < total) total = o->limit;
    if (o->answers && (!json_is_array(answers) || (int)json_array_size(answers) < total)) {
        rf_set_error("answers: need a list of at least %d strings (got %zu)", total,
                     json_array_size(answers));
        return -1;
    }
    for (int i = 0; i < total; i++) {
        const json_t *ex = json_array_get(examples, i);
        const char *query = json_string_value(json_object_get(ex, "query"));
        int fam = rf_task_family_from_name(json_string_value(json_object_get(ex, "family")));
        char *answer = NULL;
        rf_gen_result r;
        memset(&r, 0, sizeof r);
        double secs = 0;
        if (o->answers) {
            const char *s = json_string_value(json_array_get(answers, i));
            if (!s) {
                rf_set_error("answers: entry %d is not a string", i);
                return -1;
            }
            answer = rf_strdup(s);
        } else {
            int *ids, n;
            if (rf_chat_query_ids(tok, query, &ids, &n)) return -1;
            double ts = rf_now();
            int rc = rf_decode(m, ids, n, &o->gen, &o->mdm, &r);
            secs = rf_now() - ts;
            free(ids);
            if (rc) {
                rf_prefix_error("example %d", i);
                return -1;
            }
            answer = rf_tok_decode(tok, r.ids, r.n_ids, 1);
            if (!answer) {
                rf_set_error("example %d: the answer holds an id outside the tokenizer", i);
                rf_gen_result_free(&r);
                return -1;
            }
        }
        int right = rf_task_check(ex, answer);
        if (right < 0) {
            rf_prefix_error("example %d", i);
            free(answer);
            rf_gen_result_free(&r);
            return -1;
        }
        agg_add(&rep->fam[fam], right, r.n_ids, r.n_calls, secs, r.tpf, r.hit_eos, &r.accept);
        agg_add(&rep->all, right, r.n_ids, r.n_calls, secs, r.tpf, r.hit_eos, &r.accept);
        json_array_append_new(rep->examples,
                              json_pack("{s:i, s:s, s:s, s:s, s:b, s:i, s:i, s:f, s:f, s:b}", "index", i,
                                        "family", rf_task_family_name(fam), "query", query, "answer",
                                        answer, "right", right, "tokens", r.n_ids, "calls", r.n_calls,
                                        "seconds", secs, "tpf", r.tpf, "eos", r.hit_eos));
        if (!o->answers && o->gen.method == RF_METHOD_REFUSION) {
            rf_eval_agg one;
            memset(&one, 0, sizeof one);
            agg_add(&one, right, r.n_ids, r.n_calls, secs, r.tpf, r.hit_eos, &r.accept);
            accept_json(json_array_get(rep->examples, json_array_size(rep->examples) - 1), &one);
        }
        free(answer);
        rf_gen_result_free(&r);
        if (o->on_example) o->on_example(i + 1, total, &rep->all, o->user);
    }
    return 0;
}

void rf_eval_report_free(rf_eval_report *rep) {
    json_decref(rep->examples);
    memset(rep, 0, sizeof *rep);
}

static json_t *agg_json(const rf_eval_agg *a) {
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f}", "n", a->n, "right",
                     a->n_right, "accuracy", a->n ? (double)a->n_right / a->n : 0.0, "tokens_per_s",
                     a->seconds > 0 ? a->tokens / a->seconds : 0.0, "tpf", a->n ? a->tpf_sum / a->n : 0.0,
                     "tokens_per_call", a->calls ? (double)a->tokens / a->calls : 0.0, "latency_s",
                     a->n ? a->seconds / a->n : 0.0, "tokens", (json_int_t)a->tokens, "calls",
                     (json_int_t)a->calls, "seconds", a->seconds, "eos_rate",
                     a->n ? (double)a->n_eos / a->n : 0.0);
}

json_t *rf_eval_metrics_json(const rf_eval_report *rep) {
    json_t *fams = json_object(), *all = agg_json(&rep->all);
    int refusion = !rep->answers && rep->decoder == RF_METHOD_REFUSION;
    if (refusion) accept_json(all, &rep->all);
    for (int f = 0; f < RF_TASK_N; f++)
        if (rep->fam[f].n) {
            json_t *fj = agg_json(&rep->fam[f]);
            if (refusion) accept_json(fj, &rep->fam[f]);
            json_object_set_new(fams, rf_task_family_name(f), fj);
        }
    return json_pack("{s:o, s:o}", "overall", all, "families", fams);
}

static void md_append(char **buf, size_t *len, size_t *cap, const char *line) {
    size_t n = strlen(line);
    if (*len + n + 1 > *cap) {
        *cap = (*cap + n + 1) * 2;
        char *nb = realloc(*buf, *cap);
        if (!nb) rf_die("out of memory");
        *buf = nb;
    }
    memcpy(*buf + *len, line, n + 1);
    *len += n;
}

/* "| arith | 1234 | 12.3% (152) | ..." : each acceptance count as a share of the tokens */
static void md_accept_row(char **buf, size_t *len, size_t *cap, const char *name, const rf_eval_agg *a) {
    long c[N_ACCEPT];
    accept_counts(a, c);
    char line[512];
    int k = snprintf(line, sizeof line, "| %-8s | %6ld |", name, a->tokens);
    for (int i = 0; i < N_ACCEPT; i++)
        k += snprintf(line + k, sizeof line - (size_t)k, " %5.1f%% (%ld) |",
                      a->tokens ? 100.0 * c[i] / a->tokens : 0.0, c[i]);
    snprintf(line + k, sizeof line - (size_t)k, "\n");
    md_append(buf, len, cap, line);
}

static void md_row(char **buf, size_t *len, size_t *cap, const char *name, const rf_eval_agg *a) {
    char line[256];
    snprintf(line, sizeof line, "| %-8s | %4d | %7.1f%% | %9.1f | %5.2f | %11.2f | %11.4f |\n", name,
                     a->n, a->n ? 100.0 * a->n_right / a->n : 0.0,
                     a->seconds > 0 ? a->tokens / a->seconds : 0.0, a->n ? a->tpf_sum / a->n : 0.0,
                     a->calls ? (double)a->tokens / a->calls : 0.0, a->n ? a->seconds / a->n : 0.0);
    md_append(buf, len, cap, line);
}

char *rf_eval_markdown_table(const rf_eval_report *rep) {
    size_t cap = 1024, len = 0;
    char *buf = rf_malloc(cap);
    const char *head = "| task     |    n | accuracy |  tokens/s |   TPF | tokens/call | latency (s) |\n"
                       "|----------|-----:|---------:|----------:|------:|------------:|------------:|\n";
    strcpy(buf, head);
    len = strlen(head);
    for (int f = 0; f < RF_TASK_N; f++)
        if (rep->fam[f].n) md_row(&buf, &len, &cap, rf_task_family_name(f), &rep->fam[f]);
    md_row(&buf, &len, &cap, "overall", &rep->all);
    if (!rep->answers && rep->decoder == RF_METHOD_REFUSION) {
        md_append(&buf, &len, &cap,
                  "\nHow the committed tokens got in (share of tokens, count): a slot's first token "
                  "unchecked / checked by the AR head / replaced by it; a later token verified / forced "
                  "as the mask re-draft / forced as the AR head's choice.\n\n"
                  "| task     | tokens | first free | first checked | first replaced | verified | "
                  "forced draft | forced AR |\n"
                  "|----------|-------:|-----------:|--------------:|---------------:|---------:|"
                  "-------------:|----------:|\n");
        for (int f = 0; f < RF_TASK_N; f++)
            if (rep->fam[f].n) md_accept_row(&buf, &len, &cap, rf_task_family_name(f), &rep->fam[f]);
        md_accept_row(&buf, &len, &cap, "overall", &rep->all);
    }
    return buf;
}
