/* args.c - see args.h */
#include "common/args.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decode/presets.h"
#include "util/util.h"

/* ---- the shared decoding table ------------------------------------------------------ */
#define D(f) offsetof(rf_decode_opts, f)
#define G(f) offsetof(rf_decode_opts, gen.f)

const rf_opt rf_decode_table[] = {
    {"preset", 0, NULL, NULL, RF_OPT_CHOICE, 0, 0, 0, 0, "none" RF_DECODE_PRESET_CHOICES, D(preset), "TASK",
     "the paper's decoding settings for TASK (gen length, slot size, blocks, thresholds, greedy; "
     "decode/presets.h); the options given with it override its values"},
    {"decoder", 0, "mode", "mode", RF_OPT_CHOICE, 0, 0, 0, 0, "refusion|ar|mdm", G(method), "NAME",
     "refusion (plan-and-infill), ar (autoregressive), mdm (LLaDA-style baseline, for models trained "
     "with the mdm objective)"},
    {"gen-length", 'n', "n-predict", "max_tokens", RF_OPT_LEN, 1, 1000000, 0, RF_HI_CONTEXT, NULL, D(gen.gen_length),
     "N", "answer length in tokens (ReFusion decodes whole slots; the server cuts the answer to N); -1: until "
     "EOS or the end of the context"},
    {"slot-size", 0, NULL, "slot_size", RF_OPT_INT, 1, 1000000, 0, RF_HI_CONTEXT, NULL, G(slot_size), "N",
     "refusion: tokens per slot"},
    {"blocks", 0, NULL, "blocks", RF_OPT_INT, 1, 1000000, 0, RF_HI_CONTEXT, NULL, G(n_blocks), "N",
     "refusion and mdm: serial blocks (HTTP also \"serial_num_blocks\")"},
    {"slot-threshold", 0, NULL, "slot_threshold", RF_OPT_FLOAT, 0, 1, 0, 0, NULL, G(slot_threshold), "X",
     "refusion: plan the slots whose first token's probability > X"},
    {"token-threshold", 0, NULL, "token_threshold", RF_OPT_FLOAT, 0, 1, 0, 0, NULL, G(token_threshold), "X",
     "refusion: accept a drafted token when its AR probability > X"},
    {"ar-verify", 0, NULL, "ar_verify", RF_OPT_CHOICE, 0, 0, 0, 0, "off|correct|first|both", D(ar_verify), "MODE",
     "refusion, beyond the paper (docs/refusion.md §4): correct = a rejected token becomes the AR head's "
     "choice, first = a slot's first token is checked by the AR head, both"},
    {"lookahead", 0, NULL, "lookahead", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(lookahead), NULL,
     "refusion, beyond the paper (docs/refusion.md §4): a global verification also feeds the next plan's "
     "masks (same answer, fewer but wider calls)"},
    {"jacobi", 0, NULL, "jacobi", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(jacobi), NULL,
     "refusion, beyond the paper (docs/refusion.md §4; needs --ar-verify correct or both): infilling "
     "re-verifies its drafts without re-drafting them (one call per iteration, not two)"},
    {"rolling", 0, NULL, "rolling", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(rolling), NULL,
     "refusion, beyond the paper (decode/rolling.c): a rolling slot - every call verifies the drafts "
     "with the AR head and drafts the next slot-size tokens with masks behind them; the answer is AR "
     "decoding's (same --temp/--top-k/--top-p/--seed); uses --slot-size, --slot-threshold"},
    {"draft-policy", 0, NULL, "draft_policy", RF_OPT_CHOICE, 0, 0, 0, 0, "fixed|adaptive", G(draft_adaptive), "NAME",
     "rolling slot: fixed = slot-size drafts and masks in every call; adaptive = each call's width (up "
     "to slot-size) chosen for the most expected tokens per unit of call cost, measured once for the "
     "model (same answer)"},
    {"temp", 0, "temperature", "temperature", RF_OPT_FLOAT, 0, 1e6, 0, 0, NULL, G(temperature), "X",
     "sampling temperature, 0 = greedy (refusion: Gumbel-max planning)"},
    {"top-k", 0, NULL, "top_k", RF_OPT_INT, 0, 1000000000, 0, RF_HI_VOCAB, NULL, G(top_k), "N",
     "ar sampling: keep the N most likely tokens (0 = off)"},
    {"top-p", 0, NULL, "top_p", RF_OPT_FLOAT, 0, 1, 1, 0, NULL, G(top_p), "X",
     "ar sampling: keep the smallest set with probability mass >= X (1 = off)"},
    {"min-p", 0, NULL, "min_p", RF_OPT_FLOAT, 0, 1, 0, 0, NULL, G(min_p), "X",
     "ar sampling (also --rolling): keep the tokens whose probability >= X times the top one's (0 = off)"},
    {"repeat-penalty", 0, NULL, "repeat_penalty", RF_OPT_FLOAT, 0, 1e6, 1, 0, NULL, G(repeat_penalty), "X",
     "ar sampling (also --rolling): divide the logits of the tokens in the last --repeat-last-n tokens "
     "by X (multiply the negative ones; 1 = off)"},
    {"presence-penalty", 0, NULL, "presence_penalty", RF_OPT_FLOAT, -2, 2, 0, 0, NULL, G(presence_penalty), "X",
     "ar sampling (also --rolling): subtract X from the logits of the tokens in that window (0 = off)"},
    {"frequency-penalty", 0, NULL, "frequency_penalty", RF_OPT_FLOAT, -2, 2, 0, 0, NULL, G(frequency_penalty), "X",
     "ar sampling (also --rolling): subtract X times its count in that window from a token's logit (0 = off)"},
    {"repeat-last-n", 0, NULL, "repeat_last_n", RF_OPT_INT, -1, 1000000000, 0, 0, NULL, G(penalty_last_n), "N",
     "the penalties' window: the last N tokens of prompt + answer (-1 = all, 0 = none)"},
    {"ignore-eos", 0, NULL, "ignore_eos", RF_OPT_FLAG, 0, 0, 0, 0, NULL, D(ignore_eos), NULL,
     "the answer does not end at the end-of-sequence token: it runs to --gen-length"},
    {"seed", 's', NULL, "seed", RF_OPT_I64, -1, (double)INT64_MAX, 0, 0, NULL, G(seed), "N",
     "sampling seed; -1: a random one (serve: the default, drawn per request and reported in the answer)"},
    {"steps", 0, NULL, "steps", RF_OPT_INT, 0, 1000000, 0, RF_HI_CONTEXT, NULL, G(mdm_steps), "N",
     "mdm: diffusion steps over the answer (0 = the answer length)"},
    {"threads", 't', NULL, NULL, RF_OPT_INT, 0, 1024, 0, 0, NULL, D(threads), "N",
     "OpenMP threads (0 = OpenMP's default; serve: of the scheduler's model calls, default all cores)"},
    {"ctx-size", 'c', NULL, NULL, RF_OPT_INT, 0, 100000000, 0, 0, NULL, D(ctx_size), "N",
     "prompt + answer limit in tokens (0 = the model's context)"},
    {"n-gpu-layers", 0, "gpu-layers", NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(n_gpu_layers), "N",
     "accepted for llama.cpp's habit and ignored, with a note: this build runs on the CPU"},
    {"flash-attn", 0, NULL, NULL, RF_OPT_CHOICE, 0, 0, 0, 0, "auto|on|off", D(flash_attn), "on|off|auto",
     "accepted for llama.cpp's habit, with a note when given: attention here is always computed exactly, "
     "in one pass over the cache (no separate kernel to switch)"},
    {"generation-config", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(generation_config), "FILE|none",
     "the recommended settings to start from (default: the model directory's generation_config.json; "
     "none: the built-in defaults); flags override them"},
    {"grammar", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(grammar), "GBNF",
     "generate: the answer is a sentence of this grammar (llama.cpp's GBNF, start symbol root; "
     "docs/grammar.md); every decoder (--rolling gives ar's answer; plan-and-infill and mdm commit in "
     "position order under a grammar)"},
    {"grammar-file", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(grammar_file), "FILE",
     "generate: --grammar read from FILE"},
    {"json-schema", 'j', NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(json_schema), "JSON",
     "generate: the answer is a JSON document valid under this JSON schema (a schema keyword it cannot "
     "enforce is refused, naming it: docs/grammar.md)"},
    {"hf-repo", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, D(hf_repo), "REPO",
     "refused: nothing is downloaded (download the checkpoint yourself and give it with -m)"},
};
const int rf_decode_table_n = (int)(sizeof rf_decode_table / sizeof rf_decode_table[0]);
_Static_assert(sizeof rf_decode_table / sizeof rf_decode_table[0] <= RF_DECODE_ROWS_MAX,
               "rf_decode_opts.src needs a larger RF_DECODE_ROWS_MAX");

