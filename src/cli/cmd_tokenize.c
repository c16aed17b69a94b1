/* cmd_tokenize.c - `refusion tokenize`: text -> ids, ids -> text (--decode),
 * chat messages -> prompt (--chat), and a JSON-lines batch mode used by the
 * differential tests and for data preparation. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion tokenize -m PATH [options] [TEXT]\n"
            "Encode TEXT (or --file, or stdin) with the tokenizer of a model and print the ids.\n\n"
            "  -m, --model PATH        model directory (tokenizer.json [+ tokenizer_config.json]), a tokenizer.json\n"
            "                          or a .gguf file (its tokenizer.ggml.* metadata)\n"
            "  -f, --file FILE         read the input from FILE\n"
            "  --decode                the input is token ids (separated by spaces or commas): print the text\n"
            "  --skip-special          with --decode: drop special tokens\n"
            "  --chat                  the input is a JSON array of messages, or an object with \"messages\" and\n"
            "                          other template variables (\"tools\", ...): apply the chat template, then encode\n"
            "  --chat-template FILE|builtin\n"
            "                          render with this Jinja template instead of the model's, or with the\n"
            "                          built-in Qwen3 renderer (default: the model's template, else built-in)\n"
            "  --jinja                 use the model's Jinja template (the default; llama.cpp's spelling)\n"
            "  --special-in-content    parse special tokens written in the messages (by default they are text)\n"
            "  --system S, --user S, --assistant S\n"
            "                          build the chat from arguments instead (repeatable, kept in order)\n"
            "  --no-generation-prompt  with --chat: do not append \"<|im_start|>assistant\\n\"\n"
            "  --no-think              with --chat: enable_thinking=false (empty <think> block after the prompt)\n"
            "  --text                  with --chat: print the rendered prompt instead of ids\n"
            "  --json                  print ids as a JSON array (with --info: one JSON object)\n"
            "  --pieces                print one line per token: id and its vocab string\n"
            "  --info                  print vocab size and the eos / mask / special ids\n"
            "  --jsonl                 batch mode: every stdin line is a JSON object, answered by one line:\n"
            "                            {\"text\": S}                    -> {\"ids\": [...]}\n"
            "                            {\"ids\": [...], \"skip_special\": B} -> {\"text\": S}\n"
            "                            {\"messages\": [...], \"add_generation_prompt\": B, \"enable_thinking\": B,\n"
            "                             other template variables}\n"
            "                                                           -> {\"text\": prompt, \"ids\": [...]}\n"
            "  --roundtrip             with --jsonl: text lines also get \"decoded\" (decode of the ids) and\n"
            "                          \"streamed\" (the same through the streaming decoder)\n");
}

static json_t *ids_json(const int *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* ids from "1 2, 3" or "[1,2,3]" */
static int parse_ids(const char *s, int **ids, int *n, const char *src) {
    size_t cap = 64;
    *ids = rf_malloc(cap * sizeof(int));
    *n = 0;
    while (*s) {
        if (strchr(" \t\r\n,[]", *s)) {
            s++;
            continue;
        }
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 0x7fffffff) {
            rf_set_error("%s: expected token ids, found \"%.20s\"", src, s);
            free(*ids);
            *ids = NULL;
            return -1;
        }
        if ((size_t)*n == cap) *ids = realloc(*ids, (cap *= 2) * sizeof(int));
        (*ids)[(*n)++] = (int)v;
        s = end;
    }
    return 0;
}

/* Concatenated output of the streaming decoder (what a chat UI would show). */
static char *stream_decode(const rf_tokenizer *t, const int *ids, int n, int skip_special) {
    rf_tok_stream *st = rf_tok_stream_new(t, skip_special);
    size_t cap = 256, len = 0;
    char *out = rf_malloc(cap);
    for (int i = 0; i <= n; i++) {
        const char *c = i < n ? rf_tok_stream_put(st, ids[i]) : rf_tok_stream_flush(st);
        if (!c) {
            free(out);
            rf_tok_stream_free(st);
            return NULL;
        }
        size_t l = strlen(c);
        while (len + l + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + len, c, l);
        len += l;
    }
    out[len] = 0;
    rf_tok_stream_free(st);
    return out;
}

