/* tokenizer.c - read a Hugging Face tokenizer.json (byte-level BPE) and
 * tokenizer_config.json into an rf_tokenizer; accessors.
 *
 * What is supported is exactly what byte-level BPE files (Qwen2/3, GPT-2
 * style, and the ones `refusion tokenizer-train` writes) use: normalizer
 * null or NFC; pre_tokenizer Split(regex, Isolated) followed by
 * ByteLevel(use_regex=false), or a lone ByteLevel(use_regex=true); model
 * BPE with merges as "a b" strings or [a, b] pairs. Anything else is refused
 * with a message naming the field, rather than tokenizing differently. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer/jinja.h"
#include "tokenizer/tok_internal.h"
#include "util/util.h"

#define MAX_VOCAB (1 << 24)

/* GPT-2's pattern, used by ByteLevel when use_regex is true. */
static const char *const GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void rf_tok_free(rf_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_vocab; i++) {
        free(t->piece ? t->piece[i] : NULL);
        free(t->bytes ? t->bytes[i] : NULL);
    }
    free(t->piece);
    free(t->bytes);
    free(t->nbytes);
    free(t->special);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->added_trie);
    rf_strmap_free(&t->vocab);
    rf_pairmap_free(&t->merges);
    if (t->re) pcre2_code_free(t->re);
    free(t->chat_template);
    free(t->chat_template_from);
    json_decref(t->special_strings);
    free(t->pretok_pattern);
    free(t);
}

/* The raw bytes a vocab spelling stands for: undo the byte-level alphabet;
 * a token with a character outside it (e.g. an added "<|x|>" with a space)
 * stands for its own UTF-8, as in the reference ByteLevel decoder. */
static void set_piece(rf_tokenizer *t, int id, const char *s) {
    size_t n = strlen(s);
    t->piece[id] = rf_strdup(s);
    char *b = rf_malloc(n + 1);
    size_t k = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)rf_utf8_decode(u + i, &cp);
        int byte = rf_cp_byte(cp);
        if (byte < 0) { /* not byte-level: keep the text as is */
            memcpy(b, s, n);
            k = n;
            break;
        }
        b[k++] = (char)byte;
    }
    b[k] = 0;
    t->bytes[id] = b;
    t->nbytes[id] = (int)k;
}

static int json_id(json_t *v, const char *file, const char *what) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_VOCAB) {
        rf_set_error("%s: %s: id must be an integer in [0, %d)", file, what, MAX_VOCAB);
        return -1;
    }
    return (int)json_integer_value(v);
}

static int parse_normalizer(rf_tokenizer *t, json_t *norm, const char *file) {
    if (!norm || json_is_null(norm)) return 0;
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (type && !strcmp(type, "NFC")) {
        t->nfc = 1;
        return 0;
    }
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(norm, "normalizers"), *v;
        size_t i;
        json_array_foreach(list, i, v) if (parse_normalizer(t, v, file)) return -1;
        return 0;
    }
    rf_set_error("%s: normalizer type '%s' is not supported (only NFC)", file, type ? type : "?");
    return -1;
}