const char *const rf_src_names[5] = {"default", "generation_config.json", "flag", "request", "preset"};

/* llama.cpp's multi-letter short options (common/arg.cpp): the row of ours
 * each stands for, or NULL where we have none, and llama.cpp's long name. A
 * command without the row does not know the spelling either; the parser
 * then names llama.cpp's option instead of reading "-sys" as "-s ys". */
static const struct {
    const char *spelling, *name, *llama;
} llama_shorts[] = {
    {"cnv", "interactive", "--conversation"},
    {"no-cnv", "no-conversation", "--no-conversation"},
    {"st", NULL, "--single-turn"},
    {"sys", "system", "--system-prompt"},
    {"sysf", NULL, "--system-prompt-file"},
    {"np", "parallel", "--parallel"},
    {"cb", "cont-batching", "--cont-batching"},
    {"nocb", "no-cont-batching", "--no-cont-batching"},
    {"ngl", "n-gpu-layers", "--n-gpu-layers"},
    {"ngld", NULL, "--n-gpu-layers-draft"},
    {"fa", "flash-attn", "--flash-attn"},
    {"hf", "hf-repo", "--hf-repo"},
    {"hfr", "hf-repo", "--hf-repo"},
    {"hff", NULL, "--hf-file"},
    {"hft", NULL, "--hf-token"},
    {"hfd", NULL, "--hf-repo-draft"},
    {"hfv", NULL, "--hf-repo-v"},
    {"mu", NULL, "--model-url"},
    {"md", NULL, "--model-draft"},
    {"ctk", NULL, "--cache-type-k"},
    {"ctv", NULL, "--cache-type-v"},
    {"ctkd", NULL, "--cache-type-k-draft"},
    {"ctvd", NULL, "--cache-type-v-draft"},
    {"dev", NULL, "--device"},
    {"devd", NULL, "--device-draft"},
    {"ts", NULL, "--tensor-split"},
    {"sm", NULL, "--split-mode"},
    {"mg", NULL, "--main-gpu"},
    {"tb", NULL, "--threads-batch"},
    {"td", NULL, "--threads-draft"},
    {"tbd", NULL, "--threads-batch-draft"},
    {"ub", NULL, "--ubatch-size"},
    {"Cr", NULL, "--cpu-range"},
    {"Cb", NULL, "--cpu-mask-batch"},
    {"Crb", NULL, "--cpu-range-batch"},
    {"cd", NULL, "--ctx-size-draft"},
    {"dt", NULL, "--defrag-thold"},
    {"nkvo", NULL, "--no-kv-offload"},
    {"kvu", NULL, "--kv-unified"},
    {"cmoe", NULL, "--cpu-moe"},
    {"ncmoe", NULL, "--n-cpu-moe"},
    {"ot", NULL, "--override-tensor"},
    {"lcs", NULL, "--lookup-cache-static"},
    {"lcd", NULL, "--lookup-cache-dynamic"},
    {"gan", NULL, "--grp-attn-n"},
    {"gaw", NULL, "--grp-attn-w"},
    {"sp", NULL, "--special"},
    {"mli", NULL, "--multiline-input"},
    {"lv", NULL, "--verbosity"},
    {"to", "timeout", "--timeout"},
    {"sps", NULL, "--slot-prompt-similarity"},
    {"cram", NULL, "--cache-ram"},
    {"mm", NULL, "--mmproj"},
    {"mmu", NULL, "--mmproj-url"},
    {"jf", NULL, "--json-schema-file"},
    {"dkvc", NULL, "--dump-kv-cache"},
};
#define N_LLAMA_SHORTS (sizeof llama_shorts / sizeof *llama_shorts)

