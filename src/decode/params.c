/* params.c - the decoders' settings: their defaults, their checks against
 * the model and the prompt, the block layout they imply and the memory a
 * generation with them takes (decode.h, decode_impl.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "model/runstate.h"

void rf_gen_params_default(rf_params *p) {
    memset(p, 0, sizeof *p);
    p->method = RF_METHOD_REFUSION;
    p->gen_length = 512;
    p->slot_size = 4;
    p->n_blocks = 32;
    p->slot_threshold = 0.6f;
    p->token_threshold = 0.3f;
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->seed = 0;
    p->eos_id = RF_TOKEN_FROM_MODEL;
    p->mask_id = RF_TOKEN_FROM_MODEL;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
}

int gen_eos_id(const rf_model *m, const rf_params *p) {
    return p->eos_id == RF_TOKEN_FROM_MODEL ? m->cfg.eos_id : p->eos_id;
}
int gen_mask_id(const rf_model *m, const rf_params *p) {
    return p->mask_id == RF_TOKEN_FROM_MODEL ? m->cfg.mask_id : p->mask_id;
}

int rf_gen_check_settings(const rf_params *p) {
    if (!rf_method_name(p->method)) {
        rf_set_error("unknown method %d", (int)p->method);
        return -1;
    }
    if (p->logprobs != 0 && p->logprobs != 1) {
        rf_set_error("logprobs must be 0 or 1 (got %d)", p->logprobs);
        return -1;
    }
    if (p->top_logprobs < 0 || p->top_logprobs > RF_MAX_TOP_LOGPROBS) {
        rf_set_error("top_logprobs must be in [0, %d] (got %d)", RF_MAX_TOP_LOGPROBS, p->top_logprobs);
        return -1;
    }
    if (p->top_logprobs && !p->logprobs) {
        rf_set_error("top_logprobs needs logprobs");
        return -1;
    }
    if (p->eos_id < RF_TOKEN_FROM_MODEL) {
        rf_set_error("eos_id must be a token id, -1 (none) or RF_TOKEN_FROM_MODEL, got %d", p->eos_id);
        return -1;
    }
    return 0;
}

static int bad_unit(float x) { return !(x >= 0.0f && x <= 1.0f); } /* NaN too */

int rf_gen_check(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p, int ar) {
    const rf_config *c = &m->cfg;
    if (rf_gen_check_settings(p)) return -1;
    if (n_prompt < 1) {
        rf_set_error("the prompt is empty (at least one token is needed)");
        return -1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size) {
            rf_set_error("prompt token %d (id %d) is outside the vocabulary [0, %d)", i, prompt[i],
                         c->vocab_size);
            return -1;
        }
    if (p->gen_length < 1) {
        rf_set_error("gen_length must be at least 1 (got %d)", p->gen_length);
        return -1;
    }
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) {
        rf_set_error("temperature must be a finite number >= 0 (got %g)", p->temperature);
        return -1;
    }
    int eos = gen_eos_id(m, p);
    if (eos < -1 || eos >= c->vocab_size) {
        rf_set_error("EOS id %d is outside the vocabulary [0, %d)", eos, c->vocab_size);
        return -1;
    }
    int64_t G = p->gen_length;
    if (ar) { /* AR's sampling (the rolling decoder's too) */
        if (p->top_k < 0) {
            rf_set_error("top_k must be >= 0 (got %d)", p->top_k);
            return -1;
        }
        if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
            rf_set_error("top_p must be in (0, 1] (got %g)", p->top_p);
            return -1;
        }
        if (bad_unit(p->min_p)) {
            rf_set_error("min_p must be in [0, 1] (got %g)", p->min_p);
            return -1;
        }
        if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty) || !isfinite(p->presence_penalty) ||
            !isfinite(p->frequency_penalty)) {
            rf_set_error("repeat_penalty must be a finite number > 0, presence/frequency penalties finite "
                         "(got %g, %g, %g)", p->repeat_penalty, p->presence_penalty, p->frequency_penalty);
            return -1;
        }
        if (p->penalty_last_n < -1) {
            rf_set_error("penalty_last_n must be -1 (all tokens) or >= 0 (got %d)", p->penalty_last_n);
            return -1;
        }
    } else if (!p->rolling && (rf_gen_has_penalties(p) || p->min_p != 0.0f)) {
        /* plan-and-infill drafts whole slots with the mask head: a per-token
         * penalty over the tokens before it has no defined place there */
        rf_set_error("min_p and the repeat / presence / frequency penalties are AR sampling settings: "
                     "use the ar decoder or the rolling slot (--rolling)");
        return -1;
    }
    if (!ar || p->rolling) { /* slots and masks: ReFusion, the rolling decoder included */
        if (p->slot_size < 1) {
            rf_set_error("slot_size must be at least 1 (got %d)", p->slot_size);
            return -1;
        }
        if (bad_unit(p->slot_threshold)) {
            rf_set_error("slot_threshold must be in [0, 1] (got %g)", p->slot_threshold);
            return -1;
        }
        int mask = gen_mask_id(m, p);
        if (mask < 0 || mask >= c->vocab_size) {
            rf_set_error("mask id %d is outside the vocabulary [0, %d)", mask, c->vocab_size);
            return -1;
        }
        if (mask == eos) {
            rf_set_error("the mask id and the EOS id are the same (%d)", mask);
            return -1;
        }
    }
    if (!ar) { /* plan-and-infill */
        if (p->n_blocks < 1) {
            rf_set_error("the number of blocks must be at least 1 (got %d)", p->n_blocks);
            return -1;
        }
        if (bad_unit(p->token_threshold)) {
            rf_set_error("token_threshold must be in [0, 1] (got %g)", p->token_threshold);
            return -1;
        }
        if (p->jacobi && !p->ar_correct) { /* it would force stale mask-head drafts through unchecked */
            rf_set_error("jacobi infilling needs ar_correct (--ar-verify correct or both)");
            return -1;
        }
        G = gen_padded64(p);
    }
    if (n_prompt > c->max_pos) {
        rf_set_error("the prompt (%d tokens) is longer than the model's context (%d tokens)", n_prompt,
                     c->max_pos);
        return -1;
    }
    if ((int64_t)n_prompt + G > c->max_pos) {
        rf_set_error("prompt (%d tokens) + answer (%lld tokens) exceed the model's context (%d tokens)",
                     n_prompt, (long long)G, c->max_pos);
        return -1;
    }
    /* everything the decoder allocates, against the machine: an impossible
     * request is refused here instead of failing an allocation later */
    uint64_t need = (uint64_t)rf_gen_mem_bytes(m, n_prompt, p, ar), have = rf_phys_mem();
    if (have && need > have) {
        rf_set_error("this generation needs about %.0f MB of memory (prompt %d + answer %lld tokens), "
                     "more than this machine's %.0f MB",
                     need / 1e6, n_prompt, (long long)G, have / 1e6);
        return -1;
    }
    return 0;
}

