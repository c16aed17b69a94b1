/* cmd_eval.c - `refusion eval`: run a model with a decoder on a task file,
 * check every answer, print the per-family table (--json: the JSON report
 * instead) and write it as <out>.md and <out>.json (metrics, settings and
 * every answer).
 *
 * With --task NAME (one of the paper's benchmarks, tasks/paper.h) it reads
 * that data set's own file instead, decodes with the task's preset as the
 * default settings, appends every sample to <out>.samples.jsonl as it
 * finishes (--resume continues a killed run) and writes the summary in
 * lm-eval's shape as <out>.json and a table like the paper's as <out>.md
 * (docs/eval.md). */
#include <errno.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "decode/presets.h"
#include "tasks/eval.h"
#include "tasks/paper_run.h"

typedef struct {
    rf_model_source src; /* -m, --tokenizer */
    const char *data, *answers, *out;
    int limit, quiet, no_early_stop, json;
    int task;         /* 0: the project's own suite, else 1 + a preset / paper task name */
    int resume, table;
    float code_timeout;
} eval_args;

#define A(f) offsetof(eval_args, f)
static const rf_opt eval_opts[] = {
    {.name = "task", .type = RF_OPT_CHOICE, .choices = "suite" RF_DECODE_PRESET_CHOICES, .offset = A(task),
     .metavar = "NAME", .help = "suite (the project's tasks) or one of the paper's benchmarks, read from --data in "
                                "the data set's own format (JSON Lines or JSON); its --preset is the default"},
    {.name = "data", .type = RF_OPT_STR, .offset = A(data), .metavar = "FILE",
     .help = "task file written by `refusion tasks`, or the benchmark's data file"},
    {.name = "answers", .type = RF_OPT_STR, .offset = A(answers), .metavar = "FILE",
     .help = "no model: check a JSON list of answer strings (--task: a JSON Lines file of {\"completion\": TEXT}, "
             "in the data file's order)"},
    {.name = "resume", .type = RF_OPT_FLAG, .offset = A(resume),
     .help = "--task: continue the run whose samples are in PATH.samples.jsonl"},
    {.name = "table", .type = RF_OPT_FLAG, .offset = A(table),
     .help = "no run: print the summaries PATH.json given as arguments (runs of --task) as one table in "
             "the paper's layout (a row per model and decoder, a column per task)"},
    {.name = "code-timeout", .type = RF_OPT_FLOAT, .lo = 0, .hi = 3600, .open_lo = 1, .offset = A(code_timeout),
     .metavar = "S", .help = "--task humaneval|mbpp: wall-clock seconds per program (CPU limit the same)"},
    {.name = "limit", .type = RF_OPT_INT, .lo = 0, .hi = 100000000, .offset = A(limit), .metavar = "N",
     .help = "only the first N examples (0 = all)"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "PATH",
     .help = "write PATH.md and PATH.json (default results/<model>-<decoder>, --task: "
             "results/<model>-<task>-<decoder>)"},
    {.name = "quiet", .type = RF_OPT_FLAG, .offset = A(quiet), .help = "no progress line on stderr (a terminal: redrawn 4 times a second; otherwise a line every 10%)"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = A(json),
     .help = "print the report (as PATH.json: settings, metrics, every answer) on stdout instead of the table"},
    {.name = "no-early-stop", .type = RF_OPT_FLAG, .offset = A(no_early_stop),
     .help = "mdm: run every step even after the EOS is final"},
};

static const char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *s = path + n;
    while (s > path && s[-1] != '/') s--;
    return s;
}

/* a float option as the user wrote it (0.9, not 0.89999998) */
static double short_real(float x) {
    char b[32];
    snprintf(b, sizeof b, "%g", (double)x);
    return strtod(b, NULL);
}

