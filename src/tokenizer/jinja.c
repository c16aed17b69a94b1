/* jinja.c - see jinja.h. Three parts: a lexer that follows jinja2's (its
 * whitespace rules with trim_blocks and lstrip_blocks are what make the
 * rendering byte-identical), a recursive-descent parser into a tree, and a
 * tree-walking evaluator over Python-like values.
 *
 * Memory: everything a render allocates (tokens, tree, values, output
 * buffers) comes from one arena that is freed as a whole at the end, so an
 * error anywhere unwinds with longjmp and leaks nothing; the arena's size
 * is one of the limits. */
#include "tokenizer/jinja.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

/* ================================================================ arena, errors */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
} chunk;

typedef struct jnode jnode;
typedef struct J {
    jmp_buf jb;
    const struct jnode *at; /* the node being evaluated: where a charge's error points */
    chunk *chunks;
    size_t mem, max_mem;
    uint64_t work, max_work; /* in ticks: WORK_STEP per step, see charge() */
    long max_steps;
    size_t out_total, max_out;
    int depth, max_depth; /* macro calls */
    int nest;             /* evaluation recursion (expressions, statements, macro bodies) */
    int ctl; /* 1 = break, 2 = continue pending */
    struct marks {
        size_t *sp; /* [2 * n] sorted [start, end) pairs */
        size_t n;
    } *marks;   /* a string's data spans by its mark (0 and 1 unused) */
    uint32_t n_marks, cap_marks;
    const char *src;
    char err[900];
} J;

static void jfail(J *j, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5), noreturn));
static void jfail(J *j, int line, int col, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one line: a message may quote the template (raise_exception's text,
     * a name) with its newlines and tabs */
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    if (line > 0) snprintf(j->err, sizeof j->err, "chat template: line %d, column %d: %s", line, col, msg);
    else snprintf(j->err, sizeof j->err, "chat template: %s", msg);
    longjmp(j->jb, 1);
}

static void *jalloc(J *j, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (j->chunks && j->chunks->cap - j->chunks->used >= n) {
        void *p = (char *)j->chunks->data + j->chunks->used;
        j->chunks->used += n;
        return p;
    }
    size_t cap = n > (1u << 16) ? n : (1u << 16);
    if (j->mem + cap > j->max_mem) jfail(j, 0, 0, "the template needs more than %zu MiB of memory", j->max_mem >> 20);
    chunk *c = rf_try_malloc(sizeof *c + cap);
    if (!c) jfail(j, 0, 0, "out of memory");
    j->mem += cap;
    c->cap = cap;
    c->used = n;
    if (j->chunks && n == cap) { /* a big block: keep the current chunk's room in front */
        c->next = j->chunks->next;
        j->chunks->next = c;
    } else {
        c->next = j->chunks;
        j->chunks = c;
    }
    return c->data;
}

static void *jzalloc(J *j, size_t n) { return memset(jalloc(j, n), 0, n); }

static void *jgrow(J *j, void *p, size_t used, size_t n) {
    void *q = jalloc(j, n);
    if (used) memcpy(q, p, used);
    return q;
}

static char *jstrndup(J *j, const char *s, size_t n) {
    char *p = jalloc(j, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ================================================================ lexer */

enum { K_EOF, K_DATA, K_VAR_BEGIN, K_VAR_END, K_BLOCK_BEGIN, K_BLOCK_END, K_NAME, K_STRING, K_INT, K_FLOAT, K_OP };

typedef struct {
    int k;
    const char *s; /* DATA / NAME / STRING / OP text (STRING: decoded) */
    size_t n;
    int line, col;
    int64_t i;
    double f;
} tok;

typedef struct {
    J *j;
    const char *s; /* the source, newlines normalised */
    size_t n, pos;
    tok *t;
    size_t nt, cap;
    size_t at_pos; /* line / column of at_pos, where the last lookup ended: tokens */
    int at_line, at_col; /* come in source order, so finding each costs the distance */
} lexer;

static void lpos(lexer *L, size_t pos, int *line, int *col) {
    if (pos > L->n) pos = L->n;
    if (pos < L->at_pos) L->at_pos = 0, L->at_line = 1, L->at_col = 1;
    int ln = L->at_line ? L->at_line : 1, c = L->at_col ? L->at_col : 1;
    for (size_t i = L->at_pos; i < pos; i++) {
        if (L->s[i] == '\n') ln++, c = 1;
        else if (((unsigned char)L->s[i] & 0xC0) != 0x80) c++;
    }
    L->at_pos = pos, L->at_line = ln, L->at_col = c;
    *line = ln, *col = c;
}

static tok *push_tok(lexer *L, int k, const char *s, size_t n, size_t at) {
    if (L->nt == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        L->t = jgrow(L->j, L->t, L->nt * sizeof *L->t, nc * sizeof *L->t);
        L->cap = nc;
    }
    tok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->k = k, t->s = s, t->n = n;
    lpos(L, at, &t->line, &t->col);
    return t;
}

static void lfail(lexer *L, size_t at, const char *fmt, const char *arg) __attribute__((noreturn));
static void lfail(lexer *L, size_t at, const char *fmt, const char *arg) {
    int line, col;
    lpos(L, at, &line, &col);
    jfail(L->j, line, col, fmt, arg);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int at(const lexer *L, size_t p, const char *lit) {
    size_t m = strlen(lit);
    return p + m <= L->n && !memcmp(L->s + p, lit, m);
}

/* After a tag's end delimiter at p (length dl), with the sign before it:
 * '-' eats all whitespace, none eats one newline (trim_blocks; not for
 * variables), '+' nothing. Returns the new position; *line_start says
 * whether what was consumed ends with a newline. */
static size_t after_end(lexer *L, size_t p, char sign, int is_var, int *line_start) {
    size_t q = p;
    if (sign == '-')
        while (q < L->n && is_space(L->s[q])) q++;
    else if (sign != '+' && !is_var && q < L->n && L->s[q] == '\n')
        q++;
    *line_start = q > 0 && L->s[q - 1] == '\n';
    return q;
}

static void lex_string(lexer *L, size_t *pp) {
    size_t p = *pp, start = p;
    char q = L->s[p++];
    /* decode Python's unicode-escape (what jinja2 applies to string literals);
     * the decoded text is never longer than the literal */
    size_t end = p;
    while (end < L->n && L->s[end] != q) end += L->s[end] == '\\' ? 2 : 1;
    char *out = jalloc(L->j, (end < L->n ? end : L->n) - p + 1);
    size_t o = 0;
    for (;;) {
        if (p >= L->n) lfail(L, start, "%s", "unterminated string literal");
        char c = L->s[p];
        if (c == q) {
            p++;
            break;
        }
        if (c != '\\') {
            out[o++] = c, p++;
            continue;
        }
        if (p + 1 >= L->n) lfail(L, start, "%s", "unterminated string literal");
        char e = L->s[p + 1];
        p += 2;
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++, p++) {
                char h = p < L->n ? L->s[p] : 0;
                int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) lfail(L, start, "%s", "bad \\x / \\u escape in a string literal");
                cp = cp * 16 + (uint32_t)v;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) lfail(L, start, "%s", "bad code point in a string literal");
            if (cp < 0x80) out[o++] = (char)cp;
            else if (cp < 0x800) out[o++] = (char)(0xC0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 63));
            else if (cp < 0x10000)
                out[o++] = (char)(0xE0 | cp >> 12), out[o++] = (char)(0x80 | ((cp >> 6) & 63)), out[o++] = (char)(0x80 | (cp & 63));
            else
                out[o++] = (char)(0xF0 | cp >> 18), out[o++] = (char)(0x80 | ((cp >> 12) & 63)),
                out[o++] = (char)(0x80 | ((cp >> 6) & 63)), out[o++] = (char)(0x80 | (cp & 63));
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                int v = e - '0';
                for (int k = 0; k < 2 && p < L->n && L->s[p] >= '0' && L->s[p] <= '7'; k++) v = v * 8 + (L->s[p++] - '0');
                if (v < 0x80) out[o++] = (char)v;
                else out[o++] = (char)(0xC0 | v >> 6), out[o++] = (char)(0x80 | (v & 63));
            } else { /* unknown escapes stay as written */
                out[o++] = '\\';
                p--;
            }
        }
    }
    tok *t = push_tok(L, K_STRING, out, o, start);
    (void)t;
    *pp = p;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

/* The tokens of one {{ }} or {% %} tag from p to its end delimiter. */
static size_t lex_tag(lexer *L, size_t p, int is_var, size_t tag_at, int *line_start) {
    int balance = 0;
    const char *end = is_var ? "}}" : "%}";
    for (;;) {
        while (p < L->n && is_space(L->s[p])) p++;
        if (p >= L->n) lfail(L, tag_at, "unclosed %s tag", is_var ? "'{{'" : "'{%'");
        if (!balance) {
            char sign = 0;
            size_t q = p;
            if ((L->s[q] == '-' || L->s[q] == '+') && at(L, q + 1, end)) sign = L->s[q++];
            if (at(L, q, end) && !(sign == '+' && is_var)) {
                push_tok(L, is_var ? K_VAR_END : K_BLOCK_END, NULL, 0, p);
                return after_end(L, q + 2, sign, is_var, line_start);
            }
        }
        char c = L->s[p];
        size_t st = p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            while (p < L->n && ((L->s[p] >= 'a' && L->s[p] <= 'z') || (L->s[p] >= 'A' && L->s[p] <= 'Z') ||
                                (L->s[p] >= '0' && L->s[p] <= '9') || L->s[p] == '_'))
                p++;
            push_tok(L, K_NAME, L->s + st, p - st, st);
        } else if (c >= '0' && c <= '9') {
            int is_float = 0;
            while (p < L->n && ((L->s[p] >= '0' && L->s[p] <= '9') || L->s[p] == '_')) p++;
            if (p + 1 < L->n && L->s[p] == '.' && L->s[p + 1] >= '0' && L->s[p + 1] <= '9') {
                is_float = 1;
                p++;
                while (p < L->n && ((L->s[p] >= '0' && L->s[p] <= '9') || L->s[p] == '_')) p++;
            }
            if (p < L->n && (L->s[p] == 'e' || L->s[p] == 'E')) {
                size_t q = p + 1;
                if (q < L->n && (L->s[q] == '+' || L->s[q] == '-')) q++;
                if (q < L->n && L->s[q] >= '0' && L->s[q] <= '9') {
                    is_float = 1;
                    p = q;
                    while (p < L->n && L->s[p] >= '0' && L->s[p] <= '9') p++;
                }
            }
            char buf[64];
            size_t k = 0;
            for (size_t i = st; i < p && k < sizeof buf - 1; i++)
                if (L->s[i] != '_') buf[k++] = L->s[i];
            buf[k] = 0;
            tok *t = push_tok(L, is_float ? K_FLOAT : K_INT, L->s + st, p - st, st);
            if (is_float) t->f = strtod(buf, NULL);
            else {
                char *e;
                errno = 0;
                long long v = strtoll(buf, &e, 10);
                if (errno == ERANGE || k >= sizeof buf - 1) lfail(L, st, "%s", "integer literal too large (more than 64 bits)");
                t->i = v;
            }
        } else if (c == '\'' || c == '"') {
            lex_string(L, &p);
        } else {
            size_t k;
            for (k = 0; k < sizeof OPS / sizeof *OPS; k++)
                if (at(L, p, OPS[k])) break;
            if (k == sizeof OPS / sizeof *OPS) {
                char ch[8];
                snprintf(ch, sizeof ch, "%c", c);
                lfail(L, p, "unexpected character '%s'", ch);
            }
            const char *op = OPS[k];
            if (*op == '(' || *op == '[' || *op == '{') balance++;
            else if (*op == ')' || *op == ']' || *op == '}') {
                if (!balance) lfail(L, p, "unexpected '%s'", op);
                balance--;
            }
            p += strlen(op);
            push_tok(L, K_OP, op, strlen(op), st);
        }
    }
}

/* Data before a tag: strip it as the tag's sign and lstrip_blocks say. */
static void push_data(lexer *L, size_t a, size_t b, char sign, int is_block, int line_start) {
    if (sign == '-') {
        while (b > a && is_space(L->s[b - 1])) b--;
    } else if (sign != '+' && is_block) {
        size_t l = b;
        while (l > a && L->s[l - 1] != '\n') l--;
        if (l > a || line_start) {
            size_t q = l;
            while (q < b && (L->s[q] == ' ' || L->s[q] == '\t' || L->s[q] == '\f' || L->s[q] == '\v' || L->s[q] == '\r')) q++;
            if (q == b && q > l) b = l;
        }
    }
    if (b > a) push_tok(L, K_DATA, L->s + a, b - a, a);
}

static void lex(lexer *L) {
    size_t p = 0;
    int line_start = 1;
    while (p < L->n) {
        const char *hit = NULL;
        size_t k;
        for (k = p; k + 1 < L->n; k++)
            if (L->s[k] == '{' && (L->s[k + 1] == '{' || L->s[k + 1] == '%' || L->s[k + 1] == '#')) {
                hit = L->s + k;
                break;
            }
        if (!hit) {
            push_tok(L, K_DATA, L->s + p, L->n - p, p);
            break;
        }
        char type = hit[1];
        char sign = k + 2 < L->n && (L->s[k + 2] == '-' || L->s[k + 2] == '+') ? L->s[k + 2] : 0;
        size_t body = k + 2 + (sign ? 1 : 0);
        /* {% raw %} ... {% endraw %}: the text in between as it is */
        if (type == '%') {
            size_t q = body;
            while (q < L->n && is_space(L->s[q])) q++;
            if (at(L, q, "raw")) {
                size_t r = q + 3;
                while (r < L->n && is_space(L->s[r])) r++;
                char esign = 0;
                if (r < L->n && L->s[r] == '-') esign = '-', r++;
                if (at(L, r, "%}")) {
                    push_data(L, p, k, sign, 1, line_start);
                    size_t a = after_end(L, r + 2, esign, 1, &line_start), e; /* no trim_blocks after raw */
                    for (e = a; e + 1 < L->n; e++) {
                        if (L->s[e] != '{' || L->s[e + 1] != '%') continue;
                        size_t z = e + 2;
                        char s2 = L->s[z] == '-' || L->s[z] == '+' ? L->s[z++] : 0;
                        while (z < L->n && is_space(L->s[z])) z++;
                        if (!at(L, z, "endraw")) continue;
                        z += 6;
                        while (z < L->n && is_space(L->s[z])) z++;
                        char s3 = z < L->n && (L->s[z] == '-' || L->s[z] == '+') ? L->s[z++] : 0;
                        if (!at(L, z, "%}")) continue;
                        push_data(L, a, e, s2, 1, 0);
                        p = after_end(L, z + 2, s3, 0, &line_start);
                        goto next;
                    }
                    lfail(L, k, "%s", "missing {% endraw %}");
                }
            }
        }
        push_data(L, p, k, sign, type != '{', line_start);
        line_start = 0;
        if (type == '#') {
            size_t e;
            for (e = body; e + 1 < L->n; e++)
                if (L->s[e] == '#' && L->s[e + 1] == '}') break;
            if (e + 1 >= L->n) lfail(L, k, "%s", "missing end of comment tag");
            char esign = e > body && (L->s[e - 1] == '-' || L->s[e - 1] == '+') ? L->s[e - 1] : 0;
            p = after_end(L, e + 2, esign, 0, &line_start);
        } else {
            push_tok(L, type == '{' ? K_VAR_BEGIN : K_BLOCK_BEGIN, NULL, 0, k);
            p = lex_tag(L, body, type == '{', k, &line_start);
        }
    next:;
    }
    push_tok(L, K_EOF, NULL, 0, L->n);
}

/* ================================================================ values */

enum { T_UNDEF, T_NONE, T_BOOL, T_INT, T_FLOAT, T_STR, T_LIST, T_DICT, T_NS, T_MACRO, T_METHOD, T_FUNC };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct macro macro;
typedef struct method method;
typedef struct val {
    uint8_t t, tuple; /* tuple: a T_LIST that prints as (a, b) */
    uint32_t mark;    /* T_STR: which bytes came from the data (see "data spans") */
    size_t n;         /* T_STR: length in bytes; T_UNDEF: length of the name */
    union {
        int64_t i;   /* T_BOOL, T_INT */
        double f;    /* T_FLOAT */
        const char *s; /* T_STR; T_UNDEF: the name that was missing, or NULL */
        jlist *l;
        jdict *d;    /* T_DICT, T_NS */
        macro *m;
        method *me;
        int fn;      /* T_FUNC: a global function */
    };
} val;
struct jlist {
    val *v;
    size_t n, cap;
};
struct jdict {
    val *k, *v;
    size_t n, cap;
};

