/* serve_request.c - request parsing of `refusion serve` (rf_serve_parse),
 * without HTTP: every field lands in the right rf_params slot, prompts
 * equal what the tokenizer / chat template give on their own, each kind of
 * bad request is refused with one line naming the problem, the context limit
 * is enforced at the exact boundary, and mangled bodies never crash. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "serve/serve.h"
#include "serve/tools.h"
#include "util/util.h"

static const rf_model *M;
static const rf_tokenizer *TOK;
static rf_params DEF;
static rf_decode_opts DOPTS, DOPTS_AR; /* DEF as the server holds it; and with the ar decoder */

static int parse(const char *body, rf_req_kind kind, rf_serve_req *r) {
    return rf_serve_parse(body, strlen(body), kind, M, TOK, &DOPTS, r);
}

static int same_ids(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof(int)));
}

/* ---- 1. fields -> settings --------------------------------------------------------- */
static void test_fields(void) {
    rf_serve_req r;
    int rc = parse("{\"prompt\": \"The model number 7\", \"mode\": \"ar\", \"max_tokens\": 7, \"slot_size\": 2,"
                   " \"serial_num_blocks\": 3, \"slot_threshold\": 0.25, \"token_threshold\": 1,"
                   " \"temperature\": 0.5, \"seed\": 12345678901, \"top_k\": 5, \"top_p\": 0.75,"
                   " \"stream\": true, \"model\": \"whatever\", \"user\": \"ignored\", \"n\": 1, \"stop\": []}",
                   RF_REQ_COMPLETION, &r);
    CHECK(rc == 0, "full request: %s", rf_last_error());
    if (rc) return;
    CHECK(r.ar == 1 && r.stream == 1 && r.kind == RF_REQ_COMPLETION, "mode/stream/kind %d %d %d", r.ar, r.stream, r.kind);
    CHECK(r.p.gen_length == 7 && r.p.slot_size == 2 && r.p.n_blocks == 3, "lengths %d %d %d", r.p.gen_length,
          r.p.slot_size, r.p.n_blocks);
    CHECK(r.p.slot_threshold == 0.25f && r.p.token_threshold == 1.0f && r.p.temperature == 0.5f, "floats");
    CHECK(r.p.seed == 12345678901ull && r.p.top_k == 5 && r.p.top_p == 0.75f, "seed/top_k/top_p");
    CHECK(r.p.eos_id == DEF.eos_id && r.p.on_tokens == NULL, "eos kept from the defaults, no callback");
    CHECK(r.n_choices == 1, "n 1: %d choices", r.n_choices);
    int *ids, n;
    rf_tok_encode(TOK, "The model number 7", 18, &ids, &n);
    CHECK(same_ids(r.prompt, r.n_prompt, ids, n), "prompt ids differ from rf_tok_encode (%d vs %d)", r.n_prompt, n);
    rf_serve_req_free(&r);

    /* ["text"] is the same prompt; nulls and absent fields take the defaults */
    rc = parse("{\"prompt\": [\"The model number 7\"], \"max_tokens\": null, \"temperature\": null}",
               RF_REQ_COMPLETION, &r);
    CHECK(rc == 0, "[text] prompt: %s", rf_last_error());
    if (!rc) {
        CHECK(same_ids(r.prompt, r.n_prompt, ids, n), "[text] prompt ids");
        CHECK(r.ar == 0 && r.stream == 0 && r.p.gen_length == DEF.gen_length && r.p.slot_size == DEF.slot_size &&
                  r.p.temperature == DEF.temperature && r.p.seed == DEF.seed,
              "defaults not applied");
        rf_serve_req_free(&r);
    }
    free(ids);

    rc = parse("{\"prompt\": [5, 0, 17], \"max_completion_tokens\": 9}", RF_REQ_COMPLETION, &r);
    int want[3] = {5, 0, 17};
    CHECK(rc == 0 && same_ids(r.prompt, r.n_prompt, want, 3) && r.p.gen_length == 9, "id prompt: %s",
          rc ? rf_last_error() : "wrong ids/length");
    if (!rc) rf_serve_req_free(&r);
}