/* the settings that apply to the decoder, for the report */
static json_t *settings_json(const rf_eval_opts *o) {
    const rf_params *g = &o->gen;
    if (o->answers) return json_object();
    json_t *s = json_pack("{s:i, s:f, s:I}", "gen_length", g->gen_length, "temperature",
                          short_real(g->temperature), "seed", (json_int_t)g->seed);
    if (g->method == RF_METHOD_REFUSION) {
        json_object_set_new(s, "slot_size", json_integer(g->slot_size));
        json_object_set_new(s, "blocks", json_integer(g->n_blocks));
        json_object_set_new(s, "slot_threshold", json_real(short_real(g->slot_threshold)));
        json_object_set_new(s, "token_threshold", json_real(short_real(g->token_threshold)));
        json_object_set_new(s, "ar_verify", json_string(rf_ar_verify_name(g->ar_correct, g->ar_check_first)));
        json_object_set_new(s, "lookahead", json_boolean(g->lookahead));
        json_object_set_new(s, "jacobi", json_boolean(g->jacobi));
        json_object_set_new(s, "rolling", json_boolean(g->rolling));
    } else if (g->method == RF_METHOD_AR) {
        json_object_set_new(s, "top_k", json_integer(g->top_k));
        json_object_set_new(s, "top_p", json_real(short_real(g->top_p)));
    } else if (g->method == RF_METHOD_MDM) {
        json_object_set_new(s, "blocks", json_integer(g->n_blocks));
        json_object_set_new(s, "steps", json_integer(o->mdm.steps));
        json_object_set_new(s, "early_stop", json_boolean(o->mdm.early_stop));
    }
    return s;
}

static char *settings_line(const json_t *s) {
    char *line = json_dumps(s, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(4));
    return line ? line : rf_strdup("{}");
}

/* the meter counts this run's samples only (resumed ones are done already),
 * so that its ETA is this run's pace */
static void paper_progress(int done, int total, const rf_paper_totals *t, void *meter) {
    rf_meter *m = meter;
    char extra[128];
    int k = snprintf(extra, sizeof extra, "score %.1f%%  %.0f tok/s", t->n ? 100.0 * t->sum[0] / t->n : 0.0,
                     t->seconds > 0 ? t->tokens / t->seconds : 0.0);
    if (t->n_resumed) snprintf(extra + k, sizeof extra - (size_t)k, "  (+%d resumed)", t->n_resumed);
    m->total = total - t->n_resumed;
    if (done > t->n_resumed) rf_meter_update(m, done - t->n_resumed, extra);
}

/* The code tasks' sandbox: its directories in $TMPDIR (default /tmp), those
 * a killed run left removed first, a sample and its directory removed when
 * a signal ends eval; a kernel without Landlock is said once, as the
 * samples then read and write what file permissions allow (docs/eval.md). */
static void code_sandbox_setup(rf_sandbox_limits *box, int quiet) {
    const char *tmpdir = getenv("TMPDIR");
    if (tmpdir && *tmpdir) box->tmp_base = tmpdir;
    cli_cleanup_on_signals();
    int swept = rf_sandbox_sweep(box->tmp_base);
    if (swept && !quiet)
        fprintf(stderr, "refusion: eval: removed %d sandbox director%s left in %s by a killed run\n", swept,
                swept == 1 ? "y" : "ies", box->tmp_base ? box->tmp_base : "/tmp");
    if (!quiet && !rf_sandbox_landlock_abi())
        fprintf(stderr, "refusion: eval: note: this kernel has no Landlock: the code samples can read every "
                        "world-readable file and write where file permissions allow\n");
}

