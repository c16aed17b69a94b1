/* cmd_generate.c - `refusion generate`: ReFusion, AR or mdm decoding of one
 * prompt (from -p, -f FILE or stdin), and `refusion chat` / `generate -i`: a
 * multi-turn chat in the terminal with the same decoder.
 *
 * Text streams to stdout as it becomes final (answer tokens with no masked
 * position before them); --json prints one JSON object at the end instead;
 * --visualize draws the answer's slots filling in, one line per event
 * (ANSI colours on a terminal, state letters otherwise).
 *
 * Everything goes through the public API (include/refusion.h): the model,
 * its tokenizer, one session reused by every answer of a chat. */
#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "common/args.h"
#include "cli/commands.h"
#include "refusion.h"
#include "util/util.h" /* rf_malloc & co: the program's allocation helpers */

/* "1, 2 3" -> ids; -1 on anything that is not an integer */
static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16;
    *ids = rf_malloc(cap * sizeof(int32_t));
    *n = 0;
    while (*s) {
        while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < -2147483647L || v > 2147483647L || (*end && !strchr(", \t\n", *end))) {
            fprintf(stderr, "refusion: generate: --ids: '%.20s' is not a token id\n", s);
            return -1;
        }
        *ids = rf_grow(*ids, sizeof **ids, *n, &cap, cap);
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
    }
    return 0;
}

/* ---- streaming and visualisation ------------------------------------------------ */
enum { C_MASK, C_PLAN, C_DRAFT, C_VERIFIED, C_FAST, C_INFILL, C_DROP };
typedef struct {
    const refusion_tokenizer *tok;
    refusion_text_stream *stream;
    int quiet;          /* --json / --visualize: no streaming */
    FILE *vis;          /* visualisation stream, or NULL */
    int tty;
    int G;
    int32_t *cell_tok;  /* [G] */
    unsigned char *cell;/* [G] C_* */
    /* -r TEXT: the answer's text so far (acc, of which printed bytes are
     * out) and its ids; stopped once acc holds TEXT (acc is cut there) */
    const char *stop;
    char *acc;
    size_t acc_len, acc_cap, printed;
    int32_t *got;
    int n_got, cap_got, stopped;
    /* --logprobs: every final answer token's, in order */
    rf_token_logprob *lp;
    int n_lp;
    size_t cap_lp;
} ui;

static volatile int g_cancel;

/* -r: text s joins the answer; print what can no longer be the start of the
 * stop text, and stop the decoder when the text holds it */
static void stop_text(ui *u, const char *s) {
    size_t n = strlen(s), L = strlen(u->stop);
    u->acc = rf_grow_to(u->acc, 1, u->acc_len + n + 1, &u->acc_cap, 256);
    memcpy(u->acc + u->acc_len, s, n + 1);
    u->acc_len += n;
    /* bytes before printed were checked with L bytes after them already */
    char *hit = strstr(u->acc + u->printed, u->stop);
    size_t upto = hit ? (size_t)(hit - u->acc) : u->acc_len >= L - 1 ? u->acc_len - (L - 1) : 0;
    if (upto > u->printed && !u->quiet) fwrite(u->acc + u->printed, 1, upto - u->printed, stdout);
    if (upto > u->printed) u->printed = upto;
    if (hit) {
        *hit = 0;
        u->acc_len = (size_t)(hit - u->acc);
        u->stopped = 1;
        g_cancel = 1; /* the decoder stops before its next model call */
    }
}

static void on_logprobs(const rf_token_logprob *lp, int n, void *user) {
    ui *u = user;
    if (u->stopped) return;
    u->lp = rf_grow_to(u->lp, sizeof *u->lp, (size_t)u->n_lp + (size_t)n, &u->cap_lp, 64);
    memcpy(u->lp + u->n_lp, lp, (size_t)n * sizeof *lp);
    u->n_lp += n;
}

static void on_tokens(const int32_t *ids, int n, void *user) {
    ui *u = user;
    if (u->stopped) return; /* the rest of the last call's tokens */
    if (u->stop) {
        for (int i = 0; i < n && !u->stopped; i++) {
            u->got = rf_grow(u->got, sizeof *u->got, u->n_got, &u->cap_got, 64);
            u->got[u->n_got++] = ids[i];
            const char *s = rf_text_stream_put(u->stream, ids[i]);
            if (s) stop_text(u, s);
        }
        fflush(stdout);
        return;
    }
    if (u->quiet) return;
    for (int i = 0; i < n; i++) {
        if (u->stream) {
            const char *s = rf_text_stream_put(u->stream, ids[i]);
            if (s) fputs(s, stdout);
        } else {
            printf("%d ", ids[i]);
        }
    }
    fflush(stdout);
}

