/* kernel_settings.h - the kernel settings an A/B benchmark can give each
 * side, as one string: comma-separated tier=avx2|avx512|amx (the CPU tier,
 * kernels/cpu.h), amx-int8=N (packed Q8_0/Q4_0 calls of >= N tokens on AMX
 * int8 tiles, 0 none, -1 the default widths; kernels.h
 * rf_matmul_set_amx_int8), amx-bf16=N (bf16 calls of >= N tokens on AMX
 * tiles, 0 none, -1 the default; rf_matmul_set_amx_bf16), bf16-act=single|split (kernels.h
 * rf_matmul_set_bf16_act), prefetch-l2=N (L2 prefetch up to N tokens, 0 none,
 * rf_matmul_set_prefetch_l2), stream-panels=0|1|2|4 (the panel-group tiles'
 * panel cap, rf_matmul_set_stream_panels); empty: the defaults. They are process-wide, so
 * a benchmark applies a side's settings before each of its calls or
 * generations, while no matmul runs. (A header of static functions: each
 * benchmark is one file.) */
#ifndef RF_BENCH_KERNEL_SETTINGS_H
#define RF_BENCH_KERNEL_SETTINGS_H

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "util/util.h"

#define BENCH_KERNELS_HELP "tier=avx2|avx512|amx,amx-int8=N,amx-bf16=N,bf16-act=single|split,prefetch-l2=N,stream-panels=N"

typedef struct {
    int tier;     /* -1: the detected one */
    int amx_int8; /* -1: the default widths */
    int amx_bf16; /* -1: the default widths */
    int bf16_act; /* -1: the default; 1 single, 0 split */
    int bf16_default;
    int prefetch; /* -1: the default */
    int panels;   /* -1: the default */
} bench_kernels;

/* 0, or -1 when text is not a settings string or names a tier the CPU lacks */
static int bench_kernels_parse(bench_kernels *s, const char *text) {
    *s = (bench_kernels){-1, -1, -1, -1, rf_matmul_bf16_act(), -1, -1};
    char buf[256];
    if (strlen(text) >= sizeof buf) return -1;
    strcpy(buf, text);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *v = strchr(tok, '=');
        if (!v) return -1;
        *v++ = 0;
        if (!strcmp(tok, "tier")) {
            s->tier = !strcmp(v, "avx2")     ? RF_CPU_AVX2
                      : !strcmp(v, "avx512") ? RF_CPU_AVX512
                      : !strcmp(v, "amx")    ? RF_CPU_AMX
                                             : -2;
            if (s->tier == -2 || s->tier > (int)rf_cpu_tier_detected()) return -1;
        } else if (!strcmp(tok, "amx-int8") || !strcmp(tok, "amx-bf16") || !strcmp(tok, "prefetch-l2")) {
            int *dst = !strcmp(tok, "amx-int8") ? &s->amx_int8 : !strcmp(tok, "amx-bf16") ? &s->amx_bf16 : &s->prefetch;
            char *e;
            long n = strtol(v, &e, 10);
            if (!*v || *e || n < -1 || n > (dst == &s->prefetch ? 1 << 20 : 512)) return -1;
            *dst = (int)n;
        } else if (!strcmp(tok, "stream-panels")) {
            if ((s->panels = rf_stream_panels_parse(v)) < 0) return -1;
        } else if (!strcmp(tok, "bf16-act")) {
            s->bf16_act = !strcmp(v, "single") ? 1 : !strcmp(v, "split") ? 0 : -2;
            if (s->bf16_act == -2) return -1;
        } else
            return -1;
    }
    return 0;
}

static void bench_kernels_apply(const bench_kernels *s) {
    if (rf_cpu_set_tier(s->tier < 0 ? rf_cpu_tier_detected() : (rf_cpu_tier)s->tier) != 0)
        rf_die("tier %s: this CPU lacks it", rf_cpu_tier_str((rf_cpu_tier)s->tier));
    rf_matmul_set_amx_int8(s->amx_int8);
    rf_matmul_set_amx_bf16(s->amx_bf16);
    rf_matmul_set_bf16_act(s->bf16_act < 0 ? s->bf16_default : s->bf16_act);
    rf_matmul_set_prefetch_l2(s->prefetch);
    rf_matmul_set_stream_panels(s->panels);
}

#endif
