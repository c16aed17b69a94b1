/* cmd_generate.c - `refusion generate`: ReFusion or AR decoding of one prompt.
 *
 * Text streams to stdout as it becomes final (answer tokens with no masked
 * position before them); --json prints one JSON object at the end instead;
 * --visualize draws the answer's slots filling in, one line per event
 * (ANSI colours on a terminal, state letters otherwise). */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion generate -m MODEL_DIR (-p TEXT | --ids IDS) [options]\n"
            "Generate an answer with ReFusion plan-and-infill decoding (or AR decoding).\n\n"
            "  -m, --model DIR|GGUF    checkpoint directory (tokenizer.json read from it if present)\n"
            "                          or a .gguf file (its tokenizer metadata)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  --ids IDS               prompt as token ids, comma or space separated\n"
            "  --chat / --no-chat      apply the chat template to -p TEXT (default: on when\n"
            "                          the tokenizer has <|im_start|>)\n"
            "  --no-think              chat template with enable_thinking=false\n"
            "  --mode refusion|ar|mdm  decoder (default refusion; mdm: LLaDA-style baseline for\n"
            "                          models trained with the mdm objective)\n"
            "  --steps N               mdm: diffusion steps over the answer (default gen length)\n"
            "  -n, --gen-length N      answer length (default 512; ReFusion pads it to whole slots)\n"
            "  --slot-size N           ReFusion slot size (default 4)\n"
            "  --blocks N              serial blocks, ReFusion and mdm (default 32)\n"
            "  --slot-threshold X      plan slots whose first token's prob > X (default 0.6)\n"
            "  --token-threshold X     accept tokens whose AR prob > X (default 0.3)\n"
            "  --ar-verify MODE        beyond the paper (REFUSION.md 3b): off (default), correct,\n"
            "                          first or both (see refusion eval --help)\n"
            "  --lookahead             beyond the paper (REFUSION.md 3c): verification also feeds\n"
            "                          the next plan's masks (same answer, fewer calls)\n"
            "  -t, --temperature X     0 = greedy (default); ReFusion: Gumbel-max planning\n"
            "  --top-k N  --top-p X    AR sampling filters (default off)\n"
            "  --seed N                sampling seed (default 0)\n"
            "  --threads N             OpenMP threads\n"
            "  --json                  print prompt/answer ids, text and statistics as JSON\n"
            "  --visualize             show how the slots fill in, step by step\n"
            "  --naive                 ReFusion without a KV cache (slow; for checking)\n");
}

/* "1, 2 3" -> ids; -1 on anything that is not an integer */
static int parse_ids(const char *s, int **ids, int *n) {
    int cap = 16;
    *ids = rf_malloc(cap * sizeof(int));
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
        if (*n == cap) {
            cap *= 2;
            int *g = rf_malloc(cap * sizeof(int));
            memcpy(g, *ids, *n * sizeof(int));
            free(*ids);
            *ids = g;
        }
        (*ids)[(*n)++] = (int)v;
        s = end;
    }
    return 0;
}

/* ---- streaming and visualisation ------------------------------------------------ */
enum { C_MASK, C_PLAN, C_DRAFT, C_VERIFIED, C_FAST, C_INFILL, C_DROP };
typedef struct {
    const rf_tokenizer *tok;
    rf_tok_stream *stream;
    int quiet;          /* --json / --visualize: no streaming */
    FILE *vis;          /* visualisation stream, or NULL */
    int tty;
    int G;
    int *cell_tok;      /* [G] */
    unsigned char *cell;/* [G] C_* */
} ui;

static void on_tokens(const int *ids, int n, void *user) {
    ui *u = user;
    if (u->quiet) return;
    for (int i = 0; i < n; i++) {
        if (u->stream) {
            const char *s = rf_tok_stream_put(u->stream, ids[i]);
            if (s) fputs(s, stdout);
        } else {
            printf("%d ", ids[i]);
        }
    }
    fflush(stdout);
}

