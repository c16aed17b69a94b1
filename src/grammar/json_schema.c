/* json_schema.c - a JSON schema as GBNF (docs/grammar.md).
 *
 * The grammar's sentences are JSON texts the schema accepts; what the
 * grammar cannot enforce exactly is refused with the keyword's name and
 * where it is (fail closed), never dropped. Where enforcing a keyword
 * exactly would need a larger grammar, the grammar may accept a subset of
 * the valid documents (a sound narrowing, listed in docs/grammar.md):
 * property order (required ones first, in declaration order, then the
 * optional ones in order, then extra keys), extra keys without escapes,
 * numbers of at most 16 integral digits, pattern classes without control
 * characters, quotes or backslashes. Every document the grammar accepts is
 * valid under the schema. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "util/util.h"

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        char *t = realloc(b->s, b->cap);
        if (!t) rf_oom(b->cap);
        b->s = t;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof tmp) n = sizeof tmp - 1;
    sb_put(b, tmp, (size_t)n);
}

enum { MAX_DEPTH = 64, MAX_RULES = 20000, MAX_REFS = 1024 };

typedef struct {
    sbuf rules;
    int n_rules;
    json_t *root;
    char *ref_name[MAX_REFS];
    int ref_rule[MAX_REFS], n_refs;
    int failed, depth;
} conv;

static int refuse(conv *c, const char *path, const char *keyword, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(conv *c, const char *path, const char *keyword, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    rf_set_error("json schema: %s: '%s' %s", *path ? path : "/", keyword, what);
    return -1;
}

/* a new rule id; its body is written later with emit_rule */
static int new_rule(conv *c) {
    if (c->n_rules >= MAX_RULES) {
        refuse(c, "", "schema", "needs more than %d grammar rules", MAX_RULES);
        return -1;
    }
    return c->n_rules++;
}
static void emit_rule(conv *c, int id, const char *body) { sb_fmt(&c->rules, "r%d ::= ", id), sb_str(&c->rules, body), sb_str(&c->rules, "\n"); }
static int rule_of(conv *c, const char *body) {
    int id = new_rule(c);
    if (id >= 0) emit_rule(c, id, body);
    return id;
}

/* the base rules every grammar gets */
#define BASE_RULES \
    "space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n" \
    "null ::= \"null\" space\n" \
    "boolean ::= (\"true\" | \"false\") space\n" \
    "int-digits ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15})\n" \
    "integer ::= int-digits space\n" \
    "number ::= int-digits (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? space\n" \
    "hex ::= [0-9a-fA-F]\n" \
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2}))\n" \
    "string ::= \"\\\"\" char* \"\\\"\" space\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "member ::= string \":\" space value\n" \
    "object ::= \"{\" space (member (\",\" space member)*)? \"}\" space\n" \
    "array ::= \"[\" space (value (\",\" space value)*)? \"]\" space\n"
static const char *BASE = BASE_RULES;

/* text as a GBNF literal (its bytes; quotes, backslashes and controls escaped) */
static void gbnf_literal(sbuf *b, const char *s, size_t n) {
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') sb_fmt(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F) sb_fmt(b, "\\x%02X", ch);
        else sb_put(b, (const char *)&ch, 1);
    }
    sb_str(b, "\"");
}

/* a JSON value as the one text the grammar accepts for it (compact) */
static int literal_rule(conv *c, const json_t *v, const char *path) {
    char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!txt) return refuse(c, path, "const", "cannot be serialised");
    sbuf b = {0};
    gbnf_literal(&b, txt, strlen(txt));
    sb_str(&b, " space");
    free(txt);
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

/* ---- integers in a range ---- */

/* the decimal numbers of n digits from a to b (digit strings, a <= b) */
static void digit_range(sbuf *b, const char *a, const char *z, int n) {
    if (n == 0) return;
    if (a[0] == z[0]) {
        sb_fmt(b, "[%c]", a[0]);
        digit_range(b, a + 1, z + 1, n - 1);
        return;
    }
    int a_min = 1, z_max = 1; /* a's rest all 0, z's rest all 9 */
    for (int i = 1; i < n; i++) a_min &= a[i] == '0', z_max &= z[i] == '9';
    sb_str(b, "(");
    char lo = a[0], hi = z[0];
    int first = 1;
    if (!a_min) {
        char nines[24];
        memset(nines, '9', (size_t)n - 1);
        sb_fmt(b, "[%c]", a[0]);
        digit_range(b, a + 1, nines, n - 1);
        lo++;
        first = 0;
    }
    if (!z_max) hi--;
    if (lo <= hi) {
        sb_fmt(b, "%s[%c-%c]", first ? "" : " | ", lo, hi);
        if (n > 1) sb_fmt(b, " [0-9]{%d}", n - 1);
        first = 0;
    }
    if (!z_max) {
        char zeros[24];
        memset(zeros, '0', (size_t)n - 1);
        sb_fmt(b, "%s[%c]", first ? "" : " | ", z[0]);
        digit_range(b, zeros, z + 1, n - 1);
    }
    sb_str(b, ")");
}

