/* cmd_convert.c - `refusion convert`: rewrite a checkpoint in another weight
 * dtype (e.g. the trainer's f32 output to bf16, half the size, for shipping)
 * and optionally sharded. Tensors are converted one 4M-element chunk at a
 * time straight from the mmap'd source, so any size fits in little RAM.
 * SIGTERM / SIGINT remove the temporary files being written (and the output
 * directory when convert made it); the next convert writing OUT removes
 * those a SIGKILL left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/tensors.h"
#include "tokenizer/tokenizer.h"
#include "util/cleanup.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion convert -m IN -o OUT [--format safetensors|gguf] [--dtype TYPE] [--name NAME]\n"
            "Rewrite a checkpoint with its weights stored in another dtype (default bf16).\n"
            "IN is a checkpoint directory or a .gguf file.\n"
            "  --format safetensors  OUT is a directory: config.json, model.safetensors and the\n"
            "                        tokenizer files (--dtype bf16|f16|f32; the default unless\n"
            "                        OUT ends in .gguf)\n"
            "  --format gguf         OUT is one GGUF file as llama.cpp writes it (architecture\n"
            "                        qwen3, the tokenizer in its metadata, ReFusion's mask and\n"
            "                        begin tokens kept): --dtype bf16|f16|f32 or one of\n"
            "                        llama-quantize's types (q8_0, q6_k, q5_k_m, q4_k_m, iq4_xs,\n"
            "                        ...: see docs/checkpoints.md), with its per-tensor types\n"
            "                        and bytes (q4_k_m: q6_k output, attn_v and ffn_down of\n"
            "                        some layers; rows not whole 256-blocks in q5_0 / q8_0).\n"
            "                        Norms stay f32.\n"
            "  --name NAME           general.name of the GGUF file (default: IN's base name)\n"
            "  --progress / --no-progress  bytes written on stderr (default: when stderr is a terminal)\n");
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* IN -> one GGUF file, tokenizer included when IN has one */
static int convert_gguf(const rf_model *m, const char *in, const char *out, rf_ftype ft, const char *name) {
    rf_tokenizer *tok = NULL;
    if (rf_tok_model_has_tokenizer(in) && !(tok = rf_tok_load(in))) return -1;
    char base[256];
    if (!name) { /* IN's base name: "runs/x/" -> "x", "m.gguf" -> "m" */
        snprintf(base, sizeof base, "%s", in);
        size_t n = strlen(base);
        while (n > 1 && base[n - 1] == '/') base[--n] = 0;
        if (ends_with(base, ".gguf")) base[n - 5] = 0;
        const char *slash = strrchr(base, '/');
        name = slash ? slash + 1 : base;
    }
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_model_gguf_add_ftype(m, w, ft, name);
    if (tok && rf_tok_gguf_add(tok, w, m->cfg.vocab_size)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        rf_set_error("%s: %s", in, msg);
        rf_tok_free(tok);
        rf_gguf_writer_free(w);
        return -1;
    }
    int rc = rf_gguf_writer_finish(w, out);
    rf_tok_free(tok);
    if (rc == 0)
        printf("wrote %s (GGUF qwen3, %s, %d layers%s)\n", out, rf_ftype_name(ft), m->cfg.n_layers,
               tok ? ", tokenizer" : ", no tokenizer");
    return rc;
}

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dt = "bf16", *format = NULL, *name = NULL;
    int progress = 0; /* 1 --progress, -1 --no-progress, 0: on a terminal */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--progress")) progress = 1;
        else if (!strcmp(a, "--no-progress")) progress = -1;
        else if (v && (!strcmp(a, "-m") || !strcmp(a, "--model"))) in = argv[++i];
        else if (v && (!strcmp(a, "-o") || !strcmp(a, "--out"))) out = argv[++i];
        else if (v && !strcmp(a, "--dtype")) dt = argv[++i];
        else if (v && !strcmp(a, "--format")) format = argv[++i];
        else if (v && !strcmp(a, "--name")) name = argv[++i];
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
    if (!format) format = ends_with(out, ".gguf") ? "gguf" : "safetensors";
    int gguf = !strcmp(format, "gguf");
    if (!gguf && strcmp(format, "safetensors")) {
        fprintf(stderr, "refusion: convert: --format must be safetensors or gguf, got '%s'\n", format);
        return 2;
    }
    /* llama-quantize's file type names (q4_k_m: its Q4_K_M mix), or a
     * safetensors / torch name of an element type */
    rf_ftype ft;
    if (rf_ftype_parse(dt, &ft) && (rf_dtype_parse(dt, &dtype) || rf_ftype_of_dtype(dtype, &ft))) {
        if (gguf) fprintf(stderr, "refusion: convert: --dtype must be one of %s, got '%s'\n", rf_ftype_list(), dt);
        else fprintf(stderr, "refusion: convert: --dtype must be bf16, f16 or f32, got '%s'\n", dt);
        return 2;
    }
    dtype = rf_ftype_base(ft);
    if (!gguf && rf_dtype_is_quant(dtype)) {
        fprintf(stderr, "refusion: convert: --dtype %s needs --format gguf (safetensors has no "
                "ggml block types)\n", dt);
        return 2;
    }
    /* writing into the checkpoint being read would rewrite it in place */
    char *real_in = realpath(in, NULL), *real_out = realpath(out, NULL);
    int same = real_in && real_out && !strcmp(real_in, real_out);
    free(real_in), free(real_out);
    if (same) {
        fprintf(stderr, "refusion: convert: -o %s is the input checkpoint itself; write to a new directory\n", out);
        return 2;
    }
    cli_cleanup_on_signals();
    cli_sweep_temps("convert", out);
    rf_model m;
    if (rf_model_load(&m, in)) {
        rf_print_error();
        return 1;
    }
    if (gguf) {
        /* block types: their bytes per weight (the mixes' extra bits aside) */
        double per = rf_dtype_bits(dtype) / 8;
        rf_progress *pg = rf_progress_start("convert", out, rf_config_n_params(&m.cfg) * per, progress);
        int grc = convert_gguf(&m, in, out, ft, name);
        rf_progress_stop(pg);
        if (grc) rf_print_error();
        rf_model_free(&m);
        return grc ? 1 : 0;
    }
    int rc = 1, crc;
    /* a directory made here goes, with what is in it, if a signal ends convert */
    int out_slot = access(out, F_OK) ? rf_cleanup_add_path(out) : -1;
    rf_progress *pg = rf_progress_start("convert", out, (double)rf_config_n_params(&m.cfg) * rf_dtype_size(dtype),
                                        progress);
    int src = rf_model_save(&m, out, dtype, 0);
    rf_progress_stop(pg);
    if (src) goto done;
    /* tokenizer files travel with the weights */
    static const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char *src = rf_path_join(in, tok_files[i]);
        int have = access(src, R_OK) == 0;
        crc = have ? rf_copy_file_into(src, out, tok_files[i]) : 0;
        free(src);
        if (crc) goto done;
    }
    if (m.gguf && rf_tok_model_has_tokenizer(in))
        fprintf(stderr, "refusion: convert: note: the tokenizer in %s is not written as tokenizer.json\n", in);
    printf("wrote %s (%s, %d tensors)\n", out, rf_dtype_name(dtype), rf_tensor_count(&m.cfg));
    rc = 0;
done:
    rf_cleanup_drop(out_slot);
    if (rc) rf_print_error();
    rf_model_free(&m);
    return rc;
}
