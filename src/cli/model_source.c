/* model_source.c - the rows that name the model a command loads and its
 * tokenizer (-m, --tokenizer), one description for every command that
 * takes both (cli/commands.h rf_model_source). */
#include <stddef.h>

#include "cli/commands.h"

#define A(f) offsetof(rf_model_source, f)
const rf_opt rf_model_source_table[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "MODEL",
     .help = "checkpoint dir or .gguf file (its tokenizer is used)"},
    {.name = "tokenizer", .type = RF_OPT_STR, .offset = A(tokenizer), .metavar = "PATH",
     .help = "tokenizer.json or folder (default: the model's)"},
};
const int rf_model_source_table_n = (int)(sizeof rf_model_source_table / sizeof rf_model_source_table[0]);
