/* gen.c - the generators of the three task families and the seeded,
 * disjoint train/test split. Everything is drawn from an rf_rng so a seed
 * fixes the suite; the word lists are short on purpose, so a tiny model with
 * a ~1-2k token vocabulary can learn the language and spend its capacity on
 * the reasoning (arithmetic, translation to code, restructuring). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/pyfunc.h"
#include "tasks/tasks.h"

/* ---- a growing string ---- */
typedef struct {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) rf_die("sb_printf: bad format");
        if (b->s && (size_t)n < room) { b->len += (size_t)n; return; }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        char *ns = realloc(b->s, b->cap);
        if (!ns) rf_die("out of memory");
        b->s = ns;
    }
}

static int irand(rf_rng *r, int lo, int hi) { /* inclusive */
    return lo + (int)rf_rng_below(r, (uint64_t)(hi - lo + 1));
}
#define COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))
#define PICK(r, arr) ((arr)[rf_rng_below((r), COUNT(arr))])

/* an index below n that is not among used[0..n_used): drawn again until new */
static size_t pick_new(rf_rng *r, size_t n, const size_t *used, int n_used) {
    for (;;) {
        size_t k = (size_t)rf_rng_below(r, n);
        int dup = 0;
        for (int j = 0; j < n_used; j++) dup |= used[j] == k;
        if (!dup) return k;
    }
}

/* ---- word lists ---- */
typedef struct { const char *name, *subj, *poss, *obj; } person;
static const person people[] = {
    {"Ann", "she", "her", "her"},   {"Bob", "he", "his", "him"},    {"Cara", "she", "her", "her"},
    {"Dan", "he", "his", "him"},    {"Eva", "she", "her", "her"},   {"Finn", "he", "his", "him"},
    {"Gina", "she", "her", "her"},  {"Hugo", "he", "his", "him"},   {"Ida", "she", "her", "her"},
    {"Jack", "he", "his", "him"},   {"Kim", "she", "her", "her"},   {"Leo", "he", "his", "him"},
    {"Mia", "she", "her", "her"},   {"Nick", "he", "his", "him"},   {"Olga", "she", "her", "her"},
    {"Paul", "he", "his", "him"},   {"Rosa", "she", "her", "her"},  {"Sam", "he", "his", "him"},
    {"Tina", "she", "her", "her"},  {"Tom", "he", "his", "him"},    {"Uma", "she", "her", "her"},
    {"Vic", "he", "his", "him"},    {"Wendy", "she", "her", "her"}, {"Max", "he", "his", "him"},
};
static const char *const countables[] = {"apples", "books", "coins", "pens", "stamps", "marbles",
                                         "cards", "shells", "eggs", "stickers", "cookies", "toys"};
typedef struct { const char *one, *many; } noun;
static const noun goods[] = {
    {"lamp", "lamps"},   {"cup", "cups"},     {"book", "books"},   {"pen", "pens"},
    {"shirt", "shirts"}, {"hat", "hats"},     {"box", "boxes"},    {"plate", "plates"},
    {"chair", "chairs"}, {"bag", "bags"},     {"clock", "clocks"}, {"candle", "candles"},
};
static const char *const cities[] = {"Oslo", "Rome", "Paris", "Lima", "Cairo", "Tokyo", "Delhi",
                                     "Berlin", "Madrid", "Dublin", "Vienna", "Prague", "Quito",
                                     "Seoul", "Nairobi", "Lisbon"};
static const char *const hobbies[] = {"chess", "music", "tennis", "reading", "cooking", "hiking",
                                      "painting", "football", "dancing", "swimming", "gardening",
                                      "cycling"};

static const char *cap(const char *s, char *buf) { /* "she" -> "She" */
    strcpy(buf, s);
    if (buf[0] >= 'a' && buf[0] <= 'z') buf[0] = (char)(buf[0] - 'a' + 'A');
    return buf;
}

static json_t *example(const char *family, const char *query, const char *response) {
    return json_pack("{s:s, s:s, s:s}", "query", query, "response", response, "family", family);
}

