/* train_loop.c - the training loop end to end through rf_train_run, on a
 * small real task (reverse a string of digits) with a BPE tokenizer trained
 * here:
 *   - the loss goes down within a test-sized run, for each objective;
 *   - 6 steps straight == 3 steps, stop, --resume 3 more: identical weights,
 *     optimizer state and logged losses (gradient accumulation and an epoch
 *     boundary inside the run);
 *   - a resume against a mismatched optimizer.bin is refused;
 *   - the saved checkpoint loads in the engine (rf_model_load) and its
 *     reference forward gives the training forward's logits;
 *   - --init continues from a checkpoint;
 *   - malformed data files fail with one message naming file and record,
 *     and nothing is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

static char T[256]; /* temp dir */

/* T/name; options keep pointers to these, so they live until free_paths() */
static char *g_paths[512];
static int g_n_paths;
static char *path(const char *name) {
    char *p = rf_path_join(T, name);
    if (g_n_paths < (int)(sizeof g_paths / sizeof g_paths[0])) g_paths[g_n_paths++] = p;
    return p;
}
static void free_paths(void) {
    while (g_n_paths > 0) free(g_paths[--g_n_paths]);
}

static void write_text(const char *p, const char *s) {
    FILE *f = fopen(p, "w");
    fputs(s, f);
    fclose(f);
}

/* n records "reverse DIGITS" -> reversed digits */
static void make_data(const char *p, int n, uint64_t seed) {
    rf_rng r;
    rf_rng_seed(&r, seed);
    FILE *f = fopen(p, "w");
    fputs("[\n", f);
    for (int i = 0; i < n; i++) {
        char s[16], rev[16];
        int len = 3 + (int)rf_rng_below(&r, 6);
        for (int j = 0; j < len; j++) s[j] = (char)('0' + rf_rng_below(&r, 10));
        for (int j = 0; j < len; j++) rev[j] = s[len - 1 - j];
        s[len] = rev[len] = 0;
        fprintf(f, "  {\"query\": \"reverse %s\", \"response\": \"%s\"}%s\n", s, rev,
                i + 1 < n ? "," : "");
    }
    fputs("]\n", f);
    fclose(f);
}

static void base_opts(rf_train_opts *o, const char *data, const char *out) {
    rf_train_opts_default(o);
    o->data = data;
    o->out = out;
    o->tokenizer = path("tok");
    o->config = "tiny";
    o->batch = 8;
    o->seq_len = 48;
    o->opt.lr = 3e-3f;
    o->opt.warmup = 5;
    o->threads = 1;
    o->seed = 3;
}

/* log.csv rows -> arrays; returns the number of steps */
static int read_log(const char *dir, double *loss, double *gnorm, int cap) {
    char p[600];
    snprintf(p, sizeof p, "%s/log.csv", dir);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        long step;
        double lr, l, ar, mdm, tps, el, gn;
        if (sscanf(line, "%ld,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &step, &lr, &l, &ar, &mdm, &tps, &el,
                   &gn) != 8 || step != n + 1)
            break;
        loss[n] = l;
        gnorm[n] = gn;
        n++;
    }
    fclose(f);
    return n;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = rf_read_file(a, &na), *y = rf_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x), free(y);
    return same;
}

static void loss_goes_down(void) {
    const rf_objective objs[3] = {RF_OBJ_REFUSION, RF_OBJ_AR, RF_OBJ_MDM};
    for (int k = 0; k < 3; k++) {
        rf_train_opts o;
        char out[64];
        snprintf(out, sizeof out, "down_%s", rf_objective_name(objs[k]));
        base_opts(&o, path("train.json"), path(out));
        o.obj = objs[k];
        o.steps = 80;
        o.batch = 16;
        o.slot_sizes[0] = 4, o.slot_sizes[1] = 8, o.n_slot_sizes = 2;
        double t0 = rf_now();
        int rc = rf_train_run(&o, NULL, NULL);
        CHECK(rc == 0, "%s: %s", out, rf_last_error());
        double loss[200], gn[200];
        int n = read_log(path(out), loss, gn, 200);
        CHECK(n == 80, "%s: %d log rows", out, n);
        if (n < 80) continue;
        double first = 0, last = 0;
        for (int i = 0; i < 10; i++) first += loss[i] / 10, last += loss[n - 10 + i] / 10;
        /* the MDM losses are noisy (1/p weights): compare 10-step means */
        CHECK(last < 0.6 * first, "%s: loss %.3f -> %.3f did not go down enough", out, first, last);
        printf("%-8s loss (mean of 10 steps) %.3f -> %.3f in %.1f s\n", rf_objective_name(objs[k]),
               first, last, rf_now() - t0);
    }
}