/* --task: one of the paper's benchmarks */
static int eval_paper(const eval_args *a, const rf_decode_opts *d) {
    int task = rf_paper_task_from_name(rf_decode_presets[a->task - 1].name);
    const char *tname = rf_paper_task_name(task);
    if (!a->data) {
        fprintf(stderr, "refusion: eval: --task %s needs --data FILE (the data set's test split, JSON Lines or JSON)\n",
                tname);
        return 2;
    }
    if (!a->answers && !a->src.model) {
        fprintf(stderr, "refusion: eval: -m MODEL is required (or --answers FILE)\n");
        return 2;
    }
    rf_paper_run_opts o;
    memset(&o, 0, sizeof o);
    o.task = task;
    o.answers = a->answers != NULL;
    o.gen = d->gen;
    rf_mdm_params_default(&o.mdm, &o.gen);
    if (d->gen.mdm_steps > 0) o.mdm.steps = d->gen.mdm_steps;
    o.mdm.early_stop = !a->no_early_stop;
    o.limit = a->limit;
    o.resume = a->resume;
    rf_sandbox_limits box;
    rf_sandbox_default(&box);
    box.wall_s = a->code_timeout, box.cpu_s = (int)(a->code_timeout + 0.999f);
    o.box = &box;
    if (task == RF_PAPER_HUMANEVAL || task == RF_PAPER_MBPP) code_sandbox_setup(&box, a->quiet);

    json_t *items = rf_paper_load(task, a->data), *answers = NULL;
    if (!items) {
        rf_print_error();
        return 1;
    }
    if (a->answers && !(answers = rf_paper_load_answers(a->answers))) {
        rf_print_error();
        json_decref(items);
        return 1;
    }
    rf_model m;
    rf_tokenizer *tok = NULL;
    int have_model = 0, rc = 1;
    char *def_out = NULL, *samples = NULL, *md_path = NULL, *json_path = NULL, *dir = NULL, *table = NULL, *js = NULL;
    json_t *doc = NULL;
    if (!a->answers) {
        if (rf_eval_load_model(&m, &tok, a->src.model, a->src.tokenizer)) goto fail;
        have_model = 1;
        o.gen.eos_id = rf_tok_eos_id(tok);
        o.gen.mask_id = rf_tok_mask_id(tok);
    }
    const char *out = a->out;
    if (!out) {
        const char *base = base_name(a->answers ? a->answers : a->src.model);
        size_t n = strlen(base) + 96;
        def_out = rf_malloc(n);
        snprintf(def_out, n, "results/%s-%s-%s", base, tname, rf_decoder_name(o.gen.method, o.answers));
        out = def_out;
    }
    size_t n = strlen(out) + 16;
    samples = rf_malloc(n), md_path = rf_malloc(n), json_path = rf_malloc(n), dir = rf_strdup(out);
    snprintf(samples, n, "%s.samples.jsonl", out);
    snprintf(md_path, n, "%s.md", out);
    snprintf(json_path, n, "%s.json", out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (rf_mkdir_p(dir)) goto fail;
    }
    o.samples_path = samples;

    int n_items = (int)json_array_size(items);
    rf_meter meter;
    rf_meter_init(&meter, tname, a->limit > 0 && a->limit < n_items ? a->limit : n_items, a->quiet);
    o.on_sample = paper_progress, o.user = &meter;
    rf_eval_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.answers = o.answers, eo.gen = o.gen, eo.mdm = o.mdm;
    json_t *settings = settings_json(&eo);
    if (a->task && d->preset == 0 && !o.answers)
        json_object_set_new(settings, "preset", json_string(tname));
    else if (d->preset && !o.answers)
        json_object_set_new(settings, "preset", json_string(rf_decode_presets[d->preset - 1].name));
    rf_paper_totals t;
    if (rf_paper_run(have_model ? &m : NULL, tok, items, answers, &o, &t)) {
        rf_meter_abort(&meter);
        json_decref(settings);
        goto fail;
    }
    json_t *config = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:i, s:o}", "task", tname, "harness_task",
                               rf_paper_harness_task(task), "model", a->answers ? a->answers : a->src.model, "decoder",
                               rf_decoder_name(o.gen.method, o.answers), "tokenizer", a->src.tokenizer, "data", a->data, "limit",
                               a->limit, "settings", settings);
    json_object_set_new(config, "samples", json_string(samples));
    doc = rf_paper_summary(task, &t, config);
    table = rf_paper_markdown(task, &t);
    js = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    char *sline = settings_line(json_object_get(config, "settings"));
    size_t md_cap = strlen(table) + strlen(sline) + strlen(a->data) + strlen(samples) + 1024;
    char *md = rf_malloc(md_cap);
    snprintf(md, md_cap,
             "# %s (%s), decoder %s\n\n- data: %s (%d samples)\n- settings: `%s`\n- per-sample results: %s\n"
             "- score in %%, stderr in points (lm-eval's sample standard error); tokens/s = answer tokens / "
             "decoder time; TPF as the decoder reports it; latency = mean decoder time per sample\n\n%s",
             tname, rf_paper_harness_task(task), rf_decoder_name(o.gen.method, o.answers), a->data, t.n, sline, samples, table);
    int ok = rf_write_file_atomic(md_path, md, strlen(md)) == 0 && rf_write_file_atomic(json_path, js, strlen(js)) == 0;
    free(md), free(sline);
    if (!ok) goto fail;
    if (a->json) printf("%s\n", js);
    else printf("%s", table);
    fprintf(stderr, "refusion: wrote %s, %s and %s\n", samples, md_path, json_path);
    rc = 0;
    goto done;
fail:
    rf_print_error();
done:
    free(js), free(table), json_decref(doc);
    free(def_out), free(samples), free(md_path), free(json_path), free(dir);
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(items), json_decref(answers);
    return rc;
}

