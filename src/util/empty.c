/* empty.c - the sole source of a library whose folder is still empty. */
typedef int rf_empty_translation_unit;