/* ---- 2. chat: ids == encode(chat template) --------------------------------------- */
static void test_chat(void) {
    rf_chat_msg msgs[3] = {{"system", "Be brief."}, {"user", "Hello there"}, {"assistant", "Hi"}};
    for (int think = 0; think < 2; think++) {
        char *text = rf_chat_apply(TOK, msgs, 3, 1, think);
        int *ids, n;
        rf_tok_encode(TOK, text, strlen(text), &ids, &n);
        char body[512];
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
                 " \"content\": \"Hello there\"}, {\"role\": \"assistant\", \"content\": \"Hi\"}]%s}",
                 think ? "" : ", \"chat_template_kwargs\": {\"enable_thinking\": false}");
        rf_serve_req r;
        int rc = parse(body, RF_REQ_CHAT, &r);
        CHECK(rc == 0, "chat (think %d): %s", think, rf_last_error());
        if (!rc) {
            CHECK(r.kind == RF_REQ_CHAT && same_ids(r.prompt, r.n_prompt, ids, n),
                  "chat ids (think %d) differ from encode(rf_chat_apply): %d vs %d", think, r.n_prompt, n);
            rf_serve_req_free(&r);
        }
        if (!think) { /* the top-level spelling means the same */
            rc = parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
                       " \"content\": \"Hello there\"}, {\"role\": \"assistant\", \"content\": \"Hi\"}],"
                       " \"enable_thinking\": false}",
                       RF_REQ_CHAT, &r);
            CHECK(rc == 0 && same_ids(r.prompt, r.n_prompt, ids, n), "enable_thinking: false");
            if (!rc) rf_serve_req_free(&r);
        }
        free(ids);
        free(text);
    }
    /* developer = system; text parts = the string joined with newlines; stop, include_usage */
    rf_serve_req a, b;
    int ra = parse("{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
                   " \"content\": [{\"type\": \"text\", \"text\": \"Hello\"}, {\"type\": \"text\", \"text\": \"there\"}]}]}",
                   RF_REQ_CHAT, &a);
    int rb = parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
                   " \"content\": \"Hello\\nthere\"}], \"stop\": [\"a\", \"bc\"], \"stream\": true,"
                   " \"stream_options\": {\"include_usage\": true}, \"max_tokens\": 5}",
                   RF_REQ_CHAT, &b);
    CHECK(ra == 0 && rb == 0, "developer / parts: %s", rf_last_error());
    if (!ra && !rb) {
        CHECK(same_ids(a.prompt, a.n_prompt, b.prompt, b.n_prompt), "developer + text parts != system + string");
        CHECK(b.n_stop == 2 && !strcmp(b.stop[0], "a") && !strcmp(b.stop[1], "bc") && b.include_usage == 1 &&
                  a.include_usage == 0 && a.n_stop == 0 && b.max_tokens == 5,
              "stop / include_usage / max_tokens: %d %d %d", b.n_stop, b.include_usage, b.max_tokens);
    }
    if (!ra) rf_serve_req_free(&a);
    if (!rb) rf_serve_req_free(&b);
    rf_serve_req c;
    CHECK(parse("{\"prompt\": \"x\", \"stop\": \"\\n\"}", RF_REQ_COMPLETION, &c) == 0 && c.n_stop == 1 &&
              !strcmp(c.stop[0], "\n"), "stop as one string");
    rf_serve_req_free(&c);
    /* the field at fault is named for the error's "param" */
    CHECK(parse("{\"prompt\": \"x\", \"top_p\": 2}", RF_REQ_COMPLETION, &c) == -1 && !strcmp(c.err_param, "top_p"),
          "err_param '%s'", c.err_param);
}

/* ---- 3. bad requests: -1, one line, naming the problem -------------------------- */
typedef struct {
    rf_req_kind kind;
    const char *body, *needle;
} bad_case;