/* --table FILE...: the summaries of several runs as one table */
static int eval_table(int argc, char **argv, int first) {
    int n = argc - first, rc = 1;
    if (n < 1) {
        fprintf(stderr, "refusion: eval: --table needs the PATH.json files of `eval --task` runs\n");
        return 2;
    }
    json_t **docs = rf_calloc((size_t)n, sizeof *docs);
    for (int i = 0; i < n; i++) {
        json_error_t e;
        if (!(docs[i] = json_load_file(argv[first + i], 0, &e))) {
            fprintf(stderr, "refusion: %s: line %d: %s\n", argv[first + i], e.line, e.text);
            goto done;
        }
    }
    char *t = rf_paper_table(docs, (const char *const *)(argv + first), n);
    if (!t) {
        rf_print_error();
        goto done;
    }
    fputs(t, stdout);
    free(t);
    rc = 0;
done:
    for (int i = 0; i < n; i++) json_decref(docs[i]);
    free(docs);
    return rc;
}

/* The command line into a and d: 0 to go on, 1 after --help, -1 after the
 * error line. With --table, the positional arguments start at *first. */
static int eval_parse(int argc, char **argv, eval_args *a, rf_decode_opts *d, int *first) {
    rf_sandbox_limits sb;
    rf_sandbox_default(&sb);
    eval_args def_a = {.code_timeout = (float)sb.wall_s};
    *a = def_a;
    rf_decode_opts def;
    rf_decode_opts_default(d);
    def = *d;
    const rf_opt_group groups[] = {
        RF_MODEL_SOURCE_GROUP(&a->src),
        {NULL, eval_opts, (int)(sizeof eval_opts / sizeof eval_opts[0]), a, NULL, &def_a},
        RF_DECODE_GROUP(d, &def),
    };
    const char *synopsis = "-m MODEL [options]\n"
                           "Decode every example of a task file, check the answers, report accuracy\n"
                           "and speed per task family and overall; --task NAME --data FILE: one of the\n"
                           "paper's benchmarks (gsm8k, math, humaneval, mbpp, arc-c, mmlu-pro, gpqa).";
    *first = argc;
    int prc = rf_args_parse("eval", synopsis, groups, 3, argc, argv, first);
    if (prc || a->table) return prc;
    if (*first < argc) {
        fprintf(stderr, "refusion: eval: unexpected argument '%s' (see --help)\n", argv[*first]);
        return -1;
    }
    if (a->task && !d->preset) {
        /* the task's preset is the default: parse again over it, so that the
         * options given still override it */
        int task = a->task;
        rf_decode_opts_default(d);
        rf_decode_opts_preset(d, task);
        *a = def_a;
        if (rf_args_parse("eval", synopsis, groups, 3, argc, argv, first)) return -1;
    }
    rf_decode_opts_finish(d);
    return rf_decode_opts_cli("eval", d) ? -1 : 0;
}

/* the report: the table on stdout (or, --json, the document), <out>.md and
 * <out>.json, each written atomically; 0, or 1 after the error line */
static int write_report(const eval_args *a, const rf_eval_opts *o, rf_eval_report *rep, const char *what,
                        const char *out) {
    const char *data = a->data;
    json_t *settings = settings_json(o);
    char *sline = settings_line(settings), *table = rf_eval_markdown_table(rep);
    if (!a->json)
        printf("%s, decoder %s %s, %s (%d examples)\n\n%s", what, rf_decoder_name(o->gen.method, o->answers), sline,
               data, rep->all.n, table);
    size_t n = strlen(out) + 8;
    char *md_path = rf_malloc(n), *json_path = rf_malloc(n), *dir = rf_strdup(out);
    snprintf(md_path, n, "%s.md", out);
    snprintf(json_path, n, "%s.json", out);
    char *slash = strrchr(dir, '/');
    int ok = 1;
    if (slash && slash != dir) {
        *slash = '\0';
        ok = rf_mkdir_p(dir) == 0;
    }
    size_t md_cap = strlen(table) + strlen(sline) + strlen(what) + strlen(data) + 512;
    char *md = rf_malloc(md_cap);
    snprintf(md, md_cap,
             "# Evaluation: %s, decoder %s\n\n"
             "- data: %s (%d examples)\n- settings: `%s`\n- tokens: answer tokens up to and including "
             "the first EOS; tokens/s = tokens / decoder time; TPF as the decoder reports it; "
             "latency = mean decoder time per example\n\n%s",
             what, rf_decoder_name(o->gen.method, o->answers), data, rep->all.n, sline, table);
    json_t *doc = json_pack("{s:s, s:s, s:s?, s:s, s:O, s:o, s:O}", "model", what, "decoder",
                            rf_decoder_name(o->gen.method, o->answers), "tokenizer", a->src.tokenizer, "data", data,
                            "settings", settings, "metrics", rf_eval_metrics_json(rep), "examples", rep->examples);
    char *js = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    if (ok) ok = rf_write_file_atomic(md_path, md, strlen(md)) == 0;
    if (ok) ok = rf_write_file_atomic(json_path, js, strlen(js)) == 0;
    if (ok && a->json) printf("%s\n", js);
    if (ok) fprintf(stderr, "refusion: wrote %s and %s\n", md_path, json_path);
    else rf_print_error();
    free(js);
    json_decref(doc);
    free(md), free(md_path), free(json_path), free(dir), free(sline), free(table);
    json_decref(settings);
    return ok ? 0 : 1;
}