/* example() with the checked answer attached (owned by it); frees the query */
static json_t *example_answer(const char *family, sbuf *qs, const char *response, json_t *answer) {
    json_t *e = example(family, qs->s, response);
    json_object_set_new(e, "answer", answer);
    free(qs->s);
    return e;
}

/* ---- arith: word problems with worked steps ---- */

/* "has N things, then 2-3 changes": each change is one or two equations. */
static json_t *arith_inventory(rf_rng *r) {
    const person *p = &PICK(r, people), *q = p;
    while (q == p) q = &PICK(r, people);
    const char *things = PICK(r, countables);
    char c1[16];
    sbuf qs = {0}, rs = {0};
    int cur = irand(r, 3, 30);
    sb_printf(&qs, "%s has %d %s.", p->name, cur, things);
    int n_ops = irand(r, 2, 3), friends_told = 0;
    for (int i = 0; i < n_ops; i++) {
        int nxt, op = irand(r, 0, 6);
        if (op == 4 && friends_told++) op = 0; /* the friends are counted once */
        if (op == 0 || op == 1) { /* gain */
            int b = irand(r, 2, 20);
            nxt = cur + b;
            if (op == 0) sb_printf(&qs, " %s buys %d more.", cap(p->subj, c1), b);
            else sb_printf(&qs, " %s finds %d more %s.", cap(p->subj, c1), b, things);
            sb_printf(&rs, "%d + %d = %d. ", cur, b, nxt);
        } else if ((op == 2 || op == 3) && cur > 2) { /* loss */
            int b = irand(r, 1, cur - 1);
            nxt = cur - b;
            if (op == 2) sb_printf(&qs, " %s gives %d to %s.", cap(p->subj, c1), b, q->name);
            else sb_printf(&qs, " %s loses %d of them.", cap(p->subj, c1), b);
            sb_printf(&rs, "%d - %d = %d. ", cur, b, nxt);
        } else if (op == 4) { /* k friends give m each: two steps */
            int k = irand(r, 2, 5), m = irand(r, 2, 9);
            nxt = cur + k * m;
            sb_printf(&qs, " Each of %s %d friends gives %s %d %s.", p->poss, k, p->obj, m, things);
            sb_printf(&rs, "%d * %d = %d. %d + %d = %d. ", k, m, k * m, cur, k * m, nxt);
        } else if (op == 5 && cur <= 60) { /* doubles / triples */
            int k = irand(r, 2, 3);
            nxt = cur * k;
            sb_printf(&qs, " Then %s %s the number of %s.", p->subj, k == 2 ? "doubles" : "triples", things);
            sb_printf(&rs, "%d * %d = %d. ", cur, k, nxt);
        } else { /* keeps one of k equal shares: k must divide cur */
            int divs[4], n_div = 0;
            for (int k = 2; k <= 5; k++)
                if (cur % k == 0) divs[n_div++] = k;
            if (n_div == 0) { /* fall back to a gain so the step count holds */
                int b = irand(r, 2, 20);
                nxt = cur + b;
                sb_printf(&qs, " %s buys %d more.", cap(p->subj, c1), b);
                sb_printf(&rs, "%d + %d = %d. ", cur, b, nxt);
            } else {
                int k = divs[rf_rng_below(r, (uint64_t)n_div)];
                nxt = cur / k;
                sb_printf(&qs, " %s splits them into %d equal bags and keeps one bag.", cap(p->subj, c1), k);
                sb_printf(&rs, "%d / %d = %d. ", cur, k, nxt);
            }
        }
        cur = nxt;
    }
    sb_printf(&qs, " How many %s does %s have now?", things, p->name);
    sb_printf(&rs, "#### %d", cur);
    json_t *e = example_answer("arith", &qs, rs.s, json_integer(cur));
    free(rs.s);
    return e;
}