static void resume_bit_for_bit(void) {
    rf_train_opts o;
    /* 20 examples, 4 x 2 per step: epoch boundaries inside steps 3 and 5 */
    base_opts(&o, path("small.json"), path("straight"));
    o.batch = 4;
    o.accum = 2;
    o.steps = 6;
    o.opt.warmup = 2;
    CHECK(rf_train_run(&o, NULL, NULL) == 0, "straight: %s", rf_last_error());
    base_opts(&o, path("small.json"), path("split"));
    o.batch = 4;
    o.accum = 2;
    o.steps = 6;
    o.opt.warmup = 2;
    o.stop_at = 3;
    CHECK(rf_train_run(&o, NULL, NULL) == 0, "first half: %s", rf_last_error());
    double l1[10], g1[10], l2[10], g2[10];
    CHECK(read_log(path("split"), l2, g2, 10) == 3, "stopped after 3 steps");
    /* keep the step-3 state to check the mismatch detection below */
    size_t n;
    char *opt3 = rf_read_file(path("split/optimizer.bin"), &n);
    o.stop_at = 0;
    o.resume = 1;
    CHECK(rf_train_run(&o, NULL, NULL) == 0, "resume: %s", rf_last_error());
    CHECK(same_file(path("straight/model.safetensors"), path("split/model.safetensors")),
          "resumed weights differ from the straight run");
    { /* the whole trainer state but the wall-clock time */
        rf_config c;
        rf_config_load(&c, path("straight/config.json"));
        rf_tmodel m;
        rf_tmodel_init(&m, &c);
        rf_adamw a1, a2;
        rf_tstate s1, s2;
        rf_adamw_init(&a1, &o.opt, m.n_params);
        rf_adamw_init(&a2, &o.opt, m.n_params);
        CHECK(rf_tstate_load(path("straight"), &s1, &a1) == 0 &&
                  rf_tstate_load(path("split"), &s2, &a2) == 0,
              "state load: %s", rf_last_error());
        CHECK(s1.step == 6 && s2.step == 6 && s1.epoch == s2.epoch && s1.cursor == s2.cursor &&
                  !memcmp(&s1.rng, &s2.rng, sizeof s1.rng) && s1.tokens_seen == s2.tokens_seen &&
                  s1.params_hash == s2.params_hash,
              "resumed trainer state differs");
        CHECK(s1.epoch == 2 && s1.cursor == 8, "data cursor epoch %ld cursor %ld", s1.epoch,
              s1.cursor);
        CHECK(!memcmp(a1.m, a2.m, m.n_params * 4) && !memcmp(a1.v, a2.v, m.n_params * 4),
              "resumed AdamW moments differ");
        rf_adamw_free(&a1), rf_adamw_free(&a2);
        rf_tmodel_free(&m);
    }
    int n1 = read_log(path("straight"), l1, g1, 10), n2 = read_log(path("split"), l2, g2, 10);
    CHECK(n1 == 6 && n2 == 6, "log rows %d / %d", n1, n2);
    int same = n1 == n2;
    for (int i = 0; i < n1 && i < n2; i++) same &= l1[i] == l2[i] && g1[i] == g2[i];
    CHECK(same, "logged losses differ between straight and resumed runs");

    /* an optimizer.bin of step 3 next to step-6 weights: refused */
    rf_write_file_atomic(path("split/optimizer.bin"), opt3, n);
    free(opt3);
    int rc = rf_train_run(&o, NULL, NULL);
    CHECK(rc == -1 && strstr(rf_last_error(), "optimizer.bin does not belong"),
          "mismatched optimizer.bin accepted: %s", rc ? rf_last_error() : "rc 0");
}

/* The checkpoint in the engine: rf_model_load + rf_forward_reference vs the
 * training forward on a ReFusion-style sequence (permuted position ids). */
static void engine_loads(void) {
    const char *dir = path("down_refusion");
    rf_model em;
    CHECK(rf_model_load(&em, dir) == 0, "engine cannot load: %s", rf_last_error());
    rf_config c;
    char cp[600];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    CHECK(rf_config_load(&c, cp) == 0, "config: %s", rf_last_error());
    rf_tokenizer *tok = rf_tok_load(dir);
    CHECK(tok != NULL, "tokenizer copied into the checkpoint: %s", rf_last_error());
    if (tok) {
        CHECK(c.mask_id == rf_tok_mask_id(tok), "config mask id %d vs tokenizer %d", c.mask_id,
              rf_tok_mask_id(tok));
        rf_tok_free(tok);
    }
    rf_tmodel m;
    rf_tmodel_init(&m, &c);
    CHECK(rf_tmodel_load_weights(&m, dir) == 0, "load weights: %s", rf_last_error());
    int n = 12, tokens[12], pos[12] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7};
    for (int i = 0; i < n; i++) tokens[i] = (i * 37 + 5) % c.vocab_size;
    for (int bidir = 0; bidir < 2; bidir++) {
        int off[2] = {0, n}, tgt[12];
        float w[12];
        uint8_t kind[12];
        for (int i = 0; i < n; i++) tgt[i] = -1, w[i] = 0, kind[i] = 0;
        rf_tbatch b = {.n_seq = 1, .n_tok = n, .bidirectional = bidir, .off = off,
                       .tokens = tokens, .pos = pos, .target = tgt, .weight = w, .kind = kind};
        rf_tacts *a = rf_tacts_new(&c, n);
        float *l1 = malloc(sizeof(float) * n * c.vocab_size);
        float *l2 = malloc(sizeof(float) * n * c.vocab_size);
        CHECK(rf_train_logits(&m, a, &b, l1) == 0, "train logits");
        CHECK(rf_forward_reference(&em, n, tokens, pos, bidir, l2) == 0, "engine reference: %s",
              rf_last_error());
        double e = check_rel_err(l1, l2, (size_t)n * c.vocab_size);
        CHECK(e < 1e-4, "bidir=%d: training vs engine logits rel err %.2e", bidir, e);
        printf("checkpoint in the engine (bidir=%d): logits rel err %.1e\n", bidir, e);
        free(l1), free(l2);
        rf_tacts_free(a);
    }
    rf_tmodel_free(&m);
    rf_model_free(&em);
}

