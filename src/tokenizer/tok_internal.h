/* tok_internal.h - the tokenizer's data structures and the pieces shared by
 * its source files (load, encode, decode, chat, train). Not part of the
 * public API; tests include it to reach the pre-tokenizer and UTF-8 helpers. */
#ifndef RF_TOK_INTERNAL_H
#define RF_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- string -> int hash map (open addressing, linear probing). Keys are
 * not owned: they must outlive the map. ---- */
typedef struct {
    const char *key;
    int len;
    int val;
    uint32_t hash;
} rf_strmap_slot;
typedef struct {
    rf_strmap_slot *slots; /* [cap], key == NULL marks an empty slot */
    size_t cap, n;         /* cap is a power of two */
} rf_strmap;
void rf_strmap_init(rf_strmap *m, size_t expected);
void rf_strmap_free(rf_strmap *m);
uint32_t rf_strhash(const char *s, size_t len);
/* insert or overwrite; returns the slot */
rf_strmap_slot *rf_strmap_put(rf_strmap *m, const char *key, int len, int val);
/* pointer to the value, NULL if absent */
int *rf_strmap_get(const rf_strmap *m, const char *key, int len);

/* ---- merge table: (left id, right id) -> (rank, merged id) ---- */
typedef struct {
    uint64_t key; /* (left << 32) | right; UINT64_MAX = empty */
    int rank, id;
} rf_pair_slot;
typedef struct {
    rf_pair_slot *slots;
    size_t cap, n;
} rf_pairmap;
void rf_pairmap_init(rf_pairmap *m, size_t expected);
void rf_pairmap_free(rf_pairmap *m);
void rf_pairmap_put(rf_pairmap *m, int a, int b, int rank, int id);
const rf_pair_slot *rf_pairmap_get(const rf_pairmap *m, int a, int b);

/* ---- growable int vector ---- */
typedef struct {
    int *v;
    size_t n, cap;
} rf_ivec;
void rf_ivec_grow(rf_ivec *a, size_t need);
static inline void rf_ivec_push(rf_ivec *a, int x) {
    if (a->n == a->cap) rf_ivec_grow(a, a->n + 1);
    a->v[a->n++] = x;
}

/* ---- growable byte buffer ---- */
typedef struct {
    char *p;
    size_t n, cap;
} rf_buf;
void rf_buf_put(rf_buf *b, const void *data, size_t n);
void rf_buf_puts(rf_buf *b, const char *s);
char *rf_buf_cstr(rf_buf *b); /* NUL-terminates and hands the storage over */

/* A node of the added tokens' byte trie: its first child, its next sibling,
 * the byte that leads to it and the added token (index into added) that
 * ends here, or -1. Node 0 is the root. */
typedef struct {
    int child, sibling, token;
    unsigned char byte;
} rf_trie_node;

/* An added token: matched literally in raw text before normalisation. */
typedef struct {
    char *content;
    int len, id;
    int special, lstrip, rstrip;
} rf_added_token;

struct rf_tokenizer {
    int n_vocab;             /* largest id + 1 */
    char **piece;            /* [n_vocab] token as spelled in the file; NULL = hole */
    char **bytes;            /* [n_vocab] raw bytes the token decodes to */
    int *nbytes;             /* [n_vocab] */
    unsigned char *special;  /* [n_vocab] 1 for special added tokens */
    rf_strmap vocab;         /* file spelling -> id (model vocab + added tokens) */
    rf_pairmap merges;       /* (a, b) -> rank, id of the merged token */
    int n_merges;
    int byte_id[256];        /* token of each single byte, -1 if the vocab lacks it */
    rf_added_token *added;   /* [n_added] sorted longest content first */
    int n_added;
    unsigned char added_first[256]; /* 1 if some added token starts with this byte */
    rf_trie_node *added_trie; /* [n_trie] the added tokens' contents as a byte trie (rf_tok_sort_added):
                               * the longest match at a position costs its length, not n_added */
    int n_trie;
    pcre2_code *re;          /* the Split pre-tokenizer regex; NULL = whole segment */
    int nfc;                 /* NFC normaliser on */
    int eos_id, mask_id, bot_id;
    int add_bos;             /* tokenizer_config.json add_bos_token / GGUF tokenizer.ggml.add_bos_token (written
                              * back as is; nothing here prepends a BOS) */
    char *chat_template;     /* the model's Jinja chat template (chat_template.jinja, tokenizer_config.json
                              * or GGUF tokenizer.chat_template), or a --chat-template file; NULL if none */
    char *chat_template_from; /* the file it came from, for messages */
    int chat_builtin;        /* 1: render with the built-in Qwen3 renderer even when there is a template */
    int special_in_content;  /* 1: special tokens in a conversation's text are parsed (rf_tok_set_special_in_content) */
    json_t *special_strings; /* {"bos_token": "...", "eos_token": ...}: tokenizer_config's special tokens as
                              * transformers hands them to the template (NULL: none) */
    char *pretok_pattern;    /* the Split regex as given (GGUF export names it), or NULL */
};