/* Text of ids, malloc'd; NULL for an id outside the vocabulary. */
static char *detokenize(const refusion_tokenizer *t, const int32_t *ids, int n, int skip_special) {
    int len = rf_detokenize(t, ids, n, skip_special, NULL, 0);
    if (len < 0) return NULL;
    char *s = rf_malloc((size_t)len + 1);
    rf_detokenize(t, ids, n, skip_special, s, len + 1);
    return s;
}

/* a token as printable text: control characters shown as symbols */
static void put_piece(FILE *f, const ui *u, int32_t id) {
    if (!u->tok) {
        fprintf(f, "%d ", id);
        return;
    }
    char *s = detokenize(u->tok, &id, 1, 0);
    if (!s) {
        fprintf(f, "<%d>", id);
        return;
    }
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '\n') fputs("\u23ce", f);
        else if (*c == '\t') fputs("\u21e5", f);
        else if (*c < 0x20 || *c == 0x7f) fputc('?', f);
        else fputc(*c, f);
    }
    free(s);
}

static void draw(ui *u, int step, const char *what) {
    static const char letter[] = ".pdvFIx"; /* indexed by C_* */
    static const char *colour[] = {"2", "33", "2;33", "36", "32", "34", "2;31"};
    FILE *f = u->vis;
    fprintf(f, "step %3d %-7s ", step, what);
    if (!u->tty) {
        for (int i = 0; i < u->G; i++) fputc(letter[u->cell[i]], f);
        fputc('\n', f);
        return;
    }
    for (int i = 0; i < u->G; i++) {
        fprintf(f, "\033[%sm", colour[u->cell[i]]);
        if (u->cell[i] == C_MASK) fputs("\u2591", f);
        else if (u->cell[i] == C_DROP) fputs("\u00d7", f);
        else put_piece(f, u, u->cell_tok[i]);
        fputs("\033[0m", f);
    }
    fputc('\n', f);
    fflush(f);
}

static void on_event(const rf_event *ev, void *user) {
    ui *u = user;
    if (!u->vis) return;
    const char *what = "";
    for (int i = 0; i < ev->n; i++) {
        int a = ev->apos[i];
        if (a < 0 || a >= u->G) continue;
        switch (ev->kind) {
        case RF_EVENT_PLAN: u->cell[a] = C_PLAN, u->cell_tok[a] = ev->tok[i], what = "plan"; break;
        case RF_EVENT_FAST_COMMIT: u->cell[a] = C_FAST, u->cell_tok[a] = ev->tok[i], what = "fast"; break;
        case RF_EVENT_INFILL_ITER:
            u->cell[a] = ev->accepted[i] ? C_VERIFIED : C_DRAFT, u->cell_tok[a] = ev->tok[i], what = "infill";
            break;
        case RF_EVENT_INFILL_COMMIT: u->cell[a] = C_INFILL, u->cell_tok[a] = ev->tok[i], what = "commit"; break;
        case RF_EVENT_DROP: u->cell[a] = C_DROP, what = "eos-cut"; break;
        case RF_EVENT_AR_TOKEN: u->cell[a] = C_FAST, u->cell_tok[a] = ev->tok[i], what = "ar"; break;
        }
    }
    if (ev->kind == RF_EVENT_DROP && ev->n > 0) {
        /* the cells between the committed EOS and the first dropped slot belong
         * to the EOS's own slot: truncated after the EOS, so dropped too */
        int a0 = u->G;
        for (int i = 0; i < ev->n; i++) a0 = ev->apos[i] < a0 ? ev->apos[i] : a0;
        for (int a = a0 - 1; a >= 0 && (u->cell[a] == C_PLAN || u->cell[a] == C_DRAFT || u->cell[a] == C_VERIFIED);
             a--)
            u->cell[a] = C_DROP;
    }
    draw(u, ev->step, what);
}