static void init_from_checkpoint(void) {
    rf_train_opts o;
    base_opts(&o, path("train.json"), path("cont"));
    o.init = path("down_ar");
    o.tokenizer = NULL; /* the checkpoint's own */
    o.config = NULL;
    o.obj = RF_OBJ_AR;
    o.steps = 3;
    o.batch = 16;
    CHECK(rf_train_run(&o, NULL, NULL) == 0, "--init: %s", rf_last_error());
    double la[100], ga[100], lb[10], gb[10];
    int na = read_log(path("down_ar"), la, ga, 100), nb = read_log(path("cont"), lb, gb, 10);
    CHECK(nb == 3 && na == 80 && lb[0] < 0.5 * la[0],
          "--init did not start from the trained weights (%.3f vs scratch %.3f)", lb[0], la[0]);
}

static void bad_data(void) {
    struct {
        const char *name, *text, *want;
    } cases[] = {
        {"notjson.json", "this is not json\n", "notjson.json: not JSON"},
        {"broken.json", "[{\"query\": \"a\", \"response\": \"b\"},\n {\"query\": ", "broken.json: not valid JSON at line 2"},
        {"noresp.json", "[{\"query\": \"a\", \"response\": \"b\"}, {\"query\": \"c\"}]", "noresp.json: record 1: missing \"response\""},
        {"noquery.jsonl", "{\"query\": \"a\", \"response\": \"b\"}\n\n{\"response\": \"b\"}\n", "noquery.jsonl: line 3 (record 1): missing \"query\""},
        {"number.json", "[{\"query\": 5, \"response\": \"b\"}]", "number.json: record 0: \"query\" is not a string"},
        {"badline.jsonl", "{\"query\": \"a\", \"response\": \"b\"}\n{\"query\": \"a\",\n", "badline.jsonl: line 2 (record 1): not valid JSON"},
        {"long.json", "[{\"query\": \"a\", \"response\": \"b\"}, {\"query\": \"0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9\", \"response\": \"x\"}]", "long.json: record 1: "},
        {"empty.json", "[]", "no usable examples"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path(cases[i].name), cases[i].text);
        rf_train_opts o;
        base_opts(&o, path(cases[i].name), path("never"));
        int rc = rf_train_run(&o, NULL, NULL);
        CHECK(rc == -1, "%s accepted", cases[i].name);
        CHECK(strstr(rf_last_error(), cases[i].want) != NULL, "%s: message '%s' lacks '%s'",
              cases[i].name, rf_last_error(), cases[i].want);
        CHECK(!strchr(rf_last_error(), '\n'), "message has several lines");
        CHECK(access(path("never"), F_OK) != 0, "%s: output written despite the error",
              cases[i].name);
        if (i == 6) printf("too long: %s\n", rf_last_error());
    }
    /* --skip-long drops the long record instead */
    rf_train_opts o;
    base_opts(&o, path("long.json"), path("skip"));
    o.skip_long = 1;
    o.steps = 1;
    CHECK(rf_train_run(&o, NULL, NULL) == 0, "--skip-long: %s", rf_last_error());
}

int main(void) {
    snprintf(T, sizeof T, "/tmp/rf_train_loop.XXXXXX");
    if (!mkdtemp(T)) return 1;
    make_data(path("train.json"), 400, 1);
    make_data(path("small.json"), 20, 2);
    size_t n;
    char *text = rf_read_file(path("train.json"), &n);
    CHECK(rf_tok_train(text, n, 300, path("tok"), 0) == 0, "tokenizer: %s", rf_last_error());
    free(text);

    loss_goes_down();
    resume_bit_for_bit();
    engine_loads();
    init_from_checkpoint();
    bad_data();

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", T);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", T);
    free_paths();
    return check_summary("train_loop");
}
