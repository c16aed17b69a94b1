/* matmul.c - Y[n, rows] = X[n, cols] . W[rows, cols]^T, W in bf16/f16/f32,
 * X and Y in f32, f32 accumulation (a Linear layer for n tokens at once).
 * Here: the dispatch to the per-tier kernels (kernels.h lists them) and the
 * avx2 float kernels. Packed at load (rf_mat_pack, matmul_pack.c): bf16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the K-quants Q2_K..Q6_K, IQ4_NL and
 * IQ4_XS: every block type; a matrix nothing packed runs row-major,
 * decoded per block (matmul_kq.c).
 *
 * The work is a set of dot products between weight rows and token rows, both
 * contiguous along cols. The inner kernel computes an R x T tile of them
 * (R weight rows x T tokens) in R*T eight-wide accumulators: each weight
 * vector is loaded (and converted from bf16/f16) once and used for all T
 * tokens, each token vector once and used for all R rows. With 16 AVX2
 * registers the tile is 3 x 4 (12 accumulators + 3 weights + 1 token).
 *
 *  - n = 1, 2 is memory-bound: W is streamed once, converted in registers,
 *    in 4 x n tiles (4 rows in flight: 4 independent FMA chains at n = 1;
 *    at least as fast as one row at a time with 4 accumulators).
 *  - n >= 3: 3 x 4 tiles (ragged token counts are split into near-equal
 *    tiles of 3-4, e.g. 17 = 4+4+3+3+3). For bf16/f16 with up to
 *    DIRECT_MAX_T tokens every token tile converts the weights in
 *    registers; with more, the first token tile of each 3-row tile also
 *    stores the converted f32 weights (in sub-blocks of KC_BUF columns,
 *    so they stay in L1) and the other token tiles read those: each weight
 *    is converted once, and W streams in while the first tile computes.
 *  - Many tokens x long rows: tokens go in blocks of TB_MAX and rows are
 *    split along cols (k blocks) so that the token block being reused stays
 *    in L2 (L2_X_BYTES); partial sums accumulate in Y.
 *  - Horizontal sums: 4 accumulators are reduced at once with 3 hadds.
 *
 * Threads (OpenMP) take chunks of output rows dynamically; inside an
 * already active parallel region the call runs on the calling thread alone
 * (no nested teams, no oversubscription). OpenBLAS sgemm is not used: for
 * f32 with n >= 16 it is slower than these kernels (bench/kernels_matmul.c
 * --blas compares them). */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "formats/blocks.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/matmul_impl.h"
#include "kernels/team.h"
#include "util/util.h"

/* ---- loads --------------------------------------------------------------- */

/* 8 weights at element offset off of a matrix of the given dtype, as f32 */
static inline __attribute__((always_inline)) __m256 load8(rf_dtype dt, const void *p, size_t off) {
    if (dt == RF_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (dt == RF_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + off)));
    return _mm256_loadu_ps((const float *)p + off);
}

static inline __attribute__((always_inline)) float load1(rf_dtype dt, const void *p, size_t off) {
    if (dt == RF_BF16) return rf_bf16_to_f32(((const uint16_t *)p)[off]);
    if (dt == RF_F16) return rf_f16_to_f32(((const uint16_t *)p)[off]);
    return ((const float *)p)[off];
}

/* the first m (< 8) lanes set */
static inline __m256i tail_mask(int m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* m (< 8) weights at off, the other lanes zero */
static inline __attribute__((always_inline)) __m256 load_tail(rf_dtype dt, const void *p, size_t off, int m) {
    if (dt == RF_F32) return _mm256_maskload_ps((const float *)p + off, tail_mask(m));
    float tmp[8] = {0};
    for (int i = 0; i < m; i++) tmp[i] = load1(dt, p, off + i);
    return _mm256_loadu_ps(tmp);
}

/* Horizontal sums of four vectors at once: {sum a, sum b, sum c, sum d}. */
static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m256 cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd); /* a0123 b0123 c0123 d0123 | 4567s */
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}


/* ---- the register-tile kernel --------------------------------------------
 * y[t * ldy + r] (+)= sum_{k < kc} w[r * ldw + k] * x[t * ldx + k]
 * for r < R, t < T; R, T, dt are compile-time constants at every call site
 * (always_inline + constant arguments), so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void
kern(rf_dtype dt, const int R, const int T, const void *w, size_t ldw, const float *x, size_t ldx,
     int kc, float *y, size_t ldy, int accumulate, float *wst) {
    __m256 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m256 wv[4];
        for (int r = 0; r < R; r++) wv[r] = load8(dt, w, r * ldw + k);
        if (wst) /* keep the converted weights for the next token tiles */
            for (int r = 0; r < R; r++) _mm256_storeu_ps(wst + r * (size_t)((kc + 7) & ~7) + k, wv[r]);
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (k < kc) { /* cols not a multiple of 8: one masked step, zeros beyond */
        int m = kc - k;
        __m256 wv[4];
        for (int r = 0; r < R; r++) wv[r] = load_tail(dt, w, r * ldw + k, m);
        if (wst)
            for (int r = 0; r < R; r++) _mm256_storeu_ps(wst + r * (size_t)((kc + 7) & ~7) + k, wv[r]);
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_maskload_ps(x + t * ldx + k, tail_mask(m));
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    /* reduce 4 accumulators per hsum4; unused slots are zero vectors */
    float s[16];
    __m256 z = _mm256_setzero_ps(), v[16];
    for (int i = 0; i < 16; i++) v[i] = z;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) v[t * R + r] = acc[r][t];
    for (int i = 0; i < R * T; i += 4) _mm_storeu_ps(s + i, hsum4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            float *o = y + t * ldy + r;
            *o = accumulate ? *o + s[t * R + r] : s[t * R + r];
        }
}

