/* args.h - option-value parsing shared by the subcommands. Each prints
 * "refusion: <cmd>: <opt> expects ..." and returns -1 on a bad value. */
#ifndef RF_ARGS_H
#define RF_ARGS_H

int rf_arg_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int rf_arg_float(const char *cmd, const char *opt, const char *s, float *out);

#endif
