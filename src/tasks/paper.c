/* paper.c - see paper.h. The prompts, stop sequences, filters and metrics
 * are those of the lm-eval task configurations bundled with the authors'
 * code (ML-GSAI/ReFusion: eval.sh names the tasks, lm_eval/tasks/... holds
 * them; docs/eval.md lists each file). Where a configuration writes "\n"
 * inside a single-quoted YAML string (gsm8k-cot.yaml, arc_challenge_chat.yaml)
 * YAML keeps the backslash and the n, so the prompt holds those two
 * characters, not a newline; so do we. */
#include "tasks/paper.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/paper_internal.h"

typedef struct {
    const char *name, *harness;
    const char *stops[4];
    const char *metrics[3];
} task_def;

static const task_def tasks[RF_PAPER_N] = {
    [RF_PAPER_GSM8K] = {"gsm8k", "gsm8k_cot", {"Q:", "</s>", "<|im_end|>"},
                        {"exact_match,flexible-extract", "exact_match,strict-match"}},
    [RF_PAPER_MATH] = {"math", "minerva_math", {"Problem:"}, {"exact_match,boxed", "exact_match,minerva"}},
    [RF_PAPER_HUMANEVAL] = {"humaneval", "humaneval_instruct_noprefix", {"\nassert", "\n# Test"},
                            {"pass@1,create_test"}},
    [RF_PAPER_MBPP] = {"mbpp", "mbpp", {"[DONE]"}, {"pass_at_1,none"}},
    [RF_PAPER_ARC_C] = {"arc-c", "arc_challenge_chat", {"\n\n", "."}, {"exact_match,remove_whitespace"}},
    [RF_PAPER_MMLU_PRO] = {"mmlu-pro", "mmlu_pro", {"Question:"}, {"exact_match,custom-extract"}},
    [RF_PAPER_GPQA] = {"gpqa", "gpqa_main_generative_n_shot", {"</s>", "Question:", "<|im_end|>"},
                       {"exact_match,flexible-extract", "exact_match,strict-match"}},
};

const char *rf_paper_task_name(int task) { return task >= 0 && task < RF_PAPER_N ? tasks[task].name : NULL; }
const char *rf_paper_harness_task(int task) { return task >= 0 && task < RF_PAPER_N ? tasks[task].harness : NULL; }
int rf_paper_task_from_name(const char *name) {
    for (int i = 0; name && i < RF_PAPER_N; i++)
        if (!strcmp(name, tasks[i].name)) return i;
    return -1;
}

const char *const *rf_paper_metrics(int task, int *n) {
    int k = 0;
    while (k < 3 && tasks[task].metrics[k]) k++;
    *n = k;
    return tasks[task].metrics;
}

/* ---- reading ---- */
static const char *str_field(const json_t *r, const char *key) { return json_string_value(json_object_get(r, key)); }

static char *cat(const char *const *parts, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(parts[i]);
    char *o = rf_malloc(len), *w = o;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(parts[i]);
        memcpy(w, parts[i], k);
        w += k;
    }
    *w = 0;
    return o;
}
#define CAT(...) cat((const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *)))

static char *strip_copy(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *o = rf_malloc(n + 1);
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

/* GPQA's preprocess (lm_eval/tasks/gpqa/generative/utils.py): strip, " [title]"
 * to ". ", [...] removed, double spaces to one */
static char *gpqa_clean(const char *s) {
    char *t = strip_copy(s ? s : " ");
    rf_paper_replace_in(&t, " [title]", ". ");
    char *u = rf_paper_regex_sub("\\[.*?\\]", "", t);
    free(t);
    rf_paper_replace_in(&u, "  ", " ");
    return u;
}

static const char letters[] = "ABCDEFGHIJ";

static json_t *fail(const char *what) {
    rf_set_error("%s", what);
    return NULL;
}

static json_t *read_gsm8k(const json_t *r, json_t *it) {
    const char *q = str_field(r, "question"), *a = str_field(r, "answer");
    if (!q || !a) return fail("needs string fields \"question\" and \"answer\"");
    const char *h = NULL;
    for (const char *p = a; (p = strstr(p, "####")); p++) h = p;
    if (!h) return fail("\"answer\" has no \"#### N\" line");
    char *target = strip_copy(h + 4);
    /* gsm8k-cot.yaml (0-shot): the instruction, a literal backslash-n, "Q: ", the question, "\nA:" */
    char *user = CAT("Solve the following math problem. You need to think step-by-step, show your detailed "
                     "reasoning, and end with \"The answer is [result],\" where [result] is the answer you get.\\nQ: ",
                     q, "\nA:");
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "target", json_string(target));
    free(user), free(target);
    return it;
}