static const val UNDEF = {.t = T_UNDEF};
static const val NONE = {.t = T_NONE};
static val vbool(int b) { return (val){.t = T_BOOL, .i = b ? 1 : 0}; }
static val vint(int64_t i) { return (val){.t = T_INT, .i = i}; }
static val vfloat(double f) { return (val){.t = T_FLOAT, .f = f}; }
static val vstr(const char *s, size_t n) { return (val){.t = T_STR, .s = s, .n = n}; }
static val vcstr(const char *s) { return vstr(s, strlen(s)); }

/* ================================================================ syntax tree */

enum {
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR,
    E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT,
    S_DATA, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALL, S_FILTER, S_BREAK, S_CONTINUE, S_BODY
};

struct jnode {
    int k, line, col;
    const char *name; /* name / attribute / filter / test / macro / operator */
    size_t nlen;
    val lit;
    jnode *a, *b, *c, *d;
    jnode **v;             /* items, positional arguments, body */
    int nv;
    jnode **w;             /* dict values, keyword argument values, else body, parameter defaults */
    int nw;
    const char **kn;    /* keyword argument / parameter names (E_CMP: operators) */
    size_t *knl;
    int neg;            /* E_TEST: "is not" */
    int h;              /* an expression's height: 1 + its tallest operand's */
};

typedef struct {
    J *j;
    tok *t;
    size_t i;
    int depth, loops;
} parser;

static tok *cur(parser *P) { return &P->t[P->i]; }
static tok *peek(parser *P, size_t k) {
    size_t i = P->i + k;
    while (i > P->i && P->t[i - 1].k == K_EOF) i--;
    return &P->t[i];
}
static int is_op(const tok *t, const char *op) { return t->k == K_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static int is_name(const tok *t, const char *nm) { return t->k == K_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n); }

static const char *tok_desc(const tok *t, char *buf, size_t cap) {
    switch (t->k) {
    case K_EOF: return "end of template";
    case K_VAR_END: return "'}}'";
    case K_BLOCK_END: return "'%}'";
    case K_VAR_BEGIN: return "'{{'";
    case K_BLOCK_BEGIN: return "'{%'";
    case K_DATA: return "text";
    case K_STRING: return "a string";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static void pfail(parser *P, const tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void pfail(parser *P, const tok *t, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail(P->j, t->line, t->col, "%s", msg);
}

static void expect_op(parser *P, const char *op) {
    char b[64];
    if (!is_op(cur(P), op)) pfail(P, cur(P), "expected '%s', got %s", op, tok_desc(cur(P), b, sizeof b));
    P->i++;
}

static jnode *node(parser *P, int k, const tok *t) {
    jnode *n = jzalloc(P->j, sizeof *n);
    n->k = k, n->line = t->line, n->col = t->col;
    return n;
}

/* growable node arrays while parsing */
typedef struct {
    jnode **v;
    int n, cap;
} nvec;
static void npush(parser *P, nvec *a, jnode *x) {
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 8;
        a->v = jgrow(P->j, a->v, (size_t)a->n * sizeof *a->v, (size_t)nc * sizeof *a->v);
        a->cap = nc;
    }
    a->v[a->n++] = x;
}
typedef struct {
    const char **s;
    size_t *l;
    int n, cap;
} svec;
static void spush(parser *P, svec *a, const char *s, size_t l) {
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 8;
        a->s = jgrow(P->j, a->s, (size_t)a->n * sizeof *a->s, (size_t)nc * sizeof *a->s);
        a->l = jgrow(P->j, a->l, (size_t)a->n * sizeof *a->l, (size_t)nc * sizeof *a->l);
        a->cap = nc;
    }
    a->s[a->n] = s, a->l[a->n++] = l;
}

static jnode *parse_expr(parser *P, int with_cond);
static jnode *parse_unary(parser *P, int with_filter);
static jnode *parse_tuple(parser *P, int with_cond);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* Syntax nests at most MAX_SYNTAX levels: the parser's recursion (enter)
 * and the height of every expression tree (height), so that a chain of
 * 30,000 '+' or '|f' is refused here rather than recursed through later. */
#define MAX_SYNTAX 200
static void enter(parser *P) {
    if (++P->depth > MAX_SYNTAX) pfail(P, cur(P), "the template nests too deeply (more than %d levels)", MAX_SYNTAX);
}
static int tallest(jnode *const *v, int n) {
    int h = 0;
    for (int i = 0; i < n; i++)
        if (v[i] && v[i]->h > h) h = v[i]->h;
    return h;
}
/* n with its operands set: its height, refused beyond the limit */
static jnode *height(parser *P, jnode *n) {
    jnode *ops[4] = {n->a, n->b, n->c, n->d};
    int h = tallest(ops, 4), hv = tallest(n->v, n->nv), hw = tallest(n->w, n->nw);
    h = h > hv ? h : hv;
    h = h > hw ? h : hw;
    n->h = h + 1;
    if (n->h > MAX_SYNTAX)
        jfail(P->j, n->line, n->col, "the template nests too deeply (an expression more than %d levels deep)", MAX_SYNTAX);
    return n;
}

/* ( args ) of a call, filter or test into n: positional in v, keywords in kn / w */
static void parse_args(parser *P, jnode *n) {
    nvec pos = {0}, kwv = {0};
    svec kwn = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (pos.n + kwv.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) pfail(P, cur(P), "*args / **kwargs in calls are not supported");
        if (cur(P)->k == K_NAME && is_op(peek(P, 1), "=")) {
            tok *k = cur(P);
            P->i += 2;
            spush(P, &kwn, k->s, k->n);
            npush(P, &kwv, parse_expr(P, 1));
        } else {
            if (kwv.n) pfail(P, cur(P), "a positional argument follows a keyword argument");
            npush(P, &pos, parse_expr(P, 1));
        }
    }
    P->i++;
    n->v = pos.v, n->nv = pos.n, n->w = kwv.v, n->nw = kwv.n, n->kn = kwn.s, n->knl = kwn.l;
}

static jnode *parse_primary(parser *P) {
    tok *t = cur(P);
    char b[64];
    jnode *n;
    enter(P);
    if (t->k == K_NAME) {
        P->i++;
        n = node(P, E_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = vbool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = vbool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = NONE;
        else n->k = E_NAME, n->name = t->s, n->nlen = t->n;
    } else if (t->k == K_STRING) {
        /* adjacent literals are one string, as in Python */
        size_t len = 0, k = P->i;
        while (P->t[k].k == K_STRING) len += P->t[k++].n;
        char *s = jalloc(P->j, len + 1);
        len = 0;
        while (cur(P)->k == K_STRING) memcpy(s + len, cur(P)->s, cur(P)->n), len += cur(P)->n, P->i++;
        n = node(P, E_LIT, t);
        n->lit = vstr(s, len);
    } else if (t->k == K_INT || t->k == K_FLOAT) {
        P->i++;
        n = node(P, E_LIT, t);
        n->lit = t->k == K_INT ? vint(t->i) : vfloat(t->f);
    } else if (is_op(t, "(")) {
        P->i++;
        if (is_op(cur(P), ")")) {
            P->i++;
            n = node(P, E_TUPLE, t);
        } else {
            n = parse_tuple(P, 1);
            expect_op(P, ")");
        }
    } else if (is_op(t, "[")) {
        P->i++;
        nvec items = {0};
        while (!is_op(cur(P), "]")) {
            if (items.n) expect_op(P, ",");
            if (is_op(cur(P), "]")) break;
            npush(P, &items, parse_expr(P, 1));
        }
        P->i++;
        n = node(P, E_LIST, t);
        n->v = items.v, n->nv = items.n;
    } else if (is_op(t, "{")) {
        P->i++;
        nvec keys = {0}, vals = {0};
        while (!is_op(cur(P), "}")) {
            if (keys.n) expect_op(P, ",");
            if (is_op(cur(P), "}")) break;
            npush(P, &keys, parse_expr(P, 1));
            expect_op(P, ":");
            npush(P, &vals, parse_expr(P, 1));
        }
        P->i++;
        n = node(P, E_DICT, t);
        n->v = keys.v, n->nv = keys.n, n->w = vals.v, n->nw = vals.n;
    } else {
        pfail(P, t, "unexpected %s in an expression", tok_desc(t, b, sizeof b));
    }
    P->depth--;
    return height(P, n);
}

static jnode *parse_postfix(parser *P, jnode *n) {
    char b[64];
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, ".")) {
            P->i++;
            tok *a = cur(P);
            if (a->k == K_NAME) {
                jnode *x = node(P, E_ATTR, t);
                x->a = n, x->name = a->s, x->nlen = a->n;
                n = height(P, x);
            } else if (a->k == K_INT) {
                jnode *x = node(P, E_ITEM, t);
                x->a = n;
                x->b = node(P, E_LIT, a);
                x->b->lit = vint(a->i);
                n = height(P, x);
            } else
                pfail(P, a, "expected an attribute name after '.', got %s", tok_desc(a, b, sizeof b));
            P->i++;
        } else if (is_op(t, "[")) {
            P->i++;
            jnode *parts[3] = {0};
            int k = 0, slice = 0;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    if (++k > 2) pfail(P, cur(P), "a slice has at most three parts");
                    slice = 1;
                    P->i++;
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                if (parts[k]) pfail(P, cur(P), "expected ']' or ':' in a subscript");
                parts[k] = parse_expr(P, 1);
            }
            P->i++;
            if (!slice && !parts[0]) pfail(P, t, "empty subscript");
            jnode *x = node(P, slice ? E_SLICE : E_ITEM, t);
            x->a = n, x->b = parts[0], x->c = parts[1], x->d = parts[2];
            n = height(P, x);
        } else if (is_op(t, "(")) {
            jnode *x = node(P, E_CALL, t);
            x->line = n->line, x->col = n->col; /* errors point at what is called */
            x->a = n;
            parse_args(P, x);
            n = height(P, x);
        } else
            return n;
    }
}

static jnode *parse_filter_or_test(parser *P, jnode *n) {
    char b[64];
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, "|")) {
            P->i++;
            tok *nm = cur(P);
            if (nm->k != K_NAME) pfail(P, nm, "expected a filter name after '|', got %s", tok_desc(nm, b, sizeof b));
            P->i++;
            jnode *x = node(P, E_FILTER, nm);
            x->a = n, x->name = nm->s, x->nlen = nm->n;
            if (is_op(cur(P), "(")) parse_args(P, x);
            n = height(P, x);
        } else if (is_name(t, "is")) {
            P->i++;
            int neg = 0;
            if (is_name(cur(P), "not")) neg = 1, P->i++;
            tok *nm = cur(P);
            if (nm->k != K_NAME) pfail(P, nm, "expected a test name after 'is', got %s", tok_desc(nm, b, sizeof b));
            P->i++;
            jnode *x = node(P, E_TEST, nm);
            x->a = n, x->name = nm->s, x->nlen = nm->n, x->neg = neg;
            tok *c = cur(P);
            if (is_op(c, "(")) parse_args(P, x);
            else if ((c->k == K_NAME || c->k == K_STRING || c->k == K_INT || c->k == K_FLOAT || is_op(c, "(") ||
                      is_op(c, "[") || is_op(c, "{")) &&
                     !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) pfail(P, c, "tests cannot be chained with 'is'");
                jnode *arg = parse_postfix(P, parse_primary(P));
                x->v = jalloc(P->j, sizeof *x->v);
                x->v[0] = arg, x->nv = 1;
            }
            n = height(P, x);
        } else if (is_op(t, "(")) {
            jnode *x = node(P, E_CALL, t);
            x->a = n;
            parse_args(P, x);
            n = height(P, x);
        } else
            return n;
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    tok *t = cur(P);
    jnode *n;
    enter(P);
    if (is_op(t, "-") || is_op(t, "+")) {
        P->i++;
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(P, 0);
        height(P, n);
    } else
        n = parse_primary(P);
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_or_test(P, n);
    P->depth--;
    return n;
}

static jnode *bin(parser *P, int k, const tok *t, jnode *a, jnode *b) {
    jnode *x = node(P, k, t);
    x->a = a, x->b = b, x->name = t->s, x->nlen = t->n;
    return height(P, x);
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, 1);
    while (is_op(cur(P), "**")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_BIN, t, n, parse_unary(P, 1));
    }
    return n;
}
static jnode *parse_math2(parser *P) {
    jnode *n = parse_pow(P);
    while (is_op(cur(P), "*") || is_op(cur(P), "/") || is_op(cur(P), "//") || is_op(cur(P), "%")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_BIN, t, n, parse_pow(P));
    }
    return n;
}
static jnode *parse_concat(parser *P) {
    jnode *n = parse_math2(P);
    while (is_op(cur(P), "~")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_BIN, t, n, parse_math2(P));
    }
    return n;
}
static jnode *parse_math1(parser *P) {
    jnode *n = parse_concat(P);
    while (is_op(cur(P), "+") || is_op(cur(P), "-")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_BIN, t, n, parse_concat(P));
    }
    return n;
}
static jnode *parse_compare(parser *P) {
    tok *t0 = cur(P);
    jnode *first = parse_math1(P);
    nvec ops = {0};
    svec names = {0};
    for (;;) {
        tok *t = cur(P);
        const char *op = NULL;
        if (t->k == K_OP && (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") || is_op(t, ">") ||
                             is_op(t, ">=")))
            op = t->s, P->i++, spush(P, &names, op, t->n);
        else if (is_name(t, "in"))
            P->i++, spush(P, &names, "in", 2);
        else if (is_name(t, "not") && is_name(peek(P, 1), "in"))
            P->i += 2, spush(P, &names, "notin", 5);
        else
            break;
        npush(P, &ops, parse_math1(P));
    }
    if (!ops.n) return first;
    jnode *x = node(P, E_CMP, t0);
    x->a = first, x->v = ops.v, x->nv = ops.n, x->kn = names.s, x->knl = names.l;
    return height(P, x);
}
static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        tok *t = cur(P);
        P->i++;
        enter(P);
        jnode *x = node(P, E_NOT, t);
        x->a = parse_not(P);
        P->depth--;
        return height(P, x);
    }
    return parse_compare(P);
}
static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    while (is_name(cur(P), "and")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_AND, t, n, parse_not(P));
    }
    return n;
}
static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    while (is_name(cur(P), "or")) {
        tok *t = cur(P);
        P->i++;
        n = bin(P, E_OR, t, n, parse_and(P));
    }
    return n;
}
static jnode *parse_expr(parser *P, int with_cond) {
    enter(P);
    jnode *n = parse_or(P);
    while (with_cond && is_name(cur(P), "if")) {
        tok *t = cur(P);
        P->i++;
        jnode *x = node(P, E_COND, t);
        x->a = n;
        x->b = parse_or(P);
        if (is_name(cur(P), "else")) {
            P->i++;
            x->c = parse_expr(P, 1);
        }
        n = height(P, x);
    }
    P->depth--;
    return n;
}
/* a, b, c without parentheses is a tuple */
static jnode *parse_tuple(parser *P, int with_cond) {
    tok *t = cur(P);
    jnode *n = parse_expr(P, with_cond);
    if (!is_op(cur(P), ",")) return n;
    nvec items = {0};
    npush(P, &items, n);
    while (is_op(cur(P), ",")) {
        P->i++;
        if (cur(P)->k == K_VAR_END || cur(P)->k == K_BLOCK_END || is_op(cur(P), ")")) break;
        npush(P, &items, parse_expr(P, with_cond));
    }
    jnode *x = node(P, E_TUPLE, t);
    x->v = items.v, x->nv = items.n;
    return height(P, x);
}

/* ---- statements ---- */

static void expect_block_end(parser *P) {
    char b[64];
    if (cur(P)->k != K_BLOCK_END) pfail(P, cur(P), "expected '%%}', got %s", tok_desc(cur(P), b, sizeof b));
    P->i++;
}

static tok *expect_name(parser *P, const char *what) {
    char b[64];
    tok *t = cur(P);
    if (t->k != K_NAME) pfail(P, t, "expected %s, got %s", what, tok_desc(t, b, sizeof b));
    P->i++;
    return t;
}