static int parse_pretokenizer(rf_tokenizer *t, json_t *pt, const char *file) {
    const char *type = pt ? json_string_value(json_object_get(pt, "type")) : NULL;
    if (!type) {
        rf_set_error("%s: pre_tokenizer missing (a byte-level BPE needs ByteLevel)", file);
        return -1;
    }
    json_t *list = NULL;
    if (!strcmp(type, "Sequence")) list = json_object_get(pt, "pretokenizers");
    size_t n = list ? json_array_size(list) : 1;
    int seen_bytelevel = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *p = list ? json_array_get(list, i) : pt;
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (ty && !strcmp(ty, "Split")) {
            json_t *pat = json_object_get(p, "pattern");
            const char *behavior = json_string_value(json_object_get(p, "behavior"));
            const char *rx = json_string_value(json_object_get(pat, "Regex"));
            const char *lit = json_string_value(json_object_get(pat, "String"));
            if (t->re || seen_bytelevel || (!rx && !lit) || !behavior || strcmp(behavior, "Isolated") ||
                json_is_true(json_object_get(p, "invert"))) {
                rf_set_error("%s: pre_tokenizer: only one Split(Regex|String, behavior Isolated, "
                             "invert false) before ByteLevel is supported",
                             file);
                return -1;
            }
            char *quoted = NULL;
            if (!rx) { /* a literal string: quote it for PCRE2 */
                quoted = rf_malloc(strlen(lit) + 5);
                sprintf(quoted, "\\Q%s\\E", lit);
            }
            t->re = rf_pretok_compile(rx ? rx : quoted);
            t->pretok_pattern = rf_strdup(rx ? rx : quoted);
            free(quoted);
            if (!t->re) {
                char msg[600];
                snprintf(msg, sizeof msg, "%s", rf_last_error());
                rf_set_error("%s: %s", file, msg);
                return -1;
            }
        } else if (ty && !strcmp(ty, "ByteLevel")) {
            if (json_is_true(json_object_get(p, "add_prefix_space"))) {
                rf_set_error("%s: pre_tokenizer ByteLevel add_prefix_space=true is not supported", file);
                return -1;
            }
            json_t *ur = json_object_get(p, "use_regex"); /* defaults to true */
            if (!ur || json_is_true(ur)) {
                if (t->re) {
                    rf_set_error("%s: pre_tokenizer: Split followed by ByteLevel(use_regex=true) is not supported", file);
                    return -1;
                }
                if (!(t->re = rf_pretok_compile(GPT2_PATTERN))) return -1;
                t->pretok_pattern = rf_strdup(GPT2_PATTERN);
            }
            seen_bytelevel = 1;
        } else {
            rf_set_error("%s: pre_tokenizer type '%s' is not supported", file, ty ? ty : "?");
            return -1;
        }
    }
    if (!seen_bytelevel) {
        rf_set_error("%s: pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)", file);
        return -1;
    }
    return 0;
}

/* Largest id in model.vocab and added_tokens, validating both. */
static int scan_ids(json_t *vocab, json_t *added, const char *file, int *max_id) {
    const char *k;
    json_t *v;
    *max_id = -1;
    json_object_foreach(vocab, k, v) {
        int id = json_id(v, file, "model.vocab");
        if (id < 0) return -1;
        if (id > *max_id) *max_id = id;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "content")) ||
            json_string_length(json_object_get(v, "content")) == 0) {
            rf_set_error("%s: added_tokens[%zu]: needs a non-empty string 'content' and an 'id'", file, i);
            return -1;
        }
        int id = json_id(json_object_get(v, "id"), file, "added_tokens");
        if (id < 0) return -1;
        if (id > *max_id) *max_id = id;
    }
    return 0;
}

static void add_added(rf_tokenizer *t, const char *content, int id, int special, int lstrip, int rstrip) {
    t->added = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
    if (!t->added) rf_die("out of memory");
    rf_added_token *a = &t->added[t->n_added++];
    a->content = rf_strdup(content);
    a->len = (int)strlen(content);
    a->id = id;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    t->added_first[(unsigned char)content[0]] = 1;
    t->special[id] = (unsigned char)special;
}

static int cmp_added_len(const void *a, const void *b) {
    const rf_added_token *x = a, *y = b;
    return y->len - x->len;
}

