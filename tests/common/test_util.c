#include "test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/rng.h"

jmp_buf mrcnn_test_jmp;
char mrcnn_test_msg[2048];

static void catch_handler(const char *message) {
    snprintf(mrcnn_test_msg, sizeof mrcnn_test_msg, "%s", message);
    longjmp(mrcnn_test_jmp, 1);
}

void mrcnn_test_catch_begin(void) {
    mrcnn_test_msg[0] = 0;
    mrcnn_set_fail_handler(catch_handler);
}

void mrcnn_test_catch_end(void) { mrcnn_set_fail_handler(NULL); }

void test_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed) {
    mrcnn_rng r = mrcnn_rng_make(seed, 0, 0, MRCNN_RNG_TEST);
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * mrcnn_rng_uniform(&r, (uint64_t)i);
}

void test_fill_uniform_f64(double *x, int64_t n, double lo, double hi, uint64_t seed) {
    mrcnn_rng r = mrcnn_rng_make(seed, 0, 0, MRCNN_RNG_TEST);
    for (int64_t i = 0; i < n; i++) {
        /* 48 random bits, so double inputs are not all on a float grid. */
        double u = ((double)(mrcnn_rng_u32(&r, 2 * (uint64_t)i) >> 8) +
                    (double)(mrcnn_rng_u32(&r, 2 * (uint64_t)i + 1) >> 8) / 16777216.0) / 16777216.0;
        x[i] = lo + (hi - lo) * u;
    }
}

double test_max_rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return NAN; // a NaN anywhere fails every tolerance
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    if (num == 0) return 0;
    return den > 0 ? num / den : INFINITY;
}

double test_max_rel_err_f64(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(d)) return NAN;
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    if (num == 0) return 0;
    return den > 0 ? num / den : INFINITY;
}

double test_nmse_f64(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}

/* Whole-word match of cap in the comma-separated list. */
static int listed(const char *list, const char *cap) {
    size_t n = strlen(cap);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, cap, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

int test_skip(const char *cap, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int required = listed(getenv("MRCNN_REQUIRE"), cap);
    printf(required ? "FAIL [%s] required by MRCNN_REQUIRE: %s\n" : "skip [%s]: %s\n", cap, why);
    fflush(stdout);
    return required ? 1 : 77;
}

int test_gpu_present(void) {
    if (access("/dev/nvidia0", F_OK) == 0) return 1;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n > 0;
}

int test_gpu_skip(const char *why) {
    if (test_gpu_present()) {
        printf("FAIL [gpu]: this machine has a GPU but the CUDA backend did not start: %s\n", why ? why : "?");
        fflush(stdout);
        return 1;
    }
    return test_skip("gpu", "no GPU (%s)", why ? why : "unknown reason");
}

/* ---- scratch folder ---- */

static char g_tmp_dir[256];

int test_tmp_setup(void **state) {
    (void)state;
    snprintf(g_tmp_dir, sizeof g_tmp_dir, "/tmp/mrcnn_test_XXXXXX");
    return mkdtemp(g_tmp_dir) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int test_tmp_teardown(void **state) {
    (void)state;
    return g_tmp_dir[0] ? nftw(g_tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) : 0;
}

const char *test_tmp_dir(void) { return g_tmp_dir; }

const char *test_tmp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp_dir, name);
    return path;
}

const char *test_tmp_write(const char *name, const char *text) {
    const char *path = test_tmp_path(name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}
