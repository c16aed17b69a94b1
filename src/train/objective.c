/* objective.c - turn tokenised examples into a micro-batch: the physical
 * token sequence, position ids, attention mode, and per-token (target,
 * weight) so that the micro-batch loss sum_i weight_i CE_i equals the
 * reference's loss.
 *
 * ReFusion (the reference's forward_process + Qwen3ForCausalLM.forward):
 *   per example draw a slot size from {4,8,16,32}, t ~ U(0,1),
 *   p = (1-eps) t + eps, mask each slot of the response with probability p;
 *   input = prompt, unmasked slots in random order (true tokens), masked
 *   slots in original order (<|mask|>); every token keeps its true position.
 *   Inside an unmasked slot token j predicts token j+1; a mask predicts its
 *   own token. Causal attention over that physical order.
 *   Normalisation, exactly as the reference:
 *     AR  = mean over every AR target of the whole micro-batch
 *           -> weight 1 / (number of AR targets in the micro-batch)
 *           (the reference's torch mean of an empty set is NaN; here a
 *           micro-batch without AR targets contributes 0);
 *     MDM = sum over masks of CE / p_b / answer_len_b, divided by the number
 *           of examples B -> weight 1 / (p_b * answer_len_b * B)
 *   where answer_len is the response length including EOS.
 * AR baseline: natural order, the last prompt token and every response
 *   token but the last predict the next token: weight 1 / (targets in the
 *   micro-batch), HF's causal-LM mean.
 * MDM baseline (LLaDA SFT): natural order, bidirectional attention, each
 *   response token masked independently with probability p = (1-eps) t + eps,
 *   t ~ U(0,1) per example; weight 1 / (p_b * answer_len_b * B). With
 *   mdm_pad the response is first padded with EOS to that length (LLaDA's
 *   SFT recipe) and answer_len_b is the padded length.
 * With gradient accumulation every weight is further scaled by 1/accum: the
 * step minimises the mean of the micro-batch losses, as HF Trainer does.
 *
 * Beyond the reference (both off by default, see rf_objcfg): aux_ar appends
 * every example once more in natural order with the AR baseline's targets,
 * weighted aux_ar / (aux targets in the micro-batch); mask_floor draws
 * t ~ U(mask_floor, 1).
 *
 * The RNG draws follow the reference's order (slot size, t, one draw per
 * slot, Fisher-Yates shuffle of the unmasked slots as Python's shuffle). */
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

const char *rf_objective_name(rf_objective o) {
    return o == RF_OBJ_AR ? "ar" : o == RF_OBJ_MDM ? "mdm" : "refusion";
}

int rf_objective_parse(const char *s, rf_objective *o) {
    if (!strcmp(s, "refusion")) *o = RF_OBJ_REFUSION;
    else if (!strcmp(s, "ar")) *o = RF_OBJ_AR;
    else if (!strcmp(s, "mdm")) *o = RF_OBJ_MDM;
    else return -1;
    return 0;
}

void rf_objcfg_default(rf_objcfg *oc, rf_objective obj, int mask_id) {
    memset(oc, 0, sizeof *oc);
    oc->obj = obj;
    oc->mask_id = mask_id;
    oc->eps = 1e-3f;
    static const int sizes[] = {4, 8, 16, 32};
    for (int i = 0; i < 4; i++) oc->slot_sizes[i] = sizes[i];
    oc->n_slot_sizes = 4;
}

void rf_tbatch_free(rf_tbatch *b) {
    free(b->off);
    free(b->tokens);
    free(b->pos);
    free(b->target);
    free(b->weight);
    free(b->kind);
    free(b->slot_size);
    free(b->p_mask);
    memset(b, 0, sizeof *b);
}

static void reserve(rf_tbatch *b, int n_seq, int n_tok) {
    if (n_seq > b->cap_seq) {
        b->cap_seq = n_seq;
        b->off = realloc(b->off, (size_t)(n_seq + 1) * sizeof(int));
        b->slot_size = realloc(b->slot_size, (size_t)n_seq * sizeof(int));
        b->p_mask = realloc(b->p_mask, (size_t)n_seq * sizeof(float));
        if (!b->off || !b->slot_size || !b->p_mask) rf_die("out of memory");
    }
    if (n_tok > b->cap_tok) {
        b->cap_tok = n_tok;
        b->tokens = realloc(b->tokens, (size_t)n_tok * sizeof(int));
        b->pos = realloc(b->pos, (size_t)n_tok * sizeof(int));
        b->target = realloc(b->target, (size_t)n_tok * sizeof(int));
        b->weight = realloc(b->weight, (size_t)n_tok * sizeof(float));
        b->kind = realloc(b->kind, (size_t)n_tok);
        if (!b->tokens || !b->pos || !b->target || !b->weight || !b->kind) rf_die("out of memory");
    }
}

