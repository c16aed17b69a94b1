/* decode.c - ids -> text, whole or streamed.
 *
 * A token stands for raw bytes, and a multi-byte character can be split
 * across tokens, so text is assembled as bytes and then made valid UTF-8:
 * ill-formed parts become U+FFFD, one per "maximal subpart" (what
 * Rust's String::from_utf8_lossy and JavaScript's TextDecoder do). The
 * streaming decoder emits everything that is final and holds back only a
 * truncated sequence at the end, so its concatenated output equals the
 * whole-sequence decode. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

static int check_id(const rf_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab || !t->bytes[id]) {
        rf_set_error("token id %d is not in the vocabulary (size %d)", id, t->n_vocab);
        return -1;
    }
    return 0;
}

char *rf_tok_decode(const rf_tokenizer *t, const int *ids, int n, int skip_special) {
    rf_buf raw = {0}, out = {0};
    for (int i = 0; i < n; i++) {
        if (check_id(t, ids[i])) {
            free(raw.p);
            return NULL;
        }
        if (skip_special && t->special[ids[i]]) continue;
        rf_buf_put(&raw, t->bytes[ids[i]], (size_t)t->nbytes[ids[i]]);
    }
    rf_utf8_repair((const unsigned char *)raw.p, raw.n, 1, &out);
    free(raw.p);
    return rf_buf_cstr(&out);
}

const char *rf_tok_bytes(const rf_tokenizer *t, int id, int *n) {
    if (id < 0 || id >= t->n_vocab || !t->bytes[id]) {
        *n = 0;
        return NULL;
    }
    *n = t->nbytes[id];
    return t->bytes[id];
}

struct rf_tok_stream {
    const rf_tokenizer *t;
    int skip_special;
    unsigned char pend[4]; /* bytes of a truncated sequence (at most 3) */
    int npend;
    rf_buf work, out;
};

rf_tok_stream *rf_tok_stream_new(const rf_tokenizer *t, int skip_special) {
    rf_tok_stream *s = rf_calloc(1, sizeof *s);
    s->t = t;
    s->skip_special = skip_special;
    return s;
}

/* Pending bytes + new bytes -> out (final text) + new pending tail. */
static const char *stream_emit(rf_tok_stream *s, const char *b, size_t n, int final) {
    s->work.n = 0;
    rf_buf_put(&s->work, s->pend, (size_t)s->npend);
    rf_buf_put(&s->work, b, n);
    s->out.n = 0;
    size_t used = rf_utf8_repair((const unsigned char *)s->work.p, s->work.n, final, &s->out);
    s->npend = (int)(s->work.n - used); /* a truncated sequence: < 4 bytes */
    memcpy(s->pend, s->work.p + used, (size_t)s->npend);
    rf_buf_put(&s->out, "", 0);
    s->out.p[s->out.n] = 0;
    return s->out.p;
}

const char *rf_tok_stream_put(rf_tok_stream *s, int id) {
    if (check_id(s->t, id)) return NULL;
    if (s->skip_special && s->t->special[id]) return stream_emit(s, "", 0, 0);
    return stream_emit(s, s->t->bytes[id], (size_t)s->t->nbytes[id], 0);
}

const char *rf_tok_stream_flush(rf_tok_stream *s) { return stream_emit(s, "", 0, 1); }

void rf_tok_stream_free(rf_tok_stream *s) {
    if (!s) return;
    free(s->work.p);
    free(s->out.p);
    free(s);
}