/* Mirrors the allocations of rf_generate_refusion / rf_generate_ar (refusion.c,
 * ar.c, kvcache.c, runstate.c); an overestimate is fine, an
 * underestimate is not. All sizes are bounded by the config's limits
 * (dimensions <= 2^24, context <= 2^20, io/config.c), so 64 bits cannot wrap. */
int64_t rf_gen_mem_bytes(const rf_model *m, int n_prompt, const rf_params *p, int ar) {
    if (p->rolling) ar = 1; /* rolling.c allocates as AR does, with calls of up to 2 slots */
    const rf_config *c = &m->cfg;
    int64_t L = c->n_layers, d = c->hidden_size, V = c->vocab_size, f = c->intermediate_size;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim; /* the floats of one KV cache entry */
    int64_t P = n_prompt > 0 ? n_prompt : 1, G, T, rows = 0, S = 1;
    if (ar) {
        G = p->gen_length > 0 ? p->gen_length : 1;
        T = P < 256 ? P : 256; /* prefill chunk */
        if (p->rolling && T < 2 * (int64_t)p->slot_size) T = 2 * (int64_t)p->slot_size; /* rolling.c */
    } else {
        S = p->slot_size > 0 ? p->slot_size : 1;
        G = gen_padded64(p);
        /* the largest serial block, as rf_block_layout cuts it */
        int64_t n_slots = G / S, nb = p->n_blocks < 1 ? 1 : p->n_blocks;
        if (nb > n_slots) nb = n_slots;
        if (nb < 1) nb = 1;
        int64_t maxb = n_slots - (nb - 1) * (n_slots / nb);
        T = maxb * S;
        if (T < 256 && T < P) T = P < 256 ? P : 256;
        rows = maxb; /* forked rows: at most one per slot of a block, S entries each */
    }
    int64_t ctx = P + G + S;
    int64_t kv = 2 * L * (P + G) * kvd * 4 + (P + G) * 4;
    int64_t fork = rows ? 2 * (2 * rows * L * S * kvd * 4) + rows * (S + 1) * 4 : 0; /* + a select copy */
    int64_t runstate = T * (2 * d + 2 * qd + 2 * kvd + 2 * f) * 4 + 32 * RF_ATT_ROWS * (ctx + T) * 4; /* attention weights: 32 threads */
    int64_t logits = T * V * 4 + V * (8 + 8); /* + one row of sampling scratch */
    int64_t answer = G * (4 + 4 + 16) + 4096;
    if (p->logprobs) answer += 2 * G * (int64_t)sizeof(rf_token_logprob); /* the answer's and the result's */
    return kv + fork + runstate + logits + answer;
}

/* Blocks of whole slots. The reference cuts gen_length into n_blocks equal
 * blocks and reshapes each into slots, which only works when the slot count
 * is a multiple of n_blocks (otherwise it fails, or silently never generates
 * the remainder). Here every block but the last gets n_slots / n_blocks slots
 * and the last takes the rest, which is the reference's layout whenever the
 * reference works. With more blocks than slots every block is one slot. */
int rf_block_layout(int n_slots, int n_blocks, int *first) {
    if (n_blocks > n_slots) n_blocks = n_slots;
    if (n_blocks < 1) n_blocks = 1;
    int per = n_slots / n_blocks;
    for (int b = 0; b < n_blocks; b++) first[b] = b * per;
    first[n_blocks] = n_slots;
    return n_blocks;
}
