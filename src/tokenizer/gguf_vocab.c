/* gguf_vocab.c - the byte-level BPE tokenizer as llama.cpp stores it in GGUF
 * metadata, both ways:
 *
 *   tokenizer.ggml.model       "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre         "qwen2" (Qwen's split regex, NFC) or "gpt2"
 *   tokenizer.ggml.tokens      [n_vocab] spellings, as in tokenizer.json
 *   tokenizer.ggml.token_type  [n_vocab] 1 normal, 3 control (special added
 *                              token), 4 user-defined (other added token),
 *                              5 unused (an id the tokenizer lacks: "[PAD<i>]")
 *   tokenizer.ggml.merges      ["a b", ...] in rank order
 *   tokenizer.ggml.eos_token_id, tokenizer.chat_template
 *
 * llama.cpp's converter pads the vocabulary to the model's embedding rows
 * with unused "[PAD<i>]" tokens; they are holes here, as in tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/gguf.h"
#include "tokenizer/tok_internal.h"
#include "util/util.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define MAX_VOCAB (1 << 24)

int rf_tok_is_gguf(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4];
    int is = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(f);
    return is;
}

int rf_tok_model_has_tokenizer(const char *model_path) {
    if (rf_tok_is_gguf(model_path)) {
        rf_gguf_file f;
        if (rf_gguf_open(&f, model_path)) return 0;
        int has = rf_gguf_find(&f, "tokenizer.ggml.tokens") != NULL;
        rf_gguf_close(&f);
        return has;
    }
    char *p = rf_path_join(model_path, "tokenizer.json");
    struct stat st;
    int has = stat(p, &st) == 0 || rf_tok_dir_has_slow(model_path);
    free(p);
    return has;
}

/* a string array under key: NULL + error if present with another type */
static const rf_gguf_kv *str_array(const rf_gguf_file *f, const char *key, int *bad) {
    const rf_gguf_kv *kv = rf_gguf_find(f, key);
    if (kv && (kv->type != RF_GGUF_ARRAY || kv->arr_type != RF_GGUF_STRING)) {
        rf_set_error("%s: %s must be an array of strings", f->path, key);
        *bad = 1;
        return NULL;
    }
    return kv;
}

static int str_is(rf_gguf_str s, const char *lit) {
    return s.len == strlen(lit) && !memcmp(s.s, lit, s.len);
}

/* tokenizer.ggml.model and .pre: the pre-tokenizer's pattern and whether
 * NFC comes first; -1 with the error set when not supported */
static int read_kind(const rf_gguf_file *f, const char **pattern, int *nfc) {
    const char *path = f->path;
    rf_gguf_str model, pre = {"default", 7};
    int r = rf_gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (r) {
        if (r == 1) rf_set_error("%s: no tokenizer (tokenizer.ggml.model is missing)", path);
        return -1;
    }
    if (!str_is(model, "gpt2")) {
        rf_set_error("%s: tokenizer.ggml.model '%.*s' is not supported (only gpt2: byte-level BPE)",
                     path, model.len > 32 ? 32 : (int)model.len, model.s);
        return -1;
    }
    if (rf_gguf_get_str(f, "tokenizer.ggml.pre", &pre) < 0) return -1;
    if (str_is(pre, "qwen2")) /* Qwen2/Qwen3: their split regex after NFC */
        *pattern = RF_QWEN_PRETOK_PATTERN, *nfc = 1;
    else if (str_is(pre, "gpt2") || str_is(pre, "default"))
        *pattern = rf_tok_gpt2_pattern(), *nfc = 0;
    else {
        rf_set_error("%s: tokenizer.ggml.pre '%.*s' is not supported (qwen2 or gpt2)", path,
                     pre.len > 32 ? 32 : (int)pre.len, pre.s);
        return -1;
    }
    return 0;
}

/* tokenizer.ggml.tokens (with their token_type) into t's vocabulary and
 * added tokens, and the byte alphabet's ids; the largest id used in
 * *max_id. -1 with the error set. */