static const char *llama_short(const rf_opt *o) {
    for (size_t i = 0; i < N_LLAMA_SHORTS; i++)
        if (llama_shorts[i].name && !strcmp(o->name, llama_shorts[i].name)) return llama_shorts[i].spelling;
    return NULL;
}

const rf_opt rf_chat_template_table[] = {
    {"chat-template", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, offsetof(rf_chat_template_opts, chat_template),
     "FILE|NAME", "render prompts with this Jinja template file instead of the model's (chat_template.jinja, "
     "tokenizer_config.json or GGUF), with llama.cpp's built-in template NAME (chatml, llama3, llama2, "
     "llama2-sys, mistral-v7, mistral-v7-tekken, phi3, zephyr, gemma, vicuna, deepseek), or with builtin: "
     "the built-in Qwen3 renderer"},
    {"jinja", 0, NULL, NULL, RF_OPT_FLAG, 0, 0, 0, 0, NULL, offsetof(rf_chat_template_opts, jinja), NULL,
     "use the model's Jinja chat template (the default; llama.cpp's spelling)"},
    {"special-in-content", 0, NULL, NULL, RF_OPT_FLAG, 0, 0, 0, 0, NULL,
     offsetof(rf_chat_template_opts, special_in_content), NULL,
     "parse special tokens written in the messages (\"<|im_end|>\" ends the turn); by default they are plain text "
     "and only the template's own markers are special"},
};
const int rf_chat_template_table_n = (int)(sizeof rf_chat_template_table / sizeof rf_chat_template_table[0]);

void rf_decode_opts_default(rf_decode_opts *d) {
    memset(d, 0, sizeof *d);
    rf_gen_params_default(&d->gen);
    d->config_eos = -1;
}

void rf_decode_opts_finish(rf_decode_opts *d) {
    d->gen.ar_correct = d->ar_verify & 1;
    d->gen.ar_check_first = d->ar_verify >> 1;
    if (d->ignore_eos) d->gen.eos_id = -1;
}

static int row_index(const char *key);

uint64_t rf_seed_random(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) { /* no entropy source: time and address */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&x;
        x ^= x >> 31, x *= 0x9E3779B97F4A7C15ull, x ^= x >> 29;
    }
    return x & (uint64_t)INT64_MAX;
}

/* the AR sampling rows and their neutral values: plan-and-infill (without
 * the rolling slot) uses none of them, MDM not top-k / top-p */
static const struct {
    const char *row;
    int mdm; /* MDM ignores it too */
} ar_sampling[] = {{"top-k", 1}, {"top-p", 1}, {"min-p", 0}, {"repeat-penalty", 0}, {"presence-penalty", 0},
                   {"frequency-penalty", 0}};

static int at_neutral(const rf_params *p, const char *row) {
    if (!strcmp(row, "top-k")) return p->top_k == 0;
    if (!strcmp(row, "top-p")) return p->top_p == 1.0f;
    if (!strcmp(row, "min-p")) return p->min_p == 0.0f;
    if (!strcmp(row, "repeat-penalty")) return p->repeat_penalty == 1.0f;
    if (!strcmp(row, "presence-penalty")) return p->presence_penalty == 0.0f;
    return p->frequency_penalty == 0.0f;
}

int rf_decode_opts_unused(const rf_decode_opts *d) {
    const rf_params *p = &d->gen;
    int infill = p->method == RF_METHOD_REFUSION && !p->rolling, mdm = p->method == RF_METHOD_MDM;
    if (!infill && !mdm) return -1;
    for (size_t k = 0; k < sizeof ar_sampling / sizeof *ar_sampling; k++) {
        int i = row_index(ar_sampling[k].row);
        int given = d->src[i] == RF_SRC_FLAG || d->src[i] == RF_SRC_REQUEST;
        if (!given || (mdm && !ar_sampling[k].mdm) || at_neutral(p, ar_sampling[k].row)) continue;
        rf_set_error("--%s / \"%s\" is one of the AR sampling settings, which %s does not use: it draws from the "
                     "whole distribution (use the ar decoder or the rolling slot, or leave it out)",
                     rf_decode_table[i].name, rf_decode_table[i].http, mdm ? "mdm" : "plan-and-infill");
        return i;
    }
    return -1;
}

/* ---- generation_config.json ------------------------------------------------------------ */
static int opt_set_as(const rf_opt *o, void *base, const char *s, const char *as);

static int row_index(const char *key) {
    char k[64];
    snprintf(k, sizeof k, "%s", key);
    for (char *c = k; *c; c++)
        if (*c == '_') *c = '-';
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *o = &rf_decode_table[i];
        char h[64] = "";
        if (o->http) snprintf(h, sizeof h, "%s", o->http);
        for (char *c = h; *c; c++)
            if (*c == '_') *c = '-';
        if (!strcmp(k, o->name) || (o->alias && !strcmp(k, o->alias)) || (*h && !strcmp(k, h))) return i;
    }
    return -1;
}

