/* cmd_grow.c - `refusion grow`: a trained checkpoint grown, function
 * preserving, to a larger Qwen3 shape (model/grow.h, docs/growth.md).
 * The grown checkpoint is written into a temporary directory beside OUT and
 * renamed to OUT when complete (Q8_0 / Q4_0: converted from it into the
 * GGUF file OUT by `refusion convert`, then removed), so a failure leaves
 * nothing at OUT; SIGTERM / SIGINT remove it, and the next grow writing OUT
 * removes one a SIGKILL left. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "io/config.h"
#include "model/grow.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/cleanup.h"
#include "util/util.h"

typedef struct {
    const char *in, *out, *dtype;
    int64_t seed;
} grow_args;

#define A(f) offsetof(grow_args, f)
static const rf_opt grow_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(in), .metavar = "SMALL",
     .help = "source checkpoint (directory or .gguf)"},
    {.name = "out", .letter = 'o', .type = RF_OPT_STR, .offset = A(out), .metavar = "BIG",
     .help = "output: a directory (f32/f16/bf16) or a GGUF file (q8_0/q4_0, or any dtype when BIG ends in .gguf); "
             "must not exist (an empty directory is fine)"},
    {.name = "dtype", .type = RF_OPT_STR, .offset = A(dtype), .metavar = "T", .help = "f32, f16, bf16, q8_0 or q4_0"},
    {.name = "seed", .type = RF_OPT_I64, .lo = 0, .hi = 9.3e18, .offset = A(seed), .metavar = "S",
     .help = "seed of the extra layers' random matrices"},
};

/* OUT must not hold anything yet: 1 when it is an empty directory, 0 when absent, -1 otherwise */
static int out_state(const char *out) {
    struct stat st;
    if (stat(out, &st)) return 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(out);
        int empty = 1;
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        if (d) closedir(d);
        if (d && empty) return 1;
    }
    return -1;
}

/* free bytes of the file system that will hold path (its parent directory) */
static double free_bytes(const char *path) {
    char *dir = rf_strdup(path);
    char *slash = strrchr(dir, '/');
    while (slash && slash > dir && slash[1] == 0) { /* "a/b/" -> "a/b" */
        *slash = 0;
        slash = strrchr(dir, '/');
    }
    const char *p = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
    struct statvfs vs;
    double r = statvfs(p, &vs) ? -1 : (double)vs.f_bavail * vs.f_frsize;
    free(dir);
    return r;
}

/* the temporary checkpoint tmp -> the GGUF file out, by `refusion convert`;
 * a fatal error inside the conversion comes back here (a catch point), so
 * the caller removes tmp all the same */
static int convert_gguf(const char *tmp, const char *out, const char *dt, int progress) {
    /* general.name: OUT's base name, not the temporary directory's */
    const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    char name[4096];
    snprintf(name, sizeof name, "%.255s", base);
    size_t nl = strlen(name);
    if (nl > 5 && !strcmp(name + nl - 5, ".gguf")) name[nl - 5] = 0;
    /* convert decides by itself when neither --progress nor --no-progress was given */
    char *flag = progress > 0 ? "--progress" : progress < 0 ? "--no-progress" : NULL;
    char *cv[] = {"convert", "-m", (char *)tmp, "-o", (char *)out, "--format", "gguf", "--dtype", (char *)dt,
                  "--name", name, flag, NULL};
    rf_catch c;
    rf_catch_push(&c);
    if (setjmp(c.jb)) {
        fprintf(stderr, "refusion: grow: %s\n", rf_last_error());
        return 1;
    }
    int rc = cmd_convert(flag ? 12 : 11, cv);
    rf_catch_pop(&c);
    return rc;
}

