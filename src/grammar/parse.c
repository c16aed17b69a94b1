/* parse.c - GBNF text to the compiled grammar (grammar_impl.h).
 *
 * The format is llama.cpp's: `name ::= alternatives`, one rule per line
 * (a rule goes on over newlines only inside parentheses or after `|`),
 * names of letters, digits and '-', `# comments`, "literals",
 * [classes] with ranges and ^ negation, `.`, groups, and the repetitions
 * * + ? {m} {m,} {m,n} applying to the element before them (a whole
 * literal, class or group). Escapes in literals and classes: \x.. \u....
 * \U........ \t \r \n \\ \" \[ \] \- (llama.cpp's set, plus \- ).
 *
 * Compilation: a literal becomes one byte set per byte of its UTF-8; a
 * class becomes its ASCII part as one byte set plus, for the rest, the
 * UTF-8 byte-range sequences of its code points as alternatives of a
 * generated rule; repetitions become generated rules as llama.cpp builds
 * them (x* : r ::= x r | "" ; x? : r ::= x | "" ; x{m,n}: m copies of x,
 * then nested optional rules). A rule referenced but never defined, a
 * missing root and left recursion are errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"
#include "util/util.h"

typedef struct {
    gelem *e;
    int n, cap;
} seqbuf;

typedef struct {
    seqbuf *alts;
    int n, cap;
    int defined;
    int name_off, name_len; /* in the text; name_len 0: a generated rule */
} rulebuf;

typedef struct {
    const char *text, *s, *end;
    rulebuf *rules;
    int n_rules, cap_rules;
    uint64_t (*sets)[4];
    int n_sets, cap_sets;
    long n_elems;
    int *hash; /* open addressing over named rules: rule id + 1, 0 empty */
    int hash_cap;
    int failed;
} parser;

static int fail(parser *p, const char *where, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *p, const char *where, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!where) {
        rf_set_error("grammar: %s", msg);
        return -1;
    }
    int line = 1, col = 1;
    for (const char *c = p->text; c < where && c < p->end; c++)
        if (*c == '\n') line++, col = 1;
        else col++;
    rf_set_error("grammar: line %d, column %d: %s", line, col, msg);
    return -1;
}

/* ---- building ---- */

static int new_rule(parser *p) {
    p->rules = rf_grow(p->rules, sizeof *p->rules, p->n_rules, &p->cap_rules, 16);
    memset(&p->rules[p->n_rules], 0, sizeof *p->rules);
    return p->n_rules++;
}

static int add_elem(parser *p, seqbuf *q, int type, int val) {
    if (++p->n_elems > RF_GRAMMAR_MAX_ELEMS)
        return fail(p, NULL, "more than %d elements once compiled (repetitions expand)", RF_GRAMMAR_MAX_ELEMS);
    q->e = rf_grow(q->e, sizeof *q->e, q->n, &q->cap, 8);
    q->e[q->n++] = (gelem){type, val};
    return 0;
}

static seqbuf *add_alt(parser *p, int r) {
    rulebuf *rb = &p->rules[r];
    rb->alts = rf_grow(rb->alts, sizeof *rb->alts, rb->n, &rb->cap, 2);
    memset(&rb->alts[rb->n], 0, sizeof *rb->alts);
    return &rb->alts[rb->n++];
}

static int add_set(parser *p, const uint64_t bits[4]) {
    p->sets = rf_grow(p->sets, sizeof *p->sets, p->n_sets, &p->cap_sets, 64);
    memcpy(p->sets[p->n_sets], bits, sizeof p->sets[0]);
    return p->n_sets++;
}

static int add_byte(parser *p, seqbuf *q, uint8_t b) {
    uint64_t bits[4] = {0};
    bits[b >> 6] |= 1ull << (b & 63);
    return add_elem(p, q, G_SET, add_set(p, bits));
}

