/* cmd_eval.c - `refusion eval`: run a model with a decoder on a task file,
 * check every answer, print the per-family table (--json: the JSON report
 * instead) and write it as <out>.md and <out>.json (metrics, settings and
 * every answer). */
#include <errno.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "tasks/eval.h"

typedef struct {
    const char *model, *tokenizer, *data, *answers, *out;
    int limit, quiet, no_early_stop, json;
} eval_args;

#define A(f) offsetof(eval_args, f)
static const rf_opt eval_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "MODEL",
     .help = "checkpoint dir or .gguf file (its tokenizer is used)"},
    {.name = "tokenizer", .type = RF_OPT_STR, .offset = A(tokenizer), .metavar = "PATH",
     .help = "tokenizer.json or folder (default: the model's)"},
    {.name = "data", .type = RF_OPT_STR, .offset = A(data), .metavar = "FILE",
     .help = "task file written by `refusion tasks`"},
    {.name = "answers", .type = RF_OPT_STR, .offset = A(answers), .metavar = "FILE",
     .help = "no model: check a JSON list of answer strings"},
    {.name = "limit", .type = RF_OPT_INT, .lo = 0, .hi = 100000000, .offset = A(limit), .metavar = "N",
     .help = "only the first N examples (0 = all)"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "PATH",
     .help = "write PATH.md and PATH.json (default results/<model>-<decoder>)"},
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
    const rf_gen_params *g = &o->gen;
    if (o->decoder == RF_DEC_ANSWERS) return json_object();
    json_t *s = json_pack("{s:i, s:f, s:I}", "gen_length", g->gen_length, "temperature",
                          short_real(g->temperature), "seed", (json_int_t)g->seed);
    if (o->decoder == RF_DEC_REFUSION) {
        json_object_set_new(s, "slot_size", json_integer(g->slot_size));
        json_object_set_new(s, "blocks", json_integer(g->n_blocks));
        json_object_set_new(s, "slot_threshold", json_real(short_real(g->slot_threshold)));
        json_object_set_new(s, "token_threshold", json_real(short_real(g->token_threshold)));
        json_object_set_new(s, "ar_verify", json_string(rf_ar_verify_name(g->ar_correct, g->ar_check_first)));
        json_object_set_new(s, "lookahead", json_boolean(g->lookahead));
        json_object_set_new(s, "jacobi", json_boolean(g->jacobi));
        json_object_set_new(s, "rolling", json_boolean(g->rolling));
    } else if (o->decoder == RF_DEC_AR) {
        json_object_set_new(s, "top_k", json_integer(g->top_k));
        json_object_set_new(s, "top_p", json_real(short_real(g->top_p)));
    } else if (o->decoder == RF_DEC_MDM) {
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

int cmd_eval(int argc, char **argv) {
    eval_args a = {.data = "data/test.json"}, def_a = a;
    rf_decode_opts d, def;
    rf_decode_opts_default(&d);
    def = d;
    const rf_opt_group groups[] = {
        {NULL, eval_opts, (int)(sizeof eval_opts / sizeof eval_opts[0]), &a, &def_a},
        RF_DECODE_GROUP(&d, &def),
    };
    unsigned char *src[2] = {NULL, d.src};
    int prc = rf_args_parse_src("eval", "-m MODEL [options]\n"
                            "Decode every example of a task file, check the answers, report accuracy\n"
                            "and speed per task family and overall.",
                            groups, 2, argc, argv, NULL, src);
    if (prc) return prc > 0 ? 0 : 2;
    rf_decode_opts_finish(&d);
    if (rf_decode_opts_cli("eval", &d)) return 2;
    /* the checkpoint's recommended settings under the flags (EOS: the tokenizer's, below) */
    if (!a.answers && rf_decode_opts_from_config(&d, a.model, -1)) {
        fprintf(stderr, "refusion: eval: %s\n", rf_last_error());
        return 1;
    }
    const char *model_dir = a.model, *tok_path = a.tokenizer, *data = a.data, *answers_path = a.answers,
               *out = a.out;
    if (d.threads > 0) omp_set_num_threads(d.threads);

    rf_eval_opts o;
    memset(&o, 0, sizeof o);
    o.decoder = answers_path ? RF_DEC_ANSWERS : (rf_decoder_kind)d.decoder;
    if (!answers_path && !model_dir) {
        fprintf(stderr, "refusion: eval: -m MODEL is required (or --answers FILE)\n");
        return 2;
    }
    o.gen = d.gen;
    rf_mdm_params_default(&o.mdm, &o.gen);
    if (d.steps > 0) o.mdm.steps = d.steps;
    o.mdm.early_stop = !a.no_early_stop;
    o.limit = a.limit;

    if (access(data, R_OK)) {
        fprintf(stderr, "refusion: eval: cannot read the task file %s: %s (write one with `refusion tasks -o %s`, "
                        "or give --data FILE)\n", data, strerror(errno), !strcmp(data, "data/test.json") ? "data" : "DIR");
        return 1;
    }
    json_t *examples = rf_tasks_load(data, 1), *answers = NULL;
    if (!examples) {
        rf_print_error();
        return 1;
    }
    if (answers_path) {
        json_error_t jerr;
        answers = json_load_file(answers_path, 0, &jerr);
        if (!answers) {
            fprintf(stderr, "refusion: %s: line %d: %s\n", answers_path, jerr.line, jerr.text);
            json_decref(examples);
            return 1;
        }
    }
    rf_model m;
    rf_tokenizer *tok = NULL;
    int have_model = 0, rc = 1;
    if (!answers_path) {
        if (rf_eval_load_model(&m, &tok, model_dir, tok_path)) goto fail;
        have_model = 1;
        /* the decoders take EOS and mask from the tokenizer the model was trained with */
        if (!d.ignore_eos) o.gen.eos_id = rf_tok_eos_id(tok);
        o.gen.mask_id = rf_tok_mask_id(tok);
    }

    char *def_out = NULL;
    if (!out) {
        const char *base = answers_path ? base_name(answers_path) : base_name(model_dir);
        size_t n = strlen(base) + 64;
        def_out = rf_malloc(n);
        snprintf(def_out, n, "results/%s-%s", base, rf_decoder_name(o.decoder));
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
        rf_eval_report_free(&rep);
        free(def_out);
        goto fail;
    }

    json_t *settings = settings_json(&o);
    char *sline = settings_line(settings), *table = rf_eval_markdown_table(&rep);
    const char *what = answers_path ? answers_path : model_dir;
    if (!a.json)
        printf("%s, decoder %s %s, %s (%d examples)\n\n%s", what, rf_decoder_name(o.decoder), sline, data,
               rep.all.n, table);

    /* <out>.md and <out>.json, each written atomically */
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
             what, rf_decoder_name(o.decoder), data, rep.all.n, sline, table);
    json_t *doc = json_pack("{s:s, s:s, s:s?, s:s, s:O, s:o, s:O}", "model", what, "decoder",
                            rf_decoder_name(o.decoder), "tokenizer", tok_path, "data", data, "settings",
                            settings, "metrics", rf_eval_metrics_json(&rep), "examples", rep.examples);
    char *js = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    if (ok) ok = rf_write_file_atomic(md_path, md, strlen(md)) == 0;
    if (ok) ok = rf_write_file_atomic(json_path, js, strlen(js)) == 0;
    if (ok && a.json) printf("%s\n", js);
    if (ok) {
        fprintf(stderr, "refusion: wrote %s and %s\n", md_path, json_path);
        rc = 0;
    } else {
        rf_print_error();
    }
    free(js);
    json_decref(doc);
    free(md);
    free(md_path);
    free(json_path);
    free(dir);
    free(sline);
    free(table);
    json_decref(settings);
    rf_eval_report_free(&rep);
    free(def_out);
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(examples);
    json_decref(answers);
    return rc;
fail:
    rf_print_error();
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(examples);
    json_decref(answers);
    return 1;
}