static json_t *read_math(const json_t *r, json_t *it) {
    const char *p = str_field(r, "problem"), *sol = str_field(r, "solution");
    if (!p || !sol) return fail("needs string fields \"problem\" and \"solution\"");
    char *boxed = rf_math_last_boxed(sol);
    if (!boxed) return fail("\"solution\" has no \\boxed{} answer");
    char *target = rf_math_normalize_final(boxed);
    char *user = CAT("Problem:\n", p, "\n\nSolution:"); /* minerva_math utils.doc_to_text */
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "target", json_string(target));
    json_object_set_new(it, "boxed", json_string(boxed));
    free(user), free(target), free(boxed);
    return it;
}

static json_t *read_humaneval(const json_t *r, json_t *it) {
    const char *p = str_field(r, "prompt"), *t = str_field(r, "test"), *e = str_field(r, "entry_point");
    if (!p || !t || !e) return fail("needs string fields \"prompt\", \"test\" and \"entry_point\"");
    if (!*e || strspn(e, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(e))
        return fail("\"entry_point\" is not a Python name");
    /* humaneval_instruct_noprefix.yaml; the assistant's turn opens the code fence */
    char *user = CAT("Write a solution to the following problem and make sure that it passes the tests:\n```", p, "```");
    char *test = CAT(t, "\ncheck(", e, ")");
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "prefix", json_string("```python\n"));
    json_object_set_new(it, "code_prompt", json_string(p));
    json_object_set_new(it, "entry_point", json_string(e));
    json_object_set_new(it, "test", json_string(test));
    free(user), free(test);
    return it;
}

static json_t *read_mbpp(const json_t *r, json_t *it) {
    const char *text = str_field(r, "text");
    if (!text) text = str_field(r, "prompt"); /* the "sanitized" configuration's name */
    const json_t *tl = json_object_get(r, "test_list");
    if (!text || !json_is_array(tl) || json_array_size(tl) < 3) return fail("needs \"text\" and a \"test_list\" of 3 or more asserts");
    const char *t[3];
    for (int i = 0; i < 3; i++)
        if (!(t[i] = json_string_value(json_array_get(tl, (size_t)i)))) return fail("\"test_list\" holds a non-string");
    /* the authors' mbpp.yaml: their own 0-shot instruction */
    char *user = CAT("You are an expert Python programmer. Your task is to write a single Python function to solve "
                     "the problem described below, and here is your task: ", text,
                     "\n\nDirectly after the '[BEGIN]' marker, you must write only the Python code for the function. "
                     "Do not provide any explanations, comments, or introductory text. The function must include the "
                     "'def' line, its arguments, the function body, and a 'return' statement. Your code should pass "
                     "these tests:\n\n", t[0], "\n", t[1], "\n", t[2], "\n[BEGIN]\n");
    /* doc_to_target: the three asserts are the reference program */
    char *test = CAT(t[0], "\n", t[1], "\n", t[2]);
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "test", json_string(test));
    free(user), free(test);
    return it;
}

