/* gguf.c - read (mmap + validate) and write GGUF files (layout in gguf.h).
 *
 * The reader trusts nothing in the file: every count is checked against the
 * bytes left before memory is allocated for it, every read is bounds-checked
 * by a cursor, and the tensors' byte ranges must lie inside the data section
 * without overlapping, at offsets aligned as general.alignment says. As with
 * safetensors, weights are never copied: tensors point into a read-only mmap.
 * The writer keeps the metadata in memory and streams the tensors' bytes,
 * so a file larger than RAM can be written. */
#include "io/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/quant.h"
#include "io/spans.h"
#include "util/util.h"

/* ggml's GGML_MAX_NAME: llama.cpp refuses longer tensor names */
#define RF_GGML_MAX_NAME 64
/* a sane bound for metadata keys */
#define RF_GGUF_MAX_KEY 4096

uint32_t rf_gguf_ggml_type(rf_dtype t) { return rf_dtype_ggml_id(t); }

int rf_gguf_dtype(uint32_t ggml_type, rf_dtype *out) { return rf_dtype_from_ggml(ggml_type, out); }

/* size of a fixed-size metadata value type, 0 for STRING / ARRAY / unknown */
static size_t value_size(uint32_t type) {
    switch (type) {
    case RF_GGUF_UINT8: case RF_GGUF_INT8: case RF_GGUF_BOOL: return 1;
    case RF_GGUF_UINT16: case RF_GGUF_INT16: return 2;
    case RF_GGUF_UINT32: case RF_GGUF_INT32: case RF_GGUF_FLOAT32: return 4;
    case RF_GGUF_UINT64: case RF_GGUF_INT64: case RF_GGUF_FLOAT64: return 8;
    }
    return 0;
}

