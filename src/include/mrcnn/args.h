/* Numeric command-line flags, one rule for every tool: the whole text must be a number
 * (no trailing characters, no NaN or infinity), and it must lie in the flag's range;
 * nothing is truncated (99999999999 for an int flag is out of range, not 1215752191).
 * Implementation: src/core/args.c. */
#ifndef MRCNN_ARGS_H
#define MRCNN_ARGS_H

/* 1 and *out when text is an integer in [lo, hi]; else 0 after printing
 * "PROG: FLAG wants an integer in [lo, hi], got 'TEXT'" to stderr. */
int mrcnn_arg_int(const char *prog, const char *flag, const char *text, long long lo, long long hi, long long *out);
/* The same for a finite number in [lo, hi]. */
int mrcnn_arg_double(const char *prog, const char *flag, const char *text, double lo, double hi, double *out);

#endif
