/* cmd_info.c - `refusion info`: load a checkpoint (which validates every
 * header, shape and dtype against config.json) and describe it. --verify
 * also reads every weight and checks it is finite; --json prints the same
 * as one JSON object. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/args.h"
#include "formats/blocks.h"
#include "cli/commands.h"
#include "kernels/cpu.h"
#include "model/tune.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

typedef struct {
    const char *model;
    int verify, json;
} info_args;

#define A(f) offsetof(info_args, f)
/* the tier's note and, at amx, which calls run on the tiles */
static const char *cpu_note(void) {
    static char note[512];
    const char *c = rf_cpu_note(), *a = rf_matmul_amx_note();
    snprintf(note, sizeof note, "%s%s%s", c, c[0] && a[0] ? "; " : "", a);
    return note;
}

static const rf_opt info_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "MODEL",
     .help = "checkpoint directory (config.json + safetensors) or a .gguf file"},
    {.name = "verify", .type = RF_OPT_FLAG, .offset = A(verify), .help = "also read every weight and check that all are finite"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = A(json), .help = "print the description as one JSON object"},
};

/* index of the first non-finite value of a matrix, or -1 (block types:
 * dequantised a row at a time) */
static long long first_nonfinite(const rf_mat *w) {
    float *row = rf_malloc((size_t)w->cols * sizeof(float));
    const size_t rb = rf_dtype_row_bytes(w->dtype, w->cols);
    long long bad = -1;
    for (int64_t r = 0; r < w->rows && bad < 0; r++) {
        rf_dequantize_row(w->dtype, (const uint8_t *)w->data + (size_t)r * rb, row, w->cols);
        for (int64_t i = 0; i < w->cols && bad < 0; i++)
            if (!isfinite(row[i])) bad = (long long)(r * w->cols + i);
    }
    free(row);
    return bad;
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

/* The tensors of the files by weight type: how many, and their weights
 * and bytes (the bits per weight of the file, as llama.cpp counts them:
 * every tensor's bytes over every tensor's weights) */
typedef struct {
    int n[RF_DTYPE_COUNT];
    double weights, bytes;
} type_counts;

static void count_types(const rf_model *m, type_counts *tc) {
    memset(tc, 0, sizeof *tc);
    for (int k = 0; k < m->n_files; k++)
        for (int i = 0; i < m->files[k].n_tensors; i++) {
            const rf_tensor *t = &m->files[k].tensors[i];
            double w = 1;
            for (int d = 0; d < t->ndim; d++) w *= (double)t->shape[d];
            tc->n[t->dtype]++, tc->weights += w, tc->bytes += (double)t->nbytes;
        }
    for (int i = 0; m->gguf && i < m->gguf->n_tensors; i++) {
        const rf_gguf_tensor *t = &m->gguf->tensors[i];
        double w = 1;
        for (int d = 0; d < t->n_dims; d++) w *= (double)t->ne[d];
        tc->n[t->dtype]++, tc->weights += w, tc->bytes += (double)t->nbytes;
    }
}

static double bits_per_weight(const type_counts *tc) { return tc->weights ? 8 * tc->bytes / tc->weights : 0; }

/* What info prints, as JSON (--json). */
static json_t *info_json(const rf_model *m, const char *dir, const char *tokenizer, size_t bytes, double t_load) {
    const rf_config *c = &m->cfg;
    json_t *files = json_array();
    for (int k = 0; k < m->n_files; k++)
        json_array_append_new(files, json_pack("{s:s, s:s, s:I, s:i}", "path", m->files[k].path, "format",
                                               "safetensors", "bytes", (json_int_t)m->files[k].map_size,
                                               "tensors", m->files[k].n_tensors));
    if (m->gguf)
        json_array_append_new(files, json_pack("{s:s, s:s, s:I, s:i, s:i, s:i}", "path", m->gguf->path, "format",
                                               "gguf", "bytes", (json_int_t)m->gguf->map_size, "tensors",
                                               m->gguf->n_tensors, "gguf_version", (int)m->gguf->version,
                                               "metadata_keys", m->gguf->n_kv));
    json_t *cfg = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:f, s:f, s:i, s:i, s:i, s:i, s:i}",
                            "hidden_size", c->hidden_size, "n_layers", c->n_layers, "n_heads", c->n_heads,
                            "n_kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "intermediate_size",
                            c->intermediate_size, "vocab_size", c->vocab_size, "max_pos", c->max_pos,
                            "tie_embeddings", c->tie_embeddings, "rope_theta", (double)c->rope_theta, "rms_eps",
                            (double)c->rms_eps, "bos_id", c->bos_id, "eos_id", c->eos_id, "pad_id", c->pad_id,
                            "mask_id", c->mask_id, "bot_id", c->bot_id);
    type_counts tc;
    count_types(m, &tc);
    json_t *types = json_object();
    for (int t = 0; t < RF_DTYPE_COUNT; t++)
        if (tc.n[t]) json_object_set_new(types, rf_dtype_name((rf_dtype)t), json_integer(tc.n[t]));
    return json_pack("{s:s, s:o, s:o, s:I, s:s, s:o, s:f, s:I, s:s?, s:f, s:f, s:{s:s, s:s, s:s}}", "model", dir,
                     "files", files, "config", cfg, "params", (json_int_t)rf_config_n_params(c), "dtype",
                     rf_dtype_name(c->dtype), "tensor_types", types, "bits_per_weight", bits_per_weight(&tc),
                     "bytes", (json_int_t)bytes, "tokenizer", tokenizer, "load_ms",
                     t_load * 1e3, "peak_rss_mb", rf_peak_rss() / 1e6, "cpu", "tier", rf_cpu_tier_name(),
                     "detected", rf_cpu_tier_str(rf_cpu_tier_detected()), "note", cpu_note());
}

