/* routes_llama.c - llama-server's endpoints (see routes_llama.h). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/api_internal.h"
#include "refusion_version.h"
#include "serve/oai.h"
#include "serve/routes_llama.h"
#include "serve/web_assets.h"
#include "util/util.h"

static const struct {
    const char *path, *method;
} llama_routes[RL_N] = {
    [RL_TOKENIZE] = {"/tokenize", "POST"},         [RL_DETOKENIZE] = {"/detokenize", "POST"},
    [RL_APPLY_TEMPLATE] = {"/apply-template", "POST"}, [RL_PROPS] = {"/props", "GET"},
    [RL_SLOTS] = {"/slots", "GET"},                [RL_COMPLETION] = {"/completion", "POST"},
    [RL_COMPLETIONS] = {"/completions", "POST"},   [RL_INFILL] = {"/infill", "POST"},
    [RL_EMBEDDINGS] = {"/embeddings", "POST"},     [RL_V1_EMBEDDINGS] = {"/v1/embeddings", "POST"},
    [RL_PAGE] = {"/", "GET"},
};

int rf_llama_route(const rf_server *s, const char *url) {
    for (int i = 0; i < RL_N; i++)
        if (!strcmp(url, llama_routes[i].path)) return i == RL_SLOTS && !s->cfg.slots_endpoint ? -1 : i;
    /* the page's other files: the built-in ones, or any under --path */
    if (s->cfg.webui && url[0] == '/' && strncmp(url, "/v1/", 4) != 0) {
        if (s->cfg.web_path) return RL_PAGE;
        for (int i = 0; i < rf_web_n_assets; i++)
            if (!strcmp(url + 1, rf_web_assets[i].name)) return RL_PAGE;
    }
    return -1;
}

const char *rf_llama_route_method(int route) { return llama_routes[route].method; }
int rf_llama_is_generation(int route) {
    return route == RL_COMPLETION || route == RL_COMPLETIONS || route == RL_INFILL;
}

/* ---- small helpers -------------------------------------------------------------- */
static char *dump(json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    return t ? t : rf_serve_error_body("the reply could not be built", "server_error", NULL, NULL);
}

static int error(char **out, int status, const char *param, const char *fmt, const char *arg) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    *out = rf_serve_error_body(msg, status >= 500 ? "server_error" : "invalid_request_error", param,
                               status == 501 ? "not_supported" : NULL);
    return status;
}

/* the body as a JSON object, or NULL with *status and *out set */
static json_t *body_object(const char *body, size_t len, int *status, char **out) {
    json_error_t je;
    json_t *o = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!json_is_object(o)) {
        json_decref(o);
        *status = error(out, 400, NULL, "the request body must be a JSON object%s", len ? "" : " (it is empty)");
        return NULL;
    }
    return o;
}

/* a token's text as llama-server gives it: a string when it is valid UTF-8
 * on its own, else its bytes */
static json_t *piece_json(const rf_tokenizer *tok, int id) {
    char *t = rf_tok_decode(tok, &id, 1, 0);
    json_t *v = t ? json_string(t) : NULL;
    if (!v && t) {
        v = json_array();
        for (const unsigned char *p = (const unsigned char *)t; *p; p++) json_array_append_new(v, json_integer(*p));
    }
    free(t);
    return v ? v : json_string("");
}

/* ---- /tokenize, /detokenize, /apply-template ---------------------------------- */
static int do_tokenize(rf_server *s, json_t *o, char **out) {
    json_t *content = json_object_get(o, "content"), *v;
    int add_special = 1, with_pieces = 0;
    if (!json_is_string(content)) return error(out, 400, "content", "\"content\" must be a string%s", NULL);
    if ((v = json_object_get(o, "add_special")) && !json_is_boolean(v))
        return error(out, 400, "add_special", "\"add_special\" must be true or false%s", NULL);
    if ((v = json_object_get(o, "with_pieces")) && !json_is_boolean(v))
        return error(out, 400, "with_pieces", "\"with_pieces\" must be true or false%s", NULL);
    add_special = !json_is_false(json_object_get(o, "add_special"));
    with_pieces = json_is_true(json_object_get(o, "with_pieces"));
    (void)add_special; /* this tokenizer adds no BOS: special tokens are only the ones written in the text */
    int *ids = NULL, n = 0;
    if (rf_tok_encode(s->tok, json_string_value(content), json_string_length(content), &ids, &n))
        return error(out, 400, "content", "content: %s", rf_last_error());
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, with_pieces ? json_pack("{s:i, s:o}", "id", ids[i], "piece", piece_json(s->tok, ids[i]))
                                             : json_integer(ids[i]));
    free(ids);
    *out = dump(json_pack("{s:o}", "tokens", a));
    return 200;
}

