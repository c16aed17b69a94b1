/* main.c - the refusion command-line program: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"init", cmd_init, "write a randomly initialised checkpoint (HF layout)"},
    {"info", cmd_info, "load a checkpoint, check it and print its shape"},
    {"convert", cmd_convert, "rewrite a checkpoint in another dtype (e.g. f32 -> bf16)"},
    {"tokenize", cmd_tokenize, "text -> ids (--decode: ids -> text, --chat: template)"},
    {"tokenizer-train", cmd_tokenizer_train, "train a byte-level BPE tokenizer.json"},
    {"generate", cmd_generate, "generate text with ReFusion or AR decoding"},
    {"chat", cmd_chat, "chat with a model in the terminal (multi-turn, streaming)"},
    {"train", cmd_train, "train a model (refusion | ar | mdm objective)"},
    {"tasks", cmd_tasks, "write the task suite (train/test JSON)"},
    {"eval", cmd_eval, "evaluate a model with a decoder on a task set"},
    {"probe", cmd_probe, "teacher-forced accuracy of the AR and mask heads per position class"},
    {"logits", cmd_logits, "raw next-token logits and the greedy continuation of ids, as JSON"},
    {"serve", cmd_serve, "serve the model over HTTP (OpenAI-style completions API)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: refusion <command> [options]   (refusion <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("refusion %s\n", RF_VERSION_STRING);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "refusion: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