/* ---- JSON -------------------------------------------------------------------------- */
static json_t *ids_json(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* one generation: its answer and statistics */
typedef struct {
    int32_t *ids;
    int n;
    rf_stats st;
    char *stop_text; /* -r: the text, cut before the stop text, when it was found (st is then empty) */
    rf_token_logprob *lp; /* --logprobs: [n] */
    int gen_length;  /* the answer length asked for (-n -1 resolved) */
} answer;

/* one token's id, text and log-probability */
static json_t *token_logprob_json(const refusion_tokenizer *tok, int32_t id, float logprob) {
    json_t *o = json_pack("{s:i, s:f}", "token", (int)id, "logprob", (double)logprob);
    char buf[256];
    json_t *t = tok && rf_detokenize(tok, &id, 1, 0, buf, sizeof buf) >= 0 ? json_string(buf) : NULL;
    json_object_set_new(o, "text", t ? t : json_null());
    return o;
}

/* --logprobs: [{"token", "text", "logprob", "top_logprobs": [{"token", "text", "logprob"}]}] */
static json_t *logprobs_json(const refusion_tokenizer *tok, const rf_token_logprob *lp, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *o = token_logprob_json(tok, lp[i].token, lp[i].logprob), *top = json_array();
        for (int k = 0; k < lp[i].n_top; k++)
            json_array_append_new(top, token_logprob_json(tok, lp[i].top_token[k], lp[i].top_logprob[k]));
        json_object_set_new(o, "top_logprobs", top);
        json_array_append_new(a, o);
    }
    return a;
}

static void print_json(const answer *r, const int32_t *prompt, int P, const char *text, const char *mode,
                       const rf_decode_opts *d, const refusion_tokenizer *tok) {
    const rf_params *p = &d->gen;
    json_t *steps = json_array();
    for (int i = 0; i < r->st.n_steps; i++) {
        const rf_step *s = &r->st.steps[i];
        json_array_append_new(steps, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "block", s->block,
                                               "slots_planned", s->slots_planned, "slots_fast", s->slots_fast,
                                               "slots_infilled", s->slots_infilled, "infill_iters",
                                               s->infill_iters, "tokens", s->tokens, "calls", s->calls));
    }
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(mode));
    json_object_set_new(o, "prompt_ids", ids_json(prompt, P));
    json_object_set_new(o, "answer_ids", ids_json(r->ids, r->n));
    json_object_set_new(o, "text", text ? json_string(text) : json_null());
    json_object_set_new(o, "hit_eos", json_boolean(r->st.hit_eos));
    json_object_set_new(o, "model_calls", json_integer(r->st.n_calls));
    json_object_set_new(o, "tokens", json_integer(r->st.n_tokens));
    json_object_set_new(o, "tpf", json_real(r->st.tpf));
    json_object_set_new(o, "tokens_per_call", json_real(r->st.tokens_per_call));
    json_object_set_new(o, "tokens_per_s", json_real(r->st.tokens_per_s));
    json_object_set_new(o, "wall_s", json_real(r->st.seconds));
    json_object_set_new(o, "settings",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:I}", "gen_length", r->gen_length,
                                  "slot_size", p->slot_size, "blocks", p->n_blocks, "slot_threshold",
                                  (double)p->slot_threshold, "token_threshold", (double)p->token_threshold,
                                  "temperature", (double)p->temperature, "top_k", p->top_k, "top_p",
                                  (double)p->top_p, "seed", (json_int_t)p->seed));
    json_object_set_new(json_object_get(o, "settings"), "lookahead", json_boolean(p->lookahead));
    json_object_set_new(json_object_get(o, "settings"), "ar_verify",
                        json_string(rf_ar_verify_name(p->ar_correct, p->ar_check_first)));
    const rf_stats *ac = &r->st;
    json_object_set_new(o, "accept",
                        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "first_free", ac->first_free, "first_checked",
                                  ac->first_checked, "first_replaced", ac->first_replaced, "verified",
                                  ac->verified, "forced_draft", ac->forced_draft, "forced_ar", ac->forced_ar));
    json_t *src = json_object(); /* the settings that are not the defaults: where they came from */
    for (int i = 0; i < rf_decode_table_n; i++)
        if (d->src[i] != RF_SRC_DEFAULT) json_object_set_new(src, rf_decode_table[i].name, json_string(rf_src_names[d->src[i]]));
    json_object_set_new(o, "sources", src);
    json_object_set_new(o, "steps", steps);
    if (r->lp) json_object_set_new(o, "logprobs", logprobs_json(tok, r->lp, r->n));
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
    puts(s);
    free(s);
    json_decref(o);
}

/* ---- the command ------------------------------------------------------------------- */
typedef struct {
    const char *model, *prompt, *file, *ids, *system, *reverse_prompt;
    int chat, no_chat, no_think, json, visualize, naive, interactive, no_conversation, verbose;
    int logprobs; /* --logprobs N, -1: off */
} gen_args;

