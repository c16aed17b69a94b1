/* train_objective.c - the micro-batch construction on its own: which token
 * sits where, its position id, which tokens carry which loss with which
 * weight, the order of slots, slot sizes and the shorter last slot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/train.h"

enum { MASK = 999 }; /* not among the ids make() produces */

static rf_example make(int P, int R, int base) {
    rf_example e = {malloc(sizeof(int) * (size_t)(P + R)), P, R};
    for (int i = 0; i < P; i++) e.ids[i] = 10 + i;
    for (int i = 0; i < R; i++) e.ids[P + i] = base + i;
    return e;
}

/* One hand-worked ReFusion example: P = 2 (10 11), R = 10 (20..29), slot 4:
 * slots [20..23] [24..27] [28 29]. Find a draw with slot 0 masked and the
 * unmasked slots in the order 2, 1; then every array is known exactly. */
static void hand_worked(void) {
    rf_example e = make(2, 10, 20);
    const rf_example *ep = &e;
    rf_objcfg oc;
    rf_objcfg_default(&oc, RF_OBJ_REFUSION, MASK);
    oc.slot_sizes[0] = 4;
    oc.n_slot_sizes = 1;
    rf_rng rng;
    rf_rng_seed(&rng, 5);
    rf_tbatch b = {0};
    int found = 0;
    for (int tries = 0; tries < 10000 && !found; tries++) {
        rf_tbatch_build(&b, &oc, &ep, 1, 1.0f, &rng);
        found = b.tokens[2] == 28 && b.tokens[4] == 24 && b.tokens[8] == MASK;
    }
    CHECK(found, "no draw with slot 0 masked and order 2, 1");
    int tok[] = {10, 11, 28, 29, 24, 25, 26, 27, MASK, MASK, MASK, MASK};
    int pos[] = {0, 1, 10, 11, 6, 7, 8, 9, 2, 3, 4, 5};
    int tgt[] = {-1, -1, 29, -1, 25, 26, 27, -1, 20, 21, 22, 23};
    int kind[] = {0, 0, 1, 0, 1, 1, 1, 0, 2, 2, 2, 2};
    CHECK(b.n_tok == 12 && b.n_seq == 1 && b.off[0] == 0 && b.off[1] == 12, "sizes");
    CHECK(!b.bidirectional, "refusion attention is causal");
    CHECK(b.slot_size[0] == 4, "slot size %d", b.slot_size[0]);
    float p = b.p_mask[0];
    for (int i = 0; i < 12; i++) {
        CHECK(b.tokens[i] == tok[i], "token %d: %d want %d", i, b.tokens[i], tok[i]);
        CHECK(b.pos[i] == pos[i], "pos %d: %d want %d", i, b.pos[i], pos[i]);
        CHECK(b.target[i] == tgt[i], "target %d: %d want %d", i, b.target[i], tgt[i]);
        CHECK(b.kind[i] == kind[i], "kind %d: %d want %d", i, b.kind[i], kind[i]);
        /* AR: mean over the 4 AR targets; MDM: 1 / (p * answer length 10 * batch 1) */
        float want = kind[i] == 1 ? 0.25f : kind[i] == 2 ? 1.0f / (p * 10.0f) : 0.0f;
        CHECK(fabsf(b.weight[i] - want) <= 1e-6f * want, "weight %d: %g want %g", i,
              (double)b.weight[i], (double)want);
    }
    rf_tbatch_free(&b);
    free(e.ids);
}

