/* pack.c - the bf16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL and
 * IQ4_XS matrices' panel copies
 * (kernels.h rf_mat_pack).
 *
 * Every bf16, Q8_0 or Q4_0 layer matrix and the lm head gets a copy in the
 * panel layout the avx2 and avx512 kernels read without horizontal sums
 * (one layout for both tiers, kernels/matmul_pack.c, so REFUSION_CPU or
 * rf_cpu_set_tier after loading needs no repacking; on the demo model's
 * shape a 16-token call drops from ~5x to ~2x the cost of a 1-token call;
 * bench_kernels_matmul's "BF16p" rows), and so does every Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS one (their own
 * panels, matmul_pack.c). The kernels read the
 * copy only; the row-major originals stay where they are (the embedding
 * lookup, rf_model_save and the GGUF writer read them). Where an original
 * lives in an mmap'd file (safetensors or GGUF) its pages are handed back to the kernel
 * (MADV_DONTNEED on a private read-only mapping: a later read faults them in
 * from the file again), so the process holds one copy of the weights, not
 * two. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/quant.h"
#include "model/model.h"
#include "model/tensors.h"
#include "util/util.h"

/* the whole pages inside [p, p + bytes) when they belong to one of m's
 * mmap'd safetensors files: no longer needed in memory */
static void release_file_pages(const rf_model *m, const void *p, size_t bytes) {
    const char *a = p, *b = a + bytes;
    for (int k = -1; k < m->n_files; k++) { /* -1: the GGUF file, if that is where they are */
        const char *map = k < 0 ? (m->gguf ? m->gguf->map : NULL) : m->files[k].map;
        size_t size = k < 0 ? (m->gguf ? m->gguf->map_size : 0) : m->files[k].map_size;
        if (!map || a < map || b > map + size) continue;
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = ((uintptr_t)a + pg - 1) / pg * pg, hi = (uintptr_t)b / pg * pg;
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        return;
    }
}

int rf_model_pack(rf_model *m) {
    rf_model_unpack(m);
    rf_mat **tg = rf_malloc(sizeof(*tg) * (7 * (size_t)m->cfg.n_layers + 1));
    int nt = rf_model_matmuls(m, tg);
    size_t total = 0;
    for (int i = 0; i < nt; i++) total += (rf_mat_pack_bytes(tg[i]) + 63) / 64 * 64;
    if (total) {
        /* huge pages: a 16-token call of the 0.6B shape 2-9% faster, a
         * 1-token call 0-6% (Q8_0, Q4_0; Xeon, avx512, 2 threads). In a VM
         * whose memory the host backs on first touch, loading may take
         * longer (results/archive/2026-12-03-huge-pages.md) */
        char *p = rf_try_huge_alloc(total);
        if (!p) {
            free(tg);
            return -1;
        }
        m->packed_mem = p;
        for (int i = 0; i < nt; i++) {
            size_t bytes = rf_mat_pack_bytes(tg[i]);
            if (!bytes) continue;
            rf_mat_pack(tg[i], p);
            p += (bytes + 63) / 64 * 64;
        }
        /* the tied embedding is still read row by row: keep its pages */
        for (int i = 0; i < nt; i++)
            if (tg[i]->packed && tg[i]->data != m->embed.data)
                release_file_pages(m, tg[i]->data, rf_dtype_row_bytes(tg[i]->dtype, tg[i]->cols) * tg[i]->rows);
    }
    free(tg);
    return 0;
}

void rf_model_unpack(rf_model *m) {
    if (!m->layers) return;
    rf_mat **tg = rf_malloc(sizeof(*tg) * (7 * (size_t)m->cfg.n_layers + 1));
    int nt = rf_model_matmuls(m, tg);
    for (int i = 0; i < nt; i++) tg[i]->packed = NULL;
    free(tg);
    free(m->packed_mem);
    m->packed_mem = NULL;
}
