/* check.c - the per-family checkers and reading/writing task files. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/pyfunc.h"
#include "tasks/tasks.h"

/* "," followed by exactly three digits: a thousands separator. */
static int thousands_comma(const char *s) {
    return s[0] == ',' && isdigit((unsigned char)s[1]) && isdigit((unsigned char)s[2]) &&
           isdigit((unsigned char)s[3]) && !isdigit((unsigned char)s[4]);
}

/* arith: the integer right after the first "####" (GSM8K's convention),
 * thousands commas allowed, ended by the end of text, whitespace or a final
 * period. Whatever follows is ignored, as lm-eval's GSM8K match does. */
static int check_arith(const json_t *ex, const char *ans) {
    json_t *a = json_object_get(ex, "answer");
    if (!json_is_integer(a)) {
        rf_set_error("arith example without an integer \"answer\"");
        return -1;
    }
    const char *s = strstr(ans, "####");
    if (!s) return 0;
    s += 4;
    while (*s == ' ' || *s == '\t') s++;
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    if (!isdigit((unsigned char)*s)) return 0;
    long long v = 0;
    for (; isdigit((unsigned char)*s) || thousands_comma(s); s++) {
        if (*s == ',') continue;
        if (v > 1000000000000LL) return 0; /* far beyond any answer; avoids overflow */
        v = v * 10 + (*s - '0');
    }
    if (*s == '.' && !isdigit((unsigned char)s[1])) s++; /* "#### 14." */
    if (*s != '\0' && !isspace((unsigned char)*s)) return 0;  /* "#### 14abc", "#### 14.5" */
    return (neg ? -v : v) == (long long)json_integer_value(a);
}

/* func: run the answer on every hidden test; any error is a wrong answer. */
static int check_func(const json_t *ex, const char *ans) {
    json_t *tests = json_object_get(ex, "tests");
    if (!json_is_array(tests) || json_array_size(tests) == 0) {
        rf_set_error("func example without \"tests\"");
        return -1;
    }
    char err[128];
    rf_pyfunc *f = rf_pyfunc_parse(ans, err, sizeof err);
    if (!f) return 0;
    int ok = 1;
    size_t i;
    json_t *t;
    json_array_foreach(tests, i, t) {
        json_t *x = json_array_get(t, 0), *y = json_array_get(t, 1);
        if (!json_is_integer(x) || !json_is_integer(y)) {
            rf_pyfunc_free(f);
            rf_set_error("func example: test %zu is not [int, int]", i);
            return -1;
        }
        int64_t out;
        if (rf_pyfunc_call(f, json_integer_value(x), &out) || out != json_integer_value(y)) ok = 0;
    }
    rf_pyfunc_free(f);
    return ok;
}

/* json: the whole answer must be one JSON value equal to the expected one
 * (object key order and whitespace do not matter; 31 and 31.0 differ). */
static int check_json(const json_t *ex, const char *ans) {
    json_t *want = json_object_get(ex, "answer");
    if (!want) {
        rf_set_error("json example without \"answer\"");
        return -1;
    }
    json_error_t jerr;
    json_t *got = json_loads(ans, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!got) return 0;
    int ok = json_equal(got, want);
    json_decref(got);
    return ok;
}

int rf_task_check(const json_t *ex, const char *answer) {
    const char *fam = json_string_value(json_object_get(ex, "family"));
    int f = fam ? rf_task_family_from_name(fam) : -1;
    switch (f) {
    case RF_TASK_ARITH: return check_arith(ex, answer);
    case RF_TASK_FUNC: return check_func(ex, answer);
    case RF_TASK_JSON: return check_json(ex, answer);
    default:
        rf_set_error("example has no known \"family\" (%s)", fam ? fam : "missing");
        return -1;
    }
}

int rf_tasks_write(const char *path, const json_t *examples) {
    size_t cap = 1 << 16, len = 0;
    char *buf = rf_malloc(cap);
    size_t n = json_array_size(examples);
    for (size_t i = 0; i <= n + 1; i++) {
        char *line = NULL;
        const char *piece;
        if (i == 0) piece = "[\n";
        else if (i == n + 1) piece = "]\n";
        else {
            line = json_dumps(json_array_get(examples, i - 1), JSON_PRESERVE_ORDER);
            if (!line) rf_die("json_dumps failed");
            piece = line;
        }
        size_t pl = strlen(piece);
        buf = rf_grow_to(buf, 1, len + pl + 3, &cap, cap);
        memcpy(buf + len, piece, pl);
        len += pl;
        if (line) {
            if (i < n) buf[len++] = ',';
            buf[len++] = '\n';
        }
        free(line);
    }
    int rc = rf_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

json_t *rf_tasks_load(const char *path, int need_checker) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rf_set_error("%s: line %d: %s", path, jerr.line, jerr.text);
        return NULL;
    }
    if (!json_is_array(root)) {
        rf_set_error("%s: expected a JSON list of examples", path);
        json_decref(root);
        return NULL;
    }
    size_t i;
    json_t *e;
    json_array_foreach(root, i, e) {
        const char *why = NULL;
        if (!json_is_object(e)) why = "is not an object";
        else if (!json_is_string(json_object_get(e, "query"))) why = "has no string \"query\"";
        else if (!json_is_string(json_object_get(e, "response"))) why = "has no string \"response\"";
        if (!why && need_checker) {
            /* the reference response must pass its own checker: this catches
             * a missing family, bad metadata and a stale/edited file at once */
            int rc = rf_task_check(e, json_string_value(json_object_get(e, "response")));
            if (rc < 0) {
                char why_buf[512]; /* rf_last_error's buffer is the one we write */
                snprintf(why_buf, sizeof why_buf, "%s", rf_last_error());
                rf_set_error("%s: example %zu: %s", path, i, why_buf);
                json_decref(root);
                return NULL;
            }
            if (rc == 0) why = "fails its own checker";
        }
        if (why) {
            rf_set_error("%s: example %zu %s", path, i, why);
            json_decref(root);
            return NULL;
        }
    }
    return root;
}
