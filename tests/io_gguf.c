/* io_gguf.c - the GGUF writer and reader.
 *  1. round trip: every metadata type and every tensor type the writer
 *     knows, read back with the same values, bytes, shapes and aligned
 *     offsets; the bytes on disk checked against the format by hand;
 *  2. corrupted files, each built byte by byte here (not by the writer):
 *     every truncation point, bad magic / version, counts and string lengths
 *     past the end, unknown value and tensor types, misaligned / out-of-range
 *     / overlapping tensors, duplicates, bad alignment, bad dims; each must
 *     give -1 and one line naming the file and the problem;
 *  3. a header fuzz: random byte changes must never crash or report a
 *     tensor outside the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/gguf.h"
#include "io/quant.h"
#include "util/util.h"

static char g_dir[256];
static char *tmp_path(const char *name) { return rf_path_join(g_dir, name); }

/* ---- a byte builder, independent of the writer -------------------------------- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_put(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u32(bytes *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    b_put(b, x, 4);
}
static void b_u64(bytes *b, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        b_put(b, &c, 1);
    }
}
static void b_str(bytes *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_pad(bytes *b, size_t align) {
    static const uint8_t z[64];
    b_put(b, z, (align - b->n % align) % align);
}

static void save(const char *path, const bytes *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b->p, 1, n, f);
    fclose(f);
}

/* A valid file: 2 keys, 2 F32 tensors [4] and [8] at offsets 0 and 32. The
 * knobs break one thing each. */
typedef struct {
    const char *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    uint64_t key_len_override; /* 0: the real length */
    uint32_t kv_type;          /* of the second key (normally STRING) */
    uint32_t ggml_type;        /* of the first tensor */
    uint32_t n_dims;           /* of the first tensor */
    uint64_t ne0;              /* of the first tensor */
    uint64_t off0, off1;
    const char *name0, *name1, *key1;
    int alignment_key;         /* 0: none, else its value (uint32) */
    int alignment_as_i32;
    int bool_value;            /* -1: no bool key, else the byte */
} spec;

static spec valid_spec(void) {
    return (spec){"GGUF", 3, 2, 2, 0, RF_GGUF_STRING, RF_GGML_F32, 1, 4, 0, 32, "a.weight", "b.weight",
                  "general.name", 0, 0, -1};
}

static bytes build(const spec *s) {
    bytes b = {0};
    b_put(&b, s->magic, 4);
    b_u32(&b, s->version);
    uint64_t extra = (s->alignment_key ? 1 : 0) + (s->bool_value >= 0 ? 1 : 0);
    b_u64(&b, s->n_tensors);
    b_u64(&b, s->n_kv + extra);
    /* key 1: general.architecture = "qwen3" */
    if (s->key_len_override) {
        b_u64(&b, s->key_len_override);
        b_put(&b, "general.architecture", 20);
    } else {
        b_str(&b, "general.architecture");
    }
    b_u32(&b, RF_GGUF_STRING);
    b_str(&b, "qwen3");
    /* key 2 */
    b_str(&b, s->key1);
    b_u32(&b, s->kv_type);
    if (s->kv_type == RF_GGUF_STRING) b_str(&b, "x");
    else if (s->kv_type == RF_GGUF_ARRAY) {
        b_u32(&b, RF_GGUF_ARRAY); /* an array of arrays */
        b_u64(&b, 1);
    } else b_u32(&b, 7);
    if (s->alignment_key) {
        b_str(&b, "general.alignment");
        b_u32(&b, s->alignment_as_i32 ? RF_GGUF_INT32 : RF_GGUF_UINT32);
        b_u32(&b, (uint32_t)s->alignment_key);
    }
    if (s->bool_value >= 0) {
        b_str(&b, "some.flag");
        b_u32(&b, RF_GGUF_BOOL);
        uint8_t v = (uint8_t)s->bool_value;
        b_put(&b, &v, 1);
    }
    /* tensors */
    b_str(&b, s->name0);
    b_u32(&b, s->n_dims);
    for (uint32_t d = 0; d < s->n_dims && d < 8; d++) b_u64(&b, d == 0 ? s->ne0 : 1);
    b_u32(&b, s->ggml_type);
    b_u64(&b, s->off0);
    b_str(&b, s->name1);
    b_u32(&b, 1);
    b_u64(&b, 8);
    b_u32(&b, RF_GGML_F32);
    b_u64(&b, s->off1);
    size_t align = s->alignment_key > 0 && !(s->alignment_key & (s->alignment_key - 1)) ? (size_t)s->alignment_key : 32;
    b_pad(&b, align);
    float data[16];
    for (int i = 0; i < 16; i++) data[i] = (float)i;
    b_put(&b, data, 32);       /* tensor a: 4 floats + padding to 32 */
    b_put(&b, data, 32);       /* tensor b: 8 floats */
    return b;
}