/* "buys q1 of one thing at p1 and q2 of another at p2": cost or change. */
static json_t *arith_shopping(rf_rng *r) {
    const person *p = &PICK(r, people);
    const noun *g1 = &PICK(r, goods), *g2 = g1;
    while (g2 == g1) g2 = &PICK(r, goods);
    int q1 = irand(r, 2, 9), p1 = irand(r, 2, 12), q2 = irand(r, 2, 9), p2 = irand(r, 2, 12);
    int c1 = q1 * p1, c2 = q2 * p2, t = c1 + c2;
    char buf[16];
    sbuf qs = {0}, rs = {0};
    sb_printf(&qs, "%s buys %d %s at %d dollars each and %d %s at %d dollars each.", p->name, q1,
              g1->many, p1, q2, g2->many, p2);
    sb_printf(&rs, "%d * %d = %d. %d * %d = %d. %d + %d = %d. ", q1, p1, c1, q2, p2, c2, c1, c2, t);
    int answer = t;
    if (rf_rng_below(r, 2)) {
        static const int bills[] = {50, 100, 200, 500};
        int bill = 0;
        for (int i = 0; i < 4 && !bill; i++)
            if (bills[i] > t) bill = bills[i];
        answer = bill - t;
        sb_printf(&qs, " %s pays with a %d dollar bill. How much change does %s get?",
                  cap(p->subj, buf), bill, p->subj);
        sb_printf(&rs, "%d - %d = %d. ", bill, t, answer);
    } else {
        sb_printf(&qs, " How many dollars does %s spend?", p->subj);
    }
    sb_printf(&rs, "#### %d", answer);
    json_t *e = example_answer("arith", &qs, rs.s, json_integer(answer));
    free(rs.s);
    return e;
}

/* ---- func: a chain of integer operations written as a Python function ---- */

static json_t *func_chain(rf_rng *r) {
    sbuf qs = {0}, rs = {0};
    sb_printf(&qs, "Write a Python function f(x) that does this: start from x");
    sb_printf(&rs, "def f(x):\n");
    int n_ops = irand(r, 1, 3), squared = 0;
    const char *src = "x"; /* the first step reads x, later ones y */
    for (int i = 0; i < n_ops; i++) {
        int op = irand(r, 0, 5), c = irand(r, 2, 9);
        if (op == 5 && squared) op = 0;
        switch (op) {
        case 0: sb_printf(&qs, ", add %d", c); sb_printf(&rs, "    y = %s + %d\n", src, c); break;
        case 1: sb_printf(&qs, ", subtract %d", c); sb_printf(&rs, "    y = %s - %d\n", src, c); break;
        case 2: sb_printf(&qs, ", multiply by %d", c); sb_printf(&rs, "    y = %s * %d\n", src, c); break;
        case 3:
            sb_printf(&qs, ", divide by %d rounding down", c);
            sb_printf(&rs, "    y = %s // %d\n", src, c);
            break;
        case 4:
            sb_printf(&qs, ", take the remainder after dividing by %d", c);
            sb_printf(&rs, "    y = %s %% %d\n", src, c);
            break;
        default:
            squared = 1;
            sb_printf(&qs, ", square it");
            sb_printf(&rs, "    y = %s * %s\n", src, src);
            break;
        }
        src = "y";
    }
    /* hidden inputs: distinct, a few negative, most in [0, 60] */
    int64_t xs[8], ys[8];
    for (int i = 0; i < 8; i++) {
        int dup;
        do {
            xs[i] = i < 2 ? irand(r, -20, -1) : irand(r, 0, 60);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= xs[j] == xs[i];
        } while (dup);
    }
    /* the constant of a comparing ending comes from the values the chain
     * takes on those inputs, so both sides of it get tested */
    char err[128];
    sbuf chain = {0};
    sb_printf(&chain, "%s    return y", rs.s);
    rf_pyfunc *f = rf_pyfunc_parse(chain.s, err, sizeof err);
    if (!f) rf_die("func generator wrote unparsable code (%s): %s", err, chain.s);
    for (int i = 0; i < 8; i++)
        if (rf_pyfunc_call(f, xs[i], &ys[i])) rf_die("func generator: chain fails: %s", chain.s);
    rf_pyfunc_free(f);
    free(chain.s);
    int64_t sorted[8];
    memcpy(sorted, ys, sizeof ys);
    for (int i = 1; i < 8; i++) /* insertion sort */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    long long c = (long long)sorted[irand(r, 2, 5)];
    int end = irand(r, 0, 5), d = irand(r, 0, 9);
    switch (end) {
    case 0: sb_printf(&qs, ", then return it."); sb_printf(&rs, "    return y"); break;
    case 1:
        sb_printf(&qs, ", then return it if it is greater than %lld, otherwise return %d.", c, d);
        sb_printf(&rs, "    return y if y > %lld else %d", c, d);
        break;
    case 2:
        sb_printf(&qs, ", then return 1 if it is even, otherwise return 0.");
        sb_printf(&rs, "    return 1 if y %% 2 == 0 else 0");
        break;
    case 3: sb_printf(&qs, ", then return its absolute value."); sb_printf(&rs, "    return abs(y)"); break;
    case 4:
        sb_printf(&qs, ", then return the larger of it and %lld.", c);
        sb_printf(&rs, "    return max(y, %lld)", c);
        break;
    default:
        sb_printf(&qs, ", then return the smaller of it and %lld.", c);
        sb_printf(&rs, "    return min(y, %lld)", c);
        break;
    }
    /* expected outputs: run the reference answer itself */
    f = rf_pyfunc_parse(rs.s, err, sizeof err);
    if (!f) rf_die("func generator wrote unparsable code (%s): %s", err, rs.s);
    json_t *tests = json_array();
    for (int i = 0; i < 8; i++) {
        int64_t y;
        if (rf_pyfunc_call(f, xs[i], &y)) rf_die("func generator: reference fails on %lld", (long long)xs[i]);
        json_array_append_new(tests, json_pack("[I, I]", (json_int_t)xs[i], (json_int_t)y));
    }
    rf_pyfunc_free(f);
    json_t *e = example("func", qs.s, rs.s);
    json_object_set_new(e, "tests", tests);
    free(qs.s);
    free(rs.s);
    return e;
}