/* 1 if dir holds the slow layout (vocab.json + merges.txt; tokenizer.c) */
int rf_tok_dir_has_slow(const char *dir);

/* ---- building a tokenizer from another source (gguf_vocab.c) ---- */
/* t->n_vocab = cap with the per-id arrays allocated (zeroed) and the
 * spelling map sized for `expected` entries */
void rf_tok_alloc_vocab(rf_tokenizer *t, int cap, size_t expected);
/* t->piece[id], bytes[id] from a vocab spelling (byte-level alphabet undone) */
void rf_tok_set_piece(rf_tokenizer *t, int id, const char *s);
/* register an added token (matched literally in raw text) */
void rf_tok_add_added(rf_tokenizer *t, const char *content, int id, int special);
void rf_tok_sort_added(rf_tokenizer *t); /* longest first, as the matcher needs */
const char *rf_tok_gpt2_pattern(void);   /* ByteLevel(use_regex=true)'s regex */

/* GPT-2 byte-level alphabet: byte b is spelled as code point rf_byte_cp[b]. */
extern const uint16_t rf_byte_cp[256];
/* Byte for a byte-level code point, -1 if cp is not in the alphabet. */
int rf_cp_byte(uint32_t cp);

/* ---- UTF-8 ---- */
/* Length of the well-formed sequence at s (1..4); 0 if s[0..n) is a
 * truncated but so far valid sequence; -k if the first k bytes are an
 * ill-formed "maximal subpart" (Unicode 3.9, what U+FFFD replaces). */
int rf_utf8_seq(const unsigned char *s, size_t n);
/* Append s[0..n) to out, replacing ill-formed parts with U+FFFD. With
 * final == 0 a truncated sequence at the end is left unconsumed; returns
 * the number of bytes consumed. */
size_t rf_utf8_repair(const unsigned char *s, size_t n, int final, rf_buf *out);
/* Decode one code point of valid UTF-8; returns its length. */
int rf_utf8_decode(const unsigned char *s, uint32_t *cp);
int rf_utf8_encode(uint32_t cp, char *out);

/* ---- pre-tokenisation (also used by the trainer) ---- */
/* NFC of s[0..n): *out = a malloc'd buffer of *out_n bytes, or NULL when
 * s is already NFC (use s as is); -1 on error. */
int rf_nfc(const char *s, size_t n, char **out, size_t *out_n);
/* Compile a Split regex taken from tokenizer.json. \s and \S are rewritten
 * to Unicode White_Space (what the Hugging Face tokenizers library's
 * Oniguruma matches); see pretok.c. NULL + error on failure. */
pcre2_code *rf_pretok_compile(const char *pattern);
/* Split s[0..n) (valid UTF-8) into pre-tokens, "Isolated" behaviour: every
 * match and every gap between matches is a piece. cb is called per piece. */
typedef void (*rf_piece_fn)(const char *p, size_t len, void *ctx);
int rf_pretokenize(const pcre2_code *re, const char *s, size_t n, rf_piece_fn cb, void *ctx);

/* Qwen2/Qwen3 Split pattern, used by the trainer and in tests. */
extern const char *const RF_QWEN_PRETOK_PATTERN;

#endif
