/* tokenizer_unit.c - the tokenizer on small hand-made tokenizer.json files:
 * BPE against a naive reference, both merge formats, added tokens, the two
 * ReFusion tokens, invalid UTF-8, malformed files, lossy and streaming
 * decode, and Qwen3's chat template on hand-checked strings. (The real
 * Qwen3 file is checked against the JavaScript reference by
 * tokenizer_diff.sh.) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static char tmpdir[64];

static char *write_tmp(const char *name, const char *text) {
    char *p = rf_path_join(tmpdir, name);
    if (rf_write_file_atomic(p, text, strlen(text))) rf_die("%s", rf_last_error());
    return p;
}

/* byte-level spelling of a byte string */
static void spell(const char *s, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) out += rf_utf8_encode(rf_byte_cp[(unsigned char)s[i]], out);
    *out = 0;
}

/* ---- a random BPE over the alphabet {a, b, c, space} ---- */
#define MAXTOK 400
static char toks[MAXTOK][64]; /* raw bytes of each token (ids 0..255 = bytes) */
static int ntoks;
static int merge_l[MAXTOK], merge_r[MAXTOK], nmerge;

static int find_tok(const char *s) {
    for (int i = 0; i < ntoks; i++)
        if (!strcmp(toks[i], s)) return i;
    return -1;
}

static void build_random_bpe(rf_rng *r) {
    ntoks = 256;
    for (int b = 0; b < 256; b++) toks[b][0] = (char)b, toks[b][1] = 0;
    toks[0][0] = 0; /* id 0 is byte 0: spelled as U+0100, never used in words */
    const int base[4] = {'a', 'b', 'c', ' '};
    nmerge = 0;
    while (nmerge < 120) {
        /* pick two tokens made of the alphabet (base chars or merged ones) */
        int pool[MAXTOK], np = 0;
        for (int k = 0; k < 4; k++) pool[np++] = base[k];
        for (int i = 256; i < ntoks; i++) pool[np++] = i;
        int a = pool[rf_rng_below(r, (uint64_t)np)], b = pool[rf_rng_below(r, (uint64_t)np)];
        if (strlen(toks[a]) + strlen(toks[b]) > 12) continue;
        if (toks[b][0] == ' ') continue; /* the pre-tokenizer puts spaces only at a word's start */
        int dup = 0;
        for (int m = 0; m < nmerge; m++) dup |= merge_l[m] == a && merge_r[m] == b;
        if (dup) continue;
        char cat[64];
        snprintf(cat, sizeof cat, "%s%s", toks[a], toks[b]);
        if (find_tok(cat) < 0) strcpy(toks[ntoks++], cat); /* a second pair may spell the same token */
        merge_l[nmerge] = a, merge_r[nmerge] = b, nmerge++;
    }
}

