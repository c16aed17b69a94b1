/* cmd_init.c - `refusion init`: write a randomly initialised Qwen3/ReFusion
 * checkpoint in the Hugging Face layout (config.json + safetensors), from a
 * preset shape with optional overrides, optionally with a tokenizer copied in. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "io/config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

typedef struct {
    const char *out, *tokenizer, *dtype;
    int max_pos, shard_mb;
    double theta, std;
    int64_t seed;
} init_args;

#define A(f) offsetof(init_args, f)
static const rf_opt init_opts[] = {
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "DIR",
     .help = "output directory (created if needed)"},
    {.name = "max-pos", .type = RF_OPT_INT, .lo = 1, .hi = 1 << 30, .offset = A(max_pos), .metavar = "N",
     .help = "context length (max_position_embeddings; default: the preset's)"},
    {.name = "theta", .type = RF_OPT_DOUBLE, .lo = 0, .open_lo = 1, .hi = 1e12, .offset = A(theta), .metavar = "X",
     .help = "RoPE base (rope_theta; default: the preset's)"},
    {.name = "dtype", .type = RF_OPT_STR, .offset = A(dtype), .metavar = "TYPE",
     .help = "weight storage type: bf16, f32 or f16"},
    {.name = "shard-mb", .type = RF_OPT_INT, .lo = 0, .hi = 1 << 30, .offset = A(shard_mb), .metavar = "N",
     .help = "split into shards of at most N MB with an index; 0: one file"},
    {.name = "seed", .type = RF_OPT_I64, .lo = 0, .hi = 9.3e18, .offset = A(seed), .metavar = "S", .help = "RNG seed"},
    {.name = "std", .type = RF_OPT_DOUBLE, .lo = 0, .open_lo = 1, .hi = 1e12, .offset = A(std), .metavar = "X",
     .help = "init standard deviation"},
    {.name = "tokenizer", .type = RF_OPT_STR, .offset = A(tokenizer), .metavar = "FILE",
     .help = "copy this tokenizer.json (and tokenizer_config.json beside it) into DIR; special token ids and the "
             "vocabulary size are taken from it"},
};

/* ---- tokenizer: ids of the special tokens, read with jansson ----------------- */

typedef struct {
    int max_id;                 /* largest id in vocab + added_tokens */
    int mask, bot, eos, bos, pad; /* -1 when absent */
} tok_ids;

/* id of token text s in the tokenizer (added_tokens, then model.vocab) */
static int tok_lookup(json_t *tok, const char *s) {
    json_t *added = json_object_get(tok, "added_tokens"), *e;
    size_t i;
    json_array_foreach(added, i, e) {
        json_t *c = json_object_get(e, "content");
        if (json_is_string(c) && !strcmp(json_string_value(c), s))
            return (int)json_integer_value(json_object_get(e, "id"));
    }
    json_t *v = json_object_get(json_object_get(json_object_get(tok, "model"), "vocab"), s);
    return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

/* a tokenizer_config.json token entry: "text" or {"content": "text"} */
static const char *tok_text(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int read_tokenizer(const char *path, const char *cfg_path, tok_ids *t) {
    json_error_t err;
    json_t *tok = json_load_file(path, 0, &err);
    if (!tok) {
        rf_set_error("%s: %s (line %d)", path, err.text, err.line);
        return -1;
    }
    memset(t, -1, sizeof *t);
    json_t *vocab = json_object_get(json_object_get(tok, "model"), "vocab");
    json_t *added = json_object_get(tok, "added_tokens");
    if (!json_is_object(vocab)) {
        rf_set_error("%s: no model.vocab object (not a BPE tokenizer.json?)", path);
        json_decref(tok);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) if (json_integer_value(v) > t->max_id) t->max_id = (int)json_integer_value(v);
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id > t->max_id) t->max_id = (int)id;
    }
    t->mask = tok_lookup(tok, "<|mask|>");
    t->bot = tok_lookup(tok, "<|beginoftext|>");
    /* the loader adds missing ones as the next free ids, <|beginoftext|> first
     * (RF_QWEN_BOT_ID / RF_QWEN_MASK_ID for the Qwen3 vocabulary, whose ids end
     * just before them) */
    int next = t->max_id + 1;
    if (t->bot < 0) t->bot = next++;
    if (t->mask < 0) t->mask = next++;
    if (next - 1 > t->max_id) t->max_id = next - 1;
    json_t *tc = cfg_path ? json_load_file(cfg_path, 0, &err) : NULL;
    if (tc) {
        const char *s;
        if ((s = tok_text(json_object_get(tc, "eos_token")))) t->eos = tok_lookup(tok, s);
        if ((s = tok_text(json_object_get(tc, "bos_token")))) t->bos = tok_lookup(tok, s);
        if ((s = tok_text(json_object_get(tc, "pad_token")))) t->pad = tok_lookup(tok, s);
        json_decref(tc);
    }
    if (t->eos < 0) t->eos = tok_lookup(tok, "<|endoftext|>");
    json_decref(tok);
    return 0;
}

/* the shape: the preset, then the sizes given (head-dim follows hidden/heads
 * when either changes and no head-dim is given; kv-heads become the heads
 * when the preset's no longer divide them) */