/* Dispatch to a kernel with constant R, T. The callers use R <= 3 with
 * T <= 4, and R = 4 with T <= 2 (so R = 4, T = 4 is never compiled). */
#define KERN_T(DT, R, WST)                                                                    \
    switch (T) {                                                                              \
    case 1: kern(DT, R, 1, w, ldw, x, ldx, kc, y, ldy, acc, WST); break;                      \
    case 2: kern(DT, R, 2, w, ldw, x, ldx, kc, y, ldy, acc, WST); break;                      \
    case 3: kern(DT, R, 3, w, ldw, x, ldx, kc, y, ldy, acc, WST); break;                      \
    default: kern(DT, R, (R == 4 ? 3 : 4), w, ldw, x, ldx, kc, y, ldy, acc, WST); break;      \
    }
#define KERN_RT(DT, WST)                          \
    switch (R) {                                  \
    case 1: KERN_T(DT, 1, WST); break;            \
    case 2: KERN_T(DT, 2, WST); break;            \
    case 3: KERN_T(DT, 3, WST); break;            \
    default: KERN_T(DT, 4, WST); break;           \
    }
/* wst != NULL (bf16/f16, R <= 3): also store the converted R x kc weights
 * there (row stride kc rounded up to 8, zero-padded) for the following
 * token tiles. */
static void tile(rf_dtype dt, int R, int T, const void *w, size_t ldw, const float *x, size_t ldx, int kc,
                 float *y, size_t ldy, int acc, float *wst) {
    if (dt == RF_BF16) {
        if (wst) { KERN_RT(RF_BF16, wst); } else { KERN_RT(RF_BF16, NULL); }
    } else if (dt == RF_F16) {
        if (wst) { KERN_RT(RF_F16, wst); } else { KERN_RT(RF_F16, NULL); }
    } else {
        KERN_RT(RF_F32, NULL);
    }
}

/* ---- blocking and threads ------------------------------------------------ */

/* bf16/f16 with up to DIRECT_MAX_T tokens (at most 2 token tiles): each
 * token tile converts the weights in registers itself; with more, the first
 * tile of a row tile converts and stores them for the others: converting
 * once costs less than converting per tile from 8 tokens on, about the same
 * at 5-6 (bench/kernels_matmul.c). */
#ifndef DIRECT_MAX_T
#define DIRECT_MAX_T 6
#endif
/* n <= SMALL_N uses 4 x n tiles instead of 3 x 4 */
#ifndef SMALL_N
#define SMALL_N 2
#endif
#ifndef TB_MAX
#define TB_MAX 128 /* tokens per block: X block reused from L2 */
#endif
#ifndef KC_BUF
#define KC_BUF 1024 /* columns per converted sub-block (multiple of 8) */
#endif
#ifndef L2_X_BYTES
#define L2_X_BYTES (512 << 10) /* budget for the X block in L2 */
#endif

/* Rows [a, b) of W (relative to W), all n tokens; runs on one thread. */
static void matmul_range(float *Y, size_t ldy, const float *X, const rf_mat *W, int n, int a, int b,
                         float *buf) {
    const int cols = W->cols;
    const size_t esz = W->dtype == RF_F32 ? 4 : 2;
    if (n <= SMALL_N) { /* memory-bound: stream W once, convert in registers, 4 rows at a time */
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4;
            tile(W->dtype, R, n, (const char *)W->data + (size_t)r * cols * esz, cols, X, cols, cols,
                 Y + r, ldy, 0, NULL);
        }
        return;
    }
    for (int t0 = 0; t0 < n; t0 += TB_MAX) {
        int tb = n - t0 < TB_MAX ? n - t0 : TB_MAX;
        /* k block: as long as the tb token rows of it fit the L2 budget */
        int kc = cols;
        if ((size_t)tb * cols * 4 > L2_X_BYTES) {
            int nk = (int)(((size_t)tb * cols * 4 + L2_X_BYTES - 1) / L2_X_BYTES);
            kc = ((cols + nk - 1) / nk + 7) / 8 * 8;
        }
        for (int k0 = 0; k0 < cols; k0 += kc) {
            int kn = cols - k0 < kc ? cols - k0 : kc;
            for (int r = a; r < b; r += 3) {
                int R = b - r < 3 ? b - r : 3;
                const void *w = (const char *)W->data + ((size_t)r * cols + k0) * esz;
                /* bf16/f16 with many tokens: the first token tile converts
                 * the weights and also stores them to buf (f32, row stride
                 * rounded up to 8); the other token tiles read buf. W is
                 * thus converted once, and streamed while the first tile
                 * computes. */
                int buffered = buf && W->dtype != RF_F32 && tb > DIRECT_MAX_T; /* (no buf: out of memory) */
                /* ceil(tb/4) token tiles of near-equal size (17 = 4+4+3+3+3,
                 * never a lone 1-token tile that would waste the registers) */
                int ntt = (tb + 3) / 4;
                /* buffered: in sub-blocks of KC_BUF columns, so the f32
                 * buffer (3 x KC_BUF x 4 bytes) stays in L1 */
                int ks = buffered ? KC_BUF : kn;
                for (int k1 = 0; k1 < kn; k1 += ks) {
                    int km = kn - k1 < ks ? kn - k1 : ks, acc = k0 + k1 > 0;
                    const void *wk = (const char *)w + (size_t)k1 * esz;
                    for (int i = 0, t = t0; i < ntt; i++) {
                        int T = tb / ntt + (i < tb % ntt);
                        const float *x = X + (size_t)t * cols + k0 + k1;
                        float *y = Y + (size_t)t * ldy + r;
                        if (!buffered) tile(W->dtype, R, T, wk, cols, x, cols, km, y, ldy, acc, NULL);
                        else if (i == 0) tile(W->dtype, R, T, wk, cols, x, cols, km, y, ldy, acc, buf);
                        else tile(RF_F32, R, T, buf, (km + 7) & ~7, x, cols, km, y, ldy, acc, NULL);
                        t += T;
                    }
                }
            }
        }
    }
}

