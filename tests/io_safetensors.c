/* io_safetensors.c - the safetensors writer and reader: round trip of exact
 * bytes (borrowed and streamed tensors), the on-disk layout the HF writer
 * produces, and one test per kind of corruption: each must give -1 and a
 * message that names the problem (and the tensor, where there is one). */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/safetensors.h"
#include "util/util.h"

static char g_dir[256];

static char *tmp_path(const char *name) { return rf_path_join(g_dir, name); }

/* a file made of an explicit header length, header text and data bytes */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i * 7 & 0xff), f);
    fclose(f);
}

/* open must fail and the message must contain every one of the needles */
static void expect_fail(const char *what, const char *path, const char *n1, const char *n2) {
    rf_st_file f;
    rf_set_error("%s", "");
    int rc = rf_st_open(&f, path);
    CHECK(rc == -1, "%s: rf_st_open should fail", what);
    if (rc == 0) rf_st_close(&f);
    const char *e = rf_last_error();
    CHECK(strstr(e, path) != NULL, "%s: message should name the file: %s", what, e);
    CHECK(!n1 || strstr(e, n1), "%s: message should contain '%s': %s", what, n1, e);
    CHECK(!n2 || strstr(e, n2), "%s: message should contain '%s': %s", what, n2, e);
    CHECK(!strchr(e, '\n'), "%s: message must be one line", what);
}

static void corrupt(const char *name, const char *header, size_t data_len, const char *n1,
                    const char *n2) {
    char *p = tmp_path(name);
    write_raw(p, strlen(header), header, data_len);
    expect_fail(name, p, n1, n2);
    free(p);
}

/* streamed tensor: element i (as u16) = (i * 2654435761) >> 16 */
static void fill_pattern(void *ctx, size_t e0, size_t n, void *dst) {
    size_t *calls = ctx;
    (*calls)++;
    CHECK(e0 % RF_ST_FILL_CHUNK == 0 && n <= RF_ST_FILL_CHUNK, "fill chunking e0=%zu n=%zu", e0, n);
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = (uint16_t)(((e0 + i) * 2654435761u) >> 16);
}