/* tokenizer.json for that BPE; merges as "a b" strings or as [a, b] pairs */
static char *bpe_json(int array_merges, const char *extra_added) {
    json_t *vocab = json_object(), *merges = json_array();
    char sp[256], sp2[256];
    for (int i = 0; i < ntoks; i++) {
        spell(toks[i], i < 256 ? 1 : strlen(toks[i]), sp);
        json_object_set_new(vocab, sp, json_integer(i));
    }
    for (int m = 0; m < nmerge; m++) {
        spell(toks[merge_l[m]], merge_l[m] < 256 ? 1 : strlen(toks[merge_l[m]]), sp);
        spell(toks[merge_r[m]], merge_r[m] < 256 ? 1 : strlen(toks[merge_r[m]]), sp2);
        if (array_merges) {
            json_array_append_new(merges, json_pack("[ss]", sp, sp2));
        } else {
            char line[600];
            snprintf(line, sizeof line, "%s %s", sp, sp2);
            json_array_append_new(merges, json_string(line));
        }
    }
    json_error_t je;
    json_t *added = json_loads(extra_added ? extra_added : "[]", 0, &je);
    json_t *root = json_pack("{s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s, s:b}]}, s:{s:s}, s:{s:s, s:o, s:o}}",
                             "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence",
                             "pretokenizers", "type", "Split", "pattern", "Regex", RF_QWEN_PRETOK_PATTERN, "behavior",
                             "Isolated", "type", "ByteLevel", "use_regex", 0, "decoder", "type", "ByteLevel", "model",
                             "type", "BPE", "vocab", vocab, "merges", merges);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* The reference: repeatedly merge the leftmost occurrence of the pair with
 * the lowest rank. O(n^2 * merges), independent of the heap in encode.c. */
static int naive_bpe(const char *w, int n, int *out) {
    int sym[256], len = n;
    for (int i = 0; i < n; i++) sym[i] = (unsigned char)w[i];
    for (;;) {
        int best = -1, at = -1;
        for (int i = 0; i + 1 < len; i++)
            for (int m = 0; m < nmerge; m++)
                if (merge_l[m] == sym[i] && merge_r[m] == sym[i + 1] && (best < 0 || m < best)) best = m, at = i;
        if (best < 0) break;
        char cat[64];
        snprintf(cat, sizeof cat, "%s%s", toks[sym[at]], toks[sym[at + 1]]);
        sym[at] = find_tok(cat);
        memmove(sym + at + 1, sym + at + 2, (size_t)(len - at - 2) * sizeof(int));
        len--;
    }
    memcpy(out, sym, (size_t)len * sizeof(int));
    return len;
}

typedef struct {
    int ids[4096];
    int n;
} naive_out;

static void naive_piece(const char *p, size_t n, void *ctx) {
    naive_out *o = ctx;
    o->n += naive_bpe(p, (int)n, o->ids + o->n);
}

static void test_bpe_vs_naive(void) {
    rf_rng r;
    rf_rng_seed(&r, 7);
    build_random_bpe(&r);
    char *js[2] = {bpe_json(0, NULL), bpe_json(1, NULL)};
    char *paths[2] = {write_tmp("bpe_str.json", js[0]), write_tmp("bpe_arr.json", js[1])};
    rf_tokenizer *t[2] = {rf_tok_load(paths[0]), rf_tok_load(paths[1])};
    CHECK(t[0] && t[1], "load random BPE: %s", rf_last_error());
    if (!t[0] || !t[1]) return;
    pcre2_code *re = rf_pretok_compile(RF_QWEN_PRETOK_PATTERN);
    int bad = 0, same_fmt = 0, total = 0;
    for (int trial = 0; trial < 3000; trial++) {
        char text[200];
        int n = 1 + (int)rf_rng_below(&r, 60);
        for (int i = 0; i < n; i++) text[i] = "abc  aabbcc"[rf_rng_below(&r, 11)];
        naive_out ref = {.n = 0};
        rf_pretokenize(re, text, (size_t)n, naive_piece, &ref);
        int *ids[2], nid[2];
        for (int k = 0; k < 2; k++) rf_tok_encode(t[k], text, (size_t)n, &ids[k], &nid[k]);
        bad += nid[0] != ref.n || memcmp(ids[0], ref.ids, (size_t)ref.n * sizeof(int));
        same_fmt += nid[0] == nid[1] && !memcmp(ids[0], ids[1], (size_t)nid[0] * sizeof(int));
        total += nid[0];
        char *back = rf_tok_decode(t[0], ids[0], nid[0], 0);
        bad += strncmp(back, text, (size_t)n) || strlen(back) != (size_t)n;
        free(back), free(ids[0]), free(ids[1]);
    }
    CHECK(bad == 0, "BPE differs from the naive reference in %d of 3000 texts", bad);
    CHECK(same_fmt == 3000, "\"a b\" and [a, b] merges disagree (%d of 3000 equal)", same_fmt);
    CHECK(total < 3000 * 30, "merges should shorten the texts (%d tokens)", total);
    /* <|beginoftext|> / <|mask|> get the next free ids when the file lacks them */
    CHECK(rf_tok_id(t[0], "<|beginoftext|>") == ntoks && rf_tok_id(t[0], "<|mask|>") == ntoks + 1,
          "ReFusion tokens at %d / %d, want %d / %d", rf_tok_id(t[0], "<|beginoftext|>"), rf_tok_id(t[0], "<|mask|>"),
          ntoks, ntoks + 1);
    CHECK(rf_tok_mask_id(t[0]) == ntoks + 1 && rf_tok_vocab_size(t[0]) == ntoks + 2, "mask id / vocab size");
    CHECK(rf_tok_is_special(t[0], ntoks + 1) && !rf_tok_is_special(t[0], 97), "special flags");
    pcre2_code_free(re);
    for (int k = 0; k < 2; k++) rf_tok_free(t[k]), free(js[k]), free(paths[k]);
}

static void test_added_tokens(void) {
    const char *added =
        "[{\"id\": 500, \"content\": \"<|im_end|>\", \"special\": true},"
        " {\"id\": 501, \"content\": \"<|im\", \"special\": true},"
        " {\"id\": 502, \"content\": \"<think>\", \"special\": false},"
        " {\"id\": 503, \"content\": \"<|mask|>\", \"special\": true},"
        " {\"id\": 504, \"content\": \"[L]\", \"special\": true, \"lstrip\": true, \"rstrip\": true}]";
    char *js = bpe_json(1, added), *path = write_tmp("added.json", js);
    rf_tokenizer *t = rf_tok_load(path);
    CHECK(t != NULL, "load with added tokens: %s", rf_last_error());
    if (!t) return;
    /* longest match first: "<|im_end|>" beats "<|im" */
    const char *text = "a<|im_end|><|im<think>b <|mask|>";
    int *ids, n;
    rf_tok_encode(t, text, strlen(text), &ids, &n);
    int want[] = {'a', 500, 501, 502, 'b', ' ', 503};
    CHECK(n == 7 && !memcmp(ids, want, sizeof want), "added tokens: got %d ids", n);
    CHECK(rf_tok_mask_id(t) == 503, "an existing <|mask|> keeps its id (%d)", rf_tok_mask_id(t));
    CHECK(rf_tok_id(t, "<|beginoftext|>") == 505, "<|beginoftext|> gets the next free id (%d)", rf_tok_id(t, "<|beginoftext|>"));
    char *d = rf_tok_decode(t, ids, n, 0), *ds = rf_tok_decode(t, ids, n, 1);
    CHECK(!strcmp(d, text), "decode with specials: \"%s\"", d);
    CHECK(!strcmp(ds, "a<think>b "), "decode skipping specials keeps non-special added tokens: \"%s\"", ds);
    free(d), free(ds), free(ids);
    /* lstrip / rstrip swallow the white space around the token */
    rf_tok_encode(t, "a  [L] \n b", 10, &ids, &n);
    d = rf_tok_decode(t, ids, n, 0);
    CHECK(!strcmp(d, "a[L]b"), "lstrip/rstrip: \"%s\"", d);
    free(d), free(ids);
    rf_tok_free(t);
    free(js), free(path);
}

/* Many added tokens sharing prefixes (2-6 of "<>|=", which no token of the
 * random BPE spells: those are made of "abc "): the encoder's longest
 * match at every position (a trie walk) against a scan of every token. */
static void test_added_trie(void) {
    enum { NA = 300, BASE = 10000 };
    static char content[NA][8];
    rf_rng r;
    rf_rng_seed(&r, 11);
    json_t *arr = json_array();
    for (int k = 0; k < NA; k++) {
        for (;;) {
            int len = 2 + (int)rf_rng_below(&r, 5), dup = 0;
            for (int i = 0; i < len; i++) content[k][i] = "<>|="[rf_rng_below(&r, 4)];
            content[k][len] = 0;
            for (int j = 0; j < k && !dup; j++) dup = !strcmp(content[j], content[k]);
            if (!dup) break;
        }
        json_array_append_new(arr, json_pack("{s:i, s:s, s:b}", "id", BASE + k, "content", content[k], "special", 1));
    }
    char *added = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    char *js = bpe_json(1, added), *path = write_tmp("trie.json", js);
    rf_tokenizer *t = rf_tok_load(path);
    CHECK(t != NULL, "load with %d added tokens: %s", NA, rf_last_error());
    if (!t) return;
    int same = 1, matched = 0;
    for (int trial = 0; trial < 200 && same; trial++) {
        char text[128];
        int len = 1 + (int)rf_rng_below(&r, 120);
        for (int i = 0; i < len; i++) text[i] = "<>|=a"[rf_rng_below(&r, 5)];
        text[len] = 0;
        int want[128], nw = 0;
        for (int pos = 0; pos < len;) {
            int best = -1, bl = 0;
            for (int k = 0; k < NA; k++) {
                int l = (int)strlen(content[k]);
                if (l > bl && l <= len - pos && !memcmp(text + pos, content[k], (size_t)l)) best = k, bl = l;
            }
            if (best < 0) pos++;
            else want[nw++] = BASE + best, pos += bl;
        }
        int *ids, n, got[128], ng = 0;
        rf_tok_encode(t, text, (size_t)len, &ids, &n);
        for (int i = 0; i < n; i++)
            if (ids[i] >= BASE && ng < 128) got[ng++] = ids[i];
        same = ng == nw && !memcmp(got, want, sizeof(int) * (size_t)nw);
        matched += nw;
        if (!same) fprintf(stderr, "text \"%s\": %d added tokens, the scan finds %d\n", text, ng, nw);
        free(ids);
    }
    CHECK(same && matched > 1000, "added tokens' longest matches differ from a scan of every token (%d matched)", matched);
    rf_tok_free(t);
    free(js), free(path), free(added);
}

static void test_invalid_utf8(void) {
    char *js = bpe_json(1, NULL), *path = write_tmp("u8.json", js);
    rf_tokenizer *t = rf_tok_load(path);
    struct {
        const char *s;
        size_t off;
    } bad[] = {{"ab\xff", 2}, {"\xe4\xbd", 0}, {"ok \xc0\xaf", 3}, {"x\xed\xa0\x80", 1},
               {"abc\xf4\x90\x80\x80", 3}, {"a\x80", 1}, {"\xe2\x82\xac\xe2\x82", 3}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int *ids, n;
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu ", bad[k].off);
        int rc = rf_tok_encode(t, bad[k].s, strlen(bad[k].s), &ids, &n);
        CHECK(rc == -1 && strstr(rf_last_error(), want), "invalid UTF-8 case %zu: rc %d, \"%s\"", k, rc, rf_last_error());
    }
    int *ids, n;
    CHECK(rf_tok_encode(t, "", 0, &ids, &n) == 0 && n == 0, "empty text");
    free(ids);
    rf_tok_free(t);
    free(js), free(path);
}

static void test_malformed(void) {
    const char *good_model = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";
    const char *pre = "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}";
    struct {
        const char *json, *expect;
    } cases[] = {
        {"this is not json", "not valid JSON"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [", "not valid JSON"},
        {"[1, 2, 3]", "not a JSON object"},
        {"{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "model.vocab missing"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "no 'model'"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", "the merged token is not in model.vocab"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"ab\": 1}, \"merges\": [[\"a\", \"q\"]]}}", "its right part is not in model.vocab"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}", "expected \"a b\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}}}", "id must be an integer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}", "used by both"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", "only BPE"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}", "not supported"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}}",
         "does not compile"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 0, \"content\": \"<x>\"}], " /* */
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "already belongs"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *p = write_tmp("bad.json", cases[k].json);
        rf_tokenizer *t = rf_tok_load(p);
        CHECK(!t && strstr(rf_last_error(), cases[k].expect) && strstr(rf_last_error(), p),
              "malformed case %zu: want \"%s\", got \"%s\"", k, cases[k].expect, t ? "(loaded)" : rf_last_error());
        rf_tok_free(t);
        free(p);
    }
    CHECK(!rf_tok_load("/nonexistent/tokenizer.json") && strstr(rf_last_error(), "/nonexistent"), "missing file");
    /* a directory: tokenizer.json + tokenizer_config.json with an eos that exists / does not */
    char json[600];
    snprintf(json, sizeof json, "{%s, %s, \"added_tokens\": [{\"id\": 3, \"content\": \"<|im_end|>\", \"special\": true}]}", good_model, pre);
    free(write_tmp("tokenizer.json", json));
    free(write_tmp("tokenizer_config.json", "{\"eos_token\": {\"content\": \"<|im_end|>\"}, \"chat_template\": \"x\"}"));
    rf_tokenizer *t = rf_tok_load(tmpdir);
    CHECK(t && rf_tok_eos_id(t) == 3, "eos from tokenizer_config.json: %s", t ? "wrong id" : rf_last_error());
    rf_tok_free(t);
    free(write_tmp("tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}"));
    t = rf_tok_load(tmpdir);
    CHECK(!t && strstr(rf_last_error(), "<|nope|>"), "unknown eos_token: %s", rf_last_error());
    free(write_tmp("tokenizer_config.json", "{\"eos_token\": "));
    t = rf_tok_load(tmpdir);
    CHECK(!t && strstr(rf_last_error(), "tokenizer_config.json"), "broken config: %s", rf_last_error());
    char *p = rf_path_join(tmpdir, "tokenizer_config.json");
    unlink(p);
    free(p);
}

/* Decoding is lossy on broken UTF-8, and the stream gives the same text. */
static void test_decode_stream(void) {
    char *js = bpe_json(1, "[{\"id\": 600, \"content\": \"<|s|>\", \"special\": true}]");
    char *path = write_tmp("dec.json", js);
    rf_tokenizer *t = rf_tok_load(path);
    /* "é" = C3 A9, "€" = E2 82 AC: byte tokens split them across ids */
    int ids1[] = {0xC3, 0xA9, 'a', 0xE2, 0x82, 0xAC};
    char *d = rf_tok_decode(t, ids1, 6, 0);
    CHECK(!strcmp(d, "\xC3\xA9" "a\xE2\x82\xAC"), "bytes across tokens: \"%s\"", d);
    free(d);
    int ids2[] = {0xE2, 0x82, 'a', 0xFF, 0xC3};
    d = rf_tok_decode(t, ids2, 5, 0);
    CHECK(!strcmp(d, "\xEF\xBF\xBD" "a\xEF\xBF\xBD\xEF\xBF\xBD"), "one U+FFFD per maximal subpart: \"%s\"", d);
    free(d);
    int oob = 100000;
    CHECK(rf_tok_decode(t, &oob, 1, 0) == NULL && strstr(rf_last_error(), "100000"), "out-of-range id");
    rf_rng r;
    rf_rng_seed(&r, 3);
    int bad = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int ids[40], n = (int)rf_rng_below(&r, 40);
        for (int i = 0; i < n; i++) {
            uint64_t x = rf_rng_below(&r, 10);
            ids[i] = x < 5 ? 0x80 + (int)rf_rng_below(&r, 0x78) /* lead and continuation bytes */
                   : x < 8 ? 'a' + (int)rf_rng_below(&r, 3)
                   : x < 9 ? 600 : 256 + (int)rf_rng_below(&r, (uint64_t)(ntoks - 256));
        }
        for (int skip = 0; skip < 2; skip++) {
            char *whole = rf_tok_decode(t, ids, n, skip);
            rf_tok_stream *s = rf_tok_stream_new(t, skip);
            rf_buf acc = {0};
            for (int i = 0; i < n; i++) {
                const char *c = rf_tok_stream_put(s, ids[i]);
                bad += rf_utf8_check(c, strlen(c), NULL) != 0; /* every chunk is valid UTF-8 */
                rf_buf_puts(&acc, c);
            }
            rf_buf_puts(&acc, rf_tok_stream_flush(s));
            char *streamed = rf_buf_cstr(&acc);
            bad += strcmp(whole, streamed) != 0;
            bad += rf_utf8_check(whole, strlen(whole), NULL) != 0;
            free(whole), free(streamed);
            rf_tok_stream_free(s);
        }
    }
    CHECK(bad == 0, "streaming decode differs from decode (%d)", bad);
    /* the stream holds back a split character until it is complete */
    rf_tok_stream *s = rf_tok_stream_new(t, 0);
    const char *c1 = rf_tok_stream_put(s, 0xE2);
    CHECK(!strcmp(c1, ""), "first byte of a 3-byte character is held back");
    rf_tok_stream_put(s, 0x82);
    const char *c3 = rf_tok_stream_put(s, 0xAC);
    CHECK(!strcmp(c3, "\xE2\x82\xAC"), "completed character comes out whole");
    CHECK(rf_tok_stream_put(s, -1) == NULL, "bad id in the stream");
    rf_tok_stream_free(s);
    rf_tok_free(t);
    free(js), free(path);
}

