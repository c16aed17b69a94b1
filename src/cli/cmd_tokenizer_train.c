/* cmd_tokenizer_train.c - placeholder until the tokenizer work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_tokenizer_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'tokenizer_train' is not built yet\n");
    return 2;
}
