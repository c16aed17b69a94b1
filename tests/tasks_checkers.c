/* tasks_checkers.c - every family's checker on right answers, near misses and
 * garbage; the Python-subset interpreter against hand-computed Python
 * results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/check.h"
#include "tasks/pyfunc.h"
#include "tasks/tasks.h"

static json_t *ex_arith(int answer) {
    return json_pack("{s:s, s:s, s:s, s:i}", "query", "q", "response", "r", "family", "arith",
                     "answer", answer);
}

static void test_arith(void) {
    json_t *e = ex_arith(14), *big = ex_arith(1250), *neg = ex_arith(-3);
    const char *right[] = {"12 + 7 = 19. 19 - 5 = 14. #### 14", "#### 14", "####14", "#### 14.",
                           "#### 14\n", "#### 14 then junk after is ignored", "x\n#### 14"};
    for (size_t i = 0; i < sizeof right / sizeof *right; i++)
        CHECK(rf_task_check(e, right[i]) == 1, "arith right answer rejected: '%s'", right[i]);
    const char *wrong[] = {"12 + 7 = 19. 19 - 5 = 14.", "14", "#### 15", "#### 140", "#### 1",
                           "#### -14", "#### 14abc", "#### 14.5", "#### ", "####", "",
                           "#### fourteen", "### 14", "# # # # 14", "#### 0x0E", "#### 1,4", "#### 1,40"};
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++)
        CHECK(rf_task_check(e, wrong[i]) == 0, "arith wrong answer accepted: '%s'", wrong[i]);
    CHECK(rf_task_check(big, "#### 1,250") == 1, "thousands comma");
    CHECK(rf_task_check(big, "#### 1250") == 1, "1250");
    CHECK(rf_task_check(big, "#### 99999999999999999999999") == 0, "huge number, no overflow");
    CHECK(rf_task_check(neg, "#### -3") == 1, "negative answer");
    CHECK(rf_task_check(neg, "#### 3") == 0, "sign matters");
    json_t *bad = json_pack("{s:s, s:s, s:s}", "query", "q", "response", "r", "family", "arith");
    CHECK(rf_task_check(bad, "#### 14") == -1, "arith example without answer is malformed");
    json_decref(e);
    json_decref(big);
    json_decref(neg);
    json_decref(bad);
}

static void test_func(void) {
    /* f(x) = (x + 3) * 4 if > 10 else 0, tests computed by hand in Python */
    json_t *e = json_pack("{s:s, s:s, s:s, s:[[i,i],[i,i],[i,i],[i,i]]}", "query", "q", "response",
                          "r", "family", "func", "tests", -5, 0, 0, 12, 7, 40, -1, 0);
    const char *right[] = {
        "def f(x):\n    y = x + 3\n    y = y * 4\n    return y if y > 10 else 0",
        "def f(x): return (x + 3) * 4 if (x + 3) * 4 > 10 else 0",
        "def f(n):\n  return max((n + 3) * 4, 0) if n > -1 else 0",
        "def f(x):\n    y = x + 3\n    y *= 4\n    if_ = 0\n    return y > 10 and y or 0",
        "def f(x): y = 4 * x + 12; return y if not y <= 10 else 0",
        "\ndef f(x):\n    return (x+3)*4 if 10 < (x+3)*4 else 0\n\n",
    };
    for (size_t i = 0; i < sizeof right / sizeof *right; i++)
        CHECK(rf_task_check(e, right[i]) == 1, "func right answer rejected: '%s'", right[i]);
    const char *wrong[] = {
        "def f(x):\n    y = x + 3\n    y = y * 4\n    return y",            /* misses the branch */
        "def f(x):\n    y = x + 3\n    y = y * 4\n    return y if y > 12 else 0", /* off at 12 */
        "def f(x):\n    y = x + 3\n    y = y * 5\n    return y if y > 10 else 0",
        "def f(x):\n    y = x + 3\n    y = y * 4\n",                       /* returns None */
        "def f(x):\n    y = x + 3\n    y = y * 4\n    return z",             /* unbound */
        "def g(x):\n    return (x + 3) * 4 if (x + 3) * 4 > 10 else 0",      /* wrong name */
        "def f(x):\n    return (x + 3) / 1 * 4 if (x + 3) * 4 > 10 else 0",  /* true division */
        "def f(x):\n    return (x + 3) * 4 if (x + 3) * 4 > 10",             /* no else */
        "def f(x):\n    return (x + 3) * 4 if (x + 3) * 4 > 10 else 0 +",
        "def f(x):\n    y = x + 3\n    y = y * 4\n    return y if y > 10 else 0 // 0 * x // 0",
        "return (x + 3) * 4", "", "garbage %$#", "def f(x): return 1 // (x - x)",
        "def f(x): return 99999999999 * 99999999999 * x",                     /* overflow */
        "def f(x): return print(x)", "def f(x): return x.real",
    };
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++)
        CHECK(rf_task_check(e, wrong[i]) == 0, "func wrong answer accepted: '%s'", wrong[i]);
    json_t *bad = json_pack("{s:s, s:s, s:s, s:[]}", "query", "q", "response", "r", "family", "func",
                            "tests");
    CHECK(rf_task_check(bad, "def f(x): return x") == -1, "func example without tests is malformed");
    json_decref(e);
    json_decref(bad);
}