static int n_digits(unsigned long long v) {
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

/* non-negative integers in [lo, hi] (hi_inf: no upper bound), no leading zeros */
static void uint_range(sbuf *b, unsigned long long lo, unsigned long long hi, int hi_inf) {
    int first = 1, nl = n_digits(lo), nh = hi_inf ? 19 : n_digits(hi);
    sb_str(b, "(");
    for (int n = nl; n <= nh; n++) {
        unsigned long long p = 1;
        for (int i = 1; i < n; i++) p *= 10;
        unsigned long long from = n == nl ? lo : p, to = (n == nh && !hi_inf) ? hi : p * 10 - 1;
        if (n == 19 && hi_inf) to = 9999999999999999999ull;
        char a[24], z[24];
        snprintf(a, sizeof a, "%0*llu", n, from), snprintf(z, sizeof z, "%0*llu", n, to);
        sb_str(b, first ? "" : " | ");
        digit_range(b, a, z, n);
        first = 0;
    }
    if (hi_inf) sb_str(b, " | [1-9] [0-9]{19,}");
    sb_str(b, ")");
}

/* an integer bound: 1 with *out (rounded inwards, exclusive made
 * inclusive), 0 when absent, -1 refused */
static int get_bound(conv *c, json_t *s, const char *key, int excl, int lower, long long *out, const char *path) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (json_is_boolean(v)) return refuse(c, path, key, "as a boolean (draft 4) is not supported");
    double d = json_number_value(v);
    if (!json_is_number(v) || d > 9e18 || d < -9e18) return refuse(c, path, key, "must be a number within +-9e18");
    long long x = (long long)(lower ? ceil(d) : floor(d));
    if (excl && (double)x == d) x += lower ? 1 : -1;
    *out = x;
    return 1;
}

