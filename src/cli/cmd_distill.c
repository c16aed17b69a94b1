/* cmd_distill.c - `refusion distill`: self-distillation data. Decode every
 * query of a training file with the model's own AR head, greedily (what
 * `refusion generate --decoder ar` answers, and what the rolling slot's
 * verifier accepts), and write the file again with those answers as the
 * responses. Fine-tuning on it (`refusion train --init MODEL --data OUT`)
 * teaches the mask head to draft what the AR head will accept rather than
 * what the data says, as speculative drafters are trained.
 *
 * Every other field of an example (family, checker data) is kept, so the
 * output is also a task file for `refusion eval`. An answer that ends
 * without an EOS within --gen-length is dropped (the trainer appends an EOS
 * the AR head would not have written) unless --keep-truncated. */
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "tasks/eval.h"

typedef struct {
    rf_model_source src; /* -m, --tokenizer */
    const char *data, *out;
    int limit, gen_length, threads, keep_truncated, quiet;
} distill_args;

#define A(f) offsetof(distill_args, f)
static const rf_opt distill_opts[] = {
    {.name = "data", .type = RF_OPT_STR, .offset = A(data), .metavar = "FILE",
     .help = "training file: a JSON list of {\"query\", \"response\", ...} (e.g. train.json of `refusion tasks`)"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "FILE",
     .help = "the distilled training file (the same records, \"response\" = the model's greedy AR answer)"},
    {.name = "limit", .type = RF_OPT_INT, .lo = 0, .hi = 100000000, .offset = A(limit), .metavar = "N",
     .help = "only the first N examples (0 = all)"},
    {.name = "gen-length", .letter = 'n', .type = RF_OPT_INT, .lo = 0, .hi = 1000000, .offset = A(gen_length),
     .metavar = "N", .help = "answer tokens at most (0: the model's generation_config.json, else 512)"},
    {.name = "threads", .letter = 't', .type = RF_OPT_INT, .lo = 0, .hi = 4096, .offset = A(threads),
     .metavar = "N", .help = "OpenMP threads (0: OpenMP's default)"},
    {.name = "keep-truncated", .type = RF_OPT_FLAG, .offset = A(keep_truncated),
     .help = "keep answers that reach --gen-length without an EOS (the trainer will append one)"},
    {.name = "quiet", .type = RF_OPT_FLAG, .offset = A(quiet), .help = "no progress line on stderr"},
};

