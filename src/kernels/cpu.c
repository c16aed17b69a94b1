/* cpu.c - run-time CPU tier detection and the REFUSION_CPU override (cpu.h). */
#include "kernels/cpu.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/util.h"

#define ARCH_REQ_XCOMP_PERM 0x1023 /* linux/arch/x86/include/uapi/asm/prctl.h */
#define XFEATURE_XTILEDATA 18

static rf_cpu_tier g_detected, g_active;
static char g_note[320];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* XCR0: which register states the OS saves on a context switch */
static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static rf_cpu_tier detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return RF_CPU_AVX2; /* no OSXSAVE */
    unsigned long long xcr0 = xgetbv0();
    if (__get_cpuid_max(0, NULL) < 7) return RF_CPU_AVX2;
    unsigned b7, c7, d7, a71 = 0, tmp;
    __cpuid_count(7, 0, a, b7, c7, d7);
    int max_sub = (int)a;
    if (max_sub >= 1) __cpuid_count(7, 1, a71, tmp, tmp, tmp);
    /* AVX-512 F, DQ, BW, VL; VNNI; BF16; and the OS saves opmask + all ZMM */
    int avx512 = (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 30 & 1) && (b7 >> 31 & 1) &&
                 (c7 >> 11 & 1) && (a71 >> 5 & 1) && (xcr0 & 0xE6) == 0xE6;
    if (!avx512) return RF_CPU_AVX2;
    /* AMX-BF16 (22), AMX-TILE (24), AMX-INT8 (25); the OS saves XTILECFG +
     * XTILEDATA (XCR0 bits 17, 18) and grants this process the tile data */
    int amx = (d7 >> 22 & 1) && (d7 >> 24 & 1) && (d7 >> 25 & 1) && (xcr0 >> 17 & 3) == 3 &&
              syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return amx ? RF_CPU_AMX : RF_CPU_AVX512;
}

int rf_cpu_is_amd(void) {
    unsigned a, v[3];
    if (!__get_cpuid(0, &a, &v[0], &v[2], &v[1])) return 0; /* ebx, edx, ecx spell the vendor */
    return !memcmp(v, "AuthenticAMD", 12);
}

/* the kernels' best tier: amx only when its kernels were compiled */
static rf_cpu_tier runnable(rf_cpu_tier t) { return t > RF_CPU_AVX512 && !rf_amx_built() ? RF_CPU_AVX512 : t; }

static void init(void) {
    g_detected = detect();
    rf_cpu_tier want = g_detected;
    const char *env = rf_env_cpu_tier();
    if (env && *env) {
        if (!strcmp(env, "avx2")) want = RF_CPU_AVX2;
        else if (!strcmp(env, "avx512")) want = RF_CPU_AVX512;
        else if (!strcmp(env, "amx")) want = RF_CPU_AMX;
        else
            snprintf(g_note, sizeof g_note, "REFUSION_CPU=%.40s is not avx2, avx512 or amx: using %s", env,
                     rf_cpu_tier_str(runnable(g_detected)));
        if (want > g_detected) {
            snprintf(g_note, sizeof g_note, "REFUSION_CPU=%s: this CPU lacks %s, using %s", env, env,
                     rf_cpu_tier_str(runnable(g_detected)));
            want = g_detected;
        }
    }
    if (want == RF_CPU_AMX && !g_note[0] && !rf_amx_built())
        snprintf(g_note, sizeof g_note, "amx detected; this build has no AMX kernels, running avx512");
    g_active = runnable(want);
}

rf_cpu_tier rf_cpu_tier_detected(void) {
    pthread_once(&g_once, init);
    return g_detected;
}

rf_cpu_tier rf_cpu_tier_active(void) {
    pthread_once(&g_once, init);
    return g_active;
}

const char *rf_cpu_tier_str(rf_cpu_tier t) {
    return t == RF_CPU_AMX ? "amx" : t == RF_CPU_AVX512 ? "avx512" : "avx2";
}

const char *rf_cpu_tier_name(void) { return rf_cpu_tier_str(rf_cpu_tier_active()); }

int rf_cpu_set_tier(rf_cpu_tier t) {
    pthread_once(&g_once, init);
    if (t > g_detected) {
        rf_set_error("cpu tier %s: this CPU (or OS) lacks it; best is %s", rf_cpu_tier_str(t),
                     rf_cpu_tier_str(g_detected));
        return -1;
    }
    g_active = runnable(t);
    return 0;
}

const char *rf_cpu_note(void) {
    pthread_once(&g_once, init);
    return g_note;
}
