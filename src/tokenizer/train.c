/* train.c - train a small byte-level BPE tokenizer and write it as a
 * Hugging Face tokenizer.json + tokenizer_config.json that rf_tok_load (and
 * other tokenizer.json readers) can use.
 *
 * The corpus is NFC-normalised and split into words with Qwen's pre-tokenizer
 * regex; words are counted. Starting from the 256 single-byte tokens, the
 * most frequent adjacent pair (summed over word counts; ties go to the
 * smaller pair of ids) is merged into a new token, until the vocabulary is
 * full or no pair occurs twice. Pair counts are updated incrementally: each
 * pair remembers which words contain it, and a lazy max-heap finds the best
 * pair. Special tokens are appended after the merged tokens. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/heap.h"
#include "tokenizer/tok_internal.h"
#include "refusion.h"
#include "util/util.h"

static const char *const SPECIALS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"};
static const char *const NONSPECIAL[] = {"<think>", "</think>"}; /* keep the template's think block compact */
#define N_SPECIALS 5
#define N_NONSPECIAL 2

/* ChatML as Qwen3 renders plain conversations; rf_chat_apply matches it. */
static const char *const CHAT_TEMPLATE =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}\n"
    "{%- set ns = namespace(last_query=messages|length - 1, found=false) %}\n"
    "{%- for m in messages[::-1] %}{%- if not ns.found and m.role == 'user' and not (m.content.startswith('<tool_response>') "
    "and m.content.endswith('</tool_response>')) %}{%- set ns.found = true %}{%- set ns.last_query = messages|length - 1 - "
    "loop.index0 %}{%- endif %}{%- endfor %}\n"
    "{%- for m in messages %}\n"
    "  {%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}{{- '<|im_start|>' + m.role + '\\n' + m.content + "
    "'<|im_end|>\\n' }}\n"
    "  {%- elif m.role == 'assistant' %}\n"
    "    {%- set content = m.content %}{%- set reasoning = '' %}\n"
    "    {%- if '</think>' in m.content %}{%- set content = m.content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- set reasoning = m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}{%- endif %}\n"
    "    {%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}{{- '<|im_start|>assistant\\n<think>\\n' + "
    "reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "    {%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}\n"
    "    {{- '<|im_end|>\\n' }}\n"
    "  {%- elif m.role == 'tool' %}\n"
    "    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "    {{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}\n"
    "    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "  {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking "
    "is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

/* A unique word of the corpus: its current symbols and its count. */
typedef struct {
    int *sym; /* [len] token ids */
    int len;
    long count;
} word;

/* A pair's total count and the words it may occur in (duplicates allowed). */
typedef struct {
    long count;
    int *words;
    int nwords, cap;
} pair_info;

typedef struct {
    long count;
    int a, b;
} heap_item;

typedef struct {
    word *w;
    int nw, wcap;
    rf_strmap index; /* word bytes -> word index (keys live in kstore) */
    char **kstore;
    int nk;
    rf_pairmap pairs; /* (a, b) -> rank field = index into info */
    pair_info *info;
    int ninfo, icap;
    heap_item *heap;
    size_t hn, hcap;
} trainer;

static void add_word(const char *p, size_t n, void *ctx) {
    trainer *T = ctx;
    int *idx = rf_strmap_get(&T->index, p, (int)n);
    if (idx) {
        T->w[*idx].count++;
        return;
    }
    int kcap = T->wcap; /* the two arrays grow together */
    T->kstore = rf_grow(T->kstore, sizeof *T->kstore, T->nw, &kcap, 1024);
    T->w = rf_grow(T->w, sizeof *T->w, T->nw, &T->wcap, 1024);
    char *key = rf_malloc(n + 1);
    memcpy(key, p, n);
    T->kstore[T->nk++] = key;
    word *w = &T->w[T->nw];
    w->sym = rf_malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) w->sym[i] = (unsigned char)p[i];
    w->len = (int)n;
    w->count = 1;
    rf_strmap_put(&T->index, key, (int)n, T->nw++);
}

static int heap_better(const heap_item *x, const heap_item *y) {
    if (x->count != y->count) return x->count > y->count;
    return x->a != y->a ? x->a < y->a : x->b < y->b;
}

RF_HEAP_DEFINE(trainer, heap_item, heap_better, 1024)

static pair_info *get_pair(trainer *T, int a, int b, int create) {
    const rf_pair_slot *s = rf_pairmap_get(&T->pairs, a, b);
    if (s) return &T->info[s->rank];
    if (!create) return NULL;
    T->info = rf_grow(T->info, sizeof *T->info, T->ninfo, &T->icap, 4096);
    T->info[T->ninfo] = (pair_info){0};
    rf_pairmap_put(&T->pairs, a, b, T->ninfo, 0);
    return &T->info[T->ninfo++];
}

/* Add delta occurrences of (a, b) in word wi. */
static void count_pair(trainer *T, int a, int b, long delta, int wi) {
    pair_info *p = get_pair(T, a, b, delta > 0);
    if (!p) return;
    p->count += delta;
    if (delta > 0) {
        p->words = rf_grow(p->words, sizeof *p->words, p->nwords, &p->cap, 4);
        if (!p->nwords || p->words[p->nwords - 1] != wi) p->words[p->nwords++] = wi;
        heap_push(T, (heap_item){p->count, a, b});
    }
}

/* Replace every (a, b) in word wi by c, keeping the pair counts right. */
static void merge_in_word(trainer *T, int wi, int a, int b, int c) {
    word *w = &T->w[wi];
    int *s = w->sym, n = w->len, k = 0; /* s[0..k) is the rewritten prefix */
    for (int i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (k > 0) {
                count_pair(T, s[k - 1], a, -w->count, wi);
                count_pair(T, s[k - 1], c, w->count, wi);
            }
            if (i + 2 < n) {
                count_pair(T, b, s[i + 2], -w->count, wi);
                count_pair(T, c, s[i + 2], w->count, wi);
            }
            count_pair(T, a, b, -w->count, wi);
            s[k++] = c;
            i += 2;
        } else {
            s[k++] = s[i++];
        }
    }
    w->len = k;
}