static void test_round_trip(void) {
    float a[3 * 4];
    uint16_t b[5], c[2 * 3 * 2];
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 5; i++) b[i] = rf_f32_to_bf16((float)i + 0.5f);
    for (int i = 0; i < 12; i++) c[i] = rf_f32_to_f16((float)-i / 3.0f);
    const size_t n_big = RF_ST_FILL_CHUNK + 1234; /* spans two fill calls */
    size_t calls = 0;

    rf_st_writer *w = rf_st_writer_new();
    int64_t sa[2] = {3, 4}, sb[1] = {5}, sc[3] = {2, 3, 2}, sbig[2] = {(int64_t)n_big / 2, 2};
    rf_st_writer_add(w, "a.weight", RF_F32, 2, sa, a);
    rf_st_writer_add(w, "b", RF_BF16, 1, sb, b);
    rf_st_writer_add_gen(w, "big", RF_BF16, 2, sbig, fill_pattern, &calls);
    rf_st_writer_add(w, "model.layers.0.c", RF_F16, 3, sc, c);
    CHECK(rf_st_writer_data_bytes(w) == sizeof a + sizeof b + sizeof c + n_big * 2,
          "data_bytes %zu", rf_st_writer_data_bytes(w));
    char *p = tmp_path("ok.safetensors");
    CHECK(rf_st_writer_finish(w, p) == 0, "writer_finish: %s", rf_last_error());
    CHECK(calls == 2, "fill called %zu times, expected 2", calls);

    /* no temp file left behind */
    DIR *d = opendir(g_dir);
    struct dirent *de;
    int n_tmp = 0;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) n_tmp++;
    closedir(d);
    CHECK(n_tmp == 0, "temp files left: %d", n_tmp);

    /* layout: header length is a multiple of 8, header is JSON with the HF
     * metadata, total size = 8 + header + data */
    size_t len;
    char *raw = rf_read_file(p, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)raw[i];
    CHECK(hlen % 8 == 0, "header length %llu not padded to 8", (unsigned long long)hlen);
    CHECK(len == 8 + hlen + sizeof a + sizeof b + sizeof c + n_big * 2, "file size %zu", len);
    json_t *root = json_loadb(raw + 8, hlen, 0, NULL);
    CHECK(root != NULL, "header is JSON");
    json_t *fmt = json_object_get(json_object_get(root, "__metadata__"), "format");
    CHECK(fmt && !strcmp(json_string_value(fmt), "pt"), "__metadata__.format == pt");
    json_t *jb = json_object_get(root, "b");
    CHECK(jb && !strcmp(json_string_value(json_object_get(jb, "dtype")), "BF16"), "b dtype");
    json_decref(root);
    free(raw);

    rf_st_file f;
    CHECK(rf_st_open(&f, p) == 0, "open: %s", rf_last_error());
    CHECK(f.n_tensors == 4, "n_tensors %d", f.n_tensors);
    const rf_tensor *ta = rf_st_find(&f, "a.weight"), *tb = rf_st_find(&f, "b"),
                    *tc = rf_st_find(&f, "model.layers.0.c"), *tg = rf_st_find(&f, "big");
    CHECK(ta && tb && tc && tg, "all tensors found");
    CHECK(!rf_st_find(&f, "__metadata__") && !rf_st_find(&f, "a"), "no bogus finds");
    if (ta && tb && tc && tg) {
        CHECK(ta->dtype == RF_F32 && ta->ndim == 2 && ta->shape[0] == 3 && ta->shape[1] == 4,
              "a meta");
        CHECK(ta->nbytes == sizeof a && !memcmp(ta->data, a, sizeof a), "a bytes");
        CHECK(tb->dtype == RF_BF16 && tb->ndim == 1 && tb->shape[0] == 5, "b meta");
        CHECK(tb->nbytes == sizeof b && !memcmp(tb->data, b, sizeof b), "b bytes");
        CHECK(tc->dtype == RF_F16 && tc->ndim == 3 && tc->shape[2] == 2, "c meta");
        CHECK(tc->nbytes == sizeof c && !memcmp(tc->data, c, sizeof c), "c bytes");
        CHECK(tg->nbytes == n_big * 2, "big nbytes");
        size_t bad = 0;
        const uint16_t *g = tg->data;
        for (size_t i = 0; i < n_big; i++)
            if (g[i] != (uint16_t)((i * 2654435761u) >> 16)) bad++;
        CHECK(bad == 0, "big: %zu wrong elements", bad);
    }
    rf_st_close(&f);

    /* overwrite in place (atomic rename over an existing file) */
    w = rf_st_writer_new();
    rf_st_writer_add(w, "only", RF_F32, 2, sa, a);
    CHECK(rf_st_writer_finish(w, p) == 0, "rewrite");
    CHECK(rf_st_open(&f, p) == 0 && f.n_tensors == 1, "rewritten file has 1 tensor");
    rf_st_close(&f);

    /* a file the writer cannot create: error, no crash */
    w = rf_st_writer_new();
    rf_st_writer_add(w, "only", RF_F32, 2, sa, a);
    CHECK(rf_st_writer_finish(w, "/nonexistent-dir/x.safetensors") == -1, "unwritable path");
    free(p);
}

