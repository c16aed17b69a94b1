/* trainer.c - the training loop: model + data + objective + AdamW, with
 * gradient accumulation, periodic and final checkpoints, --resume that
 * continues bit for bit, Ctrl-C that saves and exits cleanly, a progress bar
 * on stderr, a CSV log of every step and a gnuplot loss curve at the end.
 *
 * Reproducibility: everything random flows from --seed through two streams:
 * the data order (a fresh permutation per epoch, derived from seed and epoch
 * number) and the masking RNG, whose state is saved with the optimizer. A
 * resumed run therefore draws the same batches and masks as an uninterrupted
 * one; with the same thread count the arithmetic is identical too. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "train/train.h"

void rf_train_opts_default(rf_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->obj = RF_OBJ_REFUSION;
    o->batch = 8;
    o->seq_len = 512;
    o->accum = 1;
    o->epochs = 1.0;
    rf_optcfg_default(&o->opt);
    o->seed = 1;
    o->init_std = 0.02f;
    o->log_every = 10;
    o->plot = 1;
}

/* ---- Ctrl-C -------------------------------------------------------------------- */

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

/* ---- data order ------------------------------------------------------------------ */

static void epoch_perm(int *perm, int n, uint64_t seed, long epoch) {
    rf_rng r;
    rf_rng_seed(&r, seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch + 1);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rf_rng_below(&r, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---- CSV log ----------------------------------------------------------------------- */

static const char *CSV_HEADER = "step,lr,loss,ar_loss,mdm_loss,tokens_per_s,elapsed,grad_norm\n";

/* Open out/log.csv for appending. A fresh run starts it over; a resumed run
 * keeps the rows up to the resumed step (later rows belong to the lost part
 * of the interrupted run). */
static FILE *open_log(const char *path, long keep_upto, int resume) {
    if (resume) {
        size_t n;
        char *old = rf_read_file(path, &n);
        if (old) {
            size_t cap = n + strlen(CSV_HEADER) + 1, len = 0;
            char *kept = rf_malloc(cap);
            len += (size_t)sprintf(kept, "%s", CSV_HEADER);
            char *save = NULL;
            for (char *line = strtok_r(old, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                long s;
                if (sscanf(line, "%ld,", &s) == 1 && s <= keep_upto)
                    len += (size_t)sprintf(kept + len, "%s\n", line);
            }
            int rc = rf_write_file_atomic(path, kept, len);
            free(kept);
            free(old);
            if (rc) return NULL;
            return fopen(path, "a");
        }
    }
    if (rf_write_file_atomic(path, CSV_HEADER, strlen(CSV_HEADER))) return NULL;
    return fopen(path, "a");
}

/* ---- gnuplot --------------------------------------------------------------------- */

static void plot_loss(const char *dir, int quiet) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "refusion: warning: gnuplot not found, no loss plot\n");
        return;
    }
    char *csv = rf_path_join(dir, "log.csv"), *script = rf_path_join(dir, "loss.gp.tmp");
    const char *terms[2][3] = {{"pngcairo size 1000,600", "loss.png", "png"},
                               {"svg size 1000,600", "loss.svg", "svg"}};
    for (int t = 0; t < 2; t++) {
        char *outp = rf_path_join(dir, terms[t][1]);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", outp);
        FILE *f = fopen(script, "w");
        if (!f) break;
        fprintf(f,
                "set terminal %s\nset output '%s'\nset datafile separator ','\n"
                "set key autotitle columnhead\nset xlabel 'step'\nset ylabel 'loss'\nset grid\n"
                "set title 'training loss'\n"
                "plot '%s' using 1:3 with lines lw 2 title 'loss', "
                "'' using 1:4 with lines title 'AR part', '' using 1:5 with lines title 'MDM part'\n",
                terms[t][0], tmp, csv);
        fclose(f);
        char cmd[8800];
        snprintf(cmd, sizeof cmd, "gnuplot '%s' >/dev/null 2>&1", script);
        int ok = system(cmd) == 0 && access(tmp, F_OK) == 0 && rename(tmp, outp) == 0;
        if (!ok) unlink(tmp);
        if (ok && !quiet) fprintf(stderr, "loss curve: %s\n", outp);
        free(outp);
        if (ok) break;
        if (t == 1) fprintf(stderr, "refusion: warning: gnuplot failed, no loss plot\n");
    }
    unlink(script);
    free(csv);
    free(script);
}

