/* grammar_gbnf.c - the GBNF engine (src/grammar) against the cases of
 * llama.cpp's tests/test-grammar-integration.cpp and
 * test-grammar-parser.cpp (grammars, strings accepted and rejected,
 * grammars refused), plus:
 *  - the allowed-token mask equals the brute force (every token's bytes fed
 *    to a copy of the state) on a vocabulary of single bytes, multi-byte
 *    pieces and pieces ending inside a UTF-8 character, along random walks;
 *  - hostile grammars end with an error or an answer, never a hang;
 *  - refusals name the line, the column and what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/grammar.h"
#include "util/util.h"

/* 1: s is a complete sentence of g; 0: not; -1: error */
static int matches(const rf_grammar *g, const char *s) {
    rf_gmatch *m = rf_gmatch_new(g);
    if (!m) return -1;
    int rc = rf_gmatch_accept(m, (const unsigned char *)s, strlen(s));
    int ok = rc < 0 ? -1 : rc == 0 && rf_gmatch_complete(m);
    rf_gmatch_free(m);
    return ok;
}

typedef struct {
    const char *name, *grammar;
    const char *pass[24], *fail[24];
} gcase;

static const gcase cases[] = {
    {"simple grammar",
     "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= number\nnumber ::= [0-9]+",
     {"42", "1+2+3+4+5", "123+456"},
     {"+", "/ 3", "1+2+3+4+5+", "12a45"}},
    {"medium complexity grammar",
     "root ::= expression\n"
     "expression ::= term ws ((\"+\"|\"-\") ws term)*\n"
     "term ::= factor ws ((\"*\"|\"/\") ws factor)*\n"
     "factor ::= number | variable | \"(\" expression \")\" | function-call\n"
     "number ::= [0-9]+\n"
     "variable ::= [a-zA-Z_][a-zA-Z0-9_]*\n"
     "function-call ::= variable ws \"(\" (expression (\",\" ws expression)*)? \")\"\n"
     "ws ::= [ \\t\\n\\r]?",
     {"42", "1*2*3*4*5", "x", "x+10", "x1+y2", "(a+b)*(c-d)", "func()", "func(x,y+2)", "a*(b+c)-d/e",
      "f(g(x),h(y,z))", "x + 10", "x1 + y2", "(a + b) * (c - d)", "func(x, y + 2)", "a * (b + c) - d / e",
      "f(g(x), h(y, z))", "123+456", "123*456*789-123/456+789*123",
      "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456"},
     {"+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)", "a + b * (c - d", "42 +",
      "x +", "x + 10 +", "(a + b) * (c - d", "func(", "func(x, y + 2", "a * (b + c) - d /", "f(g(x), h(y, z)",
      "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456/"}},
    {"special characters", "root ::= ... \"abc\" ...",
     {"abcabcabc", "aaaabcccc", "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0\xe2\x9c\x85" "abc\xe2\x9d\x8c\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5"},
     {"aaabcccc", "aaaaabcccc", "aaaabccc", "aaaabccccc",
      "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0\xe2\x9c\x85\xe2\x9d\x8c" "abc\xe2\x9d\x8c\xe2\x9c\x85\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5",
      "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0" "abc\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5"}},
    {"* quantifier", "root ::= \"a\"*",
     {"", "a", "aaaaa", "aaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
     {"b", "ab", "aab", "ba", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}},
    {"+ quantifier", "root ::= \"a\"+",
     {"a", "aaaaa", "aaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
     {"", "b", "ab", "aab", "ba", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}},
    {"? quantifier", "root ::= \"a\"?", {"", "a"}, {"b", "ab", "aa", "ba"}},
    {"mixed quantifiers",
     "root ::= cons+ vowel* cons? (vowel cons)*\nvowel ::= [aeiouy]\ncons ::= [bcdfghjklmnpqrstvwxyz]\n",
     {"yes", "no", "noyes", "crwth", "four", "bryyyy"},
     {"yess", "yesno", "forty", "catyyy"}},
    {"simple exact repetition", "root ::= [ab]{4}", {"aaaa", "bbbb", "abab"}, {"a", "b", "aaaaa"}},
    {"simple min repetition", "root ::= [ab]{4,}", {"aaaa", "aaaaab", "bbbb", "ababab"}, {"", "aba"}},
    {"simple max repetition", "root ::= [ab]{0,4}", {"", "a", "aa", "aaa", "aaab"}, {"aaaaa"}},
    {"min / max repetition", "root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}",
     {"0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"},
     {"", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"}},
    {"segfault", "root ::= ( [x]* )*", {"", "x", "xx"}, {"y", "yy"}},
    /* the parser tests' grammars (test-grammar-parser.cpp), with strings */
    {"parser: literal and class", "root ::= \"a\" [b-d] \"e\"", {"abe", "ace", "ade"}, {"aae", "abee", "ab"}},
    {"parser: comments and newlines in groups",
     "# leading comment\nroot ::= ( # a group\n  \"x\" |\n  \"y\" ) \"z\" # trailing\n",
     {"xz", "yz"}, {"z", "xyz"}},
    {"parser: escapes", "root ::= \"\\x41\\u00e9\\t\\\"\" [\\x30-\\x39\\]]",
     {"A\xc3\xa9\t\"5", "A\xc3\xa9\t\"]"}, {"A\xc3\xa9\t\"a", "Ae\t\"5"}},
    {"parser: negated class over UTF-8", "root ::= [^a\\u00e9]+",
     {"b", "\xc3\xa8", "\xe2\x82\xac", "\xf0\x9f\x98\x80z"}, {"a", "\xc3\xa9", "ba", "\xc3", "\xff"}},
    {"parser: unicode ranges", "root ::= [\\u0400-\\u04ff\\U0001f600-\\U0001f64f]*",
     {"", "\xd0\x96", "\xf0\x9f\x98\x80\xd0\x96"}, {"a", "\xf0\x9f\x9a\x80"}},
    {"parser: nested repetitions", "root ::= (\"ab\"{2} \"c\"?){1,2}",
     {"abab", "ababc", "ababcabab", "abababab"}, {"ab", "ababcc", "ababababab"}},
};

static const char *refused[] = {
    "root ::= \"a\" | root \"a\"",                                              /* left recursion */
    "root ::= asdf\nasdf ::= \"a\" | asdf \"a\"\n",
    "root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | asdf \"d\" | \"e\"",
    "root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | empty asdf \"d\" | \"e\"\nempty ::= \"blah\" | ",
    "rot ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= number\nnumber ::= [0-9]+", /* no root */
    "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= numero\nnumber ::= [0-9]+", /* undefined */
    "root ::= \"a", "root ::= [a-", "root ::= (\"a\"", "root ::= \"a\"{3,1}", "root ::= \"a\"{2001}",
    "root ::= *", "root ::= \"\\q\"", "root ::= [z-a]", "root ::= \"a\"\nroot ::= \"b\"", "root ::= <[10]>",
    "root ::= \"a\" )", "root ::= \"\\x4\"", "root ::= \"\xc3\"", "root",
};

static void test_cases(void) {
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const gcase *k = &cases[c];
        rf_grammar *g = rf_grammar_parse(k->grammar, strlen(k->grammar));
        CHECK(g, "%s: refused: %s", k->name, rf_last_error());
        if (!g) continue;
        for (int i = 0; i < 24 && k->pass[i]; i++)
            CHECK(matches(g, k->pass[i]) == 1, "%s: should accept \"%s\"", k->name, k->pass[i]);
        for (int i = 0; i < 24 && k->fail[i]; i++)
            CHECK(matches(g, k->fail[i]) == 0, "%s: should reject \"%s\"", k->name, k->fail[i]);
        rf_grammar_free(g);
    }
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        rf_grammar *g = rf_grammar_parse(refused[i], strlen(refused[i]));
        CHECK(!g, "should refuse: %s", refused[i]);
        CHECK(!g && !strncmp(rf_last_error(), "grammar: ", 9), "error line: %s", rf_last_error());
        rf_grammar_free(g);
    }
    /* the message says where and what */
    const char *bad = "root ::= \"a\"\nx ::= [b-a]\n";
    CHECK(!rf_grammar_parse(bad, strlen(bad)) && strstr(rf_last_error(), "line 2, column 7") &&
              strstr(rf_last_error(), "out of order"),
          "position: %s", rf_last_error());
    const char *undef = "root ::= foo";
    CHECK(!rf_grammar_parse(undef, strlen(undef)) && strstr(rf_last_error(), "undefined rule 'foo'"), "undefined: %s",
          rf_last_error());
    const char *lr = "root ::= \"a\" | root \"a\"";
    CHECK(!rf_grammar_parse(lr, strlen(lr)) && strstr(rf_last_error(), "left recursi"), "left recursion: %s",
          rf_last_error());
}

/* hostile grammars: llama.cpp's "hang" case and an exponentially ambiguous
 * one end (an answer or a bounded error) */
static void test_hostile(void) {
    const char *hang = "root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}";
    rf_grammar *g = rf_grammar_parse(hang, strlen(hang));
    CHECK(g, "hang grammar refused at parse: %s", rf_last_error());
    if (g) {
        int r = matches(g, "abc");
        CHECK(r == 1 || (r == -1 && strstr(rf_last_error(), "parse stack")), "hang grammar: %d %s", r,
              rf_last_error());
        rf_grammar_free(g);
    }
    const char *amb = "root ::= a*\na ::= \"x\" | \"x\" \"x\" | b\nb ::= \"x\"+";
    g = rf_grammar_parse(amb, strlen(amb));
    CHECK(g, "ambiguous grammar: %s", rf_last_error());
    if (g) {
        char s[400];
        memset(s, 'x', sizeof s - 1), s[sizeof s - 1] = 0;
        int r = matches(g, s);
        CHECK(r == 1 || r == -1, "ambiguous grammar: %d", r);
        rf_grammar_free(g);
    }
    /* deep nesting grows the stacks, within bounds */
    const char *nest = "root ::= \"(\" root \")\" | \"\"";
    g = rf_grammar_parse(nest, strlen(nest));
    CHECK(g, "nesting: %s", rf_last_error());
    if (g) {
        char s[2001];
        for (int i = 0; i < 1000; i++) s[i] = '(', s[1000 + i] = ')';
        s[2000] = 0;
        CHECK(matches(g, s) == 1, "1000 nested parentheses");
        s[1999] = 0;
        CHECK(matches(g, s) == 0, "999 closed of 1000");
        rf_grammar_free(g);
    }
}

/* the mask against the brute force */
static void test_mask(void) {
    /* a vocabulary: every byte, common pieces, pieces of UTF-8 characters */
    static const char *pieces[] = {"ab", "abc", "bc", "1+", "+2", "12", "123", "\"", "\":", "{\"", "\"}", " ",
                                   "  ", "\n", "\xc3", "\xa9", "\xc3\xa9", "\xc3\xa9t", "\xe2\x82", "\xac",
                                   "true", "tru", "null", "x", "xx", "xxx", "(", "()", "))", "a(", "(a"};
    enum { NP = sizeof pieces / sizeof *pieces, NT = 256 + NP + 3 };
    const unsigned char *bytes[NT];
    int lens[NT];
    unsigned char single[256];
    for (int i = 0; i < 256; i++) single[i] = (unsigned char)i, bytes[i] = single + i, lens[i] = 1;
    for (int i = 0; i < NP; i++) bytes[256 + i] = (const unsigned char *)pieces[i], lens[256 + i] = (int)strlen(pieces[i]);
    for (int i = 256 + NP; i < NT; i++) bytes[i] = NULL, lens[i] = 0; /* control tokens */
    bytes[NT - 1] = (const unsigned char *)"abc", lens[NT - 1] = 3;     /* a duplicate piece */
    rf_token_trie *t = rf_token_trie_new(bytes, lens, NT);
    const char *grammars[] = {
        cases[1].grammar,
        "root ::= \"{\" ws (str \":\" ws val (\",\" ws str \":\" ws val)*)? \"}\"\n"
        "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nval ::= str | \"true\" | \"null\" | [0-9]+\nws ::= [ \\n]*",
        "root ::= [^a\\u00e9]+ \"\\u00e9t\"?",
        "root ::= (\"(\" root \")\")*",
    };
    uint64_t bits[(NT + 63) / 64], brute[(NT + 63) / 64];
    rf_rng rng;
    rf_rng_seed(&rng, 7);
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        rf_grammar *g = rf_grammar_parse(grammars[gi], strlen(grammars[gi]));
        CHECK(g, "mask grammar %zu: %s", gi, rf_last_error());
        if (!g) continue;
        for (int walk = 0; walk < 20; walk++) {
            rf_gmatch *m = rf_gmatch_new(g);
            for (int step = 0; step < 30; step++) {
                CHECK(rf_gmatch_allowed(m, t, bits) == 0, "allowed: %s", rf_last_error());
                memset(brute, 0, sizeof brute);
                int n_allowed = 0, allowed[NT];
                rf_gstate s;
                rf_gmatch_save(m, &s);
                for (int i = 0; i < NT; i++) {
                    if (!lens[i]) continue;
                    if (rf_gmatch_accept(m, bytes[i], (size_t)lens[i]) == 0) {
                        brute[i >> 6] |= 1ull << (i & 63);
                        allowed[n_allowed++] = i;
                        rf_gmatch_restore(m, &s);
                    }
                }
                free(s.ids);
                CHECK(!memcmp(bits, brute, sizeof bits), "grammar %zu walk %d step %d: mask != brute force", gi,
                      walk, step);
                if (!n_allowed) break;
                int pick = allowed[(int)(rf_rng_uniform(&rng) * n_allowed) % n_allowed];
                CHECK(rf_gmatch_accept(m, bytes[pick], (size_t)lens[pick]) == 0, "allowed token refused");
            }
            rf_gmatch_free(m);
        }
        rf_grammar_free(g);
    }
    rf_token_trie_free(t);
}

int main(void) {
    test_cases();
    test_hostile();
    test_mask();
    return check_summary("grammar_gbnf");
}
