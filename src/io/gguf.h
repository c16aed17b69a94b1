/* gguf.h - read (mmap, validate) and write GGUF files, llama.cpp's format.
 *
 * Layout of a GGUF v3 file (all integers little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *   n_kv x      { string key, u32 value type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
 *                 u64 offset (relative to the data section) }
 *   padding to `general.alignment` (default 32), then the data section.
 * A string is u64 length + bytes (no NUL); an array is u32 element type +
 * u64 count + the elements. ne[0] is the innermost (fastest) dimension: a
 * torch [rows, cols] matrix is ne = [cols, rows], with the same bytes. */
#ifndef RF_GGUF_H
#define RF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

/* metadata value types */
enum {
    RF_GGUF_UINT8 = 0, RF_GGUF_INT8 = 1, RF_GGUF_UINT16 = 2, RF_GGUF_INT16 = 3,
    RF_GGUF_UINT32 = 4, RF_GGUF_INT32 = 5, RF_GGUF_FLOAT32 = 6, RF_GGUF_BOOL = 7,
    RF_GGUF_STRING = 8, RF_GGUF_ARRAY = 9, RF_GGUF_UINT64 = 10, RF_GGUF_INT64 = 11,
    RF_GGUF_FLOAT64 = 12,
};

/* the ggml tensor types this project reads and writes (ggml.h's ids; the
 * whole table: formats/dtype.c) */
enum { RF_GGML_F32 = 0, RF_GGML_F16 = 1, RF_GGML_Q4_0 = 2, RF_GGML_Q8_0 = 8, RF_GGML_BF16 = 30 };
#define RF_GGUF_READ_TYPES \
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"
/* ggml type id of a dtype, and back (-1: not one of ours) */
uint32_t rf_gguf_ggml_type(rf_dtype t);
int rf_gguf_dtype(uint32_t ggml_type, rf_dtype *out);

#define RF_GGUF_DEFAULT_ALIGNMENT 32
#define RF_GGUF_MAX_DIMS 4

typedef struct {
    const char *s; /* into the mmap: NOT NUL-terminated */
    size_t len;
} rf_gguf_str;

typedef struct {
    char *key;           /* NUL-terminated copy */
    uint32_t type;       /* RF_GGUF_* */
    uint32_t arr_type;   /* element type when type == ARRAY */
    uint64_t arr_n;      /* element count when type == ARRAY */
    const uint8_t *val;  /* the value (arrays: the first element) in the mmap */
    rf_gguf_str *strs;   /* STRING values / STRING arrays: [1 or arr_n] */
} rf_gguf_kv;

typedef struct {
    char *name;
    uint32_t ggml_type;
    rf_dtype dtype;
    int n_dims;
    int64_t ne[RF_GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    uint64_t offset;              /* relative to the data section */
    const void *data;             /* into the mmap */
    size_t nbytes;
} rf_gguf_tensor;

typedef struct {
    char *path;
    int fd;
    void *map;
    size_t map_size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;         /* file offset of the data section */
    int n_kv;
    rf_gguf_kv *kv;
    int n_tensors;
    rf_gguf_tensor *tensors;
} rf_gguf_file;

/* mmap a GGUF file and validate all of it but the weights' values: magic,
 * version (2 or 3), counts bounded by the file size before anything is
 * allocated, every string and array inside the file, known value and tensor
 * types, no duplicate keys or tensor names, alignment a power of two, every
 * tensor's offset aligned and its bytes inside the data section, no two
 * tensors overlapping. Error: -1 with one line naming the file and what. */
int rf_gguf_open(rf_gguf_file *f, const char *path);
void rf_gguf_close(rf_gguf_file *f);
const rf_gguf_kv *rf_gguf_find(const rf_gguf_file *f, const char *key);
const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf_file *f, const char *name);

/* Typed getters. Absent key: returns 1 and leaves *out alone. Present with
 * the wrong type or out of range: -1 with an error naming file and key.
 * get_int accepts every integer type; get_float f32 and f64. */
int rf_gguf_get_int(const rf_gguf_file *f, const char *key, int64_t *out);
int rf_gguf_get_float(const rf_gguf_file *f, const char *key, double *out);
int rf_gguf_get_str(const rf_gguf_file *f, const char *key, rf_gguf_str *out);
/* element i of an integer array as int64 */
int64_t rf_gguf_arr_int(const rf_gguf_kv *kv, uint64_t i);

/* ---- writer: metadata is collected in memory, tensors are streamed ---- */
typedef struct rf_gguf_writer rf_gguf_writer;
rf_gguf_writer *rf_gguf_writer_new(void);
void rf_gguf_w_str(rf_gguf_writer *w, const char *key, const char *val);
void rf_gguf_w_u32(rf_gguf_writer *w, const char *key, uint32_t val);
void rf_gguf_w_i32(rf_gguf_writer *w, const char *key, int32_t val);
void rf_gguf_w_f32(rf_gguf_writer *w, const char *key, float val);
void rf_gguf_w_bool(rf_gguf_writer *w, const char *key, int val);
/* string array: vals[i] of lens[i] bytes (lens NULL: NUL-terminated) */
void rf_gguf_w_str_arr(rf_gguf_writer *w, const char *key, const char *const *vals,
                       const size_t *lens, size_t n);
void rf_gguf_w_i32_arr(rf_gguf_writer *w, const char *key, const int32_t *vals, size_t n);

/* A tensor of n_dims dims ne[] (ne[0] innermost) in dtype. Its rows (ne[0]
 * elements each, in dtype's layout, rf_dtype_row_bytes bytes) are produced
 * while the file is written: fill(ctx, row0, n_rows, dst) writes rows
 * [row0, row0 + n_rows), called in increasing order, a few MB at a time.
 * ctx must stay valid until finish. */
typedef void (*rf_gguf_fill_fn)(void *ctx, int64_t row0, int64_t n_rows, void *dst);
void rf_gguf_w_tensor(rf_gguf_writer *w, const char *name, rf_dtype dtype, int n_dims,
                      const int64_t *ne, rf_gguf_fill_fn fill, void *ctx);
/* Hand p (malloc'd, e.g. the fill contexts) to w: freed when w is finished. */
void rf_gguf_w_own(rf_gguf_writer *w, void *p);
/* Write the file atomically (temp file + fsync + rename); frees w. */
int rf_gguf_writer_finish(rf_gguf_writer *w, const char *path);
/* Abandon w without writing anything. */
void rf_gguf_writer_free(rf_gguf_writer *w);

#endif