/* ---- progress ---------------------------------------------------------------------- */

static void fmt_time(char *buf, size_t n, double s) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

static void progress(int tty, long step, long total, const rf_tloss *l, float lr, double tps,
                     double eta, int final) {
    char e[32];
    fmt_time(e, sizeof e, eta);
    if (tty) {
        int width = 24, fill = (int)((double)width * step / (total ? total : 1));
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] step %ld/%ld  loss %.4f (ar %.4f mdm %.4f)  lr %.2e  %.0f tok/s  ETA %s \033[K%s",
                bar, step, total, l->loss, l->ar, l->mdm, lr, tps, e, final ? "\n" : "");
    } else {
        fprintf(stderr, "step %ld/%ld  loss %.4f (ar %.4f mdm %.4f)  lr %.2e  %.0f tok/s  ETA %s\n",
                step, total, l->loss, l->ar, l->mdm, lr, tps, e);
    }
}

/* ---- setup ------------------------------------------------------------------------- */

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* The tokenizer's special ids go into the config so the checkpoint is
 * self-describing (mask_token_id in config.json). */
static int bind_tokenizer(rf_config *c, const rf_tokenizer *tok, int new_model) {
    int tv = rf_tok_vocab_size(tok);
    if (new_model) c->vocab_size = tv;
    if (tv > c->vocab_size)
        return rf_set_error("tokenizer has %d ids but the model's vocabulary is %d", tv,
                            c->vocab_size), -1;
    c->mask_id = rf_tok_mask_id(tok);
    c->eos_id = rf_tok_eos_id(tok);
    int bot = rf_tok_id(tok, "<|beginoftext|>");
    if (bot >= 0) c->bot_id = bot;
    return 0;
}

/* A micro-batch's activations against the machine, before rf_tacts_new
 * allocates them: per token it keeps at least 4 d + 3 q + 3 ffn floats per
 * layer, so `--batch 1000000` is one clear line instead of a 393 GB malloc. */
static int check_batch_memory(const rf_config *c, int64_t n_tok, const rf_train_opts *o) {
    int64_t per_tok = 4 * (int64_t)c->n_layers *
                      (4LL * c->hidden_size + 3LL * c->n_heads * c->head_dim + 3LL * c->intermediate_size);
    int64_t need;
    uint64_t have = rf_phys_mem();
    if (n_tok > INT32_MAX || rf_mul_i64(n_tok, per_tok, &need) || (have && (uint64_t)need > have)) {
        rf_set_error("--batch %d x --seq-len %d (%lld tokens per micro-batch) needs at least %.1f GB of "
                     "activations; this machine has %.1f GB (lower --batch, raise --accum)",
                     o->batch, o->seq_len, (long long)n_tok, (double)n_tok * per_tok / 1e9, have / 1e9);
        return -1;
    }
    return 0;
}

static int save_all(const rf_tmodel *m, const rf_train_opts *o, const char *tok_src,
                    rf_tstate *st, const rf_adamw *opt) {
    return rf_ckpt_save(m, o->out, tok_src, st, opt); /* all files as one set */
}

