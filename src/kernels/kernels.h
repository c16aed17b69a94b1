/* kernels.h - the numeric kernels: batched matmul over f32/f16/bf16 and
 * ggml Q8_0/Q4_0 weights with f32 activations, and the small per-token ops.
 *
 * rf_matmul picks its kernel per weight dtype and CPU tier (kernels/cpu.h,
 * chosen at run time; REFUSION_CPU=avx2 forces the baseline):
 *   f32, f16          avx2: AVX2 FMA register tiles (matmul.c); avx512:
 *                     16-wide FMA, 4 rows x 6 tokens per tile
 *   bf16              avx2: AVX2 FMA (f32 products); avx512: the activations
 *                     rounded to bf16 once (default: what llama.cpp and a
 *                     bf16 PyTorch model do; per-term relative error up to
 *                     2^-9) or, with REFUSION_BF16_ACT=split /
 *                     rf_matmul_set_bf16_act(0), kept f32-grade. W packed
 *                     in 16-row panels (rf_mat_pack; the loaders do it):
 *                     16-wide f32 FMAs on the weights widened in registers
 *                     (matmul_avx512.c), or vdpbf16ps on the packed
 *                     vectors (matmul_bf16dp_avx512.c), as
 *                     rf_matmul_bf16p_kernel picks; W row-major:
 *                     vdpbf16ps (split: bf16 hi + lo, twice the
 *                     instructions), 4 rows x 6 tokens per tile
 *   Q8_0, Q4_0        activations quantised per 32-block to int8 (scale
 *                     max|x|/127 in f32, round to nearest even), exact
 *                     integer block dots: avx2 maddubs (matmul_q.c), avx512
 *                     vpdpbusd (matmul_avx512.c, 3 rows x 6 tokens per
 *                     tile); f32 accumulation. bf16 / Q8_0 / Q4_0 with W
 *                     packed (rf_mat_pack) at avx2: matmul_avx2p.c, each
 *                     panel read as two 8-row halves. cols must
 *                     be a multiple of 32. Results differ from the f32 dot
 *                     product of the dequantised weights by the activation
 *                     rounding (<= |w| max|x_block| / 254 per term).
 *   Q4_1, Q5_0, Q5_1, the same activations and exact integer dots on
 *   Q2_K..Q6_K,       16-row panels (rf_mat_pack; IQ4_NL in Q4_0's, its
 *   IQ4_NL, IQ4_XS    nibbles mapped to levels by byte shuffles; Q4_1 /
 *                     Q5_0 / Q5_1 in Q4_0's nibbles with the fifth bits
 *                     beside them; Q2_K / Q3_K as 2-bit levels, Q3_K's
 *                     high bits beside them; the mins through the
 *                     activations' block sums): avx512 vpdpbusd
 *                     (matmul_avx512.c), avx2 maddubs (matmul_avx2p.c).
 *                     Row-major (a matrix nothing packed), every block
 *                     type is decoded per block (matmul_kq.c).
 *   amx               bf16: TDPBF16PS tiles (matmul_amx.c; 16 rows x up to
 *                     64 tokens per weight load); packed Q8_0 / Q4_0 of
 *                     the widths rf_matmul_set_amx_int8 says: TDPBSUD tiles, one
 *                     32-block per TDP, scaled per block in f32 (the same
 *                     answers as vpdpbusd); the rest runs the avx512
 *                     kernels. Verified
 *                     on AMX hardware and through a C emulation of the tile
 *                     operations (tests/kernels_amx_emul.c).
 * Everything accumulates in f32.
 *
 *  - rf_matmul with n = 1 is memory-bound: it must stream W once at full
 *    speed (4 rows in flight).
 *  - with n tokens it streams W once and reuses every loaded weight vector
 *    for a tile of up to 4 (avx2) or 4-8 (avx512) tokens; packed W: a group
 *    of panels meets all the call's token tiles (the later ones from L2)
 *    before the next group is read, so n = 4..64 costs little more than
 *    n = 1 until it turns compute-bound.
 * Rooflines: kernels/roofline.h measures read bandwidth and the per-tier
 * compute peaks; bench/kernels_matmul.c prints both per kernel. */
#ifndef RF_KERNELS_H
#define RF_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "formats/dtype.h" /* rf_dtype */