static int read_tokens(const rf_gguf_file *f, rf_tokenizer *t, const rf_gguf_kv *toks, const rf_gguf_kv *types,
                       int *max_id) {
    const char *path = f->path;
    int n = (int)toks->arr_n;
    *max_id = -1;
    for (int i = 0; i < n; i++) {
        int64_t ty = types ? rf_gguf_arr_int(types, (uint64_t)i) : TT_NORMAL;
        if (ty == TT_UNUSED) continue; /* padding: a hole */
        if (ty < TT_NORMAL || ty > TT_BYTE) {
            rf_set_error("%s: tokenizer.ggml.token_type[%d] = %lld is not a known token type", path,
                         i, (long long)ty);
            return -1;
        }
        rf_gguf_str sp = toks->strs[i];
        size_t badpos;
        if (sp.len == 0 || memchr(sp.s, 0, sp.len) || rf_utf8_check(sp.s, sp.len, &badpos)) {
            rf_set_error("%s: tokenizer.ggml.tokens[%d] is empty, holds a NUL or is not UTF-8", path, i);
            return -1;
        }
        if (rf_strmap_get(&t->vocab, sp.s, (int)sp.len)) {
            rf_set_error("%s: tokenizer.ggml.tokens[%d] repeats an earlier token", path, i);
            return -1;
        }
        char *s = strndup(sp.s, sp.len);
        if (!s) rf_die("out of memory");
        rf_tok_set_piece(t, i, s);
        rf_strmap_put(&t->vocab, t->piece[i], (int)sp.len, i);
        if (ty == TT_CONTROL || ty == TT_USER_DEFINED) {
            /* added tokens decode to their text, not through the byte alphabet */
            free(t->bytes[i]);
            t->bytes[i] = s;
            t->nbytes[i] = (int)sp.len;
            s = NULL;
            rf_tok_add_added(t, t->piece[i], i, ty == TT_CONTROL);
        }
        free(s);
        *max_id = i;
    }
    if (*max_id < 0) {
        rf_set_error("%s: tokenizer.ggml.tokens holds no used token", path);
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        char sp[4];
        int l = rf_utf8_encode(rf_byte_cp[b], sp);
        int *id = rf_strmap_get(&t->vocab, sp, l);
        t->byte_id[b] = id ? *id : -1;
    }
    return 0;
}

/* merges "a b": rank r joins a and b into the token spelled a+b */
static int read_merges(const rf_gguf_file *f, rf_tokenizer *t, const rf_gguf_kv *merges) {
    size_t nm = merges ? (size_t)merges->arr_n : 0;
    rf_pairmap_init(&t->merges, nm + 16);
    t->n_merges = (int)nm;
    rf_buf cat = {0};
    for (size_t m = 0; m < nm; m++) {
        rf_gguf_str ms = merges->strs[m];
        const char *sp = memchr(ms.s, ' ', ms.len);
        size_t la = sp ? (size_t)(sp - ms.s) : 0, lb = sp ? ms.len - la - 1 : 0;
        int *ia = NULL, *ib = NULL, *ic = NULL;
        if (sp && la && lb && !memchr(sp + 1, ' ', lb)) {
            cat.n = 0;
            rf_buf_put(&cat, ms.s, la);
            rf_buf_put(&cat, sp + 1, lb);
            ia = rf_strmap_get(&t->vocab, ms.s, (int)la);
            ib = rf_strmap_get(&t->vocab, sp + 1, (int)lb);
            ic = rf_strmap_get(&t->vocab, cat.p, (int)cat.n);
        }
        if (!ia || !ib || !ic) {
            free(cat.p);
            rf_set_error("%s: tokenizer.ggml.merges[%zu] is not \"a b\" with a, b and ab in the "
                         "vocabulary", f->path, m);
            return -1;
        }
        rf_pairmap_put(&t->merges, *ia, *ib, (int)m, *ic);
    }
    free(cat.p);
    return 0;
}

/* ReFusion's two tokens, at the next free ids when the vocabulary lacks
 * them (as rf_tok_load does for a tokenizer.json); the vocabulary then ends
 * at the largest id used */
