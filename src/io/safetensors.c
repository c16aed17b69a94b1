/* safetensors.c - read (mmap + validate) and write .safetensors files.
 *
 * File layout (https://github.com/huggingface/safetensors):
 *   [8 bytes]  N, little-endian u64: length of the JSON header
 *   [N bytes]  JSON object: name -> {"dtype", "shape", "data_offsets": [b, e]}
 *              plus an optional "__metadata__": {str: str}
 *   [rest]     the data section; offsets are relative to its start.
 * The reader never copies weights: tensors point into a private read-only
 * mmap, so opening a 16 GB checkpoint costs a header parse and page faults
 * happen later, only for the weights actually used. */
#include "io/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/spans.h"
#include "util/util.h"

/* The reference implementation refuses headers above 100 MB too. */
#define RF_ST_MAX_HEADER (100u * 1024u * 1024u)

/* ---- dtypes ---------------------------------------------------------------- */

int rf_dtype_parse(const char *s, rf_dtype *out) {
    static const struct { const char *name; rf_dtype t; } names[] = {
        {"F32", RF_F32},  {"float32", RF_F32},  {"f32", RF_F32},   {"fp32", RF_F32},
        {"F16", RF_F16},  {"float16", RF_F16},  {"f16", RF_F16},   {"fp16", RF_F16},
        {"BF16", RF_BF16}, {"bfloat16", RF_BF16}, {"bf16", RF_BF16},
        {"torch.float32", RF_F32}, {"torch.float16", RF_F16}, {"torch.bfloat16", RF_BF16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    return -1;
}

/* ---- reader ------------------------------------------------------------------ */

static void free_tensors(rf_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* a JSON integer that fits a non-negative int64, else -1 */
static int64_t json_nonneg(const json_t *v) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Parse one header entry into t. The data section spans [0, data_size). */
static int parse_tensor(rf_tensor *t, const char *path, const char *name, json_t *v,
                        const uint8_t *data, uint64_t data_size, uint64_t file_size,
                        uint64_t *begin_out, uint64_t *end_out) {
    if (!json_is_object(v)) {
        rf_set_error("%s: tensor '%s': header entry is not a JSON object", path, name);
        return -1;
    }
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
        rf_set_error("%s: tensor '%s': header entry needs \"dtype\" (string), \"shape\" and "
                     "\"data_offsets\" (arrays)", path, name);
        return -1;
    }
    const char *ds = json_string_value(jd);
    /* only the exact safetensors spellings are valid in a file */
    if (strcmp(ds, "F32") && strcmp(ds, "F16") && strcmp(ds, "BF16")) {
        rf_set_error("%s: tensor '%s': dtype %s is not supported (only F32, F16, BF16)", path,
                     name, ds);
        return -1;
    }
    rf_dtype_parse(ds, &t->dtype);
    size_t nd = json_array_size(js);
    if (nd > RF_MAX_DIMS) {
        rf_set_error("%s: tensor '%s': %zu dimensions (at most %d supported)", path, name, nd,
                     RF_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)nd;
    /* elements, with overflow checks: stays below 2^62 */
    uint64_t n_el = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d = json_nonneg(json_array_get(js, i));
        if (d < 0) {
            rf_set_error("%s: tensor '%s': shape[%zu] is not a non-negative integer", path, name, i);
            return -1;
        }
        t->shape[i] = d;
        if (d != 0 && n_el > (UINT64_C(1) << 62) / (uint64_t)d) {
            rf_set_error("%s: tensor '%s': shape is absurdly large", path, name);
            return -1;
        }
        n_el *= (uint64_t)d;
    }
    int64_t b = json_array_size(jo) == 2 ? json_nonneg(json_array_get(jo, 0)) : -1;
    int64_t e = json_array_size(jo) == 2 ? json_nonneg(json_array_get(jo, 1)) : -1;
    if (b < 0 || e < 0) {
        rf_set_error("%s: tensor '%s': data_offsets must be two non-negative integers", path, name);
        return -1;
    }
    if (b > e) {
        rf_set_error("%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 ") are out of order",
                     path, name, b, e);
        return -1;
    }
    if ((uint64_t)e > data_size) {
        rf_set_error("%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
                     ") run past the end of the file (size %" PRIu64 ")",
                     path, name, b, e, file_size);
        return -1;
    }
    uint64_t want = n_el * rf_dtype_size(t->dtype);
    if ((uint64_t)(e - b) != want) {
        char sh[128];
        size_t len = (size_t)snprintf(sh, sizeof sh, "[");
        for (int i = 0; i < t->ndim && len < sizeof sh - 24; i++)
            len += (size_t)snprintf(sh + len, sizeof sh - len, "%s%" PRId64, i ? ", " : "", t->shape[i]);
        snprintf(sh + len, sizeof sh - len, "]");
        rf_set_error("%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 ") hold %" PRId64
                     " bytes but shape %s in %s needs %" PRIu64,
                     path, name, b, e, e - b, sh, ds, want);
        return -1;
    }
    t->nbytes = (size_t)want;
    t->data = data + b;
    /* the weights are used in place: an element that is not aligned to its
     * size (an odd header length, or an odd offset) would be a misaligned
     * load (undefined behaviour, and slow where it works) */
    if ((uintptr_t)t->data % rf_dtype_size(t->dtype)) {
        rf_set_error("%s: tensor '%s': its data (data_offsets %" PRId64 " after the header) is not aligned to its "
                     "%zu-byte elements: the header length or the offset is odd (re-save the file; safetensors "
                     "pads its header to 8 bytes)", path, name, b, rf_dtype_size(t->dtype));
        return -1;
    }
    *begin_out = (uint64_t)b;
    *end_out = (uint64_t)e;
    return 0;
}