int cmd_grow(int argc, char **argv) {
    grow_args a = {.dtype = "bf16"}, def_a = a;
    rf_shape_opts sh;
    rf_shape_opts_unset(&sh);
    int progress = 0;
    const rf_opt_group groups[] = {
        {NULL, grow_opts, (int)(sizeof grow_opts / sizeof grow_opts[0]), &a, NULL, &def_a},
        RF_PROGRESS_GROUP(&progress),
        RF_SHAPE_GROUP("target shape (the preset's, or without one the source's, with the sizes given instead of "
                       "its own; 0.6b and up are the shapes of `refusion init`)", &sh, &sh),
    };
    int prc = rf_args_parse("grow", "-m SMALL -o BIG (--preset NAME | shape options) [options]\n"
                            "Grow a checkpoint to a larger Qwen3 shape, computing the same function: the\n"
                            "grown model gives SMALL's logits at every position (docs/growth.md).",
                            groups, 3, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    const char *in = a.in, *out = a.out, *preset = sh.preset, *dt = a.dtype;
    if (!in || !out) {
        fprintf(stderr, "refusion: grow: -m SMALL and -o BIG are required (see --help)\n");
        return 2;
    }
    if (!preset && !rf_shape_opts_given(&sh)) {
        fprintf(stderr, "refusion: grow: give a target shape: --preset NAME or shape options (see --help)\n");
        return 2;
    }
    rf_dtype dtype;
    if (!strcmp(dt, "q8_0") || !strcmp(dt, "Q8_0")) dtype = RF_Q8_0;
    else if (!strcmp(dt, "q4_0") || !strcmp(dt, "Q4_0")) dtype = RF_Q4_0;
    else if (rf_dtype_parse(dt, &dtype)) {
        fprintf(stderr, "refusion: grow: --dtype must be f32, f16, bf16, q8_0 or q4_0, got '%s'\n", dt);
        return 2;
    }
    /* "runs/x/" names the directory runs/x: the temporary one goes beside it */
    static char out_buf[4096];
    snprintf(out_buf, sizeof out_buf, "%s", out);
    for (size_t l = strlen(out_buf); l > 1 && out_buf[l - 1] == '/'; l--) out_buf[l - 1] = 0;
    out = out_buf;
    size_t ol = strlen(out);
    int quant = dtype == RF_Q8_0 || dtype == RF_Q4_0;
    int gguf = quant || (ol > 5 && !strcmp(out + ol - 5, ".gguf"));
    rf_config shape;
    if (preset && rf_config_preset(&shape, preset)) {
        fprintf(stderr, "refusion: grow: %s\n", rf_last_error());
        return 2;
    }
    cli_cleanup_on_signals();
    cli_sweep_temps("grow", out);
    int st = out_state(out);
    if (st < 0) {
        fprintf(stderr, "refusion: grow: %s exists; give a new path (or an empty directory)\n", out);
        return 2;
    }

    rf_model m;
    if (rf_model_load(&m, in)) {
        rf_print_error();
        return 1;
    }
    if (!preset) shape = m.cfg;
    const struct { int v; int *f; } ov[] = {
        {sh.hidden, &shape.hidden_size}, {sh.layers, &shape.n_layers},   {sh.heads, &shape.n_heads},
        {sh.kv_heads, &shape.n_kv_heads}, {sh.head_dim, &shape.head_dim}, {sh.ffn, &shape.intermediate_size},
        {sh.vocab, &shape.vocab_size},   {sh.tied, &shape.tie_embeddings},
    };
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        if (ov[i].v >= 0) *ov[i].f = (int)ov[i].v;
    rf_config dst;
    if (rf_grow_config(&m.cfg, &shape, &dst)) {
        fprintf(stderr, "refusion: %s: %s\n", in, rf_last_error());
        rf_model_free(&m);
        return 1;
    }
    if (gguf && (dst.hidden_size % 32 || dst.intermediate_size % 32 || (dst.n_heads * dst.head_dim) % 32)) {
        fprintf(stderr, "refusion: grow: %s needs every matrix's columns in blocks of 32 (hidden %d, FFN %d, "
                "heads x head_dim %d)\n", dt, dst.hidden_size, dst.intermediate_size, dst.n_heads * dst.head_dim);
        rf_model_free(&m);
        return 1;
    }
    /* the disk must hold the checkpoint (and, for GGUF, the temporary one beside it) */
    rf_dtype tmp_dtype = quant ? (m.cfg.dtype == RF_F32 ? RF_F32 : RF_BF16) : dtype;
    double params = (double)rf_config_n_params(&dst), bytes = params * rf_dtype_size(tmp_dtype);
    double gguf_per = dtype == RF_Q8_0 ? 34.0 / 32 : dtype == RF_Q4_0 ? 18.0 / 32 : (double)rf_dtype_size(dtype);
    double need = bytes + (gguf ? params * gguf_per : 0);
    double have = free_bytes(out);
    if (have >= 0 && need * 1.01 > have) {
        fprintf(stderr, "refusion: grow: %s needs %.2f GB of disk (%s%s), %.2f GB are free there\n", out, need / 1e9,
                rf_dtype_name(tmp_dtype), gguf ? " checkpoint, then the GGUF" : "", have / 1e9);
        rf_model_free(&m);
        return 1;
    }
    double t0 = rf_now();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.grow-tmp.%ld", out, (long)getpid());
    int tmp_slot = rf_cleanup_add_path(tmp); /* removed if a signal ends grow first */
    rf_progress *pg = rf_progress_start("grow", tmp, bytes, progress); /* the checkpoint as it fills tmp */
    int rc = rf_model_grow(&m, &dst, tmp, tmp_dtype, (uint64_t)a.seed);
    rf_progress_stop(pg);
    /* the tokenizer travels with the weights */
    static const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json"};
    struct stat sb;
    for (int i = 0; i < 2 && rc == 0 && !stat(in, &sb) && S_ISDIR(sb.st_mode); i++) {
        char *f = rf_path_join(in, tok_files[i]);
        if (access(f, R_OK) == 0) rc = rf_copy_file_into(f, tmp, tok_files[i]);
        free(f);
    }
    if (rc == 0 && m.gguf && rf_tok_model_has_tokenizer(in))
        fprintf(stderr, "refusion: grow: note: the tokenizer in %s's GGUF metadata is not carried over (give "
                "prompts as --ids, or copy a tokenizer.json into %s)\n", in, out);
    rf_model_free(&m);
    if (rc) {
        fprintf(stderr, "refusion: grow: %s\n", rf_last_error());
        rf_remove_tree(tmp);
        rf_cleanup_drop(tmp_slot);
        return 1;
    }
    if (gguf) {
        rc = convert_gguf(tmp, out, dt, progress);
        rf_remove_tree(tmp);
        rf_cleanup_drop(tmp_slot);
        if (rc) return rc;
    } else {
        if (st == 1) rmdir(out);
        int moved = rename(tmp, out) == 0;
        if (!moved) {
            fprintf(stderr, "refusion: grow: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
            rf_remove_tree(tmp);
        }
        rf_cleanup_drop(tmp_slot);
        if (!moved) return 1;
    }
    printf("grew %s to %s: %.2fM params, %s, %d layers, hidden %d, %d/%d heads, head_dim %d, ffn %d, vocab %d%s, "
           "%.1f s\n", in, out, params / 1e6, gguf ? dt : rf_dtype_name(dtype), dst.n_layers, dst.hidden_size,
           dst.n_heads, dst.n_kv_heads, dst.head_dim, dst.intermediate_size, dst.vocab_size,
           dst.tie_embeddings ? " tied" : "", rf_now() - t0);
    return 0;
}