int cmd_info(int argc, char **argv) {
    info_args a = {0};
    const rf_opt_group groups[] = {{NULL, info_opts, (int)(sizeof info_opts / sizeof info_opts[0]), &a, NULL, NULL}};
    int prc = rf_args_parse("info", "-m MODEL [--verify] [--json]\n"
                            "Load a checkpoint, check it against its config.json and print its shape.",
                            groups, 1, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    const char *dir = a.model;
    int do_verify = a.verify;
    if (!dir) {
        fprintf(stderr, "refusion: info: -m MODEL is required (see --help)\n");
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
    size_t bytes = m.gguf ? m.gguf->map_size : 0;
    for (int k = 0; k < m.n_files; k++) bytes += m.files[k].map_size;
    const char *tokenizer = !rf_tok_model_has_tokenizer(dir) ? NULL : m.gguf ? "gguf" : "tokenizer.json";
    if (tokenizer && !m.gguf) { /* a tokenizer.json that does not load is an error, not "tokenizer.json" */
        rf_tokenizer *tk = rf_tok_load(dir);
        if (!tk) {
            rf_print_error();
            rf_model_free(&m);
            return 1;
        }
        rf_tok_free(tk);
    }
    if (a.json) {
        json_t *doc = info_json(&m, dir, tokenizer, bytes, t_load);
        if (do_verify) {
            double t1 = rf_now();
            if (verify(&m)) {
                rf_print_error();
                json_decref(doc);
                rf_model_free(&m);
                return 1;
            }
            json_object_set_new(doc, "verify", json_pack("{s:b, s:f, s:f}", "finite", 1, "seconds", rf_now() - t1,
                                                         "peak_rss_mb", rf_peak_rss() / 1e6));
        }
        char *js = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(6));
        printf("%s\n", js);
        free(js);
        json_decref(doc);
        rf_model_free(&m);
        return 0;
    }
    printf("model      %s\n", dir);
    for (int k = 0; k < m.n_files; k++) {
        const char *base = strrchr(m.files[k].path, '/');
        /* many shards: the first, the last and a count */
        if (m.n_files <= 4 || k == 0 || k == m.n_files - 1)
            printf("file       %s  (%.1f MB, %d tensors)\n", base ? base + 1 : m.files[k].path,
                   m.files[k].map_size / 1e6, m.files[k].n_tensors);
        else if (k == 1)
            printf("file       ... %d more shards ...\n", m.n_files - 2);
    }
    if (m.gguf) {
        const char *base = strrchr(m.gguf->path, '/');
        printf("file       %s  (%.1f MB, GGUF v%u, %d tensors, %d metadata keys)\n",
               base ? base + 1 : m.gguf->path, m.gguf->map_size / 1e6, m.gguf->version,
               m.gguf->n_tensors, m.gguf->n_kv);
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
    /* the tensors by type: "109 Q4_K, 19 Q6_K, 73 F32; 4.95 bits per weight" */
    type_counts tc;
    count_types(&m, &tc);
    printf("tensors    ");
    for (int t = 0, first = 1; t < RF_DTYPE_COUNT; t++)
        if (tc.n[t]) printf("%s%d %s", first ? "" : ", ", tc.n[t], rf_dtype_name((rf_dtype)t)), first = 0;
    printf("; %.2f bits per weight\n", bits_per_weight(&tc));
    printf("tokenizer  %s\n", !tokenizer ? "(none)" : m.gguf ? "GGUF metadata (tokenizer.ggml.*)" : "tokenizer.json");
    printf("load       %.1f ms, peak RSS %.1f MB\n", t_load * 1e3, rf_peak_rss() / 1e6);
    /* the kernels' instruction-set tier (kernels/cpu.h), and why when it
     * is not what REFUSION_CPU asked for */
    printf("cpu tier   %s (this CPU: %s)%s%s\n", rf_cpu_tier_name(), rf_cpu_tier_str(rf_cpu_tier_detected()),
           cpu_note()[0] ? "; " : "", cpu_note());
    /* the panel kernels' prefetch level (kernels.h), after the tune cache */
    const int l2 = rf_matmul_prefetch_l2();
    if (l2) printf("prefetch   into L2 for calls of up to %d tokens, into L1 above\n", l2);
    else printf("prefetch   into L1 at every width\n");
    const int sp = rf_matmul_stream_panels();
    const char *spe = rf_env_stream_panels();
    const int sp_bad = spe && rf_stream_panels_parse(spe) < 0;
    if (sp) printf("streams    at most %d weight panel%s per tile", sp, sp > 1 ? "s" : "");
    else printf("streams    the kernels' own panels per tile");
    printf("%s\n", sp_bad ? " (REFUSION_STREAM_PANELS not 0, 1, 2 or 4: ignored)" : "");
    printf("tune cache %s\n", rf_tune_cache_state());
    /* the adaptive rolling slot's call costs (model/tune.h): cached for
     * this model, tier and the default thread count, or timed at its start */
    float cost[RF_TUNE_MAX_COST];
    const int threads = omp_get_max_threads();
    const int n_cost = rf_tune_cache_call_cost(rf_call_cost_key(&m, threads), cost);
    if (n_cost >= 16)
        printf("call costs the tune cache's for %d threads: c(8) %.2f, c(16) %.2f of a 1-token call\n", threads,
               cost[7], cost[15]);
    else if (n_cost)
        printf("call costs the tune cache's for %d threads: c(%d) %.2f of a 1-token call\n", threads, n_cost,
               cost[n_cost - 1]);
    else
        printf("call costs none cached for %d threads (timed when an adaptive rolling slot starts; `refusion tune`)\n",
               threads);
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