/* open must fail with one line naming the file and containing needle */
static void expect_fail_file(const char *what, const char *path, const char *needle) {
    rf_gguf_file f;
    rf_set_error("%s", "");
    int rc = rf_gguf_open(&f, path);
    CHECK(rc == -1, "%s: rf_gguf_open should fail", what);
    if (rc == 0) rf_gguf_close(&f);
    const char *e = rf_last_error();
    CHECK(strstr(e, path) != NULL, "%s: message should name the file: %s", what, e);
    CHECK(!needle || strstr(e, needle), "%s: message should contain '%s': %s", what, needle, e);
    CHECK(!strchr(e, '\n'), "%s: message must be one line: %s", what, e);
}

static void expect_fail(const char *what, const spec *s, const char *needle) {
    bytes b = build(s);
    char *p = tmp_path("bad.gguf");
    save(p, &b, b.n);
    expect_fail_file(what, p, needle);
    free(p);
    free(b.p);
}

static void test_corrupt(void) {
    spec s = valid_spec();
    bytes b = build(&s);
    char *p = tmp_path("good.gguf");
    save(p, &b, b.n);
    rf_gguf_file f;
    int rc = rf_gguf_open(&f, p);
    CHECK(rc == 0, "the valid hand-built file must open: %s", rf_last_error());
    if (rc == 0) {
        CHECK(f.n_kv == 2 && f.n_tensors == 2, "counts %d %d", f.n_kv, f.n_tensors);
        const rf_gguf_tensor *t = rf_gguf_find_tensor(&f, "b.weight");
        CHECK(t && t->ne[0] == 8 && t->nbytes == 32 && ((const float *)t->data)[7] == 7.0f,
              "tensor b read back");
        rf_gguf_close(&f);
    }
    /* every truncation point of the valid file fails cleanly */
    char *tp = tmp_path("trunc.gguf");
    int trunc_ok = 1;
    for (size_t n = 0; n < b.n; n++) {
        save(tp, &b, n);
        rf_set_error("%s", "");
        if (rf_gguf_open(&f, tp) == 0) {
            rf_gguf_close(&f);
            trunc_ok = 0;
            CHECK(0, "a file truncated to %zu of %zu bytes opened", n, b.n);
            break;
        }
        const char *e = rf_last_error();
        if (!strstr(e, tp) || strchr(e, '\n') || !*e) {
            trunc_ok = 0;
            CHECK(0, "truncated to %zu: bad message '%s'", n, e);
            break;
        }
    }
    CHECK(trunc_ok, "every truncation rejected");
    save(tp, &b, 40);
    expect_fail_file("truncated in the first key", tp, "2 metadata entries cannot fit");
    save(tp, &b, b.n - 70);
    expect_fail_file("truncated in the tensor infos", tp, "truncated");
    save(tp, &b, b.n - 1);
    expect_fail_file("truncated in the data", tp, "past the end");
    free(tp);
    free(b.p);
    free(p);

    s = valid_spec(), s.magic = "GGUX";
    expect_fail("bad magic", &s, "not a GGUF file");
    s = valid_spec(), s.version = 1;
    expect_fail("version 1", &s, "version 1");
    s = valid_spec(), s.version = 4;
    expect_fail("version 4", &s, "version 4");
    s = valid_spec(), s.n_kv = UINT64_C(1) << 40;
    expect_fail("huge kv count", &s, "metadata entries cannot fit");
    s = valid_spec(), s.n_tensors = UINT64_C(1) << 60;
    expect_fail("huge tensor count", &s, "tensors cannot fit");
    s = valid_spec(), s.n_tensors = 3;
    expect_fail("one tensor too many", &s, "tensor 2");
    s = valid_spec(), s.key_len_override = UINT64_C(1) << 62;
    expect_fail("huge string length", &s, "string length");
    s = valid_spec(), s.kv_type = 13;
    expect_fail("unknown value type", &s, "unknown value type 13");
    s = valid_spec(), s.kv_type = RF_GGUF_ARRAY;
    expect_fail("array of arrays", &s, "arrays of arrays");
    s = valid_spec(), s.ggml_type = 16;
    expect_fail("unsupported ggml type (IQ2_XXS)", &s, "ggml type IQ2_XXS is not supported (re-quantize");
    s = valid_spec(), s.ggml_type = 1000;
    expect_fail("unknown ggml type", &s, "ggml type 1000");
    s = valid_spec(), s.off0 = 4;
    expect_fail("misaligned offset", &s, "not a multiple of the alignment 32");
    s = valid_spec(), s.off1 = 64;
    expect_fail("offset past the end", &s, "past the end");
    s = valid_spec(), s.off1 = UINT64_C(1) << 63;
    expect_fail("offset near 2^64", &s, "past the end");
    s = valid_spec(), s.off1 = 0;
    expect_fail("overlapping tensors", &s, "overlaps");
    s = valid_spec(), s.name1 = "a.weight";
    expect_fail("duplicate tensor", &s, "occurs twice");
    s = valid_spec(), s.key1 = "general.architecture";
    expect_fail("duplicate key", &s, "occurs twice");
    s = valid_spec(), s.alignment_key = 24;
    expect_fail("alignment not a power of two", &s, "general.alignment");
    s = valid_spec(), s.alignment_key = 1; /* offsets that make f32 loads misaligned */
    expect_fail("alignment 1", &s, "general.alignment 1 is not supported");
    s = valid_spec(), s.alignment_key = 4;
    expect_fail("alignment 4", &s, "general.alignment 4 is not supported");
    s = valid_spec(), s.alignment_key = 32, s.alignment_as_i32 = 1;
    expect_fail("alignment of the wrong type", &s, "general.alignment");
    s = valid_spec(), s.n_dims = 0;
    expect_fail("0 dims", &s, "0 dimensions");
    s = valid_spec(), s.n_dims = 5;
    expect_fail("5 dims", &s, "5 dimensions");
    s = valid_spec(), s.ne0 = UINT64_C(1) << 63;
    expect_fail("absurd dimension", &s, "absurdly large");
    s = valid_spec(), s.ggml_type = RF_GGML_Q8_0, s.ne0 = 33;
    expect_fail("Q8_0 row not whole blocks", &s, "not whole blocks");
    s = valid_spec(), s.bool_value = 2;
    expect_fail("bool value 2", &s, "must be 0 or 1");
    s = valid_spec(), s.name0 = "a\nb";
    expect_fail("control characters in a name", &s, "control characters");
    s = valid_spec(), s.name0 = "a.very.long.tensor.name.that.goes.on.and.on.past.sixty.three.bytes";
    expect_fail("name of 64+ bytes", &s, "longer than 63");
    /* the alignment key is honoured: 64 makes offset 32 misaligned */
    s = valid_spec(), s.alignment_key = 64;
    expect_fail("offset 32 with alignment 64", &s, "alignment 64");
    /* and a file with a valid bool and alignment 32 still opens */
    s = valid_spec(), s.alignment_key = 32, s.bool_value = 1;
    b = build(&s);
    p = tmp_path("good2.gguf");
    save(p, &b, b.n);
    rc = rf_gguf_open(&f, p);
    CHECK(rc == 0, "alignment 32 + bool: %s", rf_last_error());
    if (rc == 0) rf_gguf_close(&f);
    free(b.p);
    free(p);
    char *np = tmp_path("does-not-exist.gguf");
    expect_fail_file("missing file", np, "cannot open");
    free(np);
}