#define A(f) offsetof(gen_args, f)
static const rf_opt gen_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "DIR|GGUF",
     .help = "checkpoint directory (its tokenizer.json) or a .gguf file (its tokenizer metadata)"},
    {.name = "prompt", .letter = 'p', .type = RF_OPT_STR, .offset = A(prompt), .metavar = "TEXT",
     .help = "prompt text; '-' reads it from stdin, as does no -p / -f / --ids when stdin is not a terminal"},
    {.name = "file", .letter = 'f', .type = RF_OPT_STR, .offset = A(file), .metavar = "FILE",
     .help = "read the prompt from FILE ('-': stdin)"},
    {.name = "ids", .type = RF_OPT_STR, .offset = A(ids), .metavar = "IDS",
     .help = "prompt as token ids, comma or space separated (no chat template)"},
    {.name = "system", .alias = "system-prompt", .type = RF_OPT_STR, .offset = A(system), .metavar = "TEXT",
     .help = "system message of the chat template"},
    {.name = "chat", .type = RF_OPT_FLAG, .offset = A(chat),
     .help = "apply the chat template (default: when the tokenizer has <|im_start|>)"},
    {.name = "no-chat", .type = RF_OPT_FLAG, .offset = A(no_chat), .help = "the prompt is raw text"},
    {.name = "no-think", .type = RF_OPT_FLAG, .offset = A(no_think),
     .help = "chat template with enable_thinking=false"},
    {.name = "interactive", .letter = 'i', .alias = "conversation", .type = RF_OPT_FLAG, .offset = A(interactive),
     .help = "multi-turn chat in the terminal (as `refusion chat`): /reset clears the history, /exit "
             "quits, Ctrl-C stops the answer"},
    {.name = "no-conversation", .type = RF_OPT_FLAG, .offset = A(no_conversation),
     .help = "one answer to the prompt, no chat in the terminal (llama.cpp's -no-cnv; chat too)"},
    {.name = "reverse-prompt", .letter = 'r', .type = RF_OPT_STR, .offset = A(reverse_prompt), .metavar = "TEXT",
     .help = "stop the answer where its text contains TEXT (cut before it; the decoder stops at its next "
             "model call)"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = A(json),
     .help = "print prompt/answer ids, text and statistics as JSON"},
    {.name = "logprobs", .type = RF_OPT_INT, .offset = A(logprobs), .lo = 0, .hi = RF_MAX_TOP_LOGPROBS,
     .metavar = "N",
     .help = "with --json: each answer token's log-probability and its N most likely alternatives (0..20; "
             "the model's log-softmax, before the sampling settings and a grammar; every decoder: the row each token was drawn from)"},
    {.name = "visualize", .type = RF_OPT_FLAG, .offset = A(visualize),
     .help = "show how the slots fill in, step by step"},
    {.name = "naive", .type = RF_OPT_FLAG, .offset = A(naive), .help = "ReFusion without a KV cache (slow; for checking)"},
    {.name = "verbose", .letter = 'v', .type = RF_OPT_FLAG, .offset = A(verbose),
     .help = "print the decoding settings on stderr first, each with where it came from (default, the "
             "model's generation_config.json, or a flag)"},
};

/* what one generation needs, shared by the one-shot and the chat modes */
typedef struct {
    refusion_model *m;
    refusion_tokenizer *tok;
    refusion_session *sess; /* one KV cache and run state for every answer */
    rf_decode_opts d;
    gen_args a;
    int think;
} gen_ctx;

/* Ctrl-C in the chat: stops the running answer (the decoders look at the
 * flag before every model call); at the prompt it ends the chat. -r raises
 * it too (g_cancel, above). */
static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
}

/* Decode prompt ids; streams to stdout unless --json / --visualize. 0, or -1
 * with the reason printed to nobody yet: rf_last_error(). r is filled on
 * success (free r->ids). */
