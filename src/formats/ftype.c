/* ftype.c - llama.cpp's file types and its per-tensor type rule
 * (llama-quant.cpp: llama_tensor_get_type_impl and tensor_type_fallback,
 * the branches a dense Qwen3 model without an importance matrix reaches:
 * no experts, not Falcon, not the 70B LLaMA). */
#include "formats/ftype.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

static const struct {
    rf_ftype ft;
    const char *name;
    rf_dtype base;
} g_ftypes[] = {
    {RF_FTYPE_F32, "F32", RF_F32},       {RF_FTYPE_F16, "F16", RF_F16},          {RF_FTYPE_BF16, "BF16", RF_BF16},
    {RF_FTYPE_Q8_0, "Q8_0", RF_Q8_0},    {RF_FTYPE_Q6_K, "Q6_K", RF_Q6_K},       {RF_FTYPE_Q5_K_M, "Q5_K_M", RF_Q5_K},
    {RF_FTYPE_Q5_K_S, "Q5_K_S", RF_Q5_K}, {RF_FTYPE_Q5_1, "Q5_1", RF_Q5_1},      {RF_FTYPE_Q5_0, "Q5_0", RF_Q5_0},
    {RF_FTYPE_Q4_K_M, "Q4_K_M", RF_Q4_K}, {RF_FTYPE_Q4_K_S, "Q4_K_S", RF_Q4_K}, {RF_FTYPE_Q4_1, "Q4_1", RF_Q4_1},
    {RF_FTYPE_Q4_0, "Q4_0", RF_Q4_0},    {RF_FTYPE_IQ4_XS, "IQ4_XS", RF_IQ4_XS}, {RF_FTYPE_IQ4_NL, "IQ4_NL", RF_IQ4_NL},
    {RF_FTYPE_Q3_K_L, "Q3_K_L", RF_Q3_K}, {RF_FTYPE_Q3_K_M, "Q3_K_M", RF_Q3_K}, {RF_FTYPE_Q3_K_S, "Q3_K_S", RF_Q3_K},
    {RF_FTYPE_Q2_K, "Q2_K", RF_Q2_K},
};
#define N_FTYPES (int)(sizeof g_ftypes / sizeof g_ftypes[0])

static int find(rf_ftype ft) {
    for (int i = 0; i < N_FTYPES; i++)
        if (g_ftypes[i].ft == ft) return i;
    return -1;
}

int rf_ftype_parse(const char *name, rf_ftype *out) {
    for (int i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(name, g_ftypes[i].name)) {
            *out = g_ftypes[i].ft;
            return 0;
        }
    return -1;
}

const char *rf_ftype_name(rf_ftype ft) {
    int i = find(ft);
    return i < 0 ? "?" : g_ftypes[i].name;
}

rf_dtype rf_ftype_base(rf_ftype ft) {
    int i = find(ft);
    return i < 0 ? RF_DTYPE_COUNT : g_ftypes[i].base;
}

const char *rf_ftype_list(void) {
    static char list[256];
    if (!list[0]) {
        size_t n = 0;
        for (int i = 0; i < N_FTYPES; i++) {
            if (i) list[n++] = ',', list[n++] = ' ';
            for (const char *c = g_ftypes[i].name; *c; c++) list[n++] = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
        }
        list[n] = 0;
    }
    return list;
}

int rf_ftype_of_dtype(rf_dtype t, rf_ftype *out) {
    static const rf_ftype mixes[] = {RF_FTYPE_Q3_K_M, RF_FTYPE_Q4_K_M, RF_FTYPE_Q5_K_M};
    for (int i = 0; i < 3; i++)
        if (rf_ftype_base(mixes[i]) == t) return *out = mixes[i], 0;
    for (int i = 0; i < N_FTYPES; i++)
        if (g_ftypes[i].base == t) return *out = g_ftypes[i].ft, 0;
    return -1;
}

