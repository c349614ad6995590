/* ROIAlign with non-finite and absurd boxes (defence in depth behind the
 * data checks): a roi with a NaN or +-Inf coordinate, one whose size overflows, or
 * one whose adaptive sampling grid would be astronomically large or negative is an
 * empty roi: zero output, no gradient, nothing read or written outside the features.
 * Before the fix a NaN sample position was cast to int (undefined behaviour; in
 * practice an index near INT_MIN and a SIGSEGV, or an ASan report in the sanitizer
 * build). Checked for the float and double ops and the CPU backend entry, with fixed
 * and adaptive sampling, aligned and not: the finite rows give exactly what they give
 * without the bad rows beside them, forward and backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/roi_align.h"
#include "mrcnn/tensor.h"
#include "test_util.h"

#define N_IMG 2
#define CH 5
#define N_LVL 4
#define N_GOOD 4

static const int lh[N_LVL] = {24, 12, 6, 3}, lw[N_LVL] = {32, 16, 8, 4};

static const double good[N_GOOD][5] = {
    {0, 10, 12, 40, 30},
    {1, 5, 5, 180, 160},
    {0, -30, -20, 300, 250},
    {1, 90, 70, 127.5, 95.5},
};

/* Bad rows: every coordinate position NaN / +Inf / -Inf, and finite boxes whose
 * size or sampling grid cannot be represented. */
static int bad_rows(double (*rows)[5], int cap) {
    int n = 0;
    const double v[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++)
        for (int c = 1; c <= 4; c++) {
            double r[5] = {(double)(n % N_IMG), 20, 20, 60, 50};
            r[c] = v[k];
            memcpy(rows[n++], r, sizeof r);
        }
    const double finite[][5] = {
        {0, NAN, NAN, NAN, NAN},
        {1, -3e38, -3e38, 3e38, 3e38}, // width overflows float
        {0, -1e30, -1e30, 1e30, 1e30}, // adaptive grid ~1e29 samples per bin
        {1, 0, 0, 1e9, 1e9},
        {0, 60, 50, 20, 20},           // inverted (negative grid when aligned)
        {1, 0, 0, 1e-30, 1e-30},
    };
    for (size_t i = 0; i < sizeof finite / sizeof finite[0]; i++) memcpy(rows[n++], finite[i], sizeof finite[i]);
    assert_true(n <= cap);
    return n;
}

/* Rows whose output must be exactly zero (all the non-finite ones, and the finite
 * ones whose grid cannot be built). The inverted box and the tiny one are finite
 * and well defined (torchvision gives them values), so they are not listed. */
static int must_be_zero(const double *r, int sampling) {
    for (int c = 1; c <= 4; c++)
        if (!isfinite(r[c])) return 1;
    if (fabs(r[1]) > 1e29) return 1; // the overflowing and the astronomically sampled ones
    if (sampling <= 0 && r[3] >= 1e9) return 1;
    return 0;
}