int rf_st_open(rf_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (rf_map_file(path, 8, "safetensors", &f->path, &f->fd, &f->map, &f->map_size)) return -1;
    uint64_t size = f->map_size;
    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i]; /* little-endian on any host */
    if (hlen > size - 8) {
        rf_set_error("%s: header length %" PRIu64 " runs past the end of the file (size %" PRIu64
                     ")", path, hlen, size);
        goto fail;
    }
    if (hlen > RF_ST_MAX_HEADER || hlen < 2) {
        rf_set_error("%s: implausible header length %" PRIu64, path, hlen);
        goto fail;
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson quotes the text near the error: keep the message one line */
        for (char *c = jerr.text; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        rf_set_error("%s: header is not valid JSON: %s (at byte %d of the header)", path, jerr.text,
                     jerr.position);
        goto fail;
    }
    if (!json_is_object(root)) {
        rf_set_error("%s: header is not a JSON object", path);
        json_decref(root);
        goto fail;
    }
    const uint8_t *data = p + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    size_t cap = json_object_size(root);
    f->tensors = rf_calloc(cap ? cap : 1, sizeof(rf_tensor));
    rf_span *spans = rf_calloc(cap ? cap : 1, sizeof(rf_span));
    const char *key;
    json_t *val;
    int bad = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val) && !json_is_null(val)) {
                rf_set_error("%s: \"__metadata__\" is not a JSON object", path);
                bad = 1;
                break;
            }
            continue;
        }
        /* names end up in one-line error messages, and no real weight name
         * holds control characters */
        for (const char *c = key; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                rf_set_error("%s: a tensor name contains control characters", path);
                bad = 1;
                break;
            }
        if (bad) break;
        rf_tensor *t = &f->tensors[f->n_tensors];
        uint64_t b, e;
        if (parse_tensor(t, path, key, val, data, data_size, size, &b, &e) != 0) {
            bad = 1;
            break;
        }
        t->name = rf_strdup(key);
        spans[f->n_tensors] = (rf_span){b, e, f->n_tensors};
        f->n_tensors++;
    }
    /* no two tensors may share bytes: sort by start, each must begin at or
     * after the previous end (empty tensors take no room and are skipped) */
    int prev = -1, i = bad ? -1 : rf_spans_overlap(spans, f->n_tensors, &prev);
    if (i >= 0) {
        const rf_tensor *a = &f->tensors[spans[prev].idx], *c = &f->tensors[spans[i].idx];
        rf_set_error("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     ") overlap tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                     path, c->name, spans[i].b, spans[i].e, a->name, spans[prev].b, spans[prev].e);
        bad = 1;
    }
    free(spans);
    json_decref(root);
    if (bad) goto fail;
    return 0;
