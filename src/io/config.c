/* config.c - read, validate and write a Hugging Face Qwen3 config.json (plus
 * the two ReFusion token ids), and the standard model shapes. */
#include "io/config.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static void default_special_ids(rf_config *c) {
    if (c->vocab_size > RF_QWEN_MASK_ID) {
        c->mask_id = RF_QWEN_MASK_ID;
        c->bot_id = RF_QWEN_BOT_ID;
    } else {
        c->mask_id = c->vocab_size - 1;
        c->bot_id = c->vocab_size - 2;
    }
}

int rf_config_preset(rf_config *c, const char *name) {
    memset(c, 0, sizeof *c);
    /* hidden, ffn, layers, heads, kv, head_dim, vocab, max_pos, tied */
    static const struct { const char *name; int d, ffn, L, H, KV, hd, V, maxpos, tied; } p[] = {
        {"tiny", 64, 128, 2, 4, 2, 16, 512, 4096, 1},
        {"small", 256, 768, 4, 4, 2, 64, 4096, 4096, 1},
        {"0.6b", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1},
        {"1.7b", 2048, 6144, 28, 16, 8, 128, 151936, 40960, 1},
        {"4b", 2560, 9728, 36, 32, 8, 128, 151936, 40960, 1},
        {"8b", 4096, 12288, 36, 32, 8, 128, 151671, 40960, 0},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        if (strcmp(name, p[i].name)) continue;
        c->hidden_size = p[i].d;
        c->intermediate_size = p[i].ffn;
        c->n_layers = p[i].L;
        c->n_heads = p[i].H;
        c->n_kv_heads = p[i].KV;
        c->head_dim = p[i].hd;
        c->vocab_size = p[i].V;
        c->max_pos = p[i].maxpos;
        c->tie_embeddings = p[i].tied;
        c->rms_eps = 1e-6f;
        c->rope_theta = 1e6f;
        c->dtype = RF_BF16;
        /* the Qwen3 vocabulary's <|endoftext|> / <|im_end|>; none for toy vocabs */
        int qwen = c->vocab_size > RF_QWEN_MASK_ID;
        c->bos_id = qwen ? 151643 : -1;
        c->eos_id = qwen ? 151645 : -1;
        c->pad_id = -1;
        default_special_ids(c);
        return 0;
    }
    rf_set_error("unknown model preset '%s' (tiny, small, 0.6b, 1.7b, 4b, 8b)", name);
    return -1;
}

long long rf_config_n_params(const rf_config *c) {
    long long d = c->hidden_size, V = c->vocab_size, hd = c->head_dim, ffn = c->intermediate_size;
    long long q = (long long)c->n_heads * hd, kv = (long long)c->n_kv_heads * hd;
    long long layer = d * q + 2 * d * kv + q * d  /* q, k, v, o */
                      + 3 * d * ffn               /* gate, up, down */
                      + 2 * d + 2 * hd;           /* two RMSNorms + q_norm, k_norm */
    return V * d * (c->tie_embeddings ? 1 : 2) + (long long)c->n_layers * layer + d;
}

/* ---- loading ------------------------------------------------------------------ */

/* Integer key: *out = value, or def when absent/null (required: absence is an
 * error). Returns -1 with a message naming file and key. */
