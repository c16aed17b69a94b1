/* tasks_paper_score.c - the paper tasks' readers, prompts and scorers on the
 * fixtures in tests/data/paper_tasks/ (a handful of records per data set
 * format, and answers that are right, wrong and malformed), against
 * expectations worked out by hand from the lm-eval rules (docs/eval.md);
 * the MATH equivalence table; the filters' pieces; bad data files. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tasks/paper.h"

static const char *src_dir(void) {
    const char *s = getenv("REFUSION_SRC");
    return s ? s : "..";
}

static char *fixture(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/data/paper_tasks/%s", src_dir(), name);
    return buf;
}

/* the completions of an answers file, in order */
static json_t *read_answers(const char *name) {
    FILE *f = fopen(fixture(name), "r");
    json_t *out = json_array();
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        json_array_append(out, json_object_get(o, "completion"));
        json_decref(o);
    }
    if (f) fclose(f);
    return out;
}

/* expected[i][k]: metric k of item i, worked out by hand */
static void score_fixture(int task, const char *data, const char *answers, int n, const double *expected) {
    json_t *items = rf_paper_load(task, fixture(data));
    CHECK(items != NULL, "%s: %s", data, items ? "" : rf_last_error());
    if (!items) return;
    json_t *ans = read_answers(answers);
    int nm;
    rf_paper_metrics(task, &nm);
    CHECK((int)json_array_size(items) == n && (int)json_array_size(ans) == n, "%s: %zu items, %zu answers", data,
          json_array_size(items), json_array_size(ans));
    rf_sandbox_limits box;
    rf_sandbox_default(&box);
    box.wall_s = 5;
    for (int i = 0; i < n && i < (int)json_array_size(items); i++) {
        char *c = rf_paper_completion(task, json_string_value(json_array_get(ans, (size_t)i)));
        double v[3] = {-1, -1, -1};
        json_t *d = NULL;
        int rc = rf_paper_score(task, json_array_get(items, (size_t)i), c, &box, v, &d);
        CHECK(rc == 0, "%s item %d: %s", data, i, rc ? rf_last_error() : "");
        for (int k = 0; k < nm; k++) {
            char *ex = d ? json_dumps(json_object_get(d, "extracted"), JSON_COMPACT) : NULL;
            CHECK(v[k] == expected[i * nm + k], "%s item %d metric %d: got %g, want %g (extracted %s)", data, i, k, v[k],
                  expected[i * nm + k], ex ? ex : "-");
            free(ex);
        }
        json_decref(d);
        free(c);
    }
    json_decref(items);
    json_decref(ans);
}

static void check_prompt(int task, const char *data, int index, const char *want) {
    json_t *items = rf_paper_load(task, fixture(data));
    if (!items) {
        CHECK(0, "%s: %s", data, rf_last_error());
        return;
    }
    char *p = rf_paper_prompt(NULL, json_array_get(items, (size_t)index));
    CHECK(p && !strcmp(p, want), "%s prompt:\n--- got\n%s\n--- want\n%s", data, p ? p : "(null)", want);
    free(p);
    json_decref(items);
}

/* MATH: pairs the scorer must find equivalent (1) or not (0) */
static const struct {
    const char *a, *b;
    int eq;
} math_pairs[] = {
    {"\\frac{1}{2}", "\\dfrac{1}{2}", 1},
    {"\\frac12", "\\frac{1}{2}", 1},
    {"\\tfrac{1}{3}", "\\frac13", 1},
    {"0.5", "\\frac{1}{2}", 1},
    {"1/2", "\\frac{1}{2}", 1},
    {"\\frac{2}{4}", "0.5", 1},
    {"2.50", "\\frac{5}{2}", 1},
    {"10", "10.0", 1},
    {"10", "10\\text{ cm}", 1},
    {"5", "5^\\circ", 1},
    {"90^{\\circ}", "90", 1},
    {"\\left(1,2\\right)", "(1,2)", 1},
    {"x = 3", "3", 1},
    {"\\sqrt2", "\\sqrt{2}", 1},
    {" 3 ", "3", 1},
    {"1,000", "1000", 1},
    {"\\$5", "5", 1},
    {".5", "0.5", 1},
    {"-\\frac{2}{3}", "-\\frac23", 1},
    {"\\text{(A)}", "(A)", 1},
    {"\\mbox{(B)}", "(B)", 1},
    {"12 \\text{ dollars}", "12", 1},
    {"\\frac{1}{2}", "\\frac{1}{3}", 0},
    {"2", "3", 0},
    {"10", "100", 0},
    {"\\sqrt{2}", "2", 0},
    {"(1,2)", "(2,1)", 0},
    {"x+1", "x-1", 0},
    {"0.33", "\\frac{1}{3}", 0},
    {"", "0", 0},
    {"[invalidanswer]", "5", 0},
    {"\\frac{3}{4}", "\\frac{4}{3}", 0},
    {"-2", "2", 0},
    {"2\\pi", "\\pi", 0},
};