static int run_decoder(gen_ctx *g, const int32_t *prompt, int P, ui *u, answer *r) {
    rf_params p = g->d.gen; /* this prompt's EOS and answer length on top of the options */
    int ar = p.method == RF_METHOD_AR, mdm = p.method == RF_METHOD_MDM;
    if (!g->d.ignore_eos && g->d.config_eos >= 0) {
        p.eos_id = g->d.config_eos; /* generation_config.json's */
    } else if (g->tok && !g->d.ignore_eos) {
        int e = rf_tokenizer_eos_id(g->tok);
        if (e >= 0) p.eos_id = e;
    }
    memset(r, 0, sizeof *r);
    p.gen_length = rf_decode_gen_length(&g->d, rf_model_n_ctx(g->m), P); /* -n -1: the rest of the context */
    if (p.gen_length < 1) {
        rf_set_error("no room for an answer: the prompt (%d tokens) fills the context (%d tokens)", P,
                     g->d.ctx_size > 0 ? g->d.ctx_size : rf_model_n_ctx(g->m));
        return -1;
    }
    r->gen_length = p.gen_length;
    if (g->d.ctx_size > 0 && (long)P + p.gen_length > g->d.ctx_size) {
        rf_set_error("prompt (%d tokens) + answer (%d) exceed --ctx-size %d", P, p.gen_length, g->d.ctx_size);
        return -1;
    }
    if (rf_params_check(g->m, prompt, P, &p)) return -1;
    memset(u, 0, sizeof *u);
    u->tok = g->tok;
    u->quiet = g->a.json || g->a.visualize;
    u->stop = g->tok && g->a.reverse_prompt && *g->a.reverse_prompt ? g->a.reverse_prompt : NULL;
    u->stream = g->tok && (!u->quiet || u->stop) ? rf_text_stream_new(g->tok, 1) : NULL;
    /* ReFusion answers whole slots: the answer may run past gen_length */
    int G = (ar || mdm) ? p.gen_length : (p.gen_length + p.slot_size - 1) / p.slot_size * p.slot_size;
    if (g->a.visualize) {
        u->vis = g->a.json ? stderr : stdout;
        u->tty = isatty(fileno(u->vis));
        u->G = G;
        u->cell_tok = rf_calloc(u->G, sizeof(int32_t));
        u->cell = rf_calloc(u->G, 1);
    }
    p.on_tokens = on_tokens, p.on_event = on_event, p.user = u;
    if (g->a.logprobs >= 0) p.logprobs = 1, p.top_logprobs = g->a.logprobs, p.on_logprobs = on_logprobs;
    p.cancel = &g_cancel;
    p.no_cache = g->a.naive;
    r->ids = rf_malloc((size_t)G * sizeof(int32_t) + 1);
    int n = rf_generate(g->sess, prompt, P, &p, r->ids, G, &r->st);
    if (u->stop && !u->stopped) { /* the rest, which cannot hold the stop text now */
        const char *rest = rf_text_stream_flush(u->stream);
        if (rest) stop_text(u, rest);
        if (!u->stopped && !u->quiet) fwrite(u->acc + u->printed, 1, u->acc_len - u->printed, stdout);
    }
    if (u->stream && !u->stop) {
        const char *rest = rf_text_stream_flush(u->stream);
        if (rest && !u->quiet) fputs(rest, stdout);
    }
    if (!u->quiet) fputc('\n', stdout);
    fflush(stdout);
    rf_text_stream_free(u->stream);
    free(u->cell_tok), free(u->cell);
    u->stream = NULL, u->cell_tok = NULL, u->cell = NULL;
    if (u->stopped) { /* the stop text's cancel: the answer is what came before it */
        g_cancel = 0;
        memset(&r->st, 0, sizeof r->st);
        r->n = u->n_got < G ? u->n_got : G;
        memcpy(r->ids, u->got, (size_t)r->n * sizeof(int32_t));
        r->st.n_tokens = r->n;
        r->stop_text = u->acc;
        u->acc = NULL;
    }
    r->lp = u->lp, u->lp = NULL;
    free(u->acc), free(u->got);
    u->acc = NULL, u->got = NULL;
    if (u->stopped) return 0;
    if (n < 0) return -1;
    r->n = n < G ? n : G;
    return 0;
}

/* The chat template over the messages, encoded into *ids (malloc'd). */
static int encode_chat(gen_ctx *g, const rf_chat_message *msgs, int n, int32_t **ids, int *P) {
    int cap = 1024;
    for (;;) {
        *ids = rf_malloc((size_t)cap * sizeof(int32_t));
        int k = rf_tokenize_chat(g->tok, msgs, n, g->think, *ids, cap);
        if (k < 0) return -1;
        *P = k;
        if (k <= cap) return 0;
        free(*ids);
        cap = k;
    }
}

/* Raw text, encoded into *ids (malloc'd). */
static int encode_text(gen_ctx *g, const char *text, int32_t **ids, int *P) {
    int k = rf_tokenize(g->tok, text, 0, NULL, 0);
    if (k < 0) return -1;
    *ids = rf_malloc((size_t)k * sizeof(int32_t) + 1);
    *P = rf_tokenize(g->tok, text, 0, *ids, k);
    return *P < 0 ? -1 : 0;
}

