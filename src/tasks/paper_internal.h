/* paper_internal.h - helpers shared by the paper-task files (not API). */
#ifndef RF_PAPER_INTERNAL_H
#define RF_PAPER_INTERNAL_H

#include "tasks/paper.h"
#include "util/util.h"

/* re.sub(pattern, repl, text) with PCRE2's replacement syntax ($1, $$). malloc'd. */
char *rf_paper_regex_sub(const char *pattern, const char *repl, const char *text);
/* str.replace(from, to): malloc'd; _in: in place on a malloc'd string */
char *rf_paper_replace(const char *s, const char *from, const char *to);
void rf_paper_replace_in(char **s, const char *from, const char *to);
/* lowercase (lower) and Unicode punctuation (categories P*) removed (unicode_punct) */
char *rf_paper_fold(const char *s, int lower, int unicode_punct);
/* s as a PCRE2 pattern matching it literally */
char *rf_paper_regex_escape(const char *s);

#endif