/* A token's bytes spelled in the byte-level alphabet (what tokenizer.json stores). */
static char *spell(const char *bytes, int n) {
    char *s = rf_malloc((size_t)n * 2 + 1), *o = s;
    for (int i = 0; i < n; i++) o += rf_utf8_encode(rf_byte_cp[(unsigned char)bytes[i]], o);
    *o = 0;
    return s;
}

static int write_files(const char *out_dir, char **tok, int *tlen, int ntok, const int (*merges)[2], int nmerges) {
    json_t *vocab = json_object(), *mlist = json_array(), *added = json_array();
    char **sp = rf_calloc((size_t)ntok, sizeof *sp);
    for (int i = 0; i < ntok; i++) {
        sp[i] = spell(tok[i], tlen[i]);
        json_object_set_new(vocab, sp[i], json_integer(i));
    }
    for (int m = 0; m < nmerges; m++)
        json_array_append_new(mlist, json_pack("[ss]", sp[merges[m][0]], sp[merges[m][1]]));
    for (int i = 0; i < N_SPECIALS + N_NONSPECIAL; i++) {
        int special = i < N_SPECIALS;
        const char *content = special ? SPECIALS[i] : NONSPECIAL[i - N_SPECIALS];
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", ntok + i, "content", content,
                                               "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", special));
    }
    json_t *bytelevel = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
                                  "use_regex", 0);
    json_t *root = json_pack(
        "{s:s, s:n, s:n, s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, O]}, s:O, s:O, "
        "s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", RF_QWEN_PRETOK_PATTERN, "behavior",
        "Isolated", "invert", 0, bytelevel, "post_processor", bytelevel, "decoder", bytelevel, "model", "type", "BPE",
        "dropout", "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback",
        0, "ignore_merges", 0, "vocab", vocab, "merges", mlist);
    json_decref(bytelevel);
    for (int i = 0; i < ntok; i++) free(sp[i]);
    free(sp);
    if (!root) rf_die("tokenizer-train: building the JSON failed");
    json_t *cfg = json_pack("{s:b, s:b, s:n, s:s, s:s, s:n, s:i, s:b, s:s, s:b, s:s, s:s}", "add_bos_token", 0,
                            "add_prefix_space", 0, "bos_token", "eos_token", "<|im_end|>", "pad_token", "<|endoftext|>",
                            "unk_token", "model_max_length", 131072, "clean_up_tokenization_spaces", 0, "errors",
                            "replace", "split_special_tokens", 0, "tokenizer_class", "Qwen2Tokenizer", "chat_template",
                            CHAT_TEMPLATE);
    int rc = rf_mkdir_p(out_dir);
    const char *names[2] = {"tokenizer.json", "tokenizer_config.json"};
    json_t *docs[2] = {root, cfg};
    for (int f = 0; f < 2 && rc == 0; f++) {
        char *text = json_dumps(docs[f], f ? JSON_INDENT(2) : JSON_COMPACT);
        char *path = rf_path_join(out_dir, names[f]);
        rc = rf_write_file_atomic(path, text, strlen(text));
        free(text);
        free(path);
    }
    json_decref(root);
    json_decref(cfg);
    return rc;
}

/* Split out our special tokens (they are not trained on) and feed the rest to the word counter. */
static int count_words(trainer *T, const char *text, size_t len, pcre2_code *re) {
    size_t seg = 0, pos = 0;
    while (pos <= len) {
        size_t hit = 0;
        if (pos < len && text[pos] == '<')
            for (int i = 0; i < N_SPECIALS + N_NONSPECIAL && !hit; i++) {
                const char *sp = i < N_SPECIALS ? SPECIALS[i] : NONSPECIAL[i - N_SPECIALS];
                size_t l = strlen(sp);
                if (l <= len - pos && !memcmp(text + pos, sp, l)) hit = l;
            }
        if (hit || pos == len) {
            if (pos > seg) {
                char *norm;
                size_t nn;
                if (rf_nfc(text + seg, pos - seg, &norm, &nn)) return -1;
                int rc = rf_pretokenize(re, norm ? norm : text + seg, nn, add_word, T);
                free(norm);
                if (rc) return -1;
            }
            if (pos == len) break;
            pos += hit;
            seg = pos;
        } else {
            pos++;
        }
    }
    return 0;
}

