/* cmd_eval.c - placeholder until the tasks work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'eval' is not built yet\n");
    return 2;
}
