/* cmd_info.c - `refusion info`: load a checkpoint (which validates every
 * header, shape and dtype against config.json) and describe it. --verify
 * also reads every weight and checks it is finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "kernels/cpu.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion info -m DIR [--verify]\n"
            "Load a checkpoint, check it against its config.json and print its shape.\n\n"
            "  -m, --model DIR   checkpoint directory (config.json + safetensors) or a .gguf file\n"
            "  --verify          also read every weight and check that all are finite\n");
}

/* index of the first non-finite value of a matrix, or -1 */
static long long first_nonfinite(const rf_mat *w) {
    size_t n = (size_t)w->rows * w->cols;
    for (size_t i = 0; i < n; i++) {
        float x = w->dtype == RF_F32  ? ((const float *)w->data)[i]
                : w->dtype == RF_BF16 ? rf_bf16_to_f32(((const uint16_t *)w->data)[i])
                                      : rf_f16_to_f32(((const uint16_t *)w->data)[i]);
        if (!isfinite(x)) return (long long)i;
    }
    return -1;
}

static int verify(const rf_model *m) {
    const rf_mat *mats[7];
    for (int l = -1; l < m->cfg.n_layers; l++) {
        int n = 0;
        if (l < 0) {
            mats[n++] = &m->embed;
            if (m->lm_head.data != m->embed.data) mats[n++] = &m->lm_head;
        } else {
            const rf_layer *L = &m->layers[l];
            const rf_mat *lm[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
            for (int j = 0; j < 7; j++) mats[n++] = lm[j];
        }
        for (int j = 0; j < n; j++) {
            long long bad = first_nonfinite(mats[j]);
            if (bad >= 0) {
                rf_set_error("%s: a weight matrix of %s %d has a non-finite value at element %lld",
                             m->dir, l < 0 ? "the embeddings/lm_head" : "layer", l, bad);
                return -1;
            }
        }
    }
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    int do_verify = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--verify")) {
            do_verify = 1;
        } else {
            fprintf(stderr, "refusion: info: unknown option or missing value: %s (see --help)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "refusion: info: -m DIR is required (see --help)\n");
        return 2;
    }
    double t0 = rf_now();
    rf_model m;
    if (rf_model_load(&m, dir)) {
        rf_print_error();
        return 1;
    }
    double t_load = rf_now() - t0;
    const rf_config *c = &m.cfg;
    printf("model      %s\n", dir);
    size_t bytes = 0;
    for (int k = 0; k < m.n_files; k++) {
        const char *base = strrchr(m.files[k].path, '/');
        /* many shards: the first, the last and a count */
        if (m.n_files <= 4 || k == 0 || k == m.n_files - 1)
            printf("file       %s  (%.1f MB, %d tensors)\n", base ? base + 1 : m.files[k].path,
                   m.files[k].map_size / 1e6, m.files[k].n_tensors);
        else if (k == 1)
            printf("file       ... %d more shards ...\n", m.n_files - 2);
        bytes += m.files[k].map_size;
    }
    if (m.gguf) {
        const char *base = strrchr(m.gguf->path, '/');
        printf("file       %s  (%.1f MB, GGUF v%u, %d tensors, %d metadata keys)\n",
               base ? base + 1 : m.gguf->path, m.gguf->map_size / 1e6, m.gguf->version,
               m.gguf->n_tensors, m.gguf->n_kv);
        bytes += m.gguf->map_size;
    }
    int n_files = m.n_files + (m.gguf != NULL);
    printf("shape      hidden %d, layers %d, heads %d (kv %d), head_dim %d, ffn %d\n",
           c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
           c->intermediate_size);
    printf("vocab      %d, max_pos %d, %s embeddings\n", c->vocab_size, c->max_pos,
           c->tie_embeddings ? "tied" : "untied");
    printf("rope/norm  theta %g, rms_eps %g\n", c->rope_theta, c->rms_eps);
    printf("tokens     bos %d, eos %d, pad %d, mask %d, bot %d\n", c->bos_id, c->eos_id, c->pad_id,
           c->mask_id, c->bot_id);
    long long np = rf_config_n_params(c);
    printf("params     %lld (%.3f %s)\n", np, np >= 1e9 ? np / 1e9 : np / 1e6, np >= 1e9 ? "B" : "M");
    printf("dtype      %s (%.3f GB in %d file%s)\n", rf_dtype_name(c->dtype), bytes / 1e9,
           n_files, n_files == 1 ? "" : "s");
    printf("tokenizer  %s\n", !rf_tok_model_has_tokenizer(dir) ? "(none)"
                              : m.gguf                          ? "GGUF metadata (tokenizer.ggml.*)"
                                                                : "tokenizer.json");
    printf("load       %.1f ms, peak RSS %.1f MB\n", t_load * 1e3, rf_peak_rss() / 1e6);
    /* the kernels' instruction-set tier (kernels/cpu.h), and why when it
     * is not what REFUSION_CPU asked for */
    printf("cpu tier   %s (this CPU: %s)%s%s\n", rf_cpu_tier_name(), rf_cpu_tier_str(rf_cpu_tier_detected()),
           rf_cpu_note()[0] ? "; " : "", rf_cpu_note());
    if (do_verify) {
        double t1 = rf_now();
        if (verify(&m)) {
            rf_print_error();
            rf_model_free(&m);
            return 1;
        }
        printf("verify     all weights finite (%.1f s, peak RSS %.1f MB)\n", rf_now() - t1,
               rf_peak_rss() / 1e6);
    }
    rf_model_free(&m);
    return 0;
}
