/* kernels_amx_emul.c - the amx tier's bf16 matmul (src/kernels/matmul_amx.c)
 * with its six tile operations emulated in C (RF_AMX_EMULATE: Intel's
 * pseudocode for LDTILECFG, TILEZERO, TILELOADD, TILESTORED, TDPBF16PS,
 * TILERELEASE), against the double-precision reference, on any CPU.
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
    printf("amx tile kernel (emulated tile operations): layout, packing and tails checked\n");
    if (rf_cpu_tier_detected() < RF_CPU_AMX)
        printf("SKIPPED: amx on hardware (skipped: no AMX on this CPU, or the OS does not grant it)\n");
    else
        printf("this CPU has amx: tests/kernels_matmul runs the real tile kernel\n");
    rf_kernels_shutdown(); /* nothing left for LeakSanitizer */
    return check_summary("kernels_amx_emul");
}
