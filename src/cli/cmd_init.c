/* cmd_init.c - placeholder until the io work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_init(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'init' is not built yet\n");
    return 2;
}
