/* cmd_info.c - placeholder until the io work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'info' is not built yet\n");
    return 2;
}
