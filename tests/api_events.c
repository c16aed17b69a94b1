/* api_events.c - what the public API gives the CLI and the server beyond an
 * answer (include/refusion.h 0.2), on the demo model and its tokenizer:
 *  - events: ReFusion one PLAN per step and one INFILL_ITER per infilling
 *    iteration of the statistics, AR one AR_TOKEN per token, MDM none;
 *    positions inside the answer; the last token an event put at each
 *    position is the answer's;
 *  - statistics: the steps' tokens and calls add up to the totals, the
 *    acceptance counts to the tokens; no_cache runs the same number of
 *    calls (its ids may differ from the cached run's on this bf16 model:
 *    tests/cli_generate.sh compares them on an f32 one);
 *  - eos_id: an id of the answer cuts it there; -1 runs to gen_length;
 *  - chat: rf_tokenize_chat of one user message == rf_tokenize(chat = 1), a
 *    system message and thinking off change the prompt; bad UTF-8 reported
 *    at its offset in the message; rf_token_id, rf_tokenizer_eos_id;
 *  - a streamed text (rf_text_stream_*) equals rf_detokenize of the ids;
 *  - rf_params_check and rf_generate_bytes accept what rf_generate runs and
 *    refuse nonsense with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "refusion.h"

enum { CAP = 512 };

typedef struct {
    int n[6];        /* events by type */
    int bad_pos;     /* events with a position outside [0, G) */
    int G;
    int32_t cell[CAP]; /* the last token an event put at each position */
} ev_log;

static void on_event(const rf_event *ev, void *user) {
    ev_log *l = user;
    l->n[ev->kind]++;
    for (int i = 0; i < ev->n; i++) {
        if (ev->apos[i] < 0 || ev->apos[i] >= l->G) {
            l->bad_pos++;
            continue;
        }
        if (ev->tok) l->cell[ev->apos[i]] = ev->tok[i];
    }
}