static int do_detokenize(rf_server *s, json_t *o, char **out) {
    json_t *t = json_object_get(o, "tokens"), *e;
    if (!json_is_array(t)) return error(out, 400, "tokens", "\"tokens\" must be an array of token ids%s", NULL);
    size_t n = json_array_size(t), i;
    int *ids = rf_malloc((n ? n : 1) * sizeof *ids), V = rf_tok_vocab_size(s->tok);
    json_array_foreach(t, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= V) {
            free(ids);
            char where[48];
            snprintf(where, sizeof where, "tokens[%zu]", i);
            return error(out, 400, "tokens", "%s is not a token id of this vocabulary", where);
        }
        ids[i] = (int)json_integer_value(e);
    }
    char *text = rf_tok_decode(s->tok, ids, (int)n, 0);
    free(ids);
    json_t *v = text ? json_string(text) : NULL;
    free(text);
    *out = dump(json_pack("{s:o}", "content", v ? v : json_string("\xef\xbf\xbd")));
    return 200;
}

static int do_apply_template(rf_server *s, const char *body, size_t len, char **out) {
    rf_serve_req r;
    if (rf_serve_parse(body, len, RF_REQ_CHAT, s->m, s->tok, &s->cfg.defaults, &r))
        return error(out, 400, r.err_param[0] ? r.err_param : "messages", "%s", rf_last_error());
    json_t *v = json_string(r.prompt_text ? r.prompt_text : "");
    rf_serve_req_free(&r);
    *out = dump(json_pack("{s:o}", "prompt", v ? v : json_string("")));
    return 200;
}

/* ---- /props, /slots ------------------------------------------------------------- */
/* the decoding settings as a request names them (the shared option table) */
static json_t *settings_json(const rf_decode_opts *d) {
    json_t *set = json_object();
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *row = &rf_decode_table[i];
        if (!row->http) continue;
        char b[48];
        rf_opt_format(row, d, b, sizeof b);
        json_object_set_new(set, row->http, row->type == RF_OPT_FLOAT    ? json_real(strtod(b, NULL))
                                            : row->type == RF_OPT_CHOICE ? json_string(b)
                                            : row->type == RF_OPT_FLAG   ? json_boolean(!strcmp(b, "on"))
                                                                         : json_integer(strtoll(b, NULL, 10)));
    }
    /* llama-server's names beside ours */
    json_object_set_new(set, "n_predict", json_integer(d->gen.gen_length));
    json_object_set_new(set, "seed", json_integer(d->gen.seed == RF_SEED_RANDOM ? -1 : (json_int_t)d->gen.seed));
    return set;
}

static int do_props(rf_server *s, char **out) {
    const rf_config *k = &s->m->cfg;
    const char *tpl = s->tok ? rf_tok_chat_template(s->tok) : NULL;
    int eos = s->tok ? rf_tok_eos_id(s->tok) : -1;
    json_t *o = json_object();
    json_object_set_new(o, "default_generation_settings",
                        json_pack("{s:i, s:o}", "n_ctx", s->cfg.defaults.ctx_size > 0 ? s->cfg.defaults.ctx_size : k->max_pos,
                                  "params", settings_json(&s->cfg.defaults)));
    json_object_set_new(o, "total_slots", json_integer(s->n_slots));
    json_object_set_new(o, "model_path", json_string(s->m->dir ? s->m->dir : ""));
    json_object_set_new(o, "model_alias", json_string(s->model_name));
    /* the model's Jinja template, or the built-in Qwen3 renderer's name */
    json_object_set_new(o, "chat_template", json_string(tpl ? tpl : s->tok ? "builtin" : ""));
    json_object_set_new(o, "bos_token", json_string(""));
    json_object_set_new(o, "eos_token", eos >= 0 ? piece_json(s->tok, eos) : json_string(""));
    json_object_set_new(o, "build_info", json_string("refusion " RF_VERSION_STRING));
    json_object_set_new(o, "modalities", json_pack("{s:b, s:b}", "vision", 0, "audio", 0));
    json_object_set_new(o, "webui", json_boolean(s->cfg.webui));
    *out = dump(o);
    return 200;
}

