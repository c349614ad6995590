/* ROIAlign backward against central finite differences in double (the _f64 build of
 * src/ops/roi_align.c), over 4 levels and 2 images with rois landing on every level,
 * near borders, outside the image and as padding rows. The objective is
 * L = sum(gy * y); gradient buffers start with noise, so the check is on the increment
 * and also tests the accumulate (+=) contract. The float build must agree with the
 * double one on the same inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/box_math.h"
#include "mrcnn/roi_align.h"
#include "test_util.h"

#define N_IMG 2
#define CH 3
#define N_LVL 4
#define N_ROI 9

static const int lh[N_LVL] = {24, 12, 6, 3}, lw[N_LVL] = {32, 16, 8, 4};

/* Image size 96x128 at scale 1/4; boxes sized for levels 2..5 (canonical 224 at 4). */
static const double rois_in[N_ROI][5] = {
    {0, 10, 12, 40, 30},     // small: level 2
    {1, 5, 5, 180, 160},     // ~165 px: level 3
    {0, -30, -20, 300, 250}, // beyond the image on every side: level 4
    {1, 0, 0, 700, 720},     // huge: clamped to level 5
    {0, 60.3, 40.7, 61, 41}, // sub-pixel: the roi size clamps at one feature pixel
    {-1, 0, 0, 50, 50},      // padding row
    {1, 90, 70, 127.5, 95.5},// at the bottom-right border
    {0, 20, 30, 200, 60},    // wide
    {1, 33, 3, 45, 93},      // tall
};

typedef struct {
    mrcnn_roi_align_desc d;
    double *x[N_LVL];
    double rois[N_ROI * 5];
    double *gy, *y;
    int64_t ny;
} ctx_t;

static double objective(ctx_t *c) {
    const double *f[N_LVL] = {c->x[0], c->x[1], c->x[2], c->x[3]};
    mrcnn_roi_align_forward_f64(&c->d, f, N_ROI, c->rois, c->y);
    double s = 0;
    for (int64_t i = 0; i < c->ny; i++) s += c->gy[i] * c->y[i];
    return s;
}