/* one JSON value into row i, unless a flag set it; what: "refusion.slot_size" */
static int config_row(rf_decode_opts *d, int i, json_t *v, const char *what) {
    const rf_opt *o = &rf_decode_table[i];
    if (d->src[i] == RF_SRC_FLAG || d->src[i] == RF_SRC_PRESET) return 0;
    char text[64];
    int ok = 1;
    switch (o->type) {
    case RF_OPT_FLAG:
        if (!json_is_boolean(v)) ok = 0;
        else *(int *)((char *)d + o->offset) = json_is_true(v) == (o->lo >= 0);
        break;
    case RF_OPT_INT:
    case RF_OPT_LEN:
    case RF_OPT_I64:
        if (!json_is_integer(v)) ok = 0;
        else snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
        break;
    case RF_OPT_FLOAT:
    case RF_OPT_DOUBLE:
        if (!json_is_number(v)) ok = 0;
        else snprintf(text, sizeof text, "%.9g", json_number_value(v));
        break;
    case RF_OPT_CHOICE:
    case RF_OPT_STR:
    case RF_OPT_LIST: /* the decoding table has neither kind: refused as a string below */
        if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof text) ok = 0;
        else snprintf(text, sizeof text, "%s", json_string_value(v));
        break;
    }
    if (!ok) {
        rf_set_error("\"%s\" must be %s", what,
                     o->type == RF_OPT_FLAG ? "true or false" : o->type == RF_OPT_FLOAT ? "a number"
                     : o->type == RF_OPT_CHOICE || o->type == RF_OPT_STR ? "a string" : "an integer");
        return -1;
    }
    if (o->type == RF_OPT_STR || o->type == RF_OPT_LIST) { /* no file names or downloads from a config */
        rf_set_error("\"%s\" cannot be set in generation_config.json", what);
        return -1;
    }
    if (o->type != RF_OPT_FLAG && opt_set_as(o, d, text, what)) return -1;
    d->src[i] = RF_SRC_CONFIG;
    return 0;
}

static int apply_config(rf_decode_opts *d, json_t *root, int tok_eos) {
    if (!json_is_object(root)) {
        rf_set_error("not a JSON object");
        return -1;
    }
    /* Hugging Face's names -> this engine's rows */
    static const char *const hf[][2] = {{"max_new_tokens", "gen-length"}, {"top_k", "top-k"}, {"top_p", "top-p"},
                                        {"min_p", "min-p"}, {"repetition_penalty", "repeat-penalty"}};
    json_t *v;
    for (size_t k = 0; k < sizeof hf / sizeof *hf; k++)
        if ((v = json_object_get(root, hf[k][0])) && !json_is_null(v) &&
            config_row(d, row_index(hf[k][1]), v, hf[k][0]))
            return -1;
    /* do_sample false is greedy whatever temperature says (transformers);
     * true without a temperature samples at transformers' default, 1 */
    json_t *ds = json_object_get(root, "do_sample"), *t = json_object_get(root, "temperature");
    if (ds && !json_is_boolean(ds)) {
        rf_set_error("\"do_sample\" must be true or false");
        return -1;
    }
    json_t *one = json_real(1.0), *zero = json_real(0.0);
    int rc = 0;
    if (ds && json_is_false(ds)) rc = config_row(d, row_index("temp"), zero, "do_sample");
    else if (t && !json_is_null(t)) rc = config_row(d, row_index("temp"), t, "temperature");
    else if (ds) rc = config_row(d, row_index("temp"), one, "do_sample");
    json_decref(one), json_decref(zero);
    if (rc) return -1;
    if ((v = json_object_get(root, "eos_token_id")) && !json_is_null(v)) {
        int n = json_is_array(v) ? (int)json_array_size(v) : 1, first = -1, listed = 0;
        for (int k = 0; k < n; k++) {
            json_t *e = json_is_array(v) ? json_array_get(v, (size_t)k) : v;
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
                rf_set_error("\"eos_token_id\" must be a token id or a list of them");
                return -1;
            }
            if (k == 0) first = (int)json_integer_value(e);
            listed |= json_integer_value(e) == tok_eos;
        }
        if (n) d->config_eos = listed ? tok_eos : first;
    }
    json_t *r = json_object_get(root, "refusion");
    if (r && !json_is_object(r)) {
        rf_set_error("\"refusion\" must be an object of decoding settings");
        return -1;
    }
    /* the rolling slot is a choice of decoder: a --decoder on the command
     * line, or a task preset (the paper's plan-and-infill settings), chooses
     * without the file's rolling */
    int decoder_flag = d->src[row_index("decoder")] == RF_SRC_FLAG || d->preset, rolling = row_index("rolling");
    const char *key;
    json_object_foreach(r, key, v) {
        char what[96];
        snprintf(what, sizeof what, "refusion.%.60s", key);
        int i = row_index(key);
        if (i < 0) {
            rf_set_error("unknown setting \"%s\" (see refusion generate --help)", what);
            return -1;
        }
        if (i == rolling && decoder_flag) continue;
        if (config_row(d, i, v, what)) return -1;
    }
    return 0;
}

static int from_config_file(rf_decode_opts *d, const char *model_path, int tok_eos);

/* the file's settings, then the check that no flag sets what the decoder
 * chosen (by a flag or the file) does not use */
int rf_decode_opts_from_config(rf_decode_opts *d, const char *model_path, int tok_eos) {
    if (from_config_file(d, model_path, tok_eos)) return -1;
    return rf_decode_opts_unused(d) >= 0 ? -1 : 0;
}