int cmd_distill(int argc, char **argv) {
    distill_args a = {0}, def_a = a;
    const rf_opt_group groups[] = {
        RF_MODEL_SOURCE_GROUP(&a.src),
        {NULL, distill_opts, (int)(sizeof distill_opts / sizeof distill_opts[0]), &a, NULL, &def_a},
    };
    int first = argc;
    int prc = rf_args_parse("distill", "-m MODEL --data FILE -o OUT [options]\n"
                            "Self-distillation data: answer every query of a training file with the model's\n"
                            "own greedy AR decoding (= `refusion generate --decoder ar`, the answers the\n"
                            "rolling slot's verifier accepts) and write the records with those answers as\n"
                            "their responses, for `refusion train --init MODEL --data OUT`: the mask head\n"
                            "then learns to draft what the AR head accepts.",
                            groups, 2, argc, argv, &first);
    if (prc) return prc > 0 ? 0 : 2;
    if (first < argc) {
        fprintf(stderr, "refusion: distill: unexpected argument '%s' (see --help)\n", argv[first]);
        return 2;
    }
    if (!a.src.model || !a.data || !a.out) {
        fprintf(stderr, "refusion: distill: %s is required\n",
                !a.src.model ? "-m MODEL" : !a.data ? "--data FILE" : "-o OUT");
        return 2;
    }
    /* the model's recommended answer length, then greedy AR whatever it recommends */
    rf_decode_opts d;
    rf_decode_opts_default(&d);
    if (rf_decode_opts_from_config(&d, a.src.model, -1)) {
        fprintf(stderr, "refusion: distill: %s\n", rf_last_error());
        return 1;
    }
    rf_params g;
    rf_gen_params_default(&g);
    g.method = RF_METHOD_AR; /* greedy, no penalties */
    g.gen_length = d.gen.gen_length;
    if (a.gen_length > 0) g.gen_length = a.gen_length;
    if (a.threads > 0) omp_set_num_threads(a.threads);

    json_t *examples = rf_tasks_load(a.data, 0), *out = NULL;
    if (!examples) {
        rf_print_error();
        return 1;
    }
    rf_model m;
    rf_tokenizer *tok = NULL;
    int have_model = 0, rc = 1;
    if (rf_eval_load_model(&m, &tok, a.src.model, a.src.tokenizer)) goto done;
    have_model = 1;
    g.eos_id = rf_tok_eos_id(tok);
    g.mask_id = rf_tok_mask_id(tok);

    int total = (int)json_array_size(examples);
    if (a.limit > 0 && a.limit < total) total = a.limit;
    int n_same = 0, n_truncated = 0, n_retok = 0;
    long n_tokens = 0;
    out = json_array();
    rf_meter meter;
    rf_meter_init(&meter, "distill", total, a.quiet);
    double t0 = rf_now();
    for (int i = 0; i < total; i++) {
        const json_t *ex = json_array_get(examples, i);
        const char *query = json_string_value(json_object_get(ex, "query"));
        int *ids = NULL, n = 0;
        rf_gen_result r;
        memset(&r, 0, sizeof r);
        if (rf_chat_query_ids(tok, query, &ids, &n) || rf_decode(&m, ids, n, &g, NULL, &r)) {
            free(ids);
            rf_meter_abort(&meter);
            rf_prefix_error("%s: record %d", a.data, i + 1);
            goto done;
        }
        free(ids);
        /* the answer without its EOS: the trainer appends one */
        int n_ans = r.hit_eos ? r.n_ids - 1 : r.n_ids;
        char *answer = rf_tok_decode(tok, r.ids, n_ans, 1);
        if (!answer) {
            rf_gen_result_free(&r);
            rf_meter_abort(&meter);
            rf_set_error("%s: record %d: the answer holds an id outside the tokenizer", a.data, i + 1);
            goto done;
        }
        n_tokens += r.n_ids;
        if (!r.hit_eos) n_truncated++;
        if (r.hit_eos || a.keep_truncated) {
            /* the trainer tokenises the text again: count answers whose text
             * does not give back the decoded ids */
            int *back = NULL, nb = 0;
            if (!rf_tok_encode(tok, answer, strlen(answer), &back, &nb) &&
                (nb != n_ans || (nb && memcmp(back, r.ids, (size_t)nb * sizeof *back))))
                n_retok++;
            free(back);
            const char *resp = json_string_value(json_object_get(ex, "response"));
            n_same += resp && !strcmp(resp, answer);
            json_t *o = json_copy((json_t *)ex);
            json_object_set_new(o, "response", json_string(answer));
            json_array_append_new(out, o);
        }
        free(answer);
        rf_gen_result_free(&r);
        char extra[96];
        snprintf(extra, sizeof extra, "%.0f tok/s", n_tokens / (rf_now() - t0 + 1e-9));
        rf_meter_update(&meter, i + 1, extra);
    }
    if (rf_tasks_write(a.out, out)) goto done;
    int kept = (int)json_array_size(out);
    fprintf(stderr,
            "refusion: wrote %s: %d of %d examples (greedy AR, gen length %d); %d answers equal the data's "
            "response; %d without an EOS %s; %d re-tokenise to other ids\n",
            a.out, kept, total, g.gen_length, n_same, n_truncated, a.keep_truncated ? "kept" : "dropped",
            n_retok);
    rc = 0;
done:
    if (rc) rf_print_error();
    json_decref(out);
    if (tok) rf_tok_free(tok);
    if (have_model) rf_model_free(&m);
    json_decref(examples);
    return rc;
}