/* A row-major weight matrix [rows, cols] (torch Linear: [out, in]).
 * packed: NULL, or a copy of a bf16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL or IQ4_XS W in the panel layout
 * (rf_mat_pack; the same at the avx2 and avx512 tiers), which their
 * kernels then read instead of data. */
typedef struct {
    rf_dtype dtype;
    const void *data;
    int rows, cols;
    const void *packed;
} rf_mat;

/* Bytes rf_mat_pack needs for W: non-zero only for bf16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS weights (cols
 * % 32 == 0 for the 32-weight block types), whatever the tier; 6-11% more
 * than the weights themselves for Q8_0 / Q4_0 / IQ4_NL (the scales as
 * f32), none for Q4_1 / Q5_1 (their f16 scales kept), 9% for Q5_0 (padded
 * to whole vectors), 4.8% / 5.5% / 5.6% / 4.5% / 1.0% / 2.9% for Q2_K /
 * Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS. */
size_t rf_mat_pack_bytes(const rf_mat *W);
/* Writes W's packed copy into buf (rf_mat_pack_bytes(W) bytes, 64-byte
 * aligned, owned by the caller, alive as long as W) and points W->packed at
 * it. Why: with rows interleaved in pairs of columns, one vdpbf16ps
 * computes 16 outputs of a token and nothing has to be summed across lanes
 * afterwards; the row-major kernel spends as much time on those horizontal
 * sums as on the products when cols is small (the demo model's 256), so a
 * many-token call on a row-major W costs several times what its extra
 * products alone would. */
void rf_mat_pack(rf_mat *W, void *buf);

/* How the avx512 tier's bf16 kernel takes the activations: 1 = rounded to
 * bf16 once (the default: half the compute of the split; per-term relative
 * error up to 2^-9, the tolerance tests/kernels_matmul.c documents, small
 * enough that the task accuracies do not depend on it), 0 = split into
 * bf16 hi + lo (f32-grade: the golden tests against transformers' f32
 * logits use it). The default comes from REFUSION_BF16_ACT=bf16|split at
 * the first call; set it before threads call rf_matmul. */
int rf_matmul_bf16_act(void);
void rf_matmul_set_bf16_act(int single);
/* At tier amx, packed Q8_0 / Q4_0 calls of at least min_tokens tokens run
 * on int8 tiles (matmul_amx.c); 0 keeps them all on the avx512 vpdpbusd
 * kernel; a negative value restores the default: the tiles for Q8_0 calls
 * of 5..32 tokens and Q4_0 calls of 9..16 (matmul.c amx_q_wanted). Whether
 * the tiles beat vpdpbusd depends on the machine, not only on the CPU
 * model, so REFUSION_AMX_INT8 and `refusion tune` set the widths per
 * machine (the timings: docs/benchmarks.md). Not thread-safe: set it before
 * the matmuls run (tests, benchmarks). */
void rf_matmul_set_amx_int8(int min_tokens);
/* The setting in force: -1 the default widths, 0 none, N from N tokens;
 * until set, REFUSION_AMX_INT8 (util/env.c) gives it. */
int rf_matmul_amx_int8(void);
/* At tier amx, bf16 calls of at least min_tokens tokens run on TDPBF16PS
 * tiles; 0 none (avx512 kernels); negative: the default (5 tokens,
 * matmul_impl.h RF_AMX_BF16_MIN_N). Unlike the int8 tiles these round
 * differently from the avx512 kernel. Until set, REFUSION_AMX_BF16
 * (util/env.c) gives it; rf_matmul_amx_bf16 says the setting in force. */
void rf_matmul_set_amx_bf16(int min_tokens);
int rf_matmul_amx_bf16(void);
/* At tier amx, one line saying which calls run on the tiles under the
 * settings in force (and a setting ignored as malformed); "" at the other
 * tiers. The calling thread's buffer, valid until its next call. */
const char *rf_matmul_amx_note(void);
/* The avx512 tier's kernel for packed bf16 W (rf_mat_pack):
 * RF_BF16P_FMA: the weights widened to f32, 16-wide FMAs (matmul_avx512.c);
 * RF_BF16P_DP: vdpbf16ps on the packed vectors (matmul_bf16dp_avx512.c).
 * Both take the activations as rf_matmul_bf16_act says and agree to f32
 * accumulation error, not bit for bit. Which is faster depends on the CPU
 * (vdpbf16ps: half the FMAs' multiply-adds per second on an Emerald Rapids
 * Xeon, twice on AMD Zen 5); `refusion tune` measures it (model/tune.h).
 * A negative value restores the default: REFUSION_BF16P=fma|dp (util/env.c)
 * when set, else dp on AMD CPUs and fma on the others. Not thread-safe: set it before the matmuls run. */