/* Per-thread scratch, grown on demand: the f32 buffer for converted weight
 * tiles and the prepared activations (the calling thread's: a call made
 * inside a parallel region has its own). Freed when the thread exits (a
 * pthread key's destructor) and by rf_kernels_shutdown, so that
 * LeakSanitizer sees nothing left behind. */
typedef struct {
    void *conv, *prep;
    size_t conv_cap, prep_cap;
} scratch;
static _Thread_local scratch t_scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
    scratch *s = p;
    free(s->conv);
    free(s->prep);
    memset(s, 0, sizeof *s);
}
static void scratch_key_init(void) { (void)pthread_key_create(&g_scratch_key, scratch_free); }

/* A matmul whose scratch could not be allocated on the calling thread (set
 * by prepare, read by rf_kernels_take_oom): it computed nothing. */
static _Thread_local size_t t_oom_bytes;

/* *buf with at least `bytes`, grown (contents not kept); NULL when out of
 * memory. Called inside parallel regions, where rf_die could not unwind:
 * the callers fall back (conv_buf) or skip the matmul and say so (prep_buf). */
static void *scratch_get(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        pthread_once(&g_scratch_once, scratch_key_init);
        /* registered once per thread: the destructor frees it at exit */
        if (!pthread_getspecific(g_scratch_key)) (void)pthread_setspecific(g_scratch_key, &t_scratch);
        free(*buf);
        *cap = 0;
        *buf = rf_try_aligned_alloc(bytes);
        if (!*buf) return NULL;
        *cap = bytes;
    }
    return *buf;
}
static float *conv_buf(size_t nfloats) {
    return scratch_get(&t_scratch.conv, &t_scratch.conv_cap, nfloats * sizeof(float));
}
static void *prep_buf(size_t bytes) {
    void *b = scratch_get(&t_scratch.prep, &t_scratch.prep_cap, bytes);
    if (!b) t_oom_bytes = bytes;
    return b;
}

size_t rf_kernels_take_oom(void) {
    size_t n = t_oom_bytes;
    t_oom_bytes = 0;
    return n;
}

void rf_kernels_shutdown(void) {
    scratch_free(&t_scratch);
    if (omp_in_parallel()) return;
    /* the OpenMP pool's threads stay alive: free theirs from inside them */
#pragma omp parallel
    scratch_free(&t_scratch);
}

/* A tile crossover from the environment (REFUSION_AMX_BF16 / _INT8): "off"
 * or 0: 0 (never); a number N >= 1: from N tokens; unset or anything else:
 * -1 (the built-in widths; refusion info says when a value was not
 * understood). */
int rf_kernels_env_min_tokens(const char *e) {
    char *end = NULL;
    long v = e ? strtol(e, &end, 10) : -1;
    return e && !strcmp(e, "off") ? 0 : e && *e && !*end && v >= 0 && v <= 1 << 20 ? (int)v : -1;
}

/* Which kernel a call runs: per weight dtype and the active CPU tier. */
typedef enum { PATH_NONE, PATH_AVX2_FLOAT, PATH_AVX2_Q, PATH_AVX2_KQ, PATH_AVX512_BF16, PATH_AVX512_FLOAT, PATH_AVX512_Q, PATH_AMX_BF16, PATH_AMX_Q,
               PATH_AVX512_BF16DP /* packed bf16, vdpbf16ps (rf_matmul_bf16p_kernel) */ } mm_path;

/* amx tiles hold 16 tokens: bf16 calls of fewer than RF_AMX_BF16_MIN_N run
 * the avx512 kernels, which stream the weights faster than a mostly empty
 * tile does. Where the tiles start to pay differs between machines of the
 * same CPU model (docs/benchmarks.md), so REFUSION_AMX_BF16 (util/env.c;
 * `refusion tune` measures it) moves the crossover per machine. -2: not
 * read yet. */
static int g_amx_bf16_min_n = -2;

int rf_matmul_amx_bf16(void) {
    if (g_amx_bf16_min_n == -2) g_amx_bf16_min_n = rf_kernels_env_min_tokens(rf_env_amx_bf16());
    return g_amx_bf16_min_n;
}

void rf_matmul_set_amx_bf16(int min_tokens) { g_amx_bf16_min_n = min_tokens < 0 ? -1 : min_tokens; }