static int parse_model(rf_tokenizer *t, json_t *root, const char *file) {
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!json_is_object(model)) return rf_set_error("%s: no 'model' object", file), -1;
    if (type && strcmp(type, "BPE")) return rf_set_error("%s: model type '%s' is not supported (only BPE)", file, type), -1;
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return rf_set_error("%s: model.vocab missing or empty", file), -1;
    if (merges && !json_is_array(merges)) return rf_set_error("%s: model.merges is not an array", file), -1;
    if (added && !json_is_array(added)) return rf_set_error("%s: added_tokens is not an array", file), -1;
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return rf_set_error("%s: model.byte_fallback=true is not supported", file), -1;
    const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *suf = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((pre && *pre) || (suf && *suf))
        return rf_set_error("%s: model subword prefix/suffix is not supported", file), -1;
    if (json_is_true(json_object_get(model, "ignore_merges")))
        return rf_set_error("%s: model.ignore_merges=true is not supported", file), -1;

    int max_id;
    if (scan_ids(vocab, added, file, &max_id)) return -1;
    int cap = max_id + 3; /* room for <|beginoftext|> and <|mask|> */
    rf_tok_alloc_vocab(t, cap, json_object_size(vocab) + 64);

    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        int id = (int)json_integer_value(v);
        if (t->piece[id]) return rf_set_error("%s: model.vocab: id %d used by both \"%s\" and \"%s\"", file, id, t->piece[id], k), -1;
        set_piece(t, id, k);
        rf_strmap_put(&t->vocab, t->piece[id], (int)strlen(k), id);
    }
    for (int b = 0; b < 256; b++) {
        char sp[4];
        int l = rf_utf8_encode(rf_byte_cp[b], sp);
        int *id = rf_strmap_get(&t->vocab, sp, l);
        t->byte_id[b] = id ? *id : -1;
    }

    /* merges: rank r joins a and b into the token spelled a+b */
    size_t nm = merges ? json_array_size(merges) : 0;
    rf_pairmap_init(&t->merges, nm + 16);
    t->n_merges = (int)nm;
    rf_buf cat = {0};
    for (size_t r = 0; r < nm; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (json_is_string(m)) { /* "a b" */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ')) a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), lb = json_string_length(json_array_get(m, 1));
        }
        if (!a) {
            free(cat.p);
            return rf_set_error("%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", file, r), -1;
        }
        cat.n = 0;
        rf_buf_put(&cat, a, la);
        rf_buf_put(&cat, b, lb);
        int *ia = rf_strmap_get(&t->vocab, a, (int)la), *ib = rf_strmap_get(&t->vocab, b, (int)lb);
        int *ic = rf_strmap_get(&t->vocab, cat.p, (int)cat.n);
        if (!ia || !ib || !ic) {
            char what[160];
            snprintf(what, sizeof what, "%.*s", (int)cat.n < 120 ? (int)cat.n : 120, cat.p);
            free(cat.p);
            return rf_set_error("%s: model.merges[%zu] (\"%s\"): %s is not in model.vocab", file, r, what,
                                !ia ? "its left part" : !ib ? "its right part" : "the merged token"),
                   -1;
        }
        rf_pairmap_put(&t->merges, *ia, *ib, (int)r, *ic); /* a repeated pair keeps its last rank */
    }
    free(cat.p);

    size_t i;
    json_array_foreach(added, i, v) {
        const char *content = json_string_value(json_object_get(v, "content"));
        int id = (int)json_integer_value(json_object_get(v, "id"));
        if (t->piece[id] && strcmp(t->piece[id], content))
            return rf_set_error("%s: added_tokens[%zu] \"%s\": id %d already belongs to \"%s\"", file, i, content, id, t->piece[id]), -1;
        int *other = rf_strmap_get(&t->vocab, content, (int)strlen(content));
        if (other && *other != id)
            return rf_set_error("%s: added_tokens[%zu] \"%s\" has id %d but the vocab says %d", file, i, content, id, *other), -1;
        if (!t->piece[id]) {
            set_piece(t, id, content);
            rf_strmap_put(&t->vocab, t->piece[id], (int)strlen(content), id);
        }
        /* added tokens decode to their text, not through the byte alphabet */
        free(t->bytes[id]);
        t->bytes[id] = rf_strdup(content);
        t->nbytes[id] = (int)strlen(content);
        add_added(t, content, id, json_is_true(json_object_get(v, "special")),
                  json_is_true(json_object_get(v, "lstrip")), json_is_true(json_object_get(v, "rstrip")));
    }
    return max_id;
}