/* ---- json: records described in prose, answered as a JSON list ---- */

/* the response is the answer list written as JSON */
static json_t *json_example(sbuf *qs, json_t *answer) {
    char *resp = json_dumps(answer, JSON_PRESERVE_ORDER);
    json_t *e = example_answer("json", qs, resp, answer);
    free(resp);
    return e;
}

static json_t *json_people(rf_rng *r) {
    sbuf qs = {0};
    sb_printf(&qs, "Write these people as a JSON list with the keys name, age, city and hobbies:");
    int n = irand(r, 2, 4);
    size_t used[4];
    json_t *answer = json_array();
    for (int i = 0; i < n; i++) {
        used[i] = pick_new(r, COUNT(people), used, i);
        const person *p = &people[used[i]];
        int age = irand(r, 18, 80);
        const char *city = PICK(r, cities), *h1 = PICK(r, hobbies), *h2 = h1;
        int n_h = irand(r, 1, 2);
        while (n_h == 2 && h2 == h1) h2 = PICK(r, hobbies);
        sb_printf(&qs, " %s is %d, lives in %s and likes %s%s%s.", p->name, age, city, h1,
                  n_h == 2 ? " and " : "", n_h == 2 ? h2 : "");
        json_t *hs = json_array();
        json_array_append_new(hs, json_string(h1));
        if (n_h == 2) json_array_append_new(hs, json_string(h2));
        json_array_append_new(answer, json_pack("{s:s, s:i, s:s, s:o}", "name", p->name, "age", age,
                                                "city", city, "hobbies", hs));
    }
    return json_example(&qs, answer);
}

static json_t *json_products(rf_rng *r) {
    sbuf qs = {0};
    sb_printf(&qs, "List this stock as JSON objects with the keys item, price and count:");
    int n = irand(r, 2, 4);
    size_t used[4];
    json_t *answer = json_array();
    for (int i = 0; i < n; i++) {
        used[i] = pick_new(r, COUNT(goods), used, i);
        const noun *g = &goods[used[i]];
        int count = irand(r, 2, 40), price = irand(r, 1, 99);
        sb_printf(&qs, "%s %d %s at %d dollars", i == 0 ? "" : i == n - 1 ? " and" : ",", count,
                  g->many, price);
        json_array_append_new(answer, json_pack("{s:s, s:i, s:i}", "item", g->one, "price", price,
                                                "count", count));
    }
    sb_printf(&qs, ".");
    return json_example(&qs, answer);
}