static json_t *read_arc(const json_t *r, json_t *it) {
    const char *q = str_field(r, "question");
    const json_t *ch = json_object_get(r, "choices"), *txt = json_object_get(ch, "text");
    const json_t *key = json_object_get(r, "answerKey");
    if (!q || !json_is_array(txt) || json_array_size(txt) < 3 || !json_is_string(key))
        return fail("needs \"question\", \"choices\": {\"text\": [3 or more]} and \"answerKey\"");
    size_t n = json_array_size(txt);
    const char *c[4] = {0};
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_array_get(txt, i))) return fail("\"choices.text\" holds a non-string");
    for (size_t i = 0; i < 4 && i < n; i++) c[i] = json_string_value(json_array_get(txt, i));
    const char *k = json_string_value(key);
    char target[8];
    /* doc_to_target: 1-4 as A-D, a letter as it is */
    if (strlen(k) == 1 && k[0] >= '1' && k[0] <= '4') snprintf(target, sizeof target, "%c", letters[k[0] - '1']);
    else snprintf(target, sizeof target, "%.7s", k);
    char *qs = strip_copy(q);
    /* arc_challenge_chat.yaml: single-quoted YAML, so every "\n" is a backslash and an n */
    char *user = CAT("Given the following question and four candidate answers (A, B, C and D), choose the best "
                     "answer.\\nQuestion: ", qs, "\\nA. ", c[0], "\\nB. ", c[1], "\\nC. ", c[2], n > 3 ? "\\nD. " : "",
                     n > 3 ? c[3] : "",
                     "\\nYour response should end with \"The best answer is [the_answer_letter]\" where the "
                     "[the_answer_letter] is one of A, B, C or D.");
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "prefix", json_string("The best answer is"));
    json_object_set_new(it, "target", json_string(target));
    json_object_set_new(it, "choices", json_deep_copy(txt));
    free(user), free(qs);
    return it;
}

static json_t *read_mmlu_pro(const json_t *r, json_t *it) {
    const char *q = str_field(r, "question"), *cat_ = str_field(r, "category");
    const json_t *opts = json_object_get(r, "options"), *ans = json_object_get(r, "answer");
    if (!q || !json_is_array(opts) || !json_array_size(opts)) return fail("needs \"question\" and \"options\"");
    char target[4] = "";
    if (json_is_string(ans) && strlen(json_string_value(ans)) == 1) snprintf(target, sizeof target, "%s", json_string_value(ans));
    else if (json_is_integer(json_object_get(r, "answer_index")) && json_integer_value(json_object_get(r, "answer_index")) >= 0 &&
             json_integer_value(json_object_get(r, "answer_index")) < 10)
        snprintf(target, sizeof target, "%c", letters[json_integer_value(json_object_get(r, "answer_index"))]);
    if (!*target) return fail("needs \"answer\" (a letter) or \"answer_index\"");
    /* utils.format_cot_example(including_answer=False); at most ten options */
    FILE *f;
    char *user = NULL;
    size_t un = 0;
    if (!(f = open_memstream(&user, &un))) rf_oom(0);
    fprintf(f, "Question:\n%s\nOptions:\n", q);
    for (size_t i = 0; i < json_array_size(opts) && i < 10; i++) {
        const char *o = json_string_value(json_array_get(opts, i));
        if (!o) {
            fclose(f), free(user);
            return fail("\"options\" holds a non-string");
        }
        fprintf(f, "%c. %s\n", letters[i], o);
    }
    fputs("Answer: Let's think step by step.", f);
    fclose(f);
    /* the subject's description (mmlu_pro_<subject>.yaml), the system message */
    char *sys = CAT("The following are multiple choice questions (with answers) about ", cat_ ? cat_ : "",
                    ". Think step by step and then finish your answer with \"the answer is (X)\" where X is the "
                    "correct letter choice.\n");
    json_object_set_new(it, "system", json_string(sys));
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "target", json_string(target));
    json_object_set_new(it, "choices", json_deep_copy(opts));
    if (cat_) json_object_set_new(it, "category", json_string(cat_));
    free(sys), free(user);
    return it;
}

/* GPQA: the raw record (Question, Correct Answer, Incorrect Answer 1-3) with
 * its choices in a fixed pseudo-random order per index (lm-eval shuffles
 * them with Python's random, which this does not reproduce), or a record
 * whose "choices" [4] and "answer" "(X)" are already set. */