static int integer_rule(conv *c, json_t *s, const char *path) {
    long long lo = 0, hi = 0, v;
    int has_lo = 0, has_hi = 0, r;
    if ((r = get_bound(c, s, "minimum", 0, 1, &v, path)) < 0) return -1;
    if (r) lo = v, has_lo = 1;
    if ((r = get_bound(c, s, "exclusiveMinimum", 1, 1, &v, path)) < 0) return -1;
    if (r && (!has_lo || v > lo)) lo = v, has_lo = 1;
    if ((r = get_bound(c, s, "maximum", 0, 0, &v, path)) < 0) return -1;
    if (r) hi = v, has_hi = 1;
    if ((r = get_bound(c, s, "exclusiveMaximum", 1, 0, &v, path)) < 0) return -1;
    if (r && (!has_hi || v < hi)) hi = v, has_hi = 1;
    if (!has_lo && !has_hi) return rule_of(c, "integer");
    if (has_lo && has_hi && lo > hi) return refuse(c, path, "minimum", "above maximum: no integer fits");
    sbuf b = {0};
    sb_str(&b, "(");
    int alt = 0;
    /* negatives: "-" then |x| in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        unsigned long long a = has_hi && hi < 0 ? (unsigned long long)(-hi) : 1;
        sb_str(&b, "\"-\" ");
        uint_range(&b, a, has_lo ? (unsigned long long)(-lo) : 0, !has_lo);
        alt = 1;
    }
    if (!has_hi || hi >= 0) {
        sb_str(&b, alt ? " | " : "");
        uint_range(&b, has_lo && lo > 0 ? (unsigned long long)lo : 0, has_hi ? (unsigned long long)hi : 0, !has_hi);
    }
    sb_str(&b, ") space");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

/* ---- regular expressions (pattern) ---- */

typedef struct {
    const char *s, *end, *pat;
    conv *c;
    const char *path;
} rx;

static int rx_fail(rx *r, const char *what) {
    return refuse(r->c, r->path, "pattern", "uses %s at offset %d (docs/grammar.md lists the regex subset)", what,
                  (int)(r->s - r->pat));
}

/* a class item's code point into the GBNF class text; JSON-escaped
 * characters (controls, quote, backslash) are left out: a sound narrowing */
static void class_cp(sbuf *b, unsigned cp) {
    if (cp < 0x20 || cp == '"' || cp == '\\') return;
    if (cp == ']' || cp == '[' || cp == '-' || cp == '^') sb_fmt(b, "\\%c", cp);
    else if (cp < 0x80) sb_fmt(b, "%c", cp);
    else sb_fmt(b, "\\U%08X", cp);
}

static int rx_utf8(rx *r, unsigned *cp) {
    const unsigned char *u = (const unsigned char *)r->s;
    int n = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : 4;
    if (r->s + n > r->end) return rx_fail(r, "invalid UTF-8");
    unsigned v = n == 1 ? u[0] : u[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++) v = v << 6 | (u[i] & 0x3F);
    r->s += n;
    *cp = v;
    return 0;
}

/* \d \w \s as class text (no controls: \s is a space here) */
static const char *rx_shorthand(char e) {
    return e == 'd' ? "0-9" : e == 'w' ? "a-zA-Z0-9_" : e == 's' ? " " : NULL;
}

static int rx_class(rx *r, sbuf *b) {
    r->s++; /* [ */
    int neg = r->s < r->end && *r->s == '^';
    if (neg) r->s++;
    sbuf in = {0};
    int first = 1, n_items = 0;
    while (r->s < r->end && (*r->s != ']' || first)) {
        first = 0;
        unsigned lo;
        if (*r->s == '\\') {
            if (++r->s >= r->end) break;
            char e = *r->s++;
            const char *sh = rx_shorthand(e);
            if (sh) {
                sb_str(&in, sh), n_items++;
                continue;
            }
            if (e == 'D' || e == 'W' || e == 'S') return free(in.s), rx_fail(r, "a negated shorthand inside a class");
            if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v') continue; /* controls: left out */
            lo = (unsigned char)e;
        } else if (rx_utf8(r, &lo)) return free(in.s), -1;
        unsigned hi = lo;
        if (r->s + 1 < r->end && *r->s == '-' && r->s[1] != ']') {
            r->s++;
            if (*r->s == '\\') {
                if (++r->s >= r->end) break;
                hi = (unsigned char)*r->s++;
            } else if (rx_utf8(r, &hi)) return free(in.s), -1;
            if (hi < lo) return free(in.s), rx_fail(r, "a reversed range");
        }
        if (hi > lo && (lo < 0x20 || hi >= '"') && lo <= '\\') { /* a range over escaped characters: split it */
            for (unsigned x = lo; x <= hi && x <= 0x7F; x++) class_cp(&in, x), n_items++;
            if (hi > 0x7F) class_cp(&in, 0x80), sb_str(&in, "-"), class_cp(&in, hi), n_items++;
        } else {
            class_cp(&in, lo);
            if (hi > lo) sb_str(&in, "-"), class_cp(&in, hi);
            n_items++;
        }
    }
    if (r->s >= r->end) return free(in.s), rx_fail(r, "an unterminated class");
    r->s++; /* ] */
    if (neg) sb_fmt(b, "[^\"\\\\\\x00-\\x1F%s]", in.s ? in.s : "");
    else if (!in.n) return free(in.s), rx_fail(r, "a class of escaped characters only");
    else sb_fmt(b, "["), sb_str(b, in.s), sb_str(b, "]");
    (void)n_items;
    free(in.s);
    return 0;
}

static int rx_alt(rx *r, sbuf *b);

/* one atom and its quantifier */
static int rx_atom(rx *r, sbuf *b) {
    char ch = *r->s;
    sbuf a = {0};
    if (ch == '(') {
        r->s++;
        if (r->s < r->end && *r->s == '?') {
            if (r->s + 1 < r->end && r->s[1] == ':') r->s += 2;
            else return rx_fail(r, "a group modifier (?...)");
        }
        sb_str(&a, "(");
        if (rx_alt(r, &a)) return free(a.s), -1;
        if (r->s >= r->end || *r->s != ')') return free(a.s), rx_fail(r, "an unclosed group");
        r->s++;
        sb_str(&a, ")");
    } else if (ch == '[') {
        if (rx_class(r, &a)) return free(a.s), -1;
    } else if (ch == '.') {
        r->s++;
        sb_str(&a, "[^\"\\\\\\x00-\\x1F]");
    } else if (ch == '\\') {
        if (++r->s >= r->end) return rx_fail(r, "a trailing backslash");
        char e = *r->s++;
        const char *sh = rx_shorthand(e);
        if (sh) sb_fmt(&a, "[%s]", sh);
        else if (e == 'D') sb_str(&a, "[^0-9\"\\\\\\x00-\\x1F]");
        else if (e == 'W') sb_str(&a, "[^a-zA-Z0-9_\"\\\\\\x00-\\x1F]");
        else if (e == 'S') sb_str(&a, "[^ \"\\\\\\x00-\\x1F]");
        else if (strchr(".^$|?*+()[]{}/-", e)) {
            char lit[2] = {e, 0};
            gbnf_literal(&a, lit, 1);
        } else if (e == '\\') sb_str(&a, "\"\\\\\\\\\"");
        else if (e == 'n') sb_str(&a, "\"\\\\n\"");
        else if (e == 't') sb_str(&a, "\"\\\\t\"");
        else return rx_fail(r, "an escape it does not know");
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return rx_fail(r, "a quantifier with nothing before it");
    } else if (ch == '^' || ch == '$') {
        return rx_fail(r, "an anchor not at the pattern's start or end");
    } else {
        unsigned cp;
        const char *at = r->s;
        if (rx_utf8(r, &cp)) return -1;
        if (cp == '"') sb_str(&a, "\"\\\\\\\"\"");
        else if (cp < 0x20) return rx_fail(r, "a control character");
        else gbnf_literal(&a, at, (size_t)(r->s - at));
    }
    /* quantifier */
    if (r->s < r->end && (*r->s == '*' || *r->s == '+' || *r->s == '?')) {
        sb_fmt(&a, "%c", *r->s++);
    } else if (r->s < r->end && *r->s == '{') {
        const char *q = r->s;
        int m = 0, n = -1, k = 0;
        r->s++;
        while (r->s < r->end && *r->s >= '0' && *r->s <= '9' && m < 100000) m = m * 10 + (*r->s++ - '0'), k++;
        if (!k) return free(a.s), rx_fail(r, "a malformed {m,n}");
        n = m;
        if (r->s < r->end && *r->s == ',') {
            r->s++;
            n = -1;
            if (r->s < r->end && *r->s >= '0' && *r->s <= '9')
                for (n = 0; r->s < r->end && *r->s >= '0' && *r->s <= '9' && n < 100000;) n = n * 10 + (*r->s++ - '0');
        }
        if (r->s >= r->end || *r->s != '}') return free(a.s), rx_fail(r, "a malformed {m,n}");
        r->s++;
        if (m > 1000 || n > 1000 || (n >= 0 && n < m)) return free(a.s), rx_fail(r, "a repetition out of 0..1000");
        (void)q;
        if (n < 0) sb_fmt(&a, "{%d,}", m);
        else sb_fmt(&a, "{%d,%d}", m, n);
    }
    if (r->s < r->end && (*r->s == '?' || *r->s == '+')) return free(a.s), rx_fail(r, "a lazy or possessive quantifier");
    sb_str(b, a.s), sb_str(b, " ");
    free(a.s);
    return 0;
}

static int rx_alt(rx *r, sbuf *b) {
    for (;;) {
        int empty = 1;
        while (r->s < r->end && *r->s != '|' && *r->s != ')') {
            if (*r->s == '$' && r->s + 1 == r->end) break;
            if (rx_atom(r, b)) return -1;
            empty = 0;
        }
        if (empty) sb_str(b, "\"\"");
        if (r->s < r->end && *r->s == '|') {
            r->s++;
            sb_str(b, " | ");
            continue;
        }
        return 0;
    }
}

static int pattern_rule(conv *c, const char *pat, const char *path) {
    rx r = {pat, pat + strlen(pat), pat, c, path};
    int anchored_start = r.s < r.end && *r.s == '^';
    if (anchored_start) r.s++;
    int anchored_end = r.end > r.s && r.end[-1] == '$' && (r.end - 2 < r.s || r.end[-2] != '\\');
    sbuf b = {0};
    sb_str(&b, "\"\\\"\" ");
    if (!anchored_start) sb_str(&b, "char* ");
    sb_str(&b, "(");
    if (rx_alt(&r, &b)) return free(b.s), -1;
    if (r.s < r.end && *r.s == ')') return free(b.s), rx_fail(&r, "an unopened ')'");
    if (anchored_end) r.s++;
    if (r.s != r.end) return free(b.s), rx_fail(&r, "an anchor not at the pattern's end");
    sb_str(&b, ") ");
    if (!anchored_end) sb_str(&b, "char* ");
    sb_str(&b, "\"\\\"\" space");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

/* ---- schemas ---- */

static int visit(conv *c, json_t *s, const char *path);

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};
static const char *const HANDLED[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                      "properties", "required", "additionalProperties", "items", "prefixItems",
                                      "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum",
                                      "maximum", "exclusiveMinimum", "exclusiveMaximum", "format", NULL};

static int in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

/* keywords other than annotations and those in allowed */
static const char *other_keyword(json_t *s, const char *const *allowed) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!in_list(k, ANNOTATIONS) && !in_list(k, allowed)) return k;
    }
    return NULL;
}

