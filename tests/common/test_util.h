/* Shared helpers for the cmocka tests: catching mrcnn failures, random data, and
 * error metrics (max|a-b|/max|b| and NMSE, never elementwise relative error). */
#ifndef MRCNN_TEST_UTIL_H
#define MRCNN_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Runs stmt; asserts it fails through the check family, with a message containing
 * `needle` (NULL: any message). */
extern jmp_buf mrcnn_test_jmp;
extern char mrcnn_test_msg[2048];
void mrcnn_test_catch_begin(void);
void mrcnn_test_catch_end(void);
#define EXPECT_FAIL(stmt, needle)                                                  \
    do {                                                                           \
        mrcnn_test_catch_begin();                                                  \
        volatile int failed_ = 0;                                                         \
        if (setjmp(mrcnn_test_jmp) == 0) {                                         \
            stmt;                                                                  \
        } else {                                                                   \
            failed_ = 1;                                                           \
        }                                                                          \
        mrcnn_test_catch_end();                                                    \
        if (!failed_) fail_msg("expected a failure from: %s", #stmt);              \
        if ((needle) && !strstr(mrcnn_test_msg, (needle)))                         \
            fail_msg("failure message '%s' lacks '%s'", mrcnn_test_msg, (const char *)(needle)); \
    } while (0)

/* Uniform in [lo, hi) from a fixed-seed stream. */
void test_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed);
void test_fill_uniform_f64(double *x, int64_t n, double lo, double hi, uint64_t seed);
/* max|a-b| / max|b| (0 when both are 0). */
double test_max_rel_err(const float *a, const float *b, int64_t n);
double test_max_rel_err_f64(const double *a, const double *b, int64_t n);
/* sum (a-b)^2 / sum b^2. */
double test_nmse_f64(const double *a, const double *b, int64_t n);

#endif