/* ---- refusion chat / generate -i ------------------------------------------------------- */
static int chat_repl(gen_ctx *g) {
    if (!g->tok || rf_token_id(g->tok, "<|im_start|>") < 0) {
        fprintf(stderr, "refusion: chat: %s has no chat template (no tokenizer with <|im_start|>)\n", g->a.model);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends getline */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    int tty = isatty(0);
    int cap = 16, n = 0; /* history: [system], user, assistant, user, ... */
    rf_chat_message *h = rf_malloc(cap * sizeof *h);
    if (g->a.system) h[n++] = (rf_chat_message){"system", rf_strdup(g->a.system)};
    int n_fixed = n;
    fprintf(stderr, "refusion chat: %s (%s). /reset clears the history, /exit quits; Ctrl-C stops an answer.\n",
            g->a.model, rf_method_name(g->d.gen.method));
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0;
    for (;;) {
        g_cancel = 0;
        fputs(tty ? "\033[1m> \033[0m" : "> ", stdout);
        fflush(stdout);
        errno = 0;
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) { /* end of input, or Ctrl-C at the prompt */
            fputc('\n', stdout);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            for (int i = n_fixed; i < n; i++) free((char *)h[i].content);
            n = n_fixed;
            printf("[history cleared]\n");
            continue;
        }
        h = rf_grow(h, sizeof *h, n + 1, &cap, cap); /* this turn and the answer */
        h[n] = (rf_chat_message){"user", rf_strdup(line)};
        int32_t *ids = NULL;
        int P = 0;
        if (encode_chat(g, h, n + 1, &ids, &P)) {
            fprintf(stderr, "refusion: chat: %s\n", rf_last_error());
            free((char *)h[n].content);
            free(ids);
            continue;
        }
        ui u;
        answer r;
        int grc = run_decoder(g, ids, P, &u, &r);
        free(ids);
        if (grc) {
            if (g_cancel) printf("[interrupted]\n");
            else fprintf(stderr, "refusion: chat: %s\n", rf_last_error());
            free((char *)h[n].content); /* the turn is dropped */
            free(r.ids), free(r.lp);
            continue;
        }
        char *text = r.stop_text ? r.stop_text : detokenize(g->tok, r.ids, r.n, 1);
        if (g->a.visualize) printf("%s\n", text ? text : "");
        fflush(stdout);
        if (r.stop_text) /* cancelled at the stop text: no statistics */
            fprintf(stderr, "[%s: prompt %d tokens, answer %d tokens, stopped at the reverse prompt]\n",
                    rf_method_name(g->d.gen.method), P, r.n);
        else
            fprintf(stderr, "[%s: prompt %d tokens, answer %d tokens, %d model calls, %.2f s]\n",
                    rf_method_name(g->d.gen.method), P, r.st.n_tokens, r.st.n_calls, r.st.seconds);
        h[n + 1] = (rf_chat_message){"assistant", text ? text : rf_strdup("")};
        n += 2;
        free(r.ids), free(r.lp);
    }
    for (int i = 0; i < n; i++) free((char *)h[i].content);
    free(h);
    free(line);
    signal(SIGINT, SIG_DFL);
    return rc;
}

/* --grammar / --grammar-file / --json-schema into g->d.gen.constraint
 * (one error line and -1 when it cannot be built) */
static int grammar_setup(gen_ctx *g, const char *cmd) {
    const rf_decode_opts *d = &g->d;
    if (!d->grammar && !d->grammar_file && !d->json_schema) return 0;
    const char *opt = d->grammar ? "--grammar" : d->grammar_file ? "--grammar-file" : "--json-schema";
    if (!g->tok) {
        fprintf(stderr, "refusion: %s: %s needs the model's tokenizer (the grammar reads token bytes)\n", cmd, opt);
        return -1;
    }
    char *file = NULL;
    if (d->grammar_file && !(file = rf_read_text(d->grammar_file))) {
        fprintf(stderr, "refusion: %s: --grammar-file: %s\n", cmd, rf_last_error());
        return -1;
    }
    rf_constraint *c = d->json_schema ? rf_constraint_json_schema(g->tok, d->json_schema)
                                      : rf_constraint_gbnf(g->tok, file ? file : d->grammar);
    free(file);
    if (!c) {
        fprintf(stderr, "refusion: %s: %s: %s\n", cmd, opt, rf_last_error());
        return -1;
    }
    g->d.gen.constraint = c;
    return 0;
}

