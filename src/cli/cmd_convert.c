/* cmd_convert.c - `refusion convert`: rewrite a checkpoint in another weight
 * dtype (e.g. the trainer's f32 output to bf16, half the size, for shipping)
 * and optionally sharded. Tensors are converted one 4M-element chunk at a
 * time straight from the mmap'd source, so any size fits in little RAM.
 * SIGTERM / SIGINT remove the temporary files being written (and the output
 * directory when convert made it); the next convert writing OUT removes
 * those a SIGKILL left. */
#include <stddef.h>
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

typedef struct {
    const char *in, *out, *dtype, *format, *name;
} convert_args;

#define A(f) offsetof(convert_args, f)
static const rf_opt convert_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(in), .metavar = "IN",
     .help = "the checkpoint: a directory or a .gguf file"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "OUT", .help = "the output"},
    {.name = "format", .type = RF_OPT_STR, .offset = A(format), .metavar = "FORMAT",
     .help = "safetensors: OUT is a directory: config.json, model.safetensors and the tokenizer files "
             "(--dtype bf16|f16|f32; the default unless OUT ends in .gguf). gguf: OUT is one GGUF file as llama.cpp "
             "writes it (architecture qwen3, the tokenizer in its metadata, ReFusion's mask and begin tokens kept): "
             "--dtype bf16|f16|f32 or one of llama-quantize's types (q8_0, q6_k, q5_k_m, q4_k_m, iq4_xs, ...: see "
             "docs/checkpoints.md), with its per-tensor types and bytes (q4_k_m: q6_k output, attn_v and ffn_down of "
             "some layers; rows not whole 256-blocks in q5_0 / q8_0). Norms stay f32."},
    {.name = "dtype", .type = RF_OPT_STR, .offset = A(dtype), .metavar = "TYPE", .help = "the weights' storage type"},
    {.name = "name", .type = RF_OPT_STR, .offset = A(name), .metavar = "NAME",
     .help = "general.name of the GGUF file (default: IN's base name)"},
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* IN -> one GGUF file, tokenizer included when IN has one (*with_tokenizer) */
static int convert_gguf(const rf_model *m, const char *in, const char *out, rf_ftype ft, const char *name,
                        int *with_tokenizer) {
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
    *with_tokenizer = tok != NULL;
    rf_tok_free(tok);
    return rc;
}

int cmd_convert(int argc, char **argv) {
    convert_args a = {.dtype = "bf16"}, def_a = a;
    int progress = 0;
    const rf_opt_group groups[] = {
        {NULL, convert_opts, (int)(sizeof convert_opts / sizeof convert_opts[0]), &a, NULL, &def_a},
        RF_PROGRESS_GROUP(&progress),
    };
    int prc = rf_args_parse("convert", "-m IN -o OUT [--format safetensors|gguf] [--dtype TYPE] [--name NAME]\n"
                            "Rewrite a checkpoint with its weights stored in another dtype.",
                            groups, 2, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    const char *in = a.in, *out = a.out, *dt = a.dtype, *format = a.format, *name = a.name;
    if (!in || !out) {
        fprintf(stderr, "refusion: convert: -m IN and -o OUT are required (see --help)\n");
        return 2;
    }
    rf_dtype dtype;
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
        int with_tokenizer = 0, grc = convert_gguf(&m, in, out, ft, name, &with_tokenizer);
        rf_progress_stop(pg); /* ends the progress line before the report below */
        if (grc) rf_print_error();
        else
            printf("wrote %s (GGUF qwen3, %s, %d layers%s)\n", out, rf_ftype_name(ft), m.cfg.n_layers,
                   with_tokenizer ? ", tokenizer" : ", no tokenizer");
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