static void run_f64(int out, int sampling, int aligned) {
    int hh[N_LVL], ww[N_LVL];
    for (int l = 0; l < N_LVL; l++) hh[l] = lh[l], ww[l] = lw[l];
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(N_IMG, CH, N_LVL, 2, hh, ww, out, sampling, aligned);
    double bad[32][5];
    int nb = bad_rows(bad, 32);
    /* All rows: good ones interleaved with the bad ones. */
    int nr = N_GOOD + nb;
    double *rois = calloc((size_t)nr * 5, sizeof(double));
    int *is_good = calloc((size_t)nr, sizeof(int)), *src = calloc((size_t)nr, sizeof(int));
    int gi = 0, bi = 0;
    for (int i = 0; i < nr; i++) {
        int take_good = gi < N_GOOD && (i % 3 == 0 || bi >= nb);
        memcpy(rois + 5 * i, take_good ? good[gi] : bad[bi], 5 * sizeof(double));
        is_good[i] = take_good;
        src[i] = take_good ? gi++ : bi++;
    }
    double *good_rois = calloc(N_GOOD * 5, sizeof(double));
    memcpy(good_rois, good, sizeof good);
    const int64_t per = (int64_t)out * out * CH;
    double *x[N_LVL], *g_all[N_LVL], *g_good[N_LVL];
    int64_t n[N_LVL];
    for (int l = 0; l < N_LVL; l++) {
        n[l] = (int64_t)N_IMG * lh[l] * lw[l] * CH;
        x[l] = calloc((size_t)n[l], sizeof(double));
        g_all[l] = calloc((size_t)n[l], sizeof(double));
        g_good[l] = calloc((size_t)n[l], sizeof(double));
        test_fill_uniform_f64(x[l], n[l], -1, 1, 300 + l);
        test_fill_uniform_f64(g_all[l], n[l], -1, 1, 400 + l);
        memcpy(g_good[l], g_all[l], sizeof(double) * (size_t)n[l]);
    }
    const double *f[N_LVL] = {x[0], x[1], x[2], x[3]};
    double *y = malloc(sizeof(double) * (size_t)(nr * per)), *yg = malloc(sizeof(double) * (size_t)(N_GOOD * per));
    for (int64_t i = 0; i < nr * per; i++) y[i] = 12345; // must be overwritten
    mrcnn_roi_align_forward_f64(&d, f, nr, rois, y);
    mrcnn_roi_align_forward_f64(&d, f, N_GOOD, good_rois, yg);
    for (int i = 0; i < nr; i++) {
        const double *yi = y + i * per;
        for (int64_t k = 0; k < per; k++) assert_true(isfinite(yi[k]));
        if (is_good[i]) {
            assert_memory_equal(yi, yg + src[i] * per, sizeof(double) * (size_t)per);
        } else if (must_be_zero(rois + 5 * i, sampling)) {
            for (int64_t k = 0; k < per; k++)
                if (yi[k] != 0) fail_msg("row %d (%g %g %g %g): output %g, want 0", i, rois[5 * i + 1], rois[5 * i + 2],
                                         rois[5 * i + 3], rois[5 * i + 4], yi[k]);
        }
    }
    /* Backward: dy on every row; the bad rows that are empty add nothing. */
    double *dy = malloc(sizeof(double) * (size_t)(nr * per)), *dyg = malloc(sizeof(double) * (size_t)(N_GOOD * per));
    test_fill_uniform_f64(dy, nr * per, -1, 1, 77);
    for (int i = 0; i < nr; i++)
        if (is_good[i]) memcpy(dyg + src[i] * per, dy + i * per, sizeof(double) * (size_t)per);
    /* Only empty bad rows keep the comparison exact: the others are finite boxes with a
     * well-defined (non-zero) gradient, so compare on a roi set without them. */
    int nk = 0;
    double *keep = calloc((size_t)nr * 5, sizeof(double)), *dyk = calloc((size_t)(nr * per), sizeof(double));
    for (int i = 0; i < nr; i++) {
        if (!is_good[i] && !must_be_zero(rois + 5 * i, sampling)) continue;
        memcpy(keep + 5 * nk, rois + 5 * i, 5 * sizeof(double));
        memcpy(dyk + nk * per, dy + i * per, sizeof(double) * (size_t)per);
        nk++;
    }
    mrcnn_roi_align_backward_f64(&d, nk, keep, dyk, g_all);
    mrcnn_roi_align_backward_f64(&d, N_GOOD, good_rois, dyg, g_good);
    for (int l = 0; l < N_LVL; l++) {
        for (int64_t k = 0; k < n[l]; k++) assert_true(isfinite(g_all[l][k]));
        assert_memory_equal(g_all[l], g_good[l], sizeof(double) * (size_t)n[l]);
    }
    /* And the full set (with the finite odd boxes) stays finite. */
    mrcnn_roi_align_backward_f64(&d, nr, rois, dy, g_all);
    for (int l = 0; l < N_LVL; l++)
        for (int64_t k = 0; k < n[l]; k++) assert_true(isfinite(g_all[l][k]));
    for (int l = 0; l < N_LVL; l++) {
        free(x[l]);
        free(g_all[l]);
        free(g_good[l]);
    }
    free(rois);
    free(is_good);
    free(src);
    free(good_rois);
    free(y);
    free(yg);
    free(dy);
    free(dyg);
    free(keep);
    free(dyk);
}

static void test_f64_fixed_sampling(void **state) {
    run_f64(7, 2, 0);
    run_f64(14, 2, 1);
}

static void test_f64_adaptive_sampling(void **state) {
    run_f64(7, 0, 0);
    run_f64(7, 0, 1);
}

/* The float op through the CPU backend (what the model calls), with the rois as the
 * model passes them: an fp32 (R, 5) tensor. */