/* Append token (id, pos) predicting target (-1: none) of kind; weight later. */
static void put(rf_tbatch *b, int *n, int id, int pos, int target, int kind) {
    b->tokens[*n] = id;
    b->pos[*n] = pos;
    b->target[*n] = target;
    b->kind[*n] = (uint8_t)(target < 0 ? RF_LOSS_NONE : kind);
    b->weight[*n] = 0.0f;
    (*n)++;
}

static void build_refusion(rf_tbatch *b, int *n, const rf_objcfg *oc, const rf_example *e,
                           int s, rf_rng *rng, int *order) {
    int P = e->n_prompt, R = e->n_resp;
    const int *resp = e->ids + P;
    int slot = oc->slot_sizes[rf_rng_below(rng, (uint64_t)oc->n_slot_sizes)];
    int n_slots = (R + slot - 1) / slot;
    double t = oc->mask_floor + (1.0 - oc->mask_floor) * rf_rng_uniform(rng);
    float p = (float)((1.0 - oc->eps) * t + oc->eps);
    b->slot_size[s] = slot;
    b->p_mask[s] = p;
    /* order[0..nu) unmasked slots, order[nu..n_slots) masked, both ascending */
    int nu = 0, nm = 0;
    int *masked = order + n_slots; /* second half of the scratch */
    for (int k = 0; k < n_slots; k++) {
        if (rf_rng_uniform(rng) < p) masked[nm++] = k;
        else order[nu++] = k;
    }
    for (int i = nu - 1; i > 0; i--) { /* Fisher-Yates, as random.shuffle */
        int j = (int)rf_rng_below(rng, (uint64_t)i + 1);
        int tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int i = 0; i < P; i++) put(b, n, e->ids[i], i, -1, RF_LOSS_NONE);
    for (int u = 0; u < nu; u++) {
        int k0 = order[u] * slot, k1 = k0 + slot < R ? k0 + slot : R;
        for (int k = k0; k < k1; k++) put(b, n, resp[k], P + k, k + 1 < k1 ? resp[k + 1] : -1, RF_LOSS_AR);
    }
    for (int u = 0; u < nm; u++) {
        int k0 = masked[u] * slot, k1 = k0 + slot < R ? k0 + slot : R;
        for (int k = k0; k < k1; k++) put(b, n, oc->mask_id, P + k, resp[k], RF_LOSS_MDM);
    }
}

static void build_ar(rf_tbatch *b, int *n, const rf_example *e) {
    int L = e->n_prompt + e->n_resp;
    for (int i = 0; i < L; i++) {
        int tgt = i >= e->n_prompt - 1 && i + 1 < L ? e->ids[i + 1] : -1;
        put(b, n, e->ids[i], i, tgt, RF_LOSS_AR);
    }
}

int rf_objcfg_seqs_per_example(const rf_objcfg *oc) {
    return oc->obj == RF_OBJ_REFUSION && oc->aux_ar > 0 ? 2 : 1;
}

int rf_objcfg_resp_len(const rf_objcfg *oc, const rf_example *e) {
    return oc->obj == RF_OBJ_MDM && oc->mdm_pad > e->n_resp ? oc->mdm_pad : e->n_resp;
}

static void build_mdm(rf_tbatch *b, int *n, const rf_objcfg *oc, const rf_example *e, int s,
                      rf_rng *rng) {
    int P = e->n_prompt, L = P + rf_objcfg_resp_len(oc, e), eos = e->ids[P + e->n_resp - 1];
    double t = rf_rng_uniform(rng);
    float p = (float)((1.0 - oc->eps) * t + oc->eps);
    b->slot_size[s] = 0;
    b->p_mask[s] = p;
    for (int i = 0; i < P; i++) put(b, n, e->ids[i], i, -1, RF_LOSS_NONE);
    for (int i = P; i < L; i++) {
        int t = i < P + e->n_resp ? e->ids[i] : eos; /* EOS padding (mdm_pad) */
        if (rf_rng_uniform(rng) < p) put(b, n, oc->mask_id, i, t, RF_LOSS_MDM);
        else put(b, n, t, i, -1, RF_LOSS_NONE);
    }
}