static void path_join(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

static int ref_rule(conv *c, const char *ref, const char *path) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_name[i], ref)) return c->ref_rule[i];
    const char *name = NULL;
    json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) defs = json_object_get(c->root, "$defs"), name = ref + 8;
    else if (!strncmp(ref, "#/definitions/", 14)) defs = json_object_get(c->root, "definitions"), name = ref + 14;
    else if (!strcmp(ref, "#")) name = "";
    else return refuse(c, path, "$ref", "'%s': only #, #/$defs/NAME and #/definitions/NAME are supported", ref);
    if (strchr(name, '/') || strchr(name, '~') || strchr(name, '%'))
        return refuse(c, path, "$ref", "'%s': nested or escaped definition names are not supported", ref);
    json_t *target = !strcmp(ref, "#") ? c->root : json_object_get(defs, name);
    if (!target) return refuse(c, path, "$ref", "'%s' does not exist", ref);
    if (c->n_refs >= MAX_REFS) return refuse(c, path, "$ref", "more than %d definitions", MAX_REFS);
    int id = new_rule(c);
    if (id < 0) return -1;
    c->ref_name[c->n_refs] = rf_strdup(ref), c->ref_rule[c->n_refs++] = id;
    char sub[512];
    snprintf(sub, sizeof sub, "%s", ref + 1);
    int body = visit(c, target, sub);
    if (body < 0) return -1;
    char txt[32];
    snprintf(txt, sizeof txt, "r%d", body);
    emit_rule(c, id, txt);
    return id;
}

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

