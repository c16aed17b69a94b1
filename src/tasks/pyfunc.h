/* pyfunc.h - a tiny interpreter for the Python subset the "func" task family
 * answers in: one function of one integer argument,
 *
 *     def f(x):
 *         y = x + 3          # assignments (also += -= *= //= %=)
 *         return y if y > 10 else 0
 *
 * Expressions: integer literals, names, True/False, + - * // % ** (unary
 * and binary), parentheses, comparisons (chained as in Python), not/and/or
 * (returning operands as Python does), "a if c else b", abs/min/max.
 * Values are 64-bit integers with Python's floor division and modulo;
 * anything Python would do differently (floats, overflow past 64 bits,
 * division by zero, an unknown name) is an error, so an answer is only
 * judged right when Python would compute the same integers. Indentation is
 * not checked; statements are separated by newlines or ';'. */
#ifndef RF_PYFUNC_H
#define RF_PYFUNC_H

#include <stddef.h>
#include <stdint.h>

typedef struct rf_pyfunc rf_pyfunc;

/* Parse "def f(<name>): <statements>". NULL on a syntax error, with a
 * one-line reason in err. */
rf_pyfunc *rf_pyfunc_parse(const char *src, char *err, size_t err_len);
/* Run f(x). 0 with *out set, or -1 on a runtime error (no return reached,
 * division by zero, overflow, unbound name). */
int rf_pyfunc_call(const rf_pyfunc *f, int64_t x, int64_t *out);
void rf_pyfunc_free(rf_pyfunc *f);

#endif
