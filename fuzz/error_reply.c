/* error_reply.c - libFuzzer: the server's error replies. The input is cut
 * into a message, a param and a field name (at its first two 0xFE bytes);
 * whatever their bytes (invalid UTF-8, control characters, any length):
 *  - rf_serve_error_body returns valid JSON {"error": {"message": string,
 *    "type": string, ...}};
 *  - rf_serve_utf8_cut keeps a prefix that is valid UTF-8 when its source is;
 *  - a request carrying the field name (when it is valid UTF-8) is refused
 *    with an err_param that is valid UTF-8 and a reply that can be built. */
#include <jansson.h>
#include <string.h>

#include "fuzz_util.h"
#include "serve/serve.h"
#include "util/util.h"

static rf_model model;
static rf_tokenizer *tok;
static rf_decode_opts defaults;

static int utf8_ok(const char *s) {
    json_t *v = json_string(s);
    json_decref(v);
    return v != NULL;
}

static void check_body(const char *msg, const char *param) {
    char *b = rf_serve_error_body(msg, "invalid_request_error", param, "c");
    json_t *o = b ? json_loads(b, 0, NULL) : NULL;
    json_t *e = json_object_get(o, "error");
    if (!o || !json_is_string(json_object_get(e, "message")) || !json_is_string(json_object_get(e, "type"))) abort();
    json_decref(o);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) {
        char *p = rf_path_join(fuzz_src(), "models/refusion-demo");
        tok = rf_tok_load(p);
        free(p);
        if (!tok) abort();
        rf_config c;
        rf_config_preset(&c, "tiny");
        c.vocab_size = rf_tok_vocab_size(tok);
        c.mask_id = rf_tok_mask_id(tok), c.eos_id = rf_tok_eos_id(tok), c.bot_id = -1;
        c.max_pos = 256;
        rf_model_init_random(&model, &c, RF_F32, 0.02f, 1);
        rf_decode_opts_default(&defaults);
        defaults.gen.gen_length = 8;
    }
    /* three NUL-terminated pieces */
    char *buf = rf_malloc(size + 3), *piece[3] = {buf, NULL, NULL};
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = 0;
    int k = 1;
    for (size_t i = 0; i < size && k < 3; i++)
        if ((unsigned char)buf[i] == 0xFE) buf[i] = 0, piece[k++] = buf + i + 1;
    for (; k < 3; k++) piece[k] = buf + size + k; /* empty */
    check_body(piece[0], piece[1]);
    check_body(piece[1], NULL);

    char cut[70];
    for (size_t n = 1; n <= sizeof cut; n += 7) {
        rf_serve_utf8_cut(cut, n, piece[2]);
        if (strlen(cut) >= n || strncmp(cut, piece[2], strlen(cut))) abort();
        if (utf8_ok(piece[2]) && !utf8_ok(cut)) abort();
    }

    json_t *name = json_string(piece[2]);
    if (name && *piece[2]) {
        json_t *o = json_pack("{s:s, s:i}", "prompt", "hi", "max_tokens", 2);
        json_object_set_new(o, piece[2], json_integer(1));
        char *body = json_dumps(o, JSON_COMPACT);
        rf_serve_req r;
        if (rf_serve_parse(body, strlen(body), RF_REQ_COMPLETION, &model, tok, &defaults, &r) == 0) {
            rf_serve_req_free(&r);
        } else {
            if (!utf8_ok(r.err_param)) abort();
            check_body(rf_last_error(), r.err_param);
        }
        free(body);
        json_decref(o);
    }
    json_decref(name);
    free(buf);
    return 0;
}
