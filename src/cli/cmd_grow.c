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

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion grow -m SMALL -o BIG (--preset NAME | shape options) [options]\n"
            "Grow a checkpoint to a larger Qwen3 shape, computing the same function: the\n"
            "grown model gives SMALL's logits at every position (docs/growth.md).\n\n"
            "  -m, --model SMALL    source checkpoint (directory or .gguf)\n"
            "  -o, --out BIG        output: a directory (f32/f16/bf16) or a GGUF file (q8_0/q4_0, or\n"
            "                       any dtype when BIG ends in .gguf);\n"
            "                       must not exist (an empty directory is fine)\n"
            "  --preset NAME        target shape: 0.6b | 1.7b | 4b | 8b (the shapes of `refusion init`)\n"
            "  --hidden N  --layers N  --heads N  --kv-heads N  --head-dim N  --ffn N  --vocab N\n"
            "  --tied 0|1           the target's shape (override the preset's; without a preset\n"
            "                       the source's shape is the start)\n"
            "  --dtype T            f32 | f16 | bf16 (default) | q8_0 | q4_0\n"
            "  --seed S             seed of the extra layers' random matrices (default 0)\n"
            "  --progress / --no-progress  bytes written on stderr (default: when stderr is a terminal)\n");
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "refusion: grow: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

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
    char *cv[] = {"convert", "-m", (char *)tmp, "-o", (char *)out, "--format", "gguf", "--dtype", (char *)dt,
                  "--name", name, progress > 0 ? "--progress" : "--no-progress", NULL};
    rf_catch c;
    rf_catch_push(&c);
    if (setjmp(c.jb)) {
        fprintf(stderr, "refusion: grow: %s\n", rf_last_error());
        return 1;
    }
    int rc = cmd_convert(12, cv);
    rf_catch_pop(&c);
    return rc;
}

int cmd_grow(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *preset = NULL, *dt = "bf16";
    long hidden = -1, layers = -1, heads = -1, kv = -1, hd = -1, ffn = -1, vocab = -1, tied = -1, seed = 0;
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
            fprintf(stderr, "refusion: grow: unknown option or missing value: %s (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long *ip = NULL, lo = 1, hi = 1 << 24;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) in = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--dtype")) dt = v;
        else if (!strcmp(a, "--hidden")) ip = &hidden;
        else if (!strcmp(a, "--layers")) ip = &layers, hi = 4096;
        else if (!strcmp(a, "--heads")) ip = &heads;
        else if (!strcmp(a, "--kv-heads")) ip = &kv;
        else if (!strcmp(a, "--head-dim")) ip = &hd;
        else if (!strcmp(a, "--ffn")) ip = &ffn;
        else if (!strcmp(a, "--vocab")) ip = &vocab;
        else if (!strcmp(a, "--tied")) ip = &tied, lo = 0, hi = 1;
        else if (!strcmp(a, "--seed")) ip = &seed, lo = 0, hi = 0x7fffffffffffffffL;
        else {
            fprintf(stderr, "refusion: grow: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (ip && parse_int(a, v, lo, hi, ip)) return 2;
    }
    if (!in || !out) {
        fprintf(stderr, "refusion: grow: -m SMALL and -o BIG are required (see --help)\n");
        return 2;
    }
    if (!preset && hidden < 0 && layers < 0 && heads < 0 && kv < 0 && hd < 0 && ffn < 0 && vocab < 0 && tied < 0) {
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
    const struct { long v; int *f; } ov[] = {
        {hidden, &shape.hidden_size}, {layers, &shape.n_layers},        {heads, &shape.n_heads},
        {kv, &shape.n_kv_heads},      {hd, &shape.head_dim},            {ffn, &shape.intermediate_size},
        {vocab, &shape.vocab_size},   {tied, &shape.tie_embeddings},
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
    rf_progress *pg = rf_progress_start("grow", out, bytes, progress);
    int rc = rf_model_grow(&m, &dst, tmp, tmp_dtype, (uint64_t)seed);
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