static uint32_t name_hash(const char *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* the rule named s[0..n), created (undefined) on first sight */
static int rule_by_name(parser *p, const char *s, int n) {
    if (p->hash_cap < 2 * (p->n_rules + 1)) { /* rehash every named rule */
        int cap = p->hash_cap ? 2 * p->hash_cap : 64;
        while (cap < 4 * (p->n_rules + 1)) cap *= 2;
        free(p->hash);
        p->hash = rf_calloc((size_t)cap, sizeof *p->hash);
        p->hash_cap = cap;
        for (int r = 0; r < p->n_rules; r++) {
            if (!p->rules[r].name_len) continue;
            uint32_t h = name_hash(p->text + p->rules[r].name_off, p->rules[r].name_len) & (cap - 1);
            while (p->hash[h]) h = (h + 1) & (cap - 1);
            p->hash[h] = r + 1;
        }
    }
    uint32_t h = name_hash(s, n) & (p->hash_cap - 1);
    for (; p->hash[h]; h = (h + 1) & (p->hash_cap - 1)) {
        rulebuf *rb = &p->rules[p->hash[h] - 1];
        if (rb->name_len == n && !memcmp(p->text + rb->name_off, s, (size_t)n)) return p->hash[h] - 1;
    }
    int r = new_rule(p);
    p->rules[r].name_off = (int)(s - p->text), p->rules[r].name_len = n;
    p->hash[h] = r + 1;
    return r;
}

/* ---- lexing ---- */

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* skip blanks and comments; newlines too when newline_ok */
static void skip_space(parser *p, int newline_ok) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t') p->s++;
        else if (c == '#')
            while (p->s < p->end && *p->s != '\n' && *p->s != '\r') p->s++;
        else if ((c == '\n' || c == '\r') && newline_ok) p->s++;
        else break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* one UTF-8 character of the text */
static int decode_utf8(parser *p, uint32_t *cp) {
    const uint8_t *s = (const uint8_t *)p->s;
    size_t left = (size_t)(p->end - p->s);
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left) return fail(p, p->s, "invalid UTF-8");
    uint32_t c = n == 1 ? s[0] : s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail(p, p->s, "invalid UTF-8");
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_of_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return fail(p, p->s, "invalid UTF-8");
    p->s += n;
    *cp = c;
    return 0;
}

/* one character of a literal or class, escapes decoded */
static int parse_char(parser *p, uint32_t *cp) {
    if (p->s >= p->end) return fail(p, p->s, "unexpected end of input");
    if (*p->s != '\\') return decode_utf8(p, cp);
    const char *at = p->s++;
    if (p->s >= p->end) return fail(p, at, "unexpected end of input after '\\'");
    char c = *p->s++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->s < p->end ? hexval(*p->s) : -1;
            if (h < 0) return fail(p, at, "expected %d hex digits after \\%c", digits, c);
            v = v << 4 | (uint32_t)h;
            p->s++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(p, at, "\\%c escape is not a Unicode scalar value", c);
        *cp = v;
        return 0;
    }
    switch (c) {
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'n': *cp = '\n'; return 0;
    case '\\': case '"': case '[': case ']': case '-': *cp = (uint8_t)c; return 0;
    default: return fail(p, at, "unknown escape '\\%c'", c);
    }
}

/* ---- character classes ---- */

typedef struct {
    uint32_t lo, hi;
} cprange;

static int by_lo(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

typedef struct {
    parser *p;
    int rule;          /* the generated rule holding the multi-byte sequences */
    uint64_t ascii[4];
    int n_multi;
} class_build;

static void emit_seq(const uint8_t *lo, const uint8_t *hi, int len, void *user) {
    class_build *cb = user;
    if (len == 1) {
        for (int b = lo[0]; b <= hi[0]; b++) cb->ascii[b >> 6] |= 1ull << (b & 63);
        return;
    }
    seqbuf *q = add_alt(cb->p, cb->rule);
    for (int k = 0; k < len; k++) {
        uint64_t bits[4] = {0};
        for (int b = lo[k]; b <= hi[k]; b++) bits[b >> 6] |= 1ull << (b & 63);
        add_elem(cb->p, q, G_SET, add_set(cb->p, bits));
    }
    cb->n_multi++;
}

/* code point ranges (sorted, merged, complemented when negated, without
 * surrogates) into elements of q: one byte set when all are ASCII, else a
 * reference to a generated rule of alternatives */
static int emit_class(parser *p, seqbuf *q, cprange *r, int n, int negate) {
    qsort(r, (size_t)n, sizeof *r, by_lo);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else r[m++] = r[i];
    cprange *u = rf_malloc(((size_t)m + 3) * sizeof *u);
    int nu = 0;
    if (negate) {
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[i].lo > next) u[nu++] = (cprange){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) u[nu++] = (cprange){next, 0x10FFFF};
    } else {
        memcpy(u, r, (size_t)m * sizeof *u);
        nu = m;
    }
    int gen = new_rule(p);
    class_build cb = {p, gen, {0}, 0};
    for (int i = 0; i < nu; i++) { /* minus the surrogates */
        uint32_t lo = u[i].lo, hi = u[i].hi;
        if (lo < 0xD800) rf_utf8_sequences(lo, hi < 0xD7FF ? hi : 0xD7FF, emit_seq, &cb);
        if (hi > 0xDFFF) rf_utf8_sequences(lo > 0xE000 ? lo : 0xE000, hi, emit_seq, &cb);
    }
    free(u);
    int has_ascii = (cb.ascii[0] | cb.ascii[1] | cb.ascii[2] | cb.ascii[3]) != 0;
    if (!cb.n_multi) { /* the generated rule stays empty and unreferenced */
        p->rules[gen].defined = 1;
        if (!has_ascii) return fail(p, p->s, "empty character class");
        return add_elem(p, q, G_SET, add_set(p, cb.ascii));
    }
    if (has_ascii) {
        seqbuf *a = add_alt(p, gen);
        add_elem(p, a, G_SET, add_set(p, cb.ascii));
    }
    p->rules[gen].defined = 1;
    return add_elem(p, q, G_REF, gen);
}