int rf_tok_train(const char *text, size_t len, int vocab_size, const char *out_dir, int verbose) {
    int n_extra = N_SPECIALS + N_NONSPECIAL;
    if (vocab_size < 256 + n_extra) {
        rf_set_error("vocab size %d is too small (at least %d: 256 bytes + %d added tokens)", vocab_size, 256 + n_extra, n_extra);
        return -1;
    }
    size_t bad;
    if (rf_utf8_check(text, len, &bad)) {
        rf_set_error("corpus: invalid UTF-8 at byte offset %zu", bad);
        return -1;
    }
    pcre2_code *re = rf_pretok_compile(RF_QWEN_PRETOK_PATTERN);
    if (!re) return -1;
    trainer T = {0};
    rf_strmap_init(&T.index, 1 << 16);
    int rc = count_words(&T, text, len, re);
    pcre2_code_free(re);

    int max_tok = vocab_size - n_extra, ntok = 256;
    char **tok = rf_calloc((size_t)max_tok, sizeof *tok); /* token bytes */
    int *tlen = rf_calloc((size_t)max_tok, sizeof *tlen);
    int (*merges)[2] = rf_calloc((size_t)max_tok, sizeof *merges);
    int nmerges = 0;
    rf_strmap tokmap; /* token bytes -> id: a pair spelling an existing token reuses it */
    rf_strmap_init(&tokmap, (size_t)max_tok);
    for (int b = 0; b < 256; b++) {
        tok[b] = rf_malloc(2);
        tok[b][0] = (char)b;
        tlen[b] = 1;
        rf_strmap_put(&tokmap, tok[b], 1, b);
    }
    if (rc == 0) {
        rf_pairmap_init(&T.pairs, 1 << 16);
        for (int wi = 0; wi < T.nw; wi++)
            for (int i = 0; i + 1 < T.w[wi].len; i++) count_pair(&T, T.w[wi].sym[i], T.w[wi].sym[i + 1], T.w[wi].count, wi);
        int *seen = rf_calloc((size_t)T.nw + 1, sizeof(int)); /* word visited in merge m+1 */
        while (ntok < max_tok && T.hn) {
            heap_item h = heap_pop(&T);
            pair_info *p = get_pair(&T, h.a, h.b, 0);
            if (!p || p->count != h.count) { /* stale: counts only grow through pushes, */
                if (p && p->count > 0 && p->count < h.count) /* so re-queue one that shrank */
                    heap_push(&T, (heap_item){p->count, h.a, h.b});
                continue;
            }
            if (p->count < 2) break;
            char *nb = rf_malloc((size_t)(tlen[h.a] + tlen[h.b]) + 1);
            memcpy(nb, tok[h.a], (size_t)tlen[h.a]);
            memcpy(nb + tlen[h.a], tok[h.b], (size_t)tlen[h.b]);
            int nl = tlen[h.a] + tlen[h.b], *old = rf_strmap_get(&tokmap, nb, nl), c;
            if (old) {
                c = *old;
                free(nb);
            } else {
                c = ntok++;
                tok[c] = nb;
                tlen[c] = nl;
                rf_strmap_put(&tokmap, nb, nl, c);
            }
            merges[nmerges][0] = h.a, merges[nmerges][1] = h.b, nmerges++;
            if (verbose && nmerges % 500 == 0) rf_log(RF_LOG_INFO, "tokenizer-train: %d merges, count %ld", nmerges, h.count);
            /* the word list may grow while we walk it (new pairs are appended to other lists only) */
            int nwl = p->nwords, *wl = p->words;
            p->words = NULL, p->nwords = p->cap = 0;
            for (int k = 0; k < nwl; k++)
                if (seen[wl[k]] != nmerges) {
                    seen[wl[k]] = nmerges;
                    merge_in_word(&T, wl[k], h.a, h.b, c);
                }
            free(wl);
            p = get_pair(&T, h.a, h.b, 0);
            p->count = 0; /* every occurrence is merged */
        }
        free(seen);
        if (verbose) rf_log(RF_LOG_INFO, "tokenizer-train: %d words, %d merges, %d tokens (+%d added)", T.nw, nmerges, ntok, n_extra);
        rc = write_files(out_dir, tok, tlen, ntok, (const int(*)[2])merges, nmerges);
    }
    for (int i = 0; i < ntok; i++) free(tok[i]);
    free(tok), free(tlen), free(merges);
    rf_strmap_free(&tokmap);
    for (int i = 0; i < T.nw; i++) free(T.w[i].sym);
    for (int i = 0; i < T.nk; i++) free(T.kstore[i]);
    for (int i = 0; i < T.ninfo; i++) free(T.info[i].words);
    free(T.w), free(T.kstore), free(T.info), free(T.heap);
    rf_strmap_free(&T.index);
    rf_pairmap_free(&T.pairs);
    return rc;
}
