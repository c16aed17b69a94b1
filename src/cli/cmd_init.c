/* cmd_init.c - `refusion init`: write a randomly initialised Qwen3/ReFusion
 * checkpoint in the Hugging Face layout (config.json + safetensors), from a
 * preset shape with optional overrides, optionally with a tokenizer copied in. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "io/config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion init -o DIR [options]\n"
            "Write a randomly initialised checkpoint (config.json + model.safetensors).\n\n"
            "  -o, --out DIR        output directory (created if needed)\n"
            "  --preset NAME        tiny | small | 0.6b | 1.7b | 4b | 8b (default tiny)\n"
            "  --hidden N  --layers N  --heads N  --kv-heads N  --head-dim N\n"
            "  --ffn N  --vocab N  --tied 0|1  --max-pos N  --theta X\n"
            "                       override the preset's shape (head-dim defaults to\n"
            "                       hidden/heads when hidden or heads is changed)\n"
            "  --dtype bf16|f32|f16 weight storage type (default bf16)\n"
            "  --shard-mb N         split into shards of at most N MB with an index\n"
            "  --progress / --no-progress  bytes written on stderr (default: when stderr is a terminal)\n"
            "  --seed S             RNG seed (default 0)\n"
            "  --std X              init standard deviation (default 0.02)\n"
            "  --tokenizer FILE     copy this tokenizer.json (and tokenizer_config.json\n"
            "                       beside it) into DIR; special token ids and the\n"
            "                       vocabulary size are taken from it\n");
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "refusion: init: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

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

int cmd_init(int argc, char **argv) {
    const char *out = NULL, *preset = "tiny", *tokenizer = NULL;
    rf_dtype dtype = RF_BF16;
    long hidden = -1, layers = -1, heads = -1, kv = -1, hd = -1, ffn = -1, vocab = -1, tied = -1,
         maxpos = -1, shard_mb = 0, seed = 0;
    double std = 0.02, theta = -1;
    int progress = 0; /* 1 --progress, -1 --no-progress, 0: on a terminal */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--progress") || !strcmp(a, "--no-progress")) {
            progress = a[2] == 'n' ? -1 : 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "refusion: init: unknown option or missing value: %s\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long *ip = NULL;
        long lo = 1, hi = 1 << 24;
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--hidden")) ip = &hidden;
        else if (!strcmp(a, "--layers")) ip = &layers, hi = 4096;
        else if (!strcmp(a, "--heads")) ip = &heads;
        else if (!strcmp(a, "--kv-heads")) ip = &kv;
        else if (!strcmp(a, "--head-dim")) ip = &hd;
        else if (!strcmp(a, "--ffn")) ip = &ffn;
        else if (!strcmp(a, "--vocab")) ip = &vocab;
        else if (!strcmp(a, "--max-pos")) ip = &maxpos, hi = 1 << 30;
        else if (!strcmp(a, "--tied")) ip = &tied, lo = 0, hi = 1;
        else if (!strcmp(a, "--shard-mb")) ip = &shard_mb, lo = 0, hi = 1 << 30;
        else if (!strcmp(a, "--seed")) ip = &seed, lo = 0, hi = 0x7fffffffffffffffL;
        else if (!strcmp(a, "--std") || !strcmp(a, "--theta")) {
            char *end;
            double x = strtod(v, &end);
            if (!*v || *end || !(x > 0) || x > 1e12) {
                fprintf(stderr, "refusion: init: %s expects a positive number, got '%s'\n", a, v);
                return 2;
            }
            *(a[2] == 's' ? &std : &theta) = x;
        } else if (!strcmp(a, "--dtype")) {
            if (rf_dtype_parse(v, &dtype)) {
                fprintf(stderr, "refusion: init: --dtype must be bf16, f32 or f16, got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "refusion: init: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (ip && parse_int(a, v, lo, hi, ip)) return 2;
    }
    if (!out) {
        fprintf(stderr, "refusion: init: -o DIR is required (see --help)\n");
        return 2;
    }
    rf_config c;
    if (rf_config_preset(&c, preset)) {
        rf_print_error();
        return 2;
    }
    if (hidden > 0) c.hidden_size = (int)hidden;
    if (heads > 0) c.n_heads = (int)heads;
    if (hd > 0) c.head_dim = (int)hd;
    else if (hidden > 0 || heads > 0) c.head_dim = c.hidden_size / c.n_heads;
    if (kv > 0) c.n_kv_heads = (int)kv;
    else if (heads > 0 && c.n_heads % c.n_kv_heads) c.n_kv_heads = c.n_heads;
    if (layers > 0) c.n_layers = (int)layers;
    if (ffn > 0) c.intermediate_size = (int)ffn;
    if (maxpos > 0) c.max_pos = (int)maxpos;
    if (tied >= 0) c.tie_embeddings = (int)tied;
    if (theta > 0) c.rope_theta = (float)theta;
    c.dtype = dtype;

    char *tok_cfg = NULL;
    if (tokenizer) {
        /* tokenizer_config.json lives beside tokenizer.json (the tokenizer's rule) */
        char *tok_json;
        rf_tok_files(tokenizer, &tok_json, &tok_cfg);
        free(tok_json);
        FILE *probe = fopen(tok_cfg, "r");
        if (probe) fclose(probe);
        else {
            free(tok_cfg);
            tok_cfg = NULL;
        }
        tok_ids t;
        if (read_tokenizer(tokenizer, tok_cfg, &t)) {
            rf_print_error();
            free(tok_cfg);
            return 1;
        }
        int need = t.max_id + 1;
        if (vocab > 0 && vocab < need) {
            fprintf(stderr, "refusion: %s: needs a vocabulary of %d (with <|mask|>), --vocab is %ld\n",
                    tokenizer, need, vocab);
            free(tok_cfg);
            return 1;
        }
        /* a Qwen-sized preset keeps its (padded) vocabulary; toy ones fit the tokenizer */
        if (vocab <= 0) vocab = (c.vocab_size >= need && c.vocab_size > RF_QWEN_MASK_ID) ? c.vocab_size : need;
        c.vocab_size = (int)vocab;
        c.mask_id = t.mask;
        c.bot_id = t.bot;
        c.eos_id = t.eos;
        c.bos_id = t.bos;
        c.pad_id = t.pad;
    } else if (vocab > 0 && vocab != c.vocab_size) {
        /* re-derive the default ids for the new vocabulary */
        c.vocab_size = (int)vocab;
        rf_config_default_special_ids(&c);
        if (c.bos_id >= vocab) c.bos_id = -1;
        if (c.eos_id >= vocab) c.eos_id = -1;
    }

    double t0 = rf_now();
    size_t shard_bytes = (size_t)shard_mb * 1000 * 1000;
    rf_progress *pg = rf_progress_start("init", out, (double)rf_config_n_params(&c) * rf_dtype_size(dtype), progress);
    int rc = rf_model_write_random(&c, out, dtype, shard_bytes, (float)std, (uint64_t)seed);
    rf_progress_stop(pg);
    if (rc == 0 && tokenizer) {
        rc = rf_copy_file_into(tokenizer, out, "tokenizer.json");
        if (rc == 0 && tok_cfg) rc = rf_copy_file_into(tok_cfg, out, "tokenizer_config.json");
    }
    free(tok_cfg);
    if (rc) {
        rf_print_error();
        return 1;
    }
    long long np = rf_config_n_params(&c);
    printf("wrote %s: %.2fM params, %s, %d layers, hidden %d, vocab %d, %.1f s\n", out, np / 1e6,
           rf_dtype_name(dtype), c.n_layers, c.hidden_size, c.vocab_size, rf_now() - t0);
    return 0;
}
