/* cmd_tokenize.c - `refusion tokenize`: text -> ids, ids -> text (--decode),
 * chat messages -> prompt (--chat), and a JSON-lines batch mode used by the
 * differential tests and for data preparation. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

typedef struct {
    const char *model, *file;
    int decode, skip_special, chat, gen_prompt, think, print_text, as_json, pieces, info, batch, roundtrip;
    rf_arg_list turns; /* --system / --user / --assistant, in order */
} tokenize_args;

#define A(f) offsetof(tokenize_args, f)
static const rf_opt tokenize_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "PATH",
     .help = "model directory (tokenizer.json [+ tokenizer_config.json]), a tokenizer.json or a .gguf file (its "
             "tokenizer.ggml.* metadata)"},
    {.name = "file", .letter = 'f', .type = RF_OPT_STR, .offset = A(file), .metavar = "FILE",
     .help = "read the input from FILE"},
    {.name = "decode", .type = RF_OPT_FLAG, .offset = A(decode),
     .help = "the input is token ids (separated by spaces or commas): print the text"},
    {.name = "skip-special", .type = RF_OPT_FLAG, .offset = A(skip_special), .help = "with --decode: drop special tokens"},
    {.name = "chat", .type = RF_OPT_FLAG, .offset = A(chat),
     .help = "the input is a JSON array of messages, or an object with \"messages\" and other template variables "
             "(\"tools\", ...): apply the chat template, then encode"},
    {.name = "system", .type = RF_OPT_LIST, .offset = A(turns), .metavar = "S",
     .help = "a system message: the chat is built from --system, --user and --assistant, in their order"},
    {.name = "user", .type = RF_OPT_LIST, .offset = A(turns), .metavar = "S", .help = "a user message"},
    {.name = "assistant", .type = RF_OPT_LIST, .offset = A(turns), .metavar = "S", .help = "an assistant message"},
    {.name = "no-generation-prompt", .type = RF_OPT_FLAG, .lo = -1, .offset = A(gen_prompt),
     .help = "with --chat: do not append \"<|im_start|>assistant\\n\""},
    {.name = "no-think", .type = RF_OPT_FLAG, .lo = -1, .offset = A(think),
     .help = "with --chat: enable_thinking=false (empty <think> block after the prompt)"},
    {.name = "text", .type = RF_OPT_FLAG, .offset = A(print_text), .help = "with --chat: print the rendered prompt instead of ids"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = A(as_json), .help = "print ids as a JSON array (with --info: one JSON object)"},
    {.name = "pieces", .type = RF_OPT_FLAG, .offset = A(pieces), .help = "print one line per token: id and its vocab string"},
    {.name = "info", .type = RF_OPT_FLAG, .offset = A(info), .help = "print vocab size and the eos / mask / special ids"},
    {.name = "jsonl", .type = RF_OPT_FLAG, .offset = A(batch),
     .help = "batch mode: every stdin line is a JSON object, answered by one line: {\"text\": S} -> {\"ids\": [...]}; "
             "{\"ids\": [...], \"skip_special\": B} -> {\"text\": S}; {\"messages\": [...], \"add_generation_prompt\": B, "
             "\"enable_thinking\": B, other template variables} -> {\"text\": prompt, \"ids\": [...]}"},
    {.name = "roundtrip", .type = RF_OPT_FLAG, .offset = A(roundtrip),
     .help = "with --jsonl: text lines also get \"decoded\" (decode of the ids) and \"streamed\" (the same through "
             "the streaming decoder)"},
};

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
        *ids = rf_grow_to(*ids, sizeof **ids, (size_t)*n + 1, &cap, cap);
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
        out = rf_grow_to(out, 1, len + l + 1, &cap, cap);
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

/* --info: vocabulary size, eos, mask and the special ids (--json: one object) */
static void print_info(const rf_tokenizer *t, int as_json) {
    if (as_json) {
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
        return;
    }
    printf("vocab_size %d\neos %d %s\nmask %d %s\n", rf_tok_vocab_size(t), rf_tok_eos_id(t),
           rf_tok_piece(t, rf_tok_eos_id(t)) ? rf_tok_piece(t, rf_tok_eos_id(t)) : "-", rf_tok_mask_id(t),
           rf_tok_piece(t, rf_tok_mask_id(t)));
    printf("special");
    for (int i = 0; i < rf_tok_vocab_size(t); i++)
        if (rf_tok_is_special(t, i)) printf(" %d", i);
    printf("\n");
}

/* the error set, prefixed by the input's name */
static void prefix_src(const char *src) {
    char msg[1100];
    snprintf(msg, sizeof msg, "%s: %s", src, rf_last_error());
    rf_set_error("%s", msg);
}

/* --decode: the input's ids as text on stdout */
static int print_decoded(const rf_tokenizer *t, const char *input, const char *src, int skip_special) {
    int *ids, n;
    if (parse_ids(input, &ids, &n, src)) return -1;
    char *s = rf_tok_decode(t, ids, n, skip_special);
    free(ids);
    if (!s) {
        prefix_src(src);
        return -1;
    }
    fputs(s, stdout);
    if (isatty(1)) putchar('\n');
    free(s);
    return 0;
}