enum { RF_BF16P_FMA = 0, RF_BF16P_DP = 1 };
void rf_matmul_set_bf16p_kernel(int kernel);
int rf_matmul_bf16p_kernel(void);
/* How many rf_matmul / rf_matmul_team calls ran the given packed bf16
 * kernel since the process started (all threads): which one runs. */
unsigned long rf_matmul_bf16p_calls(int kernel);
/* Where the panel kernels' software prefetches bring the weight streams
 * ahead of the reads (avx2 and avx512 tiers, every packed type): calls of
 * up to max_tokens tokens prefetch into L2 (prefetcht1), wider ones into L1
 * (prefetcht0); 0: L1 at every width. The arithmetic is the same either
 * way (bit-identical results), the speed is not: on AMD Zen 4 calls of
 * 1-16 tokens run faster into L2 (prefetches into L1 hold the L1's few
 * miss buffers); the kernels were tuned into L1 on Intel Xeons, where L2
 * has not been measured (docs/benchmarks.md). A negative value restores
 * the default: REFUSION_PREFETCH_L2=off|N (util/env.c) when set, else 16
 * on AMD CPUs and 0 on the others; `refusion tune` measures it (model/tune.h).
 * Not thread-safe: set it before the matmuls run. */
void rf_matmul_set_prefetch_l2(int max_tokens);
int rf_matmul_prefetch_l2(void);
/* How many rf_matmul / rf_matmul_team calls prefetched into L2 since the
 * process started (all threads): whether the setting took. */
unsigned long rf_matmul_prefetch_l2_calls(void);

/* The most weight panels (16 rows each) a token tile of up to 4 tokens
 * (matmul_impl.h RF_STREAM_PANELS_MAX_T) in the panel kernels'
 * panel-group order streams at once: packed bf16 at avx512 (both kernels),
 * the packed 32-block types at avx512 and avx2; AR's 1-token calls above
 * all. 0: the kernels' own counts (up to 8 panels for Q8_0 at one token, 6
 * for Q4_0 and bf16), else 1, 2 or 4. The arithmetic per output is the
 * same (bit-identical results), the speed is not: on an AMD Zen 5, one
 * panel at a time made 1-token calls of the 0.6B shape 1.2-1.6x faster
 * (Q8_0 the most) and calls of 2-4 tokens up to 1.3x (docs/benchmarks.md); the Intel Xeons were tuned with the
 * kernels' own counts. Another value restores the default:
 * REFUSION_STREAM_PANELS=0|1|2|4 (util/env.c) when set, else
 * RF_STREAM_PANELS_AMD on AMD CPUs (one; measured on a Zen 5, not on a
 * Zen 4 or 3) and 0 on the others; `refusion tune` measures it per
 * machine (model/tune.h). Not thread-safe: set it before the matmuls run. */
enum { RF_STREAM_PANELS_AMD = 1 };
void rf_matmul_set_stream_panels(int panels);
int rf_matmul_stream_panels(void);
/* The cap a text names ("0", "1", "2" or "4": REFUSION_STREAM_PANELS, the
 * tune cache, the benchmarks' settings), or -1 for any other text or NULL */
int rf_stream_panels_parse(const char *text);
/* How many rf_matmul / rf_matmul_team calls ran with a panel cap since the
 * process started (all threads): whether the setting took. */
unsigned long rf_matmul_stream_panels_calls(void);

/* Frees the matmul's per-thread scratch buffers of the calling thread and
 * of the OpenMP thread pool (a thread's are also freed when it exits). Call
 * it at the end of a program (before a leak check); later rf_matmul calls
 * allocate them again. Not while other threads run rf_matmul. */
void rf_kernels_shutdown(void);
/* Bytes of scratch a matmul on this thread (the caller's, or thread 0 of a
 * team) could not get since the last call, then 0; such a matmul computed
 * nothing. rf_matmul checks it itself; rf_forward after its team region. */
size_t rf_kernels_take_oom(void);

