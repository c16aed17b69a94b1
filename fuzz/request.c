/* request.c - libFuzzer: a request body for /v1/completions or
 * /v1/chat/completions (first byte), parsed against a small random model
 * with the demo tokenizer; an accepted request must pass the decoder's own
 * check (rf_gen_check), a working-memory estimate within the machine (the
 * sizes the decoder would allocate) and 1 .. RF_SERVE_MAX_N choices. */
#include "decode/decode_impl.h"
#include "fuzz_util.h"
#include "serve/serve.h"
#include "util/util.h"

static rf_model model;
static rf_tokenizer *tok;
static rf_decode_opts defaults;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    if (!tok) {
        char *p = rf_path_join(fuzz_src(), "models/refusion-demo");
        tok = rf_tok_load(p);
        free(p);
        if (!tok) abort();
        rf_config c;
        rf_config_preset(&c, "tiny");
        c.vocab_size = rf_tok_vocab_size(tok);
        c.mask_id = rf_tok_mask_id(tok), c.eos_id = rf_tok_eos_id(tok), c.bot_id = -1;
        c.max_pos = 4096;
        rf_model_init_random(&model, &c, RF_F32, 0.02f, 1);
        rf_decode_opts_default(&defaults);
        defaults.gen.gen_length = 16;
    }
    rf_serve_req r;
    rf_req_kind kind = data[0] & 1 ? RF_REQ_CHAT : RF_REQ_COMPLETION;
    if (rf_serve_parse((const char *)data + 1, size - 1, kind, &model, tok, &defaults, &r) == 0) {
        if (rf_gen_check(&model, r.prompt, r.n_prompt, &r.p, r.ar)) abort();
        if (gen_padded64(&r.p) > model.cfg.max_pos) abort();
        if (rf_gen_mem_bytes(&model, r.n_prompt, &r.p, r.ar) <= 0) abort();
        if (r.n_choices < 1 || r.n_choices > RF_SERVE_MAX_N) abort();
        rf_serve_req_free(&r);
    }
    return 0;
}