/* Expected strings rendered by Python jinja2 3.1.6 from Qwen3's template in
 * tokenizer_config.json, with the settings of transformers'
 * apply_chat_template (trim_blocks, lstrip_blocks). */
static void test_chat(void) {
    rf_chat_msg c1[] = {{"user", "q"}, {"assistant", "<think>\n \treason \n</think>\n\n\tanswer "}};
    rf_chat_msg c2[] = {{"system", " sys "}, {"user", "q"}};
    rf_chat_msg c3[] = {{"user", "q1"}, {"assistant", "\n\nA1"}, {"user", "q2"}, {"assistant", "<think>r2</think>A2"}, {"assistant", "A3"}};
    rf_chat_msg c4[] = {{"user", "q1"}, {"assistant", "x<think>\nr\n</think>\n \nA"}, {"user", "<tool_response>t</tool_response>"},
                        {"assistant", "y</think>z"}};
    rf_chat_msg c5[] = {{"user", "q"}, {"tool", "t1"}, {"tool", "t2"}, {"system", "s2"}};
    struct {
        rf_chat_msg *m;
        int n, agp, think;
        const char *want;
    } cases[] = {
        {c1, 2, 0, 1, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n \treason \n</think>\n\n\tanswer <|im_end|>\n"},
        {c2, 2, 1, 0, "<|im_start|>system\n sys <|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
        {c2, 2, 1, 1, "<|im_start|>system\n sys <|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"},
        {c2, 2, 0, 0, "<|im_start|>system\n sys <|im_end|>\n<|im_start|>user\nq<|im_end|>\n"},
        {c3, 5, 0, 1,
         "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n\n\nA1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
         "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA3<|im_end|>\n"},
        {c4, 4, 1, 1,
         "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\n \nA<|im_end|>\n<|im_start|>user\n"
         "<tool_response>t</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\ny\n</think>\n\nz<|im_end|>\n"
         "<|im_start|>assistant\n"},
        {c5, 4, 1, 1,
         "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\nt1\n</tool_response>\n<tool_response>\nt2\n"
         "</tool_response><|im_end|>\n<|im_start|>system\ns2<|im_end|>\n<|im_start|>assistant\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *got = rf_chat_apply(NULL, cases[k].m, cases[k].n, cases[k].agp, cases[k].think);
        CHECK(got && !strcmp(got, cases[k].want), "chat case %zu:\n got  %s\n want %s", k, got, cases[k].want);
        free(got);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rf_tok_unit_XXXXXX");
    if (!mkdtemp(tmpdir)) rf_die("mkdtemp failed");
    test_bpe_vs_naive();
    test_added_tokens();
    test_added_trie();
    test_invalid_utf8();
    test_malformed();
    test_decode_stream();
    test_chat();
    const char *names[] = {"bpe_str.json", "bpe_arr.json", "added.json", "trie.json", "u8.json", "bad.json", "tokenizer.json", "dec.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = rf_path_join(tmpdir, names[i]);
        unlink(p);
        free(p);
    }
    rmdir(tmpdir);
    return check_summary("tokenizer_unit");
}