static json_t *read_gpqa(const json_t *r, json_t *it, int index) {
    const char *q = str_field(r, "Question");
    if (!q) q = str_field(r, "question");
    if (!q) return fail("needs \"Question\"");
    char *c[4] = {0};
    char target[8];
    const json_t *given = json_object_get(r, "choices");
    if (json_is_array(given)) {
        const char *a = str_field(r, "answer");
        if (json_array_size(given) != 4 || !a || strlen(a) != 3 || a[0] != '(' || a[2] != ')' || a[1] < 'A' || a[1] > 'D')
            return fail("\"choices\" must hold 4 strings and \"answer\" be \"(A)\"..\"(D)\"");
        for (int i = 0; i < 4; i++) {
            const char *s = json_string_value(json_array_get(given, (size_t)i));
            if (!s) {
                for (int j = 0; j < i; j++) free(c[j]);
                return fail("\"choices\" holds a non-string");
            }
            c[i] = rf_strdup(s);
        }
        snprintf(target, sizeof target, "%s", a);
    } else {
        const char *keys[4] = {"Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3", "Correct Answer"};
        for (int i = 0; i < 4; i++)
            if (!str_field(r, keys[i])) return fail("needs \"Correct Answer\" and \"Incorrect Answer 1\"..\"3\"");
        int perm[4] = {0, 1, 2, 3};
        rf_rng rng;
        rf_rng_seed(&rng, 0x67707161ull + (uint64_t)index); /* "gpqa" + index */
        for (int i = 3; i > 0; i--) {
            int j = (int)rf_rng_below(&rng, (uint64_t)i + 1), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int i = 0; i < 4; i++) {
            c[i] = gpqa_clean(str_field(r, keys[perm[i]]));
            if (perm[i] == 3) snprintf(target, sizeof target, "(%c)", letters[i]);
        }
    }
    char *user = CAT("Question: ", q, "\nChoices:\n(A) ", c[0], "\n(B) ", c[1], "\n(C) ", c[2], "\n(D) ", c[3], "\nAnswer:");
    json_object_set_new(it, "system", json_string("Answer the following multiple-choice question. Your response should be "
                                                  "the letter of the correct option, enclosed in parentheses ((A), (B), "
                                                  "(C), or (D)).\n"));
    json_object_set_new(it, "user", json_string(user));
    json_object_set_new(it, "target", json_string(target));
    json_t *arr = json_array();
    for (int i = 0; i < 4; i++) json_array_append_new(arr, json_string(c[i])), free(c[i]);
    json_object_set_new(it, "choices", arr);
    free(user);
    return it;
}

json_t *rf_paper_item(int task, const json_t *r, int index) {
    if (!json_is_object(r)) {
        rf_set_error("a record must be a JSON object");
        return NULL;
    }
    json_t *it = json_object(), *id = NULL;
    const char *idkeys[] = {"task_id", "id", "question_id", "Record ID", "unique_id", NULL};
    for (int i = 0; idkeys[i] && !id; i++) {
        json_t *v = json_object_get(r, idkeys[i]);
        if (json_is_string(v) || json_is_integer(v)) id = v;
    }
    if (id && json_is_string(id)) json_object_set_new(it, "id", json_string(json_string_value(id)));
    else if (id) json_object_set_new(it, "id", json_sprintf("%lld", (long long)json_integer_value(id)));
    else json_object_set_new(it, "id", json_sprintf("%d", index));
    json_t *ok = NULL;
    switch (task) {
    case RF_PAPER_GSM8K: ok = read_gsm8k(r, it); break;
    case RF_PAPER_MATH: ok = read_math(r, it); break;
    case RF_PAPER_HUMANEVAL: ok = read_humaneval(r, it); break;
    case RF_PAPER_MBPP: ok = read_mbpp(r, it); break;
    case RF_PAPER_ARC_C: ok = read_arc(r, it); break;
    case RF_PAPER_MMLU_PRO: ok = read_mmlu_pro(r, it); break;
    case RF_PAPER_GPQA: ok = read_gpqa(r, it, index); break;
    default: rf_set_error("unknown task %d", task);
    }
    if (!ok) json_decref(it);
    return ok;
}

#define MAX_DATA_BYTES ((size_t)1 << 30)