/* a name, ns.attr, or a tuple of names (for and set targets) */
static jnode *parse_target(parser *P, int allow_attr) {
    tok *t0 = cur(P);
    int paren = 0;
    if (is_op(t0, "(")) paren = 1, P->i++;
    nvec items = {0};
    for (;;) {
        tok *t = expect_name(P, "a variable name");
        jnode *n = node(P, E_NAME, t);
        n->name = t->s, n->nlen = t->n;
        if (allow_attr && is_op(cur(P), ".")) {
            P->i++;
            tok *a = expect_name(P, "an attribute name");
            jnode *x = node(P, E_ATTR, a);
            x->a = n, x->name = a->s, x->nlen = a->n;
            n = x;
        }
        npush(P, &items, n);
        if (!is_op(cur(P), ",")) break;
        P->i++;
        if (paren && is_op(cur(P), ")")) break;
    }
    if (paren) expect_op(P, ")");
    if (items.n == 1 && !paren) return items.v[0];
    jnode *x = node(P, E_TUPLE, t0);
    x->v = items.v, x->nv = items.n;
    return x;
}

static jnode **parse_body(parser *P, const char *const *ends, int *n_out, const char **ended, const tok *opener);

/* (a, b=default) of a macro or a call block's caller */
static void parse_params(parser *P, jnode *n) {
    svec names = {0};
    nvec defs = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (names.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        tok *t = expect_name(P, "a parameter name");
        spush(P, &names, t->s, t->n);
        jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            P->i++;
            d = parse_expr(P, 1);
        } else if (defs.n && defs.v[defs.n - 1])
            pfail(P, t, "parameter '%.*s' without a default follows one with a default", (int)t->n, t->s);
        npush(P, &defs, d);
    }
    P->i++;
    n->kn = names.s, n->knl = names.l, n->w = defs.v, n->nw = defs.n;
}

static jnode *parse_statement(parser *P) {
    tok *open = cur(P); /* the {% */
    P->i++;
    tok *t = expect_name(P, "a statement name");
    const char *ended;
    enter(P);
    jnode *n;
    if (is_name(t, "if") || is_name(t, "elif")) {
        n = node(P, S_IF, t);
        n->a = parse_tuple(P, 1);
        expect_block_end(P);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        n->v = parse_body(P, ends, &n->nv, &ended, open);
        if (!strcmp(ended, "elif")) {
            n->w = jalloc(P->j, sizeof *n->w);
            n->nw = 1;
            n->w[0] = parse_statement(P); /* consumes through endif */
            P->depth--;
            return n;
        }
        if (!strcmp(ended, "else")) {
            P->i += 2;
            expect_block_end(P);
            static const char *const ends2[] = {"endif", NULL};
            n->w = parse_body(P, ends2, &n->nw, &ended, open);
        }
    } else if (is_name(t, "for")) {
        n = node(P, S_FOR, t);
        n->a = parse_target(P, 0);
        if (!is_name(cur(P), "in")) pfail(P, cur(P), "expected 'in' in a for statement");
        P->i++;
        n->b = parse_tuple(P, 0);
        if (is_name(cur(P), "if")) {
            P->i++;
            n->c = parse_expr(P, 1);
        }
        if (is_name(cur(P), "recursive")) pfail(P, cur(P), "recursive for loops are not supported");
        expect_block_end(P);
        static const char *const ends[] = {"else", "endfor", NULL};
        P->loops++;
        n->v = parse_body(P, ends, &n->nv, &ended, open);
        P->loops--;
        if (!strcmp(ended, "else")) {
            P->i += 2;
            expect_block_end(P);
            static const char *const ends2[] = {"endfor", NULL};
            n->w = parse_body(P, ends2, &n->nw, &ended, open);
        }
    } else if (is_name(t, "set")) {
        jnode *target = parse_target(P, 1);
        if (is_op(cur(P), "=")) {
            P->i++;
            n = node(P, S_SET, t);
            n->a = target;
            n->b = parse_tuple(P, 1);
            expect_block_end(P);
            P->depth--;
            return n;
        }
        if (target->k != E_NAME) pfail(P, cur(P), "a block set takes one variable name");
        n = node(P, S_SETBLOCK, t);
        n->a = target;
        if (is_op(cur(P), "|")) { /* {% set x | filter %} */
            jnode *ph = node(P, E_LIT, cur(P));
            ph->lit = UNDEF;
            n->b = parse_filter_or_test(P, ph);
            n->c = ph;
        }
        expect_block_end(P);
        static const char *const ends[] = {"endset", NULL};
        n->v = parse_body(P, ends, &n->nv, &ended, open);
    } else if (is_name(t, "macro")) {
        n = node(P, S_MACRO, t);
        tok *nm = expect_name(P, "a macro name");
        n->name = nm->s, n->nlen = nm->n;
        parse_params(P, n);
        expect_block_end(P);
        static const char *const ends[] = {"endmacro", NULL};
        int saved = P->loops;
        P->loops = 0;
        n->v = parse_body(P, ends, &n->nv, &ended, open);
        P->loops = saved;
    } else if (is_name(t, "call")) {
        n = node(P, S_CALL, t);
        if (is_op(cur(P), "(")) parse_params(P, n);
        n->a = parse_expr(P, 1);
        if (n->a->k != E_CALL) pfail(P, t, "expected a call after 'call'");
        expect_block_end(P);
        static const char *const ends[] = {"endcall", NULL};
        int saved = P->loops;
        P->loops = 0;
        n->v = parse_body(P, ends, &n->nv, &ended, open);
        P->loops = saved;
    } else if (is_name(t, "filter")) {
        n = node(P, S_FILTER, t);
        jnode *ph = node(P, E_LIT, cur(P));
        ph->lit = UNDEF;
        /* a filter chain applied to the body: "| name" is implied first */
        P->i--;
        P->t[P->i] = (tok){.k = K_OP, .s = "|", .n = 1, .line = t->line, .col = t->col};
        n->b = parse_filter_or_test(P, ph);
        n->c = ph;
        expect_block_end(P);
        static const char *const ends[] = {"endfilter", NULL};
        n->v = parse_body(P, ends, &n->nv, &ended, open);
    } else if (is_name(t, "generation")) { /* transformers' assistant-mask tag: renders its body */
        n = node(P, S_BODY, t);
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        n->v = parse_body(P, ends, &n->nv, &ended, open);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops) pfail(P, t, "'%.*s' outside a for loop", (int)t->n, t->s);
        n = node(P, is_name(t, "break") ? S_BREAK : S_CONTINUE, t);
        expect_block_end(P);
        P->depth--;
        return n;
    } else {
        pfail(P, t, "unknown statement '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    }
    /* the end tag: {% endxxx %} */
    P->i += 2;
    expect_block_end(P);
    P->depth--;
    return n;
}

/* Nodes until a {% NAME %} with NAME in ends (not consumed; *ended = it),
 * or the end of the template when ends is NULL. */
static jnode **parse_body(parser *P, const char *const *ends, int *n_out, const char **ended, const tok *opener) {
    nvec body = {0};
    const tok *start = opener ? opener : cur(P);
    for (;;) {
        tok *t = cur(P);
        if (t->k == K_EOF) {
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++; /* the closing tag is the last one named */
                pfail(P, start, "this block is never closed (expected '{%% %s %%}' before the end of the template)", ends[k]);
            }
            break;
        }
        if (t->k == K_DATA) {
            jnode *n = node(P, S_DATA, t);
            n->lit = vstr(t->s, t->n);
            npush(P, &body, n);
            P->i++;
        } else if (t->k == K_VAR_BEGIN) {
            P->i++;
            jnode *n = node(P, S_OUT, t);
            n->a = parse_tuple(P, 1);
            char b[64];
            if (cur(P)->k != K_VAR_END) pfail(P, cur(P), "expected '}}', got %s", tok_desc(cur(P), b, sizeof b));
            P->i++;
            npush(P, &body, n);
        } else if (t->k == K_BLOCK_BEGIN) {
            tok *nm = peek(P, 1);
            if (ends && nm->k == K_NAME)
                for (int k = 0; ends[k]; k++)
                    if (is_name(nm, ends[k])) {
                        *ended = ends[k];
                        *n_out = body.n;
                        return body.v;
                    }
            if (nm->k == K_NAME && nm->n > 3 && (!memcmp(nm->s, "end", 3) || is_name(nm, "else") || is_name(nm, "elif")))
                pfail(P, nm, "unexpected '%.*s'", (int)(nm->n > 40 ? 40 : nm->n), nm->s);
            if (is_name(nm, "else") || is_name(nm, "elif")) pfail(P, nm, "unexpected '%.*s'", (int)nm->n, nm->s);
            npush(P, &body, parse_statement(P));
        } else {
            char b[64];
            pfail(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
        }
    }
    *n_out = body.n;
    *ended = NULL;
    return body.v;
}

/* ================================================================ evaluation */

typedef struct frame {
    struct frame *parent;
    jdict vars;
} frame;

struct macro {
    jnode *def;       /* S_MACRO, or S_CALL for a call block's caller */
    frame *closure;
};
struct method {
    val self;
    const char *name;
    size_t n;
};
enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };

typedef struct {
    char *p;
    size_t n, cap;
    size_t *sp; /* [2 * nsp]: the data spans of p, sorted [start, end) pairs */
    size_t nsp, capsp;
} sbuf;

static void charge_n(J *j, const jnode *at, uint64_t n, uint64_t each);
static void sput(J *j, sbuf *b, const char *s, size_t n) {
    if (!n) return;
    charge_n(j, j->at, n, 1); /* WORK_BYTE per byte copied */
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 32;
        while (nc < b->n + n) nc *= 2;
        b->p = jgrow(j, b->p, b->n, nc);
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static val sval(J *j, sbuf *b);
static void sput_v(J *j, sbuf *b, val v);
static val sub(J *j, val v, size_t off, size_t n);
static void sputs(J *j, sbuf *b, const char *s) { sput(j, b, s, strlen(s)); }
static void put_str(J *j, sbuf *b, val v, int depth);
/* text a statement renders (into the output or a macro's / block's
 * buffer): counted against the output limit; values built on the way are
 * bounded by the memory limit */
static void emit(J *j, const jnode *at, sbuf *b, val v) {
    size_t before = b->n;
    if (v.t == T_STR) sput_v(j, b, v);
    else put_str(j, b, v, 0);
    j->out_total += b->n - before;
    if (j->out_total > j->max_out) jfail(j, at->line, at->col, "the output is longer than %zu bytes", j->max_out);
}

/* Work accounting. Every render has a budget of max_steps steps; a step
 * (a statement executed, an expression evaluated) costs WORK_STEP ticks and
 * whatever an operator, filter, test or method does beyond constant work is
 * charged by what it touches: WORK_ITEM per list element, dict entry or
 * value compared, WORK_BYTE per byte scanned, compared or copied, and a
 * repetition its count even when the result is empty. Charged before the
 * work is done, so that no single operation can run long. */
#define WORK_STEP 64
#define WORK_ITEM 8
#define WORK_BYTE 1
static void charge(J *j, const jnode *at, uint64_t ticks) {
    if (ticks > j->max_work - j->work)
        jfail(j, at ? at->line : 0, at ? at->col : 0,
              "the template ran more than %ld steps (a loop that does not end, or an operation on too much data)",
              j->max_steps);
    j->work += ticks;
}
/* n things at `each` ticks apiece (saturating) */
static void charge_n(J *j, const jnode *at, uint64_t n, uint64_t each) {
    uint64_t t;
    charge(j, at, __builtin_mul_overflow(n, each, &t) ? UINT64_MAX : t);
}
static void step(J *j, const jnode *n) { charge(j, n, WORK_STEP); }

/* Evaluation recursion (an expression inside an expression, a statement
 * inside a statement, a macro body inside a call) is bounded by a count,
 * not by the C stack: the parser bounds each tree's height, this bounds
 * their sum across macro calls. */
#define MAX_NEST 2000
static void nest_in(J *j, const jnode *n) {
    if (++j->nest > MAX_NEST)
        jfail(j, n->line, n->col, "evaluation nests more than %d levels deep (recursion through macros?)", MAX_NEST);
}

/* ---- data spans ----
 * Which bytes of a string were copied from the data variables (the
 * conversation: messages, tools, ...), so that the caller can tell the
 * conversation's text from the template's own in the output. A string's
 * mark: 0 none of it, 1 all of it, else the spans j->marks[mark]. Every
 * operation that copies bytes carries their spans along (sput_v, sub);
 * one that transforms them (escape, tojson, repr) marks all it made from
 * a marked string as data. */
static void span_add(J *j, sbuf *b, size_t a, size_t e) {
    if (a >= e) return;
    if (b->nsp && b->sp[2 * b->nsp - 1] >= a) { /* touches the last one: extend it */
        if (e > b->sp[2 * b->nsp - 1]) b->sp[2 * b->nsp - 1] = e;
        return;
    }
    if (b->nsp == b->capsp) {
        size_t nc = b->capsp ? b->capsp * 2 : 4;
        b->sp = jgrow(j, b->sp, b->nsp * 2 * sizeof *b->sp, nc * 2 * sizeof *b->sp);
        b->capsp = nc;
    }
    b->sp[2 * b->nsp] = a, b->sp[2 * b->nsp + 1] = e;
    b->nsp++;
}
static uint32_t new_mark(J *j, const size_t *sp, size_t n) {
    if (j->n_marks < 2) j->n_marks = 2;
    if (j->n_marks >= j->cap_marks) {
        if (j->cap_marks >= UINT32_MAX / 2) jfail(j, 0, 0, "too many strings");
        uint32_t nc = j->cap_marks ? j->cap_marks * 2 : 16;
        j->marks = jgrow(j, j->marks, j->cap_marks * sizeof *j->marks, nc * sizeof *j->marks);
        j->cap_marks = nc;
    }
    size_t *c = jalloc(j, n * 2 * sizeof *c);
    memcpy(c, sp, n * 2 * sizeof *c);
    j->marks[j->n_marks] = (struct marks){c, n};
    return j->n_marks++;
}
static val sval(J *j, sbuf *b) {
    val v = vstr(b->p ? b->p : "", b->n);
    if (b->nsp == 1 && b->sp[0] == 0 && b->sp[1] == b->n) v.mark = 1;
    else if (b->nsp) v.mark = new_mark(j, b->sp, b->nsp);
    return v;
}
/* a string value appended, with its spans */
static void sput_v(J *j, sbuf *b, val v) {
    size_t at = b->n;
    sput(j, b, v.s, v.n);
    if (v.mark == 1) span_add(j, b, at, at + v.n);
    else if (v.mark > 1) {
        const struct marks *m = &j->marks[v.mark];
        charge_n(j, j->at, m->n, WORK_ITEM);
        for (size_t i = 0; i < m->n; i++) span_add(j, b, at + m->sp[2 * i], at + m->sp[2 * i + 1]);
    }
}
/* v[off, off + n) of a string value, with the spans inside it */
static val sub(J *j, val v, size_t off, size_t n) {
    val r = vstr(v.s + off, n);
    if (!n || v.mark <= 1) {
        r.mark = n ? v.mark : 0;
        return r;
    }
    const struct marks *m = &j->marks[v.mark];
    size_t lo = 0, hi = m->n; /* the first span that ends after off */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->sp[2 * mid + 1] <= off) lo = mid + 1;
        else hi = mid;
    }
    sbuf t = {0};
    for (size_t i = lo; i < m->n && m->sp[2 * i] < off + n; i++) {
        charge(j, j->at, WORK_ITEM);
        size_t a = m->sp[2 * i] > off ? m->sp[2 * i] - off : 0, e = m->sp[2 * i + 1] - off;
        span_add(j, &t, a, e < n ? e : n);
    }
    if (t.nsp == 1 && t.sp[0] == 0 && t.sp[1] == n) r.mark = 1;
    else if (t.nsp) r.mark = new_mark(j, t.sp, t.nsp);
    return r;
}
/* a transformed copy of s: all of it data when any of s was */
static val mark_as(val out, val s) {
    out.mark = s.t == T_STR && s.mark ? 1 : 0;
    return out;
}

