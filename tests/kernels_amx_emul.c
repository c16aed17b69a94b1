/* kernels_amx_emul.c - the amx tier's bf16 and Q8_0 / Q4_0 matmuls
 * (src/kernels/matmul_amx.c) with their tile operations emulated in C
 * (RF_AMX_EMULATE: Intel's pseudocode for LDTILECFG, TILEZERO, TILELOADD,
 * TILESTORED, TDPBF16PS, TDPBSUD, TILERELEASE), against double-precision
 * references, on any CPU.
 *
 * This checks what the emulation can: the activation packing (16-token
 * groups, the pair layout of the B tile, hi/lo split), the A tiles read
 * in place from the row-major weights with the row stride, the tile
 * configuration (16-row groups, a last group of fewer rows), up to 4 token
 * groups per weight load, the scatter of C to Y, and row sub-ranges as the
 * threads call them; and the same for the kernel on the packed weights
 * (B tiles read in place from the panels, the activations as A tiles). It cannot check the instructions themselves: on an AMX
 * machine tests/kernels_matmul runs the real kernel (here it prints
 * "SKIPPED: amx"). Tolerances as in tests/kernels_matmul.c: split
 * activations 5e-5 (1 + cols / 1000) of max|ref|; single-rounded
 * activations the same against the reference fed bf16(x). */
#define RF_AMX_EMULATE
#include "kernels/matmul_amx.c"

#include "kernels/cpu.h"
#include "check.h"

static void run(rf_rng *g, int rows, int cols, int n, int single) {
    uint16_t *wd = malloc((size_t)rows * cols * 2);
    for (size_t i = 0; i < (size_t)rows * cols; i++) wd[i] = rf_f32_to_bf16(rf_rng_normal(g));
    rf_mat W = {RF_BF16, wd, rows, cols, NULL};
    float *X = malloc(sizeof(float) * n * cols), *Xr = malloc(sizeof(float) * n * cols);
    float *Y = malloc(sizeof(float) * n * rows), *R = malloc(sizeof(float) * n * rows);
    for (int i = 0; i < n * cols; i++) {
        X[i] = rf_rng_normal(g);
        Xr[i] = single ? rf_bf16_to_f32(rf_f32_to_bf16(X[i])) : X[i];
    }
    void *xp = malloc(emu_rf_bf16_prep_amx_bytes(n, cols, single));
    emu_rf_bf16_prep_amx(xp, X, n, cols, single);
    /* the rows in two ranges, as two threads' chunks would be (a multiple of
     * 12, so the groups of 16 start off the matrix's 16-row grid) */
    int mid = rows > 12 ? rows / 24 * 12 : rows;
    for (size_t i = 0; i < (size_t)n * rows; i++) Y[i] = NAN;
    emu_rf_bf16_range_amx(Y, rows, xp, &W, n, 0, mid, single);
    emu_rf_bf16_range_amx(Y, rows, xp, &W, n, mid, rows, single);
    rf_matmul_naive(R, Xr, &W, n);
    double e = check_rel_err(Y, R, (size_t)n * rows);
    CHECK(e <= 5e-5 * (1.0 + cols / 1000.0), "emulated amx bf16 %s rows=%d cols=%d n=%d: rel err %.3g",
          single ? "single" : "split", rows, cols, n, e);

    /* the packed copy (what a loaded model keeps): B tiles read in place
     * from the panels, activations as A; chunks start on panel boundaries */
    void *pk = rf_aligned_alloc(rf_bf16_pack_bytes(rows, cols));
    rf_bf16_pack(pk, wd, rows, cols);
    rf_mat P = W;
    P.data = NULL; /* the packed kernel must not read the row-major weights */
    P.packed = pk;
    void *xq = malloc(emu_rf_bf16p_prep_amx_bytes(n, cols, single));
    emu_rf_bf16p_prep_amx(xq, X, n, cols, single);
    int pmid = rows > 16 ? rows / 32 * 16 : rows;
    for (size_t i = 0; i < (size_t)n * rows; i++) Y[i] = NAN;
    emu_rf_bf16p_range_amx(Y, rows, xq, &P, n, 0, pmid, single);
    emu_rf_bf16p_range_amx(Y, rows, xq, &P, n, pmid, rows, single);
    e = check_rel_err(Y, R, (size_t)n * rows);
    CHECK(e <= 5e-5 * (1.0 + cols / 1000.0), "emulated amx bf16 packed %s rows=%d cols=%d n=%d: rel err %.3g",
          single ? "single" : "split", rows, cols, n, e);
    free(pk), free(xq);
    free(wd), free(X), free(Xr), free(Y), free(R), free(xp);
}

/* Q8_0 / Q4_0 on the int8 tiles (TDPBSUD emulated): rf_q_prep_amx's
 * activations and W packed (rf_mat_pack) against an independent
 * reference: the activations quantised here per 32-block (d = max|x| / 127,
 * q = round-to-nearest-even(x / d), what the prep must compute), the
 * weights dequantised per block, sum_b d_w d_x sum q w in double. The
 * tile kernel's only rounding is the f32 scaling and sum: 1e-5 of
 * sum |terms| (a wrong scale, block, row or token is of the order of 1).
 * Rows [0, mid) and [mid, rows) as two threads' chunks (mid a multiple of
 * 16: the packed kernel's ranges start on a panel). */