static void test_bad(void) {
    static bad_case cases[] = {
        {RF_REQ_COMPLETION, "", "empty request body"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\",", "malformed JSON"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\"} trailing", "malformed JSON"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"prompt\": \"y\"}", "malformed JSON"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"\xff\"}", "malformed JSON"},
        {RF_REQ_COMPLETION, "[1, 2]", "must be a JSON object"},
        {RF_REQ_COMPLETION, "\"hi\"", "must be a JSON object"},
        {RF_REQ_COMPLETION, "{}", "missing \"prompt\""},
        {RF_REQ_COMPLETION, "{\"prompt\": null}", "missing \"prompt\""},
        {RF_REQ_COMPLETION, "{\"prompt\": 5}", "\"prompt\" must be"},
        {RF_REQ_COMPLETION, "{\"prompt\": {\"a\": 1}}", "\"prompt\" must be"},
        {RF_REQ_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", "\"prompt\"[0]"},
        {RF_REQ_COMPLETION, "{\"prompt\": [1, -3]}", "\"prompt\"[1]"},
        {RF_REQ_COMPLETION, "{\"prompt\": [1, 2.5]}", "\"prompt\"[1]"},
        {RF_REQ_COMPLETION, "{\"prompt\": [1, 99999]}", "outside the vocabulary"},
        {RF_REQ_COMPLETION, "{\"prompt\": []}", "prompt is empty"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"\"}", "prompt is empty"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"mode\": \"diffusion\"}", "\"mode\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"mode\": 1}", "\"mode\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"slot_size\": 0}", "\"slot_size\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"slot_size\": 0, \"mode\": \"ar\"}", "\"slot_size\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"slot_size\": 2.0}", "\"slot_size\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"serial_num_blocks\": 0}", "\"serial_num_blocks\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"slot_threshold\": 1.5}", "\"slot_threshold\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"slot_threshold\": \"0.5\"}", "\"slot_threshold\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"token_threshold\": -0.1}", "\"token_threshold\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 0}", "\"max_tokens\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": \"8\"}", "\"max_tokens\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 99999999999}", "\"max_tokens\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 100000}", "context"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"temperature\": -1}", "\"temperature\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"temperature\": true}", "\"temperature\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 0}", "\"top_p\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"top_k\": -1}", "\"top_k\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"seed\": -2}", "\"seed\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"top_k\": 5}", "top_k"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"stream\": \"yes\"}", "\"stream\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"n\": 0}", "\"n\" must be an integer in [1, 8]"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"n\": 9}", "\"n\" must be an integer in [1, 8]"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"n\": 2.0}", "\"n\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"stop\": 5}", "\"stop\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", \"\"]}", "\"stop\"[1]"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", "at most 4"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": true}", "\"logprobs\" must be an integer in [0, 20]"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "\"logprobs\" must be an integer in [0, 20]"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"top_logprobs\": 2}", "\"top_logprobs\" is a chat field"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 2}",
         "needs \"logprobs\": true"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": 1}",
         "\"logprobs\" must be true or false"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"presence_penalty\": 0.5}", "\"presence_penalty\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"frequency_penalty\": 1}", "\"frequency_penalty\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 1}}", "\"logit_bias\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"echo\": true}", "\"echo\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"frobnicate\": 1}", "unsupported field \"frobnicate\""},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", "only allowed with"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"mode\": \"mdm\", \"steps\": -1}", "\"steps\""},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\"}]}", "\"tools\""},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
         "names \"g\", which is not one of"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"required\"}", "there are no \"tools\""},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"always\"}", "\"tool_choice\" must be"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\", \"mode\": \"ar\", \"grammar\": \"root ::= \\\"a\\\"\"}",
         "at most one of"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", "function.name must be"},
        {RF_REQ_COMPLETION, "{\"prompt\": \"x\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}", "\"tools\" is a chat field"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"response_format\": {\"type\": \"xml\"}}", "\"response_format\""},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}", "content[0]"},
        {RF_REQ_CHAT, "{\"prompt\": \"x\"}", "missing \"messages\""},
        {RF_REQ_CHAT, "{\"messages\": []}", "non-empty array"},
        {RF_REQ_CHAT, "{\"messages\": {\"role\": \"user\"}}", "non-empty array"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", "\"messages\"[0]"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, 3]}", "\"messages\"[1]"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}", "role must be"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "\"messages\"[0]"},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"enable_thinking\": 1}",
         "\"enable_thinking\""},
        {RF_REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"chat_template_kwargs\": 1}",
         "\"chat_template_kwargs\""},
    };
    /* seed -1: a random seed, drawn per request, in [0, INT64_MAX] */
    {
        rf_serve_req a, b;
        const char *body = "{\"prompt\": \"x\", \"seed\": -1}";
        int ra = rf_serve_parse(body, strlen(body), RF_REQ_COMPLETION, M, TOK, &DOPTS, &a);
        int rb = rf_serve_parse(body, strlen(body), RF_REQ_COMPLETION, M, TOK, &DOPTS, &b);
        CHECK(ra == 0 && rb == 0, "seed -1 refused: %s", rf_last_error());
        if (!ra && !rb) {
            CHECK(a.p.seed <= (uint64_t)INT64_MAX && a.p.seed == a.d.gen.seed && a.p.seed != b.p.seed,
                  "seed -1: seeds %llu, %llu", (unsigned long long)a.p.seed, (unsigned long long)b.p.seed);
            rf_serve_req_free(&a), rf_serve_req_free(&b);
        }
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rf_serve_req r;
        int rc = rf_serve_parse(cases[i].body, strlen(cases[i].body), cases[i].kind, M, TOK, &DOPTS, &r);
        const char *e = rf_last_error();
        CHECK(rc == -1, "accepted bad request %s", cases[i].body);
        if (rc == 0) {
            rf_serve_req_free(&r);
            continue;
        }
        CHECK(strstr(e, cases[i].needle) && !strchr(e, '\n') && r.prompt == NULL,
              "bad request %s: message '%s' lacks '%s' (or is not one line)", cases[i].body, e, cases[i].needle);
    }
}

