/* api_layout.c - rf_params_fields and rf_stats_fields describe the whole
 * struct: the fields, in order, tile it with only the padding their
 * alignment needs, and end at its size (a field left out of a table leaves
 * a gap and fails; so does a wrong kind). Mutation seen failing: removing
 * "rolling" from api.c's params table. */
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "refusion.h"

static size_t kind_size(rf_field_kind k) {
    switch (k) {
    case RF_FIELD_INT: return sizeof(int);
    case RF_FIELD_FLOAT: return sizeof(float);
    case RF_FIELD_DOUBLE: return sizeof(double);
    case RF_FIELD_U64: return sizeof(uint64_t);
    case RF_FIELD_PTR: return sizeof(void *);
    }
    return 0;
}

static void check_tiles(const char *what, const rf_field *f, size_t size, int want_n) {
    size_t end = 0, align_max = 1;
    int n = 0;
    for (; f->name; f++, n++) {
        size_t sz = kind_size(f->kind);
        CHECK(sz > 0, "%s.%s: unknown kind %d", what, f->name, (int)f->kind);
        if (!sz) return;
        size_t at = (end + sz - 1) / sz * sz; /* each kind is aligned to its size here */
        CHECK(f->offset == at, "%s.%s at %zu, want %zu (a field before it left out?)", what, f->name, f->offset, at);
        end = f->offset + sz;
        if (sz > align_max) align_max = sz;
    }
    CHECK((end + align_max - 1) / align_max * align_max == size, "%s: fields end at %zu, the struct has %zu bytes",
          what, end, size);
    CHECK(n == want_n, "%s: %d fields, want %d", what, n, want_n);
}

int main(void) {
    size_t size = 0;
    const rf_field *p = rf_params_fields(&size);
    CHECK(size == sizeof(rf_params), "rf_params size %zu", size);
    check_tiles("rf_params", p, size, 36);
    CHECK(!strcmp(p[0].name, "method") && p[0].offset == offsetof(rf_params, method), "first field");
    const rf_field *s = rf_stats_fields(&size);
    CHECK(size == sizeof(rf_stats), "rf_stats size %zu", size);
    check_tiles("rf_stats", s, size, 16);
    CHECK(rf_params_fields(NULL) == p, "size may be NULL");
    return check_summary("api_layout");
}