static void add_refusion_tokens(rf_tokenizer *t, int max_id, int cap) {
    const char *extra[2] = {"<|beginoftext|>", "<|mask|>"};
    int *ids[2] = {&t->bot_id, &t->mask_id};
    for (int k = 0; k < 2; k++) {
        int *id = rf_strmap_get(&t->vocab, extra[k], (int)strlen(extra[k]));
        if (id) {
            *ids[k] = *id;
            continue;
        }
        int nid = ++max_id;
        if (nid >= cap) rf_die("gguf vocab: no room for %s", extra[k]);
        rf_tok_set_piece(t, nid, extra[k]);
        free(t->bytes[nid]);
        t->bytes[nid] = rf_strdup(extra[k]);
        t->nbytes[nid] = (int)strlen(extra[k]);
        rf_strmap_put(&t->vocab, t->piece[nid], (int)strlen(extra[k]), nid);
        rf_tok_add_added(t, extra[k], nid, 1);
        *ids[k] = nid;
    }
    for (int i = max_id + 1; i < t->n_vocab; i++) { /* drop unused spare ids */
        free(t->piece[i]);
        free(t->bytes[i]);
        t->piece[i] = t->bytes[i] = NULL;
    }
    t->n_vocab = max_id + 1;
    rf_tok_sort_added(t);
}

/* tokenizer.ggml.eos_token_id (else <|endoftext|>) and tokenizer.chat_template */
static int read_eos_template(const rf_gguf_file *f, rf_tokenizer *t) {
    const char *path = f->path;
    int64_t eos = -1;
    if (rf_gguf_get_int(f, "tokenizer.ggml.eos_token_id", &eos) < 0) return -1;
    if (eos >= 0 && (eos >= t->n_vocab || !t->piece[eos])) {
        rf_set_error("%s: tokenizer.ggml.eos_token_id %lld is not a token of the vocabulary", path,
                     (long long)eos);
        return -1;
    }
    t->eos_id = eos >= 0 ? (int)eos : rf_tok_id(t, "<|endoftext|>");
    rf_gguf_str tpl;
    int r = rf_gguf_get_str(f, "tokenizer.chat_template", &tpl);
    if (r < 0) return -1;
    if (r == 0) {
        t->chat_template = strndup(tpl.s, tpl.len);
        if (!t->chat_template) rf_die("out of memory");
        t->chat_template_from = rf_malloc(strlen(path) + 32);
        sprintf(t->chat_template_from, "%s: tokenizer.chat_template", path);
    }
    return 0;
}

static rf_tokenizer *from_gguf(const rf_gguf_file *f) {
    const char *path = f->path, *pattern;
    int nfc;
    if (read_kind(f, &pattern, &nfc)) return NULL;
    int bad = 0;
    const rf_gguf_kv *toks = str_array(f, "tokenizer.ggml.tokens", &bad);
    const rf_gguf_kv *merges = str_array(f, "tokenizer.ggml.merges", &bad);
    const rf_gguf_kv *types = rf_gguf_find(f, "tokenizer.ggml.token_type");
    if (bad) return NULL;
    if (!toks || toks->arr_n == 0 || toks->arr_n > MAX_VOCAB) {
        rf_set_error("%s: tokenizer.ggml.tokens is missing, empty or longer than %d", path, MAX_VOCAB);
        return NULL;
    }
    int n = (int)toks->arr_n;
    if (types && (types->type != RF_GGUF_ARRAY || types->arr_n != toks->arr_n ||
                  types->arr_type == RF_GGUF_STRING || types->arr_type == RF_GGUF_FLOAT32 ||
                  types->arr_type == RF_GGUF_FLOAT64 || types->arr_type == RF_GGUF_BOOL)) {
        rf_set_error("%s: tokenizer.ggml.token_type must be an integer array as long as the tokens",
                     path);
        return NULL;
    }
    rf_tokenizer *t = rf_calloc(1, sizeof *t);
    int cap = n + 2; /* room for <|beginoftext|> and <|mask|> */
    rf_tok_alloc_vocab(t, cap, (size_t)n + 64);
    int max_id;
    if (read_tokens(f, t, toks, types, &max_id) || read_merges(f, t, merges)) goto fail;
    t->nfc = nfc;
    if (!(t->re = rf_pretok_compile(pattern))) goto fail;
    t->pretok_pattern = rf_strdup(pattern);
    add_refusion_tokens(t, max_id, cap);
    if (read_eos_template(f, t)) goto fail;
    return t;
fail:
    rf_tok_free(t);
    return NULL;
}