static int type_bit(const char *t) {
    static const char *names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static int value_types(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: return T_NUM;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

/* the JSON types a schema can accept (for oneOf's disjointness) */
static int schema_types(conv *c, json_t *s, int depth) {
    if (json_is_true(s) || !json_is_object(s) || depth > 16) return T_ALL;
    json_t *v;
    if ((v = json_object_get(s, "const"))) return value_types(v);
    if ((v = json_object_get(s, "enum")) && json_is_array(v)) {
        int t = 0;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) t |= value_types(e);
        return t;
    }
    if ((v = json_object_get(s, "$ref")) && json_is_string(v)) {
        const char *ref = json_string_value(v);
        json_t *defs = !strncmp(ref, "#/$defs/", 8) ? json_object_get(c->root, "$defs")
                                                   : json_object_get(c->root, "definitions");
        const char *name = strrchr(ref, '/');
        json_t *t = name && defs ? json_object_get(defs, name + 1) : NULL;
        return t ? schema_types(c, t, depth + 1) : T_ALL;
    }
    int t = 0;
    if ((v = json_object_get(s, "type"))) {
        if (json_is_string(v)) t = type_bit(json_string_value(v));
        size_t i;
        json_t *e;
        if (json_is_array(v)) json_array_foreach(v, i, e) t |= json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (t & T_NUM) t |= T_INT;
        return t;
    }
    return T_ALL;
}

static int get_count(conv *c, json_t *s, const char *key, long *out, const char *path) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return refuse(c, path, key, "must be a non-negative integer");
    if (json_integer_value(v) > 1000) return refuse(c, path, key, "above 1000 is not supported");
    *out = (long)json_integer_value(v);
    return 1;
}

static int string_rule(conv *c, json_t *s, const char *path) {
    if (json_object_get(s, "format")) return refuse(c, path, "format", "is not enforced (use pattern)");
    long lo = 0, hi = -1;
    int has_lo = get_count(c, s, "minLength", &lo, path), has_hi = get_count(c, s, "maxLength", &hi, path);
    if (has_lo < 0 || has_hi < 0) return -1;
    json_t *pat = json_object_get(s, "pattern");
    if (pat) {
        if (!json_is_string(pat)) return refuse(c, path, "pattern", "must be a string");
        if (has_lo || has_hi) return refuse(c, path, "pattern", "together with minLength / maxLength is not supported");
        return pattern_rule(c, json_string_value(pat), path);
    }
    if (!has_lo && !has_hi) return rule_of(c, "string");
    if (has_hi && hi < lo) return refuse(c, path, "maxLength", "below minLength");
    char body[96];
    if (has_hi) snprintf(body, sizeof body, "\"\\\"\" char{%ld,%ld} \"\\\"\" space", lo, hi);
    else snprintf(body, sizeof body, "\"\\\"\" char{%ld,} \"\\\"\" space", lo);
    return rule_of(c, body);
}

/* items i.. of an array given the ones before exist: prefix schemas
 * pre[0..n_pre), then rest (-1: none allowed), counts min..max (-1: any) */
static void items_tail(sbuf *b, const int *pre, int n_pre, int rest, long i, long min, long max) {
    if (max >= 0 && i >= max) return;
    if (i >= n_pre) {
        if (rest < 0) return;
        long need = min > i ? min - i : 0;
        if (max < 0) sb_fmt(b, " (\",\" space r%d){%ld,}", rest, need);
        else sb_fmt(b, " (\",\" space r%d){%ld,%ld}", rest, need, max - i);
        return;
    }
    if (i < min) {
        sb_fmt(b, " \",\" space r%d", pre[i]);
        items_tail(b, pre, n_pre, rest, i + 1, min, max);
    } else {
        sb_fmt(b, " (\",\" space r%d", pre[i]);
        items_tail(b, pre, n_pre, rest, i + 1, min, max);
        sb_str(b, ")?");
    }
}