const char *rf_matmul_amx_note(void) {
    static _Thread_local char note[256];
    if (rf_cpu_tier_active() != RF_CPU_AMX) return "";
    /* which calls go on tiles, and from where the setting came */
    const int b = rf_matmul_amx_bf16(), q = rf_matmul_amx_int8();
    const char *be = rf_env_amx_bf16(), *qe = rf_env_amx_int8();
    char bs[96], qs[128];
    if (b == 0) snprintf(bs, sizeof bs, "bf16 on avx512 (REFUSION_AMX_BF16=off)");
    else if (b > 0) snprintf(bs, sizeof bs, "bf16 calls of %d+ tokens on tiles (REFUSION_AMX_BF16)", b);
    else snprintf(bs, sizeof bs, "bf16 calls of %d+ tokens on tiles%s", RF_AMX_BF16_MIN_N,
                  be && *be ? " (REFUSION_AMX_BF16 not off or a number: ignored)" : "");
    if (q == 0) snprintf(qs, sizeof qs, "Q8_0 / Q4_0 on vpdpbusd (REFUSION_AMX_INT8=off)");
    else if (q > 0) snprintf(qs, sizeof qs, "Q8_0 / Q4_0 calls of %d+ tokens on int8 tiles (REFUSION_AMX_INT8)", q);
    else snprintf(qs, sizeof qs, "Q8_0 %d..%d / Q4_0 %d..%d tokens on int8 tiles, else vpdpbusd%s", RF_AMX_Q8_MIN_N,
                  RF_AMX_Q8_MAX_N, RF_AMX_Q4_MIN_N, RF_AMX_Q4_MAX_N,
                  qe && *qe ? " (REFUSION_AMX_INT8 not off or a number: ignored)" : "");
    snprintf(note, sizeof note, "amx: %s; %s", bs, qs);
    return note;
}

static int amx_bf16_wanted(int n) {
    const int min_n = rf_matmul_amx_bf16();
    return min_n < 0 ? n >= RF_AMX_BF16_MIN_N : min_n && n >= min_n;
}

static mm_path choose_path(rf_dtype dt, int cols, int n) {
    int avx512 = rf_cpu_tier_active() >= RF_CPU_AVX512;
    /* amx: bf16 with whole 32-column chunks (the tile K); the rest avx512 */
    if (dt == RF_BF16 && rf_cpu_tier_active() == RF_CPU_AMX && cols % 32 == 0 && amx_bf16_wanted(n))
        return PATH_AMX_BF16;
    if (dt == RF_Q8_0 || dt == RF_Q4_0) return avx512 ? PATH_AVX512_Q : PATH_AVX2_Q;
    if (rf_dtype_is_quant(dt)) return PATH_AVX2_KQ; /* the other block types, every tier */
    if (dt == RF_BF16) return avx512 ? PATH_AVX512_BF16 : PATH_AVX2_FLOAT;
    return avx512 ? PATH_AVX512_FLOAT : PATH_AVX2_FLOAT; /* f32, f16 */
}

/* amx: packed Q8_0 / Q4_0 calls of at least this many tokens run the int8
 * tile kernel (matmul_amx.c); 0: never; -1 (the default): the widths of
 * matmul_impl.h (RF_AMX_Q8_MIN_N ...; kernels.h rf_matmul_set_amx_int8):
 * Q8_0 calls of 5..32 tokens and Q4_0 of 9..16, the widths where the tiles
 * beat vpdpbusd on an AMX Xeon (docs/benchmarks.md). Q4_0 has the
 * narrower range because its nibbles are unpacked into a buffer per block
 * for the tiles. */
/* Whether the tiles are faster depends on the machine, not only on the
 * CPU model (docs/benchmarks.md), so REFUSION_AMX_INT8 (util/env.c;
 * `refusion tune` measures it) sets the width per machine; the two paths
 * give the same logits bit for bit.
 * -2: not read from REFUSION_AMX_INT8 yet. */
static int g_amx_q_min_n = -2;

int rf_matmul_amx_int8(void) {
    if (g_amx_q_min_n == -2) g_amx_q_min_n = rf_kernels_env_min_tokens(rf_env_amx_int8());
    return g_amx_q_min_n;
}

static int amx_q_wanted(rf_dtype dt, int n) {
    const int min_n = rf_matmul_amx_int8();
    if (min_n >= 0) return min_n && n >= min_n;
    if (dt == RF_Q8_0) return n >= RF_AMX_Q8_MIN_N && n <= RF_AMX_Q8_MAX_N;
    return n >= RF_AMX_Q4_MIN_N && n <= RF_AMX_Q4_MAX_N;
}

void rf_matmul_set_amx_int8(int min_tokens) { g_amx_q_min_n = min_tokens < 0 ? -1 : min_tokens; }

/* bf16 activations at avx512: 1 = rounded to bf16 once (default), 0 =
 * hi/lo split; -1 = not read from REFUSION_BF16_ACT yet */
static int g_bf16_single = -1;

int rf_matmul_bf16_act(void) {
    if (g_bf16_single < 0) {
        const char *e = rf_env_bf16_act();
        g_bf16_single = !(e && !strcmp(e, "split"));
    }
    return g_bf16_single;
}

void rf_matmul_set_bf16_act(int single) { g_bf16_single = single != 0; }

/* the avx512 tier's packed bf16 kernel; -1 = not read from REFUSION_BF16P yet */
static int g_bf16p_kernel = -1;
static _Atomic unsigned long g_bf16p_calls[2];