/* One batch line -> one JSON answer; NULL with the error set. */
static json_t *batch_line(const rf_tokenizer *t, json_t *in, int roundtrip) {
    json_t *text = json_object_get(in, "text"), *ids = json_object_get(in, "ids");
    json_t *msgs = json_object_get(in, "messages");
    if (json_is_string(text) && !msgs) {
        int *v, n;
        if (rf_tok_encode(t, json_string_value(text), json_string_length(text), &v, &n)) return NULL;
        json_t *o = json_pack("{s:o}", "ids", ids_json(v, n));
        if (roundtrip) {
            char *d = rf_tok_decode(t, v, n, 0), *s = stream_decode(t, v, n, 0);
            json_object_set_new(o, "decoded", json_string(d));
            json_object_set_new(o, "streamed", json_string(s));
            free(d), free(s);
        }
        free(v);
        return o;
    }
    if (json_is_array(ids)) {
        int n = (int)json_array_size(ids), *v = rf_malloc(((size_t)n + 1) * sizeof(int));
        for (int i = 0; i < n; i++) v[i] = (int)json_integer_value(json_array_get(ids, (size_t)i));
        char *d = rf_tok_decode(t, v, n, json_is_true(json_object_get(in, "skip_special")));
        free(v);
        if (!d) return NULL;
        json_t *o = json_pack("{s:s}", "text", d);
        free(d);
        return o;
    }
    if (msgs) { /* the line's other keys are template variables */
        rf_text_span *sp;
        size_t nsp;
        char *p = rf_chat_render_spans(t, in, json_is_true(json_object_get(in, "add_generation_prompt")), 1, &sp, &nsp);
        if (!p) return NULL;
        int *v, nv;
        int erc = rf_tok_encode_spans(t, p, strlen(p), sp, rf_tok_special_in_content(t) ? 0 : nsp, &v, &nv);
        free(sp);
        if (erc) {
            free(p);
            return NULL;
        }
        json_t *o = json_pack("{s:s, s:o}", "text", p, "ids", ids_json(v, nv));
        free(p), free(v);
        return o;
    }
    rf_set_error("expected an object with \"text\", \"ids\" or \"messages\"");
    return NULL;
}