/* The prompt's ids: --ids, or the text encoded (with the chat template when
 * chat is 1; -1: when the vocabulary has <|im_start|>). 0, or -1 after the
 * error line. */
static int encode_prompt(gen_ctx *g, int chat, int32_t **prompt, int *P) {
    if (g->a.ids) return parse_ids(g->a.ids, prompt, P) ? -1 : 0;
    if (!g->tok) {
        fprintf(stderr, "refusion: %s: no tokenizer (tokenizer.json or GGUF tokenizer metadata), give the prompt as --ids\n", g->a.model);
        return -1;
    }
    if (chat < 0) chat = rf_token_id(g->tok, "<|im_start|>") >= 0;
    int erc;
    if (chat) {
        rf_chat_message msgs[2] = {{"system", g->a.system}, {"user", g->a.prompt}};
        erc = g->a.system ? encode_chat(g, msgs, 2, prompt, P) : encode_chat(g, msgs + 1, 1, prompt, P);
    } else {
        if (g->a.system) {
            fprintf(stderr, "refusion: generate: --system needs the chat template (not --no-chat)\n");
            return -1;
        }
        erc = encode_text(g, g->a.prompt, prompt, P);
    }
    if (erc) {
        fprintf(stderr, "refusion: generate: prompt: %s\n", rf_last_error());
        return -1;
    }
    return 0;
}

/* The answer's report: --json, or (--visualize: the answer) the statistics
 * line on stderr; the answer's text (malloc'd, or NULL) in *answer_text. */
static void report_answer(const gen_ctx *g, answer *r, const int32_t *prompt, int P, char **answer_text) {
    const char *mode = rf_method_name(g->d.gen.method);
    if (r->stop_text) *answer_text = r->stop_text, r->stop_text = NULL;
    else if (g->tok) *answer_text = detokenize(g->tok, r->ids, r->n, 1);
    if (g->a.json) {
        print_json(r, prompt, P, *answer_text, mode, &g->d, g->tok);
        return;
    }
    if (g->a.visualize) printf("%s\n", *answer_text ? *answer_text : "");
    fflush(stdout); /* the answer before the statistics line on stderr */
    if (g->a.reverse_prompt && !r->st.n_calls) /* stopped at the stop text: no statistics */
        fprintf(stderr, "[%s: %d tokens, stopped at the reverse prompt]\n", mode, r->n);
    else
        fprintf(stderr, "[%s: %d tokens, %d model calls, TPF %.2f, %.2f tokens/call, %.1f tokens/s, %.2f s]\n",
                mode, r->st.n_tokens, r->st.n_calls, r->st.tpf, r->st.tokens_per_call, r->st.tokens_per_s,
                r->st.seconds);
}