int rf_matmul_bf16p_kernel(void) {
    if (g_bf16p_kernel < 0) {
        const char *e = rf_env_bf16p();
        /* without a setting: vdpbf16ps on AMD (Zen 5 runs it at twice the
         * FMAs' multiply-adds), widened FMAs elsewhere (Intel Xeons run it
         * at half); docs/benchmarks.md has the measurements */
        g_bf16p_kernel = e && *e ? (!strcmp(e, "dp") ? RF_BF16P_DP : RF_BF16P_FMA)
                                 : rf_cpu_is_amd() ? RF_BF16P_DP : RF_BF16P_FMA;
    }
    return g_bf16p_kernel;
}

void rf_matmul_set_bf16p_kernel(int kernel) {
    g_bf16p_kernel = kernel < 0 ? -1 : kernel == RF_BF16P_DP ? RF_BF16P_DP : RF_BF16P_FMA;
}

unsigned long rf_matmul_bf16p_calls(int kernel) {
    return kernel == RF_BF16P_FMA || kernel == RF_BF16P_DP ? atomic_load(&g_bf16p_calls[kernel]) : 0;
}

/* calls of up to this many tokens prefetch into L2 (kernels.h); -2 = not
 * read from REFUSION_PREFETCH_L2 yet. rf_mm_prefetch_l2 is the current
 * call's level, set by plan before any range of the call runs (two
 * threads planning matmuls at once could swap it: that changes the speed
 * of a call, never its result) */
static int g_prefetch_l2 = -2;
int rf_mm_prefetch_l2;
static _Atomic unsigned long g_prefetch_l2_calls;

unsigned long rf_matmul_prefetch_l2_calls(void) { return atomic_load(&g_prefetch_l2_calls); }

int rf_matmul_prefetch_l2(void) {
    if (g_prefetch_l2 == -2) {
        const int v = rf_kernels_env_min_tokens(rf_env_prefetch_l2());
        g_prefetch_l2 = v >= 0 ? v : rf_cpu_is_amd() ? 16 : 0;
    }
    return g_prefetch_l2;
}

void rf_matmul_set_prefetch_l2(int max_tokens) { g_prefetch_l2 = max_tokens < 0 ? -2 : max_tokens; }

/* the tiles' panel cap (kernels.h); -2 = not read from
 * REFUSION_STREAM_PANELS yet. rf_mm_stream_panels: the current call's, set
 * by plan as rf_mm_prefetch_l2 is */
static int g_stream_panels = -2;
int rf_mm_stream_panels;
static _Atomic unsigned long g_stream_panels_calls;

unsigned long rf_matmul_stream_panels_calls(void) { return atomic_load(&g_stream_panels_calls); }

/* the caps the kernels' dispatch has (0: none) */
static int stream_panels_ok(int panels) { return panels == 0 || panels == 1 || panels == 2 || panels == 4; }

int rf_stream_panels_parse(const char *text) {
    return text && text[0] >= '0' && text[0] <= '9' && !text[1] && stream_panels_ok(text[0] - '0') ? text[0] - '0' : -1;
}

int rf_matmul_stream_panels(void) {
    if (g_stream_panels == -2) {
        const int v = rf_stream_panels_parse(rf_env_stream_panels());
        g_stream_panels = v >= 0 ? v : rf_cpu_is_amd() ? RF_STREAM_PANELS_AMD : 0;
    }
    return g_stream_panels;
}

void rf_matmul_set_stream_panels(int panels) { g_stream_panels = stream_panels_ok(panels) ? panels : -2; }

/* One matmul's plan: the kernel path, the activations in its layout, and
 * the row chunks threads take. */
typedef struct {
    mm_path path;
    const void *xp; /* prepared activations (or X itself) */
    int single;     /* bf16 activations rounded once (rf_matmul_bf16_act) */
} mm_prep;

/* The activations in the layout the chosen kernel reads, once per call:
 * plan picks the path and takes the buffer (the calling thread's scratch),
 * fill writes share part of parts of it. The preps that split do so along
 * their layout's major dimension, so that the shares are contiguous and
 * threads do not write the same cache lines; the others are written whole
 * by part 0. */
