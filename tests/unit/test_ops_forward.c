/* CPU ops, forward: each float op against a naive direct loop in double written
 * here, the float ops against their double twins, and argument errors. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/ops.h"
#include "test_util.h"

#define TOL_F32 2e-5 // float op vs double reference, max|a-b|/max|b|

static float *falloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static double *dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static float *frand(int64_t n, float lo, float hi, uint64_t seed) {
    float *x = falloc(n);
    test_fill_uniform(x, n, lo, hi, seed);
    return x;
}
static double *to_f64(const float *x, int64_t n) {
    double *y = dalloc(n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}
static double rel_f_d(const float *a, const double *b, int64_t n) {
    double *a64 = to_f64(a, n);
    double e = test_max_rel_err_f64(a64, b, n);
    free(a64);
    return e;
}
static void expect_close(const char *what, double err, double tol) {
    printf("  %-48s max|a-b|/max|b| = %.3g\n", what, err);
    if (!(err <= tol)) fail_msg("%s: error %.3g above %.3g", what, err, tol);
}

/* ---- naive references (double) ---- */

static void naive_conv(const mrcnn_conv2d_desc *d, const double *x, const double *w, const double *b, double *y) {
    int P = mrcnn_conv2d_out_h(d), Q = mrcnn_conv2d_out_w(d);
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int k = 0; k < d->k; k++) {
                    double acc = b ? b[k] : 0;
                    for (int r = 0; r < d->r; r++)
                        for (int s = 0; s < d->s; s++) {
                            int h = p * d->stride_h - d->pad_h + r * d->dil_h;
                            int ww = q * d->stride_w - d->pad_w + s * d->dil_w;
                            if (h < 0 || h >= d->h || ww < 0 || ww >= d->w) continue;
                            for (int c = 0; c < d->c; c++)
                                acc += x[((n * d->h + h) * d->w + ww) * d->c + c] *
                                       w[((k * d->r + r) * d->s + s) * d->c + c];
                        }
                    y[((n * P + p) * Q + q) * d->k + k] = acc;
                }
}

static void check_conv_case(const char *name, mrcnn_conv2d_desc d, int with_bias, uint64_t seed) {
    int P = mrcnn_conv2d_out_h(&d), Q = mrcnn_conv2d_out_w(&d);
    int64_t nx = (int64_t)d.n * d.h * d.w * d.c, nw = (int64_t)d.k * d.r * d.s * d.c, ny = (int64_t)d.n * P * Q * d.k;
    float *x = frand(nx, -1, 1, seed), *w = frand(nw, -1, 1, seed + 1), *b = frand(d.k, -1, 1, seed + 2);
    float *y = falloc(ny);
    double *x64 = to_f64(x, nx), *w64 = to_f64(w, nw), *b64 = to_f64(b, d.k), *ref = dalloc(ny), *y64 = dalloc(ny);
    for (int64_t i = 0; i < ny; i++) y[i] = NAN; // the forward overwrites every output
    naive_conv(&d, x64, w64, with_bias ? b64 : NULL, ref);
    mrcnn_conv2d_forward(&d, x, w, with_bias ? b : NULL, y);
    mrcnn_conv2d_forward_f64(&d, x64, w64, with_bias ? b64 : NULL, y64);
    char what[96];
    snprintf(what, sizeof what, "conv2d %s: f32 vs naive", name);
    expect_close(what, rel_f_d(y, ref, ny), TOL_F32);
    snprintf(what, sizeof what, "conv2d %s: f64 vs naive", name);
    expect_close(what, test_max_rel_err_f64(y64, ref, ny), 1e-12);
    free(x), free(w), free(b), free(y), free(x64), free(w64), free(b64), free(ref), free(y64);
}