/* Properties over many random draws, batches of 3 examples of odd lengths. */
static void random_draws(void) {
    rf_example ex[3] = {make(3, 13, 100), make(1, 37, 200), make(6, 64, 300)};
    const rf_example *ep[3] = {&ex[0], &ex[1], &ex[2]};
    rf_objcfg oc;
    rf_objcfg_default(&oc, RF_OBJ_REFUSION, MASK);
    rf_rng rng;
    rf_rng_seed(&rng, 42);
    rf_tbatch b = {0};
    int size_count[33] = {0}, perm_count[6] = {0}, n_slots_total = 0, n_masked_total = 0;
    int bad = 0, shorter_last = 0;
    const int DRAWS = 4000;
    for (int it = 0; it < DRAWS; it++) {
        float scale = 0.5f;
        rf_tbatch_build(&b, &oc, ep, 3, scale, &rng);
        int n_ar = 0;
        double w_ar = 0;
        for (int i = 0; i < b.n_tok; i++)
            if (b.kind[i] == RF_LOSS_AR) n_ar++, w_ar += b.weight[i];
        if (n_ar && fabs(w_ar - scale) > 1e-5) bad++; /* AR part is a mean */
        for (int s = 0; s < 3; s++) {
            const rf_example *e = ep[s];
            int P = e->n_prompt, R = e->n_resp, S = b.slot_size[s], o = b.off[s];
            float p = b.p_mask[s];
            if (b.off[s + 1] - o != P + R) bad++;
            if (S != 4 && S != 8 && S != 16 && S != 32) { bad++; continue; }
            size_count[S]++;
            if (p < 1e-3f || p > 1.0f) bad++;
            for (int i = 0; i < P; i++) /* prompt untouched, no loss */
                if (b.tokens[o + i] != e->ids[i] || b.pos[o + i] != i || b.target[o + i] != -1)
                    bad++;
            int n_slots = (R + S - 1) / S, seen[64] = {0}, order[64], n_order = 0;
            int in_masked = 0, last_masked = -1;
            /* walk the answer slot by slot */
            for (int i = o + P; i < o + P + R;) {
                int k = (b.pos[i] - P) / S; /* slot index from the position */
                int k0 = k * S, k1 = k0 + S < R ? k0 + S : R;
                if (b.pos[i] != P + k0 || seen[k]) { bad++; break; }
                seen[k] = 1;
                int masked = b.tokens[i] == MASK;
                if (in_masked && !masked) bad++;       /* unmasked after a masked slot */
                if (masked && k <= last_masked) bad++; /* masked slots in order */
                if (masked) last_masked = k, in_masked = 1, n_masked_total++;
                else order[n_order++] = k;
                for (int j = k0; j < k1; j++, i++) {
                    if (b.pos[i] != P + j) bad++;
                    int truth = e->ids[P + j];
                    if (masked) {
                        float w = scale / (p * (float)R * 3.0f);
                        if (b.tokens[i] != MASK || b.target[i] != truth ||
                            b.kind[i] != RF_LOSS_MDM || fabsf(b.weight[i] - w) > 1e-6f * w)
                            bad++;
                    } else {
                        int want = j + 1 < k1 ? e->ids[P + j + 1] : -1;
                        if (b.tokens[i] != truth || b.target[i] != want) bad++;
                        if (want >= 0 && (b.kind[i] != RF_LOSS_AR ||
                                          fabsf(b.weight[i] - scale / (float)n_ar) > 1e-7f))
                            bad++;
                    }
                }
                if (k == n_slots - 1 && k1 - k0 < S) shorter_last++;
            }
            for (int k = 0; k < n_slots; k++)
                if (!seen[k]) bad++;
            n_slots_total += n_slots;
            /* the shuffle: example 0 (R 13) with slot 4 and exactly slots 1,2,3 unmasked
             * (slot 0 masked): count which of the 6 orders came out */
            if (s == 0 && S == 4 && n_order == 3 && seen[0] && order[0] != 0 && order[1] != 0 &&
                order[2] != 0) {
                int a = order[0], c = order[1];
                int id = a == 1 ? (c == 2 ? 0 : 1) : a == 2 ? (c == 1 ? 2 : 3) : (c == 1 ? 4 : 5);
                perm_count[id]++;
            }
        }
    }
    CHECK(bad == 0, "%d violations of the construction rules", bad);
    for (int s = 4; s <= 32; s *= 2) /* 3 examples x 4000 draws, 1/4 each = 3000 +- 47 */
        CHECK(abs(size_count[s] - 3000) < 250, "slot size %d drawn %d times", s, size_count[s]);
    double frac = (double)n_masked_total / n_slots_total; /* E[p] = (1 + eps) / 2 */
    CHECK(fabs(frac - 0.5) < 0.03, "masked slot fraction %.3f", frac);
    CHECK(shorter_last > 0, "no shorter last slot seen");
    int pmin = 1 << 30, ptot = 0;
    for (int i = 0; i < 6; i++) pmin = perm_count[i] < pmin ? perm_count[i] : pmin, ptot += perm_count[i];
    CHECK(ptot > 30 && pmin > ptot / 12, "unmasked slot orders not uniform (min %d of %d)", pmin,
          ptot);
    printf("refusion: slot sizes 4/8/16/32 drawn %d/%d/%d/%d, masked fraction %.3f, "
           "orders of 3 unmasked slots %d/%d/%d/%d/%d/%d\n",
           size_count[4], size_count[8], size_count[16], size_count[32], frac, perm_count[0],
           perm_count[1], perm_count[2], perm_count[3], perm_count[4], perm_count[5]);
    rf_tbatch_free(&b);
    for (int i = 0; i < 3; i++) free(ex[i].ids);
}

