/* cmd_tokenizer_train.c - `refusion tokenizer-train`: learn a small
 * byte-level BPE from text and write tokenizer.json + tokenizer_config.json. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion tokenizer-train --input FILE [--input FILE ...] --vocab N -o DIR [-v]\n"
            "Train a byte-level BPE tokenizer (Qwen-style pre-tokenizer, NFC) and write\n"
            "DIR/tokenizer.json and DIR/tokenizer_config.json.\n\n"
            "  --input FILE   corpus: .txt is used as is; .json / .jsonl contribute every string value\n"
            "                 (not the keys) of their JSON document(s), one per line\n"
            "  --vocab N      total vocabulary: 256 bytes + merges + 7 added tokens (default 2048)\n"
            "  -o, --out DIR  output directory (created if needed)\n"
            "  -v             report progress\n");
}

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
    const char *out_dir = NULL;
    int vocab = 2048, verbose = 0, n_inputs = 0;
    char *corpus = NULL;
    size_t corpus_len = 0;
    FILE *cs = open_memstream(&corpus, &corpus_len);
    int rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--input") && more) {
            if (add_input(argv[++i], cs)) goto fail;
            n_inputs++;
        } else if (!strcmp(a, "--vocab") && more) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v <= 0 || v > (1 << 22)) {
                fprintf(stderr, "refusion: tokenizer-train: --vocab must be a positive integer, got '%s'\n", argv[i]);
                rc = 2;
                goto done;
            }
            vocab = (int)v;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && more) out_dir = argv[++i];
        else if (!strcmp(a, "-v")) verbose = 1;
        else {
            fprintf(stderr, "refusion: tokenizer-train: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            rc = 2;
            goto done;
        }
    }
    if (!n_inputs || !out_dir) {
        fprintf(stderr, "refusion: tokenizer-train: --input FILE and -o DIR are required\n");
        usage(stderr);
        rc = 2;
        goto done;
    }
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
    return rc;
}
