/* tokenizer_train.c - the BPE trainer: its merges against a naive trainer
 * (recount every pair after every merge), the files it writes load back,
 * round-trip held-out text, compress frequent words, and are reproducible. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "refusion.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static const char *WORDS[] = {"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
                              "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
                              "they", "you", "were", "her", "she", "there", "been", "one", "all", "we", "their", "model",
                              "token", "diffusion", "slot", "mask", "answer", "question", "number", "sum", "three"};
#define NWORDS (int)(sizeof WORDS / sizeof WORDS[0])

/* Zipf-ish text with numbers, punctuation and a little CJK. */
static char *make_corpus(uint64_t seed, size_t bytes) {
    rf_rng r;
    rf_rng_seed(&r, seed);
    rf_buf b = {0};
    while (b.n < bytes) {
        if (rf_rng_uniform(&r) < 0.3) { /* a pseudo-word: syllables give many distinct pairs */
            static const char *syl[] = {"ka", "lo", "mi", "nu", "pe", "ra", "si", "tor", "ven", "xa", "zul", "qi",
                                        "bra", "chi", "dre", "fo", "gu", "hy", "jo", "wen"};
            for (int n = 1 + (int)rf_rng_below(&r, 4); n > 0; n--) rf_buf_puts(&b, syl[rf_rng_below(&r, 20)]);
        } else {
            int k = (int)(NWORDS * rf_rng_uniform(&r) * rf_rng_uniform(&r)); /* small k more often */
            rf_buf_puts(&b, WORDS[k]);
        }
        double x = rf_rng_uniform(&r);
        if (x < 0.05) rf_buf_puts(&b, ". ");
        else if (x < 0.08) rf_buf_puts(&b, ",\n");
        else if (x < 0.11) {
            char num[32];
            snprintf(num, sizeof num, " %d ", (int)rf_rng_below(&r, 1000));
            rf_buf_puts(&b, num);
        } else if (x < 0.12) rf_buf_puts(&b, " 扩散模型 ");
        else rf_buf_puts(&b, " ");
    }
    return rf_buf_cstr(&b);
}

/* ---- naive trainer: the same rule (most frequent pair, ties to the smaller
 * pair of ids), recounting all pairs of all word occurrences every step ---- */
typedef struct {
    int sym[64];
    int len;
} nword;
typedef struct {
    nword *w;
    int n, cap;
} nwords;

static void collect(const char *p, size_t n, void *ctx) {
    nwords *ws = ctx;
    if (n > 64) return; /* the corpus has no such words */
    if (ws->n == ws->cap) ws->w = realloc(ws->w, (size_t)(ws->cap = ws->cap ? 2 * ws->cap : 1024) * sizeof *ws->w);
    nword *w = &ws->w[ws->n++];
    for (size_t i = 0; i < n; i++) w->sym[i] = (unsigned char)p[i];
    w->len = (int)n;
}

static int naive_train(const char *text, int n_merges, int (*out)[2]) {
    nwords ws = {0};
    pcre2_code *re = rf_pretok_compile(RF_QWEN_PRETOK_PATTERN);
    rf_pretokenize(re, text, strlen(text), collect, &ws);
    pcre2_code_free(re);
    int ntok = 256, done = 0;
    static long cnt[1024][1024]; /* token ids stay below 1024 here */
    static char str[1024][160];   /* token bytes: a pair spelling a known token reuses its id */
    for (int b = 0; b < 256; b++) str[b][0] = (char)b, str[b][1] = 0;
    for (; done < n_merges; done++) {
        memset(cnt, 0, sizeof cnt);
        for (int i = 0; i < ws.n; i++)
            for (int k = 0; k + 1 < ws.w[i].len; k++) cnt[ws.w[i].sym[k]][ws.w[i].sym[k + 1]]++;
        long best = 1;
        int ba = -1, bb = -1;
        for (int a = 0; a < ntok; a++)
            for (int b = 0; b < ntok; b++)
                if (cnt[a][b] > best) best = cnt[a][b], ba = a, bb = b;
        if (ba < 0) break; /* no pair occurs twice */
        char cat[320];
        snprintf(cat, sizeof cat, "%s%s", str[ba], str[bb]);
        int c = -1;
        for (int k = 256; k < ntok && c < 0; k++)
            if (!strcmp(str[k], cat)) c = k;
        if (c < 0) memcpy(str[c = ntok++], cat, strlen(cat) + 1); /* words are <= 64 bytes */
        out[done][0] = ba, out[done][1] = bb;
        for (int i = 0; i < ws.n; i++) { /* merge left to right */
            nword *w = &ws.w[i];
            int k = 0;
            for (int j = 0; j < w->len;) {
                if (j + 1 < w->len && w->sym[j] == ba && w->sym[j + 1] == bb) w->sym[k++] = c, j += 2;
                else w->sym[k++] = w->sym[j++];
            }
            w->len = k;
        }
    }
    free(ws.w);
    return done;
}