static void run_case(int out, int sampling, int aligned) {
    ctx_t c;
    int hh[N_LVL], ww[N_LVL];
    for (int l = 0; l < N_LVL; l++) hh[l] = lh[l], ww[l] = lw[l];
    c.d = mrcnn_roi_align_desc_make(N_IMG, CH, N_LVL, 2, hh, ww, out, sampling, aligned);
    memcpy(c.rois, rois_in, sizeof c.rois);
    c.ny = (int64_t)N_ROI * out * out * CH;
    const size_t ny = (size_t)N_ROI * (size_t)(out * out * CH);
    c.gy = calloc(ny, sizeof(double));
    c.y = calloc(ny, sizeof(double));
    test_fill_uniform_f64(c.gy, c.ny, -1, 1, 11);
    double *g[N_LVL], *g0[N_LVL];
    int64_t n[N_LVL];
    int levels_hit[N_LVL] = {0};
    for (int i = 0; i < N_ROI; i++) {
        if (rois_in[i][0] < 0) continue;
        float b[4] = {(float)rois_in[i][1], (float)rois_in[i][2], (float)rois_in[i][3], (float)rois_in[i][4]};
        levels_hit[mrcnn_roi_level(b[0], b[1], b[2], b[3], c.d.canonical_level, c.d.canonical_scale, c.d.first_level,
                                   c.d.n_levels)] = 1;
    }
    for (int l = 0; l < N_LVL; l++) {
        assert_true(levels_hit[l]); // every level is exercised
        n[l] = (int64_t)N_IMG * lh[l] * lw[l] * CH;
        c.x[l] = calloc((size_t)n[l], sizeof(double));
        g[l] = calloc((size_t)n[l], sizeof(double));
        g0[l] = calloc((size_t)n[l], sizeof(double));
        test_fill_uniform_f64(c.x[l], n[l], -1, 1, 100 + l);
        test_fill_uniform_f64(g[l], n[l], -1, 1, 200 + l);
        memcpy(g0[l], g[l], sizeof(double) * (size_t)n[l]);
    }
    objective(&c);
    /* The padding row's output is zero. */
    for (int64_t k = 0; k < (int64_t)out * out * CH; k++) assert_true(c.y[5 * out * out * CH + k] == 0.0);
    mrcnn_roi_align_backward_f64(&c.d, N_ROI, c.rois, c.gy, g);
    double worst = 0;
    for (int l = 0; l < N_LVL; l++) {
        double *inc = calloc((size_t)n[l], sizeof(double)), *fd = calloc((size_t)n[l], sizeof(double));
        for (int64_t i = 0; i < n[l]; i++) inc[i] = g[l][i] - g0[l][i];
        /* Finite differences on every element of the small levels and a spread-out
         * third of level 2 (the op is linear in the features, so a sample suffices). */
        const double h = 1e-3;
        const int64_t step = n[l] > 2000 ? 3 : 1;
        for (int64_t i = 0; i < n[l]; i++) {
            if (i % step) {
                fd[i] = inc[i];
                continue;
            }
            double keep = c.x[l][i];
            c.x[l][i] = keep + h;
            double lp = objective(&c);
            c.x[l][i] = keep - h;
            double lm = objective(&c);
            c.x[l][i] = keep;
            fd[i] = (lp - lm) / (2 * h);
        }
        double e = test_max_rel_err_f64(inc, fd, n[l]);
        double mx = 0;
        for (int64_t i = 0; i < n[l]; i++) mx = fmax(mx, fabs(fd[i]));
        printf("roi_align out=%d sampling=%d aligned=%d level %d: max rel err %.2e (max |grad| %.3f)\n", out,
               sampling, aligned, l + 2, e, mx);
        assert_true(mx > 0.01); // the level receives gradient
        worst = fmax(worst, e);
        free(inc);
        free(fd);
    }
    assert_true(worst < 1e-8);

    /* The float build on the same inputs. */
    float *xf[N_LVL], rf[N_ROI * 5], *yf = calloc(ny, sizeof(float));
    for (int l = 0; l < N_LVL; l++) {
        xf[l] = malloc(sizeof(float) * (size_t)n[l]);
        for (int64_t i = 0; i < n[l]; i++) xf[l][i] = (float)c.x[l][i];
    }
    for (int i = 0; i < N_ROI * 5; i++) rf[i] = (float)c.rois[i];
    const float *cf[N_LVL] = {xf[0], xf[1], xf[2], xf[3]};
    mrcnn_roi_align_forward(&c.d, cf, N_ROI, rf, yf);
    objective(&c);
    double *yd = calloc(ny, sizeof(double));
    for (int64_t i = 0; i < c.ny; i++) yd[i] = yf[i];
    double ef = test_max_rel_err_f64(yd, c.y, c.ny);
    printf("  float vs double forward: %.2e\n", ef);
    assert_true(ef < 1e-5);
    for (int l = 0; l < N_LVL; l++) free(c.x[l]), free(g[l]), free(g0[l]), free(xf[l]);
    free(c.gy), free(c.y), free(yf), free(yd);
}

static void test_grad_roi_align_box(void **state) { run_case(7, 2, 0); }
static void test_grad_roi_align_mask(void **state) { run_case(14, 2, 0); }
static void test_grad_roi_align_aligned_adaptive(void **state) { run_case(5, 0, 1); }

static void test_roi_align_errors(void **state) {
    int hh[1] = {4}, ww[1] = {4};
    EXPECT_FAIL(mrcnn_roi_align_desc_make(1, 1, 0, 2, hh, ww, 7, 2, 0), "0 levels");
    EXPECT_FAIL(mrcnn_roi_align_desc_make(1, 1, 1, 2, hh, ww, 0, 2, 0), "output 0x0");
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(1, 1, 1, 2, hh, ww, 2, 2, 0);
    float x[16] = {0}, y[4], rois[5] = {3, 0, 0, 4, 4};
    const float *f[1] = {x};
    EXPECT_FAIL(mrcnn_roi_align_forward(&d, f, 1, rois, y), "image index 3 outside [0, 1)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_roi_align_box),
        cmocka_unit_test(test_grad_roi_align_mask),
        cmocka_unit_test(test_grad_roi_align_aligned_adaptive),
        cmocka_unit_test(test_roi_align_errors),
    };
    return cmocka_run_group_tests_name("grad_roi_align", tests, NULL, NULL);
}