static int parse_class(parser *p, seqbuf *q) {
    const char *at = p->s++;
    int negate = p->s < p->end && *p->s == '^';
    if (negate) p->s++;
    cprange *r = NULL;
    int n = 0, cap = 0;
    while (!p->failed) {
        if (p->s >= p->end) {
            fail(p, at, "unterminated character class");
            break;
        }
        if (*p->s == ']') {
            p->s++;
            break;
        }
        uint32_t lo, hi;
        if (parse_char(p, &lo)) break;
        hi = lo;
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            if (parse_char(p, &hi)) break;
            if (hi < lo) {
                fail(p, at, "character range out of order");
                break;
            }
        }
        r = rf_grow(r, sizeof *r, n, &cap, 8);
        r[n++] = (cprange){lo, hi};
    }
    if (!p->failed) {
        if (!n && !negate) fail(p, at, "empty character class");
        else emit_class(p, q, r ? r : &(cprange){0, 0}, n, negate);
    }
    free(r);
    return p->failed ? -1 : 0;
}

/* ---- repetitions ---- */

static void seq_copy(parser *p, seqbuf *dst, const gelem *e, int n) {
    for (int i = 0; i < n && !p->failed; i++) add_elem(p, dst, e[i].type, e[i].val);
}

/* the elements q[start..) repeated min..max times (max -1: no limit) */
static int repeat(parser *p, int owner, int alt_idx, int start, int min, int max) {
    seqbuf *q = &p->rules[owner].alts[alt_idx];
    int len = q->n - start;
    if (len <= 0) return fail(p, p->s, "nothing to repeat");
    gelem item;
    if (len == 1) item = q->e[start];
    else { /* a generated rule holding the item */
        int ir = new_rule(p);
        q = &p->rules[owner].alts[alt_idx];
        seqbuf *a = add_alt(p, ir);
        seq_copy(p, a, q->e + start, len);
        p->rules[ir].defined = 1;
        item = (gelem){G_REF, ir};
    }
    p->n_elems -= len;
    q->n = start;
    for (int i = 0; i < min && !p->failed; i++) add_elem(p, &p->rules[owner].alts[alt_idx], item.type, item.val);
    if (max == -1) { /* r ::= item r | "" */
        int r = new_rule(p);
        seqbuf *a = add_alt(p, r);
        add_elem(p, a, item.type, item.val);
        add_elem(p, a, G_REF, r);
        add_alt(p, r);
        p->rules[r].defined = 1;
        add_elem(p, &p->rules[owner].alts[alt_idx], G_REF, r);
    } else if (max > min) { /* r_k ::= item r_(k-1) | "" */
        int last = -1;
        for (int k = min; k < max && !p->failed; k++) {
            int r = new_rule(p);
            seqbuf *a = add_alt(p, r);
            add_elem(p, a, item.type, item.val);
            if (last >= 0) add_elem(p, a, G_REF, last);
            add_alt(p, r);
            p->rules[r].defined = 1;
            last = r;
        }
        add_elem(p, &p->rules[owner].alts[alt_idx], G_REF, last);
    }
    return p->failed ? -1 : 0;
}

static int parse_int(parser *p, int *v) {
    const char *at = p->s;
    long x = 0;
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, at, "expected a number");
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        x = x * 10 + (*p->s++ - '0');
        if (x > RF_GRAMMAR_MAX_REPEAT) return fail(p, at, "repetition count above %d", RF_GRAMMAR_MAX_REPEAT);
    }
    *v = (int)x;
    return 0;
}

/* ---- sequences and alternatives ---- */

static int parse_alternatives(parser *p, int rule, int nested);