static void test_conv2d_forward(void **state) {
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1);
    check_conv_case("3x3 s2 p1", d, 1, 10);
    d = (mrcnn_conv2d_desc){2, 9, 8, 5, 3, 3, 3, 1, 1, 2, 2, 2, 2};
    check_conv_case("3x3 s1 p2 dil2", d, 0, 20);
    d = (mrcnn_conv2d_desc){1, 11, 10, 4, 6, 3, 2, 2, 1, 1, 0, 1, 3};
    check_conv_case("3x2 asymmetric stride/pad/dil", d, 1, 30);
    d = mrcnn_conv2d_desc_make(2, 5, 7, 6, 5, 1, 1, 0);
    check_conv_case("1x1 pointwise", d, 1, 40);
    d = mrcnn_conv2d_desc_make(2, 7, 9, 6, 5, 1, 2, 0);
    check_conv_case("1x1 s2", d, 1, 50);
    d = mrcnn_conv2d_desc_make(1, 15, 13, 3, 4, 7, 2, 3);
    check_conv_case("7x7 s2 p3 stem", d, 0, 60);
    /* Several column blocks: in sequence on one thread (blocks crossing images),
     * one block per thread at a time on three. */
    int keep = omp_get_max_threads();
    for (int t = 1; t <= 3; t += 2) {
        omp_set_num_threads(t);
        d = mrcnn_conv2d_desc_make(3, 31, 29, 64, 8, 3, 1, 1);
        check_conv_case(t == 1 ? "3x3 multi-block, 1 thread" : "3x3 multi-block, 3 threads", d, 1, 70);
        d = (mrcnn_conv2d_desc){3, 61, 45, 96, 5, 3, 3, 2, 2, 2, 2, 2, 2};
        check_conv_case(t == 1 ? "3x3 s2 d2 multi-block, 1 thread" : "3x3 s2 d2 multi-block, 3 threads", d, 1, 80);
    }
    omp_set_num_threads(keep);
}

static void check_gemm(int m, int n, int k) {
    const int pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            float *a = frand((ta ? k : m) * lda, -1, 1, 100 + ta), *b = frand((tb ? n : k) * ldb, -1, 1, 200 + tb);
            float *c = frand(m * ldc, -1, 1, 300);
            double *ref = dalloc(m * ldc);
            for (int i = 0; i < m * ldc; i++) ref[i] = c[i];
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double acc = 0;
                    for (int l = 0; l < k; l++)
                        acc += (double)(ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
                    ref[i * ldc + j] = 0.5 * acc - 2.0 * c[i * ldc + j];
                }
            mrcnn_gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, -2.0f, c, ldc);
            char what[64];
            snprintf(what, sizeof what, "gemm %dx%dx%d trans_a=%d trans_b=%d, padded ld", m, n, k, ta, tb);
            expect_close(what, rel_f_d(c, ref, m * ldc), TOL_F32);
            free(a), free(b), free(c), free(ref);
        }
}

/* Small (one call), and large enough to be split across threads by rows (m >= n)
 * or by columns (m < n), including slabs that end off the 16-row tile grid. */
static void test_gemm(void **state) {
    int keep = omp_get_max_threads();
    omp_set_num_threads(3);
    check_gemm(7, 5, 9);
    check_gemm(301, 37, 203);
    check_gemm(37, 301, 203);
    omp_set_num_threads(keep);
}

static void test_deconv2x2_forward(void **state) {
    const int n = 2, h = 3, w = 5, c = 7, k = 4;
    int64_t nx = n * h * w * c, nw = k * 4 * c, ny = n * 4 * h * w * k;
    float *x = frand(nx, -1, 1, 1), *wt = frand(nw, -1, 1, 2), *b = frand(k, -1, 1, 3), *y = falloc(ny);
    double *ref = dalloc(ny), *x64 = to_f64(x, nx), *w64 = to_f64(wt, nw), *b64 = to_f64(b, k), *y64 = dalloc(ny);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        for (int ni = 0; ni < n; ni++)
            for (int i = 0; i < h; i++)
                for (int j = 0; j < w; j++)
                    for (int r = 0; r < 2; r++)
                        for (int s = 0; s < 2; s++)
                            for (int o = 0; o < k; o++) {
                                double acc = with_bias ? b[o] : 0;
                                for (int ci = 0; ci < c; ci++)
                                    acc += (double)x[((ni * h + i) * w + j) * c + ci] * wt[((o * 2 + r) * 2 + s) * c + ci];
                                ref[((ni * 2 * h + 2 * i + r) * 2 * w + 2 * j + s) * k + o] = acc;
                            }
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        mrcnn_deconv2x2_forward(n, h, w, c, k, x, wt, with_bias ? b : NULL, y);
        mrcnn_deconv2x2_forward_f64(n, h, w, c, k, x64, w64, with_bias ? b64 : NULL, y64);
        expect_close(with_bias ? "deconv2x2 f32 vs naive (bias)" : "deconv2x2 f32 vs naive", rel_f_d(y, ref, ny), TOL_F32);
        expect_close("deconv2x2 f64 vs naive", test_max_rel_err_f64(y64, ref, ny), 1e-12);
    }
    free(x), free(wt), free(b), free(y), free(ref), free(x64), free(w64), free(b64), free(y64);
}