static int array_rule(conv *c, json_t *s, const char *path) {
    long min = 0, max = -1;
    if (get_count(c, s, "minItems", &min, path) < 0 || get_count(c, s, "maxItems", &max, path) < 0) return -1;
    if (max >= 0 && max < min) return refuse(c, path, "maxItems", "below minItems");
    json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    char sub[512];
    int pre[64], n_pre = 0, rest;
    if (prefix) {
        if (!json_is_array(prefix)) return refuse(c, path, "prefixItems", "must be an array");
        if (json_array_size(prefix) > 64) return refuse(c, path, "prefixItems", "of more than 64 schemas");
        size_t i;
        json_t *e;
        json_array_foreach(prefix, i, e) {
            snprintf(sub, sizeof sub, "%s/prefixItems/%zu", path, i);
            if ((pre[n_pre++] = visit(c, e, sub)) < 0) return -1;
        }
    } else if (json_is_array(items)) {
        return refuse(c, path, "items", "as an array (draft 4 tuples): use prefixItems");
    }
    if (json_is_false(items)) rest = -1;
    else if (items) {
        path_join(sub, sizeof sub, path, "items", NULL);
        if ((rest = visit(c, items, sub)) < 0) return -1;
    } else rest = rule_of(c, "value");
    if (rest == -1 && !json_is_false(items)) return -1;
    if (rest < 0 && min > n_pre) return refuse(c, path, "minItems", "above the prefixItems count with items false");
    sbuf b = {0};
    sb_str(&b, "\"[\" space ");
    long cap = rest < 0 ? (max >= 0 && max < n_pre ? max : n_pre) : max;
    if (cap != 0) {
        int first = n_pre > 0 ? pre[0] : rest;
        sb_fmt(&b, "%sr%d", min > 0 ? "" : "(", first);
        items_tail(&b, pre, n_pre, rest, 1, min, cap);
        if (min == 0) sb_str(&b, ")?");
    }
    sb_str(&b, " \"]\" space");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

/* a property name as the JSON string the grammar writes for it */
static void key_literal(sbuf *b, const char *name) {
    json_t *j = json_string(name);
    char *txt = json_dumps(j, JSON_ENCODE_ANY);
    gbnf_literal(b, txt, strlen(txt));
    free(txt);
    json_decref(j);
}

/* a JSON string that is none of the names: a trie of the names' bytes,
 * left at the first byte no name continues with, or closed where no name
 * ends (names of printable ASCII without quotes or backslashes only) */
static int other_key_rule(conv *c, const char **names, int n, int depth, const char *path) {
    sbuf b = {0};
    int end_here = 0, first = 1;
    char seen[128] = {0};
    for (int i = 0; i < n; i++) {
        if ((int)strlen(names[i]) == depth) end_here = 1;
        else seen[(unsigned char)names[i][depth]] = 1;
    }
    if (!end_here) sb_str(&b, "\"\\\"\""), first = 0;
    for (int ch = 0x20; ch < 0x7F; ch++) {
        if (!seen[ch]) continue;
        const char *sub[256];
        int m = 0;
        for (int i = 0; i < n && m < 256; i++)
            if ((int)strlen(names[i]) > depth && names[i][depth] == ch) sub[m++] = names[i];
        int r = other_key_rule(c, sub, m, depth + 1, path);
        if (r < 0) return free(b.s), -1;
        char lit[2] = {(char)ch, 0};
        sb_str(&b, first ? "" : " | ");
        gbnf_literal(&b, lit, 1);
        sb_fmt(&b, " r%d", r);
        first = 0;
    }
    /* any other character, then anything */
    sb_str(&b, first ? "" : " | ");
    sb_str(&b, "[^\"\\\\\\x00-\\x1F");
    for (int ch = 0x20; ch < 0x7F; ch++)
        if (seen[ch]) {
            if (ch == ']' || ch == '[' || ch == '-' || ch == '^') sb_fmt(&b, "\\%c", ch);
            else sb_fmt(&b, "%c", ch);
        }
    sb_str(&b, "] [^\"\\\\\\x00-\\x1F]* \"\\\"\"");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

static int object_rule(conv *c, json_t *s, const char *path) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return refuse(c, path, "properties", "must be an object");
    if (req && !json_is_array(req)) return refuse(c, path, "required", "must be an array");
    size_t n = props ? json_object_size(props) : 0;
    if (n > 256) return refuse(c, path, "properties", "more than 256 are not supported");
    const char *names[256];
    int rule[256], is_req[256], n_req = 0;
    size_t i = 0;
    const char *k;
    json_t *v;
    char sub[512];
    if (props) json_object_foreach(props, k, v) {
            names[i] = k;
            path_join(sub, sizeof sub, path, "properties", k);
            if ((rule[i] = visit(c, v, sub)) < 0) return -1;
            is_req[i] = 0;
            i++;
        }
    size_t j;
    json_t *e;
    if (req) json_array_foreach(req, j, e) {
            if (!json_is_string(e)) return refuse(c, path, "required", "must list strings");
            size_t f = 0;
            while (f < n && strcmp(names[f], json_string_value(e))) f++;
            if (f == n) return refuse(c, path, "required", "names '%s', which is not in properties", json_string_value(e));
            if (!is_req[f]) is_req[f] = 1, n_req++;
        }
    /* extra keys: additionalProperties true / absent (any value), a schema, or false */
    int extra = -1;
    if (!json_is_false(addl)) {
        int val;
        if (addl && !json_is_true(addl)) {
            path_join(sub, sizeof sub, path, "additionalProperties", NULL);
            if ((val = visit(c, addl, sub)) < 0) return -1;
        } else val = rule_of(c, "value");
        if (val < 0) return -1;
        for (size_t f = 0; f < n; f++)
            for (const char *q = names[f]; *q; q++)
                if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7F || *q == '"' || *q == '\\')
                    return refuse(c, path, "additionalProperties",
                                  "other than false, beside property names that are not printable ASCII");
        int key = other_key_rule(c, names, (int)n, 0, path);
        if (key < 0) return -1;
        char body[96];
        snprintf(body, sizeof body, "\"\\\"\" r%d space \":\" space r%d", key, val);
        extra = rule_of(c, body);
        if (extra < 0) return -1;
    }
    /* members: the required ones in order, then the optional ones in
     * order, then extra keys. kv[f]: member f's rule */
    int kv[256], order[256], m = 0;
    for (size_t f = 0; f < n; f++) {
        sbuf b = {0};
        key_literal(&b, names[f]);
        sb_fmt(&b, " space \":\" space r%d", rule[f]);
        kv[f] = rule_of(c, b.s);
        free(b.s);
        if (kv[f] < 0) return -1;
    }
    for (size_t f = 0; f < n; f++)
        if (is_req[f]) order[m++] = (int)f;
    for (size_t f = 0; f < n; f++)
        if (!is_req[f]) order[m++] = (int)f;
    sbuf b = {0};
    sb_str(&b, "\"{\" space ");
    if (n_req) {
        for (int q = 0; q < n_req; q++) sb_fmt(&b, "%sr%d", q ? " \",\" space " : "", kv[order[q]]);
        for (int q = n_req; q < m; q++) sb_fmt(&b, " (\",\" space r%d)?", kv[order[q]]);
        if (extra >= 0) sb_fmt(&b, " (\",\" space r%d)*", extra);
    } else {
        /* nothing required: the first member present is any of them; tails
         * T_q = the members after q, each optional, with commas */
        int tail[257];
        char body[64];
        tail[m] = extra >= 0 ? (snprintf(body, sizeof body, "(\",\" space r%d)*", extra), rule_of(c, body))
                             : rule_of(c, "\"\"");
        for (int q = m - 1; q >= 0; q--) {
            snprintf(body, sizeof body, "(\",\" space r%d)? r%d", kv[order[q]], tail[q + 1]);
            if ((tail[q] = rule_of(c, body)) < 0) return free(b.s), -1;
        }
        sb_str(&b, "(");
        for (int q = 0; q < m; q++) sb_fmt(&b, "%sr%d r%d", q ? " | " : "", kv[order[q]], tail[q + 1]);
        if (extra >= 0) sb_fmt(&b, "%sr%d r%d", m ? " | " : "", extra, tail[m]);
        sb_str(&b, ")?");
    }
    sb_str(&b, " \"}\" space");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

static int enum_rule(conv *c, json_t *s, json_t *list, int types, const char *path) {
    sbuf b = {0};
    size_t i;
    json_t *e;
    int n = 0;
    json_array_foreach(list, i, e) {
        if (!(value_types(e) & types)) continue;
        int r = literal_rule(c, e, path);
        if (r < 0) return free(b.s), -1;
        sb_fmt(&b, "%sr%d", n++ ? " | " : "", r);
    }
    if (!n) return free(b.s), refuse(c, path, "enum", "has no value of the schema's type");
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

static int alternatives_rule(conv *c, json_t *s, const char *key, const char *path) {
    json_t *list = json_object_get(s, key);
    if (!json_is_array(list) || !json_array_size(list)) return refuse(c, path, key, "must be a non-empty array");
    static const char *const only[] = {"anyOf", "oneOf", "allOf", NULL};
    const char *other = other_keyword(s, only);
    if (other) return refuse(c, path, other, "beside %s is not supported", key);
    if (!strcmp(key, "allOf")) {
        if (json_array_size(list) != 1) return refuse(c, path, "allOf", "of more than one schema is not supported");
        char sub[512];
        snprintf(sub, sizeof sub, "%s/allOf/0", path);
        return visit(c, json_array_get(list, 0), sub);
    }
    int seen = 0;
    sbuf b = {0};
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (!strcmp(key, "oneOf")) {
            int t = schema_types(c, e, 0);
            if (t & seen) return free(b.s), refuse(c, path, "oneOf", "branches that may overlap (only branches of distinct JSON types are supported)");
            seen |= t;
        }
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, key, i);
        int r = visit(c, e, sub);
        if (r < 0) return free(b.s), -1;
        sb_fmt(&b, "%sr%d", i ? " | " : "", r);
    }
    int id = rule_of(c, b.s);
    free(b.s);
    return id;
}

