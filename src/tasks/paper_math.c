/* paper_math.c - MATH answers: the \boxed{} answer, the two published
 * normalisations, and the equivalence the MATH scorer uses.
 *
 *  - rf_math_last_boxed: minerva_math's last_boxed_only_string + remove_boxed
 *    (lm_eval/tasks/minerva_math/utils.py): the last "\boxed{...}" (or
 *    "\fbox{...}") with balanced braces, or "\boxed X" up to the next "$".
 *  - rf_math_normalize_final: minerva's normalize_final_answer (Lewkowycz et
 *    al. 2022, appendix D): the part after the last "=", fixed substitutions,
 *    units and filler words removed, the first $...$ kept, \text{} /
 *    \textbf{} / \overline{} / \boxed{} unwrapped, \fracab and \sqrta
 *    braced, "$" dropped, thousands separators removed from integers.
 *  - rf_math_strip_string: Hendrycks et al.'s strip_string (the MATH
 *    repository's is_equiv): no newlines, \! and spaces; \tfrac / \dfrac to
 *    \frac; \left and \right dropped; degrees and \$ dropped; a trailing
 *    "\text{ unit}" dropped; leading zeros put before "."; a short "x =" cut;
 *    \sqrt3 and \frac12 braced; 0.5 and a/b as \frac.
 *  - rf_math_equiv: equal after either normalisation, or both read as the
 *    same number (integers, decimals, \frac{p}{q}, p/q, with a sign), which
 *    stands in for minerva's sympy check on numbers; other symbolic
 *    equivalences (x+1 = 1+x) are not recognised. */
#include <ctype.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/paper_internal.h"

char *rf_math_last_boxed(const char *s) {
    const char *sp = NULL;
    for (const char *p = s; (p = strstr(p, "\\boxed ")); p++) sp = p;
    if (sp) { /* "\boxed " + the rest up to the next "$" */
        const char *a = sp + strlen("\\boxed "), *e = strchr(a, '$');
        size_t n = e ? (size_t)(e - a) : strlen(a);
        char *o = rf_malloc(n + 1);
        memcpy(o, a, n);
        o[n] = 0;
        return o;
    }
    const char *at = NULL;
    for (const char *p = s; (p = strstr(p, "\\boxed")); p++) at = p;
    if (!at)
        for (const char *p = s; (p = strstr(p, "\\fbox")); p++) at = p;
    if (!at) return NULL;
    int open = 0;
    const char *close = NULL;
    for (const char *p = at; *p; p++) {
        if (*p == '{') open++;
        if (*p == '}' && --open == 0) {
            close = p;
            break;
        }
    }
    if (!close) return NULL;
    /* remove_boxed takes "\boxed{" off; "\fbox{...}" and "\boxed{}" forms it
     * would refuse (an assertion) count as no answer */
    const char *head = "\\boxed{";
    if (strncmp(at, head, strlen(head))) return NULL;
    const char *a = at + strlen(head);
    size_t n = (size_t)(close - a);
    char *o = rf_malloc(n + 1);
    memcpy(o, a, n);
    o[n] = 0;
    return o;
}

/* ---- minerva ---- */
static const char *const substitutions[][2] = {
    {"an ", ""},         {"a ", ""},      {".$", "$"},          {"\\$", ""}, {"\\ ", ""},
    {" ", ""},           {"mbox", "text"}, {",\\text{and}", ","}, {"\\text{and}", ","},
    {"\\text{m}", "\\text{}"},
};
static const char *const removed[] = {
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
    "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2",
    "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", "\"",
    "\\dots",
};

static void sub_in(char **s, const char *pattern, const char *repl) {
    char *n = rf_paper_regex_sub(pattern, repl, *s);
    free(*s);
    *s = n;
}