static int get_int(json_t *root, const char *path, const char *key, int required, int def,
                   int *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) {
            rf_set_error("%s: missing required key \"%s\"", path, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    /* "eos_token_id" may be a list of ids: the first is the one to stop on */
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (!json_is_integer(v) || json_integer_value(v) < -1 ||
        json_integer_value(v) > 0x7fffffff) {
        rf_set_error("%s: \"%s\" must be an integer", path, key);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_real(json_t *root, const char *path, const char *key, double def, float *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v)) {
        rf_set_error("%s: \"%s\" must be a number", path, key);
        return -1;
    }
    *out = (float)json_number_value(v);
    return 0;
}

static int validate(const rf_config *c, const char *path) {
    const struct { const char *key; int v; } pos[] = {
        {"hidden_size", c->hidden_size},       {"intermediate_size", c->intermediate_size},
        {"num_hidden_layers", c->n_layers},    {"num_attention_heads", c->n_heads},
        {"num_key_value_heads", c->n_kv_heads}, {"head_dim", c->head_dim},
        {"vocab_size", c->vocab_size},         {"max_position_embeddings", c->max_pos},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) {
            rf_set_error("%s: \"%s\" must be positive (got %d)", path, pos[i].key, pos[i].v);
            return -1;
        }
    if (c->n_heads % c->n_kv_heads) {
        rf_set_error("%s: \"num_attention_heads\" (%d) must be a multiple of "
                     "\"num_key_value_heads\" (%d)", path, c->n_heads, c->n_kv_heads);
        return -1;
    }
    if (c->head_dim % 2) {
        rf_set_error("%s: \"head_dim\" must be even for RoPE (got %d)", path, c->head_dim);
        return -1;
    }
    /* every matrix's element count must fit the kernels' int rows/cols and a
     * size_t byte count; the per-dimension products below stay far inside */
    if ((long long)c->n_heads * c->head_dim > (1 << 24) || c->hidden_size > (1 << 24) ||
        c->intermediate_size > (1 << 24) || c->vocab_size > (1 << 24) || c->n_layers > 4096) {
        rf_set_error("%s: model dimensions are implausibly large", path);
        return -1;
    }
    /* the context too: every position-sized buffer (KV cache, answer, RoPE
     * tables) is sized from it, and Qwen3's largest is 262144 */
    if (c->max_pos > (1 << 20)) {
        rf_set_error("%s: \"max_position_embeddings\" (%d) is larger than %d", path, c->max_pos, 1 << 20);
        return -1;
    }
    if (!(c->rms_eps > 0) || !(c->rms_eps < 1)) {
        rf_set_error("%s: \"rms_norm_eps\" must be in (0, 1)", path);
        return -1;
    }
    if (!(c->rope_theta > 1) || isinf(c->rope_theta)) { /* inf: a value beyond float's range */
        rf_set_error("%s: \"rope_theta\" must be a number > 1 and at most %g", path, (double)FLT_MAX);
        return -1;
    }
    const struct { const char *key; int v; } ids[] = {
        {"bos_token_id", c->bos_id}, {"eos_token_id", c->eos_id}, {"pad_token_id", c->pad_id},
        {"mask_token_id", c->mask_id}, {"bot_token_id", c->bot_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].v < -1 || ids[i].v >= c->vocab_size) {
            rf_set_error("%s: \"%s\" (%d) is outside the vocabulary (vocab_size %d)", path,
                         ids[i].key, ids[i].v, c->vocab_size);
            return -1;
        }
    if (c->mask_id < 0) {
        rf_set_error("%s: no \"mask_token_id\" (the id of ReFusion's <|mask|> token), and vocab_size %d is too small "
                     "for its usual id %d: set \"mask_token_id\"", path, c->vocab_size, RF_QWEN_MASK_ID);
        return -1;
    }
    return 0;
}

int rf_config_check(const rf_config *c, const char *where) { return validate(c, where); }

void rf_config_default_special_ids(rf_config *c) { default_special_ids(c); }

/* An existing checkpoint's ReFusion ids when it does not name them: only
 * ReFusion's own ids past Qwen3's tokens (151669 / 151670), when the
 * vocabulary reaches them. A smaller vocabulary's last ids are real tokens,
 * so they are never taken: the ids stay -1 and validation asks for them. */
void rf_config_known_special_ids(rf_config *c) {
    c->mask_id = c->vocab_size > RF_QWEN_MASK_ID ? RF_QWEN_MASK_ID : -1;
    c->bot_id = c->vocab_size > RF_QWEN_BOT_ID ? RF_QWEN_BOT_ID : -1;
}

int rf_config_load(rf_config *c, const char *path) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        rf_set_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!root) {
        for (char *c = jerr.text; *c; c++) /* one-line message */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        rf_set_error("%s: invalid JSON: %s (line %d)", path, jerr.text, jerr.line);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root)) {
        rf_set_error("%s: not a JSON object", path);
        goto done;
    }
    if (get_int(root, path, "hidden_size", 1, 0, &c->hidden_size) ||
        get_int(root, path, "intermediate_size", 1, 0, &c->intermediate_size) ||
        get_int(root, path, "num_hidden_layers", 1, 0, &c->n_layers) ||
        get_int(root, path, "num_attention_heads", 1, 0, &c->n_heads) ||
        get_int(root, path, "vocab_size", 1, 0, &c->vocab_size) ||
        get_int(root, path, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads) ||
        get_int(root, path, "max_position_embeddings", 0, 32768, &c->max_pos) ||
        get_int(root, path, "bos_token_id", 0, -1, &c->bos_id) ||
        get_int(root, path, "eos_token_id", 0, -1, &c->eos_id) ||
        get_int(root, path, "pad_token_id", 0, -1, &c->pad_id) ||
        get_real(root, path, "rms_norm_eps", 1e-6, &c->rms_eps) ||
        get_real(root, path, "rope_theta", 10000.0, &c->rope_theta))
        goto done;
    if (c->n_heads <= 0) {
        rf_set_error("%s: \"num_attention_heads\" must be positive (got %d)", path, c->n_heads);
        goto done;
    }
    if (get_int(root, path, "head_dim", 0, c->hidden_size / c->n_heads, &c->head_dim)) goto done;
    rf_config_known_special_ids(c);
    if (get_int(root, path, "mask_token_id", 0, c->mask_id, &c->mask_id) ||
        get_int(root, path, "bot_token_id", 0, c->bot_id, &c->bot_id))
        goto done;

    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie) && !json_is_null(tie)) {
        rf_set_error("%s: \"tie_word_embeddings\" must be true or false", path);
        goto done;
    }
    c->tie_embeddings = json_is_true(tie); /* Qwen3Config's default is false */

    /* "torch_dtype" (or "dtype" in newer transformers) */
    json_t *dt = json_object_get(root, "torch_dtype");
    if (!dt || json_is_null(dt)) dt = json_object_get(root, "dtype");
    c->dtype = RF_BF16;
    if (dt && !json_is_null(dt) &&
        (!json_is_string(dt) || rf_dtype_parse(json_string_value(dt), &c->dtype))) {
        rf_set_error("%s: \"torch_dtype\" must be float32, float16 or bfloat16", path);
        goto done;
    }

    /* features of the HF config this engine does not implement: refuse rather
     * than silently compute something else */
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act) &&
        (!json_is_string(act) || strcmp(json_string_value(act), "silu"))) {
        rf_set_error("%s: \"hidden_act\" must be \"silu\"", path);
        goto done;
    }
    json_t *rs = json_object_get(root, "rope_scaling");
    json_t *rt = json_object_get(rs, "rope_type");
    if (!rt) rt = json_object_get(rs, "type");
    int rope_default = json_is_string(rt) && !strcmp(json_string_value(rt), "default");
    if (rs && !json_is_null(rs) && !rope_default) {
        rf_set_error("%s: \"rope_scaling\" is not supported (must be null or default)", path);
        goto done;
    }
    if (json_is_true(json_object_get(root, "use_sliding_window"))) {
        rf_set_error("%s: \"use_sliding_window\" is not supported (must be false)", path);
        goto done;
    }
    if (json_is_true(json_object_get(root, "attention_bias"))) {
        rf_set_error("%s: \"attention_bias\" is not supported (must be false)", path);
        goto done;
    }
    rc = validate(c, path);