/* ---- dicts ---- */
static int key_eq(val a, const char *s, size_t n) { return a.t == T_STR && a.n == n && !memcmp(a.s, s, n); }
static int equal(J *j, val a, val b, int depth);
/* a dict's entries are scanned: WORK_ENTRY apiece */
#define WORK_ENTRY 2
static val *dict_get(J *j, jdict *d, val k) {
    charge_n(j, j->at, d->n, WORK_ENTRY);
    for (size_t i = 0; i < d->n; i++)
        if (k.t == T_STR ? key_eq(d->k[i], k.s, k.n) : equal(j, d->k[i], k, 0)) return &d->v[i];
    return NULL;
}
static val *dict_gets(J *j, jdict *d, const char *s, size_t n) {
    charge_n(j, j->at, d->n, WORK_ENTRY);
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], s, n)) return &d->v[i];
    return NULL;
}
static void dict_append(J *j, jdict *d, val k, val v) {
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        d->k = jgrow(j, d->k, d->n * sizeof(val), nc * sizeof(val));
        d->v = jgrow(j, d->v, d->n * sizeof(val), nc * sizeof(val));
        d->cap = nc;
    }
    d->k[d->n] = k, d->v[d->n++] = v;
}
static void dict_set(J *j, jdict *d, val k, val v) {
    val *p = dict_get(j, d, k);
    if (p) *p = v;
    else dict_append(j, d, k, v);
}
static jdict *new_dict(J *j) { return jzalloc(j, sizeof(jdict)); }
static jlist *new_list(J *j, size_t cap) {
    jlist *l = jzalloc(j, sizeof *l);
    if (cap) {
        size_t bytes;
        if (rf_mul_size(cap, sizeof(val), &bytes)) jfail(j, 0, 0, "a list is too long");
        l->v = jalloc(j, bytes);
        l->cap = cap;
    }
    return l;
}
static void list_push(J *j, jlist *l, val v) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        l->v = jgrow(j, l->v, l->n * sizeof(val), nc * sizeof(val));
        l->cap = nc;
    }
    l->v[l->n++] = v;
}
static val vlist(jlist *l) { return (val){.t = T_LIST, .l = l}; }
static val vdict(jdict *d) { return (val){.t = T_DICT, .d = d}; }

static val *lookup(J *j, frame *f, const char *s, size_t n) {
    for (; f; f = f->parent) {
        val *v = dict_gets(j, &f->vars, s, n);
        if (v) return v;
    }
    return NULL;
}
static void fset(J *j, frame *f, const char *s, size_t n, val v) { dict_set(j, &f->vars, vstr(s, n), v); }
static frame *new_frame(J *j, frame *parent) {
    frame *f = jzalloc(j, sizeof *f);
    f->parent = parent;
    return f;
}

/* an undefined value that remembers why, for the error when it is used */
static val undef_why(J *j, const char *fmt, const char *a, size_t an) {
    char buf[300];
    snprintf(buf, sizeof buf, fmt, (int)(an > 100 ? 100 : an), a);
    val u = UNDEF;
    u.s = jstrndup(j, buf, strlen(buf));
    u.n = strlen(buf);
    return u;
}

/* the same with a fixed reason: nothing allocated (a loop makes one per item) */
#define undef_is(why) ((val){.t = T_UNDEF, .s = (why), .n = sizeof(why) - 1})

static const char *type_name(val v) {
    switch (v.t) {
    case T_UNDEF: return "Undefined";
    case T_NONE: return "NoneType";
    case T_BOOL: return "bool";
    case T_INT: return "int";
    case T_FLOAT: return "float";
    case T_STR: return "str";
    case T_LIST: return v.tuple ? "tuple" : "list";
    case T_DICT: return "dict";
    case T_NS: return "Namespace";
    case T_MACRO: return "Macro";
    case T_METHOD: return "method";
    default: return "function";
    }
}

static void fail_undef(J *j, const jnode *n, val v) __attribute__((noreturn));
static void fail_undef(J *j, const jnode *n, val v) {
    jfail(j, n->line, n->col, "%.*s", v.s ? (int)v.n : 15, v.s ? v.s : "undefined value");
}

/* ---- UTF-8 and Python strings ---- */
static int u8len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1; }
/* The bytes of the code point at s (n > 0 left): its lead byte's length,
 * or 1 where that runs past the end. Every walk over code points (count,
 * offset, split) steps by this, so they agree on invalid UTF-8 too. */
static size_t cp_step(const char *s, size_t n) {
    size_t l = (size_t)u8len((unsigned char)s[0]);
    return l > n ? 1 : l;
}
static uint32_t u8dec(const char *s, size_t n, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    int l = (int)cp_step(s, n);
    uint32_t cp = l == 1 ? u[0] : l == 2 ? u[0] & 31u : l == 3 ? u[0] & 15u : u[0] & 7u;
    for (int i = 1; i < l; i++) cp = cp << 6 | (u[i] & 63u);
    *adv = (size_t)l;
    return cp;
}
static size_t cp_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; c++) i += cp_step(s + i, n - i);
    return c;
}
/* byte offset of code point k (k <= count) */
static size_t cp_off(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (k > 0 && i < n) {
        i += cp_step(s + i, n - i);
        k--;
    }
    return i;
}
static int py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
static int in_chars(uint32_t c, val chars) {
    if (chars.t != T_STR) return py_space(c);
    for (size_t i = 0; i < chars.n;) {
        size_t a;
        if (u8dec(chars.s + i, chars.n - i, &a) == c) return 1;
        i += a;
    }
    return 0;
}
/* str.strip / lstrip / rstrip (chars: T_STR, or anything else for whitespace) */
static void charge_n(J *j, const jnode *at, uint64_t n, uint64_t each);
static val sub(J *j, val v, size_t off, size_t n);
static val py_strip(J *j, const jnode *at, val s, val chars, int left, int right) {
    /* each code point tested against each of chars */
    uint64_t per = 1 + (chars.t == T_STR ? chars.n : 0);
    size_t a = 0, b = s.n;
    while (left && a < b) {
        size_t adv;
        charge_n(j, at, per, 1);
        uint32_t c = u8dec(s.s + a, b - a, &adv);
        if (!in_chars(c, chars)) break;
        a += adv;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s.s[k] & 0xC0) == 0x80) k--;
        size_t adv;
        charge_n(j, at, per, 1);
        uint32_t c = u8dec(s.s + k, b - k, &adv);
        if (!in_chars(c, chars)) break;
        b = k;
    }
    return sub(j, s, a, b - a);
}

/* Python's repr of a float: the shortest digits that read back the same */
static void py_float(double x, char *buf, size_t cap) {
    if (isnan(x)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, cap, x < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]d.ddde[+-]XX */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    size_t left = cap;
#define OUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) OUT("-");
    if (exp < -4 || exp >= 16) {
        OUT("%c", digits[0]);
        if (nd > 1) OUT(".%s", digits + 1);
        OUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        OUT("0.");
        for (int k = 0; k < -exp - 1; k++) OUT("0");
        OUT("%s", digits);
    } else {
        for (int k = 0; k <= exp; k++) OUT("%c", k < nd ? digits[k] : '0');
        OUT(".");
        if (nd > exp + 1) OUT("%s", digits + exp + 1);
        else OUT("0");
    }
#undef OUT
}

static void put_repr(J *j, sbuf *b, val v, int depth);

/* Python's str() */
static void put_str(J *j, sbuf *b, val v, int depth) {
    char num[64];
    switch (v.t) {
    case T_UNDEF: return;
    case T_NONE: sputs(j, b, "None"); return;
    case T_BOOL: sputs(j, b, v.i ? "True" : "False"); return;
    case T_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); sputs(j, b, num); return;
    case T_FLOAT: py_float(v.f, num, sizeof num); sputs(j, b, num); return;
    case T_STR: sput_v(j, b, v); return;
    default: put_repr(j, b, v, depth);
    }
}

static void put_repr(J *j, sbuf *b, val v, int depth) {
    if (depth > 100) jfail(j, 0, 0, "a value nests more than 100 levels deep (does it contain itself?)");
    if (v.t == T_STR) {
        size_t at0 = b->n;
        int dq = v.n && memchr(v.s, '\'', v.n) && !memchr(v.s, '"', v.n); /* an empty string's s may be NULL */
        char q = dq ? '"' : '\'';
        sput(j, b, &q, 1);
        for (size_t i = 0; i < v.n; i++) {
            unsigned char c = (unsigned char)v.s[i];
            char e[8];
            if (c == '\\') sputs(j, b, "\\\\");
            else if (c == (unsigned char)q) sputs(j, b, dq ? "\\\"" : "\\'");
            else if (c == '\n') sputs(j, b, "\\n");
            else if (c == '\r') sputs(j, b, "\\r");
            else if (c == '\t') sputs(j, b, "\\t");
            else if (c < 0x20 || c == 0x7f) snprintf(e, sizeof e, "\\x%02x", c), sputs(j, b, e);
            else sput(j, b, (const char *)&c, 1);
        }
        sput(j, b, &q, 1);
        if (v.mark) span_add(j, b, at0, b->n);
    } else if (v.t == T_LIST) {
        sputs(j, b, v.tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) sputs(j, b, ", ");
            put_repr(j, b, v.l->v[i], depth + 1);
        }
        sputs(j, b, v.tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
    } else if (v.t == T_DICT || v.t == T_NS) {
        sputs(j, b, v.t == T_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) sputs(j, b, ", ");
            put_repr(j, b, v.d->k[i], depth + 1);
            sputs(j, b, ": ");
            put_repr(j, b, v.d->v[i], depth + 1);
        }
        sputs(j, b, v.t == T_NS ? "}>" : "}");
    } else if (v.t == T_MACRO || v.t == T_METHOD || v.t == T_FUNC) {
        sputs(j, b, "<function>");
    } else
        put_str(j, b, v, depth);
}

static val to_str(J *j, val v) {
    if (v.t == T_STR) return v;
    sbuf b = {0};
    put_str(j, &b, v, 0);
    return sval(j, &b);
}

/* json.dumps(v, ensure_ascii, indent, sort_keys) with Python's separators */
static void put_json(J *j, const jnode *at, sbuf *b, val v, int indent, int level, int ascii, int sort) {
    if (level > 100) jfail(j, at->line, at->col, "tojson: a value nests more than 100 levels deep");
    char num[64];
    switch (v.t) {
    case T_NONE: sputs(j, b, "null"); return;
    case T_BOOL: sputs(j, b, v.i ? "true" : "false"); return;
    case T_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); sputs(j, b, num); return;
    case T_FLOAT:
        if (isnan(v.f)) sputs(j, b, "NaN");
        else if (isinf(v.f)) sputs(j, b, v.f < 0 ? "-Infinity" : "Infinity");
        else py_float(v.f, num, sizeof num), sputs(j, b, num);
        return;
    case T_STR: {
        size_t at0 = b->n;
        sputs(j, b, "\"");
        for (size_t i = 0; i < v.n;) {
            unsigned char c = (unsigned char)v.s[i];
            char e[16];
            if (c == '"') sputs(j, b, "\\\""), i++;
            else if (c == '\\') sputs(j, b, "\\\\"), i++;
            else if (c == '\n') sputs(j, b, "\\n"), i++;
            else if (c == '\r') sputs(j, b, "\\r"), i++;
            else if (c == '\t') sputs(j, b, "\\t"), i++;
            else if (c == '\b') sputs(j, b, "\\b"), i++;
            else if (c == '\f') sputs(j, b, "\\f"), i++;
            else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c), sputs(j, b, e), i++;
            else if (c >= 0x80 && ascii) {
                size_t adv;
                uint32_t cp = u8dec(v.s + i, v.n - i, &adv);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                } else
                    snprintf(e, sizeof e, "\\u%04x", cp);
                sputs(j, b, e);
                i += adv;
            } else
                sput(j, b, (const char *)&c, 1), i++;
        }
        sputs(j, b, "\"");
        if (v.mark) span_add(j, b, at0, b->n);
        return;
    }
    case T_LIST:
    case T_DICT: {
        int is_list = v.t == T_LIST;
        size_t n = is_list ? v.l->n : v.d->n;
        if (!n) {
            sputs(j, b, is_list ? "[]" : "{}");
            return;
        }
        sputs(j, b, is_list ? "[" : "{");
        size_t *order = jalloc(j, n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (!is_list && sort) /* insertion sort by key bytes (keys are strings) */
            for (size_t i = 1; i < n; i++)
                for (size_t k = i; k > 0; k--) {
                    val x = v.d->k[order[k - 1]], y = v.d->k[order[k]];
                    if (x.t != T_STR || y.t != T_STR) break;
                    size_t m = x.n < y.n ? x.n : y.n;
                    charge_n(j, at, m + WORK_ITEM, WORK_BYTE);
                    int c = memcmp(x.s, y.s, m);
                    if (c < 0 || (c == 0 && x.n <= y.n)) break;
                    size_t t = order[k - 1];
                    order[k - 1] = order[k], order[k] = t;
                }
        for (size_t i = 0; i < n; i++) {
            if (i) sputs(j, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) {
                sputs(j, b, "\n");
                for (int k = 0; k < indent * (level + 1); k++) sputs(j, b, " ");
            }
            if (!is_list) {
                val k = v.d->k[order[i]];
                if (k.t == T_STR) put_json(j, at, b, k, indent, level + 1, ascii, sort);
                else {
                    sputs(j, b, "\"");
                    if (k.t == T_NONE) sputs(j, b, "null");
                    else if (k.t == T_BOOL) sputs(j, b, k.i ? "true" : "false");
                    else if (k.t == T_INT || k.t == T_FLOAT) put_str(j, b, k, 0);
                    else jfail(j, at->line, at->col, "tojson: keys must be str, int, float, bool or None, not %s", type_name(k));
                    sputs(j, b, "\"");
                }
                sputs(j, b, ": ");
            }
            put_json(j, at, b, is_list ? v.l->v[i] : v.d->v[order[i]], indent, level + 1, ascii, sort);
        }
        if (indent >= 0) {
            sputs(j, b, "\n");
            for (int k = 0; k < indent * level; k++) sputs(j, b, " ");
        }
        sputs(j, b, is_list ? "]" : "}");
        return;
    }
    default: jfail(j, at->line, at->col, "tojson: object of type %s is not JSON serializable", type_name(v));
    }
}

/* ---- truth, equality, order ---- */
static int truthy(val v) {
    switch (v.t) {
    case T_UNDEF: case T_NONE: return 0;
    case T_BOOL: case T_INT: return v.i != 0;
    case T_FLOAT: return v.f != 0;
    case T_STR: return v.n > 0;
    case T_LIST: return v.l->n > 0;
    case T_DICT: return v.d->n > 0;
    default: return 1;
    }
}
static int is_num(val v) { return v.t == T_BOOL || v.t == T_INT || v.t == T_FLOAT; }
static double num(val v) { return v.t == T_FLOAT ? v.f : (double)v.i; }