static int parse_sequence(parser *p, int rule, int nested) {
    int ai = p->rules[rule].n;
    add_alt(p, rule);
    int last_start = -1;
    while (p->s < p->end && !p->failed) {
        char c = *p->s;
        seqbuf *q = &p->rules[rule].alts[ai];
        if (c == '"') {
            const char *at = p->s++;
            last_start = q->n;
            for (;;) {
                if (p->s >= p->end) return fail(p, at, "unterminated literal");
                if (*p->s == '"') {
                    p->s++;
                    break;
                }
                uint32_t cp;
                if (parse_char(p, &cp)) return -1;
                uint8_t b[4];
                int nb = rf_utf8_put(cp, b);
                for (int i = 0; i < nb; i++)
                    if (add_byte(p, &p->rules[rule].alts[ai], b[i])) return -1;
            }
        } else if (c == '[') {
            last_start = q->n;
            if (parse_class(p, q)) return -1;
        } else if (c == '.') {
            p->s++;
            last_start = q->n;
            cprange any = {0, 0x10FFFF};
            if (emit_class(p, &p->rules[rule].alts[ai], &any, 1, 0)) return -1;
        } else if (is_word(c)) {
            const char *name = p->s;
            while (p->s < p->end && is_word(*p->s)) p->s++;
            int r = rule_by_name(p, name, (int)(p->s - name));
            last_start = p->rules[rule].alts[ai].n;
            if (add_elem(p, &p->rules[rule].alts[ai], G_REF, r)) return -1;
        } else if (c == '(') {
            const char *at = p->s++;
            skip_space(p, 1);
            int g = new_rule(p);
            if (parse_alternatives(p, g, 1)) return -1;
            if (p->s >= p->end || *p->s != ')') return fail(p, at, "expected ')'");
            p->s++;
            p->rules[g].defined = 1;
            last_start = p->rules[rule].alts[ai].n;
            if (add_elem(p, &p->rules[rule].alts[ai], G_REF, g)) return -1;
        } else if (c == '*' || c == '+' || c == '?') {
            if (last_start < 0) return fail(p, p->s, "'%c' with nothing before it", c);
            p->s++;
            int min = c == '+', max = c == '?' ? 1 : -1;
            if (repeat(p, rule, ai, last_start, min, max)) return -1;
            last_start = -1;
        } else if (c == '{') {
            const char *at = p->s++;
            if (last_start < 0) return fail(p, at, "'{' with nothing before it");
            skip_space(p, nested);
            int min, max;
            if (parse_int(p, &min)) return -1;
            skip_space(p, nested);
            max = min;
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                skip_space(p, nested);
                max = -1;
                if (p->s < p->end && *p->s >= '0' && *p->s <= '9' && parse_int(p, &max)) return -1;
                skip_space(p, nested);
            }
            if (p->s >= p->end || *p->s != '}') return fail(p, at, "expected '}'");
            p->s++;
            if (max != -1 && max < min) return fail(p, at, "repetition {%d,%d}: max below min", min, max);
            if (repeat(p, rule, ai, last_start, min, max)) return -1;
            last_start = -1;
        } else if (c == '<') {
            return fail(p, p->s, "token references (<...>) are not supported");
        } else {
            break;
        }
        skip_space(p, nested);
    }
    return p->failed ? -1 : 0;
}

static int parse_alternatives(parser *p, int rule, int nested) {
    if (parse_sequence(p, rule, nested)) return -1;
    while (p->s < p->end && *p->s == '|') {
        p->s++;
        skip_space(p, 1);
        if (parse_sequence(p, rule, nested)) return -1;
    }
    return 0;
}

static int parse_rule(parser *p) {
    const char *name = p->s;
    while (p->s < p->end && is_word(*p->s)) p->s++;
    if (p->s == name) return fail(p, p->s, "expected a rule name");
    int r = rule_by_name(p, name, (int)(p->s - name));
    if (p->rules[r].defined) return fail(p, name, "rule '%.*s' defined twice", (int)(p->s - name), name);
    p->rules[r].defined = 1;
    skip_space(p, 0);
    if (p->end - p->s < 3 || memcmp(p->s, "::=", 3)) return fail(p, p->s, "expected '::='");
    p->s += 3;
    skip_space(p, 1);
    if (parse_alternatives(p, r, 0)) return -1;
    if (p->s < p->end) {
        if (*p->s == '\r') p->s++;
        if (p->s < p->end && *p->s == '\n') p->s++;
        else if (p->s < p->end) return fail(p, p->s, "unexpected '%c'", *p->s);
    }
    return 0;
}

/* ---- checks ---- */

/* llama.cpp's rule: a rule may start with itself through references at
 * the start of alternatives, or after references to rules having an empty
 * alternative */