/* ---- 4. the context limit at its exact boundary ------------------------------------ */
static void test_context(void) {
    /* max_pos 256, prompt 8 ids: AR fits 248 answer tokens; ReFusion with
     * slots of 4 pads 249 up to 252, so 248 fits and 249 does not either */
    const char *ids = "[1, 2, 3, 4, 5, 6, 7, 8]";
    struct {
        const char *mode;
        int len, ok;
    } t[] = {{"ar", 248, 1}, {"ar", 249, 0}, {"refusion", 248, 1}, {"refusion", 249, 0}, {"refusion", 245, 1}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char body[200];
        snprintf(body, sizeof body, "{\"prompt\": %s, \"mode\": \"%s\", \"max_tokens\": %d, \"slot_size\": 4}", ids,
                 t[i].mode, t[i].len);
        rf_serve_req r;
        int rc = parse(body, RF_REQ_COMPLETION, &r);
        CHECK((rc == 0) == t[i].ok, "%s max_tokens %d: rc %d (%s)", t[i].mode, t[i].len, rc, rc ? rf_last_error() : "ok");
        if (!rc) rf_serve_req_free(&r);
        else CHECK(strstr(rf_last_error(), "context") != NULL, "context message: %s", rf_last_error());
    }
}

/* ---- 5. no tokenizer: ids only ------------------------------------------------------ */
static void test_no_tokenizer(void) {
    rf_serve_req r;
    const char *b1 = "{\"prompt\": \"hello\"}", *b2 = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
               *b3 = "{\"prompt\": [3, 4]}";
    CHECK(rf_serve_parse(b1, strlen(b1), RF_REQ_COMPLETION, M, NULL, &DOPTS, &r) == -1 &&
              strstr(rf_last_error(), "no tokenizer"),
          "text prompt without a tokenizer: %s", rf_last_error());
    CHECK(rf_serve_parse(b2, strlen(b2), RF_REQ_CHAT, M, NULL, &DOPTS, &r) == -1 &&
              strstr(rf_last_error(), "chat template"),
          "chat without a tokenizer: %s", rf_last_error());
    int rc = rf_serve_parse(b3, strlen(b3), RF_REQ_COMPLETION, M, NULL, &DOPTS_AR, &r);
    CHECK(rc == 0 && r.ar == 1 && r.n_prompt == 2, "ids without a tokenizer, default_ar: %s", rf_last_error());
    if (!rc) rf_serve_req_free(&r);
}