static const char *type_name(uint32_t type) {
    static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

/* ---- reader ------------------------------------------------------------------ */

/* a bounds-checked cursor over the mmap; the first failure sets the error */
typedef struct {
    const uint8_t *base, *p, *end;
    const char *path;
    const char *what; /* the item being read, for error messages */
} cursor;

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t left(const cursor *c) { return (size_t)(c->end - c->p); }

static int need(cursor *c, uint64_t n) {
    if (n > left(c)) {
        rf_set_error("%s: truncated: %s at byte %zu needs %" PRIu64 " bytes, %zu left", c->path,
                     c->what, (size_t)(c->p - c->base), n, left(c));
        return -1;
    }
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v) {
    if (need(c, 4)) return -1;
    *v = le32(c->p);
    c->p += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v) {
    if (need(c, 8)) return -1;
    *v = le64(c->p);
    c->p += 8;
    return 0;
}

static int rd_str(cursor *c, rf_gguf_str *s) {
    uint64_t n;
    if (rd_u64(c, &n)) return -1;
    if (n > left(c)) {
        rf_set_error("%s: %s at byte %zu: string length %" PRIu64 " runs past the end of the file",
                     c->path, c->what, (size_t)(c->p - c->base) - 8, n);
        return -1;
    }
    s->s = (const char *)c->p;
    s->len = (size_t)n;
    c->p += n;
    return 0;
}

/* keys and tensor names end up in one-line error messages */
static int clean_name(const rf_gguf_str *s) {
    for (size_t i = 0; i < s->len; i++)
        if ((unsigned char)s->s[i] < 0x20 || s->s[i] == 0x7f) return 0;
    return s->len > 0;
}

/* one metadata value of `type` (scalars, strings, arrays of those) */
static int rd_value(cursor *c, rf_gguf_kv *kv) {
    kv->val = c->p;
    if (kv->type == RF_GGUF_STRING) {
        kv->strs = rf_malloc(sizeof(rf_gguf_str));
        return rd_str(c, kv->strs);
    }
    if (kv->type == RF_GGUF_ARRAY) {
        if (rd_u32(c, &kv->arr_type) || rd_u64(c, &kv->arr_n)) return -1;
        kv->val = c->p;
        if (kv->arr_type == RF_GGUF_ARRAY) {
            rf_set_error("%s: key '%s': arrays of arrays are not supported", c->path, kv->key);
            return -1;
        }
        if (kv->arr_type == RF_GGUF_STRING) {
            /* each element is at least its 8-byte length: bound before allocating */
            if (kv->arr_n > left(c) / 8) {
                rf_set_error("%s: key '%s': %" PRIu64 " strings cannot fit in the %zu bytes left",
                             c->path, kv->key, kv->arr_n, left(c));
                return -1;
            }
            kv->strs = rf_malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof(rf_gguf_str));
            for (uint64_t i = 0; i < kv->arr_n; i++)
                if (rd_str(c, &kv->strs[i])) return -1;
            return 0;
        }
        size_t es = value_size(kv->arr_type);
        if (!es) {
            rf_set_error("%s: key '%s': unknown array element type %u", c->path, kv->key,
                         kv->arr_type);
            return -1;
        }
        if (kv->arr_n > left(c) / es) {
            rf_set_error("%s: key '%s': %" PRIu64 " %s elements run past the end of the file",
                         c->path, kv->key, kv->arr_n, type_name(kv->arr_type));
            return -1;
        }
        if (kv->arr_type == RF_GGUF_BOOL)
            for (uint64_t i = 0; i < kv->arr_n; i++)
                if (c->p[i] > 1) {
                    rf_set_error("%s: key '%s': bool element %" PRIu64 " is %u (must be 0 or 1)",
                                 c->path, kv->key, i, c->p[i]);
                    return -1;
                }
        c->p += kv->arr_n * es;
        return 0;
    }
    size_t es = value_size(kv->type);
    if (!es) {
        rf_set_error("%s: key '%s': unknown value type %u", c->path, kv->key, kv->type);
        return -1;
    }
    if (need(c, es)) return -1;
    if (kv->type == RF_GGUF_BOOL && c->p[0] > 1) {
        rf_set_error("%s: key '%s': bool value is %u (must be 0 or 1)", c->path, kv->key, c->p[0]);
        return -1;
    }
    c->p += es;
    return 0;
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* first name that occurs twice in names[0..n) (sorted in place), or NULL */
static const char *find_duplicate(char **names, int n) {
    qsort(names, (size_t)n, sizeof(char *), str_cmp);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

static int rd_tensor_info(cursor *c, rf_gguf_tensor *t, int idx) {
    rf_gguf_str name;
    c->what = "a tensor name";
    if (rd_str(c, &name)) return -1;
    if (!clean_name(&name) || name.len >= RF_GGML_MAX_NAME) {
        rf_set_error("%s: tensor %d: name is empty, longer than %d bytes or holds control characters",
                     c->path, idx, RF_GGML_MAX_NAME - 1);
        return -1;
    }
    t->name = strndup(name.s, name.len);
    if (!t->name) rf_die("out of memory");
    uint32_t nd;
    c->what = "a tensor's dimensions";
    if (rd_u32(c, &nd)) return -1;
    if (nd < 1 || nd > RF_GGUF_MAX_DIMS) {
        rf_set_error("%s: tensor '%s': %u dimensions (1 to %d supported)", c->path, t->name, nd,
                     RF_GGUF_MAX_DIMS);
        return -1;
    }
    t->n_dims = (int)nd;
    uint64_t n_el = 1;
    for (int i = 0; i < RF_GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t d;
        if (rd_u64(c, &d)) return -1;
        /* elements stay below 2^62, so byte counts cannot overflow */
        if (d > (UINT64_C(1) << 62) || (d != 0 && n_el > (UINT64_C(1) << 62) / d)) {
            rf_set_error("%s: tensor '%s': dimensions are absurdly large", c->path, t->name);
            return -1;
        }
        t->ne[i] = (int64_t)d;
        n_el *= d;
    }
    uint32_t ty;
    c->what = "a tensor's type and offset";
    if (rd_u32(c, &ty) || rd_u64(c, &t->offset)) return -1;
    t->ggml_type = ty;
    if (rf_gguf_dtype(ty, &t->dtype)) {
        const char *tn = rf_ggml_type_name(ty);
        if (tn)
            rf_set_error("%s: tensor '%s': ggml type %s is not supported (re-quantize the f16 or bf16 model "
                         "with llama-quantize to one of %s)", c->path, t->name, tn, RF_GGUF_READ_TYPES);
        else
            rf_set_error("%s: tensor '%s': ggml type id %u is not a ggml type this reader knows (types read: "
                         "%s)", c->path, t->name, ty, RF_GGUF_READ_TYPES);
        return -1;
    }
    size_t row = rf_dtype_row_bytes(t->dtype, t->ne[0]);
    if (row == 0 && t->ne[0] != 0) {
        rf_set_error("%s: tensor '%s': %s rows of %" PRId64 " weights are not whole blocks of %d",
                     c->path, t->name, rf_dtype_name(t->dtype), t->ne[0], rf_dtype_block_elems(t->dtype));
        return -1;
    }
    uint64_t rows = t->ne[0] ? n_el / (uint64_t)t->ne[0] : 0;
    t->nbytes = (size_t)(rows * row);
    return 0;
}

int rf_gguf_open(rf_gguf_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (rf_map_file(path, 24, "GGUF", &f->path, &f->fd, &f->map, &f->map_size)) return -1;
    uint64_t size = f->map_size;
    const uint8_t *map = f->map;
    f->alignment = RF_GGUF_DEFAULT_ALIGNMENT;

    cursor c = {map, map, (const uint8_t *)map + size, path, "the header"};
    rf_span *spans = NULL;
    char **names = NULL;
    if (memcmp(c.p, "GGUF", 4)) {
        rf_set_error("%s: not a GGUF file (the first 4 bytes are not \"GGUF\")", path);
        goto fail;
    }
    c.p += 4;
    uint64_t n_tensors = 0, n_kv = 0; /* the 24 bytes rf_map_file guarantees hold both */
    rd_u32(&c, &f->version);
    if (f->version != 2 && f->version != 3) {
        rf_set_error("%s: GGUF version %u is not supported (only 2 and 3)", path, f->version);
        goto fail;
    }
    rd_u64(&c, &n_tensors);
    rd_u64(&c, &n_kv);
    /* the smallest entry is a key of 1 byte + type + a 1-byte value (13 bytes),
     * the smallest tensor info a 1-byte name + 1 dim (33 bytes): bound the
     * counts by what the file can hold before allocating anything */
    if (n_kv > left(&c) / 13 || n_kv > INT32_MAX) {
        rf_set_error("%s: %" PRIu64 " metadata entries cannot fit in a file of %" PRIu64 " bytes",
                     path, n_kv, size);
        goto fail;
    }
    if (n_tensors > left(&c) / 33 || n_tensors > INT32_MAX) {
        rf_set_error("%s: %" PRIu64 " tensors cannot fit in a file of %" PRIu64 " bytes", path,
                     n_tensors, size);
        goto fail;
    }

    f->kv = rf_calloc((size_t)(n_kv ? n_kv : 1), sizeof(rf_gguf_kv));
    for (uint64_t i = 0; i < n_kv; i++) {
        rf_gguf_kv *kv = &f->kv[i];
        rf_gguf_str key;
        c.what = "a metadata key";
        if (rd_str(&c, &key)) goto fail;
        if (!clean_name(&key) || key.len > RF_GGUF_MAX_KEY) {
            rf_set_error("%s: metadata entry %" PRIu64 ": key is empty, too long or holds control "
                         "characters", path, i);
            goto fail;
        }
        kv->key = strndup(key.s, key.len);
        if (!kv->key) rf_die("out of memory");
        f->n_kv = (int)i + 1;
        c.what = kv->key;
        if (rd_u32(&c, &kv->type) || rd_value(&c, kv)) goto fail;
    }
    names = rf_malloc((size_t)(f->n_kv ? f->n_kv : 1) * sizeof(char *));
    for (int i = 0; i < f->n_kv; i++) names[i] = f->kv[i].key;
    const char *dup = find_duplicate(names, f->n_kv);
    if (dup) {
        rf_set_error("%s: metadata key '%s' occurs twice", path, dup);
        goto fail;
    }

    const rf_gguf_kv *al = rf_gguf_find(f, "general.alignment");
    if (al) {
        uint32_t a = al->type == RF_GGUF_UINT32 ? le32(al->val) : 0;
        /* below 8, f32 / f16 / quantized blocks may start at odd addresses
         * (misaligned loads, as the weights are used in place) */
        if (a < 8 || (a & (a - 1)) || a > (1u << 20)) {
            rf_set_error("%s: general.alignment %u is not supported: it must be a uint32 power of two in [8, 2^20]",
                         path, a);
            goto fail;
        }
        f->alignment = a;
    }

    f->tensors = rf_calloc((size_t)(n_tensors ? n_tensors : 1), sizeof(rf_gguf_tensor));
    for (uint64_t i = 0; i < n_tensors; i++) {
        f->n_tensors = (int)i + 1;
        if (rd_tensor_info(&c, &f->tensors[i], (int)i)) goto fail;
    }
    names = realloc(names, (size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof(char *));
    if (!names) rf_die("out of memory");
    for (int i = 0; i < f->n_tensors; i++) names[i] = f->tensors[i].name;
    dup = find_duplicate(names, f->n_tensors);
    if (dup) {
        rf_set_error("%s: tensor '%s' occurs twice", path, dup);
        goto fail;
    }

    /* the data section starts at the next multiple of the alignment */
    uint64_t hdr_end = (uint64_t)(c.p - c.base);
    f->data_offset = (hdr_end + f->alignment - 1) / f->alignment * f->alignment;
    if (f->data_offset > size && f->n_tensors > 0) {
        rf_set_error("%s: truncated: the data section would start at byte %" PRIu64
                     " past the end (size %" PRIu64 ")", path, f->data_offset, size);
        goto fail;
    }
    uint64_t data_size = f->data_offset < size ? size - f->data_offset : 0;
    const uint8_t *data = (const uint8_t *)map + f->data_offset;
    spans = rf_calloc((size_t)(f->n_tensors ? f->n_tensors : 1), sizeof(rf_span));
    for (int i = 0; i < f->n_tensors; i++) {
        rf_gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment) {
            rf_set_error("%s: tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                         path, t->name, t->offset, f->alignment);
            goto fail;
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            rf_set_error("%s: tensor '%s': bytes [%" PRIu64 ", %" PRIu64 ") of the data section run "
                         "past the end of the file (data section: %" PRIu64 " bytes)",
                         path, t->name, t->offset, t->offset + (uint64_t)t->nbytes, data_size);
            goto fail;
        }
        t->data = data + t->offset;
        spans[i] = (rf_span){t->offset, t->offset + t->nbytes, i};
    }
    int prev = -1, i = rf_spans_overlap(spans, f->n_tensors, &prev);
    if (i >= 0) {
        rf_set_error("%s: tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64
                     ", %" PRIu64 ")", path, f->tensors[spans[i].idx].name, spans[i].b,
                     spans[i].e, f->tensors[spans[prev].idx].name, spans[prev].b, spans[prev].e);
        goto fail;
    }
    free(spans);
    free(names);
    return 0;
fail:
    free(spans);
    free(names);
    rf_gguf_close(f);
    return -1;
}

void rf_gguf_close(rf_gguf_file *f) {
    for (int i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].strs);
    }
    free(f->kv);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    rf_unmap_file(f->path, f->fd, f->map, f->map_size);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const rf_gguf_kv *rf_gguf_find(const rf_gguf_file *f, const char *key) {
    for (int i = 0; i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* integer value of type `type` at p; *ok = 0 for non-integer types */
static int64_t int_at(uint32_t type, const uint8_t *p, int *ok) {
    *ok = 1;
    switch (type) {
    case RF_GGUF_UINT8: return p[0];
    case RF_GGUF_INT8: return (int8_t)p[0];
    case RF_GGUF_UINT16: return (uint16_t)(p[0] | p[1] << 8);
    case RF_GGUF_INT16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case RF_GGUF_UINT32: return le32(p);
    case RF_GGUF_INT32: return (int32_t)le32(p);
    case RF_GGUF_UINT64: {
        uint64_t v = le64(p);
        if (v > INT64_MAX) *ok = 0;
        return (int64_t)v;
    }
    case RF_GGUF_INT64: return (int64_t)le64(p);
    }
    *ok = 0;
    return 0;
}

int rf_gguf_get_int(const rf_gguf_file *f, const char *key, int64_t *out) {
    const rf_gguf_kv *kv = rf_gguf_find(f, key);
    if (!kv) return 1;
    int ok;
    int64_t v = int_at(kv->type, kv->val, &ok);
    if (!ok) {
        rf_set_error("%s: key '%s' is a %s, expected an integer", f->path, key, type_name(kv->type));
        return -1;
    }
    *out = v;
    return 0;
}

int64_t rf_gguf_arr_int(const rf_gguf_kv *kv, uint64_t i) {
    int ok;
    return int_at(kv->arr_type, kv->val + i * value_size(kv->arr_type), &ok);
}

int rf_gguf_get_float(const rf_gguf_file *f, const char *key, double *out) {
    const rf_gguf_kv *kv = rf_gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type == RF_GGUF_FLOAT32) {
        uint32_t u = le32(kv->val);
        float x;
        memcpy(&x, &u, 4);
        *out = x;
    } else if (kv->type == RF_GGUF_FLOAT64) {
        uint64_t u = le64(kv->val);
        memcpy(out, &u, 8);
    } else {
        rf_set_error("%s: key '%s' is a %s, expected a float", f->path, key, type_name(kv->type));
        return -1;
    }
    return 0;
}

int rf_gguf_get_str(const rf_gguf_file *f, const char *key, rf_gguf_str *out) {
    const rf_gguf_kv *kv = rf_gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != RF_GGUF_STRING) {
        rf_set_error("%s: key '%s' is a %s, expected a string", f->path, key, type_name(kv->type));
        return -1;
    }
    *out = kv->strs[0];
    return 0;
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct {
    char *name;
    rf_dtype dtype;
    int n_dims;
    int64_t ne[RF_GGUF_MAX_DIMS];
    int64_t rows;    /* product of ne[1..] */
    size_t row_bytes, nbytes;
    rf_gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct rf_gguf_writer {
    uint8_t *kv; /* the serialised metadata entries */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    void **owned; /* freed with the writer */
    int n_owned;
};

rf_gguf_writer *rf_gguf_writer_new(void) { return rf_calloc(1, sizeof(rf_gguf_writer)); }

static void put(rf_gguf_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        w->kv_cap = (w->kv_len + n) * 2 + 4096;
        w->kv = realloc(w->kv, w->kv_cap);
        if (!w->kv) rf_die("out of memory");
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void put_u32(rf_gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}
static void put_u64(rf_gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}
static void put_str(rf_gguf_writer *w, const char *s, size_t n) {
    put_u64(w, n);
    put(w, s, n);
}
static void put_key(rf_gguf_writer *w, const char *key, uint32_t type) {
    put_str(w, key, strlen(key));
    put_u32(w, type);
    w->n_kv++;
}

void rf_gguf_w_str(rf_gguf_writer *w, const char *key, const char *val) {
    put_key(w, key, RF_GGUF_STRING);
    put_str(w, val, strlen(val));
}
void rf_gguf_w_u32(rf_gguf_writer *w, const char *key, uint32_t val) {
    put_key(w, key, RF_GGUF_UINT32);
    put_u32(w, val);
}
void rf_gguf_w_i32(rf_gguf_writer *w, const char *key, int32_t val) {
    put_key(w, key, RF_GGUF_INT32);
    put_u32(w, (uint32_t)val);
}
void rf_gguf_w_f32(rf_gguf_writer *w, const char *key, float val) {
    uint32_t u;
    memcpy(&u, &val, 4);
    put_key(w, key, RF_GGUF_FLOAT32);
    put_u32(w, u);
}
void rf_gguf_w_bool(rf_gguf_writer *w, const char *key, int val) {
    uint8_t b = val ? 1 : 0;
    put_key(w, key, RF_GGUF_BOOL);
    put(w, &b, 1);
}
void rf_gguf_w_str_arr(rf_gguf_writer *w, const char *key, const char *const *vals,
                       const size_t *lens, size_t n) {
    put_key(w, key, RF_GGUF_ARRAY);
    put_u32(w, RF_GGUF_STRING);
    put_u64(w, n);
    for (size_t i = 0; i < n; i++) put_str(w, vals[i], lens ? lens[i] : strlen(vals[i]));
}
void rf_gguf_w_i32_arr(rf_gguf_writer *w, const char *key, const int32_t *vals, size_t n) {
    put_key(w, key, RF_GGUF_ARRAY);
    put_u32(w, RF_GGUF_INT32);
    put_u64(w, n);
    for (size_t i = 0; i < n; i++) put_u32(w, (uint32_t)vals[i]);
}

void rf_gguf_w_tensor(rf_gguf_writer *w, const char *name, rf_dtype dtype, int n_dims,
                      const int64_t *ne, rf_gguf_fill_fn fill, void *ctx) {
    if (n_dims < 1 || n_dims > RF_GGUF_MAX_DIMS || strlen(name) >= RF_GGML_MAX_NAME)
        rf_die("gguf writer: tensor '%s' with %d dims", name, n_dims);
    w->t = rf_grow(w->t, sizeof(wtensor), w->n_t, &w->cap_t, 64);
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = rf_strdup(name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    t->rows = 1;
    for (int i = 0; i < RF_GGUF_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    for (int i = 1; i < n_dims; i++) t->rows *= ne[i];
    t->row_bytes = rf_dtype_row_bytes(dtype, ne[0]);
    if (t->row_bytes == 0) rf_die("gguf writer: tensor '%s': rows of %lld in %s", name,
                                  (long long)ne[0], rf_dtype_name(dtype));
    t->nbytes = t->row_bytes * (size_t)t->rows;
    t->fill = fill;
    t->ctx = ctx;
}

void rf_gguf_w_own(rf_gguf_writer *w, void *p) {
    w->owned = realloc(w->owned, (size_t)(w->n_owned + 1) * sizeof(void *));
    if (!w->owned) rf_die("out of memory");
    w->owned[w->n_owned++] = p;
}

void rf_gguf_writer_free(rf_gguf_writer *w) {
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

static size_t align_up(size_t x) {
    return (x + RF_GGUF_DEFAULT_ALIGNMENT - 1) / RF_GGUF_DEFAULT_ALIGNMENT * RF_GGUF_DEFAULT_ALIGNMENT;
}

/* rows per fill call: about 4 MB, at least one row */
#define FILL_BYTES ((size_t)4 << 20)

int rf_gguf_writer_finish(rf_gguf_writer *w, const char *path) {
    /* the header: magic, version, counts, metadata, tensor infos (the
     * metadata buffer is reused: tensor infos are appended to it) */
    size_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        put_str(w, t->name, strlen(t->name));
        put_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(w, (uint64_t)t->ne[d]);
        put_u32(w, rf_gguf_ggml_type(t->dtype));
        put_u64(w, off);
        off = align_up(off + t->nbytes);
    }
    uint8_t head[24];
    memcpy(head, "GGUF", 4);
    uint32_t version = 3;
    uint64_t nt = (uint64_t)w->n_t;
    for (int i = 0; i < 4; i++) head[4 + i] = (uint8_t)(version >> (8 * i));
    for (int i = 0; i < 8; i++) head[8 + i] = (uint8_t)(nt >> (8 * i));
    for (int i = 0; i < 8; i++) head[16 + i] = (uint8_t)(w->n_kv >> (8 * i));

    static const uint8_t zeros[RF_GGUF_DEFAULT_ALIGNMENT];
    char *tmp;
    uint8_t *buf = NULL;
    int rc = -1;
    int fd = rf_atomic_create(path, &tmp);
    if (fd < 0) goto done;
    size_t hdr = sizeof head + w->kv_len;
    if (rf_write_all(fd, head, sizeof head, tmp) || rf_write_all(fd, w->kv, w->kv_len, tmp) ||
        rf_write_all(fd, zeros, align_up(hdr) - hdr, tmp))
        goto fail;
    for (int i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        int64_t chunk = (int64_t)(FILL_BYTES / t->row_bytes);
        if (chunk < 1) chunk = 1;
        if (!buf) buf = rf_malloc(FILL_BYTES > t->row_bytes ? FILL_BYTES : t->row_bytes);
        else if (t->row_bytes > FILL_BYTES) buf = realloc(buf, t->row_bytes);
        if (!buf) rf_die("out of memory");
        for (int64_t r0 = 0; r0 < t->rows; r0 += chunk) {
            int64_t n = t->rows - r0 < chunk ? t->rows - r0 : chunk;
            t->fill(t->ctx, r0, n, buf);
            if (rf_write_all(fd, buf, (size_t)n * t->row_bytes, tmp)) goto fail;
        }
        /* pad to the next tensor's aligned offset (none after the last) */
        if (i + 1 < w->n_t && rf_write_all(fd, zeros, align_up(t->nbytes) - t->nbytes, tmp)) goto fail;
    }
    rc = rf_atomic_commit(fd, tmp, path);
    goto done;
fail:
    rf_atomic_abandon(fd, tmp);
done:
    free(buf);
    free(tmp);
    rf_gguf_writer_free(w);
    return rc;
}