/* ---- families and the split ---- */

static const char *const family_names[RF_TASK_N] = {"arith", "func", "json"};

const char *rf_task_family_name(int family) {
    return family >= 0 && family < RF_TASK_N ? family_names[family] : NULL;
}

int rf_task_family_from_name(const char *name) {
    for (int i = 0; i < RF_TASK_N; i++)
        if (!strcmp(name, family_names[i])) return i;
    return -1;
}

json_t *rf_task_generate(int family, rf_rng *r) {
    switch (family) {
    case RF_TASK_ARITH: return rf_rng_below(r, 2) ? arith_inventory(r) : arith_shopping(r);
    case RF_TASK_FUNC: return func_chain(r);
    case RF_TASK_JSON: return rf_rng_below(r, 3) ? json_people(r) : json_products(r);
    default: rf_die("rf_task_generate: bad family %d", family);
    }
}

/* Draw n examples, rejecting queries already in `seen` (which then holds
 * them too). Gives up after many rejections in a row: the space is used up. */
/* the progress of one split: examples drawn before this call, all of them */
typedef struct {
    int done, total;
    rf_tasks_progress_fn fn;
    void *user;
} split_progress;

static int draw(rf_rng *r, int n, const int *families, int n_fam, json_t *seen, json_t *out, split_progress *pg) {
    int misses = 0;
    for (int i = 0; i < n;) {
        json_t *e = rf_task_generate(families[i % n_fam], r);
        const char *q = json_string_value(json_object_get(e, "query"));
        if (json_object_get(seen, q)) {
            json_decref(e);
            if (++misses > 10000) {
                rf_set_error("task space exhausted: cannot draw %d distinct '%s' examples", n,
                             rf_task_family_name(families[i % n_fam]));
                return -1;
            }
            continue;
        }
        misses = 0;
        json_object_set_new(seen, q, json_true());
        json_array_append_new(out, e);
        i++;
        if (pg->fn) pg->fn(++pg->done, pg->total, pg->user);
    }
    return 0;
}

int rf_tasks_make_split(uint64_t seed, int n_train, int n_test, const int *families, int n_fam,
                        json_t **train, json_t **test) {
    return rf_tasks_make_split_progress(seed, n_train, n_test, families, n_fam, NULL, NULL, train, test);
}

int rf_tasks_make_split_progress(uint64_t seed, int n_train, int n_test, const int *families, int n_fam,
                                 rf_tasks_progress_fn on_drawn, void *user, json_t **train, json_t **test) {
    *train = *test = NULL;
    if (n_fam <= 0 || n_train < 0 || n_test < 0) {
        rf_set_error("tasks: need at least one family and non-negative sizes");
        return -1;
    }
    for (int i = 0; i < n_fam; i++)
        if (!rf_task_family_name(families[i])) {
            rf_set_error("tasks: bad family %d", families[i]);
            return -1;
        }
    rf_rng r_test, r_train;
    rf_rng_seed(&r_test, seed ^ 0x7465737474657374ull);   /* "testtest" */
    rf_rng_seed(&r_train, seed ^ 0x747261696e747261ull);  /* "traintra" */
    json_t *seen = json_object(), *te = json_array(), *tr = json_array();
    split_progress pg = {0, n_test + n_train, on_drawn, user};
    int rc = draw(&r_test, n_test, families, n_fam, seen, te, &pg);
    if (rc == 0) rc = draw(&r_train, n_train, families, n_fam, seen, tr, &pg);
    json_decref(seen);
    if (rc) {
        json_decref(te);
        json_decref(tr);
        return -1;
    }
    *train = tr;
    *test = te;
    return 0;
}