/* ---- 6. mangled bodies: never a crash, a result or one clear line --------------- */
static void test_fuzz(void) {
    const char *seeds[] = {
        "{\"prompt\": \"The model number 3\", \"max_tokens\": 8, \"slot_size\": 2, \"temperature\": 0.5, \"stream\": true}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello \\u00e9\"}], \"mode\": \"ar\", \"top_p\": 0.9}",
        "{\"prompt\": [1, 2, 3], \"serial_num_blocks\": 2, \"slot_threshold\": 0.5, \"seed\": 3}",
    };
    rf_rng g;
    rf_rng_seed(&g, 7);
    int n_ok = 0, n_bad = 0, n_bad_msg = 0;
    for (int s = 0; s < 3; s++) {
        size_t len = strlen(seeds[s]);
        char *buf = rf_malloc(len + 1);
        for (int it = 0; it < 1500; it++) {
            size_t n = len;
            memcpy(buf, seeds[s], len + 1);
            if (it < (int)len) {
                n = (size_t)it; /* every prefix */
            } else {
                int k = 1 + (int)rf_rng_below(&g, 4);
                for (int e = 0; e < k; e++) /* random bytes, including NUL and non-UTF-8 */
                    buf[rf_rng_below(&g, len)] = (char)rf_rng_below(&g, 256);
            }
            rf_req_kind kind = s == 1 ? RF_REQ_CHAT : RF_REQ_COMPLETION;
            rf_serve_req r;
            if (rf_serve_parse(buf, n, kind, M, TOK, &DOPTS, &r) == 0) {
                n_ok++;
                if (rf_gen_check(M, r.prompt, r.n_prompt, &r.p, r.ar)) { /* accepted but invalid */
                    n_bad_msg++;
                    fprintf(stderr, "accepted invalid: %.*s\n", (int)n, buf);
                }
                rf_serve_req_free(&r);
            } else {
                n_bad++;
                const char *e = rf_last_error();
                if (!e[0] || strchr(e, '\n') || r.prompt) {
                    n_bad_msg++;
                    fprintf(stderr, "bad message '%s' for %.*s\n", e, (int)n, buf);
                }
            }
        }
        free(buf);
    }
    CHECK(n_bad_msg == 0, "fuzz: %d results were invalid or had a bad message", n_bad_msg);
    CHECK(n_ok > 0 && n_bad > 0, "fuzz: %d accepted, %d refused (want both)", n_ok, n_bad);
    printf("fuzz: %d accepted, %d refused\n", n_ok, n_bad);
}

/* ---- 7. error replies that cannot fail; work bounded by the answer -------------- */
static int is_utf8(const char *t) {
    json_t *v = json_string(t);
    json_decref(v);
    return v != NULL;
}

