/* cmd_train.c - placeholder until the train work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'train' is not built yet\n");
    return 2;
}
