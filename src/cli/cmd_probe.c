/* cmd_probe.c - `refusion probe`: teacher-forced accuracy of a model's AR
 * head and mask head on held-out answers, per position class (tasks/probe.h),
 * and optionally the decoder's per-token acceptance statistics on the same
 * examples (tasks/eval.h). Prints Markdown; --json adds JSON. */
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "tasks/eval.h"
#include "tasks/probe.h"

typedef struct {
    rf_model_source src; /* -m, --tokenizer */
    const char *data;
    int limit, quiet, json, decode;
} probe_args;

#define A(f) offsetof(probe_args, f)
static const rf_opt probe_opts[] = {
    {.name = "data", .type = RF_OPT_STR, .offset = A(data), .metavar = "FILE", .help = "task file"},
    {.name = "limit", .type = RF_OPT_INT, .lo = 0, .hi = 100000000, .offset = A(limit), .metavar = "N",
     .help = "only the first N examples (0 = all)"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = A(json),
     .help = "--json FILE: JSON to FILE (the table still printed); --json alone: JSON on stdout instead of "
             "the tables"},
    {.name = "quiet", .type = RF_OPT_FLAG, .offset = A(quiet), .help = "no progress line on stderr (a terminal: redrawn 4 times a second; otherwise a line every 10%)"},
    {.name = "decode", .type = RF_OPT_FLAG, .offset = A(decode),
     .help = "also decode the examples and report accuracy, speed and how the committed tokens got in (as "
             "refusion eval); --slot-size is also the slot of the position classes"},
};

static void on_done(int done, int total, void *user) {
    (void)total;
    rf_meter_update(user, done, NULL);
}

int cmd_probe(int argc, char **argv) {
    probe_args a = {.data = "data/test.json"}, def_a = a;
    rf_decode_opts d, def;
    rf_decode_opts_default(&d);
    def = d;
    const rf_opt_group groups[] = {
        RF_MODEL_SOURCE_GROUP(&a.src),
        {NULL, probe_opts, (int)(sizeof probe_opts / sizeof probe_opts[0]), &a, NULL, &def_a},
        RF_DECODE_GROUP(&d, &def),
    };
    int pos = 0;
    int prc = rf_args_parse("probe", "-m MODEL --data FILE [options]\n"
                            "Teacher-forced on the task file's answers: cross-entropy, top-1 accuracy and\n"
                            "probability of the true token for the AR head (natural order), the mask head\n"
                            "slot by slot (earlier slots committed) and the mask head with the whole answer\n"
                            "masked (the first plan's view), per position class: answer start, slot\n"
                            "boundary / slot-first, later in slot.",
                            groups, 3, argc, argv, &pos);
    if (prc) return prc > 0 ? 0 : 2;
    rf_decode_opts_finish(&d);
    if (rf_decode_opts_cli("probe", &d)) return 2;
    /* --json FILE: the file is the one positional argument */
    const char *json_path = NULL;
    if (pos < argc && a.json && pos + 1 == argc) json_path = argv[pos++];
    if (pos < argc) {
        fprintf(stderr, "refusion: probe: unexpected argument '%s' (see --help)\n", argv[pos]);
        return 2;
    }
    int json_stdout = a.json && !json_path, quiet = a.quiet, decode = a.decode;
    const char *model_dir = a.src.model, *tok_path = a.src.tokenizer, *data = a.data;
    long slot_size = d.gen.slot_size, limit = a.limit;
    if (!model_dir) {
        fprintf(stderr, "refusion: probe: -m MODEL is required\n");
        return 2;
    }
    if (d.gen.method == RF_METHOD_MDM) {
        fprintf(stderr, "refusion: probe: --decoder: refusion or ar (mdm has no AR head to probe)\n");
        return 2;
    }
    const char *dec_name = rf_method_name(d.gen.method);
    if (d.threads > 0) omp_set_num_threads(d.threads);

    json_t *examples = rf_tasks_load(data, decode), *doc = NULL;
    if (!examples) {
        rf_print_error();
        return 1;
    }
    rf_model m;
    rf_tokenizer *tok = NULL;
    int have_model = 0, rc = 1;
    char *table = NULL, *dec_table = NULL, *js = NULL;
    rf_eval_report rep;
    memset(&rep, 0, sizeof rep);
    if (rf_eval_load_model(&m, &tok, model_dir, tok_path)) goto out;
    have_model = 1;

    rf_probe_stats st;
    memset(&st, 0, sizeof st);
    st.slot_size = (int)slot_size;
    int n_ex = (int)json_array_size(examples);
    if (limit > 0 && limit < n_ex) n_ex = (int)limit;
    rf_meter meter;
    rf_meter_init(&meter, "probe", n_ex, quiet);
    if (rf_probe_run(&m, tok, examples, (int)limit, &st, on_done, &meter)) {
        rf_meter_abort(&meter);
        goto out;
    }
    table = rf_probe_markdown(&st);
    doc = json_pack("{s:s, s:s?, s:s, s:o}", "model", model_dir, "tokenizer", tok_path, "data", data, "probe",
                    rf_probe_json(&st));

    if (decode) {
        rf_eval_opts o;
        memset(&o, 0, sizeof o);
        o.gen = d.gen;
        o.gen.eos_id = rf_tok_eos_id(tok);
        o.gen.mask_id = rf_tok_mask_id(tok);
        o.limit = (int)limit;
        rf_meter_init(&meter, "probe --decode", n_ex, quiet);
        o.on_example = rf_meter_eval_example, o.user = &meter;
        if (rf_eval_run(&m, tok, examples, NULL, &o, &rep)) {
            rf_meter_abort(&meter);
            goto out;
        }
        dec_table = rf_eval_markdown_table(&rep);
        json_t *settings = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:s}", "decoder", dec_name,
                                     "gen_length", d.gen.gen_length, "slot_size", d.gen.slot_size, "blocks",
                                     d.gen.n_blocks, "slot_threshold", (double)d.gen.slot_threshold,
                                     "token_threshold", (double)d.gen.token_threshold, "temperature",
                                     (double)d.gen.temperature, "seed", (json_int_t)d.gen.seed, "ar_verify",
                                     rf_ar_verify_name(d.gen.ar_correct, d.gen.ar_check_first));
        json_object_set_new(doc, "decode",
                            json_pack("{s:o, s:o}", "settings", settings, "metrics", rf_eval_metrics_json(&rep)));
    }

    js = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(8));
    if (json_stdout) {
        printf("%s\n", js);
    } else {
        printf("%s, %s (%d examples), slot size %ld; teacher-forced on the answers (response + EOS)\n\n%s",
               model_dir, data, st.n_examples, slot_size, table);
        if (decode)
            printf("\ndecoded with %s (gen %d, blocks %d, thresholds %g / %g, ar-verify %s)\n\n%s", dec_name,
                   d.gen.gen_length, d.gen.n_blocks, (double)d.gen.slot_threshold, (double)d.gen.token_threshold,
                   rf_ar_verify_name(d.gen.ar_correct, d.gen.ar_check_first), dec_table);
    }
    if (json_path) {
        if (rf_write_file_atomic(json_path, js, strlen(js))) goto out;
        fprintf(stderr, "refusion: wrote %s\n", json_path);
    }
    rc = 0;
out:
    if (rc) rf_print_error();
    free(js);
    free(table);
    free(dec_table);
    json_decref(doc);
    rf_eval_report_free(&rep);
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(examples);
    return rc;
}