int main(void) {
    /* ---- the MATH pieces ---- */
    for (size_t i = 0; i < sizeof math_pairs / sizeof math_pairs[0]; i++) {
        int got = rf_math_equiv(math_pairs[i].a, math_pairs[i].b), back = rf_math_equiv(math_pairs[i].b, math_pairs[i].a);
        CHECK(got == math_pairs[i].eq && back == got, "math_equiv(\"%s\", \"%s\") = %d/%d, want %d", math_pairs[i].a,
              math_pairs[i].b, got, back, math_pairs[i].eq);
    }
    struct {
        const char *in, *boxed;
    } boxes[] = {
        {"so $\\boxed{\\frac{1}{2}}$ and more", "\\frac{1}{2}"},
        {"\\boxed{1} then \\boxed{{2}}", "{2}"},
        {"\\boxed 5$ rest", "5"},
        {"\\boxed{unclosed", NULL},
        {"no box here", NULL},
        {"\\fbox{3}", NULL}, /* remove_boxed accepts only \boxed */
    };
    for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++) {
        char *b = rf_math_last_boxed(boxes[i].in);
        CHECK((!b && !boxes[i].boxed) || (b && boxes[i].boxed && !strcmp(b, boxes[i].boxed)), "last_boxed(%s) = %s",
              boxes[i].in, b ? b : "(null)");
        free(b);
    }
    /* minerva's normalisation, by hand from normalize_final_answer */
    struct {
        const char *in, *out;
    } norms[] = {
        {"x = 10", "10"},
        {"$\\frac{1}{2}$", "\\frac{1}{2}"},
        {"\\text{5 inches}", "5"},
        {"\\fracab", "\\frac{a}{b}"},
        {"\\sqrt3", "\\sqrt{3}"},
        {"100,000", "100000"},
        {"1,2,3x", "1,2,3x"},
        {"\\boxed{7}", "7"},
    };
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
        char *n = rf_math_normalize_final(norms[i].in);
        CHECK(!strcmp(n, norms[i].out), "normalize_final(%s) = %s, want %s", norms[i].in, n, norms[i].out);
        free(n);
    }
    char *h = rf_math_strip_string("\\left( \\dfrac12 , .5 \\right)");
    CHECK(!strcmp(h, "(\\frac{1}{2},0.5)"), "strip_string: %s", h);
    free(h);

    /* ---- the filters' pieces ---- */
    char *m = rf_paper_regex_pick("(-?[$0-9.,]{2,})|(-?[0-9]+)", "a 3 b 45, c 6", -1);
    CHECK(m && !strcmp(m, "6"), "flexible last: %s", m ? m : "(null)");
    free(m);
    m = rf_paper_regex_pick("(-?[$0-9.,]{2,})|(-?[0-9]+)", "a 3 b 45, c 6", 0);
    CHECK(m && !strcmp(m, "3"), "flexible first: %s", m ? m : "(null)");
    free(m);
    m = rf_paper_regex_pick("The answer is (\\-?[0-9\\.\\,]+).", "no answer", 0);
    CHECK(!m, "no match gives NULL");
    free(m);
    static const char *const ign[] = {",", "\\$", "(?s).*#### ", "\\.$"};
    CHECK(rf_paper_exact_match("$1,000.", "1000", ign, 4, 1, 0), "gsm8k ignores , $ and a final .");
    CHECK(!rf_paper_exact_match("1000.5", "1000", ign, 4, 1, 0), "gsm8k 1000.5 != 1000");
    CHECK(rf_paper_exact_match("(b)", "B", NULL, 0, 1, 1), "ignore case and punctuation");
    CHECK(!rf_paper_exact_match("B ", "B", NULL, 0, 1, 1), "whitespace is not punctuation");

    /* ---- what the harness does to the decoded text ---- */
    char *c = rf_paper_completion(RF_PAPER_ARC_C, " B. Because\n\nmore");
    CHECK(!strcmp(c, " B"), "arc stops at '.': '%s'", c);
    free(c);
    c = rf_paper_completion(RF_PAPER_MBPP, "Here:\n```python\ndef f():\n    return 1\n```\nok[DONE] tail");
    CHECK(!strcmp(c, "def f():\n    return 1"), "python block kept: '%s'", c);
    free(c);
    c = rf_paper_completion(RF_PAPER_HUMANEVAL, "    return 1\n```\nassert f() == 1");
    CHECK(!strcmp(c, "    return 1\n```"), "humaneval stops at \\nassert: '%s'", c);
    free(c);

    /* ---- the prompts, written out by hand from the task configurations ---- */
    check_prompt(RF_PAPER_GSM8K, "gsm8k.jsonl", 0,
                 "<|im_start|>user\nSolve the following math problem. You need to think step-by-step, show your "
                 "detailed reasoning, and end with \"The answer is [result],\" where [result] is the answer you "
                 "get.\\nQ: Tom has 3 apples and buys 4 more. How many apples does he have?\nA:<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_prompt(RF_PAPER_ARC_C, "arc.jsonl", 0,
                 "<|im_start|>user\nGiven the following question and four candidate answers (A, B, C and D), choose "
                 "the best answer.\\nQuestion: Which gas do plants take in?\\nA. oxygen\\nB. carbon dioxide\\nC. "
                 "helium\\nD. neon\\nYour response should end with \"The best answer is [the_answer_letter]\" where "
                 "the [the_answer_letter] is one of A, B, C or D.<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                 "</think>\n\nThe best answer is");
    check_prompt(RF_PAPER_ARC_C, "arc.jsonl", 2,
                 "<|im_start|>user\nGiven the following question and four candidate answers (A, B, C and D), choose "
                 "the best answer.\\nQuestion: Which is a mammal?\\nA. whale\\nB. shark\\nC. trout\\nYour response "
                 "should end with \"The best answer is [the_answer_letter]\" where the [the_answer_letter] is one of "
                 "A, B, C or D.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe best answer is");
    check_prompt(RF_PAPER_GPQA, "gpqa.jsonl", 0,
                 "<|im_start|>system\nAnswer the following multiple-choice question. Your response should be the "
                 "letter of the correct option, enclosed in parentheses ((A), (B), (C), or (D)).\n<|im_end|>\n"
                 "<|im_start|>user\nQuestion: How many protons does helium have?\nChoices:\n(A) 4\n(B) 2\n(C) 6\n"
                 "(D) 8\nAnswer:<|im_end|>\n<|im_start|>assistant\n");
    check_prompt(RF_PAPER_HUMANEVAL, "humaneval.jsonl", 1,
                 "<|im_start|>user\nWrite a solution to the following problem and make sure that it passes the "
                 "tests:\n```def sub(a, b):\n    \"\"\"Return a minus b.\"\"\"\n```<|im_end|>\n<|im_start|>assistant\n"
                 "<think>\n\n</think>\n\n```python\n");
    check_prompt(RF_PAPER_MMLU_PRO, "mmlu_pro.jsonl", 2,
                 "<|im_start|>system\nThe following are multiple choice questions (with answers) about other. Think "
                 "step by step and then finish your answer with \"the answer is (X)\" where X is the correct letter "
                 "choice.\n<|im_end|>\n<|im_start|>user\nQuestion:\nWhich is a colour?\nOptions:\nA. dog\nB. blue\n"
                 "C. run\nAnswer: Let's think step by step.<|im_end|>\n<|im_start|>assistant\n");
    check_prompt(RF_PAPER_MATH, "math.jsonl", 2,
                 "<|im_start|>user\nProblem:\nWhat is $2+3$?\n\nSolution:<|im_end|>\n<|im_start|>assistant\n");
    check_prompt(RF_PAPER_MBPP, "mbpp.jsonl", 0,
                 "<|im_start|>user\nYou are an expert Python programmer. Your task is to write a single Python "
                 "function to solve the problem described below, and here is your task: Write a function to square a "
                 "number.\n\nDirectly after the '[BEGIN]' marker, you must write only the Python code for the "
                 "function. Do not provide any explanations, comments, or introductory text. The function must "
                 "include the 'def' line, its arguments, the function body, and a 'return' statement. Your code "
                 "should pass these tests:\n\nassert square(2) == 4\nassert square(3) == 9\nassert square(0) == 0\n"
                 "[BEGIN]\n<|im_end|>\n<|im_start|>assistant\n");

    /* ---- the readers' targets ---- */
    json_t *arc = rf_paper_load(RF_PAPER_ARC_C, fixture("arc.jsonl"));
    CHECK(arc && !strcmp(json_string_value(json_object_get(json_array_get(arc, 1), "target")), "C"),
          "ARC answerKey 3 is C");
    json_decref(arc);
    json_t *gp = rf_paper_load(RF_PAPER_GPQA, fixture("gpqa.jsonl"));
    if (gp) {
        /* raw records: cleaned choices (preprocess strips before it drops "[1]",
         * so "Jupiter [1]" keeps a trailing space), one of them correct */
        const json_t *it = json_array_get(gp, 3), *ch = json_object_get(it, "choices");
        const char *t = json_string_value(json_object_get(it, "target"));
        int k = t[1] - 'A', clean = 1;
        for (int i = 0; i < 4; i++) {
            const char *s = json_string_value(json_array_get(ch, (size_t)i));
            clean &= strchr(s, '[') == NULL && s[0] != ' ' && !strstr(s, "  ");
        }
        CHECK(clean && !strcmp(json_string_value(json_array_get(ch, (size_t)k)), "Jupiter "),
              "GPQA raw record: target %s, choices cleaned %d", t, clean);
    }
    json_decref(gp);
    json_t *bad = rf_paper_load(RF_PAPER_GSM8K, fixture("gsm8k_bad.jsonl"));
    CHECK(!bad && strstr(rf_last_error(), "line 2") && strstr(rf_last_error(), "####"), "bad gsm8k: %s",
          rf_last_error());
    bad = rf_paper_load(RF_PAPER_MATH, fixture("gsm8k.jsonl"));
    CHECK(!bad && strstr(rf_last_error(), "line 1") && strstr(rf_last_error(), "problem"), "gsm8k as math: %s",
          rf_last_error());
    bad = rf_paper_load(RF_PAPER_GSM8K, fixture("missing.jsonl"));
    CHECK(!bad, "a missing file is refused");

    /* ---- every fixture through its scorer ---- */
    /* GSM8K (flexible, strict): 7 / 7. | 26 vs 27 | 1,000 -> 1000 | no "The answer is" but last number -5 | empty */
    static const double gsm[] = {1, 1, 0, 0, 1, 1, 1, 0, 0, 0};
    score_fixture(RF_PAPER_GSM8K, "gsm8k.jsonl", "gsm8k.answers.jsonl", 5, gsm);
    /* MATH (boxed, minerva): \dfrac{3}{4} | Final Answer $10$ vs 10\text{ cm} | 6 vs 5 | \frac12 vs 0.5 | unclosed box */
    static const double math[] = {1, 0, 0, 1, 0, 0, 1, 0, 0, 0};
    score_fixture(RF_PAPER_MATH, "math.jsonl", "math.answers.jsonl", 5, math);
    /* HumanEval: right | a + b for a - b | a helper the entry point calls | prose */
    static const double he[] = {1, 0, 1, 0};
    score_fixture(RF_PAPER_HUMANEVAL, "humaneval.jsonl", "humaneval.answers.jsonl", 4, he);
    /* MBPP: right | returns s | a syntax error */
    static const double mb[] = {1, 0, 0};
    score_fixture(RF_PAPER_MBPP, "mbpp.jsonl", "mbpp.answers.jsonl", 3, mb);
    /* ARC-C: " B" | " C." for key 3 | B for A | "(D)" | empty */
    static const double ar[] = {1, 1, 0, 1, 0};
    score_fixture(RF_PAPER_ARC_C, "arc.jsonl", "arc.answers.jsonl", 5, ar);
    /* MMLU-Pro: (C) | J | no "answer is" | D for A */
    static const double mp[] = {1, 1, 0, 0};
    score_fixture(RF_PAPER_MMLU_PRO, "mmlu_pro.jsonl", "mmlu_pro.answers.jsonl", 4, mp);
    /* GPQA (flexible, strict): "The answer is (B)." | (D) for (C) | the text "Paris" | empty */
    static const double gq[] = {1, 1, 0, 0, 1, 0, 0, 0};
    score_fixture(RF_PAPER_GPQA, "gpqa.jsonl", "gpqa.answers.jsonl", 4, gq);
    return check_summary("tasks_paper_score");
}
