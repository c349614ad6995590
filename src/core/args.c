/* Numeric command-line flags (args.h). */
#include "mrcnn/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int mrcnn_arg_int(const char *prog, const char *flag, const char *text, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s wants an integer in [%lld, %lld], got '%s'\n", prog, flag, lo, hi, text);
        return 0;
    }
    *out = v;
    return 1;
}

int mrcnn_arg_double(const char *prog, const char *flag, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "%s: %s wants a number in [%g, %g], got '%s'\n", prog, flag, lo, hi, text);
        return 0;
    }
    *out = v;
    return 1;
}