/* a token as printable text: control characters shown as symbols */
static void put_piece(FILE *f, const ui *u, int id) {
    if (!u->tok) {
        fprintf(f, "%d ", id);
        return;
    }
    char *s = rf_tok_decode(u->tok, &id, 1, 0);
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

static void on_event(const rf_decode_event *ev, void *user) {
    ui *u = user;
    if (!u->vis) return;
    const char *what = "";
    for (int i = 0; i < ev->n; i++) {
        int a = ev->apos[i];
        if (a < 0 || a >= u->G) continue;
        switch (ev->kind) {
        case RF_EV_PLAN: u->cell[a] = C_PLAN, u->cell_tok[a] = ev->tok[i], what = "plan"; break;
        case RF_EV_FAST_COMMIT: u->cell[a] = C_FAST, u->cell_tok[a] = ev->tok[i], what = "fast"; break;
        case RF_EV_INFILL_ITER:
            u->cell[a] = ev->accepted[i] ? C_VERIFIED : C_DRAFT, u->cell_tok[a] = ev->tok[i], what = "infill";
            break;
        case RF_EV_INFILL_COMMIT: u->cell[a] = C_INFILL, u->cell_tok[a] = ev->tok[i], what = "commit"; break;
        case RF_EV_DROP: u->cell[a] = C_DROP, what = "eos-cut"; break;
        case RF_EV_AR_TOKEN: u->cell[a] = C_FAST, u->cell_tok[a] = ev->tok[i], what = "ar"; break;
        }
    }
    if (ev->kind == RF_EV_DROP && ev->n > 0) {
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
static json_t *ids_json(const int *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static void print_json(const rf_gen_result *r, const int *prompt, int P, const char *text, const char *mode,
                       const rf_gen_params *p) {
    json_t *steps = json_array();
    for (int i = 0; i < r->n_steps; i++) {
        const rf_step_stat *s = &r->steps[i];
        json_array_append_new(steps, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "block", s->block,
                                               "slots_planned", s->slots_planned, "slots_fast", s->slots_fast,
                                               "slots_infilled", s->slots_infilled, "infill_iters",
                                               s->infill_iters, "tokens", s->tokens, "calls", s->calls));
    }
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(mode));
    json_object_set_new(o, "prompt_ids", ids_json(prompt, P));
    json_object_set_new(o, "answer_ids", ids_json(r->ids, r->n_ids));
    json_object_set_new(o, "text", text ? json_string(text) : json_null());
    json_object_set_new(o, "hit_eos", json_boolean(r->hit_eos));
    json_object_set_new(o, "model_calls", json_integer(r->n_calls));
    json_object_set_new(o, "tokens", json_integer(r->n_tokens));
    json_object_set_new(o, "tpf", json_real(r->tpf));
    json_object_set_new(o, "tokens_per_call", json_real(r->tokens_per_call));
    json_object_set_new(o, "tokens_per_s", json_real(r->tokens_per_s));
    json_object_set_new(o, "wall_s", json_real(r->wall_s));
    json_object_set_new(o, "settings",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:I}", "gen_length", p->gen_length,
                                  "slot_size", p->slot_size, "blocks", p->n_blocks, "slot_threshold",
                                  (double)p->slot_threshold, "token_threshold", (double)p->token_threshold,
                                  "temperature", (double)p->temperature, "top_k", p->top_k, "top_p",
                                  (double)p->top_p, "seed", (json_int_t)p->seed));
    json_object_set_new(json_object_get(o, "settings"), "lookahead", json_boolean(p->lookahead));
    json_object_set_new(json_object_get(o, "settings"), "ar_verify",
                        json_string(rf_ar_verify_name(p->ar_correct, p->ar_check_first)));
    const rf_accept_stats *ac = &r->accept;
    json_object_set_new(o, "accept",
                        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "first_free", ac->first_free, "first_checked",
                                  ac->first_checked, "first_replaced", ac->first_replaced, "verified",
                                  ac->verified, "forced_draft", ac->forced_draft, "forced_ar", ac->forced_ar));
    json_object_set_new(o, "steps", steps);
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s);
    free(s);
    json_decref(o);
}

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *text = NULL, *ids_arg = NULL, *mode = "refusion";
    int chat = -1, think = 1, as_json = 0, visualize = 0, naive = 0;
    long threads = 0, steps = 0, lv;
    rf_gen_params p;
    rf_gen_params_default(&p);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int need = 0; /* option takes a value */
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--no-chat")) chat = 0;
        else if (!strcmp(a, "--no-think")) think = 0;
        else if (!strcmp(a, "--json")) as_json = 1;
        else if (!strcmp(a, "--visualize")) visualize = 1;
        else if (!strcmp(a, "--naive")) naive = 1;
        else if (!strcmp(a, "--lookahead")) p.lookahead = 1;
        else need = 1;
        if (!need) continue;
        if (!v) {
            static const char *valued[] = {"-m", "--model", "-p", "--prompt", "--ids", "--mode", "-n",
                                           "--gen-length", "--slot-size", "--blocks", "--slot-threshold",
                                           "--token-threshold", "--ar-verify", "-t", "--temperature", "--top-k", "--top-p",
                                           "--seed", "--threads", "--steps"};
            int known = 0;
            for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(a, valued[k]);
            if (known) fprintf(stderr, "refusion: generate: %s needs a value\n", a);
            else fprintf(stderr, "refusion: generate: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) text = v;
        else if (!strcmp(a, "--ids")) ids_arg = v;
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--gen-length")) bad = rf_arg_long("generate", a, v, -1000000, 1000000, &lv), p.gen_length = (int)lv;
        else if (!strcmp(a, "--slot-size")) bad = rf_arg_long("generate", a, v, -1000000, 1000000, &lv), p.slot_size = (int)lv;
        else if (!strcmp(a, "--blocks")) bad = rf_arg_long("generate", a, v, -1000000, 1000000, &lv), p.n_blocks = (int)lv;
        else if (!strcmp(a, "--slot-threshold")) bad = rf_arg_float("generate", a, v, &p.slot_threshold);
        else if (!strcmp(a, "--token-threshold")) bad = rf_arg_float("generate", a, v, &p.token_threshold);
        else if (!strcmp(a, "--ar-verify")) bad = rf_arg_ar_verify("generate", a, v, &p.ar_correct, &p.ar_check_first);
        else if (!strcmp(a, "-t") || !strcmp(a, "--temperature")) bad = rf_arg_float("generate", a, v, &p.temperature);
        else if (!strcmp(a, "--top-k")) bad = rf_arg_long("generate", a, v, -1000000, 100000000, &lv), p.top_k = (int)lv;
        else if (!strcmp(a, "--top-p")) bad = rf_arg_float("generate", a, v, &p.top_p);
        else if (!strcmp(a, "--seed")) bad = rf_arg_long("generate", a, v, 0, 0x7fffffffffffffffL, &lv), p.seed = (uint64_t)lv;
        else if (!strcmp(a, "--threads")) bad = rf_arg_long("generate", a, v, 1, 1024, &threads);
        else if (!strcmp(a, "--steps")) bad = rf_arg_long("generate", a, v, 1, 1000000, &steps);
        else {
            fprintf(stderr, "refusion: generate: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad) return 2;
    }
    int ar = !strcmp(mode, "ar"), mdm = !strcmp(mode, "mdm");
    if (!ar && !mdm && strcmp(mode, "refusion")) {
        fprintf(stderr, "refusion: generate: --mode must be refusion, ar or mdm, got '%s'\n", mode);
        return 2;
    }
    if (!model_dir || (!text == !ids_arg)) {
        fprintf(stderr, "refusion: generate: need -m MODEL_DIR and exactly one of -p TEXT / --ids IDS\n");
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);

    int rc = 1, *prompt = NULL, P = 0;
    rf_tokenizer *tok = NULL;
    rf_model m;
    memset(&m, 0, sizeof m);
    char *answer_text = NULL;
    ui u;
    memset(&u, 0, sizeof u);
    rf_gen_result r;
    memset(&r, 0, sizeof r);

    if (rf_model_load(&m, model_dir)) {
        rf_print_error();
        return 1;
    }
    /* the tokenizer beside the weights: DIR/tokenizer.json or the GGUF's metadata */
    if (rf_tok_model_has_tokenizer(model_dir)) {
        tok = rf_tok_load(model_dir);
        if (!tok) {
            rf_print_error();
            goto out;
        }
    }
    if (ids_arg) {
        if (parse_ids(ids_arg, &prompt, &P)) goto out;
    } else {
        if (!tok) {
            fprintf(stderr, "refusion: %s: no tokenizer (tokenizer.json or GGUF tokenizer metadata), give the prompt as --ids\n", model_dir);
            goto out;
        }
        if (chat < 0) chat = rf_tok_id(tok, "<|im_start|>") >= 0;
        char *prompt_text = NULL;
        if (chat) {
            /* bad UTF-8 is reported at its offset in what the user typed, not
             * in the templated text: check the text on its own first */
            int *probe_ids = NULL, n_probe = 0;
            int prc = rf_tok_encode(tok, text, strlen(text), &probe_ids, &n_probe);
            free(probe_ids);
            if (prc) {
                fprintf(stderr, "refusion: generate: prompt: %s\n", rf_last_error());
                goto out;
            }
            rf_chat_msg msg = {"user", text};
            prompt_text = rf_chat_apply(tok, &msg, 1, 1, think);
            if (!prompt_text) {
                rf_print_error();
                goto out;
            }
        }
        const char *pt = prompt_text ? prompt_text : text;
        int erc = rf_tok_encode(tok, pt, strlen(pt), &prompt, &P);
        free(prompt_text);
        if (erc) {
            fprintf(stderr, "refusion: generate: prompt: %s\n", rf_last_error());
            goto out;
        }
    }
    if (tok) {
        int e = rf_tok_eos_id(tok);
        if (e >= 0) p.eos_id = e;
    }
    if (rf_gen_check(&m, prompt, P, &p, ar || mdm)) {
        fprintf(stderr, "refusion: generate: %s\n", rf_last_error());
        goto out;
    }

    u.tok = tok;
    u.quiet = as_json || visualize;
    u.stream = tok && !u.quiet ? rf_tok_stream_new(tok, 1) : NULL;
    if (visualize) {
        u.vis = as_json ? stderr : stdout;
        u.tty = isatty(fileno(u.vis));
        u.G = (ar || mdm) ? p.gen_length : (p.gen_length + p.slot_size - 1) / p.slot_size * p.slot_size;
        u.cell_tok = rf_calloc(u.G, sizeof(int));
        u.cell = rf_calloc(u.G, 1);
    }
    p.on_tokens = on_tokens, p.on_event = on_event, p.user = &u;
    rf_mdm_params mp;
    rf_mdm_params_default(&mp, &p);
    if (steps > 0) mp.steps = (int)steps;
    int grc = ar ? rf_generate_ar(&m, prompt, P, &p, &r)
              : mdm ? rf_generate_mdm(&m, prompt, P, &p, &mp, &r)
                 : naive ? rf_generate_refusion_naive(&m, prompt, P, &p, &r)
                         : rf_generate_refusion(&m, prompt, P, &p, &r);
    if (grc) {
        fprintf(stderr, "refusion: generate: %s\n", rf_last_error());
        goto out;
    }
    if (u.stream) {
        fputs(rf_tok_stream_flush(u.stream), stdout);
        fputc('\n', stdout);
    } else if (!u.quiet) {
        fputc('\n', stdout);
    }
    if (tok) answer_text = rf_tok_decode(tok, r.ids, r.n_ids, 1);
    if (as_json) {
        print_json(&r, prompt, P, answer_text, mode, &p);
    } else {
        if (visualize) printf("%s\n", answer_text ? answer_text : "");
        fflush(stdout); /* the answer before the statistics line on stderr */
        fprintf(stderr, "[%s: %d tokens, %d model calls, TPF %.2f, %.2f tokens/call, %.1f tokens/s, %.2f s]\n",
                mode, r.n_tokens, r.n_calls, r.tpf, r.tokens_per_call, r.tokens_per_s, r.wall_s);
    }
    rc = 0;
out:
    rf_gen_result_free(&r);
    free(answer_text);
    free(u.cell_tok), free(u.cell);
    if (u.stream) rf_tok_stream_free(u.stream);
    free(prompt);
    if (tok) rf_tok_free(tok);
    rf_model_free(&m);
    return rc;
}