static int left_recursive(const parser *p, int r, unsigned char *state, const unsigned char *empty) {
    if (state[r] == 1) return 1;
    if (state[r] == 2) return 0;
    state[r] = 1;
    const rulebuf *rb = &p->rules[r];
    for (int a = 0; a < rb->n; a++)
        for (int i = 0; i < rb->alts[a].n; i++) {
            gelem e = rb->alts[a].e[i];
            if (e.type != G_REF) break;
            if (left_recursive(p, e.val, state, empty)) return 1;
            if (!empty[e.val]) break;
        }
    state[r] = 2;
    return 0;
}

static rf_grammar *finish(parser *p, int root) {
    rf_grammar *g = rf_calloc(1, sizeof *g);
    int n_alt = 0, n_el = 0;
    for (int r = 0; r < p->n_rules; r++) {
        n_alt += p->rules[r].n;
        for (int a = 0; a < p->rules[r].n; a++) n_el += p->rules[r].alts[a].n + 1;
    }
    g->el = rf_malloc(((size_t)n_el + 1) * sizeof *g->el);
    g->alt = rf_malloc(((size_t)n_alt + 1) * sizeof *g->alt);
    g->rule_alt0 = rf_malloc(((size_t)p->n_rules + 1) * sizeof *g->rule_alt0);
    for (int r = 0; r < p->n_rules; r++) {
        g->rule_alt0[r] = g->n_alt;
        for (int a = 0; a < p->rules[r].n; a++) {
            const seqbuf *q = &p->rules[r].alts[a];
            g->alt[g->n_alt++] = g->n_el;
            memcpy(g->el + g->n_el, q->e, (size_t)q->n * sizeof *q->e);
            g->n_el += q->n;
            g->el[g->n_el++] = (gelem){G_END, 0};
        }
    }
    g->rule_alt0[p->n_rules] = g->n_alt;
    g->n_rules = p->n_rules;
    g->sets = p->sets, g->n_sets = p->n_sets;
    p->sets = NULL;
    g->root = root;
    return g;
}

static void parser_free(parser *p) {
    for (int r = 0; r < p->n_rules; r++) {
        for (int a = 0; a < p->rules[r].n; a++) free(p->rules[r].alts[a].e);
        free(p->rules[r].alts);
    }
    free(p->rules), free(p->sets), free(p->hash);
}

rf_grammar *rf_grammar_parse(const char *text, size_t len) {
    if (len > RF_GRAMMAR_MAX_TEXT) {
        rf_set_error("grammar: %zu bytes, more than %u", len, RF_GRAMMAR_MAX_TEXT);
        return NULL;
    }
    parser p = {0};
    p.text = p.s = text, p.end = text + len;
    skip_space(&p, 1);
    while (p.s < p.end && !p.failed) {
        if (parse_rule(&p)) break;
        skip_space(&p, 1);
    }
    rf_grammar *g = NULL;
    if (!p.failed) {
        int root = -1;
        for (int r = 0; r < p.n_rules; r++) {
            const rulebuf *rb = &p.rules[r];
            if (rb->name_len == 4 && !memcmp(text + rb->name_off, "root", 4)) root = r;
            if (!rb->defined) {
                fail(&p, text + rb->name_off, "undefined rule '%.*s'", rb->name_len, text + rb->name_off);
                break;
            }
        }
        if (!p.failed && root < 0) fail(&p, NULL, "no 'root' rule");
        unsigned char *state = rf_calloc((size_t)p.n_rules + 1, 1), *empty = rf_calloc((size_t)p.n_rules + 1, 1);
        for (int r = 0; r < p.n_rules && !p.failed; r++)
            for (int a = 0; a < p.rules[r].n; a++) empty[r] |= p.rules[r].alts[a].n == 0;
        for (int r = 0; r < p.n_rules && !p.failed; r++)
            if (left_recursive(&p, r, state, empty)) {
                const rulebuf *rb = &p.rules[r];
                if (rb->name_len)
                    fail(&p, text + rb->name_off, "rule '%.*s' is left recursive", rb->name_len, text + rb->name_off);
                else fail(&p, NULL, "left recursion");
            }
        free(state), free(empty);
        if (!p.failed) g = finish(&p, root);
    }
    parser_free(&p);
    return g;
}

void rf_grammar_free(rf_grammar *g) {
    if (!g) return;
    free(g->el), free(g->alt), free(g->rule_alt0), free(g->sets);
    free(g);
}

int rf_grammar_n_rules(const rf_grammar *g) { return g->n_rules; }