static mm_prep plan(const float *X, const rf_mat *W, int n) {
    mm_prep p = {choose_path(W->dtype, W->cols, n), X, 0};
    rf_mm_prefetch_l2 = n <= rf_matmul_prefetch_l2();
    rf_mm_stream_panels = rf_matmul_stream_panels();
    if (rf_mm_stream_panels) atomic_fetch_add_explicit(&g_stream_panels_calls, 1, memory_order_relaxed);
    if (rf_mm_prefetch_l2) atomic_fetch_add_explicit(&g_prefetch_l2_calls, 1, memory_order_relaxed);
    /* packed K-quants and IQ4: the panel kernels of the tier (amx: avx512's) */
    if (p.path == PATH_AVX2_KQ && W->packed) p.path = rf_cpu_tier_active() >= RF_CPU_AVX512 ? PATH_AVX512_Q : PATH_AVX2_Q;
    /* amx: Q8_0 / Q4_0 calls on packed W of the widths amx_q_wanted picks
     * run on int8 tiles; the others stream W through vpdpbusd */
    if (p.path == PATH_AVX512_Q && W->packed && (W->dtype == RF_Q8_0 || W->dtype == RF_Q4_0) && amx_q_wanted(W->dtype, n) &&
        rf_cpu_tier_active() == RF_CPU_AMX)
        p.path = PATH_AMX_Q;
    if (p.path == PATH_AVX512_BF16 || p.path == PATH_AMX_BF16) p.single = rf_matmul_bf16_act();
    if (p.path == PATH_AVX512_BF16 && W->packed) {
        int k = rf_matmul_bf16p_kernel();
        atomic_fetch_add_explicit(&g_bf16p_calls[k], 1, memory_order_relaxed);
        if (k == RF_BF16P_DP) p.path = PATH_AVX512_BF16DP;
    }
    size_t bytes = 0;
    switch (p.path) {
    case PATH_AMX_Q: bytes = rf_q_prep_amx_bytes(n, W->cols); break;
    case PATH_AVX2_Q: bytes = rf_q_prep_avx2_bytes(n, W->cols); break;
    case PATH_AVX2_KQ: bytes = rf_kq_prep_bytes(n, W->cols, W->dtype); break;
    case PATH_AVX512_Q:
        bytes = W->packed ? rf_q8p_prep_avx512_bytes(n, W->cols) : rf_q_prep_avx512_bytes(n, W->cols);
        break;
    case PATH_AVX512_BF16:
        bytes = W->packed ? rf_bf16p_prep_avx512_bytes(n, W->cols) : rf_bf16_prep_avx512_bytes(n, W->cols, p.single);
        break;
    case PATH_AVX512_BF16DP: bytes = rf_bf16dp_prep_avx512_bytes(n, W->cols, p.single); break;
    case PATH_AMX_BF16:
        bytes = W->packed ? rf_bf16p_prep_amx_bytes(n, W->cols, p.single) : rf_bf16_prep_amx_bytes(n, W->cols, p.single);
        break;
    default: return p; /* X as it is */
    }
    void *buf = prep_buf(bytes);
    if (!buf) return (mm_prep){PATH_NONE, X, 0};
    p.xp = buf;
    return p;
}

static void fill(const mm_prep *p, const float *X, const rf_mat *W, int n, int part, int parts) {
    void *b = (void *)p->xp;
    switch (p->path) {
    case PATH_AVX2_Q: rf_q_prep_avx2(b, X, n, W->cols, W->dtype, part, parts); return;
    case PATH_AVX2_KQ: rf_kq_prep(b, X, n, W->cols, W->dtype, part, parts); return;
    case PATH_AVX512_Q:
        if (W->packed) {
            rf_q8p_prep_avx512(b, X, n, W->cols, W->dtype, part, parts);
            return;
        }
        break;
    case PATH_AVX512_BF16:
        if (W->packed) {
            rf_bf16p_prep_avx512(b, X, n, W->cols, p->single, part, parts);
            return;
        }
        break;
    case PATH_AVX512_BF16DP: rf_bf16dp_prep_avx512(b, X, n, W->cols, p->single, part, parts); return;
    default: break;
    }
    if (part) return; /* the preps below do not split */
    switch (p->path) {
    case PATH_AMX_Q: rf_q_prep_amx(b, X, n, W->cols, W->dtype); break;
    case PATH_AVX512_Q: rf_q_prep_avx512(b, X, n, W->cols, W->dtype); break;
    case PATH_AVX512_BF16: rf_bf16_prep_avx512(b, X, n, W->cols, p->single); break;
    case PATH_AMX_BF16:
        if (W->packed)
            rf_bf16p_prep_amx(b, X, n, W->cols, p->single);
        else
            rf_bf16_prep_amx(b, X, n, W->cols, p->single);
        break;
    default: break;
    }
}

static mm_prep prepare(const float *X, const rf_mat *W, int n) {
    mm_prep p = plan(X, W, n);
    fill(&p, X, W, n, 0, 1);
    return p;
}

/* Rows of a chunk: ~8 chunks per thread, so that on a machine shared with
 * other processes a descheduled thread delays the call by at most one chunk
 * rather than half of it; multiples of 12 (both row tiles), or of 128 (8
 * panels: the packed 1-token tile) when W is packed. */
static int chunk_rows(int nr, int nt, int packed) {
    int chunk = (nr + 8 * nt - 1) / (8 * nt);
    if (packed) return (chunk + 127) / 128 * 128;
    return (chunk < 24 ? 24 : chunk + 11) / 12 * 12;
}

/* the smallest chunks that end a wide call's matmul on packed weights (see
 * rf_matmul_team): one group of the blocks-outside Q8_0 / Q4_0 kernel (2
 * panels), two bf16 panels; from TAIL_MIN_N tokens (below, calls stream
 * at the bandwidth in 8-panel tiles) */
#define TAIL_ROWS 32
#define TAIL_MIN_N 5

