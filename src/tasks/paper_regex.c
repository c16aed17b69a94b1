/* paper_regex.c - the few Python `re` operations lm-eval's filters and
 * metrics use (findall + group select, sub), on PCRE2, plus its
 * exact_match. The patterns involved (tasks/paper.c, paper_math.c) use only
 * syntax that means the same in both: classes, lazy and greedy repeats,
 * groups, lookaround, `.` not matching a newline and `$` also matching
 * before a final newline. Text is UTF-8; invalid sequences match nothing
 * but do not stop the search (PCRE2_MATCH_INVALID_UTF). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tasks/paper_internal.h"

static pcre2_code *compile(const char *pattern) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                   &err, &off, NULL);
    if (!re) rf_die("paper: bad built-in pattern %s at %zu", pattern, (size_t)off); /* a bug, not input */
    return re;
}

static char *strip_dup(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r' ||
                 s[n - 1] == '\f' || s[n - 1] == '\v'))
        n--;
    char *o = rf_malloc(n + 1);
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

char *rf_paper_regex_pick(const char *pattern, const char *text, int group_select) {
    pcre2_code *re = compile(pattern);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    uint32_t groups = 0;
    pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &groups);
    size_t len = strlen(text), at = 0;
    /* findall: every non-overlapping match; keep the wanted one */
    int n_found = 0, want = group_select;
    char *picked = NULL;
    if (want < 0) { /* count first */
        int total = 0;
        for (size_t p = 0; p <= len;) {
            int rc = pcre2_match(re, (PCRE2_SPTR)text, len, p, 0, md, NULL);
            if (rc < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            total++;
            p = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
        }
        want = total + group_select;
        if (want < 0) goto done;
    }
    while (at <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, len, at, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (n_found++ == want) {
            size_t s = ov[0], e = ov[1];
            /* a tuple of groups: the first non-empty one (all empty: no match) */
            if (groups > 0) {
                int got = 0;
                for (uint32_t g = 1; g <= groups && (int)g < rc; g++)
                    if (ov[2 * g] != PCRE2_UNSET && ov[2 * g + 1] > ov[2 * g]) {
                        s = ov[2 * g], e = ov[2 * g + 1], got = 1;
                        break;
                    }
                if (!got && groups > 1) break;
                if (!got) s = e = 0;
            }
            picked = strip_dup(text + s, e - s);
            break;
        }
        at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
done:
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return picked;
}

char *rf_paper_regex_sub(const char *pattern, const char *repl, const char *text) {
    pcre2_code *re = compile(pattern);
    size_t cap = strlen(text) * 2 + 64;
    for (;;) {
        PCRE2_UCHAR *out = rf_malloc(cap);
        PCRE2_SIZE n = cap;
        int rc = pcre2_substitute(re, (PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, 0,
                                  PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, NULL, NULL,
                                  (PCRE2_SPTR)repl, PCRE2_ZERO_TERMINATED, out, &n);
        if (rc >= 0) {
            pcre2_code_free(re);
            return (char *)out;
        }
        free(out);
        if (rc != PCRE2_ERROR_NOMEMORY) { /* e.g. invalid UTF-8 in the subject: leave it as it is */
            pcre2_code_free(re);
            return rf_strdup(text);
        }
        cap = n + 1;
    }
}

char *rf_paper_replace(const char *s, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to), count = 0;
    for (const char *p = s; (p = strstr(p, from)); p += nf) count++;
    char *o = rf_malloc(strlen(s) + count * nt + 1), *w = o;
    for (const char *p = s, *q; ; p = q + nf) {
        q = strstr(p, from);
        if (!q) {
            strcpy(w, p);
            break;
        }
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        memcpy(w, to, nt);
        w += nt;
    }
    return o;
}

void rf_paper_replace_in(char **s, const char *from, const char *to) {
    char *n = rf_paper_replace(*s, from, to);
    free(*s);
    *s = n;
}

/* code points mapped (lower) or dropped (drop(category)), as UTF-8 */
static char *map_text(const char *s, int lower, int drop_ascii_punct, int drop_unicode_punct) {
    size_t n = strlen(s);
    char *o = rf_malloc(4 * n + 1), *w = o;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) { /* a stray byte: keep it */
            *w++ = s[i++];
            continue;
        }
        i += (size_t)k;
        if (drop_ascii_punct && c < 128 && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", (int)c) && c) continue;
        if (drop_unicode_punct) {
            utf8proc_category_t cat = utf8proc_category(c);
            if (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) continue;
        }
        if (lower) c = utf8proc_tolower(c);
        w += utf8proc_encode_char(c, (utf8proc_uint8_t *)w);
    }
    *w = 0;
    return o;
}

char *rf_paper_fold(const char *s, int lower, int unicode_punct) { return map_text(s, lower, 0, unicode_punct); }

int rf_paper_exact_match(const char *pred, const char *ref, const char *const *ignore, int n_ignore,
                         int ignore_case, int ignore_punct) {
    char *p = rf_strdup(pred), *r = rf_strdup(ref);
    for (int i = 0; i < n_ignore; i++) {
        char *a = rf_paper_regex_sub(ignore[i], "", p), *b = rf_paper_regex_sub(ignore[i], "", r);
        free(p), free(r);
        p = a, r = b;
    }
    char *a = map_text(p, ignore_case, ignore_punct, 0), *b = map_text(r, ignore_case, ignore_punct, 0);
    int eq = !strcmp(a, b);
    free(p), free(r), free(a), free(b);
    return eq;
}

char *rf_paper_regex_escape(const char *s) {
    size_t n = strlen(s);
    char *o = rf_malloc(2 * n + 1), *w = o;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 128 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            *w++ = '\\';
        if (c == '\n') { /* "\<newline>" is not an escape in PCRE2 */
            w[-1] = '\\', *w++ = 'n';
            continue;
        }
        *w++ = (char)c;
    }
    *w = 0;
    return o;
}