char *rf_math_normalize_final(const char *in) {
    const char *eq = strrchr(in, '=');
    char *s = rf_strdup(eq ? eq + 1 : in);
    for (size_t i = 0; i < sizeof substitutions / sizeof substitutions[0]; i++)
        rf_paper_replace_in(&s, substitutions[i][0], substitutions[i][1]);
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) rf_paper_replace_in(&s, removed[i], "");
    sub_in(&s, "(.*?)(\\$)(.*?)(\\$)(.*)", "$$$3$$");
    sub_in(&s, "(\\\\text\\{)(.*?)(\\})", "$2");
    sub_in(&s, "(\\\\textbf\\{)(.*?)(\\})", "$2");
    sub_in(&s, "(\\\\overline\\{)(.*?)(\\})", "$2");
    sub_in(&s, "(\\\\boxed\\{)(.*)(\\})", "$2");
    sub_in(&s, "(frac)([^{])(.)", "frac{$2}{$3}");
    sub_in(&s, "(sqrt)([^{])", "sqrt{$2}");
    rf_paper_replace_in(&s, "$", "");
    /* 100,000 -> 100000 (Python's isdigit: a non-empty run of digits) */
    char *nc = rf_paper_replace(s, ",", "");
    int digits = *nc != 0;
    for (const char *p = nc; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
    if (digits) free(s), s = nc;
    else free(nc);
    return s;
}

/* ---- Hendrycks ---- */
/* a growable string (open_memstream) */
typedef struct {
    FILE *f;
    char *p;
    size_t n;
} sbuf;
static void sb_open(sbuf *b) {
    b->p = NULL, b->n = 0;
    b->f = open_memstream(&b->p, &b->n);
    if (!b->f) rf_oom(0);
}
static void sb_put(sbuf *b, const char *s, size_t n) { fwrite(s, 1, n, b->f); }
static void sb_puts(sbuf *b, const char *s) { fputs(s, b->f); }
static char *sb_done(sbuf *b) {
    if (fclose(b->f) || !b->p) rf_oom(b->n);
    return b->p;
}

/* s split at each `cmd`: the text before the first one as it is, then each
 * cmd with the text up to the next one (p, n) written by fix, which returns
 * 0 to leave the whole string as it was. A new string. */
static char *rewrite_each(const char *s, const char *cmd, int (*fix)(sbuf *o, const char *p, size_t n)) {
    const char *p = strstr(s, cmd);
    if (!p) return rf_strdup(s);
    sbuf o;
    sb_open(&o);
    sb_put(&o, s, (size_t)(p - s));
    while (p) {
        p += strlen(cmd);
        const char *next = strstr(p, cmd);
        size_t n = next ? (size_t)(next - p) : strlen(p);
        if (!fix(&o, p, n)) {
            free(sb_done(&o));
            return rf_strdup(s);
        }
        p = next;
    }
    return sb_done(&o);
}

/* "\sqrt3" -> "\sqrt{3}" */
static int brace_sqrt(sbuf *o, const char *p, size_t n) {
    if (n && p[0] != '{') {
        sb_puts(o, "\\sqrt{");
        sb_put(o, p, 1);
        sb_puts(o, "}");
        sb_put(o, p + 1, n - 1);
    } else {
        sb_puts(o, "\\sqrt");
        sb_put(o, p, n);
    }
    return 1;
}

/* "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}"; a \frac with
 * fewer than two characters after it leaves the whole string as it was */
static int brace_frac(sbuf *o, const char *p, size_t n) {
    sb_puts(o, "\\frac");
    if (n && p[0] == '{') {
        sb_put(o, p, n);
    } else if (n < 2) {
        return 0;
    } else if (p[1] != '{') {
        char b[8] = {'{', p[0], '}', '{', p[1], '}', 0};
        sb_puts(o, b);
        sb_put(o, p + 2, n - 2);
    } else {
        char b[4] = {'{', p[0], '}', 0};
        sb_puts(o, b);
        sb_put(o, p + 1, n - 1);
    }
    return 1;
}

static int is_int_text(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = 0;
    while (i < n && isdigit((unsigned char)s[i])) i++, d++;
    while (i < n && isspace((unsigned char)s[i])) i++;
    return d > 0 && i == n;
}

/* strip_string's replacements before it looks for units, in its order */
static const char *const strip_replacements[][2] = {
    {"\n", ""},     {"\\!", ""},         {"\\\\", "\\"}, {"tfrac", "frac"}, {"dfrac", "frac"},
    {"\\left", ""}, {"\\right", ""}, {"^{\\circ}", ""}, {"^\\circ", ""},    {"\\$", ""},
};