static int from_config_file(rf_decode_opts *d, const char *model_path, int tok_eos) {
    char path[4096];
    const char *file = d->generation_config;
    if (file && !strcmp(file, "none")) return 0;
    if (!file) {
        struct stat st;
        if (!model_path || stat(model_path, &st) || !S_ISDIR(st.st_mode)) return 0; /* a .gguf: no such file */
        snprintf(path, sizeof path, "%s/generation_config.json", model_path);
        if (access(path, F_OK)) return 0;
        file = path;
    }
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rf_set_error("%s: line %d: %s", file, je.line, je.text);
        return -1;
    }
    int rc = apply_config(d, root, tok_eos);
    json_decref(root);
    if (rc) {
        rf_prefix_error("%s", file);
        return -1;
    }
    rf_decode_opts_finish(d);
    return 0;
}

void rf_decode_opts_print(FILE *f, const rf_decode_opts *d) {
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *o = &rf_decode_table[i];
        if (o->type == RF_OPT_STR && !*(const char *const *)((const char *)d + o->offset)) continue;
        char v[64];
        rf_opt_format(o, d, v, sizeof v);
        fprintf(f, "  --%-20s %-12s (%s)\n", o->name, v, rf_src_names[d->src[i]]);
    }
    if (d->config_eos >= 0) fprintf(f, "  %-22s %-12d (%s)\n", "eos_token_id", d->config_eos, rf_src_names[RF_SRC_CONFIG]);
}

int rf_decode_opts_cli(const char *cmd, rf_decode_opts *d) {
    if (d->hf_repo) {
        fprintf(stderr, "refusion: %s: -hf %s: this build downloads nothing; fetch the checkpoint yourself "
                        "(e.g. `huggingface-cli download %s --local-dir DIR`) and give it with -m DIR\n",
                cmd, d->hf_repo, d->hf_repo);
        return -1;
    }
    /* serve draws a seed per request instead */
    if (d->gen.seed == RF_SEED_RANDOM && strcmp(cmd, "serve")) d->gen.seed = rf_seed_random();
    int n_grammars = (d->grammar != NULL) + (d->grammar_file != NULL) + (d->json_schema != NULL);
    if (n_grammars && strcmp(cmd, "generate") && strcmp(cmd, "chat")) {
        fprintf(stderr, "refusion: %s: --grammar, --grammar-file and --json-schema are for generate and chat\n", cmd);
        return -1;
    }
    if (n_grammars > 1) {
        fprintf(stderr, "refusion: %s: give at most one of --grammar, --grammar-file and --json-schema\n", cmd);
        return -1;
    }
    if (d->n_gpu_layers)
        fprintf(stderr, "refusion: %s: note: -ngl %s ignored: this build runs on the CPU\n", cmd, d->n_gpu_layers);
    if (d->src[row_index("flash-attn")] == RF_SRC_FLAG)
        fprintf(stderr, "refusion: %s: note: -fa %s has no effect: attention is always one exact pass over the "
                "cache\n", cmd, d->flash_attn == 1 ? "on" : d->flash_attn == 2 ? "off" : "auto");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && d->threads > cpus) {
        /* more OpenMP threads than CPUs only makes them wait for each other
         * at every barrier: slower by orders of magnitude, never faster */
        fprintf(stderr, "refusion: %s: warning: --threads %d is more than the %ld online CPUs; using %ld\n", cmd,
                d->threads, cpus, cpus);
        d->threads = (int)cpus;
    }
    return 0;
}

int rf_decode_gen_length(const rf_decode_opts *d, int n_ctx, int n_prompt) {
    if (d->gen.gen_length != -1) return d->gen.gen_length;
    int limit = d->ctx_size > 0 && d->ctx_size < n_ctx ? d->ctx_size : n_ctx, n = limit - n_prompt;
    if (d->gen.method == RF_METHOD_REFUSION && !d->gen.rolling && d->gen.slot_size > 0)
        n = n / d->gen.slot_size * d->gen.slot_size; /* whole slots that fit */
    return n;
}

/* ---- one value ------------------------------------------------------------------------ */
static const char *opt_name(const rf_opt *o, char *buf, size_t cap) {
    snprintf(buf, cap, "--%s", o->name);
    return buf;
}

/* the index of s in "a|b|c", or -1 */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int i = 0;
    for (const char *c = choices; c; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, s, n)) return i;
        c = bar ? bar + 1 : NULL;
    }
    return -1;
}

static void choice_name(const char *choices, int k, char *buf, size_t cap) {
    const char *c = choices;
    for (int i = 0; i < k && c; i++) c = strchr(c, '|'), c = c ? c + 1 : NULL;
    if (!c) {
        snprintf(buf, cap, "?");
        return;
    }
    const char *bar = strchr(c, '|');
    int len = bar ? (int)(bar - c) : (int)strlen(c);
    snprintf(buf, cap, "%.*s", len, c);
}

/* a number as people write it: 0.6, not 0.60000002 */
static void fmt_real(double x, char *buf, size_t cap) { snprintf(buf, cap, "%g", x); }