static void run_backend(int sampling, int aligned) {
    mrcnn_backend *be = mrcnn_backend_cpu_create();
    int hh[N_LVL], ww[N_LVL];
    for (int l = 0; l < N_LVL; l++) hh[l] = lh[l], ww[l] = lw[l];
    const int out = 7;
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(N_IMG, CH, N_LVL, 2, hh, ww, out, sampling, aligned);
    double bad[32][5];
    int nb = bad_rows(bad, 32);
    const int nr = nb + 1;
    float *rois = calloc((size_t)nr * 5, sizeof(float));
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < 5; c++) rois[5 * i + c] = (float)bad[i][c];
    for (int c = 0; c < 5; c++) rois[5 * nb + c] = (float)good[1][c];
    mrcnn_tensor feats[N_LVL], dfeats[N_LVL];
    float *fx[N_LVL], *fg[N_LVL];
    for (int l = 0; l < N_LVL; l++) {
        int64_t nl = (int64_t)N_IMG * lh[l] * lw[l] * CH;
        fx[l] = calloc((size_t)nl, sizeof(float));
        fg[l] = calloc((size_t)nl, sizeof(float));
        test_fill_uniform(fx[l], nl, -1, 1, 500 + l);
        feats[l] = mrcnn_tensor_view(fx[l], MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){N_IMG, lh[l], lw[l], CH});
        dfeats[l] = mrcnn_tensor_view(fg[l], MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){N_IMG, lh[l], lw[l], CH});
    }
    const int64_t per = (int64_t)out * out * CH;
    float *y = malloc(sizeof(float) * (size_t)(nr * per)), *dy = malloc(sizeof(float) * (size_t)(nr * per));
    test_fill_uniform(dy, nr * per, -1, 1, 99);
    mrcnn_tensor tr = mrcnn_tensor_view(rois, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 2, (int64_t[]){nr, 5});
    mrcnn_tensor ty = mrcnn_tensor_view(y, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){nr, out, out, CH});
    mrcnn_tensor tdy = mrcnn_tensor_view(dy, MRCNN_DTYPE_F32, MRCNN_DEVICE_CPU, 4, (int64_t[]){nr, out, out, CH});
    be->nn.roi_align_forward(be, &d, feats, &tr, &ty);
    be->nn.roi_align_backward(be, &d, &tr, &tdy, dfeats);
    for (int i = 0; i < nr; i++) {
        double r[5];
        for (int c = 0; c < 5; c++) r[c] = rois[5 * i + c];
        for (int64_t k = 0; k < per; k++) {
            assert_true(isfinite(y[i * per + k]));
            if (i < nb && must_be_zero(r, sampling) && y[i * per + k] != 0)
                fail_msg("backend row %d: output %g, want 0", i, (double)y[i * per + k]);
        }
    }
    double s = 0;
    for (int64_t k = 0; k < per; k++) s += fabs(y[nb * per + k]);
    assert_true(s > 0); // the good row beside them is computed
    for (int l = 0; l < N_LVL; l++) {
        int64_t nl = (int64_t)N_IMG * lh[l] * lw[l] * CH;
        for (int64_t k = 0; k < nl; k++) assert_true(isfinite(fg[l][k]));
        free(fx[l]);
        free(fg[l]);
    }
    free(rois);
    free(y);
    free(dy);
    mrcnn_backend_destroy(be);
}

static void test_backend_float(void **state) {
    run_backend(2, 0);
    run_backend(0, 0);
    run_backend(0, 1);
}

/* The image index is not a box coordinate: a NaN or out-of-range one stays an error
 * (the existing check), it is never silently dropped. */
static void test_bad_image_index_still_fails(void **state) {
    int hh[1] = {8}, ww[1] = {8};
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(1, 1, 1, 0, hh, ww, 2, 2, 0);
    double x[64] = {0}, y[4];
    const double *f[1] = {x};
    double r1[5] = {NAN, 0, 0, 4, 4}, r2[5] = {1, 0, 0, 4, 4};
    EXPECT_FAIL(mrcnn_roi_align_forward_f64(&d, f, 1, r1, y), "image index");
    EXPECT_FAIL(mrcnn_roi_align_forward_f64(&d, f, 1, r2, y), "image index");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f64_fixed_sampling),
        cmocka_unit_test(test_f64_adaptive_sampling),
        cmocka_unit_test(test_backend_float),
        cmocka_unit_test(test_bad_image_index_still_fails),
    };
    return cmocka_run_group_tests_name("roi_align_nonfinite", tests, NULL, NULL);
}
