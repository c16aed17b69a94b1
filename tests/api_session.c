/* api_session.c - the public API's sessions (include/refusion.h): answers
 * through a session equal the decoders' own (ReFusion, AR, MDM; requests of
 * other sizes in between, so reused buffers hold stale data); after one
 * request of each shape, 100 more allocate no KV cache or run state
 * (the session's allocation count) and do not grow the RSS; streaming,
 * cancel, argument errors, and rf_die caught as an error return. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "check.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "model/model.h"
#include "refusion.h"
#include "util/util.h"

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* the decoders called directly (no session attached) */
static int direct(const rf_model *m, const int *prompt, int n, const rf_params *p, int *out) {
    rf_params g = *p; /* the same struct; ws NULL: the decoder's own buffers */
    g.ws = NULL;
    rf_gen_result r;
    int rc;
    if (p->method == RF_METHOD_AR) rc = rf_generate_ar(m, prompt, n, &g, &r);
    else if (p->method == RF_METHOD_MDM) {
        rf_mdm_params mp;
        rf_mdm_params_default(&mp, &g);
        rc = rf_generate_mdm(m, prompt, n, &g, &mp, &r);
    } else rc = rf_generate_refusion(m, prompt, n, &g, &r);
    if (rc) return -1;
    int k = r.n_ids;
    memcpy(out, r.ids, (size_t)k * sizeof(int));
    rf_gen_result_free(&r);
    return k;
}

typedef struct {
    int32_t ids[256];
    int n;
} sink;
static void collect(const int32_t *ids, int n, void *user) {
    sink *s = user;
    for (int i = 0; i < n && s->n < 256; i++) s->ids[s->n++] = ids[i];
}

int main(void) {
    char dir[] = "/tmp/rf_api_session.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    rf_config c;
    rf_config_preset(&c, "tiny");
    c.max_pos = 512;
    CHECK(rf_model_write_random(&c, dir, RF_F32, 0, 0.5f, 11) == 0, "write model: %s", rf_last_error());

    refusion_model *model = rf_model_open(dir);
    CHECK(model != NULL, "open: %s", rf_last_error());
    if (!model) return check_summary("api_session");
    rf_model ref;
    CHECK(rf_model_load(&ref, dir) == 0, "load");
    CHECK(rf_model_n_vocab(model) == c.vocab_size && rf_model_n_ctx(model) == 512, "model info");
    CHECK(rf_tokenizer_open(model) == NULL && strstr(rf_last_error(), "no tokenizer"),
          "no tokenizer: %s", rf_last_error());
    CHECK(rf_model_open("/nonexistent/model") == NULL && strstr(rf_last_error(), "/nonexistent/model"),
          "missing model: %s", rf_last_error());

    int32_t prompt[40];
    int iprompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = iprompt[i] = (i * 37 + 5) % (c.vocab_size - 2);
    refusion_session *s = rf_session_new(model);
    CHECK(s != NULL && rf_session_bytes(s) == 0, "new session holds nothing yet");

    /* one request per (method, size), sizes going up and down */
    rf_params cases[8];
    int n_cases = 0;
    for (int m = 0; m < 3; m++)
        for (int big = 0; big < 2; big++) {
            rf_params p = rf_params_default();
            p.method = (rf_method)m;
            p.gen_length = big ? 24 : 8;
            p.n_blocks = big ? 2 : 1;
            p.slot_size = big ? 4 : 2;
            p.ar_correct = p.ar_check_first = big;
            p.temperature = m == 0 && big ? 0.7f : 0.0f;
            p.seed = 5;
            cases[n_cases++] = p;
        }
    int want[8][64], n_want[8];
    for (int i = 0; i < n_cases; i++) n_want[i] = direct(&ref, iprompt, 40 - 3 * i, &cases[i], want[i]);

    int32_t out[64];
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < n_cases; k++) {
            int i = round ? n_cases - 1 - k : k; /* the second round backwards */
            sink st = {{0}, 0};
            rf_params p = cases[i];
            p.on_tokens = collect;
            p.user = &st;
            rf_stats stats;
            int n = rf_generate(s, prompt, 40 - 3 * i, &p, out, 64, &stats);
            int same = n == n_want[i] && n > 0;
            for (int j = 0; same && j < n; j++) same = out[j] == want[i][j];
            CHECK(same, "round %d case %d (method %d): session answer differs from the decoder's (%d vs %d ids)",
                  round, i, cases[i].method, n, n_want[i]);
            CHECK(st.n == n && !memcmp(st.ids, out, (size_t)n * sizeof *out), "case %d: streamed %d of %d", i, st.n, n);
            CHECK(stats.n_tokens == n && stats.n_calls > 0, "case %d stats", i);
        }
    size_t allocs = rf_session_allocs(s), bytes = rf_session_bytes(s);
    CHECK(allocs > 0 && bytes > 0, "the session holds buffers after use (%zu allocs, %zu bytes)", allocs, bytes);

    /* 100 more requests of the shapes seen: no buffer allocation, flat RSS */
    long rss0 = rss_kb();
    int bad = 0;
    for (int r = 0; r < 100; r++) {
        int i = r % n_cases;
        int n = rf_generate(s, prompt, 40 - 3 * i, &cases[i], out, 64, NULL);
        bad += n != n_want[i];
    }
    long rss1 = rss_kb();
    CHECK(bad == 0, "%d of 100 repeated answers differ", bad);
    CHECK(rf_session_allocs(s) == allocs, "100 requests allocated %zu buffers",
          rf_session_allocs(s) - allocs);
    CHECK(rf_session_bytes(s) == bytes, "session bytes changed %zu -> %zu", bytes, rf_session_bytes(s));