int rf_jsonl_foreach(char *text, const char *path, int (*fn)(json_t *record, void *user), void *user) {
    int line = 0;
    for (char *s = text; *s;) {
        char *e = strchr(s, '\n');
        if (e) *e = 0;
        line++;
        const char *q = s;
        while (*q == ' ' || *q == '\r' || *q == '\t') q++;
        if (*q) { /* blank lines are skipped */
            json_error_t je;
            json_t *rec = json_loads(s, 0, &je);
            int rc = rec ? fn(rec, user) : -1;
            json_decref(rec);
            if (rc) {
                char why[512];
                snprintf(why, sizeof why, "%s", rec ? rf_last_error() : je.text);
                rf_set_error("%s: line %d: %s", path, line, why);
                return -1;
            }
        }
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

typedef struct {
    int task;
    json_t *items;
} load_state;

/* one record of a JSON Lines data file into the items */
static int load_record(json_t *rec, void *user) {
    load_state *ls = user;
    json_t *it = rf_paper_item(ls->task, rec, (int)json_array_size(ls->items));
    if (!it) return -1;
    json_array_append_new(ls->items, it);
    return 0;
}

/* one JSON array of records into items */
static int load_array(int task, const char *path, const char *text, json_t *items) {
    json_error_t e;
    json_t *all = json_loads(text, 0, &e);
    if (!json_is_array(all)) {
        rf_set_error("%s: line %d: %s", path, e.line, all ? "expected a JSON array of records" : e.text);
        json_decref(all);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *it = rf_paper_item(task, json_array_get(all, i), (int)i);
        if (!it) {
            rf_prefix_error("%s: record %zu", path, i);
            json_decref(all);
            return -1;
        }
        json_array_append_new(items, it);
    }
    json_decref(all);
    return 0;
}

json_t *rf_paper_load(int task, const char *path) {
    size_t len;
    char *text = rf_read_file_max(path, MAX_DATA_BYTES, &len);
    if (!text) return NULL;
    if (strlen(text) != len) {
        free(text);
        rf_set_error("%s: the file holds a NUL byte", path);
        return NULL;
    }
    json_t *items = json_array();
    const char *p = text;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    load_state ls = {task, items};
    int rc = *p == '[' ? load_array(task, path, text, items) : rf_jsonl_foreach(text, path, load_record, &ls);
    free(text);
    if (rc) {
        json_decref(items);
        return NULL;
    }
    if (!json_array_size(items)) {
        json_decref(items);
        rf_set_error("%s: no records", path);
        return NULL;
    }
    return items;
}

/* ---- the prompt ---- */
char *rf_paper_prompt(const rf_tokenizer *t, const json_t *item) {
    rf_chat_msg m[3];
    int n = 0;
    const char *sys = str_field(item, "system"), *user = str_field(item, "user"), *prefix = str_field(item, "prefix");
    if (!user) {
        rf_set_error("item has no user message");
        return NULL;
    }
    if (sys) m[n++] = (rf_chat_msg){"system", sys};
    m[n++] = (rf_chat_msg){"user", user};
    if (!prefix) return rf_chat_apply(t, m, n, 1, 1); /* the authors' enable_thinking=True */
    m[n++] = (rf_chat_msg){"assistant", prefix};
    char *text = rf_chat_apply(t, m, n, 0, 1);
    if (!text) return NULL;
    /* continue_final_message: cut the rendering right after the prefix
     * (transformers: the last occurrence of the stripped message, then its
     * length with the trailing whitespace if the rendering kept it) */
    char *core = strip_copy(prefix);
    const char *last = NULL;
    for (const char *p = text; (p = strstr(p, core)); p++) last = p;
    if (!last) {
        free(core), free(text);
        rf_set_error("the chat template dropped the assistant prefix");
        return NULL;
    }
    const char *lead = prefix;
    while (*lead == ' ' || *lead == '\n' || *lead == '\t' || *lead == '\r') lead++;
    size_t keep = !strncmp(last, lead, strlen(lead)) ? strlen(lead) : strlen(core);
    text[(last - text) + keep] = 0;
    free(core);
    return text;
}

/* ---- the answer ---- */
char *rf_paper_completion(int task, const char *decoded) {
    size_t cut = strlen(decoded);
    for (int i = 0; i < 4 && tasks[task].stops[i]; i++) {
        const char *p = strstr(decoded, tasks[task].stops[i]);
        if (p && (size_t)(p - decoded) < cut) cut = (size_t)(p - decoded);
    }
    char *s = rf_malloc(cut + 1);
    memcpy(s, decoded, cut);
    s[cut] = 0;
    /* eval.py: re.search(r'```python\n(.*?)\n```', DOTALL) -> its code */
    for (const char *open = strstr(s, "```python\n"); open; open = strstr(open + 1, "```python\n")) {
        const char *a = open + strlen("```python\n"), *b = strstr(a, "\n```");
        if (!b) continue;
        size_t n = (size_t)(b - a);
        char *code = rf_malloc(n + 1);
        memcpy(code, a, n);
        code[n] = 0;
        free(s);
        return code;
    }
    return s;
}

/* ---- scoring ---- */
static void put_extracted(json_t *ex, const char *name, const char *v) {
    json_object_set_new(ex, name, v ? json_string(v) : json_null());
}

/* lm-eval's regex filter with its fallback */
static char *pick_or_invalid(const char *pattern, const char *text, int sel) {
    char *m = rf_paper_regex_pick(pattern, text, sel);
    return m ? m : rf_strdup("[invalid]");
}

/* multi_choice_regex (lm_eval/filters/extraction.py) for GPQA's flexible-extract */
static char *gpqa_flexible(const char *resp, const json_t *choices) {
    char *m = rf_paper_regex_pick("(\\([A-Z]\\))", resp, -1);
    if (m && *m) return m;
    free(m);
    /* step 1: the text of a choice (lowercase, Unicode punctuation removed) */
    size_t n = json_array_size(choices);
    FILE *f;
    char *alt = NULL;
    size_t an = 0;
    if (!(f = open_memstream(&alt, &an))) rf_oom(0);
    char **keys = rf_calloc(n + 1, sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        char *st = strip_copy(json_string_value(json_array_get(choices, i)));
        keys[i] = rf_paper_fold(st, 1, 1);
        free(st);
        char *esc = rf_paper_regex_escape(keys[i]);
        fprintf(f, "%s%s", i ? "|" : "", esc);
        free(esc);
    }
    fclose(f);
    char *folded = rf_paper_fold(resp, 1, 1);
    char *hit = rf_paper_regex_pick(alt, folded, -1);
    char *out = NULL;
    if (hit && *hit) /* the dictionary keeps the last choice of equal text */
        for (size_t i = n; i-- > 0 && !out;)
            if (!strcmp(keys[i], hit)) {
                out = rf_malloc(4);
                snprintf(out, 4, "(%c)", letters[i]);
            }
    free(hit), free(folded), free(alt);
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
    if (out) return out;
    /* step 2: ":" then a bare letter */
    char *bare = rf_paper_regex_pick(":[\\s]*(A|B|C|D)", resp, -1);
    if (bare && *bare) {
        out = rf_malloc(4);
        snprintf(out, 4, "(%c)", bare[0]);
    }
    free(bare);
    return out ? out : rf_strdup("[invalid]");
}

static int run_code(const json_t *item, const char *code, const char *entry, const rf_sandbox_limits *box,
                    double *pass, json_t *d) {
    rf_sandbox_result r;
    if (rf_sandbox_run(code, str_field(item, "test"), entry, box, &r)) return -1;
    *pass = r.passed;
    json_object_set_new(d, "sandbox", json_pack("{s:b, s:i, s:i, s:b, s:s, s:{s:b, s:b, s:b, s:b, s:b}}", "passed", r.passed,
                                                "exit_code", r.exit_code, "signal", r.signal, "timed_out", r.timed_out,
                                                "output_tail", r.tail, "protections", "network", r.net_isolated, "pids",
                                                r.pid_isolated, "files", r.fs_confined, "not_root", r.dropped_root,
                                                "view", r.view_private));
    return 0;
}

int rf_paper_score(int task, const json_t *item, const char *c, const rf_sandbox_limits *box, double *v,
                   json_t **detail) {
    json_t *d = json_object(), *ex = json_object();
    json_object_set_new(d, "extracted", ex);
    const char *target = str_field(item, "target");
    int rc = 0;
    switch (task) {
    case RF_PAPER_GSM8K: {
        static const char *const ign[] = {",", "\\$", "(?s).*#### ", "\\.$"};
        char *strict = pick_or_invalid("The answer is (\\-?[0-9\\.\\,]+).", c, 0);
        char *flex = pick_or_invalid("(-?[$0-9.,]{2,})|(-?[0-9]+)", c, -1);
        v[0] = rf_paper_exact_match(flex, target, ign, 4, 1, 0);
        v[1] = rf_paper_exact_match(strict, target, ign, 4, 1, 0);
        put_extracted(ex, "flexible-extract", flex), put_extracted(ex, "strict-match", strict);
        free(strict), free(flex);
        break;
    }
    case RF_PAPER_MATH: {
        /* boxed: the completion's last \boxed{} against the solution's;
         * minerva: the "Final Answer: The final answer is X. I hope it is
         * correct." line, normalised, against the normalised target */
        char *boxed = rf_math_last_boxed(c);
        v[0] = boxed && rf_math_equiv(boxed, str_field(item, "boxed"));
        char *t = CAT(c, "I hope it is correct.");
        char *fin = rf_paper_regex_pick("Final Answer: The final answer is(.*?). I hope it is correct.", t, 0);
        char *norm = rf_math_normalize_final(fin ? fin : "[invalidanswer]");
        v[1] = fin && rf_math_equiv(norm, target);
        put_extracted(ex, "boxed", boxed), put_extracted(ex, "minerva", norm);
        free(boxed), free(t), free(fin), free(norm);
        break;
    }
    case RF_PAPER_HUMANEVAL: {
        /* utils.build_predictions_instruct: the prompt, a newline, the code up to
         * the closing fence; sanitised to the entry point in the sandbox */
        const char *after = strstr(c, "```python\n");
        after = after ? after + strlen("```python\n") : c;
        const char *fence = strstr(after, "```");
        size_t n = fence ? (size_t)(fence - after) : strlen(after);
        char *body = rf_malloc(n + 1);
        memcpy(body, after, n);
        body[n] = 0;
        char *code = CAT(str_field(item, "code_prompt"), "\n", body);
        put_extracted(ex, "program", code);
        rc = run_code(item, code, str_field(item, "entry_point"), box, &v[0], d);
        free(body), free(code);
        break;
    }
    case RF_PAPER_MBPP:
        put_extracted(ex, "program", c);
        rc = run_code(item, c, NULL, box, &v[0], d);
        break;
    case RF_PAPER_ARC_C: {
        const char *s = c;
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r' || *s == '\f' || *s == '\v') s++;
        v[0] = rf_paper_exact_match(s, target, NULL, 0, 1, 1);
        put_extracted(ex, "remove_whitespace", s);
        break;
    }
    case RF_PAPER_MMLU_PRO: {
        char *m = pick_or_invalid("answer is \\(?([ABCDEFGHIJ])\\)?", c, 0);
        v[0] = rf_paper_exact_match(m, target, NULL, 0, 1, 1);
        put_extracted(ex, "custom-extract", m);
        free(m);
        break;
    }
    case RF_PAPER_GPQA: {
        char *strict = pick_or_invalid("(?<=The answer is )(.*)(?=.)", c, 0);
        char *flex = gpqa_flexible(c, json_object_get(item, "choices"));
        v[0] = rf_paper_exact_match(flex, target, NULL, 0, 1, 1);
        v[1] = rf_paper_exact_match(strict, target, NULL, 0, 1, 1);
        put_extracted(ex, "flexible-extract", flex), put_extracted(ex, "strict-match", strict);
        free(strict), free(flex);
        break;
    }
    default: rf_set_error("unknown task %d", task), rc = -1;
    }
    if (rc) {
        json_decref(d);
        return -1;
    }
    *detail = d;
    return 0;
}