static int equal(J *j, val a, val b, int depth) {
    if (depth > 100) jfail(j, j->at ? j->at->line : 0, j->at ? j->at->col : 0, "a value nests more than 100 levels deep");
    charge(j, j->at, WORK_ITEM);
    if (is_num(a) && is_num(b)) return a.t == T_FLOAT || b.t == T_FLOAT ? num(a) == num(b) : a.i == b.i;
    if (a.t != b.t) return 0;
    switch (a.t) {
    case T_UNDEF: case T_NONE: return 1;
    case T_STR:
        if (a.n != b.n) return 0;
        charge_n(j, j->at, a.n, WORK_BYTE);
        return !memcmp(a.s, b.s, a.n);
    case T_LIST:
        if (a.tuple != b.tuple || a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++)
            if (!equal(j, a.l->v[i], b.l->v[i], depth + 1)) return 0;
        return 1;
    case T_DICT:
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            val *o = dict_get(j, b.d, a.d->k[i]);
            if (!o || !equal(j, a.d->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case T_NS: return a.d == b.d;
    case T_MACRO: return a.m == b.m;
    case T_FUNC: return a.fn == b.fn;
    default: return 0;
    }
}

/* <0, 0, >0; fails for types Python cannot order */
static int order(J *j, const jnode *at, val a, val b, const char *op) {
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        if (a.t != T_FLOAT && b.t != T_FLOAT) return a.i < b.i ? -1 : a.i > b.i;
        return x < y ? -1 : x > y;
    }
    charge(j, at, WORK_ITEM);
    if (a.t == T_STR && b.t == T_STR) {
        size_t m = a.n < b.n ? a.n : b.n;
        charge_n(j, at, m, WORK_BYTE);
        int c = memcmp(a.s, b.s, m);
        return c ? c : a.n < b.n ? -1 : a.n > b.n;
    }
    if (a.t == T_LIST && b.t == T_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!equal(j, a.l->v[i], b.l->v[i], 0)) {
                nest_in(j, at); /* lists in lists: bounded like any recursion */
                int c = order(j, at, a.l->v[i], b.l->v[i], op);
                j->nest--;
                return c;
            }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    if (a.t == T_UNDEF) fail_undef(j, at, a);
    if (b.t == T_UNDEF) fail_undef(j, at, b);
    jfail(j, at->line, at->col, "'%s' not supported between instances of '%s' and '%s'", op, type_name(a), type_name(b));
}

/* the items a for loop (or a filter) walks over */
static jlist *iter_list(J *j, const jnode *at, val v) {
    /* what walks the items pays for them: the caller's loop, or a filter's */
    if (v.t == T_LIST) charge_n(j, at, v.l->n, WORK_ITEM);
    else if (v.t == T_DICT || v.t == T_NS) charge_n(j, at, v.d->n, WORK_ITEM);
    else if (v.t == T_STR) charge_n(j, at, v.n, WORK_ITEM);
    switch (v.t) {
    case T_UNDEF: return new_list(j, 0);
    case T_LIST: return v.l;
    case T_DICT: case T_NS: {
        jlist *l = new_list(j, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) l->v[l->n++] = v.d->k[i];
        return l;
    }
    case T_STR: {
        jlist *l = new_list(j, cp_count(v.s, v.n));
        for (size_t i = 0; i < v.n;) {
            size_t a;
            u8dec(v.s + i, v.n - i, &a);
            if (i + a > v.n) a = v.n - i;
            l->v[l->n++] = sub(j, v, i, a);
            i += a;
        }
        return l;
    }
    default: jfail(j, at->line, at->col, "'%s' object is not iterable", type_name(v));
    }
}

static int contains(J *j, const jnode *at, val item, val seq) {
    if (seq.t == T_STR) {
        if (item.t != T_STR)
            jfail(j, at->line, at->col, "'in <string>' requires string as left operand, not %s", type_name(item));
        charge_n(j, at, (uint64_t)seq.n + item.n, WORK_BYTE);
        return item.n == 0 || memmem(seq.s, seq.n, item.s, item.n) != NULL;
    }
    if (seq.t == T_DICT || seq.t == T_NS) return dict_get(j, seq.d, item) != NULL;
    if (seq.t == T_LIST) {
        for (size_t i = 0; i < seq.l->n; i++)
            if (equal(j, seq.l->v[i], item, 0)) return 1;
        return 0;
    }
    if (seq.t == T_UNDEF) return 0;
    jfail(j, at->line, at->col, "argument of type '%s' is not iterable", type_name(seq));
}

/* ---- attribute and item access ---- */
static const char *const STR_METHODS[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                                          "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "count",
                                          "join", "splitlines", "isdigit", "isspace", "isalpha", "isalnum", "islower",
                                          "isupper", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL};

static int in_names(const char *const *names, const char *s, size_t n) {
    for (int k = 0; names[k]; k++)
        if (strlen(names[k]) == n && !memcmp(names[k], s, n)) return 1;
    return 0;
}
static val mk_method(J *j, val self, const char *s, size_t n) {
    method *m = jalloc(j, sizeof *m);
    m->self = self, m->name = s, m->n = n;
    return (val){.t = T_METHOD, .me = m};
}

static val get_attr(J *j, const jnode *at, val obj, const char *s, size_t n) {
    switch (obj.t) {
    case T_UNDEF: fail_undef(j, at, obj);
    case T_STR:
        if (in_names(STR_METHODS, s, n)) return mk_method(j, obj, s, n);
        break;
    case T_DICT:
        if (in_names(DICT_METHODS, s, n)) return mk_method(j, obj, s, n);
        /* fall through */
    case T_NS: {
        val *v = dict_gets(j, obj.d, s, n);
        if (v) return *v;
        break;
    }
    case T_LIST:
        if (in_names(LIST_METHODS, s, n)) return mk_method(j, obj, s, n);
        break;
    default: break;
    }
    char fmt[80];
    snprintf(fmt, sizeof fmt, "'%s object' has no attribute '%%.*s'", obj.t == T_NS ? "Namespace" : type_name(obj));
    return undef_why(j, fmt, s, n);
}

static int as_index(val k, int64_t *out) {
    if (k.t == T_INT || k.t == T_BOOL) return *out = k.i, 1;
    return 0;
}

static val get_item(J *j, const jnode *at, val obj, val key) {
    int64_t i;
    if (obj.t == T_UNDEF) fail_undef(j, at, obj);
    if (obj.t == T_LIST && as_index(key, &i)) {
        if (i < 0) i += (int64_t)obj.l->n;
        if (i >= 0 && (size_t)i < obj.l->n) return obj.l->v[i];
        char w[80];
        snprintf(w, sizeof w, "%s object has no element %lld", obj.tuple ? "tuple" : "list", (long long)key.i);
        return undef_why(j, "%.*s", w, strlen(w));
    }
    if (obj.t == T_STR && as_index(key, &i)) {
        charge_n(j, at, obj.n, WORK_BYTE);
        int64_t len = (int64_t)cp_count(obj.s, obj.n);
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            size_t a = cp_off(obj.s, obj.n, (size_t)i), b = cp_off(obj.s, obj.n, (size_t)i + 1);
            return sub(j, obj, a, b - a);
        }
        return undef_is("string index out of range");
    }
    if (obj.t == T_DICT || obj.t == T_NS) {
        val *v = dict_get(j, obj.d, key);
        if (v) return *v;
    }
    if (key.t == T_STR) return get_attr(j, at, obj, key.s, key.n);
    return undef_is("no item for this key in a value");
}

/* Python's slice indices for a sequence of length len */
static void slice_range(J *j, const jnode *at, val a, val b, val c, int64_t len, int64_t *start, int64_t *stop, int64_t *stp) {
    int64_t st = 1;
    if (c.t != T_UNDEF && c.t != T_NONE) {
        if (!as_index(c, &st)) jfail(j, at->line, at->col, "slice indices must be integers");
        if (st == 0) jfail(j, at->line, at->col, "slice step cannot be zero");
    }
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? len - 1 : len;
    int64_t s0 = st < 0 ? hi : lo, s1 = st < 0 ? lo : hi;
    val ab[2] = {a, b};
    int64_t *dst[2] = {&s0, &s1};
    for (int k = 0; k < 2; k++) {
        int64_t x;
        if (ab[k].t == T_UNDEF || ab[k].t == T_NONE) continue;
        if (!as_index(ab[k], &x)) jfail(j, at->line, at->col, "slice indices must be integers or None");
        if (x < 0) {
            x += len;
            if (x < lo) x = lo;
        } else if (x > hi)
            x = hi;
        *dst[k] = x;
    }
    *start = s0, *stop = s1, *stp = st;
}

static val do_slice(J *j, const jnode *at, val obj, val a, val b, val c) {
    if (obj.t == T_UNDEF) fail_undef(j, at, obj);
    int is_str = obj.t == T_STR;
    if (!is_str && obj.t != T_LIST) jfail(j, at->line, at->col, "'%s' object is not subscriptable", type_name(obj));
    size_t *offs = NULL;
    int64_t len;
    if (is_str) {
        charge_n(j, at, obj.n, WORK_BYTE);
        len = (int64_t)cp_count(obj.s, obj.n);
        offs = jalloc(j, ((size_t)len + 1) * sizeof *offs);
        size_t i = 0;
        for (int64_t k = 0; k < len; k++) {
            offs[k] = i;
            i += cp_step(obj.s + i, obj.n - i);
        }
        offs[len] = obj.n;
    } else
        len = (int64_t)obj.l->n;
    int64_t s0, s1, st;
    slice_range(j, at, a, b, c, len, &s0, &s1, &st);
    if (is_str && st == 1) return s1 > s0 ? sub(j, obj, offs[s0], offs[s1] - offs[s0]) : vstr("", 0);
    /* by count: s0 + k * st is an index of the sequence for every k < cnt,
     * where stepping past the end could overflow */
    uint64_t span = st > 0 ? (s1 > s0 ? (uint64_t)(s1 - s0) : 0) : (s0 > s1 ? (uint64_t)(s0 - s1) : 0);
    uint64_t step_abs = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
    uint64_t cnt = span ? (span - 1) / step_abs + 1 : 0;
    charge_n(j, at, cnt, WORK_ITEM);
    sbuf sb = {0};
    jlist *l = is_str ? NULL : new_list(j, (size_t)cnt);
    for (uint64_t k = 0; k < cnt; k++) {
        int64_t i = (int64_t)((uint64_t)s0 + k * (uint64_t)st);
        if (is_str) sput_v(j, &sb, sub(j, obj, offs[i], offs[i + 1] - offs[i]));
        else l->v[l->n++] = obj.l->v[i];
    }
    if (is_str) return sval(j, &sb);
    val r = vlist(l);
    r.tuple = obj.tuple;
    return r;
}

/* ---- arithmetic ---- */
/* x ** y for y >= 0 by squaring: -1 on int64 overflow */
static int int_pow(int64_t x, int64_t y, int64_t *out) {
    int64_t r = 1;
    while (y > 0) {
        if ((y & 1) && rf_mul_i64(r, x, &r)) return -1;
        y >>= 1;
        if (y && rf_mul_i64(x, x, &x)) return -1;
    }
    *out = r;
    return 0;
}

/* s * k: a string or list repeated. The count is charged even when the
 * result is empty ('' * 10**18 loops as long as its count says). */
static val repeat(J *j, const jnode *at, val s, int64_t k) {
    if (k < 0) k = 0;
    size_t unit = s.t == T_STR ? s.n : s.l->n * sizeof(val), total;
    if (rf_mul_size(unit, (size_t)k, &total) || total > j->max_mem) jfail(j, at->line, at->col, "a repeated value is too long");
    charge_n(j, at, (uint64_t)k, WORK_ITEM);
    charge_n(j, at, total, WORK_BYTE);
    if (s.t == T_STR) {
        sbuf o = {0};
        for (int64_t i = 0; i < k; i++) sput_v(j, &o, s);
        return sval(j, &o);
    }
    jlist *l = new_list(j, s.l->n * (size_t)k);
    for (int64_t i = 0; i < k; i++)
        if (s.l->n) memcpy(l->v + (size_t)i * s.l->n, s.l->v, s.l->n * sizeof(val));
    l->n = s.l->n * (size_t)k;
    return vlist(l);
}

static val arith(J *j, const jnode *at, const char *op, val a, val b) {
    if (a.t == T_UNDEF) fail_undef(j, at, a);
    if (b.t == T_UNDEF) fail_undef(j, at, b);
    char o = op[0];
    int two = op[1] != 0;
    if (o == '~') {
        val x = to_str(j, a), y = to_str(j, b);
        sbuf s = {0};
        sput_v(j, &s, x);
        sput_v(j, &s, y);
        return sval(j, &s);
    }
    if (is_num(a) && is_num(b)) {
        int fl = a.t == T_FLOAT || b.t == T_FLOAT;
        int64_t x = a.i, y = b.i, r;
        double fx = num(a), fy = num(b);
        switch (o) {
        case '+':
            if (fl) return vfloat(fx + fy);
            if (rf_add_i64(x, y, &r)) break;
            return vint(r);
        case '-':
            if (fl) return vfloat(fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) break;
            return vint(r);
        case '*':
            if (two) { /* ** */
                if (!fl && y >= 0) {
                    if (int_pow(x, y, &r)) break;
                    return vint(r);
                }
                return vfloat(pow(fx, fy));
            }
            if (fl) return vfloat(fx * fy);
            if (rf_mul_i64(x, y, &r)) break;
            return vint(r);
        case '/':
            if (fy == 0) jfail(j, at->line, at->col, "division by zero");
            if (two) {
                if (fl) return vfloat(floor(fx / fy));
                if (x == INT64_MIN && y == -1) break;
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
                return vint(r);
            }
            return vfloat(fx / fy);
        case '%':
            if (fy == 0) jfail(j, at->line, at->col, "modulo by zero");
            if (fl) {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return vfloat(m);
            }
            if (x == INT64_MIN && y == -1) return vint(0);
            r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return vint(r);
        }
        jfail(j, at->line, at->col, "integer overflow in '%s'", op);
    }
    if (o == '+' && a.t == T_STR && b.t == T_STR) {
        sbuf s = {0};
        sput_v(j, &s, a);
        sput_v(j, &s, b);
        return sval(j, &s);
    }
    if (o == '+' && a.t == T_LIST && b.t == T_LIST) {
        jlist *l = new_list(j, a.l->n + b.l->n);
        /* (an empty list may hold no array: memcpy must not see NULL) */
        if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof(val));
        if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof(val));
        l->n = a.l->n + b.l->n;
        val r = vlist(l);
        r.tuple = a.tuple;
        return r;
    }
    if (o == '*' && !two && (((a.t == T_STR || a.t == T_LIST) && (b.t == T_INT || b.t == T_BOOL)) ||
                             ((b.t == T_STR || b.t == T_LIST) && (a.t == T_INT || a.t == T_BOOL)))) {
        int str_first = a.t == T_STR || a.t == T_LIST;
        return repeat(j, at, str_first ? a : b, str_first ? b.i : a.i);
    }
    jfail(j, at->line, at->col, "unsupported operand type(s) for %s: '%s' and '%s'", op, type_name(a), type_name(b));
}

/* ---- calls ---- */
typedef struct {
    val *pos;
    int np;
    const char **kn;
    size_t *knl;
    val *kw;
    int nk;
} args;

/* argument i by position, else by name, else def */
static val arg(const args *a, int i, const char *name, val def) {
    if (i >= 0 && i < a->np) return a->pos[i];
    for (int k = 0; k < a->nk; k++)
        if (strlen(name) == a->knl[k] && !memcmp(name, a->kn[k], a->knl[k])) return a->kw[k];
    return def;
}

static val eval(J *j, frame *f, jnode *n);
static void exec_body(J *j, frame *f, jnode **body, int n, sbuf *out);
static val call_value(J *j, frame *f, const jnode *at, val fn, const args *a, val caller);

static void eval_args(J *j, frame *f, jnode *n, args *a) {
    a->np = n->nv, a->nk = n->nw, a->kn = n->kn, a->knl = n->knl;
    a->pos = n->nv ? jalloc(j, (size_t)n->nv * sizeof(val)) : NULL;
    a->kw = n->nw ? jalloc(j, (size_t)n->nw * sizeof(val)) : NULL;
    for (int i = 0; i < n->nv; i++) a->pos[i] = eval(j, f, n->v[i]);
    for (int i = 0; i < n->nw; i++) a->kw[i] = eval(j, f, n->w[i]);
}

static val need_str(J *j, const jnode *at, val v, const char *what) {
    if (v.t == T_UNDEF) fail_undef(j, at, v);
    if (v.t != T_STR) jfail(j, at->line, at->col, "%s must be a string, not %s", what, type_name(v));
    return v;
}


/* The next occurrence of p in s at or after off (s.n when none): linear
 * (memmem), charged by the bytes it passes. */
static size_t find_fwd(J *j, const jnode *at, val s, size_t off, val p) {
    if (off + p.n > s.n) return s.n;
    charge(j, at, 2 * WORK_ITEM); /* a call per hit: count('a') of 'aaa...' makes one per byte */
    const char *h = memmem(s.s + off, s.n - off, p.s, p.n);
    size_t r = h ? (size_t)(h - s.s) : s.n;
    charge_n(j, at, (r < s.n ? r + p.n : s.n) - off, WORK_BYTE);
    return r;
}
/* The last occurrence of p (non-empty) ending at or before end, or SIZE_MAX;
 * charged by the bytes actually compared. */
static size_t find_back(J *j, const jnode *at, val s, size_t end, val p) {
    for (size_t i = end >= p.n ? end - p.n + 1 : 0; i-- > 0;) {
        charge(j, at, WORK_BYTE);
        if (s.s[i] != p.s[0]) continue;
        charge_n(j, at, p.n, WORK_BYTE);
        if (!memcmp(s.s + i, p.s, p.n)) return i;
    }
    return SIZE_MAX;
}