static int do_slots(rf_server *s, char **out) {
    json_t *a = json_array();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) {
        const job *j = s->slots[i];
        json_t *e = json_pack("{s:i, s:b, s:i}", "id", i, "is_processing", j != NULL, "n_ctx", s->m->cfg.max_pos);
        if (j) {
            json_object_set_new(e, "id_task", json_string(j->id));
            json_object_set_new(e, "state", json_string("processing"));
            json_object_set_new(e, "n_prompt_tokens", json_integer(j->req.n_prompt));
            json_object_set_new(e, "next_token",
                                json_pack("[{s:i, s:i, s:i}]", "n_decoded", j->n_decoded, "n_remain",
                                          j->req.max_tokens - j->n_decoded, "model_calls", j->calls_now));
            json_object_set_new(e, "mode", json_string(rf_method_name(j->req.p.method)));
        } else {
            json_object_set_new(e, "id_task", json_null());
            json_object_set_new(e, "state", json_string("idle"));
        }
        json_array_append_new(a, e);
    }
    pthread_mutex_unlock(&s->mu);
    *out = dump(a);
    return 200;
}

void rf_serve_slots_init(rf_server *s) {
    s->n_slots = s->cfg.parallel;
    s->slots = rf_calloc((size_t)s->n_slots, sizeof *s->slots);
}
void rf_serve_slots_free(rf_server *s) {
    free(s->slots);
    s->slots = NULL, s->n_slots = 0;
}

void rf_serve_slot_take_locked(rf_server *s, job *j) {
    j->slot = -1;
    for (int i = 0; i < s->n_slots && j->slot < 0; i++)
        if (!s->slots[i]) s->slots[i] = j, j->slot = i;
}
void rf_serve_slot_give_locked(rf_server *s, job *j) {
    if (j->slot >= 0 && j->slot < s->n_slots && s->slots[j->slot] == j) s->slots[j->slot] = NULL;
    j->slot = -1;
}

/* ---- the web page ------------------------------------------------------------------ */
static const char *mime_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    static const char *const m[][2] = {{".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
                                       {".css", "text/css; charset=utf-8"}, {".svg", "image/svg+xml"},
                                       {".png", "image/png"}, {".ico", "image/x-icon"}, {".json", "application/json"}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (!strcmp(dot, m[i][0])) return m[i][1];
    return "application/octet-stream";
}

/* a file under --path: no "..", no hidden files, a regular file of bounded size */
static int page_file(rf_server *s, const char *url, char **out, const char **type) {
    const char *rel = !strcmp(url, "/") ? "index.html" : url + 1;
    if (strstr(rel, "..") || strstr(rel, "/.") || rel[0] == '.' || strlen(rel) > 200)
        return error(out, 404, NULL, "no such file: %s", url);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", s->cfg.web_path, rel);
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode) || st.st_size > (16 << 20))
        return error(out, 404, NULL, "no such file: %s", url);
    size_t n;
    char *text = rf_read_file_max(path, 16u << 20, &n);
    if (!text || strlen(text) != n) { /* the answer is sent as a string: text files only */
        free(text);
        return error(out, 404, NULL, "%s is not a text file", url);
    }
    *out = text;
    *type = mime_of(rel);
    return 200;
}

static int page(rf_server *s, const char *url, char **out, const char **type) {
    if (s->cfg.web_path) return page_file(s, url, out, type);
    const char *name = !strcmp(url, "/") ? "index.html" : url + 1;
    for (int i = 0; i < rf_web_n_assets; i++)
        if (!strcmp(name, rf_web_assets[i].name)) {
            *out = rf_strdup(rf_web_assets[i].text);
            *type = mime_of(name);
            return 200;
        }
    return error(out, 404, NULL, "no such file: %s", url);
}

int rf_llama_answer(rf_server *s, int route, const char *url, const char *body, size_t len, char **out,
                    const char **type) {
    *type = "application/json";
    if (route == RL_PAGE) {
        if (!s->cfg.webui) return error(out, 404, NULL, "the web page is off (--no-webui)%s", NULL);
        return page(s, url, out, type);
    }
    if (route == RL_PROPS) return do_props(s, out);
    if (route == RL_SLOTS) return do_slots(s, out);
    if (route == RL_EMBEDDINGS || route == RL_V1_EMBEDDINGS)
        return error(out, 501, NULL,
                     "embeddings are not served: this model is a generator (a causal LM with a mask head), with "
                     "no trained pooled embedding; a pooled hidden state would not be a meaningful vector%s", NULL);
    if (!s->tok) return error(out, 400, NULL, "this model has no tokenizer%s", NULL);
    int status = 0;
    json_t *o = body_object(body, len, &status, out);
    if (!o) return status;
    if (route == RL_TOKENIZE) status = do_tokenize(s, o, out);
    else if (route == RL_DETOKENIZE) status = do_detokenize(s, o, out);
    else status = do_apply_template(s, body, len, out);
    json_decref(o);
    return status;
}