/* ReFusion's two tokens, at the next free ids when the file lacks them. */
static int ensure_token(rf_tokenizer *t, const char *content, int *max_id) {
    int *id = rf_strmap_get(&t->vocab, content, (int)strlen(content));
    if (id) return *id;
    int nid = ++*max_id;
    set_piece(t, nid, content);
    free(t->bytes[nid]);
    t->bytes[nid] = rf_strdup(content);
    t->nbytes[nid] = (int)strlen(content);
    rf_strmap_put(&t->vocab, t->piece[nid], (int)strlen(content), nid);
    add_added(t, content, nid, 1, 0, 0);
    return nid;
}

/* A special token's text in tokenizer_config.json: "..." or {"content": "..."}. */
static const char *token_text(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

/* tokenizer_config.json: eos_token, the special tokens transformers passes
 * to the chat template (bos_token, eos_token, unk_token, pad_token,
 * additional_special_tokens: the ones that are set), and chat_template (a
 * string, or a list of {name, template} of which "default" is taken). */
static int parse_config(rf_tokenizer *t, const char *cfg_path, char **eos_out) {
    struct stat st;
    if (stat(cfg_path, &st) != 0) return 0; /* optional */
    json_error_t je;
    json_t *cfg = json_load_file(cfg_path, 0, &je);
    if (!cfg) return rf_set_error("%s: line %d: %s", cfg_path, je.line, je.text), -1;
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return rf_set_error("%s: not a JSON object", cfg_path), -1;
    }
    t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    const char *eos = token_text(json_object_get(cfg, "eos_token"));
    if (eos) *eos_out = rf_strdup(eos);
    json_t *sp = json_object();
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (int k = 0; k < 4; k++) {
        const char *v = token_text(json_object_get(cfg, names[k]));
        if (v) json_object_set_new(sp, names[k], json_string(v));
    }
    json_t *extra = json_object_get(cfg, "additional_special_tokens"), *e;
    size_t i;
    if (json_is_array(extra)) {
        json_t *list = json_array();
        json_array_foreach(extra, i, e) if (token_text(e)) json_array_append_new(list, json_string(token_text(e)));
        if (json_array_size(list)) json_object_set_new(sp, "additional_special_tokens", list);
        else json_decref(list);
    }
    json_decref(t->special_strings);
    t->special_strings = sp;
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tpl)) {
        json_t *pick = NULL;
        json_array_foreach(tpl, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (!pick || (name && !strcmp(name, "default"))) pick = json_object_get(e, "template");
        }
        tpl = pick;
    }
    if (json_is_string(tpl) && !t->chat_template) {
        t->chat_template = rf_strdup(json_string_value(tpl));
        t->chat_template_from = rf_strdup(cfg_path);
    }
    json_decref(cfg);
    return 0;
}

/* DIR/chat_template.jinja beside the tokenizer config (transformers >= 4.43
 * saves the template there; it wins over tokenizer_config.json's). */
static int read_template_file(rf_tokenizer *t, const char *cfg_path) {
    const char *slash = strrchr(cfg_path, '/');
    char *dir = slash ? strndup(cfg_path, (size_t)(slash - cfg_path)) : rf_strdup(".");
    if (!dir) rf_die("out of memory");
    char *p = rf_path_join(dir, "chat_template.jinja");
    free(dir);
    struct stat st;
    int rc = 0;
    if (stat(p, &st) == 0) {
        size_t len;
        char *text = rf_read_file_max(p, RF_CHAT_TEMPLATE_MAX, &len);
        if (!text) rc = -1;
        else {
            t->chat_template = text;
            t->chat_template_from = p;
            p = NULL;
        }
    }
    free(p);
    return rc;
}