static val str_split(J *j, const jnode *at, val s, val sep, int64_t maxsplit, int from_right) {
    jlist *l = new_list(j, 0);
    if (sep.t == T_NONE || sep.t == T_UNDEF) { /* runs of whitespace, ends dropped */
        if (from_right) jfail(j, at->line, at->col, "rsplit() without a separator is not supported");
        charge_n(j, at, s.n, WORK_BYTE);
        size_t i = 0;
        int64_t done = 0;
        while (i < s.n) {
            size_t adv;
            while (i < s.n && py_space(u8dec(s.s + i, s.n - i, &adv))) i += adv;
            if (i >= s.n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                val rest = py_strip(j, at, sub(j, s, i, s.n - i), NONE, 0, 1);
                list_push(j, l, rest);
                break;
            }
            size_t st = i;
            while (i < s.n && !py_space(u8dec(s.s + i, s.n - i, &adv))) i += adv;
            list_push(j, l, sub(j, s, st, i - st));
            done++;
        }
        return vlist(l);
    }
    need_str(j, at, sep, "the separator");
    if (!sep.n) jfail(j, at->line, at->col, "empty separator");
    if (from_right && maxsplit >= 0) {
        /* split from the right: collect pieces backwards */
        jlist *rev = new_list(j, 0);
        size_t end = s.n;
        int64_t done = 0;
        while (done < maxsplit) {
            size_t i = find_back(j, at, s, end, sep);
            if (i == SIZE_MAX) break;
            list_push(j, rev, sub(j, s, i + sep.n, end - i - sep.n));
            end = i;
            done++;
        }
        list_push(j, rev, sub(j, s, 0, end));
        for (size_t k = rev->n; k-- > 0;) list_push(j, l, rev->v[k]);
        return vlist(l);
    }
    size_t st = 0;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
        size_t i = find_fwd(j, at, s, st, sep);
        if (i >= s.n) break;
        list_push(j, l, sub(j, s, st, i - st));
        st = i + sep.n;
        done++;
    }
    list_push(j, l, sub(j, s, st, s.n - st));
    return vlist(l);
}

static val str_replace(J *j, const jnode *at, val s, val old, val nw, int64_t count) {
    sbuf o = {0};
    int64_t done = 0;
    if (!old.n) { /* Python inserts the replacement around every code point */
        size_t k = 0;
        while (count < 0 || done < count) {
            charge(j, at, WORK_ITEM);
            sput_v(j, &o, nw);
            done++;
            if (k >= s.n) break;
            size_t adv = cp_step(s.s + k, s.n - k);
            sput_v(j, &o, sub(j, s, k, adv));
            k += adv;
        }
        sput_v(j, &o, sub(j, s, k, s.n - k));
        return sval(j, &o);
    }
    size_t i = 0;
    while (count < 0 || done < count) {
        size_t h = find_fwd(j, at, s, i, old);
        if (h >= s.n) break;
        sput_v(j, &o, sub(j, s, i, h - i));
        sput_v(j, &o, nw);
        i = h + old.n;
        done++;
    }
    sput_v(j, &o, sub(j, s, i, s.n - i));
    return sval(j, &o);
}

static val str_case(J *j, val s, int mode) { /* 0 lower, 1 upper, 2 title, 3 capitalize (ASCII letters) */
    charge_n(j, j->at, s.n, WORK_BYTE);
    char *p = jalloc(j, s.n + 1);
    int prev_letter = 0;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        int letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = mode == 1 || (mode == 2 && letter && !prev_letter) || (mode == 3 && i == 0);
        if (up && c >= 'a' && c <= 'z') c = (char)(c - 32);
        else if (!up && mode != 1 && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        p[i] = c;
        prev_letter = mode == 2 ? letter || (((unsigned char)c) >= 0x80) : letter;
    }
    val r = vstr(p, s.n);
    r.mark = s.mark; /* byte for byte: the same spans */
    return r;
}

static int64_t int_arg(J *j, const jnode *at, val v, int64_t def, const char *what) {
    if (v.t == T_UNDEF || v.t == T_NONE) return def;
    if (v.t != T_INT && v.t != T_BOOL) jfail(j, at->line, at->col, "%s must be an integer, not %s", what, type_name(v));
    return v.i;
}

static val call_method(J *j, const jnode *at, method *m, const args *a) {
    val s = m->self;
    const char *nm = m->name;
    size_t nl = m->n;
#define IS(x) (nl == strlen(x) && !memcmp(nm, x, nl))
    if (s.t == T_STR) {
        if (IS("startswith") || IS("endswith")) {
            val p = arg(a, 0, "prefix", UNDEF);
            int ends = IS("endswith");
            jlist one = {&p, 1, 1}, *alts = p.t == T_LIST ? p.l : &one;
            for (size_t k = 0; k < alts->n; k++) {
                val q = need_str(j, at, alts->v[k], nm);
                charge_n(j, at, q.n, WORK_BYTE);
                charge(j, at, WORK_ITEM);
                if (q.n <= s.n && !memcmp(ends ? s.s + s.n - q.n : s.s, q.s, q.n)) return vbool(1);
            }
            return vbool(0);
        }
        if (IS("split") || IS("rsplit"))
            return str_split(j, at, s, arg(a, 0, "sep", NONE), int_arg(j, at, arg(a, 1, "maxsplit", UNDEF), -1, "maxsplit"),
                             IS("rsplit"));
        if (IS("strip") || IS("lstrip") || IS("rstrip")) {
            val chars = arg(a, 0, "chars", NONE);
            if (chars.t != T_NONE) need_str(j, at, chars, "the characters to strip");
            return py_strip(j, at, s, chars, !IS("rstrip"), !IS("lstrip"));
        }
        if (IS("replace"))
            return str_replace(j, at, s, need_str(j, at, arg(a, 0, "old", UNDEF), "replace()'s old"),
                               need_str(j, at, arg(a, 1, "new", UNDEF), "replace()'s new"),
                               int_arg(j, at, arg(a, 2, "count", UNDEF), -1, "count"));
        if (IS("lower")) return str_case(j, s, 0);
        if (IS("upper")) return str_case(j, s, 1);
        if (IS("title")) return str_case(j, s, 2);
        if (IS("capitalize")) return str_case(j, s, 3);
        if (IS("find") || IS("rfind") || IS("count")) {
            val p = need_str(j, at, arg(a, 0, "sub", UNDEF), nm);
            charge_n(j, at, s.n, WORK_BYTE); /* the code point counts below */
            if (!p.n) return vint(IS("count") ? (int64_t)cp_count(s.s, s.n) + 1 : IS("find") ? 0 : (int64_t)cp_count(s.s, s.n));
            if (IS("count")) { /* non-overlapping, from the left */
                int64_t hits = 0;
                for (size_t i = find_fwd(j, at, s, 0, p); i < s.n; i = find_fwd(j, at, s, i + p.n, p)) hits++;
                return vint(hits);
            }
            size_t i = IS("find") ? find_fwd(j, at, s, 0, p) : find_back(j, at, s, s.n, p);
            if (i >= s.n) return vint(-1);
            return vint((int64_t)cp_count(s.s, i));
        }
        if (IS("join")) {
            jlist *l = iter_list(j, at, arg(a, 0, "iterable", UNDEF));
            sbuf o = {0};
            for (size_t i = 0; i < l->n; i++) {
                if (i) sput_v(j, &o, s);
                val x = need_str(j, at, l->v[i], "join()'s items");
                sput_v(j, &o, x);
            }
            return sval(j, &o);
        }
        if (IS("splitlines")) {
            jlist *l = new_list(j, 0);
            size_t st = 0;
            charge_n(j, at, s.n, WORK_BYTE);
            for (size_t i = 0; i < s.n; i++)
                if (s.s[i] == '\n' || s.s[i] == '\r') {
                    list_push(j, l, sub(j, s, st, i - st));
                    if (s.s[i] == '\r' && i + 1 < s.n && s.s[i + 1] == '\n') i++;
                    st = i + 1;
                }
            if (st < s.n) list_push(j, l, sub(j, s, st, s.n - st));
            return vlist(l);
        }
        /* is* predicates over ASCII classes */
        charge_n(j, at, s.n, WORK_BYTE);
        int ok = s.n > 0, cased = 0;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.s[i];
            int d = c >= '0' && c <= '9', lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
            int sp = c == ' ' || (c >= 9 && c <= 13);
            if (IS("isdigit")) ok &= d;
            else if (IS("isspace")) ok &= sp;
            else if (IS("isalpha")) ok &= lo || up;
            else if (IS("isalnum")) ok &= lo || up || d;
            else if (IS("islower")) ok &= !up, cased |= lo;
            else if (IS("isupper")) ok &= !lo, cased |= up;
        }
        if (IS("islower") || IS("isupper")) ok &= cased;
        return vbool(ok);
    }
    if (s.t == T_DICT) {
        if (IS("get")) {
            val *v = dict_get(j, s.d, arg(a, 0, "key", UNDEF));
            return v ? *v : arg(a, 1, "default", NONE);
        }
        jlist *l = new_list(j, s.d->n);
        for (size_t i = 0; i < s.d->n; i++) {
            if (IS("keys")) l->v[i] = s.d->k[i];
            else if (IS("values")) l->v[i] = s.d->v[i];
            else {
                jlist *p = new_list(j, 2);
                p->v[0] = s.d->k[i], p->v[1] = s.d->v[i], p->n = 2;
                l->v[i] = vlist(p);
                l->v[i].tuple = 1;
            }
        }
        l->n = s.d->n;
        return vlist(l);
    }
    if (s.t == T_LIST) {
        val x = arg(a, 0, "value", UNDEF);
        int64_t hits = 0;
        for (size_t i = 0; i < s.l->n; i++)
            if (equal(j, s.l->v[i], x, 0)) {
                if (IS("index")) return vint((int64_t)i);
                hits++;
            }
        if (IS("index")) jfail(j, at->line, at->col, "list.index(x): x not in list");
        return vint(hits);
    }
#undef IS
    jfail(j, at->line, at->col, "this value has no method '%.*s'", (int)nl, nm);
}

static val call_macro(J *j, const jnode *at, macro *m, const args *a, val caller) {
    jnode *d = m->def;
    if (++j->depth > j->max_depth)
        jfail(j, at->line, at->col, "macro calls nest more than %d deep (endless recursion?)", j->max_depth);
    frame *f = new_frame(j, m->closure);
    jlist *varargs = new_list(j, 0);
    jdict *kwargs = new_dict(j);
    for (int i = 0; i < a->np; i++) {
        if (i < d->nw) fset(j, f, d->kn[i], d->knl[i], a->pos[i]);
        else list_push(j, varargs, a->pos[i]);
    }
    charge_n(j, at, (uint64_t)a->nk * (uint64_t)d->nw, WORK_ENTRY);
    for (int k = 0; k < a->nk; k++) {
        int p;
        for (p = 0; p < d->nw; p++)
            if (d->knl[p] == a->knl[k] && !memcmp(d->kn[p], a->kn[k], a->knl[k])) break;
        if (p < d->nw) {
            if (p < a->np) jfail(j, at->line, at->col, "macro got multiple values for argument '%.*s'", (int)a->knl[k], a->kn[k]);
            fset(j, f, d->kn[p], d->knl[p], a->kw[k]);
        } else
            dict_set(j, kwargs, vstr(a->kn[k], a->knl[k]), a->kw[k]);
    }
    for (int p = a->np; p < d->nw; p++)
        if (!dict_gets(j, &f->vars, d->kn[p], d->knl[p]))
            fset(j, f, d->kn[p], d->knl[p], d->w[p] ? eval(j, f, d->w[p]) : undef_why(j, "parameter '%.*s' was not provided", d->kn[p], d->knl[p]));
    val vl = vlist(varargs);
    vl.tuple = 1;
    fset(j, f, "varargs", 7, vl);
    fset(j, f, "kwargs", 6, vdict(kwargs));
    if (caller.t == T_MACRO) fset(j, f, "caller", 6, caller);
    sbuf out = {0};
    int saved_ctl = j->ctl;
    exec_body(j, f, d->v, d->nv, &out);
    j->ctl = saved_ctl;
    j->depth--;
    return sval(j, &out);
}

static val call_func(J *j, const jnode *at, int fn, const args *a) {
    switch (fn) {
    case FN_RANGE: {
        int64_t x = int_arg(j, at, arg(a, 0, "start", UNDEF), 0, "range()'s argument");
        int64_t lo = 0, hi = x, st = 1;
        if (a->np >= 2) lo = x, hi = int_arg(j, at, a->pos[1], 0, "range()'s stop");
        if (a->np >= 3) st = int_arg(j, at, a->pos[2], 1, "range()'s step");
        if (st == 0) jfail(j, at->line, at->col, "range() arg 3 must not be zero");
        /* the length exactly, in unsigned arithmetic: hi - lo may not fit in int64 */
        uint64_t span = st > 0 ? (hi > lo ? (uint64_t)hi - (uint64_t)lo : 0) : (lo > hi ? (uint64_t)lo - (uint64_t)hi : 0);
        uint64_t step_abs = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
        uint64_t cnt = span ? (span - 1) / step_abs + 1 : 0;
        if (cnt > j->max_mem / sizeof(val)) jfail(j, at->line, at->col, "range() is too long");
        charge_n(j, at, cnt, WORK_ITEM);
        jlist *l = new_list(j, (size_t)cnt);
        /* lo + k * st stays within [lo, hi) for k < cnt: no step can overflow */
        for (uint64_t k = 0; k < cnt; k++) l->v[k] = vint((int64_t)((uint64_t)lo + k * (uint64_t)st));
        l->n = (size_t)cnt;
        return vlist(l);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d = new_dict(j);
        if (a->np >= 1 && a->pos[0].t == T_DICT)
            for (size_t i = 0; i < a->pos[0].d->n; i++) dict_set(j, d, a->pos[0].d->k[i], a->pos[0].d->v[i]);
        for (int k = 0; k < a->nk; k++) dict_set(j, d, vstr(a->kn[k], a->knl[k]), a->kw[k]);
        return (val){.t = fn == FN_NAMESPACE ? T_NS : T_DICT, .d = d};
    }
    case FN_RAISE: {
        val m = to_str(j, arg(a, 0, "message", UNDEF));
        jfail(j, at->line, at->col, "raise_exception: %.*s", (int)(m.n > 500 ? 500 : m.n), m.s);
    }
    case FN_STRFTIME: {
        val fmt = need_str(j, at, arg(a, 0, "format", UNDEF), "strftime_now()'s format");
        charge_n(j, at, fmt.n, WORK_BYTE);
        char *cf = jstrndup(j, fmt.s, fmt.n), out[512];
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t w = strftime(out, sizeof out, cf, &tm);
        return vstr(jstrndup(j, out, w), w);
    }
    }
    jfail(j, at->line, at->col, "unknown function");
}

static val call_value(J *j, frame *f, const jnode *at, val fn, const args *a, val caller) {
    (void)f;
    switch (fn.t) {
    case T_MACRO: return call_macro(j, at, fn.m, a, caller);
    case T_METHOD: return call_method(j, at, fn.me, a);
    case T_FUNC: return call_func(j, at, fn.fn, a);
    case T_UNDEF: fail_undef(j, at, fn);
    default: jfail(j, at->line, at->col, "'%s' object is not callable", type_name(fn));
    }
}

/* ---- tests ---- */
static int apply_test(J *j, const jnode *at, const char *nm, size_t nl, val x, const args *a) {
#define IS(s) (nl == strlen(s) && !memcmp(nm, s, nl))
    val y = arg(a, 0, "value", UNDEF);
    if (IS("defined")) return x.t != T_UNDEF;
    if (IS("undefined")) return x.t == T_UNDEF;
    if (IS("none")) return x.t == T_NONE;
    if (IS("boolean")) return x.t == T_BOOL;
    if (IS("true")) return x.t == T_BOOL && x.i;
    if (IS("false")) return x.t == T_BOOL && !x.i;
    if (IS("string")) return x.t == T_STR;
    if (IS("number")) return is_num(x);
    if (IS("integer")) return x.t == T_INT;
    if (IS("float")) return x.t == T_FLOAT;
    if (IS("mapping")) return x.t == T_DICT;
    if (IS("sequence")) return x.t == T_STR || x.t == T_LIST || x.t == T_DICT || x.t == T_UNDEF;
    if (IS("iterable")) return x.t == T_STR || x.t == T_LIST || x.t == T_DICT || x.t == T_UNDEF;
    if (IS("callable")) return x.t == T_MACRO || x.t == T_METHOD || x.t == T_FUNC;
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (x.t != T_INT && x.t != T_BOOL) jfail(j, at->line, at->col, "test '%.*s' needs an integer, not %s", (int)nl, nm, type_name(x));
        if (IS("divisibleby")) {
            int64_t d = int_arg(j, at, y, 0, "divisibleby's argument");
            if (!d) jfail(j, at->line, at->col, "modulo by zero");
            return d == -1 || x.i % d == 0; /* (INT64_MIN % -1 traps) */
        }
        return (x.i % 2 != 0) == IS("odd");
    }
    if (IS("eq") || IS("equalto") || IS("==")) return equal(j, x, y, 0);
    if (IS("ne") || IS("!=")) return !equal(j, x, y, 0);
    if (IS("lt") || IS("lessthan") || IS("<")) return order(j, at, x, y, "<") < 0;
    if (IS("le") || IS("<=")) return order(j, at, x, y, "<=") <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return order(j, at, x, y, ">") > 0;
    if (IS("ge") || IS(">=")) return order(j, at, x, y, ">=") >= 0;
    if (IS("in")) return contains(j, at, x, y);
    if (IS("sameas")) {
        if (x.t != y.t) return 0;
        if (x.t == T_NONE || x.t == T_UNDEF) return 1;
        if (x.t == T_BOOL || x.t == T_INT) return x.i == y.i;
        if (x.t == T_LIST) return x.l == y.l;
        if (x.t == T_DICT || x.t == T_NS) return x.d == y.d;
        if (x.t == T_STR) return x.s == y.s && x.n == y.n;
        return equal(j, x, y, 0);
    }
    if (IS("lower") || IS("upper")) {
        if (x.t != T_STR) return 0;
        charge_n(j, at, x.n, WORK_BYTE);
        for (size_t i = 0; i < x.n; i++)
            if (IS("lower") ? (x.s[i] >= 'A' && x.s[i] <= 'Z') : (x.s[i] >= 'a' && x.s[i] <= 'z')) return 0;
        return 1;
    }
