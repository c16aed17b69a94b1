/* tasks.c - libFuzzer: a task-file record (JSON) and a model answer, split at
 * the first "\n---\n", through the checkers (arithmetic, the Python-subset
 * interpreter for functions, JSON records). */
#include <jansson.h>
#include <string.h>

#include "fuzz_util.h"
#include "tasks/tasks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *sep = strstr(buf, "\n---\n");
    const char *answer = sep ? sep + 5 : "";
    if (sep) *sep = 0;
    json_t *ex = json_loads(buf, 0, NULL);
    if (ex) {
        rf_task_check(ex, answer);
        json_decref(ex);
    }
    free(buf);
    return 0;
}