/* Y[n, rows] = X[n, cols] . W[rows, cols]^T   (Y = X W^T, a Linear layer).
 * Threads over output rows with OpenMP; X rows are reused from cache. */
void rf_matmul(float *Y, const float *X, const rf_mat *W, int n);
/* Same, the obvious triple loop in double precision: the test reference
 * (Q8_0/Q4_0: the dequantised weights times the unquantised activations). */
void rf_matmul_naive(float *Y, const float *X, const rf_mat *W, int n);
/* Same, only output rows [r0, r1) of W; Y is [n, r1 - r0]. Used for logits
 * restricted to a vocabulary range and for tests. */
void rf_matmul_rows(float *Y, const float *X, const rf_mat *W, int n, int r0, int r1);

/* The same for count (<= 8) matrices that share X (q, k, v; gate, up):
 * Y[i] = X W[i]^T, all with the same dtype and cols. Called by every thread
 * of a team (kernels/team.h; tid = the thread's index in it) at the same
 * point: it starts with a barrier (X complete), thread 0 prepares the
 * activations, the threads share the row chunks of all matrices, and it
 * ends with a barrier (every Y complete). A forward pass that runs in one
 * parallel region pays spinning barriers per matmul, not a team start. */
typedef struct rf_team rf_team;
void rf_matmul_team(rf_team *team, int tid, int count, float *const *Y, const float *X, const rf_mat *const *W,
                    int n);

/* Row r of W as f32 (the embedding lookup; Q8_0/Q4_0 dequantised). */
void rf_mat_row_f32(float *out, const rf_mat *W, int r);

/* out[i, :] = w * x[i, :] / sqrt(mean(x[i, :]^2) + eps), i < n, rows of dim. */
void rf_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
/* HF rotate_half RoPE, in place: x is [n, n_heads, head_dim]; token i has
 * position pos[i]; pairs (j, j + head_dim/2); inv_freq[j] = theta^(-2j/hd). */
void rf_rope(float *x, const int *pos, int n, int n_heads, int head_dim, float theta);
/* the same in two steps, so that a forward pass computes each token's
 * angles once for all its layers and heads (per layer and per q / k it
 * computed them 56 times at the 0.6B shape): cs[i, :half) = cos and
 * cs[i, half:hd) = sin of token i's angles; rf_rope_apply rotates with them
 * (rf_rope = table + apply, the same numbers) */
void rf_rope_table(float *cs, const int *pos, int n, int head_dim, float theta);
void rf_rope_apply(float *x, const float *cs, int n, int n_heads, int head_dim);
/* g[i] = silu(g[i]) * u[i] */
void rf_silu_mul(float *g, const float *u, size_t n);
/* in place softmax of x[0..n) (max-subtracted, f32) */
void rf_softmax(float *x, int n);
/* sum of e^(x[i] - shift), i < n: 8 f32 lanes of vectorised exp, summed
 * in double (the log-sum-exp of a logits row, shift = its max) */
double rf_sum_exp(const float *x, int n, float shift);
/* the first index of the max of x[0..n), n >= 1 (NaNs never win; x[0]
 * NaN gives 0, as a scalar `x[i] > max` loop does); *max_out = that max
 * when max_out is not NULL */
int rf_argmax(const float *x, int n, float *max_out);
/* y += x */
void rf_add(float *y, const float *x, size_t n);
/* dot product with AVX2 */
float rf_dot(const float *a, const float *b, int n);
/* Attention's two halves for one query head: sc[t] = scale * (q . K[t]),
 * t < n, K's rows ldk floats apart; out[hd] += sum_t p[t] V[t]. */
void rf_scores(float *sc, const float *q, const float *K, size_t ldk, int n, int hd, float scale);
void rf_mix(float *out, const float *p, const float *V, size_t ldv, int n, int hd);
/* Both for two query heads that share the KV head (grouped-query
 * attention): each key / value vector read once for the two. At the avx2
 * tier the results are bit for bit those of the single-query calls; at
 * avx512 they come from 16-wide kernels (within rounding of them). */
void rf_scores2(float *sc0, float *sc1, const float *q0, const float *q1, const float *K, size_t ldk, int n, int hd,
                float scale);
void rf_mix2(float *out0, float *out1, const float *p0, const float *p1, const float *V, size_t ldv, int n, int hd);

#endif