static void test_corruptions(void) {
    /* truncated: a valid file cut short loses the end of its last tensor */
    char *ok = tmp_path("trunc.safetensors");
    float a[8] = {0};
    int64_t s[1] = {8};
    rf_st_writer *w = rf_st_writer_new();
    rf_st_writer_add(w, "model.norm.weight", RF_F32, 1, s, a);
    rf_st_writer_finish(w, ok);
    size_t len;
    char *raw = rf_read_file(ok, &len);
    FILE *f = fopen(ok, "wb");
    fwrite(raw, 1, len - 4, f);
    fclose(f);
    expect_fail("truncated data", ok, "'model.norm.weight'", "run past the end of the file");
    f = fopen(ok, "wb");
    fwrite(raw, 1, 5, f);
    fclose(f);
    expect_fail("truncated to 5 bytes", ok, "truncated", NULL);
    f = fopen(ok, "wb");
    fclose(f);
    expect_fail("empty file", ok, "truncated", NULL);
    free(raw);
    free(ok);

    char *p = tmp_path("hlen.safetensors");
    write_raw(p, 1000000, "{}", 16);
    expect_fail("header length past EOF", p, "header length 1000000 runs past the end", NULL);
    free(p);

    corrupt("badjson.safetensors", "{\"a\": {\"dtype\": \"F32\", ", 8, "not valid JSON", NULL);
    corrupt("notobj.safetensors", "[1, 2, 3]", 8, "not a JSON object", NULL);
    corrupt("overlap.safetensors",
            "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
            "\"y\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
            24, "overlap", "'x'");
    corrupt("past.safetensors",
            "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 16,
            "'model.norm.weight': data_offsets [8, 24) run past the end of the file", NULL);
    corrupt("dtype.safetensors",
            "{\"ids\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "'ids'",
            "I32");
    corrupt("nbytes.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, "'w'",
            "needs 24");
    corrupt("order.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 24, "'w'",
            "out of order");
    corrupt("fields.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'w'",
            "data_offsets");
    corrupt("negshape.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "'w'", "shape");
    corrupt("dup.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "not valid JSON", "duplicate");
    /* messages stay one line whatever the header holds */
    corrupt("ctrlname.safetensors",
            "{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "control characters", NULL);
    corrupt("rawnewline.safetensors", "{\"a\nb\": 1}", 4, "not valid JSON", NULL);
    /* a header of odd length: the F32 data would start at an odd address */
    corrupt("oddheader.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ", 4, "not aligned to its 4-byte elements", NULL);
    char *missing = tmp_path("does-not-exist.safetensors");
    expect_fail("missing file", missing, "cannot open", NULL);
    free(missing);

    /* valid edge cases: empty tensor at the same offset as another; metadata
     * with extra keys; trailing spaces in the header */
    p = tmp_path("edge.safetensors");
    const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"y\"},"
                    "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                    "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}      ";
    write_raw(p, strlen(h), h, 2);
    rf_st_file sf;
    int rc = rf_st_open(&sf, p);
    CHECK(rc == 0, "edge file opens: %s", rf_last_error());
    if (rc == 0) {
        const rf_tensor *t = rf_st_find(&sf, "s");
        CHECK(sf.n_tensors == 2 && t && t->ndim == 0 && t->nbytes == 2, "scalar tensor");
        rf_st_close(&sf);
    }
    free(p);
}

static void test_dtypes(void) {
    rf_dtype t;
    CHECK(rf_dtype_parse("BF16", &t) == 0 && t == RF_BF16, "BF16");
    CHECK(rf_dtype_parse("bfloat16", &t) == 0 && t == RF_BF16, "bfloat16");
    CHECK(rf_dtype_parse("float32", &t) == 0 && t == RF_F32, "float32");
    CHECK(rf_dtype_parse("F16", &t) == 0 && t == RF_F16, "F16");
    CHECK(rf_dtype_parse("I32", &t) == -1, "I32 rejected");
    CHECK(rf_dtype_size(RF_F32) == 4 && rf_dtype_size(RF_BF16) == 2 && rf_dtype_size(RF_F16) == 2,
          "sizes");
    CHECK(!strcmp(rf_dtype_name(RF_BF16), "BF16"), "name");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_test_io_st.%d", (int)getpid());
    rf_mkdir_p(g_dir);
    test_dtypes();
    test_round_trip();
    test_corruptions();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return check_summary("io_safetensors");
}