static int visit_object(conv *c, json_t *s, const char *path) {
    if (json_is_true(s)) return rule_of(c, "value");
    if (json_is_false(s)) return refuse(c, path, "false", "schema accepts nothing");
    if (!json_is_object(s)) return refuse(c, path, "schema", "must be an object or a boolean");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!strcmp(k, "nullable"))
            return refuse(c, path, k, "is OpenAPI's, not JSON Schema's: write \"type\": [T, \"null\"]");
        if (!in_list(k, ANNOTATIONS) && !in_list(k, HANDLED)) return refuse(c, path, k, "is not supported");
    }
    if (json_object_get(s, "anyOf")) return alternatives_rule(c, s, "anyOf", path);
    if (json_object_get(s, "oneOf")) return alternatives_rule(c, s, "oneOf", path);
    if (json_object_get(s, "allOf")) return alternatives_rule(c, s, "allOf", path);
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        static const char *const only[] = {"$ref", NULL};
        const char *other = other_keyword(s, only);
        if (other) return refuse(c, path, other, "beside $ref is not supported");
        if (!json_is_string(ref)) return refuse(c, path, "$ref", "must be a string");
        return ref_rule(c, json_string_value(ref), path);
    }
    /* the types: "type", else those the keywords present imply, else all */
    int types = 0;
    json_t *t = json_object_get(s, "type");
    if (t) {
        if (json_is_string(t)) types = type_bit(json_string_value(t));
        else if (json_is_array(t)) {
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) {
                int bit = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
                if (!bit) return refuse(c, path, "type", "lists an unknown type");
                types |= bit;
            }
        }
        if (!types) return refuse(c, path, "type", "is not a JSON type (or a list of them)");
    } else types = T_ALL;
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst || en) {
        static const char *const only[] = {"const", "enum", "type", NULL};
        const char *other = other_keyword(s, only);
        if (other) return refuse(c, path, other, "beside const / enum is not supported");
        if (cst && en) return refuse(c, path, "enum", "beside const is not supported");
        if (cst) {
            if (!(value_types(cst) & types)) return refuse(c, path, "const", "is not of the schema's type");
            return literal_rule(c, cst, path);
        }
        if (!json_is_array(en)) return refuse(c, path, "enum", "must be an array");
        return enum_rule(c, s, en, types, path);
    }
    if ((types & T_NUM) && (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                            json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum")))
        return refuse(c, path, json_object_get(s, "minimum") ? "minimum" : json_object_get(s, "maximum") ? "maximum"
                                   : json_object_get(s, "exclusiveMinimum") ? "exclusiveMinimum" : "exclusiveMaximum",
                      "on a number (not an integer) is not enforced");
    sbuf b = {0};
    int n = 0, rc = 0;
    static const int order[] = {T_OBJ, T_ARR, T_STR, T_NUM, T_INT, T_BOOL, T_NULL};
    for (int i = 0; i < 7 && !rc; i++) {
        int bit = order[i], r;
        if (!(types & bit) || (bit == T_INT && (types & T_NUM))) continue;
        switch (bit) {
        case T_OBJ: r = object_rule(c, s, path); break;
        case T_ARR: r = array_rule(c, s, path); break;
        case T_STR: r = string_rule(c, s, path); break;
        case T_NUM: r = rule_of(c, "number"); break;
        case T_INT: r = integer_rule(c, s, path); break;
        case T_BOOL: r = rule_of(c, "boolean"); break;
        default: r = rule_of(c, "null"); break;
        }
        if (r < 0) rc = -1;
        else sb_fmt(&b, "%sr%d", n++ ? " | " : "", r);
    }
    int id = rc ? -1 : rule_of(c, b.s);
    free(b.s);
    return id;
}

static int visit(conv *c, json_t *s, const char *path) {
    if (c->failed) return -1;
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return refuse(c, path, "schema", "nested deeper than %d", MAX_DEPTH);
    }
    int r = visit_object(c, s, path);
    c->depth--;
    return r;
}

char *rf_json_schema_to_gbnf(const json_t *schema) {
    conv c = {0};
    c.root = (json_t *)schema;
    int r = visit(&c, c.root, "");
    char *out = NULL;
    if (r >= 0) {
        sbuf g = {0};
        sb_fmt(&g, "root ::= r%d\n", r);
        sb_str(&g, BASE);
        sb_str(&g, c.rules.s);
        out = g.s;
    }
    free(c.rules.s);
    for (int i = 0; i < c.n_refs; i++) free(c.ref_name[i]);
    return out;
}

char *rf_json_schema_text_to_gbnf(const char *text, size_t len) {
    json_error_t err;
    json_t *s = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (!s) {
        rf_set_error("json schema: not JSON: %s (line %d, column %d)", err.text, err.line, err.column);
        return NULL;
    }
    char *g = rf_json_schema_to_gbnf(s);
    json_decref(s);
    return g;
}

const char *rf_json_object_gbnf(void) { return "root ::= object\n" BASE_RULES; }
