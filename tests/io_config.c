/* io_config.c - config.json: presets against the published parameter counts,
 * save -> load round trip, the defaults HF applies, and each validation error
 * naming the file and the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/config.h"
#include "util/util.h"

static char g_dir[256];

static int same_config(const rf_config *a, const rf_config *b) {
    return a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
           a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim &&
           a->vocab_size == b->vocab_size && a->max_pos == b->max_pos &&
           a->rms_eps == b->rms_eps && a->rope_theta == b->rope_theta &&
           a->tie_embeddings == b->tie_embeddings && a->bos_id == b->bos_id &&
           a->eos_id == b->eos_id && a->pad_id == b->pad_id && a->mask_id == b->mask_id &&
           a->bot_id == b->bot_id && a->dtype == b->dtype;
}

static char *write_json(const char *name, const char *text) {
    char *p = rf_path_join(g_dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

/* a minimal valid config with one line replaced/added through `extra` */
#define BASE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
             "\"num_attention_heads\": 4, \"vocab_size\": 512"

static void expect_bad(const char *what, const char *json, const char *needle) {
    char *p = write_json("bad.json", json);
    rf_config c;
    rf_set_error("%s", "");
    CHECK(rf_config_load(&c, p) == -1, "%s: should be rejected", what);
    const char *e = rf_last_error();
    CHECK(strstr(e, p) && strstr(e, needle), "%s: message should name file and '%s': %s", what,
          needle, e);
    free(p);
}

static void test_presets(void) {
    rf_config c;
    /* Qwen3-0.6B: 596,049,920 parameters (tied); Qwen3-8B with the full
     * 151936 vocabulary: 8,190,735,360 (untied), as published on the hub */
    CHECK(rf_config_preset(&c, "0.6b") == 0, "0.6b preset");
    CHECK(rf_config_n_params(&c) == 596049920LL, "0.6b params %lld", rf_config_n_params(&c));
    CHECK(c.mask_id == 151670 && c.bot_id == 151669 && c.tie_embeddings, "0.6b ids");
    CHECK(rf_config_preset(&c, "8b") == 0, "8b preset");
    CHECK(!c.tie_embeddings && c.vocab_size == 151671 && c.head_dim == 128, "8b shape");
    c.vocab_size = 151936;
    CHECK(rf_config_n_params(&c) == 8190735360LL, "8b params %lld", rf_config_n_params(&c));
    CHECK(rf_config_preset(&c, "tiny") == 0 && c.hidden_size == 64 && c.n_kv_heads == 2 &&
              c.head_dim == 16 && c.mask_id == 511 && c.bot_id == 510,
          "tiny preset");
    /* tiny by hand: embed 512*64 + 2 * (64*64*2 + 64*32*2 + 3*64*128 + 2*64 + 2*16) + 64 */
    CHECK(rf_config_n_params(&c) == 512 * 64 + 2 * (8192 + 4096 + 24576 + 128 + 32) + 64,
          "tiny params %lld", rf_config_n_params(&c));
    CHECK(rf_config_preset(&c, "small") == 0 && c.hidden_size == 256 && c.head_dim == 64, "small");
    CHECK(rf_config_preset(&c, "huge") == -1 && strstr(rf_last_error(), "huge"), "unknown preset");
}

static void test_round_trip(void) {
    const char *names[] = {"tiny", "small", "0.6b", "8b"};
    for (int i = 0; i < 4; i++) {
        rf_config a, b;
        rf_config_preset(&a, names[i]);
        if (i == 1) { /* exercise odd values */
            a.rms_eps = 1e-5f;
            a.rope_theta = 12345.5f;
            a.pad_id = 3;
            a.dtype = RF_F32;
        }
        char *p = rf_path_join(g_dir, "config.json");
        CHECK(rf_config_save(&a, p) == 0, "save %s: %s", names[i], rf_last_error());
        CHECK(rf_config_load(&b, p) == 0, "load %s: %s", names[i], rf_last_error());
        CHECK(same_config(&a, &b), "%s: round trip differs", names[i]);
        char *text = rf_read_file(p, NULL);
        CHECK(text && strstr(text, "\"Qwen3ForCausalLM\"") && strstr(text, "\"model_type\": \"qwen3\"") &&
                  strstr(text, "\"hidden_act\": \"silu\""),
              "%s: HF layout", names[i]);
        free(text);
        free(p);
    }
}