rf_tokenizer *rf_tok_load_gguf(const char *path) {
    rf_gguf_file f;
    if (rf_gguf_open(&f, path)) return NULL;
    rf_tokenizer *t = from_gguf(&f);
    rf_gguf_close(&f);
    return t;
}

/* ---- writing ------------------------------------------------------------------ */

static int cmp_rank(const void *a, const void *b) {
    const rf_pair_slot *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int rf_tok_gguf_add(const rf_tokenizer *t, rf_gguf_writer *w, int n_vocab) {
    const char *pre;
    if (t->nfc && t->pretok_pattern && !strcmp(t->pretok_pattern, RF_QWEN_PRETOK_PATTERN))
        pre = "qwen2";
    else if (!t->nfc && t->pretok_pattern && !strcmp(t->pretok_pattern, rf_tok_gpt2_pattern()))
        pre = "gpt2";
    else {
        rf_set_error("the tokenizer's pre-tokenizer is neither Qwen2's (NFC + its split regex) nor "
                     "GPT-2's: llama.cpp could not reproduce it");
        return -1;
    }
    if (n_vocab < t->n_vocab) {
        rf_set_error("the tokenizer has %d ids but the model's vocabulary only %d", t->n_vocab, n_vocab);
        return -1;
    }
    char **tok = rf_calloc((size_t)n_vocab, sizeof *tok);
    int32_t *type = rf_calloc((size_t)n_vocab, sizeof *type);
    for (int i = 0; i < n_vocab; i++) {
        if (i < t->n_vocab && t->piece[i]) {
            tok[i] = t->piece[i];
            type[i] = TT_NORMAL;
        } else {
            tok[i] = rf_malloc(24);
            snprintf(tok[i], 24, "[PAD%d]", i);
            type[i] = TT_UNUSED;
        }
    }
    for (int k = 0; k < t->n_added; k++)
        type[t->added[k].id] = t->added[k].special ? TT_CONTROL : TT_USER_DEFINED;
    /* merges in rank order, spelled "a b" */
    rf_pair_slot *ms = rf_malloc((t->merges.n ? t->merges.n : 1) * sizeof *ms);
    size_t nm = 0;
    for (size_t i = 0; i < t->merges.cap; i++)
        if (t->merges.slots[i].key != UINT64_MAX) ms[nm++] = t->merges.slots[i];
    qsort(ms, nm, sizeof *ms, cmp_rank);
    char **mstr = rf_malloc((nm ? nm : 1) * sizeof *mstr);
    for (size_t i = 0; i < nm; i++) {
        const char *a = t->piece[ms[i].key >> 32], *b = t->piece[ms[i].key & 0xffffffffu];
        mstr[i] = rf_malloc(strlen(a) + strlen(b) + 2);
        sprintf(mstr[i], "%s %s", a, b);
    }
    rf_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    rf_gguf_w_str(w, "tokenizer.ggml.pre", pre);
    rf_gguf_w_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tok, NULL, (size_t)n_vocab);
    rf_gguf_w_i32_arr(w, "tokenizer.ggml.token_type", type, (size_t)n_vocab);
    rf_gguf_w_str_arr(w, "tokenizer.ggml.merges", (const char *const *)mstr, NULL, nm);
    rf_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    if (t->chat_template) rf_gguf_w_str(w, "tokenizer.chat_template", t->chat_template);
    for (int i = 0; i < n_vocab; i++)
        if (type[i] == TT_UNUSED) free(tok[i]);
    for (size_t i = 0; i < nm; i++) free(mstr[i]);
    free(mstr);
    free(ms);
    free(tok);
    free(type);
    return 0;
}