/* ---- /completion and /infill: into the OpenAI completions body ----------------- */
/* llama-server's fields that have no meaning here but a neutral value */
static int translate_fields(json_t *o, char *param, size_t cap) {
    json_t *v;
#define BAD(key, ...) do { snprintf(param, cap, "%s", key); rf_set_error(__VA_ARGS__); return -1; } while (0)
    if ((v = json_object_get(o, "n_predict"))) {
        if (!json_is_integer(v) || (json_integer_value(v) < 1 && json_integer_value(v) != -1))
            BAD("n_predict", "\"n_predict\" must be -1 (the server's default length, -n) or an integer >= 1");
        if (json_integer_value(v) > 0) json_object_set(o, "max_tokens", v);
        json_object_del(o, "n_predict");
    }
    /* prompt-prefix reuse is automatic (--cache-mb): accepted either way */
    if ((v = json_object_get(o, "cache_prompt"))) {
        if (!json_is_boolean(v)) BAD("cache_prompt", "\"cache_prompt\" must be true or false");
        json_object_del(o, "cache_prompt");
    }
    if ((v = json_object_get(o, "id_slot"))) {
        if (!json_is_integer(v) || json_integer_value(v) != -1)
            BAD("id_slot", "\"id_slot\" must be -1: a generation takes the first free slot of its kind");
        json_object_del(o, "id_slot");
    }
    /* the completions' "logprobs": N (request.c), answered in llama-server's
     * "completion_probabilities" */
    if ((v = json_object_get(o, "n_probs"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > RF_MAX_TOP_LOGPROBS)
            BAD("n_probs", "\"n_probs\" must be an integer in [0, %d]", RF_MAX_TOP_LOGPROBS);
        if (json_object_get(o, "logprobs")) BAD("n_probs", "give \"n_probs\" or \"logprobs\", not both");
        if (json_integer_value(v) > 0) json_object_set(o, "logprobs", v);
        json_object_del(o, "n_probs");
    }
    if ((v = json_object_get(o, "return_tokens"))) { /* the tokens are always returned */
        if (!json_is_boolean(v)) BAD("return_tokens", "\"return_tokens\" must be true or false");
        json_object_del(o, "return_tokens");
    }
    for (const char *const *k = (const char *const[]){"samplers", "lora", NULL}; *k; k++)
        if ((v = json_object_get(o, *k)) && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)))
            BAD(*k, "\"%s\" is not supported by this server", *k);
#undef BAD
    return 0;
}

/* /infill: the model's fill-in-the-middle tokens around the prefix and suffix,
 * then the prompt (the text already typed at the cursor), as ids */
static int infill_prompt(rf_server *s, json_t *o, char *param, size_t cap) {
    int pre = rf_tok_id(s->tok, "<|fim_prefix|>"), suf = rf_tok_id(s->tok, "<|fim_suffix|>"),
        mid = rf_tok_id(s->tok, "<|fim_middle|>");
    if (pre < 0 || suf < 0 || mid < 0) {
        rf_set_error("this model has no fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>)");
        return 501;
    }
    json_t *extra = json_object_get(o, "input_extra");
    if (extra && !(json_is_array(extra) && json_array_size(extra) == 0)) {
        snprintf(param, cap, "input_extra");
        rf_set_error("\"input_extra\" is not supported (one file: input_prefix, input_suffix, prompt)");
        return 400;
    }
    const char *keys[3] = {"input_prefix", "input_suffix", "prompt"};
    int marks[3] = {pre, suf, mid};
    json_t *ids = json_array();
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(o, keys[k]);
        if (v && !json_is_string(v)) {
            json_decref(ids);
            snprintf(param, cap, "%s", keys[k]);
            rf_set_error("\"%s\" must be a string", keys[k]);
            return 400;
        }
        int *t = NULL, n = 0;
        const char *text = v ? json_string_value(v) : "";
        if (rf_tok_encode(s->tok, text, strlen(text), &t, &n)) {
            json_decref(ids);
            snprintf(param, cap, "%s", keys[k]);
            return 400;
        }
        if (k < 2) json_array_append_new(ids, json_integer(marks[k]));
        else json_array_append_new(ids, json_integer(mid));
        for (int i = 0; i < n; i++) json_array_append_new(ids, json_integer(t[i]));
        free(t);
    }
    json_object_del(o, "input_prefix");
    json_object_del(o, "input_suffix");
    json_object_del(o, "input_extra");
    json_object_set_new(o, "prompt", ids);
    return 0;
}