int rf_train_run(const rf_train_opts *o) {
    int rc = -1;
    rf_tokenizer *tok = NULL;
    rf_dataset data = {0};
    rf_tmodel m = {0};
    rf_adamw opt = {0};
    rf_tacts *acts = NULL;
    rf_tbatch batch = {0};
    FILE *log = NULL;
    int *perm = NULL, have_model = 0;
    const rf_example **mb = NULL;
    char *tmp = NULL;

    if (o->batch < 1 || o->seq_len < 2 || o->accum < 1)
        return rf_set_error("--batch, --seq-len and --accum must be positive"), -1;
    if (o->threads > 0) {
        omp_set_num_threads(o->threads);
        openblas_set_num_threads(o->threads);
    }

    /* an interrupted save in out is finished or undone before anything reads it */
    if (o->out && rf_ckpt_recover(o->out)) return -1;

    /* 1. tokenizer and config; nothing is written before the data is read */
    const char *src = o->resume ? o->out : o->init;
    const char *tok_src = o->tokenizer ? o->tokenizer : src;
    if (!tok_src) return rf_set_error("a new model needs --tokenizer"), -1;
    if (!(tok = rf_tok_load(tok_src))) goto done;
    rf_config cfg;
    if (src) {
        tmp = rf_path_join(src, "config.json");
        if (rf_config_load(&cfg, tmp)) goto done;
    } else if (file_exists(o->config ? o->config : "")) {
        if (rf_config_load(&cfg, o->config)) goto done;
    } else if (rf_config_preset(&cfg, o->config ? o->config : "tiny")) {
        goto done;
    }
    if (bind_tokenizer(&cfg, tok, !src)) goto done;
    if (o->seq_len > cfg.max_pos) {
        rf_set_error("--seq-len %d exceeds the model's context (max_position_embeddings %d)",
                     o->seq_len, cfg.max_pos);
        goto done;
    }

    /* 2. data */
    int n_skipped = 0;
    if (rf_dataset_load(&data, o->data, tok, o->seq_len, o->skip_long, &n_skipped)) goto done;
    if (n_skipped && !o->quiet)
        fprintf(stderr, "refusion: skipped %d examples longer than %d tokens\n", n_skipped,
                o->seq_len);

    /* 3. model and optimizer */
    rf_tmodel_init(&m, &cfg);
    have_model = 1;
    if (src) {
        if (rf_tmodel_load_weights(&m, src)) goto done;
    } else {
        rf_tmodel_randomize(&m, o->init_std, o->seed);
    }
    long per_step = (long)o->batch * o->accum;
    rf_optcfg oc = o->opt;
    oc.total = o->steps > 0 ? o->steps : (long)ceil(o->epochs * data.n / (double)per_step);
    if (oc.total < 1) oc.total = 1;
    rf_adamw_init(&opt, &oc, m.n_params);
    rf_tstate st = {0};
    rf_rng_seed(&st.rng, o->seed ^ 0x5eedULL);
    if (o->resume) {
        if (rf_tstate_load(o->out, &st, &opt)) goto done;
        if (st.params_hash != rf_hash_floats(m.params, m.n_params)) {
            rf_set_error("%s: optimizer.bin does not belong to model.safetensors (a save was "
                         "interrupted?)", o->out);
            goto done;
        }
    }

    /* 4. buffers: a micro-batch holds at most batch x seq_len tokens per
     * sequence an example becomes */
    rf_objcfg obj;
    rf_objcfg_default(&obj, o->obj, cfg.mask_id);
    if (o->n_slot_sizes > 0) {
        memcpy(obj.slot_sizes, o->slot_sizes, sizeof obj.slot_sizes);
        obj.n_slot_sizes = o->n_slot_sizes;
    }
    obj.mdm_pad = o->mdm_pad;
    obj.aux_ar = o->aux_ar;
    obj.mask_floor = o->mask_floor;
    if (check_batch_memory(&cfg, (int64_t)o->batch * o->seq_len * rf_objcfg_seqs_per_example(&obj), o))
        goto done;
    acts = rf_tacts_new(&cfg, o->batch * o->seq_len * rf_objcfg_seqs_per_example(&obj));
    perm = rf_malloc(sizeof(int) * (size_t)data.n);
    mb = rf_malloc(sizeof(*mb) * (size_t)o->batch);
    epoch_perm(perm, data.n, o->seed, st.epoch);
    for (int i = 0; i < data.n; i++)
        if (data.ex[i].n_prompt + rf_objcfg_resp_len(&obj, &data.ex[i]) > o->seq_len) {
            rf_set_error("%s: record %d: prompt + response padded to --mdm-pad %d is longer than "
                         "--seq-len %d", o->data, i, o->mdm_pad, o->seq_len);
            goto done;
        }

    if (rf_mkdir_p(o->out)) goto done;
    free(tmp);
    tmp = rf_path_join(o->out, "log.csv");
    if (!(log = open_log(tmp, st.step, o->resume))) {
        rf_set_error("%s: cannot write the log", tmp);
        goto done;
    }
    if (!o->quiet)
        fprintf(stderr,
                "train %s: %.2fM params, %d examples (%ld tokens), %ld steps of %d x %d "
                "examples, %zu MB activations%s\n",
                rf_objective_name(o->obj), m.n_params / 1e6, data.n, data.n_tokens, oc.total,
                o->batch, o->accum, rf_tacts_bytes(acts) >> 20,
                o->resume ? " (resumed)" : "");

    g_stop = 0;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_sa);

    int tty = isatty(2) && !o->quiet;
    double t_run = rf_now(), tokens_run = 0, t_drawn = 0;
    long step0 = st.step, last_saved = o->resume ? st.step : -1, n_clipped = 0;
    while (st.step < oc.total) {
        double t0 = rf_now();
        memset(m.grads, 0, m.n_params * sizeof(float));
        rf_tloss sum = {0};
        long ntok = 0;
        for (int a = 0; a < o->accum; a++) {
            for (int i = 0; i < o->batch; i++) {
                if (st.cursor >= data.n) {
                    st.epoch++;
                    st.cursor = 0;
                    epoch_perm(perm, data.n, o->seed, st.epoch);
                }
                mb[i] = &data.ex[perm[st.cursor++]];
            }
            rf_tbatch_build(&batch, &obj, mb, o->batch, 1.0f / (float)o->accum, &st.rng);
            rf_tloss l;
            if (rf_train_step_fb(&m, acts, &batch, 1, &l)) goto restore;
            sum.loss += l.loss, sum.ar += l.ar, sum.mdm += l.mdm;
            ntok += batch.n_tok;
        }
        float lr = rf_lr_at(&oc, st.step);
        double gnorm = rf_adamw_step(&opt, &m, lr);
        n_clipped += oc.clip > 0 && gnorm > oc.clip;
        st.step++;
        double dt = rf_now() - t0;
        st.elapsed += dt;
        st.tokens_seen += (double)ntok;
        tokens_run += (double)ntok;
        double run_time = rf_now() - t_run, tps = tokens_run / (run_time > 0 ? run_time : 1e-9);
        if (!isfinite(sum.loss)) {
            rf_set_error("loss is %g at step %ld (lower --lr?)", sum.loss, st.step);
            goto restore;
        }
        fprintf(log, "%ld,%.6e,%.6f,%.6f,%.6f,%.1f,%.3f,%.6f\n", st.step, lr, sum.loss, sum.ar,
                sum.mdm, (double)ntok / dt, st.elapsed, gnorm);
        fflush(log);
        double eta = run_time / (double)(st.step - step0) * (double)(oc.total - st.step);
        int last = st.step == oc.total || st.step == o->stop_at || g_stop;
        if (tty && (last || rf_now() - t_drawn >= 0.1)) { /* redraw at most 10x a second */
            progress(1, st.step, oc.total, &sum, lr, tps, eta, last);
            t_drawn = rf_now();
        }
        else if (!o->quiet && (st.step % (o->log_every > 0 ? o->log_every : 10) == 0 ||
                               st.step == 1 || last))
            progress(0, st.step, oc.total, &sum, lr, tps, eta, last);
        if ((o->save_every > 0 && st.step % o->save_every == 0) || last) {
            if (save_all(&m, o, tok_src, &st, &opt)) goto restore;
            last_saved = st.step;
        }
        if (g_stop) {
            fprintf(stderr, "refusion: interrupted: saved step %ld to %s (continue with --resume)\n",
                    st.step, o->out);
            break;
        }
        if (st.step == o->stop_at) break;
    }
    if (last_saved != st.step && save_all(&m, o, tok_src, &st, &opt)) goto restore;
    if (!o->quiet)
        fprintf(stderr, "saved %s (step %ld, %.0f tokens seen; %ld of %ld steps of this run had "
                "their gradient clipped)\n", o->out, st.step, st.tokens_seen, n_clipped,
                st.step - step0);
    fclose(log);
    log = NULL;
    if (o->plot) plot_loss(o->out, o->quiet);
    rc = 0;
restore:
    sigaction(SIGINT, &old_sa, NULL);
done:
    if (log) fclose(log);
    free(tmp);
    free(perm);
    free(mb);
    rf_tbatch_free(&batch);
    rf_tacts_free(acts);
    if (opt.m) rf_adamw_free(&opt);
    if (have_model) rf_tmodel_free(&m);
    rf_dataset_free(&data);
    rf_tok_free(tok);
    return rc;
}