#undef IS
    jfail(j, at->line, at->col, "no test named '%.*s'", (int)(nl > 40 ? 40 : nl), nm);
}

/* "a.b.0" as jinja2's attribute getter: item lookups, digits as indices */
static val attr_path(J *j, const jnode *at, val x, val path) {
    need_str(j, at, path, "the attribute");
    charge_n(j, at, path.n, WORK_BYTE);
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.s[e] != '.') e++;
        int digits = e > i;
        int64_t k = 0;
        for (size_t q = i; q < e; q++) {
            if (path.s[q] < '0' || path.s[q] > '9' || k > (INT64_MAX - 9) / 10) digits = 0;
            else k = k * 10 + (path.s[q] - '0');
        }
        if (x.t == T_UNDEF) return x;
        x = get_item(j, at, x, digits ? vint(k) : vstr(path.s + i, e - i));
        i = e + 1;
    }
    return x;
}

static args sub_args(const args *a, int from) {
    args s = *a;
    s.pos = a->np > from ? a->pos + from : NULL;
    s.np = a->np > from ? a->np - from : 0;
    return s;
}

static val apply_filter(J *j, frame *f, const jnode *at, const char *nm, size_t nl, val x, const args *a);

/* the sort filter: a stable merge sort (n log n comparisons, each charged
 * by order()) on keys computed once: the attribute, strings lowercased */
static val sort_items(J *j, const jnode *at, val x, int rev, val attr) {
    jlist *in = iter_list(j, at, x);
    size_t n = in->n;
    jlist *out = new_list(j, n);
    if (!n) return vlist(out);
    val *key = jalloc(j, n * sizeof *key);
    size_t *ix = jalloc(j, n * sizeof *ix), *tmp = jalloc(j, n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) {
        val k = attr.t == T_NONE ? in->v[i] : attr_path(j, at, in->v[i], attr);
        key[i] = k.t == T_STR ? str_case(j, k, 0) : k;
        ix[i] = i;
    }
    for (size_t w = 1; w < n; w *= 2)
        for (size_t lo = 0; lo < n - w; lo += 2 * w) {
            size_t mid = lo + w, hi = mid + w < n ? mid + w : n, p = lo, q = mid, o = 0;
            while (p < mid && q < hi) {
                int c = order(j, at, key[ix[q]], key[ix[p]], "<");
                /* take from the right only when strictly before: stable */
                if (rev ? c > 0 : c < 0) tmp[o++] = ix[q++];
                else tmp[o++] = ix[p++];
            }
            while (p < mid) tmp[o++] = ix[p++];
            while (q < hi) tmp[o++] = ix[q++];
            memcpy(ix + lo, tmp, o * sizeof *ix);
        }
    for (size_t i = 0; i < n; i++) out->v[i] = in->v[ix[i]];
    out->n = n;
    return vlist(out);
}

/* select / reject / selectattr / rejectattr */
static val select_items(J *j, const jnode *at, val x, const args *a, int by_attr, int keep) {
    jlist *in = iter_list(j, at, x), *out = new_list(j, 0);
    val attr = by_attr ? arg(a, 0, "attribute", UNDEF) : UNDEF;
    int ti = by_attr ? 1 : 0;
    val test = a->np > ti ? a->pos[ti] : UNDEF;
    if (test.t != T_UNDEF) need_str(j, at, test, "the test name");
    args targs = sub_args(a, ti + 1);
    targs.nk = 0;
    for (size_t i = 0; i < in->n; i++) {
        step(j, at);
        val v = by_attr ? attr_path(j, at, in->v[i], attr) : in->v[i];
        int ok = test.t == T_UNDEF ? truthy(v) : apply_test(j, at, test.s, test.n, v, &targs);
        if (ok == keep) list_push(j, out, in->v[i]);
    }
    return vlist(out);
}

/* ---- the filters: one function each, found by name in filters[] ---- */
/* k: which of the names sharing a function was used (its index in the row) */
#define FILTER(name) static val name(J *j, frame *f, const jnode *at, val x, const args *a, int k)

FILTER(f_default) {
    int boolean = truthy(arg(a, 1, "boolean", vbool(0)));
    if (x.t == T_UNDEF || (boolean && !truthy(x))) return arg(a, 0, "default_value", vstr("", 0));
    return x;
}

FILTER(f_safe) { return x; }

FILTER(f_length) {
    switch (x.t) {
    case T_UNDEF: return vint(0);
    case T_STR: charge_n(j, at, x.n, WORK_BYTE); return vint((int64_t)cp_count(x.s, x.n));
    case T_LIST: return vint((int64_t)x.l->n);
    case T_DICT: case T_NS: return vint((int64_t)x.d->n);
    default: jfail(j, at->line, at->col, "object of type '%s' has no len()", type_name(x));
    }
}

FILTER(f_tojson) {
    val ind = arg(a, 0, "indent", NONE);
    int indent = -1;
    if (ind.t != T_NONE) {
        int64_t v = int_arg(j, at, ind, 0, "tojson's indent");
        indent = v < 0 ? 0 : v > 64 ? 64 : (int)v;
    }
    sbuf b = {0};
    put_json(j, at, &b, x, indent, 0, truthy(arg(a, -1, "ensure_ascii", vbool(0))), truthy(arg(a, -1, "sort_keys", vbool(0))));
    return sval(j, &b);
}

FILTER(f_string) { return to_str(j, x); }

FILTER(f_trim) {
    if (x.t == T_UNDEF) return vstr("", 0);
    val chars = arg(a, 0, "chars", NONE);
    if (chars.t != T_NONE) need_str(j, at, chars, "trim's characters");
    return py_strip(j, at, to_str(j, x), chars, 1, 1);
}

/* lower, upper, title, capitalize: str_case's modes 0..3 */
FILTER(f_case) { return str_case(j, to_str(j, x), k); }

FILTER(f_replace) {
    val s = to_str(j, x);
    return str_replace(j, at, s, to_str(j, arg(a, 0, "old", UNDEF)), to_str(j, arg(a, 1, "new", UNDEF)),
                       int_arg(j, at, arg(a, 2, "count", UNDEF), -1, "count"));
}

FILTER(f_items) {
    if (x.t == T_UNDEF) return vlist(new_list(j, 0));
    if (x.t != T_DICT) jfail(j, at->line, at->col, "can only get item pairs from a mapping, not %s", type_name(x));
    method m = {x, "items", 5};
    args none = {0};
    return call_method(j, at, &m, &none);
}

FILTER(f_list) {
    jlist *l = iter_list(j, at, x), *c = new_list(j, l->n);
    if (l->n) memcpy(c->v, l->v, l->n * sizeof(val)); /* an empty list may hold no array */
    c->n = l->n;
    return vlist(c);
}

/* first (k 0), last (k 1) */
FILTER(f_first_last) {
    jlist *l = iter_list(j, at, x);
    if (!l->n) return undef_why(j, "no first / last item of an empty sequence%.*s", "", 0);
    return l->v[k == 0 ? 0 : l->n - 1];
}

FILTER(f_reverse) {
    if (x.t == T_STR) return do_slice(j, at, x, UNDEF, UNDEF, vint(-1));
    jlist *l = iter_list(j, at, x), *c = new_list(j, l->n);
    for (size_t i = 0; i < l->n; i++) c->v[i] = l->v[l->n - 1 - i];
    c->n = l->n;
    return vlist(c);
}

FILTER(f_join) {
    jlist *l = iter_list(j, at, x);
    val sep = to_str(j, arg(a, 0, "d", vstr("", 0))), attr = arg(a, 1, "attribute", NONE);
    sbuf o = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i) sput_v(j, &o, sep);
        val v = attr.t == T_NONE ? l->v[i] : attr_path(j, at, l->v[i], attr);
        put_str(j, &o, v, 0);
    }
    return sval(j, &o);
}

/* selectattr (k 0), rejectattr (k 1) */
FILTER(f_selectattr) { return select_items(j, at, x, a, 1, k == 0); }
/* select (k 0), reject (k 1) */
FILTER(f_select) { return select_items(j, at, x, a, 0, k == 0); }

FILTER(f_map) {
    jlist *in = iter_list(j, at, x), *out = new_list(j, in->n);
    val attr = arg(a, -1, "attribute", UNDEF);
    if (attr.t != T_UNDEF) {
        val def = arg(a, -1, "default", UNDEF);
        for (size_t i = 0; i < in->n; i++) {
            val v = attr_path(j, at, in->v[i], attr);
            out->v[out->n++] = v.t == T_UNDEF && def.t != T_UNDEF ? def : v;
        }
    } else {
        val fname = need_str(j, at, arg(a, 0, "filter", UNDEF), "map's filter name");
        args rest = sub_args(a, 1);
        for (size_t i = 0; i < in->n; i++) {
            step(j, at);
            out->v[out->n++] = apply_filter(j, f, at, fname.s, fname.n, in->v[i], &rest);
        }
    }
    return vlist(out);
}

FILTER(f_unique) {
    jlist *in = iter_list(j, at, x), *out = new_list(j, 0);
    for (size_t i = 0; i < in->n; i++) {
        step(j, at);
        int seen = 0;
        for (size_t q = 0; q < out->n && !seen; q++) seen = equal(j, out->v[q], in->v[i], 0);
        if (!seen) list_push(j, out, in->v[i]);
    }
    return vlist(out);
}

FILTER(f_sort) { return sort_items(j, at, x, truthy(arg(a, 0, "reverse", vbool(0))), arg(a, 2, "attribute", NONE)); }

FILTER(f_int) {
    if (x.t == T_INT) return x;
    if (x.t == T_BOOL) return vint(x.i);
    if (x.t == T_FLOAT && isfinite(x.f) && fabs(x.f) < 9e18) return vint((int64_t)x.f);
    if (x.t == T_STR) {
        char *s = jstrndup(j, x.s, x.n), *e;
        long long v = strtoll(s, &e, 10);
        while (*e == ' ' || *e == '\n' || *e == '\t') e++;
        if (e != s && !*e) return vint(v);
    }
    return arg(a, 0, "default", vint(0));
}

FILTER(f_float) {
    if (x.t == T_FLOAT) return x;
    if (x.t == T_INT || x.t == T_BOOL) return vfloat((double)x.i);
    if (x.t == T_STR) {
        char *s = jstrndup(j, x.s, x.n), *e;
        double v = strtod(s, &e);
        if (e != s && !*e) return vfloat(v);
    }
    return arg(a, 0, "default", vfloat(0));
}

FILTER(f_abs) {
    if (x.t == T_INT || x.t == T_BOOL) return x.i == INT64_MIN ? vfloat(9.223372036854775808e18) : vint(x.i < 0 ? -x.i : x.i);
    if (x.t == T_FLOAT) return vfloat(fabs(x.f));
    jfail(j, at->line, at->col, "bad operand type for abs(): '%s'", type_name(x));
}

FILTER(f_indent) {
    val s = to_str(j, x), w = arg(a, 0, "width", vint(4));
    int first = truthy(arg(a, 1, "first", vbool(0))), blank = truthy(arg(a, 2, "blank", vbool(0)));
    val ind = w.t == T_STR ? w : UNDEF;
    sbuf pad = {0};
    if (ind.t != T_STR) {
        int64_t n = int_arg(j, at, w, 4, "indent's width");
        for (int64_t i = 0; i < n && i < 256; i++) sput(j, &pad, " ", 1);
        ind = sval(j, &pad);
    }
    /* jinja2: lines = (s + "\n").splitlines(); the first as is, the others indented
     * when not empty (or always, blank=True), joined with "\n" */
    sbuf o = {0};
    if (first) sput_v(j, &o, ind);
    size_t st = 0;
    for (size_t i = 0, line = 0; i <= s.n; i++) {
        if (i < s.n && s.s[i] != '\n') continue;
        if (line++) {
            sput(j, &o, "\n", 1);
            if (blank || i > st) sput_v(j, &o, ind);
        }
        sput_v(j, &o, sub(j, s, st, i - st));
        st = i + 1;
    }
    return sval(j, &o);
}

FILTER(f_escape) {
    val s = to_str(j, x);
    sbuf o = {0};
    for (size_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        if (c == '&') sputs(j, &o, "&amp;");
        else if (c == '<') sputs(j, &o, "&lt;");
        else if (c == '>') sputs(j, &o, "&gt;");
        else if (c == '"') sputs(j, &o, "&#34;");
        else if (c == '\'') sputs(j, &o, "&#39;");
        else sput(j, &o, &c, 1);
    }
    return mark_as(sval(j, &o), s);
}

FILTER(f_sum) {
    jlist *l = iter_list(j, at, x);
    val attr = arg(a, 0, "attribute", NONE), acc = arg(a, 1, "start", vint(0));
    for (size_t i = 0; i < l->n; i++) acc = arith(j, at, "+", acc, attr.t == T_NONE ? l->v[i] : attr_path(j, at, l->v[i], attr));
    return acc;
}

/* min (k 0), max (k 1) */
FILTER(f_min_max) {
    jlist *l = iter_list(j, at, x);
    if (!l->n) return undef_why(j, "no min / max of an empty sequence%.*s", "", 0);
    val best = l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        int c = order(j, at, l->v[i], best, "<");
        if (k == 0 ? c < 0 : c > 0) best = l->v[i];
    }
    return best;
}

FILTER(f_wordcount) {
    val s = to_str(j, x);
    charge_n(j, at, s.n, WORK_BYTE);
    int64_t n = 0;
    int in_word = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.s[i];
        int w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
        if (w && !in_word) n++;
        in_word = w;
    }
    return vint(n);
}
#undef FILTER

/* the filters this renderer has: up to four names for one function, the
 * index of the name used passed to it (f_case: str_case's mode) */
static const struct {
    const char *names[4];
    val (*fn)(J *j, frame *f, const jnode *at, val x, const args *a, int k);
} filters[] = {
    {{"default", "d"}, f_default},
    {{"safe"}, f_safe},
    {{"length", "count"}, f_length},
    {{"tojson"}, f_tojson},
    {{"string"}, f_string},
    {{"trim"}, f_trim},
    {{"lower", "upper", "title", "capitalize"}, f_case},
    {{"replace"}, f_replace},
    {{"items"}, f_items},
    {{"list"}, f_list},
    {{"first", "last"}, f_first_last},
    {{"reverse"}, f_reverse},
    {{"join"}, f_join},
    {{"selectattr", "rejectattr"}, f_selectattr},
    {{"select", "reject"}, f_select},
    {{"map"}, f_map},
    {{"unique"}, f_unique},
    {{"sort"}, f_sort},
    {{"int"}, f_int},
    {{"float"}, f_float},
    {{"abs"}, f_abs},
    {{"indent"}, f_indent},
    {{"escape", "e"}, f_escape},
    {{"sum"}, f_sum},
    {{"min", "max"}, f_min_max},
    {{"wordcount"}, f_wordcount},
};

static val apply_filter(J *j, frame *f, const jnode *at, const char *nm, size_t nl, val x, const args *a) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        for (int k = 0; k < 4 && filters[i].names[k]; k++)
            if (nl == strlen(filters[i].names[k]) && !memcmp(nm, filters[i].names[k], nl))
                return filters[i].fn(j, f, at, x, a, k);
    jfail(j, at->line, at->col, "no filter named '%.*s'", (int)(nl > 40 ? 40 : nl), nm);
}