int main(void) {
    const char *src = getenv("REFUSION_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/refusion-demo", src ? src : ".");
    refusion_model *m = rf_model_open(path);
    CHECK(m != NULL, "open %s: %s", path, rf_last_error());
    if (!m) return check_summary("api_events");
    CHECK(rf_model_has_tokenizer(m), "the demo model has a tokenizer");
    refusion_tokenizer *tok = rf_tokenizer_open(m);
    CHECK(tok != NULL, "tokenizer: %s", rf_last_error());
    if (!tok) return check_summary("api_events");
    refusion_session *s = rf_session_new(m);

    /* ---- chat templating and token lookup ---- */
    int32_t a[CAP], b[CAP], out[CAP];
    int na = rf_tokenize(tok, "What is 12 plus 30?", 1, a, CAP);
    rf_chat_message user = {"user", "What is 12 plus 30?"};
    int nb = rf_tokenize_chat(tok, &user, 1, 1, b, CAP);
    CHECK(na > 10 && na == nb && !memcmp(a, b, (size_t)na * sizeof *a), "chat of one message: %d vs %d ids", na, nb);
    int im_start = rf_token_id(tok, "<|im_start|>");
    CHECK(im_start >= 0 && a[0] == im_start, "<|im_start|> = %d opens the prompt (%d)", im_start, a[0]);
    CHECK(rf_token_id(tok, "<|no such token|>") == -1, "unknown token: -1");
    int eos = rf_tokenizer_eos_id(tok);
    CHECK(eos >= 0 && eos == rf_token_id(tok, "<|im_end|>"), "tokenizer eos %d is <|im_end|>", eos);
    rf_chat_message two[2] = {{"system", "Be brief."}, {"user", "What is 12 plus 30?"}};
    int n2 = rf_tokenize_chat(tok, two, 2, 1, b, CAP);
    CHECK(n2 > na, "a system message lengthens the prompt (%d vs %d)", n2, na);
    int n3 = rf_tokenize_chat(tok, &user, 1, 0, b, CAP);
    CHECK(n3 > 0 && (n3 != na || memcmp(a, b, (size_t)na * sizeof *a)), "thinking off changes the prompt");
    CHECK(rf_tokenize_chat(tok, &user, 1, 1, NULL, 0) == na, "cap 0 counts the ids");
    rf_chat_message bad_utf8 = {"user", "ab\xff"};
    CHECK(rf_tokenize_chat(tok, &bad_utf8, 1, 1, b, CAP) == RF_ERR_INVALID && strstr(rf_last_error(), "offset 2"),
          "bad UTF-8 at its offset in the message: %s", rf_last_error());
    rf_chat_message no_content = {"user", NULL};
    CHECK(rf_tokenize_chat(tok, &no_content, 1, 1, b, CAP) == RF_ERR_INVALID, "a message without content");

    /* ---- events and statistics, each method ---- */
    for (int method = 0; method < 3; method++) {
        rf_params p = rf_params_default();
        p.method = (rf_method)method;
        p.gen_length = 32;
        p.n_blocks = method == RF_METHOD_MDM ? 2 : 4;
        p.eos_id = eos;
        ev_log log;
        memset(&log, 0, sizeof log);
        log.G = p.gen_length;
        p.on_event = on_event;
        p.user = &log;
        CHECK(rf_params_check(m, a, na, &p) == RF_OK, "method %d: params check: %s", method, rf_last_error());
        CHECK(rf_generate_bytes(m, na, &p) > 0, "method %d: bytes", method);
        rf_stats st;
        int n = rf_generate(s, a, na, &p, out, CAP, &st);
        CHECK(n > 0 && n == st.n_tokens, "method %d: %d ids: %s", method, n, rf_last_error());
        int tok_sum = 0, call_sum = 0, iters = 0;
        for (int i = 0; i < st.n_steps; i++)
            tok_sum += st.steps[i].tokens, call_sum += st.steps[i].calls, iters += st.steps[i].infill_iters;
        if (method == RF_METHOD_REFUSION)
            CHECK(log.n[RF_EVENT_PLAN] == st.n_steps && log.n[RF_EVENT_INFILL_ITER] == iters && iters > 0,
                  "refusion: %d plan events for %d steps, %d iteration events for %d", log.n[RF_EVENT_PLAN],
                  st.n_steps, log.n[RF_EVENT_INFILL_ITER], iters);
        if (method == RF_METHOD_AR)
            CHECK(log.n[RF_EVENT_AR_TOKEN] == n && log.n[RF_EVENT_PLAN] == 0, "ar: %d token events, %d tokens",
                  log.n[RF_EVENT_AR_TOKEN], n);
        int n_ev = 0;
        for (int k = 0; k < 6; k++) n_ev += log.n[k];
        if (method == RF_METHOD_MDM) CHECK(n_ev == 0, "mdm: %d events", n_ev);
        CHECK(log.bad_pos == 0, "method %d: %d events outside the answer", method, log.bad_pos);
        int same = 1;
        for (int i = 0; i < n && method != RF_METHOD_MDM; i++) same &= log.cell[i] == out[i];
        CHECK(same, "method %d: the events' last tokens are the answer", method);
        CHECK(st.n_steps > 0 && tok_sum == n, "method %d: steps' tokens %d vs %d", method, tok_sum, n);
        CHECK(call_sum <= st.n_calls && call_sum >= st.n_calls - 1, "method %d: steps' calls %d vs %d", method,
              call_sum, st.n_calls);
        CHECK(st.tokens_per_call > 0 && st.tpf > 0 && st.seconds > 0, "method %d: rates", method);
        if (method == RF_METHOD_REFUSION) {
            int acc = st.first_free + st.first_checked + st.first_replaced + st.verified + st.forced_draft +
                      st.forced_ar;
            CHECK(acc == n, "acceptance counts %d vs %d tokens", acc, n);
            /* the no-cache twin: same answer and calls */
            rf_params q = p;
            q.on_event = NULL;
            q.no_cache = 1;
            rf_stats st2;
            int n2b = rf_generate(s, a, na, &q, b, CAP, &st2);
            CHECK(n2b == n && st2.n_calls == st.n_calls, "no_cache: %d ids / %d calls vs %d / %d", n2b, st2.n_calls,
                  n, st.n_calls);
            /* eos_id: the answer's 5th token as the EOS cuts it there (or earlier) */
            q = p;
            q.on_event = NULL;
            q.eos_id = out[4];
            int n3b = rf_generate(s, a, na, &q, b, CAP, &st2);
            CHECK(n3b > 0 && n3b <= 5 && b[n3b - 1] == out[4] && st2.hit_eos, "eos_id %d: %d ids", out[4], n3b);
            q.eos_id = -1;
            CHECK(rf_generate(s, a, na, &q, b, CAP, &st2) == 32 && !st2.hit_eos, "eos_id -1: the whole length");
        }
        /* ---- streamed text == the text of the ids ---- */
        refusion_text_stream *ts = rf_text_stream_new(tok, 1);
        char streamed[8192] = "", whole[8192];
        for (int i = 0; i < n; i++) {
            const char *piece = rf_text_stream_put(ts, out[i]);
            CHECK(piece != NULL, "put %d", out[i]);
            if (piece) strncat(streamed, piece, sizeof streamed - strlen(streamed) - 1);
        }
        strncat(streamed, rf_text_stream_flush(ts), sizeof streamed - strlen(streamed) - 1);
        CHECK(rf_text_stream_put(ts, rf_model_n_vocab(m) + 5) == NULL, "an id outside the vocabulary");
        rf_text_stream_free(ts);
        rf_detokenize(tok, out, n, 1, whole, sizeof whole);
        CHECK(!strcmp(streamed, whole), "method %d: streamed '%s' vs '%s'", method, streamed, whole);
    }

    /* ---- the rolling slot through the API: AR's answer in fewer calls ---- */
    {
        rf_params p = rf_params_default();
        p.method = RF_METHOD_AR;
        p.gen_length = 32;
        p.eos_id = eos;
        rf_stats sa, sr;
        int na_ar = rf_generate(s, a, na, &p, b, CAP, &sa);
        p.method = RF_METHOD_REFUSION;
        p.rolling = 1, p.slot_size = 4, p.slot_threshold = 0.5f;
        int nr = rf_generate(s, a, na, &p, out, CAP, &sr);
        CHECK(nr > 0 && nr == na_ar && !memcmp(out, b, (size_t)nr * sizeof *out), "rolling: %d ids vs AR's %d", nr,
              na_ar);
        CHECK(sr.verified > 0 && sr.n_calls < nr, "rolling: %d drafts passed, %d calls for %d tokens", sr.verified,
              sr.n_calls, nr);
    }

    /* ---- refused settings ---- */
    rf_params p = rf_params_default();
    p.slot_size = 0;
    CHECK(rf_params_check(m, a, na, &p) == RF_ERR_INVALID && strstr(rf_last_error(), "slot"), "slot_size 0: %s",
          rf_last_error());
    p = rf_params_default();
    p.gen_length = rf_model_n_ctx(m);
    CHECK(rf_params_check(m, a, na, &p) == RF_ERR_INVALID && strstr(rf_last_error(), "context"),
          "over the context: %s", rf_last_error());
    p = rf_params_default();
    p.eos_id = -7;
    CHECK(rf_params_check(m, a, na, &p) == RF_ERR_INVALID && rf_generate_bytes(m, na, &p) == RF_ERR_INVALID &&
              rf_generate(s, a, na, &p, out, CAP, NULL) == RF_ERR_INVALID,
          "eos_id -7 refused everywhere");
    int32_t bad_id = rf_model_n_vocab(m);
    CHECK(rf_params_check(m, &bad_id, 1, &p) == RF_ERR_INVALID, "a prompt id outside the vocabulary");

    rf_session_free(s);
    rf_tokenizer_close(tok);
    rf_model_close(m);
    return check_summary("api_events");
}