int rf_tok_set_chat_template(rf_tokenizer *t, const char *spec) {
    if (!strcmp(spec, "builtin")) {
        t->chat_builtin = 1;
        return 0;
    }
    size_t len;
    const char *named = rf_chat_template_named(spec);
    char *text = named ? rf_strdup(named) : NULL;
    if (named) len = strlen(named);
    else if (access(spec, F_OK)) {
        rf_set_error("chat template '%s' is neither a file nor a built-in name (builtin, %s)", spec,
                     rf_chat_template_names());
        return -1;
    } else if (!(text = rf_read_file_max(spec, RF_CHAT_TEMPLATE_MAX, &len)))
        return -1;
    if (rf_jinja_check(text, len)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", spec, rf_last_error());
        rf_set_error("%s", msg);
        free(text);
        return -1;
    }
    free(t->chat_template);
    free(t->chat_template_from);
    t->chat_template = text;
    t->chat_template_from = rf_strdup(spec);
    t->chat_builtin = 0;
    return 0;
}

const char *rf_tok_chat_template(const rf_tokenizer *t) { return t->chat_builtin ? NULL : t->chat_template; }

void rf_tok_set_special_in_content(rf_tokenizer *t, int on) { t->special_in_content = on != 0; }
int rf_tok_special_in_content(const rf_tokenizer *t) { return t ? t->special_in_content : 0; }

void rf_tok_files(const char *path, char **json, char **cfg) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        *json = rf_path_join(path, "tokenizer.json");
        *cfg = rf_path_join(path, "tokenizer_config.json");
    } else { /* a tokenizer.json: its config, if any, sits next to it */
        *json = rf_strdup(path);
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path)) : rf_strdup(".");
        *cfg = rf_path_join(dir, "tokenizer_config.json");
        free(dir);
    }
}

/* ---- the slow layout -------------------------------------------------------
 * What save_pretrained writes for a Python ("slow") Qwen2Tokenizer or
 * GPT2Tokenizer: vocab.json ({spelling: id}), merges.txt ("#version" line,
 * then "a b" per line), added_tokens.json ({content: id}) and/or
 * tokenizer_config.json's added_tokens_decoder ({"id": {content, special,
 * lstrip, rstrip, ...}}). It is the same tokenizer transformers' converter
 * would write as tokenizer.json, so it is built as that JSON and read by the
 * code above: Qwen2Tokenizer is NFC + Qwen's split regex + byte-level BPE,
 * GPT2Tokenizer byte-level BPE with GPT-2's regex. */
