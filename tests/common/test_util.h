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
        const char *needle_ = (needle);                                            \
        if (needle_ && !strstr(mrcnn_test_msg, needle_))                           \
            fail_msg("failure message '%s' lacks '%s'", mrcnn_test_msg, needle_);  \
    } while (0)

/* Uniform in [lo, hi) from a fixed-seed stream. */
void test_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed);
void test_fill_uniform_f64(double *x, int64_t n, double lo, double hi, uint64_t seed);
/* max|a-b| / max|b| (0 when both are 0). */
double test_max_rel_err(const float *a, const float *b, int64_t n);
double test_max_rel_err_f64(const double *a, const double *b, int64_t n);
/* sum (a-b)^2 / sum b^2. */
double test_nmse_f64(const double *a, const double *b, int64_t n);

/* Skipping, the same way in every test (the shell twin is tests/common/skip.sh).
 * CAP names the missing capability: gpu, nccl, torch, coco, tensorboard. Prints
 * "skip [CAP]: reason" and returns 77, which the runner counts as skipped; but when
 * CAP is listed in MRCNN_REQUIRE (comma-separated) the missing capability is a
 * failure: prints "FAIL [CAP] required by MRCNN_REQUIRE: reason" and returns 1.
 * Use as `return test_skip("gpu", "no GPU (%s)", why);`. */
int test_skip(const char *cap, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when this machine has an NVIDIA GPU (a device node or a driver entry), whether or
 * not this build or the runtime can use it. */
int test_gpu_present(void);
/* The CUDA backend could not be created (why): on a machine with a GPU that is a
 * failure (returns 1), not a skip; else test_skip("gpu", ...). */
int test_gpu_skip(const char *why);

/* A scratch folder for one test program, made in its cmocka group setup and removed
 * in its teardown (pass these two as they are). test_tmp_path names a file in it and
 * test_tmp_write writes one; both return a static buffer, valid until the next call. */
int test_tmp_setup(void **state);
int test_tmp_teardown(void **state);
const char *test_tmp_dir(void);
const char *test_tmp_path(const char *name);
const char *test_tmp_write(const char *name, const char *text);

#endif