done:
    json_decref(root);
    return rc;
}

/* ---- saving -------------------------------------------------------------------- */

/* The double nearest to the shortest decimal that reads back as x, so that
 * 1e-6f is written "1e-06" rather than "9.99999997e-07". */
static double float_decimal(float x) {
    char buf[32];
    for (int prec = 1; prec < 10; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return strtod(buf, NULL);
}

static json_t *id_or_null(int id) { return id >= 0 ? json_integer(id) : json_null(); }

int rf_config_save(const rf_config *c, const char *path) {
    if (validate(c, path)) return -1;
    json_t *r = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("Qwen3ForCausalLM"));
    json_object_set_new(r, "architectures", arch);
    json_object_set_new(r, "attention_bias", json_false());
    json_object_set_new(r, "attention_dropout", json_real(0.0));
    json_object_set_new(r, "bos_token_id", id_or_null(c->bos_id));
    json_object_set_new(r, "eos_token_id", id_or_null(c->eos_id));
    if (c->pad_id >= 0) json_object_set_new(r, "pad_token_id", json_integer(c->pad_id));
    json_object_set_new(r, "head_dim", json_integer(c->head_dim));
    json_object_set_new(r, "hidden_act", json_string("silu"));
    json_object_set_new(r, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(r, "initializer_range", json_real(0.02));
    json_object_set_new(r, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(r, "max_position_embeddings", json_integer(c->max_pos));
    json_object_set_new(r, "max_window_layers", json_integer(c->n_layers));
    json_object_set_new(r, "model_type", json_string("qwen3"));
    json_object_set_new(r, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(r, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(r, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(r, "rms_norm_eps", json_real(float_decimal(c->rms_eps)));
    json_object_set_new(r, "rope_scaling", json_null());
    json_object_set_new(r, "rope_theta", json_real(float_decimal(c->rope_theta)));
    json_object_set_new(r, "sliding_window", json_null());
    json_object_set_new(r, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    const char *tn = c->dtype == RF_F32 ? "float32" : c->dtype == RF_F16 ? "float16" : "bfloat16";
    json_object_set_new(r, "torch_dtype", json_string(tn));
    json_object_set_new(r, "use_cache", json_true());
    json_object_set_new(r, "use_sliding_window", json_false());
    json_object_set_new(r, "vocab_size", json_integer(c->vocab_size));
    /* ReFusion's additions */
    json_object_set_new(r, "mask_token_id", json_integer(c->mask_id));
    json_object_set_new(r, "bot_token_id", id_or_null(c->bot_id));
    /* 15 digits print float_decimal()'s values as their short decimals */
    char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(r);
    if (!s) rf_die("cannot serialise config");
    size_t n = strlen(s);
    char *buf = rf_malloc(n + 2);
    memcpy(buf, s, n);
    buf[n] = '\n';
    free(s);
    int rc = rf_write_file_atomic(path, buf, n + 1);
    free(buf);
    return rc;
}