static int file_exists(const char *dir, const char *name) {
    char *p = rf_path_join(dir, name);
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

int rf_tok_dir_has_slow(const char *dir) { return file_exists(dir, "vocab.json") && file_exists(dir, "merges.txt"); }

static json_t *load_json_max(const char *path, size_t max) {
    size_t len;
    char *text = rf_read_file_max(path, max, &len);
    if (!text) return NULL;
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    free(text);
    if (!j) rf_set_error("%s: not valid JSON: line %d column %d: %s", path, je.line, je.column, je.text);
    else if (!json_is_object(j)) {
        rf_set_error("%s: not a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* A token of added_tokens.json that added_tokens_decoder does not describe
 * is special when tokenizer_config.json names it as a special token
 * (bos / eos / unk / pad_token, additional_special_tokens), as transformers
 * decides for that legacy file. */
static int config_names_special(json_t *cfg, const char *s) {
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (int k = 0; cfg && k < 4; k++) {
        const char *v = token_text(json_object_get(cfg, names[k]));
        if (v && !strcmp(v, s)) return 1;
    }
    json_t *extra = cfg ? json_object_get(cfg, "additional_special_tokens") : NULL, *e;
    size_t i;
    json_array_foreach(extra, i, e) if (token_text(e) && !strcmp(token_text(e), s)) return 1;
    return 0;
}

static json_t *slow_as_tokenizer_json(const char *dir, const char *cfg_path) {
    char *vp = rf_path_join(dir, "vocab.json"), *mp = rf_path_join(dir, "merges.txt");
    char *ap = rf_path_join(dir, "added_tokens.json");
    json_t *root = NULL, *vocab = NULL, *cfg = NULL, *added_json = NULL, *merges = json_array(), *added = json_array();
    char *mtext = NULL;
    struct stat st;
    if (!(vocab = load_json_max(vp, RF_TOKENIZER_JSON_MAX))) goto fail;
    size_t mlen;
    if (!(mtext = rf_read_file_max(mp, RF_TOKENIZER_JSON_MAX, &mlen))) goto fail;
    /* merges.txt as Qwen2Tokenizer reads it: each line stripped, a first
     * "#version:" line and empty lines skipped */
    size_t line = 0;
    for (char *p = mtext, *end = mtext + mlen; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end, *a = p;
        line++;
        while (a < e && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
        while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        if (e > a && !(line == 1 && !strncmp(a, "#version:", 9))) {
            json_t *m = json_stringn(a, (size_t)(e - a));
            if (!m) {
                rf_set_error("%s: line %zu is not valid UTF-8", mp, line);
                goto fail;
            }
            json_array_append_new(merges, m);
        }
        p = nl ? nl + 1 : end;
    }
    /* the added tokens: tokenizer_config.json's added_tokens_decoder, then
     * added_tokens.json for any it does not list */
    json_t *byid = json_object(); /* "id" -> entry */
    if (stat(cfg_path, &st) == 0) {
        if (!(cfg = load_json_max(cfg_path, RF_TOKENIZER_JSON_MAX))) goto fail_byid;
        json_t *dec = json_object_get(cfg, "added_tokens_decoder"), *e;
        const char *k;
        if (dec && !json_is_object(dec)) {
            rf_set_error("%s: added_tokens_decoder is not an object", cfg_path);
            goto fail_byid;
        }
        json_object_foreach(dec, k, e) {
            char *endp;
            long id = strtol(k, &endp, 10);
            if (*endp || endp == k || id < 0 || id >= MAX_VOCAB || !json_is_string(json_object_get(e, "content"))) {
                rf_set_error("%s: added_tokens_decoder[\"%.40s\"]: needs an id key and a string \"content\"", cfg_path, k);
                goto fail_byid;
            }
            json_object_set_new(byid, k, json_pack("{s:I, s:O, s:b, s:b, s:b}", "id", (json_int_t)id, "content",
                                                   json_object_get(e, "content"), "special",
                                                   json_is_true(json_object_get(e, "special")), "lstrip",
                                                   json_is_true(json_object_get(e, "lstrip")), "rstrip",
                                                   json_is_true(json_object_get(e, "rstrip"))));
        }
    }
    if (stat(ap, &st) == 0) {
        if (!(added_json = load_json_max(ap, RF_TOKENIZER_JSON_MAX))) goto fail_byid;
        const char *k;
        json_t *v;
        json_object_foreach(added_json, k, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_VOCAB) {
                rf_set_error("%s: \"%.40s\": id must be an integer in [0, %d)", ap, k, MAX_VOCAB);
                goto fail_byid;
            }
            char key[24];
            snprintf(key, sizeof key, "%lld", (long long)json_integer_value(v));
            json_t *have = json_object_get(byid, key);
            if (have) {
                if (strcmp(json_string_value(json_object_get(have, "content")), k)) {
                    rf_set_error("%s: \"%.40s\" has id %s, which tokenizer_config.json's added_tokens_decoder gives to \"%.40s\"",
                                 ap, k, key, json_string_value(json_object_get(have, "content")));
                    goto fail_byid;
                }
                continue;
            }
            json_object_set_new(byid, key, json_pack("{s:I, s:s, s:b, s:b, s:b}", "id", json_integer_value(v), "content", k,
                                                     "special", config_names_special(cfg, k), "lstrip", 0, "rstrip", 0));
        }
    }
    {
        const char *k;
        json_t *e;
        json_object_foreach(byid, k, e) json_array_append(added, e);
    }
    json_decref(byid);
    const char *cls = cfg ? json_string_value(json_object_get(cfg, "tokenizer_class")) : NULL;
    json_t *pre;
    int nfc;
    if (!cls || !strncmp(cls, "Qwen2Tokenizer", 14)) {
        nfc = 1;
        pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
                        "type", "Split", "pattern", "Regex", RF_QWEN_PRETOK_PATTERN, "behavior", "Isolated", "invert", 0,
                        "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
    } else if (!strncmp(cls, "GPT2Tokenizer", 13)) {
        nfc = 0;
        pre = json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1);
    } else {
        rf_set_error("%s: tokenizer_class \"%.60s\" with vocab.json + merges.txt is not supported "
                     "(Qwen2Tokenizer or GPT2Tokenizer)", cfg_path, cls);
        goto fail;
    }
    root = json_pack("{s:{s:s, s:O, s:O}, s:O, s:o, s:o, s:{s:s}}", "model", "type", "BPE", "vocab", vocab, "merges",
                     merges, "added_tokens", added, "normalizer", nfc ? json_pack("{s:s}", "type", "NFC") : json_null(),
                     "pre_tokenizer", pre, "decoder", "type", "ByteLevel");
    goto done;
fail_byid:
    json_decref(byid);
fail:
    root = NULL;
done:
    json_decref(vocab);
    json_decref(cfg);
    json_decref(added_json);
    json_decref(merges);
    json_decref(added);
    free(mtext);
    free(vp);
    free(mp);
    free(ap);
    return root;
}

rf_tokenizer *rf_tok_for_model(const char *model_path, const char *override) {
    if (override) return rf_tok_load(override);
    if (!rf_tok_model_has_tokenizer(model_path))
        return rf_set_error("%s: no tokenizer (tokenizer.json, vocab.json + merges.txt, or GGUF tokenizer metadata)", model_path), NULL;
    return rf_tok_load(model_path);
}

rf_tokenizer *rf_tok_load(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return rf_set_error("%s: no such file or directory", path), NULL;
    if (rf_tok_is_gguf(path)) return rf_tok_load_gguf(path);
    char *json_path, *cfg_path;
    rf_tok_files(path, &json_path, &cfg_path);
    rf_tokenizer *t = rf_calloc(1, sizeof *t);
    char *eos = NULL;
    json_t *root = NULL;
    size_t len;
    if (S_ISDIR(st.st_mode) && !file_exists(path, "tokenizer.json") && rf_tok_dir_has_slow(path)) {
        free(json_path);
        json_path = rf_path_join(path, "vocab.json"); /* what messages name */
        if (!(root = slow_as_tokenizer_json(path, cfg_path))) goto fail;
    } else {
        /* the real Qwen3 tokenizer.json is 11 MB: refuse a huge file before reading it */
        char *text = rf_read_file_max(json_path, (size_t)RF_TOKENIZER_JSON_MAX, &len);
        if (!text) goto fail;
        json_error_t je;
        root = json_loadb(text, len, 0, &je);
        free(text);
        if (!root) {
            rf_set_error("%s: not valid JSON: line %d column %d: %s", json_path, je.line, je.column, je.text);
            goto fail;
        }
    }
    if (!json_is_object(root)) {
        rf_set_error("%s: not a JSON object", json_path);
        goto fail;
    }
    int max_id = parse_model(t, root, json_path);
    if (max_id < 0) goto fail;
    if (parse_normalizer(t, json_object_get(root, "normalizer"), json_path)) goto fail;
    if (parse_pretokenizer(t, json_object_get(root, "pre_tokenizer"), json_path)) goto fail;
    json_t *dec = json_object_get(root, "decoder");
    const char *dty = json_string_value(json_object_get(dec, "type"));
    if (dec && !json_is_null(dec) && (!dty || strcmp(dty, "ByteLevel"))) {
        rf_set_error("%s: decoder type '%s' is not supported (only ByteLevel)", json_path, dty ? dty : "?");
        goto fail;
    }
    t->bot_id = ensure_token(t, "<|beginoftext|>", &max_id);
    t->mask_id = ensure_token(t, "<|mask|>", &max_id);
    for (int i = max_id + 1; i < t->n_vocab; i++) { /* drop the unused spare ids */
        free(t->piece[i]);
        free(t->bytes[i]);
    }
    t->n_vocab = max_id + 1;
    rf_tok_sort_added(t);

    if (read_template_file(t, cfg_path) || parse_config(t, cfg_path, &eos)) goto fail;
    const char *eos_name = eos ? eos : "<|endoftext|>";
    t->eos_id = rf_tok_id(t, eos_name);
    if (eos && t->eos_id < 0) {
        rf_set_error("%s: eos_token \"%s\" is not in the vocabulary", cfg_path, eos);
        goto fail;
    }
    free(eos);
    json_decref(root);
    free(json_path);
    free(cfg_path);
    return t;
fail:
    free(eos);
    json_decref(root);
    free(json_path);
    free(cfg_path);
    rf_tok_free(t);
    return NULL;
}

int rf_tok_vocab_size(const rf_tokenizer *t) { return t->n_vocab; }

int rf_tok_id(const rf_tokenizer *t, const char *token) {
    int *id = rf_strmap_get(&t->vocab, token, (int)strlen(token));
    return id ? *id : -1;
}

const char *rf_tok_piece(const rf_tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab ? t->piece[id] : NULL;
}

int rf_tok_is_special(const rf_tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && t->special[id];
}

int rf_tok_eos_id(const rf_tokenizer *t) { return t->eos_id; }
int rf_tok_mask_id(const rf_tokenizer *t) { return t->mask_id; }

/* for the GGUF vocabulary reader (gguf_vocab.c) */
void rf_tok_set_piece(rf_tokenizer *t, int id, const char *s) { set_piece(t, id, s); }

void rf_tok_alloc_vocab(rf_tokenizer *t, int cap, size_t expected) {
    t->n_vocab = cap;
    t->piece = rf_calloc((size_t)cap, sizeof *t->piece);
    t->bytes = rf_calloc((size_t)cap, sizeof *t->bytes);
    t->nbytes = rf_calloc((size_t)cap, sizeof *t->nbytes);
    t->special = rf_calloc((size_t)cap, 1);
    rf_strmap_init(&t->vocab, expected);
}
void rf_tok_add_added(rf_tokenizer *t, const char *content, int id, int special) {
    add_added(t, content, id, special, 0, 0);
}
/* a trie node for byte b under node parent (found or made) */
static int trie_step(rf_tokenizer *t, int parent, unsigned char b, int *cap) {
    int c = t->added_trie[parent].child;
    while (c >= 0 && t->added_trie[c].byte != b) c = t->added_trie[c].sibling;
    if (c >= 0) return c;
    t->added_trie = rf_grow(t->added_trie, sizeof *t->added_trie, t->n_trie, cap, 64);
    c = t->n_trie++;
    t->added_trie[c] = (rf_trie_node){.child = -1, .sibling = t->added_trie[parent].child, .token = -1, .byte = b};
    t->added_trie[parent].child = c;
    return c;
}

void rf_tok_sort_added(rf_tokenizer *t) {
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added_len);
    /* the trie: a content's last node names the first token in this order
     * with that content, as a scan of the sorted list would find it */
    free(t->added_trie);
    t->added_trie = NULL;
    t->n_trie = 0;
    int cap = 0;
    t->added_trie = rf_grow(t->added_trie, sizeof *t->added_trie, t->n_trie, &cap, 64);
    t->added_trie[t->n_trie++] = (rf_trie_node){.child = -1, .sibling = -1, .token = -1};
    for (int k = 0; k < t->n_added; k++) {
        int node = 0;
        for (int i = 0; i < t->added[k].len; i++) node = trie_step(t, node, (unsigned char)t->added[k].content[i], &cap);
        if (t->added_trie[node].token < 0) t->added_trie[node].token = k;
    }
}
const char *rf_tok_gpt2_pattern(void) { return GPT2_PATTERN; }