static void run_q(rf_rng *g, rf_dtype dt, int rows, int cols, int n) {
    const int nb = cols / 32;
    size_t rb = rf_dtype_row_bytes(dt, cols);
    uint8_t *wd = malloc(rb * rows);
    float *tmp = malloc(sizeof(float) * cols), *wf = malloc(sizeof(float) * (size_t)rows * cols);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) tmp[c] = rf_rng_normal(g) * (1 + r % 3);
        if (dt == RF_Q8_0) rf_quantize_row_q8_0(tmp, wd + r * rb, cols);
        else rf_quantize_row_q4_0(tmp, wd + r * rb, cols);
        if (dt == RF_Q8_0) rf_dequantize_row_q8_0(wd + r * rb, wf + (size_t)r * cols, cols);
        else rf_dequantize_row_q4_0(wd + r * rb, wf + (size_t)r * cols, cols);
    }
    rf_mat W = {dt, wd, rows, cols, NULL};
    void *pk = aligned_alloc(64, (rf_mat_pack_bytes(&W) + 63) / 64 * 64);
    rf_mat_pack(&W, pk);
    float *X = malloc(sizeof(float) * n * cols), *Y = malloc(sizeof(float) * n * rows);
    for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(g);
    void *xp = malloc(emu_rf_q_prep_amx_bytes(n, cols));
    emu_rf_q_prep_amx(xp, X, n, cols, dt);
    int mid = rows > 16 ? rows / 32 * 16 : rows;
    for (size_t i = 0; i < (size_t)n * rows; i++) Y[i] = NAN;
    emu_rf_q_range_amx(Y, rows, xp, &W, n, 0, mid);
    emu_rf_q_range_amx(Y, rows, xp, &W, n, mid, rows);
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int b = 0; b < nb; b++) {
                const float *x = X + (size_t)t * cols + b * 32;
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
                const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                for (int i = 0; i < 32; i++) {
                    double term = (double)wf[(size_t)r * cols + b * 32 + i] * d * nearbyintf(x[i] * id);
                    ref += term, mag += fabs(term);
                }
            }
            double y = Y[(size_t)t * rows + r], e = y != y ? INFINITY : fabs(y - ref) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    CHECK(worst <= 1e-5, "emulated amx %s rows=%d cols=%d n=%d: rel err %.3g of sum |terms|", rf_dtype_name(dt), rows,
          cols, n, worst);
    free(wd), free(tmp), free(wf), free(pk), free(X), free(Y), free(xp);
}

int main(void) {
    rf_rng g;
    rf_rng_seed(&g, 5);
    const int rows_l[] = {1, 15, 16, 17, 40, 100};
    const int cols_l[] = {32, 96, 1024};
    const int n_l[] = {1, 3, 16, 17, 64, 65, 130};
    for (int single = 0; single < 2; single++)
        for (size_t ri = 0; ri < sizeof rows_l / sizeof *rows_l; ri++)
            for (size_t ci = 0; ci < sizeof cols_l / sizeof *cols_l; ci++)
                for (size_t ni = 0; ni < sizeof n_l / sizeof *n_l; ni++)
                    if ((double)rows_l[ri] * cols_l[ci] * n_l[ni] <= 4e6)
                        run(&g, rows_l[ri], cols_l[ci], n_l[ni], single);
    /* int8 tiles: ragged panels (rows), 1..3 token groups, 1..64 tokens per A tile set */
    const int qrows_l[] = {1, 16, 17, 40, 113};
    const int qcols_l[] = {32, 96, 1024};
    const int qn_l[] = {1, 2, 15, 16, 17, 33, 64, 65};
    for (int q = 0; q < 2; q++)
        for (size_t ri = 0; ri < sizeof qrows_l / sizeof *qrows_l; ri++)
            for (size_t ci = 0; ci < sizeof qcols_l / sizeof *qcols_l; ci++)
                for (size_t ni = 0; ni < sizeof qn_l / sizeof *qn_l; ni++)
                    if ((double)qrows_l[ri] * qcols_l[ci] * qn_l[ni] <= 2e6)
                        run_q(&g, q ? RF_Q4_0 : RF_Q8_0, qrows_l[ri], qcols_l[ci], qn_l[ni]);
    printf("amx tile kernel (emulated tile operations): bf16 and int8 layouts, packing and tails checked\n");
    if (rf_cpu_tier_detected() < RF_CPU_AMX)
        printf("SKIPPED: amx on hardware (skipped: no AMX on this CPU, or the OS does not grant it)\n");
    else
        printf("this CPU has amx: tests/kernels_matmul runs the real tile kernel\n");
    rf_kernels_shutdown(); /* nothing left for LeakSanitizer */
    return check_summary("kernels_amx_emul");
}
