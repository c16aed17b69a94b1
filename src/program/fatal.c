/* fatal.c - what an rf_die outside the public API's catch points does in the
 * programs built from this tree: the refusion command, the tests and the
 * benchmarks call the library's internals directly, and a failed internal
 * check or allocation there ends the program with one line and exit status
 * 2. The library itself never exits (util.h: rf_set_fatal_handler); this
 * file is linked into programs only, and installs the handler before main. */
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

static void print_and_exit(const char *message) {
    fprintf(stderr, "refusion: fatal: %s\n", message);
    exit(2);
}

__attribute__((constructor)) static void install(void) { rf_set_fatal_handler(print_and_exit); }
