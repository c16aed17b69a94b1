/* pyfunc.c - see pyfunc.h. A lexer, a recursive-descent parser building a
 * small AST in an array, and a tree-walking evaluator. */
#include "tasks/pyfunc.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define MAX_SRC 4096
#define MAX_TOK 1024
#define MAX_NODES 1024
#define MAX_VARS 16
#define MAX_STMTS 64
#define MAX_ARGS 8
#define MAX_DEPTH 64

/* ---- lexer ---- */
typedef enum { T_END, T_NEWLINE, T_INT, T_NAME, T_OP } tok_kind;
typedef struct {
    tok_kind kind;
    int64_t ival;
    char text[24]; /* name or operator */
} token;

/* ---- AST ---- */
typedef enum {
    N_NUM, N_VAR, N_NEG, N_NOT, N_AND, N_OR, N_IF, N_CALL,
    N_ADD, N_SUB, N_MUL, N_FLOORDIV, N_MOD, N_POW,
    N_LT, N_LE, N_GT, N_GE, N_EQ, N_NE
} node_kind;

typedef struct {
    node_kind kind;
    int64_t val;           /* N_NUM: literal; N_VAR: slot; N_CALL: 0 abs 1 min 2 max */
    int a, b, c;           /* children (node indices); N_IF: a if b else c */
    int args[MAX_ARGS], n_args; /* N_CALL */
} node;

typedef struct {
    int slot;  /* variable assigned, or -1 for return */
    int expr;
} stmt;

struct rf_pyfunc {
    node nodes[MAX_NODES];
    int n_nodes;
    stmt stmts[MAX_STMTS];
    int n_stmts;
    int n_vars; /* slot 0 is the parameter */
};

typedef struct {
    token toks[MAX_TOK];
    int n, at;
    char names[MAX_VARS][24];
    int depth;
    rf_pyfunc *f;
    char *err;
    size_t err_len;
    int failed;
} parser;

static int fail(parser *p, const char *fmt, ...) {
    if (!p->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, p->err_len, fmt, ap);
        va_end(ap);
    }
    p->failed = 1;
    return -1;
}

static const char *const ops[] = {
    "**", "//", "==", "!=", "<=", ">=", "+=", "-=", "*=", "%=", "//=",
    "+", "-", "*", "%", "<", ">", "(", ")", ",", ":", "=", ";",
};

static int lex(parser *p, const char *s) {
    size_t len = strlen(s);
    if (len > MAX_SRC) return fail(p, "answer longer than %d bytes", MAX_SRC);
    size_t i = 0;
    while (i <= len) {
        if (p->n >= MAX_TOK - 1) return fail(p, "too many tokens");
        token *t = &p->toks[p->n];
        memset(t, 0, sizeof *t);
        char ch = s[i];
        if (ch == '\0') { t->kind = T_END; p->n++; return 0; }
        if (ch == ' ' || ch == '\t' || ch == '\r') { i++; continue; }
        if (ch == '#') { while (s[i] && s[i] != '\n') i++; continue; } /* comment */
        if (ch == '\n') {
            /* runs of newlines are one separator */
            if (p->n > 0 && p->toks[p->n - 1].kind != T_NEWLINE) { t->kind = T_NEWLINE; p->n++; }
            i++;
            continue;
        }
        if (isdigit((unsigned char)ch)) {
            size_t j = i;
            int64_t v = 0;
            while (isdigit((unsigned char)s[j])) {
                if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[j] - '0', &v))
                    return fail(p, "integer literal too large");
                j++;
            }
            if (s[i] == '0' && j - i > 1) return fail(p, "leading zero in integer literal");
            if (isalpha((unsigned char)s[j]) || s[j] == '_' || s[j] == '.')
                return fail(p, "bad number at offset %zu", i);
            t->kind = T_INT;
            t->ival = v;
            p->n++;
            i = j;
            continue;
        }
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t j = i;
            while (isalnum((unsigned char)s[j]) || s[j] == '_') j++;
            if (j - i >= sizeof t->text) return fail(p, "name too long");
            t->kind = T_NAME;
            memcpy(t->text, s + i, j - i);
            p->n++;
            i = j;
            continue;
        }
        /* longest operator first: "//=" before "//" before "/" */
        const char *best = NULL;
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (!strncmp(s + i, ops[k], strlen(ops[k])) && (!best || strlen(ops[k]) > strlen(best)))
                best = ops[k];
        if (!best) return fail(p, "unexpected character '%c' at offset %zu", ch, i);
        t->kind = T_OP;
        strcpy(t->text, best);
        p->n++;
        i += strlen(best);
    }
    return 0;
}

