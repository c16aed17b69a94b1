/* args.h - option-value parsing shared by the subcommands. Each prints
 * "refusion: <cmd>: <opt> expects ..." and returns -1 on a bad value. */
#ifndef RF_ARGS_H
#define RF_ARGS_H

int rf_arg_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int rf_arg_float(const char *cmd, const char *opt, const char *s, float *out);
/* --ar-verify off|correct|first|both: the AR-verified ReFusion switches
 * (REFUSION.md 3b) into *ar_correct / *ar_check_first */
int rf_arg_ar_verify(const char *cmd, const char *opt, const char *s, int *ar_correct, int *ar_check_first);
/* the name of a switch pair, as --ar-verify spells it */
const char *rf_ar_verify_name(int ar_correct, int ar_check_first);

#endif