static void test_defaults(void) {
    rf_config c;
    char *p = write_json("d.json", "{" BASE ", \"eos_token_id\": [7, 9], \"bos_token_id\": null, \"mask_token_id\": 500}");
    CHECK(rf_config_load(&c, p) == 0, "minimal config loads: %s", rf_last_error());
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16, "kv heads default to heads, head_dim to d/heads");
    CHECK(c.eos_id == 7 && c.bos_id == -1 && c.pad_id == -1, "eos list -> first; null -> -1");
    CHECK(c.mask_id == 500 && c.bot_id == -1, "small vocab: the mask id as given, no <|beginoftext|> guessed");
    CHECK(!c.tie_embeddings && c.dtype == RF_BF16, "untied, bf16 by default");
    CHECK(fabsf(c.rms_eps - 1e-6f) < 1e-12f && c.rope_theta == 10000.0f, "eps / theta defaults");
    free(p);
    p = write_json("d2.json", "{\"hidden_size\": 4096, \"intermediate_size\": 128, "
                              "\"num_hidden_layers\": 1, \"num_attention_heads\": 32, "
                              "\"vocab_size\": 151936, \"torch_dtype\": \"float16\", "
                              "\"tie_word_embeddings\": true, \"head_dim\": 128}");
    CHECK(rf_config_load(&c, p) == 0, "qwen vocab config loads: %s", rf_last_error());
    CHECK(c.mask_id == 151670 && c.bot_id == 151669 && c.dtype == RF_F16 && c.tie_embeddings,
          "Qwen vocab: default ReFusion ids, f16, tied");
    free(p);
    /* a vocabulary of at most 151,670 ids has no room for ReFusion's usual
     * <|mask|> id: its last ids are real tokens, never taken as the mask */
    p = write_json("d4.json", "{" BASE "}");
    CHECK(rf_config_load(&c, p) != 0 && strstr(rf_last_error(), "no \"mask_token_id\""),
          "small vocab without mask_token_id: an error naming it (%s)", rf_last_error());
    free(p);
    p = write_json("d5.json", "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
                              "\"num_attention_heads\": 4, \"vocab_size\": 151670}");
    CHECK(rf_config_load(&c, p) != 0 && strstr(rf_last_error(), "mask_token_id"),
          "vocab 151670 without mask_token_id: an error (%s)", rf_last_error());
    free(p);
    p = write_json("d6.json", "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
                              "\"num_attention_heads\": 4, \"vocab_size\": 151671, \"bos_token_id\": 151669}");
    CHECK(rf_config_load(&c, p) == 0 && c.mask_id == 151670 && c.bot_id == 151669 && c.bos_id == 151669,
          "the released layout (vocab 151671): mask 151670, bot 151669 (%s)", rf_last_error());
    free(p);
    p = write_json("d3.json", "{" BASE ", \"mask_token_id\": 511, \"rope_scaling\": {\"rope_type\": \"default\"}}");
    CHECK(rf_config_load(&c, p) == 0, "default rope_scaling accepted: %s", rf_last_error());
    free(p);
}

static void test_errors(void) {
    expect_bad("invalid JSON", "{\"hidden_size\": 64,", "invalid JSON");
    expect_bad("missing key", "{\"intermediate_size\": 128}", "\"hidden_size\"");
    expect_bad("kv heads", "{" BASE ", \"num_key_value_heads\": 3}", "num_key_value_heads");
    expect_bad("rope_theta beyond float", "{" BASE ", \"rope_theta\": 1e308}", "\"rope_theta\" must be a number > 1 and at most");
    expect_bad("odd head_dim", "{" BASE ", \"head_dim\": 15}", "head_dim");
    expect_bad("zero layers", "{\"hidden_size\": 64, \"intermediate_size\": 128, "
                              "\"num_hidden_layers\": 0, \"num_attention_heads\": 4, "
                              "\"vocab_size\": 512}", "num_hidden_layers");
    expect_bad("string size", "{" BASE ", \"head_dim\": \"16\"}", "head_dim");
    expect_bad("mask id", "{" BASE ", \"mask_token_id\": 512}", "mask_token_id");
    expect_bad("eps", "{" BASE ", \"rms_norm_eps\": -1}", "rms_norm_eps");
    expect_bad("dtype", "{" BASE ", \"torch_dtype\": \"int8\"}", "torch_dtype");
    expect_bad("rope scaling", "{" BASE ", \"rope_scaling\": {\"type\": \"yarn\"}}", "rope_scaling");
    expect_bad("act", "{" BASE ", \"hidden_act\": \"gelu\"}", "hidden_act");
    expect_bad("not object", "[1]", "not a JSON object");
    rf_config c;
    char *p = rf_path_join(g_dir, "missing.json");
    CHECK(rf_config_load(&c, p) == -1 && strstr(rf_last_error(), p), "missing file");
    free(p);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_test_io_cfg.%d", (int)getpid());
    rf_mkdir_p(g_dir);
    test_presets();
    test_round_trip();
    test_defaults();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return check_summary("io_config");
}