/* The interpreter against values Python 3 gives (worked out by hand). */
static void test_pyfunc_semantics(void) {
    struct { const char *src; int64_t x, want; int err; } cases[] = {
        {"def f(x): return x // 3", -7, -3, 0},      /* floor, not truncation */
        {"def f(x): return x % 3", -7, 2, 0},        /* sign of the divisor */
        {"def f(x): return x % -3", 7, -2, 0},
        {"def f(x): return x // -2", 7, -4, 0},
        {"def f(x): return -x ** 2", 3, -9, 0},       /* ** binds tighter than unary - */
        {"def f(x): return 2 ** 3 ** 2", 0, 512, 0},  /* right associative */
        {"def f(x): return 1 < x < 5", 3, 1, 0},
        {"def f(x): return 1 < x < 5", 7, 0, 0},
        {"def f(x): return x and 7", 0, 0, 0},
        {"def f(x): return x or 7", 0, 7, 0},
        {"def f(x): return not x", 0, 1, 0},
        {"def f(x): return 1 if x else 2 if x * 5 else 3", 0, 3, 0},
        {"def f(x): return 1 if x else 2 if x * 5 else 3", -1, 1, 0},
        {"def f(x): return abs(x - 10) + min(x, 3, 1) + max(-x, 2)", 4, 6 + 1 + 2, 0},
        {"def f(x): return True + True", 0, 2, 0},
        {"def f(x):\n  y = x\n  y -= 4\n  y //= 2\n  y %= 5\n  return y", 1, 3, 0}, /* (1-4)//2=-2, -2%5=3 */
        {"def f(x):\n  return x\n  return 5", 9, 9, 0}, /* dead code after return */
        {"def f(x): return x // 0", 1, 0, 1},
        {"def f(x): return x % 0", 1, 0, 1},
        {"def f(x): return 2 ** -1", 1, 0, 1},        /* Python gives 0.5 */
        {"def f(x): return 3 ** 50", 1, 0, 1},        /* beyond 64 bits */
        {"def f(x): return -x", INT64_MIN, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[128];
        rf_pyfunc *f = rf_pyfunc_parse(cases[i].src, err, sizeof err);
        CHECK(f != NULL, "parse '%s': %s", cases[i].src, err);
        if (!f) continue;
        int64_t got = 0;
        int rc = rf_pyfunc_call(f, cases[i].x, &got);
        if (cases[i].err) CHECK(rc != 0, "'%s' should fail at runtime", cases[i].src);
        else CHECK(rc == 0 && got == cases[i].want, "'%s' at %lld: got %lld (rc %d), want %lld",
                   cases[i].src, (long long)cases[i].x, (long long)got, rc, (long long)cases[i].want);
        rf_pyfunc_free(f);
    }
    const char *syntax[] = {"def f(x): return 07", "def f(x): return (x", "def f(x): return x +* 2",
                            "def f(x) return x", "def f(): return 1", "def f(x): return 1.5",
                            "def f(x): y + 1 = 2", "def f(x): return x x", "def f(x):",
                            "def f(x): return not", "def f(x): y = y + 1; return y"};
    for (size_t i = 0; i < sizeof syntax / sizeof *syntax; i++) {
        char err[128];
        rf_pyfunc *f = rf_pyfunc_parse(syntax[i], err, sizeof err);
        CHECK(f == NULL && err[0], "'%s' should not parse", syntax[i]);
        rf_pyfunc_free(f);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[3000];
    strcpy(deep, "def f(x): return ");
    size_t n = strlen(deep);
    for (int i = 0; i < 1000; i++) deep[n++] = '(';
    deep[n++] = 'x';
    for (int i = 0; i < 1000; i++) deep[n++] = ')';
    deep[n] = '\0';
    char err[128];
    CHECK(rf_pyfunc_parse(deep, err, sizeof err) == NULL, "deep nesting refused");
}

static void test_json(void) {
    json_t *want = json_loads("[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": "
                              "[\"chess\", \"tea\"]}, {\"name\": \"Bob\", \"age\": 25, \"city\": "
                              "\"Rome\", \"hobbies\": [\"music\"]}]", 0, NULL);
    json_t *e = json_pack("{s:s, s:s, s:s, s:o}", "query", "q", "response", "r", "family", "json",
                          "answer", want);
    const char *right[] = {
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* key order and whitespace do not matter */
        " [ {\"age\":31,\"name\":\"Ann\",\"hobbies\":[\"chess\",\"tea\"],\"city\":\"Oslo\"},\n"
        "{\"city\":\"Rome\",\"hobbies\":[\"music\"],\"name\":\"Bob\",\"age\":25} ]\n",
    };
    for (size_t i = 0; i < sizeof right / sizeof *right; i++)
        CHECK(rf_task_check(e, right[i]) == 1, "json right answer rejected: '%s'", right[i]);
    const char *wrong[] = {
        /* age as a string */
        "[{\"name\": \"Ann\", \"age\": \"31\", \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* 31.0 is not 31 */
        "[{\"name\": \"Ann\", \"age\": 31.0, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* list order matters */
        "[{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}, "
        "{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}]",
        /* hobbies swapped */
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"tea\", \"chess\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* extra key */
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"], \"x\": 1}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* duplicate key */
        "[{\"name\": \"Ann\", \"age\": 30, \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}]",
        /* truncated */
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}",
        /* trailing garbage */
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}, "
        "{\"name\": \"Bob\", \"age\": 25, \"city\": \"Rome\", \"hobbies\": [\"music\"]}] ok",
        /* only one record */
        "[{\"name\": \"Ann\", \"age\": 31, \"city\": \"Oslo\", \"hobbies\": [\"chess\", \"tea\"]}]",
        "", "null", "[]", "{\"name\": \"Ann\"}", "[{\"name\": \"Ann\", ",
    };
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++)
        CHECK(rf_task_check(e, wrong[i]) == 0, "json wrong answer accepted: '%s'", wrong[i]);
    json_decref(e);
    json_t *no_family = json_pack("{s:s, s:s}", "query", "q", "response", "r");
    CHECK(rf_task_check(no_family, "x") == -1, "example without family is malformed");
    json_decref(no_family);
}

