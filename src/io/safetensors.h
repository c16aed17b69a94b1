/* safetensors.h - read (mmap, validate) and write .safetensors files. */
#ifndef RF_SAFETENSORS_H
#define RF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "io/dtype.h"

#define RF_MAX_DIMS 4
typedef struct {
    char *name;
    rf_dtype dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    const void *data; /* points into the mmap */
    size_t nbytes;
} rf_tensor;

typedef struct {
    char *path;
    int fd;
    void *map;
    size_t map_size;
    int n_tensors;
    rf_tensor *tensors;
} rf_st_file;

/* mmap a .safetensors file and validate its header: JSON well-formed, every
 * dtype known, shape * dtype size == byte range, ranges inside the data
 * section and not overlapping. Error: -1 with one line naming file + tensor. */
int rf_st_open(rf_st_file *f, const char *path);
void rf_st_close(rf_st_file *f);
const rf_tensor *rf_st_find(const rf_st_file *f, const char *name);

/* Writer: collect tensors (data is copied or borrowed, see add), then write
 * the file atomically (temp file + rename). */
typedef struct rf_st_writer rf_st_writer;
rf_st_writer *rf_st_writer_new(void);
/* data must stay valid until finish; nbytes = prod(shape) * dtype size. */
void rf_st_writer_add(rf_st_writer *w, const char *name, rf_dtype dtype, int ndim,
                      const int64_t *shape, const void *data);
int rf_st_writer_finish(rf_st_writer *w, const char *path); /* frees w */

/* Streaming variant: the tensor's bytes are produced on demand while the file
 * is written, so a checkpoint larger than RAM can be written. fill(ctx, e0, n,
 * dst) writes elements [e0, e0 + n) of the tensor (in its dtype) to dst; it is
 * called in increasing order with e0 a multiple of RF_ST_FILL_CHUNK and
 * n <= RF_ST_FILL_CHUNK. ctx must stay valid until finish. */
#define RF_ST_FILL_CHUNK ((size_t)1 << 22)
typedef void (*rf_st_fill_fn)(void *ctx, size_t e0, size_t n, void *dst);
void rf_st_writer_add_gen(rf_st_writer *w, const char *name, rf_dtype dtype, int ndim,
                          const int64_t *shape, rf_st_fill_fn fill, void *ctx);
/* Total bytes of the data section added so far (without the header). */
size_t rf_st_writer_data_bytes(const rf_st_writer *w);

#endif