static char *dir_file(const char *dir, const char *name) { return rf_path_join(dir, name); }

/* progress lines reach the log callback (rf_log_set), never stderr */
static int g_log_lines, g_log_merges;
static void count_log(rf_log_level level, const char *text, void *user) {
    g_log_lines++;
    if (level == RF_LOG_INFO && strstr(text, "merges") && user == &g_log_lines) g_log_merges++;
}

/* bytes written to fd 2 while training verbosely with the current callback */
static long stderr_bytes_while_training(const char *text, const char *dir) {
    fflush(stderr);
    FILE *cap = tmpfile();
    int saved = dup(2);
    dup2(fileno(cap), 2);
    int rc = rf_tok_train(text, strlen(text), 300, dir, 1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long n = -1;
    if (rc == 0 && fseek(cap, 0, SEEK_END) == 0) n = ftell(cap);
    fclose(cap);
    return n;
}

int main(void) {
    char dir1[] = "/tmp/rf_tok_train_XXXXXX", dir2[] = "/tmp/rf_tok_train_XXXXXX";
    if (!mkdtemp(dir1) || !mkdtemp(dir2)) rf_die("mkdtemp failed");

    /* 1. merges equal the naive trainer's (small corpus, 120 merges) */
    char *small = make_corpus(5, 20000);
    int n_naive = 120 + 256 + 7;
    CHECK(rf_tok_train(small, strlen(small), n_naive, dir1, 0) == 0, "train small: %s", rf_last_error());
    int(*ref)[2] = calloc(120, sizeof *ref);
    int nref = naive_train(small, 120, ref);
    char *tj = dir_file(dir1, "tokenizer.json");
    json_error_t je;
    json_t *root = json_load_file(tj, 0, &je);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    int same = (int)json_array_size(merges) == nref;
    for (int m = 0; same && m < nref; m++) {
        json_t *pr = json_array_get(merges, (size_t)m);
        int a = (int)json_integer_value(json_object_get(vocab, json_string_value(json_array_get(pr, 0))));
        int b = (int)json_integer_value(json_object_get(vocab, json_string_value(json_array_get(pr, 1))));
        same = a == ref[m][0] && b == ref[m][1];
        if (!same) fprintf(stderr, "merge %d: trainer (%d,%d), naive (%d,%d)\n", m, a, b, ref[m][0], ref[m][1]);
    }
    CHECK(same, "trainer merges (%zu) differ from the naive trainer's (%d)", json_array_size(merges), nref);
    json_decref(root);
    free(tj), free(ref), free(small);

    /* 2. a bigger run: loads, round-trips, compresses, reproducible */
    char *corpus = make_corpus(1, 300000);
    double t0 = rf_now();
    CHECK(rf_tok_train(corpus, strlen(corpus), 1000, dir1, 0) == 0, "train: %s", rf_last_error());
    double dt = rf_now() - t0;
    CHECK(rf_tok_train(corpus, strlen(corpus), 1000, dir2, 0) == 0, "train again: %s", rf_last_error());
    printf("trained 1000-token vocab on %zu bytes in %.2f s\n", strlen(corpus), dt);
    for (int f = 0; f < 2; f++) {
        const char *name = f ? "tokenizer_config.json" : "tokenizer.json";
        char *p1 = dir_file(dir1, name), *p2 = dir_file(dir2, name);
        size_t n1, n2;
        char *a = rf_read_file(p1, &n1), *b = rf_read_file(p2, &n2);
        CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "%s differs between two identical runs", name);
        free(a), free(b), free(p1), free(p2);
    }
    rf_tokenizer *t = rf_tok_load(dir1);
    CHECK(t != NULL, "load trained: %s", rf_last_error());
    if (t) {
        CHECK(rf_tok_vocab_size(t) == 1000, "vocab size %d, want 1000", rf_tok_vocab_size(t));
        CHECK(rf_tok_eos_id(t) == rf_tok_id(t, "<|im_end|>") && rf_tok_eos_id(t) >= 256, "eos is <|im_end|>");
        CHECK(rf_tok_mask_id(t) == rf_tok_id(t, "<|mask|>") && rf_tok_is_special(t, rf_tok_mask_id(t)), "<|mask|>");
        CHECK(t->chat_template && strstr(t->chat_template, "<|im_start|>"), "chat template written");
        int *ids, n;
        rf_tok_encode(t, " the", 4, &ids, &n);
        CHECK(n == 1, "a frequent word is one token (%d)", n);
        free(ids);
        /* held-out text, incl. what the corpus never had */
        const char *held[] = {"The diffusion model answers a question.", "unseen wörds ünïcode ñ", "数字 123456789 和 emoji 😀🚀",
                              "  spaces\tand\ttabs\n\n\nnew lines  ", "<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n",
                              "mixed: x=3.14; y=[1,2]; // code", "\x01\x02 control \x7f", "Ελληνικά и русский"};
        size_t total_bytes = 0, total_ids = 0;
        for (size_t k = 0; k < sizeof held / sizeof held[0]; k++) {
            rf_tok_encode(t, held[k], strlen(held[k]), &ids, &n);
            char *back = rf_tok_decode(t, ids, n, 0);
            CHECK(!strcmp(back, held[k]), "round trip: \"%s\" -> \"%s\"", held[k], back);
            total_bytes += strlen(held[k]), total_ids += (size_t)n;
            free(back), free(ids);
        }
        rf_tok_encode(t, "e\xCC\x81", 3, &ids, &n); /* e + combining acute: NFC makes it U+00E9 */
        char *back = rf_tok_decode(t, ids, n, 0);
        CHECK(!strcmp(back, "\xC3\xA9"), "NFC on encode: \"%s\"", back);
        free(back), free(ids);
        char *sample = make_corpus(99, 20000); /* same distribution, other text */
        rf_tok_encode(t, sample, strlen(sample), &ids, &n);
        back = rf_tok_decode(t, ids, n, 0);
        CHECK(!strcmp(back, sample), "round trip of held-out corpus text");
        CHECK(n * 3 < (int)strlen(sample), "compression: %d tokens for %zu bytes", n, strlen(sample));
        printf("held-out corpus text: %.2f bytes/token; odd strings: %.2f bytes/token\n", (double)strlen(sample) / n,
               (double)total_bytes / (double)total_ids);
        free(back), free(ids), free(sample);
        rf_tok_free(t);
    }
    /* logging: nothing on stderr, with or without a callback; lines to the callback */
    {
        char *text = make_corpus(9, 20000);
        CHECK(stderr_bytes_while_training(text, dir2) == 0, "verbose training without a log callback wrote to stderr");
        rf_log_set(count_log, &g_log_lines);
        CHECK(stderr_bytes_while_training(text, dir2) == 0, "verbose training with a log callback wrote to stderr");
        CHECK(g_log_merges >= 1, "the log callback got no progress line (%d lines)", g_log_lines);
        rf_log_set(NULL, NULL);
        int before = g_log_lines;
        CHECK(rf_tok_train(text, strlen(text), 300, dir2, 1) == 0 && g_log_lines == before,
              "lines reached a callback that was removed");
        free(text);
    }
    /* bad input */
    CHECK(rf_tok_train("ab\xff", 3, 1000, dir2, 0) == -1 && strstr(rf_last_error(), "offset 2"), "invalid UTF-8 corpus");
    CHECK(rf_tok_train("abc", 3, 100, dir2, 0) == -1 && strstr(rf_last_error(), "too small"), "tiny vocab");
    free(corpus);
    for (int d = 0; d < 2; d++) {
        const char *dir = d ? dir2 : dir1;
        char *p = dir_file(dir, "tokenizer.json"), *q = dir_file(dir, "tokenizer_config.json");
        unlink(p), unlink(q), rmdir(dir);
        free(p), free(q);
    }
    return check_summary("tokenizer_train");
}