static void test_hardening(void) {
    /* an unknown field whose name is 62 'a's and an e-acute: cut into the
     * 64-byte err_param it once ended inside the character */
    char body[256], name[80];
    memset(name, 'a', 62);
    strcpy(name + 62, "\xc3\xa9");
    snprintf(body, sizeof body, "{\"prompt\": \"hi\", \"%s\": 1}", name);
    rf_serve_req r;
    int rc = parse(body, RF_REQ_COMPLETION, &r);
    CHECK(rc == -1 && r.err_unsupported, "62 a + e-acute field accepted");
    CHECK(is_utf8(r.err_param) && strlen(r.err_param) == 62, "err_param not cut on a character boundary: '%s'",
          r.err_param);
    CHECK(is_utf8(rf_last_error()), "the message is not UTF-8: %s", rf_last_error());
    char dst[5];
    rf_serve_utf8_cut(dst, sizeof dst, "ab\xe2\x82\xac"); /* a b EURO: 5 bytes into 4 */
    CHECK(!strcmp(dst, "ab"), "utf8_cut: '%s'", dst);
    rf_serve_utf8_cut(dst, sizeof dst, "abcd");
    CHECK(!strcmp(dst, "abcd"), "utf8_cut exact: '%s'", dst);

    /* the error body: valid JSON whatever it is given */
    const char *bad = "bad\xffname";
    char *e = rf_serve_error_body(bad, "invalid_request_error", bad, bad);
    json_error_t err;
    json_t *o = json_loads(e, 0, &err);
    json_t *eo = o ? json_object_get(o, "error") : NULL;
    const char *type = json_string_value(json_object_get(eo, "type"));
    CHECK(json_is_string(json_object_get(eo, "message")) && type && !strcmp(type, "invalid_request_error"),
          "error body from invalid UTF-8: %s", e);
    json_decref(o);
    free(e);
    CHECK(rf_serve_check_id(bad, "--name") == -1 && strstr(rf_last_error(), "--name"), "bad id accepted");
    CHECK(rf_serve_check_id("", "--name") == -1 && rf_serve_check_id("a\nb", "--name") == -1, "empty / control id");
    CHECK(rf_serve_check_id("refusion-demo \xc3\xa9", "--name") == 0, "good id refused: %s", rf_last_error());

    /* the decoders' own checks, before anything is queued */
    const char *fails[][2] = {
        {"{\"prompt\": \"x\", \"max_tokens\": 8, \"mode\": \"mdm\", \"steps\": 1}", "\"steps\" (1) must be in [8, 8]"},
        {"{\"prompt\": \"x\", \"max_tokens\": 16, \"mode\": \"mdm\", \"steps\": 3, \"blocks\": 4}", "[4, 16]"},
        {"{\"prompt\": \"x\", \"max_tokens\": 8, \"mode\": \"mdm\", \"steps\": 9}", "\"steps\" (9)"},
        {"{\"prompt\": \"x\", \"max_tokens\": 1, \"slot_size\": 200}", "\"slot_size\" (200) must not exceed"},
        {"{\"prompt\": \"x\", \"max_tokens\": 5, \"slot_size\": 33, \"rolling\": true}", "must not exceed"},
        {"{\"prompt\": \"x\", \"max_tokens\": 40, \"slot_size\": 41}", "(41) must not exceed 40 (max_tokens, or 32"},
    };
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        rc = parse(fails[i][0], RF_REQ_COMPLETION, &r);
        CHECK(rc == -1 && strstr(rf_last_error(), fails[i][1]), "%s: rc %d, '%s'", fails[i][0], rc,
              rc ? rf_last_error() : "accepted");
        if (!rc) rf_serve_req_free(&r);
    }
    const char *fine[] = {
        "{\"prompt\": \"x\", \"max_tokens\": 8, \"mode\": \"mdm\", \"steps\": 2, \"blocks\": 2}",
        "{\"prompt\": \"x\", \"max_tokens\": 8, \"slot_size\": 8}",
        "{\"prompt\": \"x\", \"max_tokens\": 1}",               /* the server's default slot size */
        "{\"prompt\": \"x\", \"max_tokens\": 1, \"slot_size\": 32}", /* a small slot */
        "{\"prompt\": \"x\", \"max_tokens\": 1, \"slot_size\": 200, \"mode\": \"ar\"}", /* AR: no slots */
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        rc = parse(fine[i], RF_REQ_COMPLETION, &r);
        CHECK(rc == 0, "%s refused: %s", fine[i], rf_last_error());
        if (!rc) rf_serve_req_free(&r);
    }

    /* the work bound: each decoder's worst case from its sizes */
    struct {
        const char *body;
        long long want;
    } w[] = {
        {"{\"prompt\": [1, 2, 3], \"max_tokens\": 10, \"mode\": \"ar\"}", 3 + 10},
        {"{\"prompt\": [1, 2, 3], \"max_tokens\": 10, \"mode\": \"ar\", \"n\": 3}", 3 * 13},
        {"{\"prompt\": [1, 2, 3], \"max_tokens\": 10, \"mode\": \"mdm\", \"steps\": 5, \"blocks\": 1}", 5 * 13},
        {"{\"prompt\": [1, 2, 3], \"max_tokens\": 10, \"slot_size\": 3, \"rolling\": true}", 3 + 10 * 7},
        /* 10 -> 12 = 4 slots of 3 in 2 blocks of 2: 4 x (2 x 6 + 2 x 3 x 4) */
        {"{\"prompt\": [1, 2, 3], \"max_tokens\": 10, \"slot_size\": 3, \"blocks\": 2}", 3 + 4 * (12 + 24)},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        rc = parse(w[i].body, RF_REQ_COMPLETION, &r);
        CHECK(rc == 0, "%s: %s", w[i].body, rf_last_error());
        if (rc) continue;
        CHECK(rf_serve_work_positions(&r) == w[i].want, "%s: %lld positions, want %lld", w[i].body,
              (long long)rf_serve_work_positions(&r), w[i].want);
        rf_serve_req_free(&r);
    }
}