/* the task file and, with --answers, the answers to score; 0, or 1 after the error line */
static int load_inputs(const eval_args *a, json_t **examples, json_t **answers) {
    const char *data = a->data;
    *answers = NULL;
    if (access(data, R_OK)) {
        fprintf(stderr, "refusion: eval: cannot read the task file %s: %s (write one with `refusion tasks -o %s`, "
                        "or give --data FILE)\n", data, strerror(errno), !strcmp(data, "data/test.json") ? "data" : "DIR");
        return 1;
    }
    if (!(*examples = rf_tasks_load(data, 1))) {
        rf_print_error();
        return 1;
    }
    if (a->answers) {
        json_error_t jerr;
        *answers = json_load_file(a->answers, 0, &jerr);
        if (!*answers) {
            fprintf(stderr, "refusion: %s: line %d: %s\n", a->answers, jerr.line, jerr.text);
            json_decref(*examples);
            return 1;
        }
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    eval_args a;
    rf_decode_opts d;
    int first;
    int prc = eval_parse(argc, argv, &a, &d, &first);
    if (prc) return prc > 0 ? 0 : 2;
    if (a.table) return eval_table(argc, argv, first);
    /* the checkpoint's recommended settings under the flags and the preset
     * (EOS: the tokenizer's, below) */
    if (!a.answers && rf_decode_opts_from_config(&d, a.src.model, -1)) {
        fprintf(stderr, "refusion: eval: %s\n", rf_last_error());
        return 1;
    }
    if (a.task) return eval_paper(&a, &d);
    if (!a.data) a.data = "data/test.json";
    const char *model_dir = a.src.model, *answers_path = a.answers;
    if (d.threads > 0) omp_set_num_threads(d.threads);

    rf_eval_opts o;
    memset(&o, 0, sizeof o);
    o.answers = answers_path != NULL;
    if (!answers_path && !model_dir) {
        fprintf(stderr, "refusion: eval: -m MODEL is required (or --answers FILE)\n");
        return 2;
    }
    o.gen = d.gen;
    rf_mdm_params_default(&o.mdm, &o.gen);
    if (d.gen.mdm_steps > 0) o.mdm.steps = d.gen.mdm_steps;
    o.mdm.early_stop = !a.no_early_stop;
    o.limit = a.limit;

    json_t *examples, *answers;
    if (load_inputs(&a, &examples, &answers)) return 1;
    rf_model m;
    rf_tokenizer *tok = NULL;
    int have_model = 0, rc = 1;
    if (!answers_path) {
        if (rf_eval_load_model(&m, &tok, model_dir, a.src.tokenizer)) {
            rf_print_error();
            goto done;
        }
        have_model = 1;
        /* the decoders take EOS and mask from the tokenizer the model was trained with */
        if (!d.ignore_eos) o.gen.eos_id = rf_tok_eos_id(tok);
        o.gen.mask_id = rf_tok_mask_id(tok);
    }
    char *def_out = NULL;
    const char *out = a.out;
    if (!out) {
        const char *base = answers_path ? base_name(answers_path) : base_name(model_dir);
        size_t n = strlen(base) + 64;
        def_out = rf_malloc(n);
        snprintf(def_out, n, "results/%s-%s", base, rf_decoder_name(o.gen.method, o.answers));
        out = def_out;
    }
    rf_eval_report rep;
    rf_meter meter;
    int n_ex = (int)json_array_size(examples);
    rf_meter_init(&meter, "eval", a.limit > 0 && a.limit < n_ex ? a.limit : n_ex, a.quiet);
    /* "eval: [###...] 37/300  acc 45.9%  120 tok/s  eta 1m20s" */
    o.on_example = rf_meter_eval_example, o.user = &meter;
    if (rf_eval_run(have_model ? &m : NULL, tok, examples, answers, &o, &rep)) {
        rf_meter_abort(&meter); /* end the line */
        rf_print_error();
    } else {
        rc = write_report(&a, &o, &rep, answers_path ? answers_path : model_dir, out);
    }
    rf_eval_report_free(&rep);
    free(def_out);
done:
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(examples);
    json_decref(answers);
    return rc;
}
