/* cmd_generate.c - placeholder until the decode work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'generate' is not built yet\n");
    return 2;
}