/* The model's <tool_call> blocks as OpenAI tool_calls: the text around
 * them is the content; a block that is not {"name", "arguments": object}
 * stays text. */
static void test_tool_calls(void) {
    char *content = NULL;
    json_t *calls = rf_serve_tool_calls("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                        "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
                                        "\"add\", \"arguments\": {}}\n</tool_call>",
                                        "chatcmpl-7", 1, &content);
    CHECK(calls && json_array_size(calls) == 2, "two calls: %zu", calls ? json_array_size(calls) : 0);
    json_t *f = json_object_get(json_array_get(calls, 0), "function");
    CHECK(!strcmp(json_string_value(json_object_get(f, "name")) ?: "", "get_weather") &&
              !strcmp(json_string_value(json_object_get(f, "arguments")) ?: "", "{\"city\":\"Paris\",\"days\":2}"),
          "first call: %s", json_dumps(f, JSON_COMPACT));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(calls, 1), "id")) ?: "", "call_chatcmpl-7_1_1") &&
              !strcmp(json_string_value(json_object_get(json_array_get(calls, 1), "type")) ?: "", "function"),
          "second call's id / type");
    CHECK(content && !strcmp(content, "Let me look."), "content '%s'", content ? content : "(null)");
    json_decref(calls), free(content);
    const char *not_calls[] = {"plain text", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
                               "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>",
                               "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", "<tool_call>not json</tool_call>"};
    for (int i = 0; i < 5; i++) {
        content = (char *)"x";
        calls = rf_serve_tool_calls(not_calls[i], "c", 0, &content);
        CHECK(!calls && !content, "'%s' was read as a call", not_calls[i]);
        json_decref(calls);
    }
}

int main(void) {
    test_tool_calls();
    /* a small tokenizer trained here, and a random model over its vocabulary */
    char dir[] = "/tmp/rf_serve_req.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    size_t cap = 1 << 16, len = 0;
    char *text = rf_malloc(cap);
    for (int i = 0; i < 200; i++)
        len += (size_t)snprintf(text + len, cap - len, "The model number %d answers the question; fine. Hello %d\n", i,
                                i * 7);
    if (rf_tok_train(text, len, 400, dir, 0)) {
        fprintf(stderr, "tokenizer train: %s\n", rf_last_error());
        return 1;
    }
    free(text);
    rf_tokenizer *tok = rf_tok_load(dir);
    if (!tok) {
        fprintf(stderr, "tokenizer load: %s\n", rf_last_error());
        return 1;
    }
    TOK = tok;
    rf_config c;
    rf_config_preset(&c, "tiny");
    c.vocab_size = rf_tok_vocab_size(tok);
    c.max_pos = 256;
    c.eos_id = rf_tok_eos_id(tok);
    c.mask_id = rf_tok_mask_id(tok);
    c.bot_id = rf_tok_id(tok, "<|beginoftext|>");
    c.dtype = RF_F32;
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.02f, 1);
    M = &m;
    rf_gen_params_default(&DEF);
    DEF.gen_length = 16;
    DEF.eos_id = rf_tok_eos_id(tok);
    rf_decode_opts_default(&DOPTS);
    DOPTS.gen = DEF;
    DOPTS_AR = DOPTS;
    DOPTS_AR.gen.method = RF_METHOD_AR;

    test_fields();
    test_chat();
    test_bad();
    test_context();
    test_no_tokenizer();
    test_fuzz();
    test_hardening();

    rf_model_free(&m);
    rf_tok_free(tok);
    char *p1 = rf_path_join(dir, "tokenizer.json"), *p2 = rf_path_join(dir, "tokenizer_config.json");
    unlink(p1), unlink(p2), rmdir(dir);
    free(p1), free(p2);
    return check_summary("serve_request");
}