/* as: the spelling the user typed, for the message */
static int opt_set_as(const rf_opt *o, void *base, const char *s, const char *as) {
    char *p = (char *)base + o->offset, *end, nm[64];
    if (as) snprintf(nm, sizeof nm, "%s", as);
    else opt_name(o, nm, sizeof nm);
    switch (o->type) {
    case RF_OPT_FLAG: *(int *)p = o->hi != 0 ? (int)o->hi : o->lo < 0 ? 0 : 1; return 0;
    case RF_OPT_STR: *(const char **)p = s; return 0;
    case RF_OPT_LIST: {
        rf_arg_list *l = (rf_arg_list *)p;
        int cap = l->cap;
        l->row = rf_grow((void *)l->row, sizeof *l->row, l->n, &cap, 8);
        l->value = rf_grow((void *)l->value, sizeof *l->value, l->n, &l->cap, 8);
        l->row[l->n] = o, l->value[l->n++] = s;
        return 0;
    }
    case RF_OPT_CHOICE: {
        int k = choice_index(o->choices, s);
        if (k < 0) {
            char alts[128];
            snprintf(alts, sizeof alts, "%s", o->choices);
            for (char *c = alts; *c; c++)
                if (*c == '|') *c = ',';
            rf_set_error("%s expects one of %s, got '%.40s'", nm, alts, s);
            return -1;
        }
        *(int *)p = k;
        return 0;
    }
    case RF_OPT_INT:
    case RF_OPT_LEN:
    case RF_OPT_I64: {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        int over = errno == ERANGE || (o->hi < 9e18 && v > (long long)o->hi);
        int minus_one = o->type == RF_OPT_LEN && *s && !*end && !over && v == -1;
        if (!minus_one && (!*s || *end || over || v < (long long)o->lo)) {
            const char *or_m1 = o->type == RF_OPT_LEN ? " or -1" : "";
            if (o->hi >= 9e18) rf_set_error("%s expects an integer >= %.0f%s, got '%.40s'", nm, o->lo, or_m1, s);
            else rf_set_error("%s expects an integer in [%.0f, %.0f]%s, got '%.40s'", nm, o->lo, o->hi, or_m1, s);
            return -1;
        }
        if (o->type == RF_OPT_I64) *(int64_t *)p = (int64_t)v;
        else *(int *)p = (int)v;
        return 0;
    }
    case RF_OPT_FLOAT:
    case RF_OPT_DOUBLE: {
        double v = strtod(s, &end);
        if (!*s || *end || !isfinite(v) || v < o->lo || v > o->hi || (o->open_lo && v == o->lo)) {
            char lo[32], hi[32];
            fmt_real(o->lo, lo, sizeof lo), fmt_real(o->hi, hi, sizeof hi);
            rf_set_error("%s expects a number in %s%s, %s], got '%.40s'", nm, o->open_lo ? "(" : "[", lo, hi, s);
            return -1;
        }
        if (o->type == RF_OPT_DOUBLE) *(double *)p = v;
        else *(float *)p = (float)v;
        return 0;
    }
    }
    return -1;
}

int rf_opt_set(const rf_opt *o, void *base, const char *s) { return opt_set_as(o, base, s, NULL); }

void rf_opt_format(const rf_opt *o, const void *base, char *buf, size_t cap) {
    const char *p = (const char *)base + o->offset;
    switch (o->type) {
    case RF_OPT_FLAG: snprintf(buf, cap, "%s", *(const int *)p ? "on" : "off"); break;
    case RF_OPT_STR: snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : ""); break;
    case RF_OPT_CHOICE: choice_name(o->choices, *(const int *)p, buf, cap); break;
    case RF_OPT_INT:
    case RF_OPT_LEN: snprintf(buf, cap, "%d", *(const int *)p); break;
    case RF_OPT_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
    case RF_OPT_FLOAT: fmt_real(*(const float *)p, buf, cap); break;
    case RF_OPT_DOUBLE: fmt_real(*(const double *)p, buf, cap); break;
    case RF_OPT_LIST: snprintf(buf, cap, "%d values", ((const rf_arg_list *)p)->n); break;
    }
}

void rf_arg_list_free(rf_arg_list *l) {
    free((void *)l->row), free((void *)l->value);
    l->row = NULL, l->value = NULL, l->n = l->cap = 0;
}

/* a default that --help shows: not a number outside the row's range ("not given") */
static int default_shown(const rf_opt *o, const void *base) {
    const char *p = (const char *)base + o->offset;
    double v;
    switch (o->type) {
    case RF_OPT_INT: v = *(const int *)p; break;
    case RF_OPT_I64: v = (double)*(const int64_t *)p; break;
    case RF_OPT_FLOAT: v = *(const float *)p; break;
    case RF_OPT_DOUBLE: v = *(const double *)p; break;
    case RF_OPT_FLAG:
    case RF_OPT_LIST: return 0;
    default: return 1;
    }
    return v >= o->lo && v <= o->hi;
}

const rf_opt *rf_opt_find(const rf_opt *opts, int n, const char *s) {
    while (*s == '-') s++;
    for (int i = 0; i < n; i++) {
        const rf_opt *o = &opts[i];
        if (!strcmp(s, o->name) || (o->alias && !strcmp(s, o->alias)) || (o->letter && s[0] == o->letter && !s[1]))
            return o;
    }
    return NULL;
}

/* ---- --help ---------------------------------------------------------------------------------- */
/* text wrapped at 100 columns, continuation lines indented by ind */
static void put_wrapped(FILE *f, const char *text, int col, int ind) {
    const char *w = text;
    while (*w) {
        while (*w == ' ') w++;
        const char *e = w;
        while (*e && *e != ' ') e++;
        int len = (int)(e - w);
        if (!len) break;
        if (col > ind && col + 1 + len > 100) {
            fprintf(f, "\n%*s", ind, "");
            col = ind;
        } else if (col > ind) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, w);
        col += len;
        w = e;
    }
    fputc('\n', f);
}