static void baselines(void) {
    rf_example ex[2] = {make(2, 3, 50), make(3, 40, 60)};
    const rf_example *ep[2] = {&ex[0], &ex[1]};
    rf_objcfg oc;
    rf_tbatch b = {0};
    rf_rng rng;
    rf_rng_seed(&rng, 9);

    /* AR: natural order; the last prompt token and every answer token but the
     * last predict the next; mean over all 3 + 40 targets of the micro-batch */
    rf_objcfg_default(&oc, RF_OBJ_AR, MASK);
    rf_tbatch_build(&b, &oc, ep, 2, 1.0f, &rng);
    int tgt0[] = {-1, 50, 51, 52, -1};
    CHECK(b.n_tok == 48 && !b.bidirectional, "ar sizes");
    for (int i = 0; i < 5; i++) {
        CHECK(b.tokens[i] == ex[0].ids[i] && b.pos[i] == i, "ar token/pos %d", i);
        CHECK(b.target[i] == tgt0[i], "ar target %d: %d", i, b.target[i]);
        CHECK(b.weight[i] == (tgt0[i] < 0 ? 0.0f : 1.0f / 43.0f), "ar weight %d", i);
    }
    int n_t = 0;
    for (int i = 5; i < 48; i++) {
        int j = i - 5;
        n_t += b.target[i] >= 0;
        CHECK(b.pos[i] == j && b.target[i] == (j >= 2 && j + 1 < 43 ? ex[1].ids[j + 1] : -1),
              "ar example 1 token %d", j);
    }
    CHECK(n_t == 40, "ar example 1 has %d targets", n_t);

    /* MDM: bidirectional, natural order, answer tokens masked independently
     * with p; a mask predicts its own token with weight 1 / (p * R * B) */
    rf_objcfg_default(&oc, RF_OBJ_MDM, MASK);
    long n_masked = 0, n_resp = 0;
    double sum_p = 0;
    int bad = 0;
    for (int it = 0; it < 2000; it++) {
        rf_tbatch_build(&b, &oc, ep, 2, 1.0f, &rng);
        if (!b.bidirectional) bad++;
        for (int s = 0; s < 2; s++) {
            int o = b.off[s], P = ex[s].n_prompt, R = ex[s].n_resp;
            float p = b.p_mask[s];
            sum_p += p * R;
            for (int i = 0; i < P + R; i++) {
                if (b.pos[o + i] != i) bad++;
                int masked = b.tokens[o + i] == MASK;
                if (i < P && (masked || b.target[o + i] != -1)) bad++;
                if (masked) {
                    n_masked++;
                    if (b.target[o + i] != ex[s].ids[i] || b.kind[o + i] != RF_LOSS_MDM ||
                        fabsf(b.weight[o + i] - 1.0f / (p * R * 2.0f)) > 1e-6f / (p * R))
                        bad++;
                } else if (b.tokens[o + i] != ex[s].ids[i] || b.target[o + i] != -1)
                    bad++;
            }
            n_resp += R;
        }
    }
    CHECK(bad == 0, "mdm: %d violations", bad);
    /* masks ~ sum of p over answer tokens */
    CHECK(fabs((double)n_masked - sum_p) < 4 * sqrt(sum_p), "mdm masked %ld, expected %.0f",
          n_masked, sum_p);
    printf("mdm: %ld of %ld answer tokens masked (expected %.0f)\n", n_masked, n_resp, sum_p);

    /* MDM with mdm_pad: each response is EOS-padded to 60 tokens (LLaDA SFT);
     * pads are ordinary answer tokens whose target is the EOS, and the
     * normalisation uses the padded length */
    oc.mdm_pad = 60;
    int pad_bad = 0, pad_masked = 0;
    for (int it = 0; it < 200; it++) {
        rf_tbatch_build(&b, &oc, ep, 2, 1.0f, &rng);
        for (int s = 0; s < 2; s++) {
            int o = b.off[s], P = ex[s].n_prompt, R = ex[s].n_resp, eos = ex[s].ids[P + R - 1];
            float p = b.p_mask[s];
            if (b.off[s + 1] - o != P + 60) pad_bad++;
            for (int i = P; i < P + 60; i++) {
                int want = i < P + R ? ex[s].ids[i] : eos;
                if (b.pos[o + i] != i) pad_bad++;
                if (b.tokens[o + i] == MASK) {
                    pad_masked += i >= P + R;
                    if (b.target[o + i] != want || fabsf(b.weight[o + i] - 1.0f / (p * 60 * 2.0f)) > 1e-6f / p)
                        pad_bad++;
                } else if (b.tokens[o + i] != want || b.target[o + i] != -1)
                    pad_bad++;
            }
        }
    }
    CHECK(pad_bad == 0, "mdm_pad: %d violations", pad_bad);
    CHECK(pad_masked > 0, "mdm_pad: no padding position was ever masked");
    rf_tbatch_free(&b);
    for (int i = 0; i < 2; i++) free(ex[i].ids);
}