static void test_elementwise_forward(void **state) {
    const int64_t m = 3 * 5 * 7;
    const int c = 6;
    float *x = frand(m * c, -2, 2, 1), *y = falloc(m * c);
    mrcnn_relu_forward(m * c, x, y);
    for (int64_t i = 0; i < m * c; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    memcpy(y, x, sizeof(float) * m * c);
    mrcnn_relu_forward(m * c, y, y); // in place
    for (int64_t i = 0; i < m * c; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    float nan_in = NAN, nan_out = 0;
    mrcnn_relu_forward(1, &nan_in, &nan_out);
    assert_true(isnan(nan_out)); // a NaN must reach the loss scaler's check

    float *b = frand(m * c, -2, 2, 4);
    mrcnn_add_forward(m * c, x, b, y);
    for (int64_t i = 0; i < m * c; i++) assert_true(y[i] == x[i] + b[i]);
    free(x), free(y), free(b);
}

static void check_maxpool(mrcnn_pool2d_desc d, uint64_t seed) {
    int P = mrcnn_pool2d_out_h(&d), Q = mrcnn_pool2d_out_w(&d);
    int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * P * Q * d.c;
    /* Values on a coarse grid so that windows have ties. */
    float *x = frand(nx, 0, 4, seed), *y = falloc(ny), *dy = frand(ny, -1, 1, seed + 1);
    for (int64_t i = 0; i < nx; i++) x[i] = floorf(x[i]) - 2;
    float *dx = frand(nx, -1, 1, seed + 2), *dx_ref = falloc(nx);
    memcpy(dx_ref, dx, sizeof(float) * nx);
    mrcnn_maxpool2d_forward(&d, x, y);
    mrcnn_maxpool2d_backward(&d, x, dy, dx);
    for (int n = 0; n < d.n; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int c = 0; c < d.c; c++) {
                    float best = -INFINITY;
                    int64_t arg = -1;
                    for (int r = 0; r < d.kernel; r++)
                        for (int s = 0; s < d.kernel; s++) {
                            int h = p * d.stride - d.pad + r, w = q * d.stride - d.pad + s;
                            if (h < 0 || h >= d.h || w < 0 || w >= d.w) continue;
                            int64_t at = ((int64_t)(n * d.h + h) * d.w + w) * d.c + c;
                            if (arg < 0 || x[at] > best) best = x[at], arg = at;
                        }
                    int64_t o = ((int64_t)(n * P + p) * Q + q) * d.c + c;
                    assert_true(y[o] == best);
                    dx_ref[arg] += dy[o]; // the first maximum in scan order gets it
                }
    double e = test_max_rel_err(dx, dx_ref, nx);
    char what[96];
    snprintf(what, sizeof what, "maxpool %dx%d s%d p%d backward, ties to first max", d.kernel, d.kernel, d.stride, d.pad);
    expect_close(what, e, 1e-6);
    free(x), free(y), free(dy), free(dx), free(dx_ref);
}

static void test_maxpool(void **state) {
    check_maxpool((mrcnn_pool2d_desc){2, 9, 7, 5, 3, 2, 1}, 10);
    check_maxpool((mrcnn_pool2d_desc){2, 7, 6, 33, 3, 2, 1}, 20); // channel chunks of 16 plus a rest
    check_maxpool((mrcnn_pool2d_desc){1, 7, 9, 4, 1, 2, 0}, 30);  // FPN P6
    check_maxpool((mrcnn_pool2d_desc){1, 5, 5, 3, 2, 2, 0}, 40);
}

static void check_upsample(int n, int h, int w, int H, int W, int c, uint64_t seed) {
    int64_t nt = (int64_t)n * h * w * c, ny = (int64_t)n * H * W * c;
    float *top = frand(nt, -1, 1, seed), *lat = frand(ny, -1, 1, seed + 1), *y = falloc(ny);
    mrcnn_upsample_add_forward(n, h, w, H, W, c, top, lat, y);
    for (int ni = 0; ni < n; ni++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                for (int k = 0; k < c; k++) {
                    /* torch nearest: src = floor(dst * in / out) */
                    int si = (int)floor((double)i * h / H), sj = (int)floor((double)j * w / W);
                    int64_t o = ((int64_t)(ni * H + i) * W + j) * c + k;
                    assert_true(y[o] == lat[o] + top[((int64_t)(ni * h + si) * w + sj) * c + k]);
                }
    free(top), free(lat), free(y);
}

static void test_upsample_add(void **state) {
    check_upsample(2, 3, 4, 6, 8, 5, 1);
    check_upsample(1, 4, 3, 7, 5, 3, 2); // odd FPN sizes: not an exact x2
}

static void test_linear_forward(void **state) {
    const int n = 5, in = 13, out = 7;
    float *x = frand(n * in, -1, 1, 1), *w = frand(out * in, -1, 1, 2), *b = frand(out, -1, 1, 3), *y = falloc(n * out);
    double *ref = dalloc(n * out), *y64 = dalloc(n * out);
    double *x64 = to_f64(x, n * in), *w64 = to_f64(w, out * in), *b64 = to_f64(b, out);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++) {
                double acc = with_bias ? b[o] : 0;
                for (int j = 0; j < in; j++) acc += (double)x[i * in + j] * w[o * in + j];
                ref[i * out + o] = acc;
            }
        mrcnn_linear_forward(n, in, out, x, w, with_bias ? b : NULL, y);
        mrcnn_linear_forward_f64(n, in, out, x64, w64, with_bias ? b64 : NULL, y64);
        expect_close("linear f32 vs naive", rel_f_d(y, ref, n * out), TOL_F32);
        expect_close("linear f64 vs naive", test_max_rel_err_f64(y64, ref, n * out), 1e-12);
    }
    free(x), free(w), free(b), free(y), free(ref), free(y64), free(x64), free(w64), free(b64);
}

static void test_losses_forward(void **state) {
    const int64_t n = 37;
    float *x = frand(n, -6, 6, 1), *t = frand(n, 0, 1, 2), *wt = frand(n, 0, 2, 3);
    double *x64 = to_f64(x, n), *t64 = to_f64(t, n), *w64 = to_f64(wt, n);
    for (int use_w = 0; use_w < 2; use_w++) {
        double ref = 0;
        for (int64_t i = 0; i < n; i++) {
            double p = 1 / (1 + exp(-(double)x[i]));
            double l = -(t[i] * log(p) + (1 - t[i]) * log(1 - p)); // the textbook form
            ref += (use_w ? wt[i] : 1) * l;
        }
        ref /= 3.5;
        double got = mrcnn_bce_logits_forward(n, x, t, use_w ? wt : NULL, 3.5f);
        double got64 = mrcnn_bce_logits_forward_f64(n, x64, t64, use_w ? w64 : NULL, 3.5);
        expect_close("bce_logits forward f32", fabs(got - ref) / fabs(ref), 1e-6);
        expect_close("bce_logits forward f64", fabs(got64 - ref) / fabs(ref), 1e-12);
    }
    /* Far in the tails the stable form must not overflow. */
    float big[2] = {200.0f, -200.0f}, tb[2] = {0.0f, 1.0f};
    expect_close("bce_logits tails", fabs(mrcnn_bce_logits_forward(2, big, tb, NULL, 1) - 400.0) / 400.0, 1e-6);

    for (int bi = 0; bi < 2; bi++) {
        double beta = bi ? 1.0 / 9 : 0;
        for (int use_w = 0; use_w < 2; use_w++) {
            /* Scaled down so that |x - t| spans both sides of beta = 1/9. */
            float *xs = falloc(n), *ts = falloc(n);
            double *xs64 = dalloc(n), *ts64 = dalloc(n);
            for (int64_t i = 0; i < n; i++) {
                xs[i] = x[i] / 20, ts[i] = t[i] / 20;
                xs64[i] = (double)x[i] / 20, ts64[i] = (double)t[i] / 20;
            }
            double ref = 0;
            int below = 0;
            for (int64_t i = 0; i < n; i++) {
                double d = fabs((double)xs[i] - ts[i]);
                below += d < beta;
                double l = d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
                ref += (use_w ? wt[i] : 1) * l;
            }
            ref /= 2.0;
            if (bi) assert_true(below > 0 && below < n);
            double got = mrcnn_smooth_l1_forward(n, xs, ts, use_w ? wt : NULL, (float)beta, 2.0f);
            double ref64 = 0;
            for (int64_t i = 0; i < n; i++) {
                double d = fabs(xs64[i] - ts64[i]);
                double l = d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
                ref64 += (use_w ? w64[i] : 1) * l;
            }
            ref64 /= 2.0;
            double got64 = mrcnn_smooth_l1_forward_f64(n, xs64, ts64, use_w ? w64 : NULL, beta, 2.0);
            expect_close(bi ? "smooth_l1 beta=1/9 forward f32" : "smooth_l1 beta=0 (L1) forward f32", fabs(got - ref) / ref,
                         1e-6);
            expect_close("smooth_l1 forward f64", fabs(got64 - ref64) / ref64, 1e-12);
            free(xs), free(ts), free(xs64), free(ts64);
        }
    }

    const int rows = 9, cls = 5;
    float *logits = frand(rows * cls, -4, 4, 5);
    int32_t labels[9] = {0, 4, -1, 2, 3, -1, 1, 4, 0};
    double ref = 0;
    for (int i = 0; i < rows; i++) {
        if (labels[i] < 0) continue;
        double s = 0;
        for (int j = 0; j < cls; j++) s += exp((double)logits[i * cls + j]);
        ref += -log(exp((double)logits[i * cls + labels[i]]) / s);
    }
    ref /= 7;
    double got = mrcnn_softmax_ce_forward(rows, cls, logits, labels, 7.0f);
    expect_close("softmax_ce forward (two ignored rows)", fabs(got - ref) / ref, 1e-6);
    double *l64 = to_f64(logits, rows * cls);
    expect_close("softmax_ce forward f64", fabs(mrcnn_softmax_ce_forward_f64(rows, cls, l64, labels, 7.0) - ref) / ref, 1e-12);
    free(x), free(t), free(wt), free(x64), free(t64), free(w64), free(logits), free(l64);
}

/* Folding frozen BN into the conv equals running the conv and then the BN. */
static void test_frozen_bn_fold(void **state) {
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(2, 9, 7, 5, 6, 3, 1, 1);
    int P = mrcnn_conv2d_out_h(&d), Q = mrcnn_conv2d_out_w(&d);
    int64_t nx = 2 * 9 * 7 * 5, nw = 6 * 9 * 5, ny = (int64_t)2 * P * Q * 6;
    float *x = frand(nx, -1, 1, 1), *w = frand(nw, -1, 1, 2), *b = frand(6, -1, 1, 3);
    float *gamma = frand(6, 0.5f, 2, 4), *beta = frand(6, -1, 1, 5), *mean = frand(6, -1, 1, 6), *var = frand(6, 0.1f, 3, 7);
    const float eps = 1e-5f;
    for (int had_bias = 0; had_bias < 2; had_bias++) {
        float *y = falloc(ny), *ref = falloc(ny), *scale = falloc(6), *shift = falloc(6);
        for (int k = 0; k < 6; k++) {
            scale[k] = gamma[k] / sqrtf(var[k] + eps);
            shift[k] = beta[k] - mean[k] * scale[k];
        }
        mrcnn_conv2d_forward(&d, x, w, had_bias ? b : NULL, y);
        for (int64_t i = 0; i < (int64_t)2 * P * Q; i++) // the frozen BN: a per-channel affine map
            for (int j = 0; j < 6; j++) ref[i * 6 + j] = y[i * 6 + j] * scale[j] + shift[j];
        float *wf = falloc(nw), *bf = falloc(6);
        memcpy(wf, w, sizeof(float) * nw);
        memcpy(bf, b, sizeof(float) * 6);
        mrcnn_frozen_bn_fold(wf, bf, had_bias, 6, 9 * 5, gamma, beta, mean, var, eps);
        mrcnn_conv2d_forward(&d, x, wf, bf, y);
        expect_close(had_bias ? "frozen-BN fold (conv had a bias)" : "frozen-BN fold", test_max_rel_err(y, ref, ny), 1e-5);
        free(y), free(ref), free(scale), free(shift), free(wf), free(bf);
    }
    float neg_var[1] = {-1}, one[1] = {1}, wq[1] = {1}, bq[1] = {0};
    EXPECT_FAIL(mrcnn_frozen_bn_fold(wq, bq, 0, 1, 1, one, one, one, neg_var, 1e-5f), "var + eps");
    free(x), free(w), free(b), free(gamma), free(beta), free(mean), free(var);
}

static void test_argument_errors(void **state) {
    float buf[64] = {0};
    double dbuf[64] = {0};
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(1, 5, 5, 2, 3, 3, 1, 1);
    mrcnn_conv2d_desc bad = d;
    bad.stride_w = 0;
    EXPECT_FAIL(mrcnn_conv2d_forward(&bad, buf, buf, NULL, buf), "stride (1, 0) must be positive");
    bad = d, bad.pad_h = -1;
    EXPECT_FAIL(mrcnn_conv2d_backward_data(&bad, buf, buf, buf), "padding (-1, 1) must not be negative");
    bad = d, bad.c = -2;
    EXPECT_FAIL(mrcnn_conv2d_backward_filter(&bad, buf, buf, buf, NULL), "must be positive");
    bad = d, bad.dil_h = 0;
    EXPECT_FAIL(mrcnn_conv2d_forward_f64(&bad, dbuf, dbuf, NULL, dbuf), "dilation (0, 1)");
    bad = mrcnn_conv2d_desc_make(1, 3, 3, 2, 3, 7, 1, 1);
    EXPECT_FAIL(mrcnn_conv2d_forward(&bad, buf, buf, NULL, buf), "smaller than the dilated 7x7 filter");
    EXPECT_FAIL(mrcnn_conv2d_forward(NULL, buf, buf, NULL, buf), "NULL descriptor");
    EXPECT_FAIL(mrcnn_conv2d_forward(&d, NULL, buf, NULL, buf), "NULL tensor");

    EXPECT_FAIL(mrcnn_gemm(0, 0, -1, 2, 2, 1, buf, 2, buf, 2, 0, buf, 2), "must not be negative");
    EXPECT_FAIL(mrcnn_gemm(0, 0, 2, 3, 4, 1, buf, 3, buf, 3, 0, buf, 3), "lda 3 < 4 columns of A");
    EXPECT_FAIL(mrcnn_gemm(0, 1, 2, 3, 4, 1, buf, 4, buf, 3, 0, buf, 3), "ldb 3 < 4 columns of B (transposed)");
    EXPECT_FAIL(mrcnn_gemm(0, 0, 2, 3, 4, 1, buf, 4, buf, 3, 0, buf, 2), "ldc 2 < n 3");

    EXPECT_FAIL(mrcnn_deconv2x2_forward(1, 0, 2, 2, 2, buf, buf, NULL, buf), "must be positive");
    EXPECT_FAIL(mrcnn_linear_forward(2, 3, -4, buf, buf, NULL, buf), "(N, in, out) = (2, 3, -4)");
    EXPECT_FAIL(mrcnn_relu_forward(-5, buf, buf), "count -5 is negative");
    EXPECT_FAIL(mrcnn_add_backward(-1, buf, buf, buf), "negative");
    mrcnn_pool2d_desc pd = {1, 5, 5, 2, 3, 2, 2};
    EXPECT_FAIL(mrcnn_maxpool2d_forward(&pd, buf, buf), "padding 2 must be in [0, kernel/2]");
    pd = (mrcnn_pool2d_desc){1, 5, 5, 2, 3, 0, 1};
    EXPECT_FAIL(mrcnn_maxpool2d_backward(&pd, buf, buf, buf), "stride 0 must be positive");
    EXPECT_FAIL(mrcnn_upsample_add_forward(1, 2, 2, 4, -4, 1, buf, buf, buf), "must be positive");

    int32_t labels[3] = {0, 5, 1};
    EXPECT_FAIL(mrcnn_softmax_ce_forward(3, 5, buf, labels, 1), "label 5 of row 1 outside [-1, 5)");
    labels[1] = -2;
    EXPECT_FAIL(mrcnn_softmax_ce_backward(3, 5, buf, labels, 1, 1, buf), "label -2 of row 1");
    EXPECT_FAIL(mrcnn_bce_logits_forward(4, buf, buf, NULL, 0), "normalizer 0 must be positive");
    EXPECT_FAIL(mrcnn_smooth_l1_forward(4, buf, buf, NULL, -0.5f, 1), "beta -0.5 must not be negative");
    EXPECT_FAIL(mrcnn_smooth_l1_backward(-4, buf, buf, NULL, 0.5f, 1, 1, buf), "count -4 is negative");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_conv2d_forward),
        cmocka_unit_test(test_deconv2x2_forward),
        cmocka_unit_test(test_elementwise_forward),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_upsample_add),
        cmocka_unit_test(test_linear_forward),
        cmocka_unit_test(test_losses_forward),
        cmocka_unit_test(test_frozen_bn_fold),
        cmocka_unit_test(test_argument_errors),
    };
    return cmocka_run_group_tests_name("ops_forward", tests, NULL, NULL);
}