static const token *peek(parser *p) { return &p->toks[p->at]; }
static int is_op(parser *p, const char *op) {
    return peek(p)->kind == T_OP && !strcmp(peek(p)->text, op);
}
static int is_kw(parser *p, const char *kw) {
    return peek(p)->kind == T_NAME && !strcmp(peek(p)->text, kw);
}
static int expect_op(parser *p, const char *op) {
    if (!is_op(p, op)) return fail(p, "expected '%s'", op);
    p->at++;
    return 0;
}

static int is_keyword(const char *s) {
    static const char *const kws[] = {"def", "return", "if", "else", "and", "or", "not",
                                      "True", "False", "None", "lambda", "for", "while", "in", "is"};
    for (size_t i = 0; i < sizeof kws / sizeof kws[0]; i++)
        if (!strcmp(s, kws[i])) return 1;
    return 0;
}

static int new_node(parser *p, node_kind k, int64_t val, int a, int b, int c) {
    if (p->failed) return -1;
    if (p->f->n_nodes >= MAX_NODES) return fail(p, "expression too large");
    node *n = &p->f->nodes[p->f->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->val = val;
    n->a = a;
    n->b = b;
    n->c = c;
    return p->f->n_nodes++;
}

static int var_slot(parser *p, const char *name, int create) {
    for (int i = 0; i < p->f->n_vars; i++)
        if (!strcmp(p->names[i], name)) return i;
    if (!create) return -2;
    if (p->f->n_vars >= MAX_VARS) return fail(p, "too many variables");
    strcpy(p->names[p->f->n_vars], name);
    return p->f->n_vars++;
}

static int parse_expr(parser *p);

static int parse_atom(parser *p) {
    const token *t = peek(p);
    if (t->kind == T_INT) { p->at++; return new_node(p, N_NUM, t->ival, -1, -1, -1); }
    if (is_op(p, "(")) {
        p->at++;
        int e = parse_expr(p);
        if (expect_op(p, ")")) return -1;
        return e;
    }
    if (t->kind != T_NAME) return fail(p, "expected a value");
    if (!strcmp(t->text, "True") || !strcmp(t->text, "False")) {
        p->at++;
        return new_node(p, N_NUM, t->text[0] == 'T', -1, -1, -1);
    }
    if (is_keyword(t->text)) return fail(p, "unexpected '%s'", t->text);
    char name[24];
    strcpy(name, t->text);
    p->at++;
    if (is_op(p, "(")) { /* a call: only the builtins abs, min, max */
        int fn = !strcmp(name, "abs") ? 0 : !strcmp(name, "min") ? 1 : !strcmp(name, "max") ? 2 : -1;
        if (fn < 0) return fail(p, "unknown function '%s'", name);
        p->at++;
        int n = new_node(p, N_CALL, fn, -1, -1, -1);
        int n_args = 0, args[MAX_ARGS];
        while (!p->failed && !is_op(p, ")")) {
            if (n_args == MAX_ARGS) return fail(p, "too many arguments");
            args[n_args++] = parse_expr(p);
            if (!is_op(p, ",")) break;
            p->at++;
        }
        if (expect_op(p, ")") || n < 0) return -1;
        if (fn == 0 ? n_args != 1 : n_args < 2) return fail(p, "wrong number of arguments to %s", name);
        memcpy(p->f->nodes[n].args, args, sizeof args);
        p->f->nodes[n].n_args = n_args;
        return n;
    }
    int slot = var_slot(p, name, 0);
    if (slot == -2) return fail(p, "name '%s' is not defined", name);
    return new_node(p, N_VAR, slot, -1, -1, -1);
}

/* power binds tighter than unary minus on its left: -2**2 == -4 */
static int parse_unary(parser *p);
static int parse_power(parser *p) {
    int a = parse_atom(p);
    if (is_op(p, "**")) {
        p->at++;
        int b = parse_unary(p);
        return new_node(p, N_POW, 0, a, b, -1);
    }
    return a;
}

static int parse_unary(parser *p) {
    if (++p->depth > MAX_DEPTH) return fail(p, "expression nested too deeply");
    int r;
    if (is_op(p, "-")) { p->at++; r = new_node(p, N_NEG, 0, parse_unary(p), -1, -1); }
    else if (is_op(p, "+")) { p->at++; r = parse_unary(p); }
    else r = parse_power(p);
    p->depth--;
    return r;
}

/* one left-associative precedence level: operand (op operand)* with the
 * operators ops[0..n_ops) */
typedef struct {
    const char *op;
    node_kind kind;
} binop;
static int parse_left(parser *p, int (*operand)(parser *), const binop *ops, int n_ops) {
    int a = operand(p);
    for (;;) {
        int k = -1;
        for (int i = 0; i < n_ops && k < 0; i++)
            if (is_op(p, ops[i].op)) k = i;
        if (k < 0) return a;
        p->at++;
        a = new_node(p, ops[k].kind, 0, a, operand(p), -1);
    }
}

static int parse_term(parser *p) {
    static const binop ops[] = {{"*", N_MUL}, {"//", N_FLOORDIV}, {"%", N_MOD}};
    return parse_left(p, parse_unary, ops, 3);
}

static int parse_arith(parser *p) {
    static const binop ops[] = {{"+", N_ADD}, {"-", N_SUB}};
    return parse_left(p, parse_term, ops, 2);
}

/* a < b <= c  ==  (a < b) and (b <= c); without side effects evaluating b
 * twice is the same as Python's once. */
static int parse_comparison(parser *p) {
    int a = parse_arith(p), result = -1;
    for (;;) {
        static const char *const cmp[] = {"<", "<=", ">", ">=", "==", "!="};
        static const node_kind kinds[] = {N_LT, N_LE, N_GT, N_GE, N_EQ, N_NE};
        int k = -1;
        for (int i = 0; i < 6; i++)
            if (is_op(p, cmp[i])) k = i;
        if (k < 0) return result < 0 ? a : result;
        p->at++;
        int b = parse_arith(p);
        int c = new_node(p, kinds[k], 0, a, b, -1);
        result = result < 0 ? c : new_node(p, N_AND, 0, result, c, -1);
        a = b;
    }
}

static int parse_not(parser *p) {
    if (is_kw(p, "not")) {
        if (++p->depth > MAX_DEPTH) return fail(p, "expression nested too deeply");
        p->at++;
        int r = new_node(p, N_NOT, 0, parse_not(p), -1, -1);
        p->depth--;
        return r;
    }
    return parse_comparison(p);
}

static int parse_and(parser *p) {
    int a = parse_not(p);
    while (is_kw(p, "and")) { p->at++; a = new_node(p, N_AND, 0, a, parse_not(p), -1); }
    return a;
}

static int parse_or(parser *p) {
    int a = parse_and(p);
    while (is_kw(p, "or")) { p->at++; a = new_node(p, N_OR, 0, a, parse_and(p), -1); }
    return a;
}

static int parse_expr(parser *p) {
    if (++p->depth > MAX_DEPTH) return fail(p, "expression nested too deeply");
    int a = parse_or(p);
    if (is_kw(p, "if")) {
        p->at++;
        int cond = parse_or(p);
        if (!is_kw(p, "else")) return fail(p, "expected 'else'");
        p->at++;
        int b = parse_expr(p);
        a = new_node(p, N_IF, 0, a, cond, b);
    }
    p->depth--;
    return p->failed ? -1 : a;
}

static int parse_statement(parser *p) {
    if (p->f->n_stmts >= MAX_STMTS) return fail(p, "too many statements");
    stmt *s = &p->f->stmts[p->f->n_stmts];
    if (is_kw(p, "return")) {
        p->at++;
        s->slot = -1;
        s->expr = parse_expr(p);
    } else {
        const token *t = peek(p);
        if (t->kind != T_NAME || is_keyword(t->text)) return fail(p, "expected a statement");
        char name[24];
        strcpy(name, t->text);
        p->at++;
        static const char *const aug[] = {"+=", "-=", "*=", "//=", "%="};
        static const node_kind kinds[] = {N_ADD, N_SUB, N_MUL, N_FLOORDIV, N_MOD};
        int k = -1;
        for (int i = 0; i < 5; i++)
            if (is_op(p, aug[i])) k = i;
        if (k < 0 && expect_op(p, "=")) return -1;
        if (k >= 0) p->at++;
        int e = parse_expr(p);
        if (k >= 0) { /* y op= e reads y first: it must exist */
            int old = var_slot(p, name, 0);
            if (old == -2) return fail(p, "name '%s' is not defined", name);
            e = new_node(p, kinds[k], 0, new_node(p, N_VAR, old, -1, -1, -1), e, -1);
        }
        s->slot = var_slot(p, name, 1); /* created after its value is parsed */
        s->expr = e;
    }
    if (p->failed) return -1;
    p->f->n_stmts++;
    int semi = is_op(p, ";");
    if (semi) p->at++;
    if (peek(p)->kind == T_NEWLINE) p->at++;
    else if (!semi && peek(p)->kind != T_END) return fail(p, "expected end of statement");
    return 0;
}

rf_pyfunc *rf_pyfunc_parse(const char *src, char *err, size_t err_len) {
    parser *p = rf_calloc(1, sizeof *p);
    p->f = rf_calloc(1, sizeof *p->f);
    p->err = err;
    p->err_len = err_len;
    if (err_len) err[0] = '\0';
    if (lex(p, src) == 0) {
        if (peek(p)->kind == T_NEWLINE) p->at++;
        if (!is_kw(p, "def")) fail(p, "expected 'def'");
        else {
            p->at++;
            if (!is_kw(p, "f")) fail(p, "expected the function to be named f");
            else p->at++;
            if (!p->failed && !expect_op(p, "(")) {
                const token *t = peek(p);
                if (t->kind != T_NAME || is_keyword(t->text)) fail(p, "expected a parameter name");
                else {
                    var_slot(p, t->text, 1);
                    p->at++;
                }
                if (!p->failed && !expect_op(p, ")") && !expect_op(p, ":")) {
                    if (peek(p)->kind == T_NEWLINE) p->at++;
                    while (!p->failed && peek(p)->kind != T_END) parse_statement(p);
                    if (!p->failed && p->f->n_stmts == 0) fail(p, "empty function body");
                }
            }
        }
    }
    rf_pyfunc *f = p->f;
    int failed = p->failed;
    free(p);
    if (failed) { free(f); return NULL; }
    return f;
}

void rf_pyfunc_free(rf_pyfunc *f) { free(f); }

/* ---- evaluation ---- */

/* Python floor division / modulo on integers. */
static int floordiv(int64_t a, int64_t b, int64_t *q) {
    if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
    int64_t d = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) d--;
    *q = d;
    return 0;
}