/* --chat: the messages (from the arguments, else the input as JSON)
 * rendered by the chat template, with the conversation's text in *spans */
static char *render_chat(const rf_tokenizer *t, const tokenize_args *a, const char *input, size_t len,
                         const char *src, rf_text_span **spans, size_t *n_spans) {
    json_t *msgs;
    if (a->turns.n) {
        msgs = json_array();
        for (int i = 0; i < a->turns.n; i++)
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", a->turns.row[i]->name, "content",
                                                  a->turns.value[i]));
    } else {
        json_error_t je;
        msgs = json_loadb(input, len, 0, &je);
        if (!msgs) {
            rf_set_error("%s: chat input is not valid JSON: line %d: %s", src, je.line, je.text);
            return NULL;
        }
    }
    char *p = rf_chat_render_spans(t, msgs, a->gen_prompt, a->think, spans, n_spans);
    json_decref(msgs);
    if (!p) prefix_src(src);
    return p;
}

/* the ids of input[0..len) as --pieces, --json or a line of numbers */
static int print_encoded(const rf_tokenizer *t, const tokenize_args *a, const char *input, size_t len,
                         const rf_text_span *spans, size_t n_spans, const char *src) {
    int *ids, n;
    if (rf_tok_encode_spans(t, input, len, spans, n_spans, &ids, &n)) {
        prefix_src(src);
        return -1;
    }
    if (a->pieces) {
        for (int i = 0; i < n; i++) printf("%d\t%s\n", ids[i], rf_tok_piece(t, ids[i]));
    } else if (a->as_json) {
        json_t *arr = ids_json(ids, n);
        char *s = json_dumps(arr, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(arr);
    } else {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    return 0;
}

/* the input: the argument, --file, or stdin (none for a chat built from
 * arguments: *input NULL); its name for messages in *src */
static int read_input(const tokenize_args *a, const char *text_arg, char **input, size_t *len, const char **src) {
    int from_args = a->chat && a->turns.n;
    *src = a->file ? a->file : text_arg ? "argument" : from_args ? "arguments" : "stdin";
    *input = NULL;
    *len = 0;
    if (text_arg) {
        *input = rf_strdup(text_arg);
        *len = strlen(*input);
    } else if (a->file) {
        if (!(*input = rf_read_file(a->file, len))) return -1;
    } else if (!from_args) {
        if (!(*input = rf_read_file("/dev/stdin", len))) return -1;
    }
    return 0;
}

/* text, ids or a chat from the parsed options: 0, or -1 with the error set */
static int tokenize_run(rf_tokenizer *t, const tokenize_args *a, int special_in_content, const char *text_arg) {
    char *input;
    size_t len;
    const char *src;
    if (read_input(a, text_arg, &input, &len, &src)) return -1;
    if (a->decode) {
        int rc = print_decoded(t, input, src, a->skip_special);
        free(input);
        return rc;
    }
    rf_text_span *spans = NULL; /* with --chat: the conversation's text in input */
    size_t n_spans = 0;
    if (a->chat) {
        char *p = render_chat(t, a, input, len, src, &spans, &n_spans);
        free(input);
        if (!p) return -1;
        input = p;
        len = strlen(p);
        if (a->print_text) {
            fputs(p, stdout);
            free(spans), free(input);
            return 0;
        }
    }
    int rc = print_encoded(t, a, input, len, spans, special_in_content ? 0 : n_spans, src);
    free(spans), free(input);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    tokenize_args a = {.gen_prompt = 1, .think = 1};
    rf_chat_template_opts ct = {0};
    const rf_opt_group groups[] = {
        {NULL, tokenize_opts, (int)(sizeof tokenize_opts / sizeof tokenize_opts[0]), &a, NULL, NULL},
        RF_CHAT_TEMPLATE_GROUP(&ct),
    };
    int first = argc;
    int prc = rf_args_parse("tokenize", "-m PATH [options] [TEXT]\n"
                            "Encode TEXT (or --file, or stdin) with the tokenizer of a model and print the ids.",
                            groups, 2, argc, argv, &first);
    if (prc || argc - first > 1) {
        if (prc == 0) fprintf(stderr, "refusion: tokenize: unexpected argument '%s' (see --help)\n", argv[first + 1]);
        rf_arg_list_free(&a.turns);
        return prc > 0 ? 0 : 2;
    }
    const char *text_arg = first < argc ? argv[first] : NULL;
    if (a.turns.n) a.chat = 1;
    if (!a.model) {
        fprintf(stderr, "refusion: tokenize: -m PATH (model directory or tokenizer.json) is required\n");
        rf_arg_list_free(&a.turns);
        return 2;
    }
    int rc = 1;
    rf_tokenizer *t = rf_tok_load(a.model);
    if (!t || (ct.chat_template && rf_tok_set_chat_template(t, ct.chat_template))) rf_print_error();
    else {
        rf_tok_set_special_in_content(t, ct.special_in_content);
        if (a.info) print_info(t, a.as_json), rc = 0;
        else if (a.batch) rc = run_batch(t, a.roundtrip);
        else if (tokenize_run(t, &a, ct.special_in_content, text_arg)) rf_print_error();
        else rc = 0;
    }
    rf_arg_list_free(&a.turns);
    rf_tok_free(t);
    return rc;
}