#if !defined(__SANITIZE_ADDRESS__) /* ASan's quarantine keeps freed memory resident */
    CHECK(rss1 - rss0 < 2048, "RSS grew %ld kB over 100 requests", rss1 - rss0);
#endif
    printf("session: %zu buffer allocations, %zu bytes held; RSS %ld -> %ld kB over 100 requests\n",
           allocs, bytes, rss0, rss1);

    /* a larger request grows the buffers once, and still answers right */
    rf_params big = rf_params_default();
    big.gen_length = 64;
    big.n_blocks = 4;
    int wbig[128], nbig = direct(&ref, iprompt, 40, &big, wbig);
    int n = rf_generate(s, prompt, 40, &big, out, 64, NULL);
    CHECK(n == nbig && !memcmp(out, wbig, (size_t)(n < 64 ? n : 64) * sizeof(int)), "larger request");
    CHECK(rf_session_allocs(s) > allocs, "a larger request grows the buffers");

    /* cancel, bad arguments */
    volatile int flag = 1;
    rf_params p = rf_params_default();
    p.gen_length = 8;
    p.cancel = &flag;
    CHECK(rf_generate(s, prompt, 10, &p, out, 64, NULL) == RF_ERR_CANCELLED && strstr(rf_last_error(), "cancel"),
          "cancel: %s", rf_last_error());
    p = rf_params_default();
    p.slot_size = 0;
    CHECK(rf_generate(s, prompt, 10, &p, out, 64, NULL) == RF_ERR_INVALID && strstr(rf_last_error(), "slot"),
          "slot_size 0: %s", rf_last_error());
    p = rf_params_default();
    p.method = (rf_method)7;
    CHECK(rf_generate(s, prompt, 10, &p, out, 64, NULL) == RF_ERR_INVALID, "unknown method");
    /* the checks that need no model call: rf_params_check and the memory estimate make them too */
    CHECK(rf_params_check(model, prompt, 10, &p) == RF_ERR_INVALID &&
              strstr(rf_last_error(), "method"), "rf_params_check: unknown method: %s", rf_last_error());
    CHECK(rf_generate_bytes(model, 10, &p) == RF_ERR_INVALID, "rf_generate_bytes: unknown method");
    p = rf_params_default();
    p.eos_id = -3;
    CHECK(rf_generate_bytes(model, 10, &p) == RF_ERR_INVALID && strstr(rf_last_error(), "eos_id"),
          "rf_generate_bytes: eos_id -3: %s", rf_last_error());
    prompt[3] = c.vocab_size + 5;
    p = rf_params_default();
    CHECK(rf_generate(s, prompt, 10, &p, out, 64, NULL) == RF_ERR_INVALID && strstr(rf_last_error(), "vocab"),
          "token outside the vocabulary: %s", rf_last_error());
    /* the answer is cut to cap, its length still returned */
    prompt[3] = 7;
    p = rf_params_default();
    p.gen_length = 16;
    p.n_blocks = 1;
    int full = rf_generate(s, prompt, 10, &p, out, 64, NULL);
    int32_t small[4] = {-1, -1, -1, -1};
    CHECK(rf_generate(s, prompt, 10, &p, small, 2, NULL) == full && small[2] == -1 && small[0] == out[0],
          "cap 2");

    /* rf_die under a catch point is an error return, not an exit */
    rf_catch cp;
    volatile int caught = 0;
    rf_catch_push(&cp);
    if (setjmp(cp.jb) == 0) rf_die("boom %d", 7);
    else caught = 1;
    rf_catch_pop(&cp);
    CHECK(caught && !strcmp(rf_last_error(), "boom 7"), "rf_die caught: %s", rf_last_error());

    rf_session_free(s);
    rf_model_close(model);
    rf_model_free(&ref);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return check_summary("api_session");
}
