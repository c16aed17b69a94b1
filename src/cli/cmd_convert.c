/* cmd_convert.c - `refusion convert`: rewrite a checkpoint in another weight
 * dtype (e.g. the trainer's f32 output to bf16, half the size, for shipping)
 * and optionally sharded. Tensors are converted one 4M-element chunk at a
 * time straight from the mmap'd source, so any size fits in little RAM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion convert -m IN_DIR -o OUT_DIR [--dtype bf16|f16|f32]\n"
            "Rewrite a checkpoint with its weights stored in another dtype (default bf16).\n"
            "config.json, model.safetensors and the tokenizer files are written to OUT_DIR.\n");
}

/* one source tensor: a matrix in the mmap, or an f32 norm vector */
typedef struct {
    rf_dtype src_dtype, dst_dtype;
    const void *src;
} conv_ctx;

static float load_elem(rf_dtype t, const void *p, size_t i) {
    switch (t) {
        case RF_BF16: return rf_bf16_to_f32(((const uint16_t *)p)[i]);
        case RF_F16: return rf_f16_to_f32(((const uint16_t *)p)[i]);
        default: return ((const float *)p)[i];
    }
}

static void fill_converted(void *vctx, size_t e0, size_t n, void *dst) {
    const conv_ctx *c = vctx;
    for (size_t i = 0; i < n; i++) {
        float x = load_elem(c->src_dtype, c->src, e0 + i);
        switch (c->dst_dtype) {
            case RF_BF16: ((uint16_t *)dst)[i] = rf_f32_to_bf16(x); break;
            case RF_F16: ((uint16_t *)dst)[i] = rf_f32_to_f16(x); break;
            default: ((float *)dst)[i] = x;
        }
    }
}

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dt = "bf16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (v && (!strcmp(a, "-m") || !strcmp(a, "--model"))) in = argv[++i];
        else if (v && (!strcmp(a, "-o") || !strcmp(a, "--out"))) out = argv[++i];
        else if (v && !strcmp(a, "--dtype")) dt = argv[++i];
        else {
            fprintf(stderr, "refusion: convert: bad option '%s' (see --help)\n", a);
            return 2;
        }
    }
    rf_dtype dtype;
    if (!in || !out) {
        usage(stderr);
        return 2;
    }
    if (rf_dtype_parse(dt, &dtype)) {
        fprintf(stderr, "refusion: convert: --dtype must be bf16, f16 or f32, got '%s'\n", dt);
        return 2;
    }
    rf_model m;
    if (rf_model_load(&m, in)) {
        rf_print_error();
        return 1;
    }
    int rc = 1;
    rf_tspec *ts = NULL;
    conv_ctx *ctx = NULL;
    if (rf_mkdir_p(out)) goto done;
    rf_config cfg = m.cfg;
    cfg.dtype = dtype;
    char *p = rf_path_join(out, "config.json");
    int crc = rf_config_save(&cfg, p);
    free(p);
    if (crc) goto done;

    int n = rf_model_tensor_list(&m, &ts);
    ctx = rf_calloc((size_t)n, sizeof *ctx);
    rf_st_writer *w = rf_st_writer_new();
    for (int i = 0; i < n; i++) {
        int64_t shape[2] = {ts[i].rows, ts[i].cols};
        ctx[i].dst_dtype = dtype;
        if (ts[i].mat) {
            ctx[i].src_dtype = ts[i].mat->dtype;
            ctx[i].src = ts[i].mat->data;
        } else {
            ctx[i].src_dtype = RF_F32; /* the loader keeps norm vectors as f32 */
            ctx[i].src = *ts[i].vec;
        }
        rf_st_writer_add_gen(w, ts[i].name, dtype, ts[i].mat ? 2 : 1, shape, fill_converted, &ctx[i]);
    }
    p = rf_path_join(out, "model.safetensors");
    crc = rf_st_writer_finish(w, p);
    free(p);
    if (crc) goto done;
    /* tokenizer files travel with the weights */
    static const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char *src = rf_path_join(in, tok_files[i]);
        int have = access(src, R_OK) == 0;
        crc = have ? rf_copy_file_into(src, out, tok_files[i]) : 0;
        free(src);
        if (crc) goto done;
    }
    printf("wrote %s (%s, %d tensors)\n", out, rf_dtype_name(dtype), n);
    rc = 0;
done:
    if (rc) rf_print_error();
    free(ts);
    free(ctx);
    rf_model_free(&m);
    return rc;
}