static int pymod(int64_t a, int64_t b, int64_t *r) {
    if (b == 0) return -1;
    if (b == -1) { *r = 0; return 0; }
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    *r = m;
    return 0;
}

static int ipow(int64_t base, int64_t e, int64_t *out) {
    if (e < 0) return -1; /* Python gives a float */
    int64_t r = 1;
    while (e > 0) {
        if (e & 1 && __builtin_mul_overflow(r, base, &r)) return -1;
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) {
            /* base overflows only matters if it is used again */
            return -1;
        }
    }
    *out = r;
    return 0;
}

static int eval(const rf_pyfunc *f, int i, const int64_t *vars, const int *bound, int64_t *out) {
    const node *n = &f->nodes[i];
    int64_t a, b;
    switch (n->kind) {
    case N_NUM: *out = n->val; return 0;
    case N_VAR:
        if (!bound[n->val]) return -1;
        *out = vars[n->val];
        return 0;
    case N_NEG:
        if (eval(f, n->a, vars, bound, &a) || a == INT64_MIN) return -1;
        *out = -a;
        return 0;
    case N_NOT:
        if (eval(f, n->a, vars, bound, &a)) return -1;
        *out = !a;
        return 0;
    case N_AND: /* Python: x and y -> x if x is falsy else y */
        if (eval(f, n->a, vars, bound, &a)) return -1;
        if (!a) { *out = a; return 0; }
        return eval(f, n->b, vars, bound, out);
    case N_OR:
        if (eval(f, n->a, vars, bound, &a)) return -1;
        if (a) { *out = a; return 0; }
        return eval(f, n->b, vars, bound, out);
    case N_IF:
        if (eval(f, n->b, vars, bound, &a)) return -1;
        return eval(f, a ? n->a : n->c, vars, bound, out);
    case N_CALL: {
        int64_t best = 0;
        for (int k = 0; k < n->n_args; k++) {
            if (eval(f, n->args[k], vars, bound, &a)) return -1;
            if (k == 0 || (n->val == 1 ? a < best : a > best)) best = a;
        }
        if (n->val == 0) {
            if (best == INT64_MIN) return -1;
            best = best < 0 ? -best : best;
        }
        *out = best;
        return 0;
    }
    default: break;
    }
    if (eval(f, n->a, vars, bound, &a) || eval(f, n->b, vars, bound, &b)) return -1;
    switch (n->kind) {
    case N_ADD: return __builtin_add_overflow(a, b, out) ? -1 : 0;
    case N_SUB: return __builtin_sub_overflow(a, b, out) ? -1 : 0;
    case N_MUL: return __builtin_mul_overflow(a, b, out) ? -1 : 0;
    case N_FLOORDIV: return floordiv(a, b, out);
    case N_MOD: return pymod(a, b, out);
    case N_POW: return ipow(a, b, out);
    case N_LT: *out = a < b; return 0;
    case N_LE: *out = a <= b; return 0;
    case N_GT: *out = a > b; return 0;
    case N_GE: *out = a >= b; return 0;
    case N_EQ: *out = a == b; return 0;
    case N_NE: *out = a != b; return 0;
    default: return -1;
    }
}

int rf_pyfunc_call(const rf_pyfunc *f, int64_t x, int64_t *out) {
    int64_t vars[MAX_VARS] = {0};
    int bound[MAX_VARS] = {0};
    vars[0] = x;
    bound[0] = 1;
    for (int i = 0; i < f->n_stmts; i++) {
        int64_t v;
        if (eval(f, f->stmts[i].expr, vars, bound, &v)) return -1;
        if (f->stmts[i].slot < 0) { *out = v; return 0; }
        vars[f->stmts[i].slot] = v;
        bound[f->stmts[i].slot] = 1;
    }
    return -1; /* fell off the end: Python returns None */
}