/* llama.cpp's choice of the layers that get more bits in its _M mixes:
 * the first and last eighth and every third one between */
static int more_bits(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

static rf_dtype attn_v_type(rf_ftype ft, rf_dtype t, int i, int n, int gqa) {
    switch (ft) {
    case RF_FTYPE_Q2_K: return gqa >= 4 ? RF_Q4_K : RF_Q3_K;
    case RF_FTYPE_Q3_K_M: return i < 2 ? RF_Q5_K : RF_Q4_K;
    case RF_FTYPE_Q3_K_L: return RF_Q5_K;
    case RF_FTYPE_IQ4_NL:
    case RF_FTYPE_IQ4_XS: return gqa >= 4 ? RF_Q5_K : t;
    case RF_FTYPE_Q4_K_M:
    case RF_FTYPE_Q5_K_M: return more_bits(i, n) ? RF_Q6_K : t;
    case RF_FTYPE_Q4_K_S: return i < 4 ? RF_Q5_K : t;
    default: return t;
    }
}

static rf_dtype ffn_down_type(rf_ftype ft, rf_dtype t, int i, int n) {
    switch (ft) {
    case RF_FTYPE_Q2_K: return RF_Q3_K;
    case RF_FTYPE_Q3_K_M: return i < n / 16 ? RF_Q5_K : RF_Q4_K;
    case RF_FTYPE_Q3_K_L: return RF_Q5_K;
    case RF_FTYPE_Q4_K_M:
    case RF_FTYPE_Q5_K_M: return more_bits(i, n) ? RF_Q6_K : t;
    case RF_FTYPE_IQ4_NL:
    case RF_FTYPE_IQ4_XS:
    case RF_FTYPE_Q4_K_S: return i < n / 8 ? RF_Q5_K : t;
    default: return t;
    }
}

static rf_dtype attn_output_type(rf_ftype ft, rf_dtype t) {
    switch (ft) {
    case RF_FTYPE_Q2_K: return RF_Q3_K;
    case RF_FTYPE_Q3_K_M: return RF_Q4_K;
    case RF_FTYPE_Q3_K_L: return RF_Q5_K;
    default: return t;
    }
}

/* a row that is not whole blocks of t: the 32-block type beside it, F16
 * when not whole 32-blocks either */
static rf_dtype fallback(rf_dtype t, int64_t cols) {
    if (cols % rf_dtype_block_elems(t) == 0) return t;
    switch (t) {
    case RF_IQ4_XS: t = RF_IQ4_NL; break;
    case RF_Q2_K:
    case RF_Q3_K: t = RF_Q4_0; break;
    case RF_Q4_K: t = RF_Q5_0; break;
    case RF_Q5_K: t = RF_Q5_1; break;
    case RF_Q6_K: t = RF_Q8_0; break;
    default: break;
    }
    return cols % rf_dtype_block_elems(t) ? RF_F16 : t;
}

rf_dtype rf_ftype_tensor_type(rf_ftype ft, const rf_ftype_tensor *t) {
    const rf_dtype base = rf_ftype_base(ft);
    if (!rf_dtype_is_quant(base)) return base;
    const char *nm = t->name;
    rf_dtype ty = base;
    if (!strcmp(nm, "output.weight") || (t->tied && !strcmp(nm, "token_embd.weight"))) {
        /* the output projection decides every token: Q6_K (Q8_0 kept) */
        if (t->cols % rf_dtype_block_elems(base)) ty = RF_Q8_0;
        else if (base != RF_Q8_0) ty = RF_Q6_K;
    } else if (strstr(nm, "attn_v.weight")) {
        ty = attn_v_type(ft, base, t->layer, t->n_layers, t->n_gqa);
    } else if (strstr(nm, "ffn_down")) {
        ty = ffn_down_type(ft, base, t->layer, t->n_layers);
    } else if (strstr(nm, "attn_output.weight")) {
        ty = attn_output_type(ft, base);
    }
    return fallback(ty, t->cols);
}