static int shape_config(const rf_shape_opts *sh, const init_args *a, rf_dtype dtype, rf_config *c) {
    if (rf_config_preset(c, sh->preset)) {
        rf_print_error();
        return -1;
    }
    if (sh->hidden > 0) c->hidden_size = sh->hidden;
    if (sh->heads > 0) c->n_heads = sh->heads;
    if (sh->head_dim > 0) c->head_dim = sh->head_dim;
    else if (sh->hidden > 0 || sh->heads > 0) c->head_dim = c->hidden_size / c->n_heads;
    if (sh->kv_heads > 0) c->n_kv_heads = sh->kv_heads;
    else if (sh->heads > 0 && c->n_heads % c->n_kv_heads) c->n_kv_heads = c->n_heads;
    if (sh->layers > 0) c->n_layers = sh->layers;
    if (sh->ffn > 0) c->intermediate_size = sh->ffn;
    if (a->max_pos > 0) c->max_pos = a->max_pos;
    if (sh->tied >= 0) c->tie_embeddings = sh->tied;
    if (a->theta > 0) c->rope_theta = (float)a->theta;
    c->dtype = dtype;
    return 0;
}

/* the vocabulary and special ids: the tokenizer's (tokenizer_config.json
 * beside it, when there, in *tok_cfg), or the preset's for --vocab */
static int vocab_config(const char *tokenizer, int vocab, rf_config *c, char **tok_cfg) {
    *tok_cfg = NULL;
    if (!tokenizer) {
        if (vocab > 0 && vocab != c->vocab_size) { /* re-derive the default ids for the new vocabulary */
            c->vocab_size = vocab;
            rf_config_default_special_ids(c);
            if (c->bos_id >= vocab) c->bos_id = -1;
            if (c->eos_id >= vocab) c->eos_id = -1;
        }
        return 0;
    }
    /* tokenizer_config.json lives beside tokenizer.json (the tokenizer's rule) */
    char *tok_json;
    rf_tok_files(tokenizer, &tok_json, tok_cfg);
    free(tok_json);
    FILE *probe = fopen(*tok_cfg, "r");
    if (probe) fclose(probe);
    else {
        free(*tok_cfg);
        *tok_cfg = NULL;
    }
    tok_ids t;
    if (read_tokenizer(tokenizer, *tok_cfg, &t)) {
        rf_print_error();
        return -1;
    }
    int need = t.max_id + 1;
    if (vocab > 0 && vocab < need) {
        fprintf(stderr, "refusion: %s: needs a vocabulary of %d (with <|mask|>), --vocab is %d\n", tokenizer, need,
                vocab);
        return -1;
    }
    /* a Qwen-sized preset keeps its (padded) vocabulary; toy ones fit the tokenizer */
    if (vocab <= 0) vocab = (c->vocab_size >= need && c->vocab_size > RF_QWEN_MASK_ID) ? c->vocab_size : need;
    c->vocab_size = vocab;
    c->mask_id = t.mask;
    c->bot_id = t.bot;
    c->eos_id = t.eos;
    c->bos_id = t.bos;
    c->pad_id = t.pad;
    return 0;
}

int cmd_init(int argc, char **argv) {
    init_args a = {.dtype = "bf16", .max_pos = -1, .theta = -1, .std = 0.02}, def_a = a;
    rf_shape_opts sh, def_sh;
    rf_shape_opts_unset(&sh);
    sh.preset = "tiny";
    def_sh = sh;
    int progress = 0;
    const rf_opt_group groups[] = {
        {NULL, init_opts, (int)(sizeof init_opts / sizeof init_opts[0]), &a, NULL, &def_a},
        RF_PROGRESS_GROUP(&progress),
        RF_SHAPE_GROUP("model shape (the preset's, with the sizes given instead of its own; head-dim follows "
                       "hidden/heads when either is changed)", &sh, &def_sh),
    };
    int prc = rf_args_parse("init", "-o DIR [options]\n"
                            "Write a randomly initialised checkpoint (config.json + model.safetensors).",
                            groups, 3, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    if (!a.out) {
        fprintf(stderr, "refusion: init: -o DIR is required (see --help)\n");
        return 2;
    }
    rf_dtype dtype;
    if (rf_dtype_parse(a.dtype, &dtype)) {
        fprintf(stderr, "refusion: init: --dtype must be bf16, f32 or f16, got '%s'\n", a.dtype);
        return 2;
    }
    rf_config c;
    if (shape_config(&sh, &a, dtype, &c)) return 2;
    char *tok_cfg;
    if (vocab_config(a.tokenizer, sh.vocab, &c, &tok_cfg)) {
        free(tok_cfg);
        return 1;
    }

    double t0 = rf_now();
    size_t shard_bytes = (size_t)a.shard_mb * 1000 * 1000;
    rf_progress *pg = rf_progress_start("init", a.out, (double)rf_config_n_params(&c) * rf_dtype_size(dtype), progress);
    int rc = rf_model_write_random(&c, a.out, dtype, shard_bytes, (float)a.std, (uint64_t)a.seed);
    rf_progress_stop(pg);
    if (rc == 0 && a.tokenizer) {
        rc = rf_copy_file_into(a.tokenizer, a.out, "tokenizer.json");
        if (rc == 0 && tok_cfg) rc = rf_copy_file_into(tok_cfg, a.out, "tokenizer_config.json");
    }
    free(tok_cfg);
    if (rc) {
        rf_print_error();
        return 1;
    }
    long long np = rf_config_n_params(&c);
    printf("wrote %s: %.2fM params, %s, %d layers, hidden %d, vocab %d, %.1f s\n", a.out, np / 1e6,
           rf_dtype_name(dtype), c.n_layers, c.hidden_size, c.vocab_size, rf_now() - t0);
    return 0;
}