/* Every generated example passes its own checker, and a corrupted copy of
 * its response fails it: the checkers and the generators agree. */
static void test_generated_roundtrip(void) {
    rf_rng r;
    rf_rng_seed(&r, 7);
    for (int fam = 0; fam < RF_TASK_N; fam++) {
        int n_right = 0, n_broken_right = 0;
        for (int i = 0; i < 200; i++) {
            json_t *e = rf_task_generate(fam, &r);
            const char *resp = json_string_value(json_object_get(e, "response"));
            n_right += rf_task_check(e, resp) == 1;
            /* a near miss: bump the last digit of the response */
            char *broken = rf_strdup(resp);
            for (int k = (int)strlen(broken) - 1; k >= 0; k--)
                if (broken[k] >= '0' && broken[k] <= '9') {
                    broken[k] = broken[k] == '9' ? '8' : (char)(broken[k] + 1);
                    break;
                }
            n_broken_right += rf_task_check(e, broken) == 1;
            free(broken);
            json_decref(e);
        }
        CHECK(n_right == 200, "%s: %d/200 references pass their checker", rf_task_family_name(fam), n_right);
        /* func: the last digit may sit in a branch no hidden test reaches */
        int max_broken = fam == RF_TASK_FUNC ? 30 : 0;
        printf("%s: %d/200 corrupted answers still pass\n", rf_task_family_name(fam), n_broken_right);
        CHECK(n_broken_right <= max_broken, "%s: %d/200 corrupted answers pass",
              rf_task_family_name(fam), n_broken_right);
    }
}

int main(void) {
    test_arith();
    test_func();
    test_pyfunc_semantics();
    test_json();
    test_generated_roundtrip();
    return check_summary("tasks_checkers");
}