static int generate_main(int argc, char **argv, int interactive) {
    const char *cmd = interactive ? "chat" : "generate";
    gen_ctx g;
    memset(&g, 0, sizeof g);
    rf_decode_opts_default(&g.d);
    rf_decode_opts def = g.d;
    g.a.logprobs = -1;
    gen_args def_a = g.a;
    rf_chat_template_opts tpl = {0};
    const rf_opt_group groups[] = {
        {NULL, gen_opts, (int)(sizeof gen_opts / sizeof gen_opts[0]), &g.a, NULL, &def_a},
        RF_CHAT_TEMPLATE_GROUP(&tpl),
        RF_DECODE_GROUP(&g.d, &def),
    };
    const char *synopsis =
        interactive ? "-m MODEL [options]\nChat with the model in the terminal (the chat template, history kept)."
                    : "-m MODEL [-p TEXT | -f FILE | --ids IDS] [options]\n"
                      "Generate an answer with ReFusion plan-and-infill decoding (or AR / mdm decoding).\n"
                      "Text streams to stdout as it becomes final; statistics go to stderr.";
    int prc = rf_args_parse(cmd, synopsis, groups, 3, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    rf_decode_opts_finish(&g.d);
    if (rf_decode_opts_cli(cmd, &g.d)) return 2;
    interactive = (interactive || g.a.interactive) && !g.a.no_conversation;
    g.think = !g.a.no_think;
    int chat = g.a.no_chat ? 0 : g.a.chat || tpl.chat_template || tpl.jinja ? 1 : -1;
    int n_src = (g.a.prompt != NULL) + (g.a.file != NULL) + (g.a.ids != NULL);
    if (!g.a.model || n_src > 1 || (interactive && n_src)) {
        fprintf(stderr, "refusion: %s: need -m MODEL and %s\n", cmd,
                interactive ? "no prompt (it is typed in)" : "at most one of -p TEXT / -f FILE / --ids IDS");
        return 2;
    }
    if (interactive && (g.a.json || g.a.ids)) {
        fprintf(stderr, "refusion: %s: --json and --ids do not go with the interactive chat\n", cmd);
        return 2;
    }
    if (g.a.logprobs >= 0 && !g.a.json) {
        fprintf(stderr, "refusion: %s: --logprobs reports in the --json output: give --json too\n", cmd);
        return 2;
    }
    if (!interactive && !n_src) {
        if (isatty(0)) {
            fprintf(stderr, "refusion: generate: no prompt: give -p TEXT, -f FILE, --ids IDS or text on stdin "
                            "(-i for a chat)\n");
            return 2;
        }
        g.a.file = "-";
    }
    if (g.a.prompt && !strcmp(g.a.prompt, "-")) g.a.prompt = NULL, g.a.file = "-";

    int rc = 1, P = 0;
    int32_t *prompt = NULL;
    char *file_text = NULL, *answer_text = NULL;
    ui u;
    answer r;
    memset(&r, 0, sizeof r);

    if (g.a.file && !(file_text = rf_read_text(g.a.file))) {
        fprintf(stderr, "refusion: %s: %s\n", cmd, rf_last_error());
        return 1;
    }
    if (file_text) {
        /* a file's final newline is not part of the prompt */
        size_t n = strlen(file_text);
        if (n && file_text[n - 1] == '\n') file_text[--n] = 0;
        if (!n) {
            fprintf(stderr, "refusion: %s: no prompt: %s is empty\n", cmd, strcmp(g.a.file, "-") ? g.a.file : "stdin");
            free(file_text);
            return 2;
        }
        g.a.prompt = file_text;
    }
    if (!(g.m = rf_model_open(g.a.model))) {
        fprintf(stderr, "refusion: %s\n", rf_last_error());
        free(file_text);
        return 1;
    }
    /* the tokenizer beside the weights: DIR/tokenizer.json or the GGUF's metadata */
    if (rf_model_has_tokenizer(g.m) && !(g.tok = rf_tokenizer_open(g.m))) {
        fprintf(stderr, "refusion: %s\n", rf_last_error());
        goto out;
    }
    /* the checkpoint's recommended settings under the flags */
    if (rf_decode_opts_from_config(&g.d, g.a.model, g.tok ? rf_tokenizer_eos_id(g.tok) : -1)) {
        fprintf(stderr, "refusion: %s: %s\n", cmd, rf_last_error());
        goto out;
    }
    if (g.d.threads > 0) omp_set_num_threads(g.d.threads);
    if (g.a.verbose) {
        fprintf(stderr, "refusion %s: settings for %s:\n", cmd, g.a.model);
        rf_decode_opts_print(stderr, &g.d);
    }
    if (tpl.chat_template && g.tok && rf_tokenizer_set_chat_template(g.tok, tpl.chat_template)) {
        fprintf(stderr, "refusion: %s\n", rf_last_error());
        goto out;
    }
    if (g.tok) rf_tokenizer_set_special_in_content(g.tok, tpl.special_in_content);
    if (grammar_setup(&g, cmd)) goto out;
    if (!(g.sess = rf_session_new(g.m))) {
        fprintf(stderr, "refusion: %s\n", rf_last_error());
        goto out;
    }
    if (interactive) {
        rc = chat_repl(&g);
        goto out;
    }
    if (encode_prompt(&g, chat, &prompt, &P)) goto out;
    if (run_decoder(&g, prompt, P, &u, &r)) {
        fprintf(stderr, "refusion: generate: %s\n", rf_last_error());
        goto out;
    }
    report_answer(&g, &r, prompt, P, &answer_text);
    rc = 0;
out:
    free(r.ids);
    free(r.lp);
    free(answer_text);
    free(prompt);
    free(file_text);
    rf_session_free(g.sess);
    rf_constraint_free((rf_constraint *)g.d.gen.constraint);
    rf_tokenizer_close(g.tok);
    rf_model_close(g.m);
    return rc;
}

int cmd_generate(int argc, char **argv) { return generate_main(argc, argv, 0); }
int cmd_chat(int argc, char **argv) { return generate_main(argc, argv, 1); }