/* output rows [a, b) of V (a view) for all n tokens, on this thread */
static void run_range(const mm_prep *p, float *Y, size_t ldy, const float *X, const rf_mat *V, int n, int a, int b) {
    switch (p->path) {
    case PATH_NONE: break; /* out of memory for the prepared activations */
    case PATH_AVX2_Q:
        if (V->packed)
            rf_qp_range_avx2(Y, ldy, p->xp, V, n, a, b);
        else
            rf_q_range_avx2(Y, ldy, p->xp, V, n, a, b);
        break;
    case PATH_AVX2_KQ: rf_kq_range(Y, ldy, p->xp, V, n, a, b); break;
    case PATH_AVX512_Q:
        if (V->packed)
            rf_qp_range_avx512(Y, ldy, p->xp, V, n, a, b);
        else
            rf_q_range_avx512(Y, ldy, p->xp, V, n, a, b);
        break;
    case PATH_AVX512_BF16:
        if (V->packed)
            rf_bf16p_range_avx512(Y, ldy, p->xp, V, n, a, b);
        else
            rf_bf16_range_avx512(Y, ldy, p->xp, V, n, a, b, p->single);
        break;
    case PATH_AVX512_BF16DP: rf_bf16dp_range_avx512(Y, ldy, p->xp, V, n, a, b, p->single); break;
    case PATH_AVX512_FLOAT: rf_float_range_avx512(Y, ldy, X, V, n, a, b); break;
    case PATH_AMX_BF16:
        if (V->packed)
            rf_bf16p_range_amx(Y, ldy, p->xp, V, n, a, b, p->single);
        else
            rf_bf16_range_amx(Y, ldy, p->xp, V, n, a, b, p->single);
        break;
    case PATH_AMX_Q: rf_q_range_amx(Y, ldy, p->xp, V, n, a, b); break;
    default: {
        if (V->packed && V->dtype == RF_BF16) {
            rf_bf16p_range_avx2(Y, ldy, X, V, n, a, b);
            break;
        }
        float *buf = V->dtype == RF_F32 || n <= DIRECT_MAX_T ? NULL : conv_buf((size_t)3 * (V->cols + 8));
        matmul_range(Y, ldy, X, V, n, a, b, buf);
    }
    }
}

/* bytes of a packed copy of rows x cols weights of dtype dt (0: dt has no
 * panel layout) */
static size_t packed_bytes(rf_dtype dt, int rows, int cols) {
    switch (dt) {
    case RF_BF16: return rf_bf16_pack_bytes(rows, cols);
    case RF_Q8_0: return rf_q8p_pack_bytes(rows, cols);
    case RF_Q4_0: return rf_q4p_pack_bytes(rows, cols);
    case RF_Q4_K: return rf_q4kp_pack_bytes(rows, cols);
    case RF_Q5_K: return rf_q5kp_pack_bytes(rows, cols);
    case RF_Q6_K: return rf_q6kp_pack_bytes(rows, cols);
    case RF_Q3_K:
    case RF_Q2_K: return rf_k23p_pack_bytes(dt, rows, cols);
    case RF_IQ4_NL: return rf_q4p_pack_bytes(rows, cols); /* Q4_0's panels */
    case RF_Q4_1:
    case RF_Q5_0:
    case RF_Q5_1: return rf_q41p_pack_bytes(dt, rows, cols);
    case RF_IQ4_XS: return rf_iq4xsp_pack_bytes(rows, cols);
    default: return 0;
    }
}

/* bytes of one 16-row panel of W's packed copy */
static size_t panel_bytes(const rf_mat *W) { return packed_bytes(W->dtype, 16, W->cols); }