/* ---- expressions ---- */
static val eval_node(J *j, frame *f, jnode *n);
static val eval(J *j, frame *f, jnode *n) {
    step(j, n);
    nest_in(j, n);
    const jnode *saved = j->at;
    j->at = n;
    val v = eval_node(j, f, n);
    j->at = saved;
    j->nest--;
    return v;
}
static val eval_node(J *j, frame *f, jnode *n) {
    switch (n->k) {
    case E_LIT: return n->lit;
    case E_NAME: {
        val *v = lookup(j, f, n->name, n->nlen);
        return v ? *v : undef_why(j, "'%.*s' is undefined", n->name, n->nlen);
    }
    case E_ATTR: return get_attr(j, n, eval(j, f, n->a), n->name, n->nlen);
    case E_ITEM: {
        val o = eval(j, f, n->a);
        return get_item(j, n, o, eval(j, f, n->b));
    }
    case E_SLICE: {
        val o = eval(j, f, n->a);
        val a = n->b ? eval(j, f, n->b) : NONE, b = n->c ? eval(j, f, n->c) : NONE, c = n->d ? eval(j, f, n->d) : NONE;
        return do_slice(j, n, o, a, b, c);
    }
    case E_CALL: {
        val fn = eval(j, f, n->a);
        args a;
        eval_args(j, f, n, &a);
        return call_value(j, f, n, fn, &a, UNDEF);
    }
    case E_FILTER: {
        val x = eval(j, f, n->a);
        args a;
        eval_args(j, f, n, &a);
        return apply_filter(j, f, n, n->name, n->nlen, x, &a);
    }
    case E_TEST: {
        val x = eval(j, f, n->a);
        args a;
        eval_args(j, f, n, &a);
        return vbool(apply_test(j, n, n->name, n->nlen, x, &a) != n->neg);
    }
    case E_NEG: case E_POS: {
        val x = eval(j, f, n->a);
        if (x.t == T_UNDEF) fail_undef(j, n, x);
        if (n->k == E_POS && is_num(x)) return x.t == T_BOOL ? vint(x.i) : x;
        if (x.t == T_FLOAT) return vfloat(-x.f);
        if (x.t == T_INT || x.t == T_BOOL) {
            if (x.i == INT64_MIN) jfail(j, n->line, n->col, "integer overflow in unary '-'");
            return vint(n->k == E_NEG ? -x.i : x.i);
        }
        jfail(j, n->line, n->col, "bad operand type for unary %c: '%s'", n->k == E_NEG ? '-' : '+', type_name(x));
    }
    case E_NOT: return vbool(!truthy(eval(j, f, n->a)));
    case E_AND: {
        val a = eval(j, f, n->a);
        return truthy(a) ? eval(j, f, n->b) : a;
    }
    case E_OR: {
        val a = eval(j, f, n->a);
        return truthy(a) ? a : eval(j, f, n->b);
    }
    case E_BIN: {
        val a = eval(j, f, n->a);
        val b = eval(j, f, n->b);
        char op[4];
        snprintf(op, sizeof op, "%.*s", (int)n->nlen, n->name);
        return arith(j, n, op, a, b);
    }
    case E_CMP: {
        val a = eval(j, f, n->a);
        for (int i = 0; i < n->nv; i++) {
            val b = eval(j, f, n->v[i]);
            const char *op = n->kn[i];
            size_t ol = n->knl[i];
            int r;
            if (ol == 2 && !memcmp(op, "==", 2)) r = equal(j, a, b, 0);
            else if (ol == 2 && !memcmp(op, "!=", 2)) r = !equal(j, a, b, 0);
            else if (ol == 2 && !memcmp(op, "in", 2)) r = contains(j, n, a, b);
            else if (ol == 5) r = !contains(j, n, a, b);
            else {
                char o[4];
                snprintf(o, sizeof o, "%.*s", (int)ol, op);
                int c = order(j, n, a, b, o);
                r = o[0] == '<' ? (o[1] ? c <= 0 : c < 0) : (o[1] ? c >= 0 : c > 0);
            }
            if (!r) return vbool(0);
            a = b;
        }
        return vbool(1);
    }
    case E_COND:
        if (truthy(eval(j, f, n->b))) return eval(j, f, n->a);
        return n->c ? eval(j, f, n->c) : undef_is("the conditional expression has no else branch");
    case E_LIST: case E_TUPLE: {
        jlist *l = new_list(j, (size_t)n->nv);
        for (int i = 0; i < n->nv; i++) l->v[l->n++] = eval(j, f, n->v[i]);
        val r = vlist(l);
        r.tuple = n->k == E_TUPLE;
        return r;
    }
    case E_DICT: {
        jdict *d = new_dict(j);
        for (int i = 0; i < n->nv; i++) {
            val k = eval(j, f, n->v[i]);
            if (k.t == T_LIST && !k.tuple) jfail(j, n->line, n->col, "unhashable type: 'list'");
            if (k.t == T_DICT || k.t == T_UNDEF) jfail(j, n->line, n->col, "unhashable type: '%s'", type_name(k));
            dict_set(j, d, k, eval(j, f, n->w[i]));
        }
        return vdict(d);
    }
    }
    jfail(j, n->line, n->col, "cannot evaluate this node");
}

/* ---- statements ---- */
static void assign(J *j, frame *f, jnode *target, val v, int is_set) {
    if (target->k == E_NAME) {
        fset(j, f, target->name, target->nlen, v);
        return;
    }
    if (target->k == E_ATTR) {
        val o = eval(j, f, target->a);
        if (o.t != T_NS) jfail(j, target->line, target->col, "cannot assign attribute on non-namespace object");
        dict_set(j, o.d, vstr(target->name, target->nlen), v);
        return;
    }
    /* a tuple of targets */
    jlist *items = iter_list(j, target, v);
    if ((int)items->n != target->nv)
        jfail(j, target->line, target->col, "%s unpack %zu values into %d names", items->n > (size_t)target->nv ? "too many values to" : "not enough values to",
              items->n, target->nv);
    for (int i = 0; i < target->nv; i++) assign(j, f, target->v[i], items->v[i], is_set);
}

static void exec_for(J *j, frame *f, jnode *n, sbuf *out) {
    val it = eval(j, f, n->b);
    if (it.t == T_NONE) jfail(j, n->b->line, n->b->col, "'NoneType' object is not iterable");
    jlist *items = iter_list(j, n->b, it);
    frame *lf = new_frame(j, f);
    if (n->c) { /* the loop's if filter, with the target bound */
        jlist *kept = new_list(j, 0);
        for (size_t i = 0; i < items->n; i++) {
            assign(j, lf, n->a, items->v[i], 0);
            if (truthy(eval(j, lf, n->c))) list_push(j, kept, items->v[i]);
        }
        items = kept;
    }
    if (!items->n) {
        if (n->nw) exec_body(j, lf, n->w, n->nw, out);
        return;
    }
    jdict *loop = new_dict(j);
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                       "previtem", "nextitem", "depth", "depth0"};
    for (int k = 0; k < 11; k++) dict_set(j, loop, vcstr(keys[k]), UNDEF);
    int64_t len = (int64_t)items->n;
    frame *it_f = new_frame(j, f);
    for (int64_t i = 0; i < len; i++) {
        step(j, n); /* an empty body still costs a step per item */
        val *lv = loop->v;
        lv[0] = vint(i + 1), lv[1] = vint(i), lv[2] = vint(len - i), lv[3] = vint(len - i - 1);
        lv[4] = vbool(i == 0), lv[5] = vbool(i == len - 1), lv[6] = vint(len);
        lv[7] = i > 0 ? items->v[i - 1] : undef_is("there is no previous item");
        lv[8] = i + 1 < len ? items->v[i + 1] : undef_is("there is no next item");
        lv[9] = vint(1), lv[10] = vint(0);
        /* each iteration has its own scope: a set in the body does not
         * reach the next iteration (jinja2's rule; namespaces are how
         * templates carry state across); its storage is reused */
        it_f->vars.n = 0;
        assign(j, it_f, n->a, items->v[i], 0);
        fset(j, it_f, "loop", 4, vdict(loop));
        exec_body(j, it_f, n->v, n->nv, out);
        if (j->ctl == 1) {
            j->ctl = 0;
            break;
        }
        j->ctl = 0;
    }
}

static void exec_stmt(J *j, frame *f, jnode *n, sbuf *out);
static void exec_node(J *j, frame *f, jnode *n, sbuf *out) {
    step(j, n);
    nest_in(j, n);
    const jnode *saved = j->at;
    j->at = n;
    exec_stmt(j, f, n, out);
    j->at = saved;
    j->nest--;
}
static void exec_stmt(J *j, frame *f, jnode *n, sbuf *out) {
    switch (n->k) {
    case S_DATA: emit(j, n, out, n->lit); return;
    case S_OUT: emit(j, n, out, eval(j, f, n->a)); return;
    case S_IF:
        if (truthy(eval(j, f, n->a))) exec_body(j, f, n->v, n->nv, out);
        else exec_body(j, f, n->w, n->nw, out);
        return;
    case S_FOR: exec_for(j, f, n, out); return;
    case S_SET: assign(j, f, n->a, eval(j, f, n->b), 1); return;
    case S_SETBLOCK: {
        sbuf b = {0};
        exec_body(j, f, n->v, n->nv, &b);
        val v = sval(j, &b);
        if (n->b) {
            n->c->lit = v;
            v = eval(j, f, n->b);
        }
        fset(j, f, n->a->name, n->a->nlen, v);
        return;
    }
    case S_MACRO: {
        macro *m = jalloc(j, sizeof *m);
        m->def = n, m->closure = f;
        fset(j, f, n->name, n->nlen, (val){.t = T_MACRO, .m = m});
        return;
    }
    case S_CALL: {
        macro *c = jalloc(j, sizeof *c);
        c->def = n, c->closure = f;
        jnode *call = n->a;
        val fn = eval(j, f, call->a);
        args a;
        eval_args(j, f, call, &a);
        emit(j, n, out, call_value(j, f, call, fn, &a, (val){.t = T_MACRO, .m = c}));
        return;
    }
    case S_FILTER: {
        sbuf b = {0};
        exec_body(j, f, n->v, n->nv, &b);
        n->c->lit = sval(j, &b);
        emit(j, n, out, eval(j, f, n->b));
        return;
    }
    case S_BODY: exec_body(j, f, n->v, n->nv, out); return;
    case S_BREAK: j->ctl = 1; return;
    case S_CONTINUE: j->ctl = 2; return;
    }
}

static void exec_body(J *j, frame *f, jnode **body, int n, sbuf *out) {
    for (int i = 0; i < n && !j->ctl; i++) exec_node(j, f, body[i], out);
}

/* ================================================================ entry points */

/* data: the strings are the data's (mark 1) */
static val from_json(J *j, const json_t *v, int depth, int data) {
    if (depth > 200) jfail(j, 0, 0, "a variable nests more than 200 levels deep");
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        jdict *d = new_dict(j);
        const char *k;
        json_t *x;
        /* a JSON object's keys are distinct: appended without a lookup */
        json_object_foreach((json_t *)v, k, x) {
            val key = vcstr(k);
            key.mark = data && key.n ? 1 : 0;
            dict_append(j, d, key, from_json(j, x, depth + 1, data));
        }
        return vdict(d);
    }
    case JSON_ARRAY: {
        jlist *l = new_list(j, json_array_size(v));
        for (size_t i = 0; i < json_array_size(v); i++) l->v[l->n++] = from_json(j, json_array_get(v, i), depth + 1, data);
        return vlist(l);
    }
    case JSON_STRING: {
        val s = vstr(json_string_value(v), json_string_length(v));
        s.mark = data && s.n ? 1 : 0;
        return s;
    }
    case JSON_INTEGER: return vint(json_integer_value(v));
    case JSON_REAL: return vfloat(json_real_value(v));
    case JSON_TRUE: return vbool(1);
    case JSON_FALSE: return vbool(0);
    default: return NONE;
    }
}

void rf_jinja_limits_default(rf_jinja_limits *lim) {
    lim->max_output = 16u << 20;
    lim->max_steps = 10000000;
    lim->max_depth = 100;
    lim->max_memory = (size_t)256 << 20;
}

static J *new_j(const rf_jinja_limits *lim) {
    J *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->max_mem = lim->max_memory, j->max_steps = lim->max_steps > 0 ? lim->max_steps : 0;
    j->max_out = lim->max_output, j->max_depth = lim->max_depth;
    j->max_work = (uint64_t)j->max_steps > UINT64_MAX / WORK_STEP ? UINT64_MAX : (uint64_t)j->max_steps * WORK_STEP;
    return j;
}

static void free_chunks(J *j) {
    for (chunk *c = j->chunks, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    j->chunks = NULL;
}

/* Lex and parse into *body; the source copy has jinja2's newline rules applied. */
static void parse_template(J *j, const char *src, size_t len, jnode ***body, int *nb) {
    /* \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False) */
    char *s = jalloc(j, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    lexer L = {.j = j, .s = s, .n = n};
    lex(&L);
    parser P = {.j = j, .t = L.t};
    const char *ended;
    *body = parse_body(&P, NULL, nb, &ended, NULL);
}

char *rf_jinja_render(const char *src, size_t len, const json_t *vars, const rf_jinja_limits *lim, size_t *out_len) {
    return rf_jinja_render_data(src, len, vars, NULL, lim, out_len, NULL, NULL);
}

char *rf_jinja_render_data(const char *src, size_t len, const json_t *vars, const json_t *data,
                           const rf_jinja_limits *lim, size_t *out_len, rf_text_span **spans, size_t *n_spans) {
    if (spans) *spans = NULL, *n_spans = 0;
    rf_jinja_limits dl;
    if (!lim) rf_jinja_limits_default(&dl), lim = &dl;
    J *j = new_j(lim);
    if (!j) return rf_set_error("out of memory"), NULL;
    char *result = NULL;
    if (setjmp(j->jb)) {
        rf_set_error("%s", j->err);
        free_chunks(j);
        free(j);
        return NULL;
    }
    jnode **body;
    int nb;
    parse_template(j, src, len, &body, &nb);
    frame *root = new_frame(j, NULL);
    fset(j, root, "range", 5, (val){.t = T_FUNC, .fn = FN_RANGE});
    fset(j, root, "namespace", 9, (val){.t = T_FUNC, .fn = FN_NAMESPACE});
    fset(j, root, "dict", 4, (val){.t = T_FUNC, .fn = FN_DICT});
    fset(j, root, "raise_exception", 15, (val){.t = T_FUNC, .fn = FN_RAISE});
    fset(j, root, "strftime_now", 12, (val){.t = T_FUNC, .fn = FN_STRFTIME});
    if (vars && json_is_object(vars)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)vars, k, x) fset(j, root, k, strlen(k), from_json(j, x, 0, 0));
    }
    if (data && json_is_object(data)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)data, k, x) fset(j, root, k, strlen(k), from_json(j, x, 0, 1));
    }
    frame *top = new_frame(j, root); /* the template's own variables shadow the globals */
    sbuf out = {0};
    exec_body(j, top, body, nb, &out);
    result = malloc(out.n + 1);
    if (!result) {
        rf_set_error("out of memory");
    } else {
        if (out.n) memcpy(result, out.p, out.n);
        result[out.n] = 0;
        if (out_len) *out_len = out.n;
        if (spans && out.nsp) {
            *spans = malloc(out.nsp * sizeof **spans);
            if (!*spans) {
                free(result);
                result = NULL;
                rf_set_error("out of memory");
            } else {
                for (size_t i = 0; i < out.nsp; i++) (*spans)[i] = (rf_text_span){out.sp[2 * i], out.sp[2 * i + 1]};
                *n_spans = out.nsp;
            }
        }
    }
    free_chunks(j);
    free(j);
    return result;
}

int rf_jinja_check(const char *src, size_t len) {
    rf_jinja_limits lim;
    rf_jinja_limits_default(&lim);
    J *j = new_j(&lim);
    if (!j) return rf_set_error("out of memory"), -1;
    if (setjmp(j->jb)) {
        rf_set_error("%s", j->err);
        free_chunks(j);
        free(j);
        return -1;
    }
    jnode **body;
    int nb;
    parse_template(j, src, len, &body, &nb);
    free_chunks(j);
    free(j);
    return 0;
}