void rf_args_usage(FILE *f, const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups) {
    fprintf(f, "usage: refusion %s %s\n", cmd, synopsis);
    for (int g = 0; g < n_groups; g++) {
        const rf_opt_group *gr = &groups[g];
        /* untitled groups in a row share one "options" heading */
        if (gr->title || g == 0 || groups[g - 1].title) fprintf(f, "\n%s:\n", gr->title ? gr->title : "options");
        for (int i = 0; i < gr->n; i++) {
            const rf_opt *o = &gr->opts[i];
            char head[96], help[640], def[64] = "";
            char letter[8] = "    ";
            if (o->letter) snprintf(letter, sizeof letter, "-%c, ", o->letter);
            const char *sh = llama_short(o);
            if (sh) snprintf(letter, sizeof letter, "-%s, ", sh);
            int k = snprintf(head, sizeof head, "  %s--%s", letter, o->name);
            if (o->type != RF_OPT_FLAG) snprintf(head + k, sizeof head - k, " %s", o->metavar ? o->metavar : "VALUE");
            if (gr->defaults && default_shown(o, gr->defaults)) {
                char v[48];
                rf_opt_format(o, gr->defaults, v, sizeof v);
                if (o->type != RF_OPT_STR || *v) snprintf(def, sizeof def, "default %s", v);
            }
            char extra[160] = "";
            int n = 0;
            if (*def) n += snprintf(extra + n, sizeof extra - n, "%s", def);
            if (o->type == RF_OPT_LIST) n += snprintf(extra + n, sizeof extra - n, "%srepeatable", n ? "; " : "");
            if (o->alias) n += snprintf(extra + n, sizeof extra - n, "%s--%s", n ? "; " : "", o->alias);
            if (o->http) snprintf(extra + n, sizeof extra - n, "%sHTTP \"%s\"", n ? "; " : "", o->http);
            snprintf(help, sizeof help, "%s%s%s%s", o->help, *extra ? " (" : "", extra, *extra ? ")" : "");
            fputs(head, f);
            int col = (int)strlen(head);
            if (col < 30) fprintf(f, "%*s", 30 - col, ""), col = 30;
            else fputc(' ', f), col++;
            put_wrapped(f, help, col, 30);
        }
    }
    fprintf(f, "\n  -h, --help                  this text\n      --version               print the version\n"
               "Long options also take --name=value.\n");
}

/* ---- the parser ------------------------------------------------------------------------------ */
enum { VAL_HELP = 'h', VAL_VERSION = 1000, VAL_ROW = 1001 };

/* --preset is applied before every other option, wherever it stands, so
 * that the options given with it override its values (a bad value is left
 * for the main pass to report) */
static void apply_preset_first(const rf_opt_group *groups, int n_groups, const struct option *lo,
                               const char *shorts, const rf_opt **row, void **row_base, int argc, char **argv) {
    int pre = -1;
    for (int r = 0, g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n; i++, r++)
            if (groups[g].opts == rf_decode_table && row[r]->offset == D(preset)) pre = r;
    if (pre < 0) return;
    optind = 0;
    for (int c; (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1;) {
        rf_decode_opts *d = row_base[pre];
        if (c != VAL_ROW + pre || opt_set_as(row[pre], d, optarg, NULL) || !d->preset) continue;
        rf_decode_opts_preset(d, d->preset);
    }
}

void rf_decode_opts_preset(rf_decode_opts *d, int preset) {
    d->preset = preset;
    rf_decode_preset_apply(&rf_decode_presets[preset - 1], &d->gen);
    static const char *const rows[] = {"gen-length", "slot-size", "blocks", "slot-threshold", "token-threshold", "temp"};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        int i = row_index(rows[k]);
        if (i >= 0 && d->src[i] != RF_SRC_FLAG) d->src[i] = RF_SRC_PRESET;
    }
}

/* argv[i] (-fa, --flash-attn) stands alone: no on|off|auto after it */
static int flash_attn_bare(int argc, char **argv, int i) {
    if (i + 1 >= argc) return 1;
    const char *v = argv[i + 1];
    return strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto");
}

