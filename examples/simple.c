/* simple.c - the smallest program on librefusion: load a model, tokenize a
 * prompt with the chat template, generate with the model's recommended
 * settings (its generation_config.json: the rolling slot for the demo), print,
 * free.
 *
 *   cc simple.c $(pkg-config --cflags --libs refusion) -o simple
 *   ./simple MODEL "Tom has 15 apples. He finds 7 more apples. He loses 5 of them. How many apples does Tom have now?" [N]
 *
 * Tokens are printed as they become final (the streaming callback). */
#include <stdio.h>
#include <stdlib.h>

#include <refusion.h>

typedef struct {
    const refusion_tokenizer *tok;
} stream;

static void on_tokens(const int32_t *ids, int n, void *user) {
    const stream *s = user;
    char buf[1024];
    if (rf_detokenize(s->tok, ids, n, 1, buf, sizeof buf) >= 0) fputs(buf, stdout);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    refusion_model *model = rf_model_open(argv[1]);
    if (!model) {
        fprintf(stderr, "simple: %s\n", rf_last_error());
        return 1;
    }
    refusion_tokenizer *tok = rf_tokenizer_open(model);
    if (!tok) {
        fprintf(stderr, "simple: %s\n", rf_last_error());
        rf_model_close(model);
        return 1;
    }
    /* the prompt's ids: ask for the count first, then fill */
    int n_prompt = rf_tokenize(tok, argv[2], 1, NULL, 0);
    int32_t *prompt = n_prompt > 0 ? malloc((size_t)n_prompt * sizeof *prompt) : NULL;
    if (n_prompt <= 0 || !prompt || rf_tokenize(tok, argv[2], 1, prompt, n_prompt) != n_prompt) {
        fprintf(stderr, "simple: tokenize: %s\n", rf_last_error());
        return 1;
    }

    rf_params p = rf_params_default();
    if (rf_params_recommended(model, tok, &p) != 0) {
        fprintf(stderr, "simple: %s\n", rf_last_error());
        return 1;
    }
    p.gen_length = argc > 3 ? atoi(argv[3]) : 32;
    p.n_blocks = 1;
    stream st = {tok};
    p.on_tokens = on_tokens;
    p.user = &st;

    refusion_session *session = rf_session_new(model);
    int32_t out[4096];
    rf_stats stats;
    int n = session ? rf_generate(session, prompt, n_prompt, &p, out, 4096, &stats) : -1;
    if (n < 0) {
        fprintf(stderr, "simple: generate: %s\n", rf_last_error());
        return 1;
    }
    printf("\n[%d tokens, %d model calls]\nids:", stats.n_tokens, stats.n_calls);
    for (int i = 0; i < n && i < 4096; i++) printf(" %d", out[i]);
    printf("\n");

    rf_session_free(session);
    free(prompt);
    rf_tokenizer_close(tok);
    rf_model_close(model);
    return 0;
}