char *rf_math_strip_string(const char *in) {
    char *s = rf_strdup(in);
    for (size_t i = 0; i < sizeof strip_replacements / sizeof strip_replacements[0]; i++)
        rf_paper_replace_in(&s, strip_replacements[i][0], strip_replacements[i][1]);
    /* units: "X\text{ unit}" -> "X" (only for exactly one "\text{ ") */
    const char *u = strstr(s, "\\text{ ");
    if (u && !strstr(u + 1, "\\text{ ")) s[u - s] = 0;
    rf_paper_replace_in(&s, " .", " 0.");
    rf_paper_replace_in(&s, "{.", "{0.");
    if (!*s) return s;
    if (s[0] == '.') {
        char *t = rf_malloc(strlen(s) + 2);
        t[0] = '0';
        strcpy(t + 1, s);
        free(s), s = t;
    }
    /* "x = 5" -> "5" when there is one "=" and at most two characters before it */
    const char *eq = strchr(s, '=');
    if (eq && !strchr(eq + 1, '=') && eq - s <= 2) {
        char *t = rf_strdup(eq + 1);
        free(s), s = t;
    }
    char *t = rewrite_each(s, "\\sqrt", brace_sqrt);
    free(s), s = t;
    rf_paper_replace_in(&s, " ", "");
    t = rewrite_each(s, "\\frac", brace_frac);
    free(s), s = t;
    if (!strcmp(s, "0.5")) {
        free(s);
        return rf_strdup("\\frac{1}{2}");
    }
    /* "a/b" with integers a, b (written as such) -> \frac{a}{b} */
    const char *sl = strchr(s, '/');
    if (sl && !strchr(sl + 1, '/') && is_int_text(s, (size_t)(sl - s)) && is_int_text(sl + 1, strlen(sl + 1))) {
        long a = strtol(s, NULL, 10), b = strtol(sl + 1, NULL, 10);
        char canon[64];
        snprintf(canon, sizeof canon, "%ld/%ld", a, b);
        if (!strcmp(canon, s)) {
            snprintf(canon, sizeof canon, "\\frac{%ld}{%ld}", a, b);
            free(s);
            return rf_strdup(canon);
        }
    }
    return s;
}

/* ---- numbers ---- */
/* a decimal number filling s exactly (sign, digits, optional fraction) */
static int read_decimal(const char *s, double *v) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    int d = 0;
    while (isdigit((unsigned char)*p)) p++, d++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++, d++;
    }
    if (!d || *p) return 0;
    *v = strtod(s, NULL);
    return 1;
}

/* s after strip_string: a decimal, or [-]\frac{p}{q} with decimals p, q */
static int read_number(const char *s, double *v) {
    if (read_decimal(s, v)) return 1;
    int neg = 0;
    if (*s == '-') neg = 1, s++;
    if (strncmp(s, "\\frac{", 6)) return 0;
    const char *a = s + 6, *m = strstr(a, "}{");
    if (!m) return 0;
    size_t na = (size_t)(m - a);
    const char *b = m + 2;
    size_t nb = strlen(b);
    if (!nb || b[nb - 1] != '}' || na > 60 || nb > 60) return 0;
    char pa[64], pb[64];
    memcpy(pa, a, na), pa[na] = 0;
    memcpy(pb, b, nb - 1), pb[nb - 1] = 0;
    double x, y;
    if (!read_decimal(pa, &x) || !read_decimal(pb, &y) || y == 0) return 0;
    *v = (neg ? -x : x) / y;
    return 1;
}

int rf_math_equiv(const char *a, const char *b) {
    if (!a || !b) return 0;
    if (!strcmp(a, b)) return 1;
    char *ha = rf_math_strip_string(a), *hb = rf_math_strip_string(b);
    char *ma = rf_math_normalize_final(a), *mb = rf_math_normalize_final(b);
    char *hma = rf_math_strip_string(ma), *hmb = rf_math_strip_string(mb);
    int eq = (*ha && !strcmp(ha, hb)) || (*ma && !strcmp(ma, mb)) || (*hma && !strcmp(hma, hmb));
    double x, y;
    if (!eq && read_number(hma, &x) && read_number(hmb, &y))
        eq = fabs(x - y) <= 1e-9 * fmax(1.0, fmax(fabs(x), fabs(y)));
    free(ha), free(hb), free(ma), free(mb), free(hma), free(hmb);
    return eq;
}
