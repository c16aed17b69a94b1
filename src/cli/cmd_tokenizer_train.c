/* cmd_tokenizer_train.c - `refusion tokenizer-train`: learn a small
 * byte-level BPE from text and write tokenizer.json + tokenizer_config.json. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

typedef struct {
    rf_arg_list inputs;
    int vocab, verbose;
    const char *out;
} tt_args;

#define A(f) offsetof(tt_args, f)
static const rf_opt tt_opts[] = {
    {.name = "input", .type = RF_OPT_LIST, .offset = A(inputs), .metavar = "FILE",
     .help = "corpus: .txt is used as is; .json / .jsonl contribute every string value (not the keys) of their JSON "
             "document(s), one per line"},
    {.name = "vocab", .type = RF_OPT_INT, .lo = 1, .hi = 1 << 22, .offset = A(vocab), .metavar = "N",
     .help = "total vocabulary: 256 bytes + merges + 7 added tokens"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "DIR",
     .help = "output directory (created if needed)"},
    {.name = "verbose", .letter = 'v', .type = RF_OPT_FLAG, .offset = A(verbose), .help = "report progress"},
};

static void collect_strings(json_t *j, FILE *out) {
    size_t i;
    const char *k;
    json_t *v;
    if (json_is_string(j)) {
        fwrite(json_string_value(j), 1, json_string_length(j), out);
        fputc('\n', out);
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) collect_strings(v, out);
    } else if (json_is_object(j)) {
        json_object_foreach(j, k, v) collect_strings(v, out);
    }
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Append the text of one input file to the corpus stream. */
static int add_input(const char *path, FILE *out) {
    size_t len;
    char *data = rf_read_file(path, &len);
    if (!data) return -1;
    if (ends_with(path, ".json") || ends_with(path, ".jsonl")) {
        size_t pos = 0;
        int line = 1;
        while (pos < len) { /* one or more JSON documents, separated by white space */
            while (pos < len && strchr(" \t\r\n", data[pos])) line += data[pos++] == '\n';
            if (pos >= len) break;
            json_error_t je;
            json_t *j = json_loadb(data + pos, len - pos, JSON_DISABLE_EOF_CHECK, &je);
            if (!j) {
                rf_set_error("%s: line %d: not valid JSON: %s", path, line + je.line - 1, je.text);
                free(data);
                return -1;
            }
            collect_strings(j, out);
            json_decref(j);
            for (size_t e = pos + je.position; pos < e; pos++) line += data[pos] == '\n';
        }
    } else {
        size_t bad;
        if (rf_utf8_check(data, len, &bad)) {
            rf_set_error("%s: invalid UTF-8 at byte offset %zu", path, bad);
            free(data);
            return -1;
        }
        fwrite(data, 1, len, out);
        fputc('\n', out);
    }
    free(data);
    return 0;
}

int cmd_tokenizer_train(int argc, char **argv) {
    tt_args a = {.vocab = 2048}, def_a = a;
    const rf_opt_group groups[] = {{NULL, tt_opts, (int)(sizeof tt_opts / sizeof tt_opts[0]), &a, NULL, &def_a}};
    int prc = rf_args_parse("tokenizer-train", "--input FILE [--input FILE ...] --vocab N -o DIR [-v]\n"
                            "Train a byte-level BPE tokenizer (Qwen-style pre-tokenizer, NFC) and write\n"
                            "DIR/tokenizer.json and DIR/tokenizer_config.json.",
                            groups, 1, argc, argv, NULL);
    if (prc) {
        rf_arg_list_free(&a.inputs);
        return prc > 0 ? 0 : 2;
    }
    const char *out_dir = a.out;
    int vocab = a.vocab, verbose = a.verbose;
    char *corpus = NULL;
    size_t corpus_len = 0;
    FILE *cs = NULL;
    int rc = 1;
    if (!a.inputs.n || !out_dir) {
        fprintf(stderr, "refusion: tokenizer-train: --input FILE and -o DIR are required (see --help)\n");
        rc = 2;
        goto done;
    }
    cs = open_memstream(&corpus, &corpus_len);
    for (int i = 0; i < a.inputs.n; i++)
        if (add_input(a.inputs.value[i], cs)) goto fail;
    fclose(cs);
    cs = NULL;
    /* every input adds a newline: nothing but white space means no text to learn from */
    size_t text_bytes = 0;
    for (size_t k = 0; k < corpus_len; k++) text_bytes += !strchr(" \t\r\n", corpus[k]);
    if (!text_bytes) {
        fprintf(stderr, "refusion: tokenizer-train: the input has no text to learn from\n");
        rc = 1;
        goto done;
    }
    double t0 = rf_now();
    if (rf_tok_train(corpus, corpus_len, vocab, out_dir, verbose)) goto fail;
    /* read it back: what we wrote must load */
    rf_tokenizer *t = rf_tok_load(out_dir);
    if (!t) goto fail;
    fprintf(stderr, "tokenizer-train: %zu bytes of text -> %s (vocab %d) in %.1f s\n", corpus_len, out_dir,
            rf_tok_vocab_size(t), rf_now() - t0);
    if (rf_tok_vocab_size(t) < vocab)
        fprintf(stderr, "tokenizer-train: note: %d ids, not the %d asked for: merges stop when no pair of tokens "
                        "occurs twice any more in the text (more or more varied text gives more)\n",
                rf_tok_vocab_size(t), vocab);
    rf_tok_free(t);
    rc = 0;
    goto done;
fail:
    rf_print_error();
    rc = 1;
done:
    if (cs) fclose(cs);
    free(corpus);
    rf_arg_list_free(&a.inputs);
    return rc;
}
