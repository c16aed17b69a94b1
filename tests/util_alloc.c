/* util_alloc.c - rf_try_huge_alloc: the packed weights' allocator. A block of
 * 2 MiB or more starts on a 2 MiB boundary (where a transparent huge page
 * can back it) and is zeroed end to end; a smaller one is an ordinary
 * 64-byte aligned block; a failed allocation (rf_fail_alloc_after) returns
 * NULL with "out of memory" set, and a size that overflows is refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/util.h"

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

int main(void) {
    const size_t huge = (size_t)2 << 20;
    const size_t sizes[] = {100, huge - 1, huge, 3 * huge + 12345};
    for (int i = 0; i < 4; i++) {
        size_t n = sizes[i];
        unsigned char *p = rf_try_huge_alloc(n);
        CHECK(p != NULL, "%zu bytes: %s", n, rf_last_error());
        if (!p) continue;
        size_t align = n >= huge ? huge : 64;
        CHECK((uintptr_t)p % align == 0, "%zu bytes at %p: not %zu-byte aligned", n, (void *)p, align);
        CHECK(all_zero(p, n), "%zu bytes: not zeroed", n);
        memset(p, 0xAB, n); /* the whole block is writable */
        free(p);
    }
    rf_fail_alloc_after(1);
    void *q = rf_try_huge_alloc(3 * huge);
    CHECK(q == NULL, "an injected failure returned a block");
    CHECK(strstr(rf_last_error(), "out of memory") != NULL, "error: '%s'", rf_last_error());
    free(q);
    rf_fail_alloc_after(0);
    q = rf_try_huge_alloc(SIZE_MAX - 100);
    CHECK(q == NULL, "a size of SIZE_MAX - 100 was allocated");
    free(q);
    return check_summary("util_alloc");
}
