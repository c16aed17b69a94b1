/* cmd_eval.c - `refusion eval`: run a model with a decoder on a task file,
 * check every answer, print the per-family table and write it as
 * <out>.md and <out>.json (metrics, settings and every answer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "tasks/eval.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion eval -m MODEL [options]\n"
            "Decode every example of a task file, check the answers, report accuracy\n"
            "and speed per task family and overall.\n\n"
            "  -m, --model DIR        checkpoint dir or .gguf file (its tokenizer is used)\n"
            "  --tokenizer PATH       tokenizer.json or folder (default: the model's)\n"
            "  --data FILE            task file (default data/test.json)\n"
            "  --decoder NAME         refusion | ar | mdm (default refusion)\n"
            "  --answers FILE         no model: check a JSON list of answer strings\n"
            "  --limit N              only the first N examples\n"
            "  -o, --out PATH         write PATH.md and PATH.json\n"
            "                         (default results/<model>-<decoder>)\n"
            "  --quiet                no progress bar\n"
            "decoding:\n"
            "  --gen-length N         answer length (default 128)\n"
            "  --temperature X        0 = greedy (default 0)\n"
            "  --seed N               sampling seed (default 0)\n"
            "  --slot-size N          refusion slot size (default 8)\n"
            "  --blocks N             serial blocks (default: refusion 2, mdm gen-length/32)\n"
            "  --slot-threshold X     refusion (default 0.9)\n"
            "  --token-threshold X    refusion (default 0.4)\n"
            "  --ar-verify MODE       refusion, beyond the paper (REFUSION.md 3b): off (default,\n"
            "                         the reference), correct (a rejected token becomes the AR\n"
            "                         head's choice), first (a slot's first token is checked by\n"
            "                         the AR head), both\n"
            "  --lookahead            refusion, beyond the paper (REFUSION.md 3c): a global\n"
            "                         verification also feeds the next plan's masks (same\n"
            "                         answers, fewer model calls)\n"
            "  --jacobi               refusion, beyond the paper (REFUSION.md 3d): infilling\n"
            "                         re-verifies its drafts without re-drafting (one call per\n"
            "                         iteration instead of two)\n"
            "  --top-k N  --top-p X   ar sampling (default off)\n"
            "  --steps N              mdm diffusion steps (default gen-length)\n"
            "  --no-early-stop        mdm: run every step even after the EOS is final\n");
}

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
    const char *model_dir = NULL, *tok_path = NULL, *data = "data/test.json", *answers_path = NULL;
    const char *dec_name = "refusion", *out = NULL;
    long gen_length = 128, slot_size = 8, blocks = -1, steps = -1, seed = 0, top_k = 0, limit = 0;
    float temperature = 0.0f, slot_thr = 0.9f, tok_thr = 0.4f, top_p = 1.0f;
    int ar_correct = 0, ar_check_first = 0, lookahead = 0, jacobi = 0;
    int quiet = 0, early_stop = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--no-early-stop")) { early_stop = 0; continue; }
        if (!strcmp(a, "--lookahead")) { lookahead = 1; continue; }
        if (!strcmp(a, "--jacobi")) { jacobi = 1; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "refusion: eval: unknown option or missing value: '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--tokenizer")) tok_path = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--decoder")) dec_name = v;
        else if (!strcmp(a, "--answers")) answers_path = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--limit")) rc = rf_arg_long("eval", a, v, 0, 100000000, &limit);
        else if (!strcmp(a, "--gen-length")) rc = rf_arg_long("eval", a, v, 1, 1000000, &gen_length);
        else if (!strcmp(a, "--slot-size")) rc = rf_arg_long("eval", a, v, 1, 1000000, &slot_size);
        else if (!strcmp(a, "--blocks")) rc = rf_arg_long("eval", a, v, 1, 1000000, &blocks);
        else if (!strcmp(a, "--steps")) rc = rf_arg_long("eval", a, v, 1, 1000000, &steps);
        else if (!strcmp(a, "--seed")) rc = rf_arg_long("eval", a, v, 0, 0x7fffffffL, &seed);
        else if (!strcmp(a, "--top-k")) rc = rf_arg_long("eval", a, v, 0, 100000000, &top_k);
        else if (!strcmp(a, "--temperature")) rc = rf_arg_float("eval", a, v, &temperature);
        else if (!strcmp(a, "--slot-threshold")) rc = rf_arg_float("eval", a, v, &slot_thr);
        else if (!strcmp(a, "--token-threshold")) rc = rf_arg_float("eval", a, v, &tok_thr);
        else if (!strcmp(a, "--ar-verify")) rc = rf_arg_ar_verify("eval", a, v, &ar_correct, &ar_check_first);
        else if (!strcmp(a, "--top-p")) rc = rf_arg_float("eval", a, v, &top_p);
        else {
            fprintf(stderr, "refusion: eval: unknown option '%s'\n", a);
            return 2;
        }
        if (rc) return 2;
    }

    rf_eval_opts o;
    memset(&o, 0, sizeof o);
    if (answers_path) o.decoder = RF_DEC_ANSWERS;
    else if (!strcmp(dec_name, "refusion")) o.decoder = RF_DEC_REFUSION;
    else if (!strcmp(dec_name, "ar")) o.decoder = RF_DEC_AR;
    else if (!strcmp(dec_name, "mdm")) o.decoder = RF_DEC_MDM;
    else {
        fprintf(stderr, "refusion: eval: --decoder: unknown decoder '%s' (refusion, ar, mdm)\n", dec_name);
        return 2;
    }
    if (!answers_path && !model_dir) {
        fprintf(stderr, "refusion: eval: -m MODEL is required (or --answers FILE)\n");
        return 2;
    }
    rf_gen_params_default(&o.gen);
    o.gen.gen_length = (int)gen_length;
    o.gen.slot_size = (int)slot_size;
    o.gen.n_blocks = (int)(blocks > 0 ? blocks
                           : o.decoder == RF_DEC_MDM ? (gen_length + 31) / 32 : 2);
    o.gen.slot_threshold = slot_thr;
    o.gen.token_threshold = tok_thr;
    o.gen.ar_correct = ar_correct;
    o.gen.ar_check_first = ar_check_first;
    o.gen.lookahead = lookahead;
    o.gen.jacobi = jacobi;
    o.gen.temperature = temperature;
    o.gen.top_k = (int)top_k;
    o.gen.top_p = top_p;
    o.gen.seed = (uint64_t)seed;
    rf_mdm_params_default(&o.mdm, &o.gen);
    if (steps > 0) o.mdm.steps = (int)steps;
    o.mdm.early_stop = early_stop;
    o.limit = (int)limit;
    o.progress = !quiet;

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
        if (rf_model_load(&m, model_dir)) goto fail;
        have_model = 1;
        tok = rf_tok_load(tok_path ? tok_path : model_dir);
        if (!tok) goto fail;
        if (rf_tok_vocab_size(tok) > m.cfg.vocab_size) {
            rf_set_error("%s: the tokenizer has %d ids but the model only %d", tok_path ? tok_path : model_dir,
                         rf_tok_vocab_size(tok), m.cfg.vocab_size);
            goto fail;
        }
        /* the decoders take EOS and mask from the tokenizer the model was trained with */
        o.gen.eos_id = rf_tok_eos_id(tok);
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
    if (rf_eval_run(have_model ? &m : NULL, tok, examples, answers, &o, &rep)) {
        if (o.progress && isatty(2) && rep.all.n > 0) fputc('\n', stderr); /* end the bar's line */
        rf_eval_report_free(&rep);
        free(def_out);
        goto fail;
    }

    json_t *settings = settings_json(&o);
    char *sline = settings_line(settings), *table = rf_eval_markdown_table(&rep);
    const char *what = answers_path ? answers_path : model_dir;
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