/* ---- round trip through the writer -------------------------------------------- */

typedef struct {
    rf_dtype dt;
    int64_t cols, rows;
    float *src; /* [rows * cols] */
} gen_ctx;

static void gen_fill(void *vctx, int64_t row0, int64_t n, void *dst) {
    gen_ctx *g = vctx;
    size_t rb = rf_dtype_row_bytes(g->dt, g->cols);
    for (int64_t r = 0; r < n; r++) {
        const float *x = g->src + (row0 + r) * g->cols;
        uint8_t *o = (uint8_t *)dst + r * rb;
        for (int64_t c = 0; c < g->cols; c++) {
            if (g->dt == RF_F32) memcpy(o + 4 * c, &x[c], 4);
            if (g->dt == RF_F16) ((uint16_t *)o)[c] = rf_f32_to_f16(x[c]);
            if (g->dt == RF_BF16) ((uint16_t *)o)[c] = rf_f32_to_bf16(x[c]);
        }
        if (g->dt == RF_Q8_0) rf_quantize_row_q8_0(x, o, g->cols);
        if (g->dt == RF_Q4_0) rf_quantize_row_q4_0(x, o, g->cols);
    }
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void test_roundtrip(void) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_w_str(w, "general.architecture", "qwen3");
    rf_gguf_w_u32(w, "test.u32", 4000000000u);
    rf_gguf_w_i32(w, "test.i32", -7);
    rf_gguf_w_f32(w, "test.f32", 1e-6f);
    rf_gguf_w_bool(w, "test.bool", 1);
    const char *strs[] = {"a", "", "h\xc3\xa9llo w"};
    rf_gguf_w_str_arr(w, "test.strs", strs, NULL, 3);
    int32_t ints[] = {1, -2, 3, 2147483647};
    rf_gguf_w_i32_arr(w, "test.ints", ints, 4);
    /* one tensor of every type, odd row counts, one 3-D; 5 MB of rows to
     * make the writer call fill more than once */
    struct { const char *name; rf_dtype dt; int nd; int64_t ne[3]; } ts[] = {
        {"f32", RF_F32, 2, {5, 3, 1}},     {"f16", RF_F16, 1, {7, 1, 1}},
        {"bf16", RF_BF16, 3, {3, 2, 5}},   {"q8", RF_Q8_0, 2, {64, 3, 1}},
        {"q4", RF_Q4_0, 2, {96, 5, 1}},    {"big", RF_BF16, 2, {1024, 2600, 1}},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    gen_ctx g[NT];
    rf_rng rng;
    rf_rng_seed(&rng, 7);
    for (int i = 0; i < NT; i++) {
        int64_t n = ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2];
        g[i] = (gen_ctx){ts[i].dt, ts[i].ne[0], n / ts[i].ne[0], malloc((size_t)n * sizeof(float))};
        for (int64_t k = 0; k < n; k++) g[i].src[k] = rf_rng_normal(&rng);
        rf_gguf_w_tensor(w, ts[i].name, ts[i].dt, ts[i].nd, ts[i].ne, gen_fill, &g[i]);
    }
    char *p = tmp_path("rt.gguf");
    CHECK(rf_gguf_writer_finish(w, p) == 0, "writer: %s", rf_last_error());
    rf_gguf_file f;
    int rc = rf_gguf_open(&f, p);
    CHECK(rc == 0, "read back: %s", rf_last_error());
    if (rc) return;
    CHECK(f.version == 3 && f.n_kv == 7 && f.n_tensors == NT, "version %u, %d keys, %d tensors",
          f.version, f.n_kv, f.n_tensors);
    int64_t iv;
    double dv;
    rf_gguf_str sv;
    CHECK(rf_gguf_get_int(&f, "test.u32", &iv) == 0 && iv == 4000000000LL, "u32");
    CHECK(rf_gguf_get_int(&f, "test.i32", &iv) == 0 && iv == -7, "i32");
    CHECK(rf_gguf_get_float(&f, "test.f32", &dv) == 0 && (float)dv == 1e-6f, "f32");
    CHECK(rf_gguf_find(&f, "test.bool")->type == RF_GGUF_BOOL && rf_gguf_find(&f, "test.bool")->val[0] == 1, "bool");
    CHECK(rf_gguf_get_str(&f, "general.architecture", &sv) == 0 && sv.len == 5 && !memcmp(sv.s, "qwen3", 5), "str");
    CHECK(rf_gguf_get_int(&f, "general.architecture", &iv) == -1 && strstr(rf_last_error(), "expected an integer"),
          "a string read as an integer is an error");
    CHECK(rf_gguf_get_int(&f, "absent", &iv) == 1, "absent key");
    const rf_gguf_kv *kv = rf_gguf_find(&f, "test.strs");
    CHECK(kv && kv->arr_type == RF_GGUF_STRING && kv->arr_n == 3 && kv->strs[1].len == 0 &&
              kv->strs[2].len == strlen(strs[2]) && !memcmp(kv->strs[2].s, strs[2], kv->strs[2].len),
          "string array");
    kv = rf_gguf_find(&f, "test.ints");
    CHECK(kv && kv->arr_type == RF_GGUF_INT32 && kv->arr_n == 4 && rf_gguf_arr_int(kv, 1) == -2 &&
              rf_gguf_arr_int(kv, 3) == 2147483647, "int array");
    CHECK(f.data_offset % 32 == 0, "data section aligned (%llu)", (unsigned long long)f.data_offset);
    uint64_t expect_off = 0;
    for (int i = 0; i < NT; i++) {
        const rf_gguf_tensor *t = rf_gguf_find_tensor(&f, ts[i].name);
        CHECK(t != NULL, "tensor %s", ts[i].name);
        if (!t) continue;
        CHECK(t->dtype == ts[i].dt && t->n_dims == ts[i].nd && t->ne[0] == ts[i].ne[0] &&
                  t->ne[1] == ts[i].ne[1] && t->ne[2] == ts[i].ne[2],
              "%s: type/shape", ts[i].name);
        CHECK(t->offset == expect_off, "%s: offset %llu, want %llu (packed, 32-aligned)", ts[i].name,
              (unsigned long long)t->offset, (unsigned long long)expect_off);
        CHECK(((uintptr_t)t->data & 31) == 0, "%s: data pointer 32-byte aligned", ts[i].name);
        size_t want = rf_dtype_row_bytes(ts[i].dt, ts[i].ne[0]) * (size_t)(g[i].rows);
        CHECK(t->nbytes == want, "%s: %zu bytes, want %zu", ts[i].name, t->nbytes, want);
        uint8_t *exp = malloc(want);
        gen_fill(&g[i], 0, g[i].rows, exp);
        CHECK(!memcmp(exp, t->data, want), "%s: bytes differ", ts[i].name);
        free(exp);
        expect_off = (t->offset + want + 31) / 32 * 32;
        CHECK(rf_gguf_ggml_type(ts[i].dt) == t->ggml_type, "%s: ggml type id", ts[i].name);
    }
    /* the layout by hand: magic, version, counts; the first key */
    const uint8_t *m = f.map;
    CHECK(!memcmp(m, "GGUF", 4) && m[4] == 3 && rd64(m + 8) == NT && rd64(m + 16) == 7, "header bytes");
    CHECK(rd64(m + 24) == 20 && !memcmp(m + 32, "general.architecture", 20) && m[52] == RF_GGUF_STRING,
          "first key bytes");
    CHECK(f.map_size == f.data_offset + f.tensors[NT - 1].offset + f.tensors[NT - 1].nbytes,
          "the file ends right after the last tensor");
    /* ggml's type ids */
    CHECK(rf_gguf_ggml_type(RF_F32) == 0 && rf_gguf_ggml_type(RF_F16) == 1 && rf_gguf_ggml_type(RF_Q4_0) == 2 &&
              rf_gguf_ggml_type(RF_Q8_0) == 8 && rf_gguf_ggml_type(RF_BF16) == 30, "ggml type ids");
    rf_gguf_close(&f);

    /* header fuzz: random bytes in the header region */
    size_t hdr = 0;
    {
        rf_gguf_file f2;
        rf_gguf_open(&f2, p);
        hdr = f2.data_offset;
        rf_gguf_close(&f2);
    }
    size_t len;
    char *orig = rf_read_file(p, &len);
    char *fp = tmp_path("fuzz.gguf");
    int opened = 0, failed = 0, bad_msg = 0, outside = 0;
    rf_rng_seed(&rng, 99);
    for (int it = 0; it < 400; it++) {
        char *buf = malloc(len);
        memcpy(buf, orig, len);
        int k = 1 + (int)rf_rng_below(&rng, 4);
        for (int j = 0; j < k; j++) {
            size_t off = rf_rng_below(&rng, hdr);
            /* half the time a small change to a count/length byte, else any byte */
            buf[off] = it % 2 ? (char)rf_rng_below(&rng, 256) : (char)(buf[off] + 1);
        }
        FILE *o = fopen(fp, "wb");
        fwrite(buf, 1, len, o);
        fclose(o);
        free(buf);
        rf_gguf_file f3;
        if (rf_gguf_open(&f3, fp) == 0) {
            opened++;
            for (int i = 0; i < f3.n_tensors; i++) {
                const uint8_t *d = f3.tensors[i].data;
                if (d < (const uint8_t *)f3.map || d + f3.tensors[i].nbytes > (const uint8_t *)f3.map + f3.map_size)
                    outside++;
            }
            rf_gguf_close(&f3);
        } else {
            failed++;
            const char *e = rf_last_error();
            if (!*e || strchr(e, '\n') || !strstr(e, fp)) bad_msg++;
        }
    }
    printf("fuzz: %d opened, %d rejected\n", opened, failed);
    CHECK(failed > 100, "the fuzz should mostly produce invalid files (%d rejected)", failed);
    CHECK(bad_msg == 0, "%d rejections without a one-line message naming the file", bad_msg);
    CHECK(outside == 0, "%d tensors outside the file after a fuzzed open", outside);
    free(orig);
    free(fp);
    free(p);
    for (int i = 0; i < NT; i++) free(g[i].src);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_io_gguf.%d", (int)getpid());
    rf_mkdir_p(g_dir);
    test_corrupt();
    test_roundtrip();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_summary("io_gguf");
}