static int run_batch(const rf_tokenizer *t, int roundtrip) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, n_err = 0;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        if (len == 1 && line[0] == '\n') continue;
        json_error_t je;
        /* JSON_ALLOW_NUL: "\u0000" is a valid string; its length is carried to the encoder */
        json_t *in = json_loadb(line, (size_t)len, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &je), *out = NULL;
        if (!in) rf_set_error("not valid JSON: %s", je.text);
        else out = batch_line(t, in, roundtrip);
        if (!out) {
            fprintf(stderr, "refusion: stdin: line %ld: %s\n", lineno, rf_last_error());
            out = json_pack("{s:s}", "error", rf_last_error());
            n_err++;
        }
        char *s = json_dumps(out, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(in);
        json_decref(out);
    }
    free(line);
    return n_err ? 1 : 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text_arg = NULL, *chat_template = NULL;
    int decode = 0, skip_special = 0, chat = 0, gen_prompt = 1, think = 1, print_text = 0;
    int as_json = 0, pieces = 0, info = 0, batch = 0, roundtrip = 0, special_in_content = 0;
    json_t *arg_msgs = json_array();
    int rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            json_decref(arg_msgs);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) model = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && more) file = argv[++i];
        else if (!strcmp(a, "--decode")) decode = 1;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--chat-template") && more) chat_template = argv[++i];
        else if (!strncmp(a, "--chat-template=", 16)) chat_template = a + 16;
        else if (!strcmp(a, "--jinja")) continue;
        else if (!strcmp(a, "--special-in-content")) special_in_content = 1;
        else if ((!strcmp(a, "--system") || !strcmp(a, "--user") || !strcmp(a, "--assistant")) && more) {
            json_array_append_new(arg_msgs, json_pack("{s:s, s:s}", "role", a + 2, "content", argv[++i]));
            chat = 1;
        } else if (!strcmp(a, "--no-generation-prompt")) gen_prompt = 0;
        else if (!strcmp(a, "--no-think")) think = 0;
        else if (!strcmp(a, "--text")) print_text = 1;
        else if (!strcmp(a, "--json")) as_json = 1;
        else if (!strcmp(a, "--pieces")) pieces = 1;
        else if (!strcmp(a, "--info")) info = 1;
        else if (!strcmp(a, "--jsonl")) batch = 1;
        else if (!strcmp(a, "--roundtrip")) roundtrip = 1;
        else if (a[0] != '-' && !text_arg) text_arg = a;
        else {
            fprintf(stderr, "refusion: tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            json_decref(arg_msgs);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "refusion: tokenize: -m PATH (model directory or tokenizer.json) is required\n");
        json_decref(arg_msgs);
        return 2;
    }
    rf_tokenizer *t = rf_tok_load(model);
    char *input = NULL;
    rf_text_span *spans = NULL; /* with --chat: the conversation's text in input */
    size_t n_spans = 0;
    int *ids = NULL, n = 0;
    if (!t || (chat_template && rf_tok_set_chat_template(t, chat_template))) goto fail;
    rf_tok_set_special_in_content(t, special_in_content);
    if (info && as_json) { /* the same as one JSON object */
        json_t *sp = json_array();
        for (int i = 0; i < rf_tok_vocab_size(t); i++)
            if (rf_tok_is_special(t, i)) json_array_append_new(sp, json_integer(i));
        json_t *o = json_pack("{s:i, s:{s:i, s:s?}, s:{s:i, s:s?}, s:o}", "vocab_size", rf_tok_vocab_size(t), "eos",
                              "id", rf_tok_eos_id(t), "piece", rf_tok_piece(t, rf_tok_eos_id(t)), "mask", "id",
                              rf_tok_mask_id(t), "piece", rf_tok_piece(t, rf_tok_mask_id(t)), "special", sp);
        char *js = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
        printf("%s\n", js);
        free(js);
        json_decref(o);
        rc = 0;
        goto done;
    }
    if (info) {
        printf("vocab_size %d\neos %d %s\nmask %d %s\n", rf_tok_vocab_size(t), rf_tok_eos_id(t),
               rf_tok_piece(t, rf_tok_eos_id(t)) ? rf_tok_piece(t, rf_tok_eos_id(t)) : "-", rf_tok_mask_id(t),
               rf_tok_piece(t, rf_tok_mask_id(t)));
        printf("special");
        for (int i = 0; i < rf_tok_vocab_size(t); i++)
            if (rf_tok_is_special(t, i)) printf(" %d", i);
        printf("\n");
        rc = 0;
        goto done;
    }
    if (batch) {
        rc = run_batch(t, roundtrip);
        goto done;
    }

    /* the input: argument, --file, or stdin (not needed for a chat built from arguments) */
    const char *src = file ? file : text_arg ? "argument" : chat && json_array_size(arg_msgs) ? "arguments" : "stdin";
    size_t len = 0;
    if (text_arg) {
        input = rf_strdup(text_arg);
        len = strlen(input);
    } else if (file) {
        if (!(input = rf_read_file(file, &len))) goto fail;
    } else if (!(chat && json_array_size(arg_msgs))) {
        if (!(input = rf_read_file("/dev/stdin", &len))) goto fail;
    }

    if (decode) {
        if (parse_ids(input, &ids, &n, src)) goto fail;
        char *s = rf_tok_decode(t, ids, n, skip_special);
        if (!s) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s: %s", src, rf_last_error());
            rf_set_error("%s", msg);
            goto fail;
        }
        fputs(s, stdout);
        if (isatty(1)) putchar('\n');
        free(s);
        rc = 0;
        goto done;
    }
    if (chat) {
        json_t *msgs = arg_msgs;
        json_incref(msgs);
        if (!json_array_size(arg_msgs)) {
            json_decref(msgs);
            json_error_t je;
            msgs = json_loadb(input, len, 0, &je);
            if (!msgs) {
                rf_set_error("%s: chat input is not valid JSON: line %d: %s", src, je.line, je.text);
                goto fail;
            }
        }
        char *p = rf_chat_render_spans(t, msgs, gen_prompt, think, &spans, &n_spans);
        json_decref(msgs);
        if (!p) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s: %s", src, rf_last_error());
            rf_set_error("%s", msg);
        }
        if (!p) goto fail;
        free(input);
        input = p;
        len = strlen(p);
        if (print_text) {
            fputs(p, stdout);
            rc = 0;
            goto done;
        }
    }
    if (rf_tok_encode_spans(t, input, len, spans, special_in_content ? 0 : n_spans, &ids, &n)) {
        char msg[1100];
        snprintf(msg, sizeof msg, "%s: %s", src, rf_last_error());
        rf_set_error("%s", msg);
        goto fail;
    }
    if (pieces) {
        for (int i = 0; i < n; i++) printf("%d\t%s\n", ids[i], rf_tok_piece(t, ids[i]));
    } else if (as_json) {
        json_t *a = ids_json(ids, n);
        char *s = json_dumps(a, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(a);
    } else {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    rc = 0;
    goto done;
fail:
    rf_print_error();
    rc = 1;
done:
    free(spans);
    free(ids);
    free(input);
    json_decref(arg_msgs);
    rf_tok_free(t);
    return rc;
}
