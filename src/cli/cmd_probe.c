/* cmd_probe.c - `refusion probe`: teacher-forced accuracy of a model's AR
 * head and mask head on held-out answers, per position class (tasks/probe.h),
 * and optionally the decoder's per-token acceptance statistics on the same
 * examples (tasks/eval.h). Prints Markdown; --json adds JSON. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "tasks/eval.h"
#include "tasks/probe.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion probe -m MODEL --data FILE [options]\n"
            "Teacher-forced on the task file's answers: cross-entropy, top-1 accuracy and\n"
            "probability of the true token for the AR head (natural order), the mask head\n"
            "slot by slot (earlier slots committed) and the mask head with the whole answer\n"
            "masked (the first plan's view), per position class: answer start, slot\n"
            "boundary / slot-first, later in slot.\n\n"
            "  -m, --model DIR        checkpoint (its tokenizer.json is used)\n"
            "  --tokenizer PATH       tokenizer.json or folder (default: the model's)\n"
            "  --data FILE            task file (default data/test.json)\n"
            "  --slot-size N          slot size of the position classes (default 8)\n"
            "  --limit N              only the first N examples\n"
            "  --threads N            OpenMP threads\n"
            "  --json [FILE]          JSON to FILE (the table still printed), or alone: JSON\n"
            "                         on stdout instead of the tables\n"
            "  --quiet                no progress on stderr\n"
            "  --decode               also decode the examples and report accuracy, speed and\n"
            "                         how the committed tokens got in (as refusion eval)\n"
            "decoding (with --decode; defaults as refusion eval):\n"
            "  --decoder NAME         refusion | ar (default refusion)\n"
            "  --gen-length N  --blocks N  --slot-threshold X  --token-threshold X\n"
            "  --temperature X  --seed N\n"
            "  --ar-verify MODE       off (default) | correct | first | both: AR-verified ReFusion\n"
            "                         (see refusion eval --help)\n");
}

static void on_done(int done, int total, void *user) {
    (void)user;
    fprintf(stderr, "\rprobe: %d/%d examples%s", done, total, done == total ? "\n" : "");
    fflush(stderr);
}

int cmd_probe(int argc, char **argv) {
    const char *model_dir = NULL, *tok_path = NULL, *data = "data/test.json", *json_path = NULL;
    const char *dec_name = "refusion";
    long slot_size = 8, limit = 0, threads = 0, gen_length = 128, blocks = 2, seed = 0;
    float slot_thr = 0.9f, tok_thr = 0.4f, temperature = 0.0f;
    int quiet = 0, json_stdout = 0, decode = 0, ar_correct = 0, ar_check_first = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--decode")) { decode = 1; continue; }
        if (!strcmp(a, "--json")) {
            if (i + 1 < argc && argv[i + 1][0] != '-') json_path = argv[++i];
            else json_stdout = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "refusion: probe: unknown option or missing value: '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--tokenizer")) tok_path = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--decoder")) dec_name = v;
        else if (!strcmp(a, "--slot-size")) rc = rf_arg_long("probe", a, v, 1, 1000000, &slot_size);
        else if (!strcmp(a, "--limit")) rc = rf_arg_long("probe", a, v, 0, 100000000, &limit);
        else if (!strcmp(a, "--threads")) rc = rf_arg_long("probe", a, v, 1, 1024, &threads);
        else if (!strcmp(a, "--gen-length")) rc = rf_arg_long("probe", a, v, 1, 1000000, &gen_length);
        else if (!strcmp(a, "--blocks")) rc = rf_arg_long("probe", a, v, 1, 1000000, &blocks);
        else if (!strcmp(a, "--seed")) rc = rf_arg_long("probe", a, v, 0, 0x7fffffffL, &seed);
        else if (!strcmp(a, "--temperature")) rc = rf_arg_float("probe", a, v, &temperature);
        else if (!strcmp(a, "--slot-threshold")) rc = rf_arg_float("probe", a, v, &slot_thr);
        else if (!strcmp(a, "--token-threshold")) rc = rf_arg_float("probe", a, v, &tok_thr);
        else if (!strcmp(a, "--ar-verify")) rc = rf_arg_ar_verify("probe", a, v, &ar_correct, &ar_check_first);
        else {
            fprintf(stderr, "refusion: probe: unknown option '%s'\n", a);
            return 2;
        }
        if (rc) return 2;
    }
    if (!model_dir) {
        fprintf(stderr, "refusion: probe: -m MODEL is required\n");
        return 2;
    }
    rf_decoder_kind dec;
    if (!strcmp(dec_name, "refusion")) dec = RF_DEC_REFUSION;
    else if (!strcmp(dec_name, "ar")) dec = RF_DEC_AR;
    else {
        fprintf(stderr, "refusion: probe: --decoder: unknown decoder '%s' (refusion, ar)\n", dec_name);
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);

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
    if (rf_model_load(&m, model_dir)) goto out;
    have_model = 1;
    tok = rf_tok_load(tok_path ? tok_path : model_dir);
    if (!tok) goto out;
    if (rf_tok_vocab_size(tok) > m.cfg.vocab_size) {
        rf_set_error("%s: the tokenizer has %d ids but the model only %d", tok_path ? tok_path : model_dir,
                     rf_tok_vocab_size(tok), m.cfg.vocab_size);
        goto out;
    }

    rf_probe_stats st;
    memset(&st, 0, sizeof st);
    st.slot_size = (int)slot_size;
    int show = !quiet && isatty(2);
    if (rf_probe_run(&m, tok, examples, (int)limit, &st, show ? on_done : NULL, NULL)) {
        if (show) fputc('\n', stderr);
        goto out;
    }
    table = rf_probe_markdown(&st);
    doc = json_pack("{s:s, s:s?, s:s, s:o}", "model", model_dir, "tokenizer", tok_path, "data", data, "probe",
                    rf_probe_json(&st));

    if (decode) {
        rf_eval_opts o;
        memset(&o, 0, sizeof o);
        o.decoder = dec;
        rf_gen_params_default(&o.gen);
        o.gen.gen_length = (int)gen_length;
        o.gen.slot_size = (int)slot_size;
        o.gen.n_blocks = (int)blocks;
        o.gen.slot_threshold = slot_thr;
        o.gen.token_threshold = tok_thr;
        o.gen.temperature = temperature;
        o.gen.seed = (uint64_t)seed;
        o.gen.ar_correct = ar_correct;
        o.gen.ar_check_first = ar_check_first;
        o.gen.eos_id = rf_tok_eos_id(tok);
        o.gen.mask_id = rf_tok_mask_id(tok);
        o.limit = (int)limit;
        o.progress = show;
        if (rf_eval_run(&m, tok, examples, NULL, &o, &rep)) goto out;
        dec_table = rf_eval_markdown_table(&rep);
        json_t *settings = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:s}", "decoder", dec_name,
                                     "gen_length", (int)gen_length, "slot_size", (int)slot_size, "blocks",
                                     (int)blocks, "slot_threshold", (double)slot_thr, "token_threshold",
                                     (double)tok_thr, "temperature", (double)temperature, "seed",
                                     (json_int_t)seed, "ar_verify",
                                     rf_ar_verify_name(ar_correct, ar_check_first));
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
            printf("\ndecoded with %s (gen %ld, blocks %ld, thresholds %g / %g, ar-verify %s)\n\n%s", dec_name,
                   gen_length, blocks, (double)slot_thr, (double)tok_thr,
                   rf_ar_verify_name(ar_correct, ar_check_first), dec_table);
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