int rf_args_parse(const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups, int argc,
                  char **argv, int *first_pos) {
    int n_rows = 0;
    for (int g = 0; g < n_groups; g++) n_rows += groups[g].n;
    /* each row: its name and its alias; + help, version, terminator */
    struct option *lo = rf_calloc((size_t)(2 * n_rows + 3), sizeof *lo);
    const rf_opt **row = rf_calloc((size_t)n_rows + 1, sizeof *row);
    void **row_base = rf_calloc((size_t)n_rows + 1, sizeof *row_base);
    unsigned char **row_src = rf_calloc((size_t)n_rows + 1, sizeof *row_src);
    char *shorts = rf_calloc((size_t)(3 * n_rows + 4), 1);
    int nl = 0, r = 0, ns = 0;
    shorts[ns++] = ':'; /* ':' for a missing value, '?' for an unknown option */
    shorts[ns++] = 'h';
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n; i++, r++) {
            const rf_opt *o = &groups[g].opts[i];
            row[r] = o, row_base[r] = groups[g].base, row_src[r] = groups[g].src ? &groups[g].src[i] : NULL;
            int has = o->type == RF_OPT_FLAG ? no_argument : required_argument;
            lo[nl++] = (struct option){o->name, has, NULL, VAL_ROW + r};
            if (o->alias) lo[nl++] = (struct option){o->alias, has, NULL, VAL_ROW + r};
            if (o->letter) {
                shorts[ns++] = (char)o->letter;
                if (has) shorts[ns++] = ':';
            }
        }
    lo[nl++] = (struct option){"help", no_argument, NULL, VAL_HELP};
    lo[nl++] = (struct option){"version", no_argument, NULL, VAL_VERSION};
    /* llama.cpp's multi-letter short options (-cnv, -ngl 99) become their
     * long spelling for getopt, which would read them as clusters of
     * one-letter options; argv gets its own strings back at the end. An
     * option's value (-p -cnv) is left alone. */
    char **spelled = rf_calloc((size_t)argc + 1, sizeof *spelled), **was = rf_calloc((size_t)argc + 1, sizeof *was);
    int n_spelled = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *a = argv[i];
        /* llama.cpp's -fa was a bare flag before it took on|off|auto: both
         * launch lines work (a bare one means on) */
        if ((!strcmp(a, "-fa") || !strcmp(a, "--flash-attn")) && flash_attn_bare(argc, argv, i)) {
            spelled[n_spelled] = rf_strdup("--flash-attn=on");
            was[n_spelled] = argv[i];
            argv[i] = spelled[n_spelled++];
            continue;
        }
        if (a[0] != '-' || !a[1]) continue;
        if (a[1] == '-') { /* --name VALUE: the value is left alone too */
            const rf_opt *l = NULL;
            for (int j = 0; j < n_rows && !l && !strchr(a, '='); j++)
                if (!strcmp(a + 2, row[j]->name) || (row[j]->alias && !strcmp(a + 2, row[j]->alias))) l = row[j];
            if (l && l->type != RF_OPT_FLAG) i++;
            continue;
        }
        const rf_opt *o = NULL;
        int llama = -1; /* the llama_shorts entry a multi-letter -xy is */
        for (size_t j = 0; j < N_LLAMA_SHORTS && a[2] && llama < 0; j++)
            if (!strcmp(a + 1, llama_shorts[j].spelling)) llama = (int)j;
        for (int j = 0; j < n_rows && !o && llama >= 0 && llama_shorts[llama].name; j++)
            if (!strcmp(row[j]->name, llama_shorts[llama].name)) o = row[j];
        if (llama >= 0 && !o) {
            fprintf(stderr, "refusion: %s: unknown option '%s' (llama.cpp's %s, which %s does not have; see --help)\n",
                    cmd, a, llama_shorts[llama].llama, cmd);
            for (int k = 0; k < argc; k++) /* argv gets its own strings back */
                for (int j = 0; j < n_spelled; j++)
                    if (argv[k] == spelled[j]) argv[k] = was[j];
            for (int j = 0; j < n_spelled; j++) free(spelled[j]);
            free(spelled), free(was), free(lo), free(row), free(row_base), free(row_src), free(shorts);
            return -1;
        }
        if (o) {
            size_t len = strlen(o->name) + 3;
            spelled[n_spelled] = rf_malloc(len);
            snprintf(spelled[n_spelled], len, "--%s", o->name);
            was[n_spelled] = argv[i];
            argv[i] = spelled[n_spelled++];
        } else if (!a[2]) { /* -x: its value may be the next argument */
            for (int j = 0; j < n_rows && !o; j++)
                if (row[j]->letter == a[1]) o = row[j];
        }
        if (o && o->type != RF_OPT_FLAG) i++;
    }
    int rc = 0;
    opterr = 0;
    apply_preset_first(groups, n_groups, lo, shorts, row, row_base, argc, argv);
    optind = 0; /* full re-initialisation (GNU): the parser may run more than once */
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, shorts, lo, &li);
        if (c == -1) break;
        int k = -1;
        if (c >= VAL_ROW) k = c - VAL_ROW;
        else if (c != VAL_HELP && c != VAL_VERSION && c != ':' && c != '?')
            for (int j = 0; j < n_rows; j++)
                if (row[j]->letter == c) k = j;
        if (c == VAL_HELP) {
            rf_args_usage(stdout, cmd, synopsis, groups, n_groups);
            rc = 1;
            break;
        }
        if (c == VAL_VERSION) {
            printf("refusion %s\n", RF_VERSION_STRING);
            rc = 1;
            break;
        }
        if (c == ':' || c == '?') {
            const char *arg = argv[optind - 1];
            char sh[3] = {'-', (char)optopt, 0};
            /* a long option's optopt is its row's value, not a letter: name it as typed */
            const char *what = optopt > 0 && optopt < 256 ? sh : arg;
            if (c == ':') fprintf(stderr, "refusion: %s: %s needs a value\n", cmd, what);
            else if (optopt && strncmp(arg, "--", 2)) fprintf(stderr, "refusion: %s: unknown option '%s' (see --help)\n", cmd, what);
            else fprintf(stderr, "refusion: %s: unknown option '%s' (see --help)\n", cmd, arg);
            rc = -1;
            break;
        }
        if (k < 0) { /* cannot happen: every value comes from the tables */
            fprintf(stderr, "refusion: %s: unexpected option\n", cmd);
            rc = -1;
            break;
        }
        char as[80];
        if (li >= 0) snprintf(as, sizeof as, "--%s", lo[li].name);
        else snprintf(as, sizeof as, "-%c", c);
        if (opt_set_as(row[k], row_base[k], optarg ? optarg : "", as)) {
            fprintf(stderr, "refusion: %s: %s\n", cmd, rf_last_error());
            rc = -1;
            break;
        }
        if (row_src[k]) *row_src[k] = RF_SRC_FLAG;
    }
    for (int i = 0; i < argc; i++) /* getopt may have moved them */
        for (int j = 0; j < n_spelled; j++)
            if (argv[i] == spelled[j]) argv[i] = was[j];
    for (int j = 0; j < n_spelled; j++) free(spelled[j]);
    free(spelled), free(was);
    if (rc == 0) {
        if (first_pos) *first_pos = optind;
        else if (optind < argc) {
            fprintf(stderr, "refusion: %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
            rc = -1;
        }
    }
    free(lo), free(row), free(row_base), free(row_src), free(shorts);
    return rc;
}

char *rf_read_text(const char *path) {
    int std = !strcmp(path, "-");
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f) {
        rf_set_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, k;
    char *buf = rf_malloc(cap);
    while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        buf = rf_grow_to(buf, 1, n + 2, &cap, cap); /* room to read on, and the NUL */
    }
    int err = ferror(f);
    if (!std) fclose(f);
    if (err) {
        free(buf);
        rf_set_error("%s: read error", std ? "stdin" : path);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        rf_set_error("%s: the text contains a NUL byte", std ? "stdin" : path);
        return NULL;
    }
    return buf;
}

static const char *const ar_verify_names[4] = {"off", "correct", "first", "both"}; /* index a + 2b */

const char *rf_ar_verify_name(int ar_correct, int ar_check_first) {
    return ar_verify_names[(ar_correct ? 1 : 0) + (ar_check_first ? 2 : 0)];
}