/* aux_ar: the ReFusion part is exactly what it is without aux (same draws,
 * same tokens, same weights), and every example follows once more in
 * natural order with the AR baseline's targets, each weighted
 * aux_ar / (aux targets in the micro-batch). mask_floor: p >= floor. */
static void variants(void) {
    rf_example ex[2] = {make(2, 9, 50), make(3, 20, 70)};
    const rf_example *ep[2] = {&ex[0], &ex[1]};
    rf_objcfg plain, aux;
    rf_objcfg_default(&plain, RF_OBJ_REFUSION, MASK);
    aux = plain;
    aux.aux_ar = 0.5f;
    rf_tbatch a = {0}, b = {0};
    int bad = 0;
    for (int it = 0; it < 300; it++) {
        rf_rng r1, r2;
        rf_rng_seed(&r1, 100 + it);
        rf_rng_seed(&r2, 100 + it);
        rf_tbatch_build(&a, &plain, ep, 2, 0.5f, &r1);
        rf_tbatch_build(&b, &aux, ep, 2, 0.5f, &r2);
        int n0 = a.n_tok, n_aux = 9 + 20; /* the last prompt token and every answer token but the last */
        if (b.n_seq != 4 || b.off[2] != n0 || b.n_tok != n0 + 2 + 9 + 3 + 20) bad++;
        for (int i = 0; i < n0; i++)
            if (a.tokens[i] != b.tokens[i] || a.pos[i] != b.pos[i] || a.target[i] != b.target[i] ||
                a.weight[i] != b.weight[i])
                bad++;
        int n_t = 0;
        for (int s = 0; s < 2; s++) {
            int o = b.off[2 + s], L = ex[s].n_prompt + ex[s].n_resp;
            if (b.off[3 + s] - o != L) bad++;
            for (int i = 0; i < L; i++) {
                int tgt = i >= ex[s].n_prompt - 1 && i + 1 < L ? ex[s].ids[i + 1] : -1;
                n_t += tgt >= 0;
                if (b.tokens[o + i] != ex[s].ids[i] || b.pos[o + i] != i || b.target[o + i] != tgt ||
                    b.weight[o + i] != (tgt < 0 ? 0.0f : 0.5f * 0.5f / (float)n_aux))
                    bad++;
            }
        }
        if (n_t != n_aux) bad++;
    }
    CHECK(bad == 0, "aux_ar: %d violations", bad);

    rf_objcfg fl = plain;
    fl.mask_floor = 0.6f;
    rf_rng r;
    rf_rng_seed(&r, 5);
    float lo = 1;
    for (int it = 0; it < 500; it++) {
        rf_tbatch_build(&a, &fl, ep, 2, 1.0f, &r);
        for (int s = 0; s < 2; s++) lo = a.p_mask[s] < lo ? a.p_mask[s] : lo;
    }
    CHECK(lo >= 0.6f && lo < 0.62f, "mask_floor 0.6: smallest p %.4f", lo);
    rf_tbatch_free(&a);
    rf_tbatch_free(&b);
    for (int i = 0; i < 2; i++) free(ex[i].ids);
}

int main(void) {
    hand_worked();
    variants();
    random_draws();
    baselines();
    rf_objective o;
    CHECK(rf_objective_parse("mdm", &o) == 0 && o == RF_OBJ_MDM, "parse mdm");
    CHECK(rf_objective_parse("bert", &o) == -1, "parse rejects unknown");
    return check_summary("train_objective");
}
