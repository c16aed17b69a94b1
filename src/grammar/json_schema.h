/* json_schema.h - JSON schemas as GBNF (json_schema.c; the supported
 * keywords and the regex subset of "pattern": docs/grammar.md). */
#ifndef RF_JSON_SCHEMA_H
#define RF_JSON_SCHEMA_H

#include <stddef.h>

struct json_t;

/* GBNF text (malloc'd) whose sentences are JSON documents valid under the
 * schema, or NULL with rf_last_error() "json schema: <where>: '<keyword>'
 * <what>" for a schema it cannot enforce exactly (fail closed). */
char *rf_json_schema_to_gbnf(const struct json_t *schema);
/* The same from the schema's JSON text. */
char *rf_json_schema_text_to_gbnf(const char *text, size_t len);
/* GBNF for any JSON object (OpenAPI's response_format json_object). */
const char *rf_json_object_gbnf(void);

#endif
