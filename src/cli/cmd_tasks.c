/* cmd_tasks.c - placeholder until the tasks work lands. */
#include <stdio.h>
#include "cli/commands.h"

int cmd_tasks(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "refusion: 'tasks' is not built yet\n");
    return 2;
}