/* Examples draw from one shared stream (rng) or each from its own seed. */
static void build(rf_tbatch *b, const rf_objcfg *oc, const rf_example *const *ex, int n_ex,
                  float scale, rf_rng *shared, const uint64_t *seeds) {
    int total = 0, max_resp = 1, per = rf_objcfg_seqs_per_example(oc), n_seq = per * n_ex;
    for (int s = 0; s < n_ex; s++) {
        int r = rf_objcfg_resp_len(oc, ex[s]);
        total += ex[s]->n_prompt + r;
        if (r > max_resp) max_resp = r;
    }
    total *= per;
    reserve(b, n_seq > 0 ? n_seq : 1, total > 0 ? total : 1);
    int *order = rf_malloc((size_t)(2 * max_resp) * sizeof(int));
    b->n_seq = n_seq;
    b->bidirectional = oc->obj == RF_OBJ_MDM;
    int n = 0;
    for (int s = 0; s < n_ex; s++) {
        b->off[s] = n;
        b->slot_size[s] = 0;
        b->p_mask[s] = 0.0f;
        rf_rng own, *rng = shared;
        if (seeds) {
            rf_rng_seed(&own, seeds[s]);
            rng = &own;
        }
        if (oc->obj == RF_OBJ_REFUSION) build_refusion(b, &n, oc, ex[s], s, rng, order);
        else if (oc->obj == RF_OBJ_AR) build_ar(b, &n, ex[s]);
        else build_mdm(b, &n, oc, ex[s], s, rng);
    }
    for (int s = n_ex; s < n_seq; s++) { /* aux_ar: the natural-order copies */
        b->off[s] = n;
        b->slot_size[s] = 0;
        b->p_mask[s] = 0.0f;
        build_ar(b, &n, ex[s - n_ex]);
    }
    b->off[n_seq] = n;
    b->n_tok = n;
    free(order);

    /* weights: the reference's normalisation (see the top of this file) */
    int n_ar = 0, n_aux = 0, aux0 = n_seq > n_ex ? b->off[n_ex] : n;
    for (int i = 0; i < n; i++) {
        n_ar += b->kind[i] == RF_LOSS_AR && i < aux0;
        n_aux += b->kind[i] == RF_LOSS_AR && i >= aux0;
    }
    for (int i = aux0; i < n; i++)
        if (b->kind[i] == RF_LOSS_AR) b->weight[i] = scale * oc->aux_ar / (float)n_aux;
    for (int s = 0; s < n_ex; s++)
        for (int i = b->off[s]; i < b->off[s + 1]; i++) {
            if (b->kind[i] == RF_LOSS_AR) b->weight[i] = scale / (float)n_ar;
            else if (b->kind[i] == RF_LOSS_MDM)
                b->weight[i] = scale / (b->p_mask[s] * (float)rf_objcfg_resp_len(oc, ex[s]) * (float)n_ex);
        }
}

void rf_tbatch_build(rf_tbatch *b, const rf_objcfg *oc, const rf_example *const *ex, int n,
                     float scale, rf_rng *rng) {
    build(b, oc, ex, n, scale, rng, NULL);
}

void rf_tbatch_build_seeded(rf_tbatch *b, const rf_objcfg *oc, const rf_example *const *ex,
                            int n, float scale, const uint64_t *seeds) {
    build(b, oc, ex, n, scale, NULL, seeds);
}

void rf_tbatch_shard(rf_tbatch *dst, const rf_tbatch *src, int n_ex, int e0, int e1) {
    int per = n_ex > 0 ? src->n_seq / n_ex : 1, n_seq = per * (e1 - e0), n_tok = 0;
    for (int c = 0; c < per; c++) n_tok += src->off[c * n_ex + e1] - src->off[c * n_ex + e0];
    reserve(dst, n_seq > 0 ? n_seq : 1, n_tok > 0 ? n_tok : 1);
    dst->n_seq = n_seq;
    dst->bidirectional = src->bidirectional;
    int n = 0, s = 0;
    for (int c = 0; c < per; c++) /* c = 1: the aux_ar copies, after all the examples */
        for (int e = e0; e < e1; e++, s++) {
            int i0 = src->off[c * n_ex + e], len = src->off[c * n_ex + e + 1] - i0;
            dst->off[s] = n;
            dst->slot_size[s] = src->slot_size[c * n_ex + e];
            dst->p_mask[s] = src->p_mask[c * n_ex + e];
            memcpy(dst->tokens + n, src->tokens + i0, (size_t)len * sizeof(int));
            memcpy(dst->pos + n, src->pos + i0, (size_t)len * sizeof(int));
            memcpy(dst->target + n, src->target + i0, (size_t)len * sizeof(int));
            memcpy(dst->weight + n, src->weight + i0, (size_t)len * sizeof(float));
            memcpy(dst->kind + n, src->kind + i0, (size_t)len);
            n += len;
        }
    dst->off[n_seq] = n;
    dst->n_tok = n;
}