fail:
    rf_st_close(f);
    return -1;
}

void rf_st_close(rf_st_file *f) {
    if (f->tensors) free_tensors(f->tensors, f->n_tensors);
    rf_unmap_file(f->path, f->fd, f->map, f->map_size);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const rf_tensor *rf_st_find(const rf_st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct {
    char *name;
    rf_dtype dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    size_t nbytes;
    const void *data;   /* borrowed bytes, or NULL when fill is set */
    rf_st_fill_fn fill; /* produces the bytes on demand */
    void *ctx;
} wtensor;

struct rf_st_writer {
    wtensor *t;
    int n, cap;
};

rf_st_writer *rf_st_writer_new(void) { return rf_calloc(1, sizeof(rf_st_writer)); }

static wtensor *writer_push(rf_st_writer *w, const char *name, rf_dtype dtype, int ndim,
                            const int64_t *shape) {
    if (ndim < 0 || ndim > RF_MAX_DIMS) rf_die("safetensors writer: %d dims for '%s'", ndim, name);
    w->t = rf_grow(w->t, sizeof(wtensor), w->n, &w->cap, 64);
    wtensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = rf_strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->nbytes = n * rf_dtype_size(dtype);
    return t;
}

void rf_st_writer_add(rf_st_writer *w, const char *name, rf_dtype dtype, int ndim,
                      const int64_t *shape, const void *data) {
    writer_push(w, name, dtype, ndim, shape)->data = data;
}

void rf_st_writer_add_gen(rf_st_writer *w, const char *name, rf_dtype dtype, int ndim,
                          const int64_t *shape, rf_st_fill_fn fill, void *ctx) {
    wtensor *t = writer_push(w, name, dtype, ndim, shape);
    t->fill = fill;
    t->ctx = ctx;
}

size_t rf_st_writer_data_bytes(const rf_st_writer *w) {
    size_t s = 0;
    for (int i = 0; i < w->n; i++) s += w->t[i].nbytes;
    return s;
}

static void writer_free(rf_st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

/* The JSON header padded with spaces to a multiple of 8 bytes (as the HF
 * writer does) so the data section starts 8-byte aligned. */
static char *build_header(const rf_st_writer *w, size_t *len_out) {
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "dtype", json_string(rf_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        json_object_set_new(root, t->name, e);
        off += t->nbytes;
    }
    char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!js) rf_die("safetensors writer: cannot serialise header");
    size_t n = strlen(js), padded = (n + 7) & ~(size_t)7;
    char *h = rf_malloc(padded);
    memcpy(h, js, n);
    memset(h + n, ' ', padded - n);
    free(js);
    *len_out = padded;
    return h;
}

int rf_st_writer_finish(rf_st_writer *w, const char *path) {
    size_t hlen;
    char *header = build_header(w, &hlen);
    char *tmp;
    uint8_t *buf = NULL;
    int rc = -1;
    int fd = rf_atomic_create(path, &tmp);
    if (fd < 0) goto done;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (rf_write_all(fd, len8, 8, tmp) || rf_write_all(fd, header, hlen, tmp)) goto fail;
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (!t->fill) {
            if (rf_write_all(fd, t->data, t->nbytes, tmp)) goto fail;
            continue;
        }
        /* generated: RF_ST_FILL_CHUNK elements at a time through one buffer */
        size_t es = rf_dtype_size(t->dtype), n_el = t->nbytes / es;
        if (!buf) buf = rf_malloc(RF_ST_FILL_CHUNK * 4);
        for (size_t e0 = 0; e0 < n_el; e0 += RF_ST_FILL_CHUNK) {
            size_t n = n_el - e0 < RF_ST_FILL_CHUNK ? n_el - e0 : RF_ST_FILL_CHUNK;
            t->fill(t->ctx, e0, n, buf);
            if (rf_write_all(fd, buf, n * es, tmp)) goto fail;
        }
    }
    rc = rf_atomic_commit(fd, tmp, path);
    goto done;
fail:
    rf_atomic_abandon(fd, tmp);
done:
    free(buf);
    free(tmp);
    free(header);
    writer_free(w);
    return rc;
}