char *rf_llama_translate(rf_server *s, int route, const char *body, size_t len, int *status, char *param,
                         size_t param_cap) {
    char *out = NULL;
    param[0] = 0;
    json_t *o = body_object(body, len, status, &out);
    free(out);
    if (!o) {
        rf_set_error("the request body must be a JSON object");
        return NULL;
    }
    *status = 400;
    if (translate_fields(o, param, param_cap)) {
        json_decref(o);
        return NULL;
    }
    if (route == RL_INFILL) {
        if (!s->tok) {
            rf_set_error("this model has no tokenizer");
            json_decref(o);
            return NULL;
        }
        int rc = infill_prompt(s, o, param, param_cap);
        if (rc) {
            *status = rc;
            json_decref(o);
            return NULL;
        }
    }
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!txt) rf_set_error("the request could not be rebuilt");
    return txt;
}

/* ---- native answers ----------------------------------------------------------------- */
static json_t *ids_array(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *text_json(const char *t) {
    json_t *v = json_string(t ? t : "");
    return v ? v : json_string("\xef\xbf\xbd");
}

json_t *rf_llama_chunk(const job *j, const char *piece, const int32_t *ids, int n, json_t *probs) {
    json_t *o = json_pack("{s:i, s:o, s:o, s:b, s:i}", "index", 0, "content", text_json(piece), "tokens",
                          ids_array(ids, n), "stop", 0, "id_slot", j->slot);
    if (probs) json_object_set_new(o, "completion_probabilities", probs);
    return o;
}

json_t *rf_llama_final(const rf_server *s, const job *j, const char *text, const int32_t *ids, int n,
                       const char *stop_type, const char *stopping_word, json_t *probs) {
    json_t *o = json_pack("{s:i, s:o, s:o, s:b, s:s, s:s, s:o, s:i, s:i, s:i, s:b, s:i}", "index", 0, "content",
                          text_json(text), "tokens", ids_array(ids, n), "stop", 1, "model", s->model_name,
                          "stop_type", stop_type, "stopping_word", text_json(stopping_word), "tokens_predicted",
                          j->n_decoded, "tokens_evaluated", j->req.n_prompt, "id_slot", j->slot, "truncated", 0,
                          "tokens_cached", 0);
    json_object_set_new(o, "generation_settings", settings_json(&j->req.d));
    if (probs) json_object_set_new(o, "completion_probabilities", probs);
    return o;
}

json_t *rf_serve_timings_json(const rf_serve_timing *t) {
    double pms = t->prompt_s * 1e3, gms = t->predicted_s * 1e3;
    return json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "prompt_n", t->prompt_n, "prompt_ms", pms,
                     "prompt_per_token_ms", t->prompt_n ? pms / t->prompt_n : 0.0, "prompt_per_second",
                     pms > 0 ? t->prompt_n * 1e3 / pms : 0.0, "predicted_n", t->predicted_n, "predicted_ms", gms,
                     "predicted_per_token_ms", t->predicted_n ? gms / t->predicted_n : 0.0, "predicted_per_second",
                     gms > 0 ? t->predicted_n * 1e3 / gms : 0.0);
}

/* ---- live decoder events -------------------------------------------------------- */
static const char *const event_names[] = {"plan", "fast_commit", "infill_iter", "infill_commit", "drop", "ar_token"};

void rf_serve_decode_event_locked(rf_server *s, job *j, const rf_event *ev) {
    if ((unsigned)ev->kind >= sizeof event_names / sizeof *event_names) return;
    json_t *o = json_pack("{s:s, s:i}", "kind", event_names[ev->kind], "step", ev->step);
    json_t *apos = json_array(), *tok = json_array(), *text = json_array(), *acc = json_array();
    for (int i = 0; i < ev->n; i++) {
        json_array_append_new(apos, json_integer(ev->apos[i]));
        if (ev->tok) {
            json_array_append_new(tok, json_integer(ev->tok[i]));
            int id = ev->tok[i];
            char *t = s->tok ? rf_tok_decode(s->tok, &id, 1, 0) : NULL;
            json_array_append_new(text, text_json(t));
            free(t);
        }
        if (ev->accepted) json_array_append_new(acc, json_boolean(ev->accepted[i]));
    }
    json_object_set_new(o, "apos", apos);
    json_object_set_new(o, "tok", tok);
    json_object_set_new(o, "text", text);
    json_object_set_new(o, "accepted", acc);
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!txt) return;
    rf_job_sse_named_locked(j, "decode", txt); /* the event rides in the job's SSE buffer */
    pthread_cond_broadcast(&j->cv);
}