void rf_matmul_rows(float *Y, const float *X, const rf_mat *W, int n, int r0, int r1) {
    int nr = r1 - r0;
    if (nr <= 0 || n <= 0) return;
    /* view of rows [r0, r1) as a matrix of its own; the packed layout holds
     * whole 16-row panels, so a view keeps it only from a panel boundary */
    rf_mat V = *W;
    V.data = (const char *)W->data + (size_t)r0 * rf_dtype_row_bytes(W->dtype, W->cols);
    V.rows = nr;
    V.packed = W->packed && r0 % 16 == 0 ? (const char *)W->packed + (size_t)(r0 / 16) * panel_bytes(W) : NULL;
    mm_prep p = prepare(X, &V, n); /* V: whether the view kept the packed layout */
    double work = (double)nr * W->cols * (n < 8 ? 8 : n);
    int par = !omp_in_parallel() && work > (1 << 18);
    int nt = par ? omp_get_max_threads() : 1;
    int chunk = chunk_rows(nr, nt, V.packed != NULL);
    int nchunks = (nr + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (par && nchunks > 1)
    for (int c = 0; c < nchunks; c++) {
        int a = c * chunk, b = a + chunk < nr ? a + chunk : nr;
        run_range(&p, Y, nr, X, &V, n, a, b);
    }
    if (p.path == PATH_NONE && !omp_in_parallel()) rf_oom(rf_kernels_take_oom());
}

void rf_matmul_team(rf_team *team, int tid, int count, float *const *Y, const float *X, const rf_mat *const *W,
                    int n) {
    for (int i = 1; i < count; i++)
        if ((W[i]->packed != NULL) != (W[0]->packed != NULL) || W[i]->dtype != W[0]->dtype) {
            /* (not in a model: its matrices are packed alike) one prep each */
            for (int j = 0; j < count; j++) rf_matmul_team(team, tid, 1, Y + j, X, W + j, n);
            return;
        }
    if (tid == 0) {
        /* the plan, shared by all count matrices (they have the same dtype
         * and cols); nobody reads the last matmul's plan or scratch any
         * more (its closing barrier), nor the work counter */
        mm_prep p = plan(X, W[0], n);
        team->mm_path = (int)p.path;
        team->mm_single = p.single;
        team->mm_xp = p.xp;
        atomic_store_explicit(&team->next, 0, memory_order_relaxed);
    }
    rf_team_barrier(team); /* X is complete, the plan published */
    const mm_prep p = {(mm_path)team->mm_path, team->mm_xp, team->mm_single};
    /* every thread prepares its share of the activations (thread 0 alone
     * would make the team wait at the barrier while it converts) */
    fill(&p, X, W[0], n, tid, team->n);
    rf_team_barrier(team);
    /* the chunks of all count matrices in one shared loop: a thread that
     * finishes a small matrix (k, v) goes on with the next. Wide calls on
     * packed weights end with small chunks (the last matrix's final
     * team->n big chunks' rows): a big chunk taken last leaves the other
     * threads idle for half of it on average */
    /* per matrix: nbig chunks of chunk rows up to tail_start, then chunks
     * of tail rows to its end (none but in the last matrix of a wide call) */
    int total = 0, chunk[8], nbig[8], tail_start[8], tail[8], first[9];
    for (int i = 0; i < count; i++) {
        const int rows = W[i]->rows;
        chunk[i] = chunk_rows(rows, team->n, W[i]->packed != NULL);
        tail_start[i] = rows, tail[i] = chunk[i];
        if (i == count - 1 && W[i]->packed && n >= TAIL_MIN_N && team->n > 1) {
            /* the last team->n big chunks' rows (whole 32-row groups) in
             * chunks of an eighth of a big one, at least TAIL_ROWS */
            tail_start[i] = rows > team->n * chunk[i] ? (rows - team->n * chunk[i]) / TAIL_ROWS * TAIL_ROWS : 0;
            tail[i] = (chunk[i] / 8 + TAIL_ROWS - 1) / TAIL_ROWS * TAIL_ROWS;
            if (tail[i] < TAIL_ROWS) tail[i] = TAIL_ROWS;
        }
        nbig[i] = (tail_start[i] + chunk[i] - 1) / chunk[i];
        first[i] = total;
        total += nbig[i] + (rows - tail_start[i] + tail[i] - 1) / tail[i];
    }
    first[count] = total;
    for (int c = rf_team_next(team); c < total; c = rf_team_next(team)) {
        int i = 0;
        while (c >= first[i + 1]) i++;
        const int k = c - first[i];
        int a, b;
        if (k < nbig[i]) {
            a = k * chunk[i];
            b = a + chunk[i] < tail_start[i] ? a + chunk[i] : tail_start[i];
        } else {
            a = tail_start[i] + (k - nbig[i]) * tail[i];
            b = a + tail[i] < W[i]->rows ? a + tail[i] : W[i]->rows;
        }
        run_range(&p, Y[i], W[i]->rows, X, W[i], n, a, b);
    }
    rf_team_barrier(team); /* every Y is complete */
}

/* One packed layout per dtype for every tier (matmul_pack.c): the avx512
 * kernels read a panel's 64-byte vectors whole, the avx2 ones as two
 * halves, so a matrix packed under one tier is right under any other
 * (rf_cpu_set_tier after loading, as the tests and benchmarks do). */
size_t rf_mat_pack_bytes(const rf_mat *W) {
    if (rf_dtype_block_elems(W->dtype) == RF_QK && W->cols % RF_QK != 0) return 0;
    return packed_bytes(W->dtype, W->rows, W->cols);
}

void rf_mat_pack(rf_mat *W, void *buf) {
    if (W->dtype == RF_BF16)
        rf_bf16_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q8_0)
        rf_q8p_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q4_K)
        rf_q4kp_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q5_K)
        rf_q5kp_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q6_K)
        rf_q6kp_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q3_K || W->dtype == RF_Q2_K)
        rf_k23p_pack(W->dtype, buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_IQ4_XS)
        rf_iq4xsp_pack(buf, W->data, W->rows, W->cols);
    else if (W->dtype == RF_Q4_1 || W->dtype == RF_Q5_0 || W->dtype == RF_Q5_1)
        rf_q41p_pack(W->dtype, buf, W->data, W->rows, W->cols);
    else /* Q4_0, IQ4_NL: the same block layout */
        rf_q4p_pack(buf, W->data, W->rows, W->cols);
    W->packed = buf;
}

void rf_matmul(float *Y, const float *X, const rf_mat *W, int n) {
    rf_matmul_rows(Y, X, W, n, 0, W->rows);
}

/* Row r of a quantised matrix, dequantised (ggml's formulas, formats/). */
static void dequant_row(float *out, const rf_mat *W, int r) {
    const char *row = (const char *)W->data + (size_t)r * rf_dtype_row_bytes(W->dtype, W->cols);
    rf_dequantize_row(W->dtype, row, out, W->cols);
}

void rf_matmul_naive(float *Y, const float *X, const rf_mat *W, int n) {
    int q = rf_dtype_is_quant(W->dtype);
    float *wr = q ? rf_malloc(sizeof(float) * (W->cols ? W->cols : 1)) : NULL;
    for (int r = 0; r < W->rows; r++) {
        if (q) dequant_row(wr, W, r);
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int c = 0; c < W->cols; c++)
                s += (double)(q ? wr[c] : load1(W->dtype, W->data, (size_t)r * W->cols + c)) *
                     X[(size_t)t * W->cols + c];
            Y[(size_t)t * W->rows + r] = (float)s;
        }
    }
    free(wr);
}

void rf_mat_row_f32(float *out, const rf_mat *W, int r) {
    if (rf_dtype_is_quant(W->dtype)) {
        dequant_row(out, W, r);
        return;
    }
    size_t off = (size_t)r * W->cols;
    int c = 0;
    for (; c + 8 <= W->cols; c += 8) {
        __m256 v = W->dtype == RF_BF16  ? load8(RF_BF16, W->data, off + c)
                   : W->dtype == RF_F16 ? load8(RF_F16, W->data, off + c)
                                        : load8(RF_F32, W->data, off + c);
        _mm256_storeu_ps(out + c, v);
    }
    for (; c < W->cols; c++) out[c] = load1(W->dtype, W->data, off + c);
}
