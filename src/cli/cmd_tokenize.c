/* cmd_tokenize.c - placeholder until the tokenizer work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'tokenize' is not built yet\n");
    return 2;
}
