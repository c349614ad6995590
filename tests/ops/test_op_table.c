/* The op table (after ggml's tests/test-backend-ops.cpp): every entry of the op list
 * (include/mrcnn/backend_ops.def) run through a backend at fp32, bf16 and fp16 storage,
 * forward and backward, on shapes with odd channel counts (C = 3; K = 3, 12, 91), empty
 * and one-element inputs, and NaN/inf values where an op must pass them or flag them.
 * Usage: test_op_table [--backend cpu|cuda]. The CPU backend is checked against the
 * double build of the ops (src/ops, the _f64 names); with --backend cuda the CUDA
 * backend is checked against the same reference with the same bounds (they hold for any
 * fp32 summation order, so for the CPU's and the GPU's alike), skipped without a GPU.
 *
 * One line per (op, precision, direction): the worst error, the bound it must meet at
 * that element, the worst error/bound ratio over all elements, pass/fail; then a
 * summary. The cases are listed from the op list: an entry without a case_<table>_<name>
 * here does not compile.
 *
 * Bounds, from rounding (Higham, Accuracy and Stability of Numerical Algorithms, 3.1):
 * inputs are first rounded to the storage precision p, so the backend and the reference
 * see the same values. The backend computes in fp32 (unit roundoff u = 2^-24), then
 * rounds each output to p (unit roundoff u_p: bf16 2^-8, fp16 2^-11, fp32 0). A sum of
 * k products, in any order, is within gamma_k = k u / (1 - k u) times sum |a||b| of the
 * exact value; the final rounding adds u_p |y| (fp16 also eta = 2^-25, half its
 * smallest subnormal spacing, as an absolute term per rounding). So a bilinear op's
 * element i gets   bound_i = gamma_k S_i (1 + u_p) + u_p |ref_i| + eta,   with S_i the
 * same op run in double on |inputs| (and |the accumulated-into output| for +=). Each
 * case says its k. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/model.h"
#include "mrcnn/step_ctl.h"
#include "test_util.h"

/* ---- context: one backend at one storage precision ---- */

#define MAX_BUFS 1024
typedef struct {
    mrcnn_backend *be;
    mrcnn_dtype p;       // storage precision
    double up, eta;      // its unit roundoff and absolute rounding term
    uint64_t seed;
    void *bufs[MAX_BUFS]; // device buffers of the running case
    void *host[MAX_BUFS]; // host buffers of the running case
    int n_bufs, n_host;
    /* the (op, precision) rows of the running case: fwd, bwd */
    double err[2], bound[2], ratio[2];
    long n[2];
    int fail[2];
} ctx;

static const double U32 = 5.9604644775390625e-08; // 2^-24

static double gamma_k(double k) { return k * U32 / (1 - k * U32); }

static void *hmalloc(ctx *c, size_t bytes) {
    MRCNN_CHECK(c->n_host < MAX_BUFS, "op table: too many host buffers");
    void *p = calloc(1, bytes ? bytes : 8);
    MRCNN_CHECK(p != NULL, "op table: out of memory");
    return c->host[c->n_host++] = p;
}

/* n uniform values in [lo, hi), exact in the storage precision. */
static float *rnd(ctx *c, int64_t n, float lo, float hi) {
    float *x = hmalloc(c, (size_t)n * sizeof *x);
    test_fill_uniform(x, n, lo, hi, c->seed++);
    for (int64_t i = 0; i < n; i++) x[i] = mrcnn_round_to(x[i], c->p);
    return x;
}

static double *dbl(ctx *c, const float *x, int64_t n, int absval) {
    double *d = hmalloc(c, (size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = absval ? fabs((double)x[i]) : (double)x[i];
    return d;
}

static mrcnn_tensor dev(ctx *c, mrcnn_dtype dt, const void *host, int nd, const int64_t *shape) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dt, c->be->device, nd, shape);
    MRCNN_CHECK(c->n_bufs < MAX_BUFS, "op table: too many device buffers");
    t.data = c->bufs[c->n_bufs++] = c->be->mem.alloc(c->be, mrcnn_tensor_nbytes(&t), "op table");
    c->be->mem.write(c->be, &t, host);
    return t;
}

static mrcnn_tensor devf(ctx *c, const float *host, int nd, const int64_t *shape) {
    return dev(c, MRCNN_DTYPE_F32, host, nd, shape);
}

static float *down(ctx *c, const mrcnn_tensor *t) {
    float *h = hmalloc(c, mrcnn_tensor_nbytes(t));
    c->be->mem.read(c->be, t, h);
    return h;
}

static void case_free(ctx *c) {
    for (int i = 0; i < c->n_bufs; i++) c->be->mem.free(c->be, c->bufs[i]);
    for (int i = 0; i < c->n_host; i++) free(c->host[i]);
    c->n_bufs = c->n_host = 0;
}

/* Compares got with ref elementwise: |got - ref| <= bound_i (a NaN ref wants a NaN, an
 * infinite one the same infinity). dir 0 forward, 1 backward. */
static void check(ctx *c, int dir, const float *got, const double *ref, const double *bound, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i], b = bound[i], e;
        if (isnan(r) || isinf(r)) e = (isnan(r) ? isnan(g) : g == r) ? 0 : INFINITY;
        else e = isnan(g) ? INFINITY : fabs(g - r);
        double ratio = e == 0 ? 0 : b > 0 ? e / b : INFINITY;
        if (e > b) c->fail[dir] = 1;
        if (ratio >= c->ratio[dir]) c->ratio[dir] = ratio, c->err[dir] = e, c->bound[dir] = b;
    }
    c->n[dir] += n;
}

/* bound_i = gamma_k S_i (1 + u_p) + u_p |ref_i| + eta (the file comment). */
static double *bilinear_bound(ctx *c, const double *s, const double *ref, int64_t n, double k) {
    double *b = hmalloc(c, (size_t)n * sizeof *b);
    for (int64_t i = 0; i < n; i++) b[i] = gamma_k(k) * s[i] * (1 + c->up) + c->up * fabs(ref[i]) + c->eta;
    return b;
}

static void relu_d(double *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0 : y[i];
}

/* ---- the backward entries' act and dx_mode: each backward case runs in both modes
 * over an input gradient prefilled with noise (ADD must keep it under the sum, WRITE
 * must leave none of it), and with act = RELU over a layer output y about half of
 * whose elements are <= 0 (the reference uses dy masked by y: a select, exact, so the
 * bounds are those of the masked gradient's op; an op that ignored the mask is off by
 * the masked elements' terms, of order 1 against bounds of order 2^-8 at most). */

/* The layer output y for act (NULL for NONE), on the device in *ty. */
static float *layer_out(ctx *c, int act, int nd, const int64_t *shape, int64_t n, mrcnn_tensor *ty) {
    if (!act) {
        *ty = (mrcnn_tensor){0};
        return NULL;
    }
    float *y = rnd(c, n, -1, 1);
    *ty = devf(c, y, nd, shape);
    return y;
}

/* The gradient the reference uses: dy, or dy where y > 0 (relu_backward's mask), else 0. */
static float *masked(ctx *c, const float *y, float *dy, int64_t n) {
    if (!y) return dy;
    float *g = hmalloc(c, (size_t)n * sizeof *g);
    for (int64_t i = 0; i < n; i++) g[i] = y[i] > 0 ? dy[i] : 0;
    return g;
}

/* The reference input gradient's start: what dx held (ADD) or zero (WRITE). */
static double *dx_start(ctx *c, const float *dx0, int64_t n, int absval, mrcnn_grad_mode mode) {
    return mode == MRCNN_GRAD_WRITE ? hmalloc(c, (size_t)n * sizeof(double)) : dbl(c, dx0, n, absval);
}

#define FOR_DX_MODE(mode) for (mrcnn_grad_mode mode = MRCNN_GRAD_ADD; mode <= MRCNN_GRAD_WRITE; mode++)

/* One backward case's data (conv, deconv, linear): x, w and y of nd dimensions, a bias
 * of nb. dy and noise in dx, dw, db on the device (tdy, tdx, tdw, tdb), the layer
 * output for act (ty), the gradient the reference uses (g), and the references' starts:
 * r* from the values, s* from their absolute values (for the bounds). */
typedef struct {
    const float *g;
    mrcnn_tensor tdy, tdx, tdw, tdb, ty;
    double *rdx, *sdx, *rdw, *sdw, *rdb, *sdb;
} bwd_io;

static bwd_io bwd_io_make(ctx *c, int act, mrcnn_grad_mode mode, int nd, const int64_t *xs, int64_t nx,
                          const int64_t *ws, int64_t nw, const int64_t *ys, int64_t ny, int64_t nb) {
    bwd_io a;
    float *dy = rnd(c, ny, -1, 1), *dx0 = rnd(c, nx, -1, 1), *dw0 = rnd(c, nw, -1, 1), *db0 = rnd(c, nb, -1, 1);
    a.tdy = devf(c, dy, nd, ys), a.tdx = devf(c, dx0, nd, xs), a.tdw = devf(c, dw0, nd, ws);
    a.tdb = devf(c, db0, 1, (int64_t[]){nb});
    a.g = masked(c, layer_out(c, act, nd, ys, ny, &a.ty), dy, ny);
    a.rdx = dx_start(c, dx0, nx, 0, mode), a.sdx = dx_start(c, dx0, nx, 1, mode);
    a.rdw = dbl(c, dw0, nw, 0), a.sdw = dbl(c, dw0, nw, 1), a.rdb = dbl(c, db0, nb, 0), a.sdb = dbl(c, db0, nb, 1);
    return a;
}

/* ---- convolutions: k = R S C + 1 terms per output (the bias), K R S + 1 per input
 * gradient (the accumulated value), N P Q + 1 per filter and bias gradient ---- */

static void conv_one(ctx *c, int bwd, int n, int h, int w, int C, int K, int ks, int stride, int pad, int act) {
    mrcnn_conv2d_desc d = mrcnn_conv2d_desc_make(n, h, w, C, K, ks, stride, pad);
    const int P = mrcnn_conv2d_out_h(&d), Q = mrcnn_conv2d_out_w(&d);
    int64_t xs[4] = {n, h, w, C}, ws[4] = {K, ks, ks, C}, bs[1] = {K}, ys[4] = {n, P, Q, K};
    const int64_t nx = (int64_t)n * h * w * C, nw = (int64_t)K * ks * ks * C, ny = (int64_t)n * P * Q * K;
    float *x = rnd(c, nx, -1, 1), *wt = rnd(c, nw, -1, 1), *b = rnd(c, K, -1, 1);
    mrcnn_tensor tx = devf(c, x, 4, xs), tw = devf(c, wt, 4, ws), tb = devf(c, b, 1, bs);
    if (!bwd) {
        float *y0 = rnd(c, ny, -1, 1); // overwritten
        mrcnn_tensor ty = devf(c, y0, 4, ys);
        c->be->nn.conv2d_forward(c->be, &d, &tx, &tw, &tb, act, &ty);
        double *ref = hmalloc(c, ny * sizeof(double)), *s = hmalloc(c, ny * sizeof(double));
        mrcnn_conv2d_forward_f64(&d, dbl(c, x, nx, 0), dbl(c, wt, nw, 0), dbl(c, b, K, 0), ref);
        mrcnn_conv2d_forward_f64(&d, dbl(c, x, nx, 1), dbl(c, wt, nw, 1), dbl(c, b, K, 1), s);
        if (act) relu_d(ref, ny); // 1-Lipschitz: the error bound carries over
        check(c, 0, down(c, &ty), ref, bilinear_bound(c, s, ref, ny, (double)ks * ks * C + 1), ny);
        return;
    }
    FOR_DX_MODE(mode) {
        bwd_io a = bwd_io_make(c, act, mode, 4, xs, nx, ws, nw, ys, ny, K);
        c->be->nn.conv2d_backward(c->be, &d, &tx, &tw, &a.tdy, act, act ? &a.ty : NULL, &a.tdx, mode, &a.tdw, &a.tdb);
        mrcnn_conv2d_backward_data_f64(&d, dbl(c, a.g, ny, 0), dbl(c, wt, nw, 0), a.rdx);
        mrcnn_conv2d_backward_data_f64(&d, dbl(c, a.g, ny, 1), dbl(c, wt, nw, 1), a.sdx);
        check(c, 1, down(c, &a.tdx), a.rdx, bilinear_bound(c, a.sdx, a.rdx, nx, (double)K * ks * ks + 1), nx);
        mrcnn_conv2d_backward_filter_f64(&d, dbl(c, x, nx, 0), dbl(c, a.g, ny, 0), a.rdw, a.rdb);
        mrcnn_conv2d_backward_filter_f64(&d, dbl(c, x, nx, 1), dbl(c, a.g, ny, 1), a.sdw, a.sdb);
        const double k = (double)n * P * Q + 1;
        check(c, 1, down(c, &a.tdw), a.rdw, bilinear_bound(c, a.sdw, a.rdw, nw, k), nw);
        check(c, 1, down(c, &a.tdb), a.rdb, bilinear_bound(c, a.sdb, a.rdb, K, k), K);
    }
}

/* Shapes: the stem's C = 3, odd K (3, 12, 91: the class count), strided and padded,
 * one element (1x1x1x1, K = 1), a 1x1 pointwise conv (the GEMM path). */
#define CONV_SHAPES(bwd)                                                                                               \
    conv_one(c, bwd, 2, 9, 7, 3, 12, 3, 2, 1, 1);                                                                      \
    conv_one(c, bwd, 1, 5, 6, 12, 3, 3, 1, 1, 0);                                                                      \
    conv_one(c, bwd, 1, 4, 3, 5, 91, 1, 1, 0, 1);                                                                      \
    conv_one(c, bwd, 1, 1, 1, 1, 1, 1, 1, 0, 0);                                                                       \
    conv_one(c, bwd, 1, 7, 7, 3, 3, 7, 2, 3, 0)

static void case_nn_conv2d_forward(ctx *c) { CONV_SHAPES(0); }
static void case_nn_conv2d_backward(ctx *c) { CONV_SHAPES(1); }

/* deconv 2x2 stride 2: each output gets C products + the bias (k = C + 1); dx gets K*4
 * (+1), dw and db N H W (+1). */
static void deconv_one(ctx *c, int bwd, int n, int h, int w, int C, int K, int act) {
    int64_t xs[4] = {n, h, w, C}, ws[4] = {K, 2, 2, C}, bs[1] = {K}, ys[4] = {n, 2 * h, 2 * w, K};
    const int64_t nx = (int64_t)n * h * w * C, nw = 4LL * K * C, ny = 4LL * n * h * w * K;
    float *x = rnd(c, nx, -1, 1), *wt = rnd(c, nw, -1, 1), *b = rnd(c, K, -1, 1);
    mrcnn_tensor tx = devf(c, x, 4, xs), tw = devf(c, wt, 4, ws), tb = devf(c, b, 1, bs);
    if (!bwd) {
        mrcnn_tensor ty = devf(c, rnd(c, ny, -1, 1), 4, ys);
        c->be->nn.deconv2x2_forward(c->be, &tx, &tw, &tb, act, &ty);
        double *ref = hmalloc(c, ny * sizeof(double)), *s = hmalloc(c, ny * sizeof(double));
        mrcnn_deconv2x2_forward_f64(n, h, w, C, K, dbl(c, x, nx, 0), dbl(c, wt, nw, 0), dbl(c, b, K, 0), ref);
        mrcnn_deconv2x2_forward_f64(n, h, w, C, K, dbl(c, x, nx, 1), dbl(c, wt, nw, 1), dbl(c, b, K, 1), s);
        if (act) relu_d(ref, ny);
        check(c, 0, down(c, &ty), ref, bilinear_bound(c, s, ref, ny, C + 1.0), ny);
        return;
    }
    FOR_DX_MODE(mode) {
        bwd_io a = bwd_io_make(c, act, mode, 4, xs, nx, ws, nw, ys, ny, K);
        c->be->nn.deconv2x2_backward(c->be, &tx, &tw, &a.tdy, act, act ? &a.ty : NULL, &a.tdx, mode, &a.tdw, &a.tdb);
        mrcnn_deconv2x2_backward_f64(n, h, w, C, K, dbl(c, x, nx, 0), dbl(c, wt, nw, 0), dbl(c, a.g, ny, 0), a.rdx,
                                     a.rdw, a.rdb);
        mrcnn_deconv2x2_backward_f64(n, h, w, C, K, dbl(c, x, nx, 1), dbl(c, wt, nw, 1), dbl(c, a.g, ny, 1), a.sdx,
                                     a.sdw, a.sdb);
        check(c, 1, down(c, &a.tdx), a.rdx, bilinear_bound(c, a.sdx, a.rdx, nx, 4.0 * K + 1), nx);
        check(c, 1, down(c, &a.tdw), a.rdw, bilinear_bound(c, a.sdw, a.rdw, nw, (double)n * h * w + 1), nw);
        check(c, 1, down(c, &a.tdb), a.rdb, bilinear_bound(c, a.sdb, a.rdb, K, 4.0 * n * h * w + 1), K);
    }
}

#define DECONV_SHAPES(bwd)                                                                                             \
    deconv_one(c, bwd, 2, 3, 4, 3, 91, 1);                                                                             \
    deconv_one(c, bwd, 1, 5, 5, 12, 3, 0);                                                                             \
    deconv_one(c, bwd, 1, 1, 1, 1, 1, 0)

static void case_nn_deconv2x2_forward(ctx *c) { DECONV_SHAPES(0); }
static void case_nn_deconv2x2_backward(ctx *c) { DECONV_SHAPES(1); }

/* ---- fully connected: k = in + 1 per output, out + 1 per dx, N + 1 per dw, db ---- */

static void linear_one(ctx *c, int bwd, int n, int in, int out, int act) {
    int64_t xs[2] = {n, in}, ws[2] = {out, in}, bs[1] = {out}, ys[2] = {n, out};
    const int64_t nx = (int64_t)n * in, nw = (int64_t)out * in, ny = (int64_t)n * out;
    float *x = rnd(c, nx, -1, 1), *wt = rnd(c, nw, -1, 1), *b = rnd(c, out, -1, 1);
    mrcnn_tensor tx = devf(c, x, 2, xs), tw = devf(c, wt, 2, ws), tb = devf(c, b, 1, bs);
    if (!bwd) {
        mrcnn_tensor ty = devf(c, rnd(c, ny, -1, 1), 2, ys);
        c->be->nn.linear_forward(c->be, &tx, &tw, &tb, act, &ty);
        double *ref = hmalloc(c, ny * sizeof(double)), *s = hmalloc(c, ny * sizeof(double));
        mrcnn_linear_forward_f64(n, in, out, dbl(c, x, nx, 0), dbl(c, wt, nw, 0), dbl(c, b, out, 0), ref);
        mrcnn_linear_forward_f64(n, in, out, dbl(c, x, nx, 1), dbl(c, wt, nw, 1), dbl(c, b, out, 1), s);
        if (act) relu_d(ref, ny);
        check(c, 0, down(c, &ty), ref, bilinear_bound(c, s, ref, ny, in + 1.0), ny);
        return;
    }
    FOR_DX_MODE(mode) {
        bwd_io a = bwd_io_make(c, act, mode, 2, xs, nx, ws, nw, ys, ny, out);
        c->be->nn.linear_backward(c->be, &tx, &tw, &a.tdy, act, act ? &a.ty : NULL, &a.tdx, mode, &a.tdw, &a.tdb);
        mrcnn_linear_backward_f64(n, in, out, dbl(c, x, nx, 0), dbl(c, wt, nw, 0), dbl(c, a.g, ny, 0), a.rdx, a.rdw,
                                  a.rdb);
        mrcnn_linear_backward_f64(n, in, out, dbl(c, x, nx, 1), dbl(c, wt, nw, 1), dbl(c, a.g, ny, 1), a.sdx, a.sdw,
                                  a.sdb);
        check(c, 1, down(c, &a.tdx), a.rdx, bilinear_bound(c, a.sdx, a.rdx, nx, out + 1.0), nx);
        check(c, 1, down(c, &a.tdw), a.rdw, bilinear_bound(c, a.sdw, a.rdw, nw, n + 1.0), nw);
        check(c, 1, down(c, &a.tdb), a.rdb, bilinear_bound(c, a.sdb, a.rdb, out, n + 1.0), out);
    }
}

/* N = 0 is refused by the interface (linear needs N > 0): the smallest is one element. */
#define LINEAR_SHAPES(bwd)                                                                                             \
    linear_one(c, bwd, 3, 147, 91, 1);                                                                                 \
    linear_one(c, bwd, 5, 12, 364, 0);                                                                                 \
    linear_one(c, bwd, 1, 1, 1, 0)

static void case_nn_linear_forward(ctx *c) { LINEAR_SHAPES(0); }
static void case_nn_linear_backward(ctx *c) { LINEAR_SHAPES(1); }

/* ---- bias gradient: k = M + 1 per element of db (M rows of dy, the accumulated value) ---- */

static void bias_grad_one(ctx *c, int nd, const int64_t *shape) {
    const int64_t K = shape[nd - 1];
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    const int64_t M = n / K;
    float *dy = rnd(c, n, -1, 1), *db0 = rnd(c, K, -1, 1);
    mrcnn_tensor tdy = devf(c, dy, nd, shape), tdb = devf(c, db0, 1, &shape[nd - 1]);
    c->be->nn.bias_grad(c->be, &tdy, &tdb);
    double *ref = dbl(c, db0, K, 0), *s = dbl(c, db0, K, 1);
    const double unread = 0; // linear_backward reads x and w only for dx and dw, both NULL here
    if (M > 0) {
        mrcnn_linear_backward_f64((int)M, 1, (int)K, &unread, &unread, dbl(c, dy, n, 0), NULL, NULL, ref);
        mrcnn_linear_backward_f64((int)M, 1, (int)K, &unread, &unread, dbl(c, dy, n, 1), NULL, NULL, s);
    }
    check(c, 1, down(c, &tdb), ref, bilinear_bound(c, s, ref, K, M + 1.0), K);
}

/* An NHWC activation's gradient (M = N H W rows), the class count K = 91 on a 2-D one,
 * C = 3, no rows at all (db unchanged), one element. */
static void case_nn_bias_grad(ctx *c) {
    static const int64_t s4[4] = {2, 3, 5, 12}, s2[2] = {37, 91}, s3[4] = {1, 7, 7, 3}, s0[3] = {0, 4, 3},
                         s1[2] = {1, 1};
    bias_grad_one(c, 4, s4);
    bias_grad_one(c, 2, s2);
    bias_grad_one(c, 4, s3);
    bias_grad_one(c, 3, s0);
    bias_grad_one(c, 2, s1);
}

/* ---- elementwise: sizes 0 (empty), 1, 3 and an odd 1001; NaN and inf pass ---- */

static const int64_t ELEM_N[] = {0, 1, 3, 1001};
#define FOR_ELEM(n) for (int e_ = 0; e_ < 4; e_++) for (int64_t n = ELEM_N[e_], once_ = 1; once_; once_ = 0)

static float *rnd_special(ctx *c, int64_t n) {
    float *x = rnd(c, n, -2, 2);
    if (n >= 3) x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY;
    return x;
}

/* relu: exact (a select), bound 0 beyond NaN/inf agreement. */
static void case_nn_relu_forward(ctx *c) {
    FOR_ELEM(n) {
        float *x = rnd_special(c, n);
        mrcnn_tensor tx = devf(c, x, 1, &n), ty = devf(c, rnd(c, n, -1, 1), 1, &n);
        c->be->nn.relu_forward(c->be, &tx, &ty);
        double *ref = dbl(c, x, n, 0), *b = hmalloc(c, (n + 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) ref[i] = ref[i] < 0 ? 0 : ref[i]; // NaN passes, as the op's v < 0 ? 0 : v
        check(c, 0, down(c, &ty), ref, b, n);
    }
}

/* dx = dy where y > 0, else 0, written over what dx held (dx0, which must not show
 * through): a copy, so only the rounding to p, bounded as one term of |dy|. */
static void case_nn_relu_backward(ctx *c) {
    FOR_ELEM(n) {
        float *y = rnd(c, n, -1, 1), *dy = rnd(c, n, -1, 1), *dx0 = rnd(c, n, -1, 1);
        mrcnn_tensor ty = devf(c, y, 1, &n), tdy = devf(c, dy, 1, &n), tdx = devf(c, dx0, 1, &n);
        c->be->nn.relu_backward(c->be, &ty, &tdy, &tdx);
        double *ref = dbl(c, dx0, n, 0), *s = dbl(c, dx0, n, 1);
        for (int64_t i = 0; i < n; i++) {
            ref[i] = y[i] > 0 ? dy[i] : 0;
            s[i] = fabs(ref[i]);
        }
        check(c, 1, down(c, &tdx), ref, bilinear_bound(c, s, ref, n, 1), n);
    }
}

/* y = act(a + b): one addition (k = 1); NaN and inf in a pass. */
static void case_nn_add_forward(ctx *c) {
    for (int act = 0; act <= 1; act++)
        FOR_ELEM(n) {
            float *a = rnd_special(c, n), *b = rnd(c, n, -1, 1);
            mrcnn_tensor ta = devf(c, a, 1, &n), tb = devf(c, b, 1, &n), ty = devf(c, rnd(c, n, -1, 1), 1, &n);
            c->be->nn.add_forward(c->be, &ta, &tb, act, &ty);
            double *ref = dbl(c, a, n, 0), *s = dbl(c, a, n, 1);
            for (int64_t i = 0; i < n; i++) ref[i] += b[i], s[i] += fabs(b[i]);
            if (act)
                for (int64_t i = 0; i < n; i++) ref[i] = ref[i] < 0 ? 0 : ref[i];
            check(c, 0, down(c, &ty), ref, bilinear_bound(c, s, ref, n, 1), n);
        }
}

static void case_nn_add_backward(ctx *c) {
    FOR_ELEM(n) {
        float *dy = rnd(c, n, -1, 1), *da0 = rnd(c, n, -1, 1), *db0 = rnd(c, n, -1, 1);
        mrcnn_tensor tdy = devf(c, dy, 1, &n), tda = devf(c, da0, 1, &n), tdb = devf(c, db0, 1, &n);
        c->be->nn.add_backward(c->be, &tdy, &tda, &tdb);
        double *ra = dbl(c, da0, n, 0), *sa = dbl(c, da0, n, 1), *rb = dbl(c, db0, n, 0), *sb = dbl(c, db0, n, 1);
        for (int64_t i = 0; i < n; i++) ra[i] += dy[i], rb[i] += dy[i], sa[i] += fabs(dy[i]), sb[i] += fabs(dy[i]);
        check(c, 1, down(c, &tda), ra, bilinear_bound(c, sa, ra, n, 1), n);
        check(c, 1, down(c, &tdb), rb, bilinear_bound(c, sb, rb, n, 1), n);
    }
}

/* ---- pooling: forward a max (exact); backward routes dy, up to ceil(k/s)^2 windows per
 * input plus the accumulated value ---- */

static void pool_one(ctx *c, int bwd, int n, int h, int w, int C, int k, int s, int pad) {
    mrcnn_pool2d_desc d = {n, h, w, C, k, s, pad};
    const int P = mrcnn_pool2d_out_h(&d), Q = mrcnn_pool2d_out_w(&d);
    int64_t xs[4] = {n, h, w, C}, ys[4] = {n, P, Q, C};
    const int64_t nx = (int64_t)n * h * w * C, ny = (int64_t)n * P * Q * C;
    float *x = rnd(c, nx, -1, 1);
    mrcnn_tensor tx = devf(c, x, 4, xs);
    if (!bwd) {
        mrcnn_tensor ty = devf(c, rnd(c, ny, -1, 1), 4, ys);
        c->be->nn.maxpool2d_forward(c->be, &d, &tx, &ty);
        double *ref = hmalloc(c, ny * sizeof(double)), *b = hmalloc(c, ny * sizeof(double));
        mrcnn_maxpool2d_forward_f64(&d, dbl(c, x, nx, 0), ref);
        check(c, 0, down(c, &ty), ref, b, ny);
        return;
    }
    float *dy = rnd(c, ny, -1, 1), *dx0 = rnd(c, nx, -1, 1);
    mrcnn_tensor tdy = devf(c, dy, 4, ys), tdx = devf(c, dx0, 4, xs);
    c->be->nn.maxpool2d_backward(c->be, &d, &tx, &tdy, &tdx);
    double *ref = dbl(c, dx0, nx, 0), *sb = dbl(c, dx0, nx, 1);
    mrcnn_maxpool2d_backward_f64(&d, dbl(c, x, nx, 0), dbl(c, dy, ny, 0), ref);
    mrcnn_maxpool2d_backward_f64(&d, dbl(c, x, nx, 0), dbl(c, dy, ny, 1), sb);
    const double kk = ceil((double)k / s);
    check(c, 1, down(c, &tdx), ref, bilinear_bound(c, sb, ref, nx, kk * kk + 1), nx);
}

#define POOL_SHAPES(bwd)                                                                                               \
    pool_one(c, bwd, 2, 9, 8, 3, 3, 2, 1);                                                                             \
    pool_one(c, bwd, 1, 4, 4, 91, 1, 2, 0);                                                                            \
    pool_one(c, bwd, 1, 1, 1, 1, 1, 1, 0)

static void case_nn_maxpool2d_forward(ctx *c) { POOL_SHAPES(0); }
static void case_nn_maxpool2d_backward(ctx *c) { POOL_SHAPES(1); }

/* ---- FPN top-down: forward one addition; backward sums ceil(H/h) ceil(W/w) copies ---- */

static void ups_one(ctx *c, int bwd, int n, int h, int w, int H, int W, int C) {
    int64_t ts[4] = {n, h, w, C}, ls[4] = {n, H, W, C};
    const int64_t nt = (int64_t)n * h * w * C, nl = (int64_t)n * H * W * C;
    if (!bwd) {
        float *top = rnd(c, nt, -1, 1), *lat = rnd(c, nl, -1, 1);
        mrcnn_tensor tt = devf(c, top, 4, ts), tl = devf(c, lat, 4, ls), ty = devf(c, rnd(c, nl, -1, 1), 4, ls);
        c->be->nn.upsample_add_forward(c->be, &tt, &tl, &ty);
        double *ref = hmalloc(c, nl * sizeof(double)), *s = hmalloc(c, nl * sizeof(double));
        mrcnn_upsample_add_forward_f64(n, h, w, H, W, C, dbl(c, top, nt, 0), dbl(c, lat, nl, 0), ref);
        mrcnn_upsample_add_forward_f64(n, h, w, H, W, C, dbl(c, top, nt, 1), dbl(c, lat, nl, 1), s);
        check(c, 0, down(c, &ty), ref, bilinear_bound(c, s, ref, nl, 1), nl);
        return;
    }
    float *dy = rnd(c, nl, -1, 1), *dt0 = rnd(c, nt, -1, 1), *dl0 = rnd(c, nl, -1, 1);
    mrcnn_tensor tdy = devf(c, dy, 4, ls), tdt = devf(c, dt0, 4, ts), tdl = devf(c, dl0, 4, ls);
    c->be->nn.upsample_add_backward(c->be, &tdy, &tdt, &tdl);
    double *rt = dbl(c, dt0, nt, 0), *st = dbl(c, dt0, nt, 1), *rl = dbl(c, dl0, nl, 0), *sl = dbl(c, dl0, nl, 1);
    mrcnn_upsample_add_backward_f64(n, h, w, H, W, C, dbl(c, dy, nl, 0), rt, rl);
    mrcnn_upsample_add_backward_f64(n, h, w, H, W, C, dbl(c, dy, nl, 1), st, sl);
    const double k = ceil((double)H / h) * ceil((double)W / w) + 1;
    check(c, 1, down(c, &tdt), rt, bilinear_bound(c, st, rt, nt, k), nt);
    check(c, 1, down(c, &tdl), rl, bilinear_bound(c, sl, rl, nl, 1), nl);
}

#define UPS_SHAPES(bwd)                                                                                                \
    ups_one(c, bwd, 2, 3, 4, 6, 8, 3);                                                                                 \
    ups_one(c, bwd, 1, 3, 3, 5, 7, 12);                                                                                \
    ups_one(c, bwd, 1, 1, 1, 1, 1, 1)

static void case_nn_upsample_add_forward(ctx *c) { UPS_SHAPES(0); }
static void case_nn_upsample_add_backward(ctx *c) { UPS_SHAPES(1); }

/* ---- ROIAlign: each output averages sr^2 bilinear samples, 4 corners each, so k =
 * 4 sr^2 products; the sample weights come from about 8 fp32 operations on coordinates
 * up to M feature pixels, each off by u M, and a weight's error moves the output by
 * that times the features' magnitude: bound = (gamma_k + 8 (M + 1) u) S + u_p |ref|,
 * S the op on |features|. Boxes include a padding row (image -1), an empty-area box and
 * one past the image. Backward: dfeats accumulate every sample that touches them. */

static void roi_case(ctx *c, int bwd) {
    const int n = 2, C = 3, L = 2, lh[2] = {12, 6}, lw[2] = {10, 5}, out = 3, sr = 2;
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(n, C, L, 2, lh, lw, out, sr, 0);
    const float rois[] = {0, 1, 2, 30, 25, 1, 4, 4, 4, 4, -1, 0, 0, 0, 0, 1, 10, 10, 200, 90, 0, 0, 0, 2, 2};
    const int64_t R = sizeof rois / sizeof rois[0] / 5, ny = R * out * out * C;
    int64_t rs[2] = {R, 5}, ys[4] = {R, out, out, C};
    mrcnn_tensor tf[2], tr = devf(c, rois, 2, rs);
    float *f[2];
    double *fd[2], *fa[2];
    int64_t nf[2];
    for (int l = 0; l < L; l++) {
        int64_t fs[4] = {n, lh[l], lw[l], C};
        nf[l] = (int64_t)n * lh[l] * lw[l] * C;
        f[l] = bwd ? rnd(c, nf[l], -1, 1) : rnd(c, nf[l], -1, 1);
        tf[l] = devf(c, f[l], 4, fs);
        fd[l] = dbl(c, f[l], nf[l], 0), fa[l] = dbl(c, f[l], nf[l], 1);
    }
    const double M = 64, k = 4.0 * sr * sr, rel = gamma_k(k) + 8 * (M + 1) * U32;
    if (!bwd) {
        mrcnn_tensor ty = devf(c, rnd(c, ny, -1, 1), 4, ys);
        c->be->nn.roi_align_forward(c->be, &d, tf, &tr, &ty);
        double *ref = hmalloc(c, ny * sizeof(double)), *s = hmalloc(c, ny * sizeof(double));
        const double *const fdp[2] = {fd[0], fd[1]}, *const fap[2] = {fa[0], fa[1]};
        mrcnn_roi_align_forward_f64(&d, fdp, R, dbl(c, rois, R * 5, 0), ref);
        mrcnn_roi_align_forward_f64(&d, fap, R, dbl(c, rois, R * 5, 0), s);
        double *b = hmalloc(c, ny * sizeof(double));
        for (int64_t i = 0; i < ny; i++) b[i] = rel * s[i] * (1 + c->up) + c->up * fabs(ref[i]) + c->eta;
        check(c, 0, down(c, &ty), ref, b, ny);
        return;
    }
    float *dy = rnd(c, ny, -1, 1);
    mrcnn_tensor tdy = devf(c, dy, 4, ys);
    c->be->nn.roi_align_backward(c->be, &d, &tr, &tdy, tf); // accumulates into the features
    double *ref[2] = {fd[0], fd[1]}, *s[2] = {fa[0], fa[1]};
    mrcnn_roi_align_backward_f64(&d, R, dbl(c, rois, R * 5, 0), dbl(c, dy, ny, 0), ref);
    mrcnn_roi_align_backward_f64(&d, R, dbl(c, rois, R * 5, 0), dbl(c, dy, ny, 1), s);
    for (int l = 0; l < L; l++) {
        double *b = hmalloc(c, nf[l] * sizeof(double));
        /* every output sample adds into up to 4 features: k = 4 sr^2 R out^2 terms at most */
        const double kb = k * R * out * out + 1, rb = gamma_k(kb) + 8 * (M + 1) * U32;
        for (int64_t i = 0; i < nf[l]; i++) b[i] = rb * s[l][i] * (1 + c->up) + c->up * fabs(ref[l][i]) + c->eta;
        check(c, 1, down(c, &tf[l]), ref[l], b, nf[l]);
    }
}

static void case_nn_roi_align_forward(ctx *c) { roi_case(c, 0); }
static void case_nn_roi_align_backward(ctx *c) { roi_case(c, 1); }

/* ---- cast: fp32 in, out in each float dtype: one rounding, |y - x| <= u_y |x| (fp32
 * out: rounded to the storage precision, u_p) ---- */

static void case_nn_cast(ctx *c) {
    const mrcnn_dtype outs[3] = {MRCNN_DTYPE_F32, MRCNN_DTYPE_BF16, MRCNN_DTYPE_F16};
    const double uo[3] = {c->up, 0x1p-8, 0x1p-11}, eo[3] = {c->eta, 0, 0x1p-25};
    FOR_ELEM(n) for (int o = 0; o < 3; o++) {
        float *x = hmalloc(c, (n + 1) * sizeof(float));
        test_fill_uniform(x, n, -3, 3, c->seed++); // not pre-rounded: the cast rounds
        if (n >= 3) x[0] = NAN, x[1] = INFINITY, x[2] = 1e-6f;
        mrcnn_tensor tx = devf(c, x, 1, &n), ty = dev(c, outs[o], hmalloc(c, 4 * n + 4), 1, &n);
        c->be->nn.cast(c->be, &tx, &ty);
        uint16_t *h16 = (uint16_t *)down(c, &ty);
        float *got = hmalloc(c, (n + 1) * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            got[i] = outs[o] == MRCNN_DTYPE_F32    ? ((float *)h16)[i]
                     : outs[o] == MRCNN_DTYPE_BF16 ? mrcnn_bf16_to_f32(h16[i])
                                                   : mrcnn_f16_to_f32(h16[i]);
        double *ref = dbl(c, x, n, 0), *b = hmalloc(c, (n + 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) b[i] = uo[o] * fabs(ref[i]) + eo[o];
        check(c, 0, got, ref, b, n);
    }
}

/* ---- channel copy: exact values, checked against the copy written out here, -0's sign
 * too (check compares values, and -0 == +0); NaN and inf pass. Slice (D < C), pad
 * (D > C, the zeros written over a non-zero y), same width, no rows; fp32 -> bf16 rounds
 * once as cast (u_bf16 |x|) ---- */

static void channel_copy_one(ctx *c, int64_t m, int64_t C, int64_t D, mrcnn_dtype yt) {
    const int64_t ny = m * D, k = C < D ? C : D;
    float *x = rnd_special(c, m * C), *y0 = rnd(c, ny, -1, 1);
    if (m * C >= 4) x[3] = -0.0f;
    mrcnn_tensor tx = devf(c, x, 2, (int64_t[]){m, C}), ty;
    if (yt == MRCNN_DTYPE_F32) ty = devf(c, y0, 2, (int64_t[]){m, D});
    else ty = dev(c, yt, hmalloc(c, (size_t)(ny + 1) * sizeof(uint16_t)), 2, (int64_t[]){m, D});
    c->be->nn.channel_copy(c->be, &tx, &ty);
    float *got = down(c, &ty);
    if (yt != MRCNN_DTYPE_F32) {
        const uint16_t *h = (const uint16_t *)got;
        got = hmalloc(c, (size_t)(ny + 1) * sizeof *got);
        for (int64_t i = 0; i < ny; i++) got[i] = mrcnn_bf16_to_f32(h[i]);
    }
    double *ref = hmalloc(c, (size_t)(ny + 1) * sizeof *ref), *b = hmalloc(c, (size_t)(ny + 1) * sizeof *b);
    float sign_fail = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < D; j++) {
            const int64_t i = r * D + j;
            const float v = j < k ? x[r * C + j] : 0.0f;
            ref[i] = v, b[i] = yt == MRCNN_DTYPE_F32 ? 0 : 0x1p-8 * fabs(ref[i]);
            sign_fail += got[i] == 0 && signbit(got[i]) != signbit(v);
        }
    check(c, 0, got, ref, b, ny);
    double zero = 0;
    check(c, 0, &sign_fail, &zero, &zero, 1);
}

/* The box predictors' 96 -> 91 and the RPN's 16 -> 12 slices, the stem's 3 -> 8 pad. */
static void case_nn_channel_copy(ctx *c) {
    static const int64_t cd[][3] = {{37, 96, 91}, {5, 3, 8}, {7, 16, 12}, {4, 12, 12}, {0, 8, 3}, {1, 1, 8}};
    for (int i = 0; i < 6; i++) channel_copy_one(c, cd[i][0], cd[i][1], cd[i][2], MRCNN_DTYPE_F32);
    channel_copy_one(c, 9, 8, 3, MRCNN_DTYPE_BF16);
}

/* ---- losses (fp32 scalars): each term costs c_t fp32 operations with relative error
 * u, exp and log1p within 1 ulp and condition 1 here, so a term is within c_t u of its
 * value; summing n terms adds gamma_n: bound = gamma_{n + c_t} sum |w_i l_i| / norm.
 * dx += mult w dl/dx: c_t + 1 operations, then the accumulation and u_p. ---- */

static mrcnn_loss_norm norm_of(float scale, float mult) { return (mrcnn_loss_norm){NULL, scale, mult, NULL}; }

static void loss_check(ctx *c, float *loss_got, double ref, double s, double k) {
    double b = gamma_k(k) * s;
    check(c, 0, loss_got, &ref, &b, 1);
}

static void case_loss_bce_logits(ctx *c) {
    FOR_ELEM(n) {
        float *x = rnd(c, n, -6, 6), *t = rnd(c, n, 0, 1), *w = rnd(c, n, 0, 2), *dx0 = rnd(c, n, -1, 1), l0 = 0;
        mrcnn_tensor tx = devf(c, x, 1, &n), tt = devf(c, t, 1, &n), tw = devf(c, w, 1, &n), tdx = devf(c, dx0, 1, &n);
        int64_t one = 1;
        mrcnn_tensor tl = devf(c, &l0, 1, &one);
        const float scale = 3, mult = 0.5f;
        mrcnn_loss_norm nm = norm_of(scale, mult);
        c->be->loss.bce_logits(c->be, &tx, &tt, &tw, &nm, &tl, &tdx);
        double *xd = dbl(c, x, n, 0), *td = dbl(c, t, n, 0), *wd = dbl(c, w, n, 0), *rdx = dbl(c, dx0, n, 0);
        double ref = mrcnn_bce_logits_forward_f64(n, xd, td, wd, scale), s = 0;
        for (int64_t i = 0; i < n; i++)
            s += wd[i] * (log1p(exp(-fabs(xd[i]))) + fmax(xd[i], 0) + fabs(xd[i] * td[i])) / scale;
        loss_check(c, down(c, &tl), ref, s, n + 10.0);
        mrcnn_bce_logits_backward_f64(n, xd, td, wd, scale, mult, rdx);
        double *sdx = dbl(c, dx0, n, 1);
        for (int64_t i = 0; i < n; i++) sdx[i] += wd[i] * (1 + td[i]) * mult / scale;
        check(c, 1, down(c, &tdx), rdx, bilinear_bound(c, sdx, rdx, n, 12), n);
    }
}

static void case_loss_smooth_l1(ctx *c) {
    FOR_ELEM(n) {
        float *x = rnd(c, n, -2, 2), *t = rnd(c, n, -2, 2), *w = rnd(c, n, 0, 2), *dx0 = rnd(c, n, -1, 1), l0 = 0;
        mrcnn_tensor tx = devf(c, x, 1, &n), tt = devf(c, t, 1, &n), tw = devf(c, w, 1, &n), tdx = devf(c, dx0, 1, &n);
        int64_t one = 1;
        mrcnn_tensor tl = devf(c, &l0, 1, &one);
        const float scale = 2, mult = 1.5f, beta = 1.0f / 9;
        mrcnn_loss_norm nm = norm_of(scale, mult);
        c->be->loss.smooth_l1(c->be, &tx, &tt, &tw, beta, &nm, &tl, &tdx);
        double *xd = dbl(c, x, n, 0), *td = dbl(c, t, n, 0), *wd = dbl(c, w, n, 0), *rdx = dbl(c, dx0, n, 0);
        double ref = mrcnn_smooth_l1_forward_f64(n, xd, td, wd, beta, scale), s = 0;
        for (int64_t i = 0; i < n; i++) s += wd[i] * (fabs(xd[i]) + fabs(td[i]) + beta) * (1 + 2 / beta) / scale;
        loss_check(c, down(c, &tl), ref, s, n + 6.0);
        mrcnn_smooth_l1_backward_f64(n, xd, td, wd, beta, scale, mult, rdx);
        double *sdx = dbl(c, dx0, n, 1);
        for (int64_t i = 0; i < n; i++) sdx[i] += wd[i] * (1 + (fabs(xd[i]) + fabs(td[i])) / beta) * mult / scale;
        check(c, 1, down(c, &tdx), rdx, bilinear_bound(c, sdx, rdx, n, 8), n);
    }
}

/* Softmax over c classes: the row's log-sum-exp is a sum of c exponentials (gamma_c,
 * relative) plus ~10 operations on values up to max|x|. Labels include -1 (ignored). */
static void case_loss_softmax_ce(ctx *c) {
    const int rows[3] = {0, 1, 5}, cls[3] = {3, 91, 12};
    for (int r = 0; r < 3; r++) {
        const int n = rows[r], C = cls[r];
        const int64_t nx = (int64_t)n * C;
        float *x = rnd(c, nx, -4, 4), *dx0 = rnd(c, nx, -1, 1), l0 = 0;
        int32_t *lab = hmalloc(c, (n + 1) * sizeof *lab);
        for (int i = 0; i < n; i++) lab[i] = i == 1 ? -1 : (i * 7) % C;
        int64_t xs[2] = {n, C}, ls[1] = {n}, one = 1;
        mrcnn_tensor tx = devf(c, x, 2, xs), tdx = devf(c, dx0, 2, xs), tl = devf(c, &l0, 1, &one);
        mrcnn_tensor tlab = dev(c, MRCNN_DTYPE_I32, lab, 1, ls);
        const float scale = 4, mult = 2;
        mrcnn_loss_norm nm = norm_of(scale, mult);
        c->be->loss.softmax_ce(c->be, &tx, &tlab, &nm, &tl, &tdx);
        double *xd = dbl(c, x, nx, 0), *rdx = dbl(c, dx0, nx, 0), *sdx = dbl(c, dx0, nx, 1);
        double ref = mrcnn_softmax_ce_forward_f64(n, C, xd, lab, scale), s = 0;
        for (int i = 0; i < n; i++) s += (lab[i] >= 0) * (log((double)C) + 3 * 4.0) / scale;
        loss_check(c, down(c, &tl), ref, s, n + C + 10.0);
        mrcnn_softmax_ce_backward_f64(n, C, xd, lab, scale, mult, rdx);
        for (int64_t i = 0; i < nx; i++) sdx[i] += (lab[i / C] >= 0) * 2.0 * mult / scale;
        check(c, 1, down(c, &tdx), rdx, bilinear_bound(c, sdx, rdx, nx, C + 12.0), nx);
    }
}

/* ---- optimizer and step bookkeeping: fp32 master weights (no rounding to p) ---- */

/* v = mu v + (gs g + wd m p): gamma_3 of the three terms; p -= lr v: gamma_2 (|p| + lr |v|)
 * plus lr times v's error. */
static void sgd_ref(int64_t n, const float *p, const float *g, const float *v, const float *m, double lr, double mu,
                    double wd, double gs, double *rp, double *rv, double *bp, double *bv) {
    for (int64_t i = 0; i < n; i++) {
        double mi = m ? m[i] : 1, d = gs * g[i] + wd * mi * p[i];
        rv[i] = mu * v[i] + d;
        bv[i] = gamma_k(3) * (fabs(gs * g[i]) + fabs(wd * mi * p[i]) + fabs(mu * v[i]));
        rp[i] = p[i] - lr * rv[i];
        bp[i] = gamma_k(2) * (fabs(p[i]) + fabs(lr * rv[i])) + lr * bv[i] * (1 + gamma_k(2));
    }
}

static void case_opt_sgd_update(ctx *c) {
    FOR_ELEM(n) {
        float *p = rnd(c, n, -1, 1), *g = rnd(c, n, -1, 1), *v = rnd(c, n, -1, 1), *m = rnd(c, n, 0, 1);
        mrcnn_tensor tp = devf(c, p, 1, &n), tg = devf(c, g, 1, &n), tv = devf(c, v, 1, &n), tm = devf(c, m, 1, &n);
        c->be->opt.sgd_update(c->be, &tp, &tg, &tv, &tm, 0.02f, 0.9f, 1e-4f, 0.125f);
        double *rp = hmalloc(c, 8 * n + 8), *rv = hmalloc(c, 8 * n + 8), *bp = hmalloc(c, 8 * n + 8),
               *bv = hmalloc(c, 8 * n + 8);
        sgd_ref(n, p, g, v, m, 0.02f, 0.9f, 1e-4f, 0.125f, rp, rv, bp, bv);
        check(c, 0, down(c, &tp), rp, bp, n);
        check(c, 0, down(c, &tv), rv, bv, n);
    }
}

/* A flag read back: exact. */
static void case_opt_nonfinite(ctx *c) {
    FOR_ELEM(n) for (int bad = 0; bad <= 2; bad++) {
        float *x = rnd(c, n, -1, 1);
        if (n && bad) x[n / 2] = bad == 1 ? NAN : -INFINITY;
        mrcnn_tensor tx = devf(c, x, 1, &n);
        float got = (float)c->be->opt.nonfinite(c->be, &tx);
        double ref = n && bad, b = 0;
        check(c, 0, &got, &ref, &b, 1);
    }
}

static void case_step_axpy(ctx *c) {
    FOR_ELEM(n) {
        float *x = rnd(c, n, -1, 1), *a = rnd(c, n, -1, 1);
        mrcnn_tensor tx = devf(c, x, 1, &n), ta = devf(c, a, 1, &n);
        c->be->step.axpy(c->be, 0.75f, &tx, &ta);
        double *ref = dbl(c, a, n, 0), *s = dbl(c, a, n, 1), *b = hmalloc(c, 8 * n + 8);
        for (int64_t i = 0; i < n; i++) ref[i] += 0.75 * x[i], s[i] += fabs(0.75 * x[i]);
        for (int64_t i = 0; i < n; i++) b[i] = gamma_k(2) * s[i];
        check(c, 0, down(c, &ta), ref, b, n);
    }
}

/* flag = (flag != 0) or any non-finite element: exact, NaN/inf in each position class. */
static void case_step_nonfinite_or(ctx *c) {
    FOR_ELEM(n) for (int bad = 0; bad <= 2; bad++) for (int prior = 0; prior <= 1; prior++) {
        float *x = rnd(c, n, -1, 1), f0 = (float)prior;
        if (n && bad) x[n - 1] = bad == 1 ? NAN : INFINITY;
        int64_t one = 1;
        mrcnn_tensor tx = devf(c, x, 1, &n), tf = devf(c, &f0, 1, &one);
        c->be->step.nonfinite_or(c->be, &tx, &tf);
        double ref = prior || (n && bad), b = 0;
        check(c, 0, down(c, &tf), &ref, &b, 1);
    }
}

/* sum of w t^2 over n: 2 products and an addition per term, gamma_{n+2} sum w t^2, and
 * the fp32 result's rounding. */
static void case_step_sum_squares(ctx *c) {
    FOR_ELEM(n) for (int weighted = 0; weighted <= 1; weighted++) {
        float *t = rnd(c, n, -1, 1), *w = rnd(c, n, 0, 2), o0 = NAN;
        int64_t one = 1;
        mrcnn_tensor tt = devf(c, t, 1, &n), tw = devf(c, w, 1, &n), to = devf(c, &o0, 1, &one);
        c->be->step.sum_squares(c->be, &tt, weighted ? &tw : NULL, &to);
        double ref = 0;
        for (int64_t i = 0; i < n; i++) ref += (double)t[i] * t[i] * (weighted ? w[i] : 1);
        double b = (gamma_k(n + 2.0) + U32) * ref;
        check(c, 0, down(c, &to), &ref, &b, 1);
    }
}

/* The device's decision against the host's mrcnn_step_decide on the same vector: exact
 * (the same float operations), with a non-finite flag, clipping and the fp16 scaler. */
static void case_step_decide(ctx *c) {
    for (int v = 0; v < 4; v++) {
        mrcnn_step_desc d = {.n_losses = 3, .scaler_enabled = v & 1, .scales_loss = v & 1, .growth_interval = 2,
                             .clip_enabled = v >= 2, .clip_value = 0.5f, .inv_world = 0.5f, .inv_accum = 1};
        int64_t n = MRCNN_CTL_SIZE(3);
        float *ctl = rnd(c, n, 0, 2);
        ctl[MRCNN_CTL_STEP_INDEX] = 7;
        if (v == 3) ctl[0] = INFINITY;
        mrcnn_tensor tc = devf(c, ctl, 1, &n);
        c->be->step.decide(c->be, &d, &tc);
        mrcnn_step_decide(&d, ctl);
        double *ref = dbl(c, ctl, n, 0), *b = hmalloc(c, 8 * n);
        check(c, 0, down(c, &tc), ref, b, n);
    }
}

/* The control-vector SGD equals opt.sgd_update with apply, grad scale and lr from ctl;
 * a skipped step (apply 0) leaves everything as it was. */
static void case_step_sgd_update(ctx *c) {
    FOR_ELEM(n) for (int apply = 0; apply <= 1; apply++) {
        float *p = rnd(c, n, -1, 1), *g = rnd(c, n, -1, 1), *v = rnd(c, n, -1, 1);
        int64_t nc = MRCNN_CTL_STEP;
        float *ctl = rnd(c, nc, 0, 1);
        ctl[MRCNN_CTL_APPLY] = (float)apply, ctl[MRCNN_CTL_GRAD_SCALE] = 0.25f, ctl[MRCNN_CTL_LR] = 0.01f;
        mrcnn_tensor tp = devf(c, p, 1, &n), tg = devf(c, g, 1, &n), tv = devf(c, v, 1, &n), tc = devf(c, ctl, 1, &nc);
        c->be->step.sgd_update(c->be, &tp, &tg, &tv, NULL, 0.9f, 1e-4f, &tc);
        double *rp = hmalloc(c, 8 * n + 8), *rv = hmalloc(c, 8 * n + 8), *bp = hmalloc(c, 8 * n + 8),
               *bv = hmalloc(c, 8 * n + 8);
        sgd_ref(n, p, g, v, NULL, 0.01f, 0.9f, 1e-4f, 0.25f, rp, rv, bp, bv);
        if (!apply)
            for (int64_t i = 0; i < n; i++) rp[i] = p[i], rv[i] = v[i], bp[i] = bv[i] = 0;
        check(c, 0, down(c, &tp), rp, bp, n);
        check(c, 0, down(c, &tv), rv, bv, n);
    }
}

/* ---- memory, streams, device: exact round trips ---- */

static void exact_roundtrip(ctx *c, int64_t n, void (*between)(ctx *c, mrcnn_tensor *t)) {
    float *x = rnd_special(c, n);
    mrcnn_tensor t = devf(c, x, 1, &n);
    if (between) between(c, &t);
    double *ref = dbl(c, x, n, 0), *b = hmalloc(c, 8 * n + 8);
    check(c, 0, down(c, &t), ref, b, n);
}

static void case_mem_alloc(ctx *c) { FOR_ELEM(n) exact_roundtrip(c, n, NULL); }
static void case_mem_free(ctx *c) { case_mem_alloc(c); } // dev() allocates, case_free frees
static void case_mem_write(ctx *c) { case_mem_alloc(c); }
static void case_mem_read(ctx *c) { case_mem_alloc(c); }
static void sync_between(ctx *c, mrcnn_tensor *t) { c->be->mem.sync(c->be); }
static void case_mem_sync(ctx *c) { FOR_ELEM(n) exact_roundtrip(c, n, sync_between); }

static void case_mem_zero(ctx *c) {
    FOR_ELEM(n) {
        mrcnn_tensor t = devf(c, rnd_special(c, n), 1, &n);
        c->be->mem.zero(c->be, &t);
        double *ref = hmalloc(c, 8 * n + 8), *b = hmalloc(c, 8 * n + 8);
        check(c, 0, down(c, &t), ref, b, n);
    }
}

/* Events order the compute stream: record then wait on it, then the data is intact. */
static void events_between(ctx *c, mrcnn_tensor *t) {
    void *ev = c->be->stream.event_create(c->be);
    c->be->stream.event_record(c->be, ev);
    c->be->stream.event_wait(c->be, ev);
    c->be->stream.event_destroy(c->be, ev);
}
static void case_stream_event_create(ctx *c) { FOR_ELEM(n) exact_roundtrip(c, n, events_between); }
static void case_stream_event_destroy(ctx *c) { case_stream_event_create(c); }
static void case_stream_event_record(ctx *c) { case_stream_event_create(c); }
static void case_stream_event_wait(ctx *c) { case_stream_event_create(c); }

/* A relu captured as a graph (where the backend captures; else run directly) and
 * replayed twice gives relu's result; graph_epoch does not move meanwhile. */
static void case_stream_graph_begin(ctx *c) {
    int64_t n = 1001;
    float *x = rnd_special(c, n);
    mrcnn_tensor tx = devf(c, x, 1, &n), ty = devf(c, rnd(c, n, -1, 1), 1, &n);
    c->be->nn.relu_forward(c->be, &tx, &ty); // once uncaptured first (capture-safe afterwards)
    uint64_t e0 = c->be->stream.graph_epoch(c->be);
    void *g = NULL;
    if (c->be->stream.graph_begin(c->be)) {
        c->be->nn.relu_forward(c->be, &tx, &ty);
        g = c->be->stream.graph_end(c->be);
    }
    for (int rep = 0; rep < 2; rep++) {
        c->be->mem.zero(c->be, &ty);
        if (g) c->be->stream.graph_launch(c->be, g);
        else c->be->nn.relu_forward(c->be, &tx, &ty);
    }
    if (g) c->be->stream.graph_destroy(c->be, g);
    double *ref = dbl(c, x, n, 0), *b = hmalloc(c, 8 * n);
    for (int64_t i = 0; i < n; i++) ref[i] = ref[i] < 0 ? 0 : ref[i];
    check(c, 0, down(c, &ty), ref, b, n);
    float got = (float)(c->be->stream.graph_epoch(c->be) - e0);
    double zero = 0;
    check(c, 0, &got, &zero, &zero, 1);
}
static void case_stream_graph_end(ctx *c) { case_stream_graph_begin(c); }
static void case_stream_graph_launch(ctx *c) { case_stream_graph_begin(c); }
static void case_stream_graph_destroy(ctx *c) { case_stream_graph_begin(c); }
static void case_stream_graph_epoch(ctx *c) { case_stream_graph_begin(c); }

/* run_if's body (a relu) with the count 5 above the threshold 4 and not above 5,
 * captured as a graph where the backend captures (its conditional node), else run
 * directly: the body's result when above; y untouched when not, on the CPU and in a
 * capture (a CUDA body outside one runs whatever the count). */
typedef struct {
    ctx *c;
    mrcnn_tensor *x, *y;
} run_if_relu_args;
static void run_if_relu(void *p) {
    run_if_relu_args *a = p;
    a->c->be->nn.relu_forward(a->c->be, a->x, a->y);
}
static void case_stream_run_if(ctx *c) {
    int64_t n = 1001, one = 1;
    float *x = rnd_special(c, n), five = 5;
    mrcnn_tensor tx = devf(c, x, 1, &n), ty = devf(c, rnd(c, n, -1, 1), 1, &n), count = devf(c, &five, 1, &one);
    c->be->nn.relu_forward(c->be, &tx, &ty); // once uncaptured first (capture-safe afterwards)
    double *ref = dbl(c, x, n, 0), *zero = hmalloc(c, 8 * n), *b = hmalloc(c, 8 * n);
    for (int64_t i = 0; i < n; i++) ref[i] = ref[i] < 0 ? 0 : ref[i], zero[i] = 0;
    run_if_relu_args args = {c, &tx, &ty};
    for (int above = 4; above <= 5; above++) {
        void *g = NULL;
        if (c->be->stream.graph_begin(c->be)) {
            c->be->stream.run_if(c->be, &count, above, run_if_relu, &args);
            g = c->be->stream.graph_end(c->be);
        }
        c->be->mem.zero(c->be, &ty);
        if (g) c->be->stream.graph_launch(c->be, g);
        else c->be->stream.run_if(c->be, &count, above, run_if_relu, &args);
        if (g) c->be->stream.graph_destroy(c->be, g);
        if (above < 5) check(c, 0, down(c, &ty), ref, b, n);
        else if (g || c->be->device == MRCNN_DEVICE_CPU) check(c, 0, down(c, &ty), zero, b, n);
    }
}

/* The device's answers are plausible: a name, a capability >= 0, memory >= 0. */
static void info_check(ctx *c, double v, int ok) {
    float got = ok ? 0 : 1;
    double zero = 0;
    check(c, 0, &got, &zero, &zero, 1);
    (void)v;
}
static void case_info_set_tf32(ctx *c) {
    c->be->info.set_tf32(c->be, 0); // fp32 stays fp32: the rest of the table runs after this
    info_check(c, 0, 1);
}
static void case_info_compute_capability(ctx *c) {
    int cc = c->be->info.compute_capability(c->be);
    info_check(c, cc, c->be->device == MRCNN_DEVICE_CPU ? cc == 0 : cc >= 50);
}
static void case_info_device_name(ctx *c) {
    char buf[128] = "";
    const char *s = c->be->info.device_name(c->be, buf, sizeof buf);
    info_check(c, 0, s == buf && buf[0] != 0);
}
static void case_info_memory_used_mb(ctx *c) {
    double m = c->be->info.memory_used_mb(c->be);
    info_check(c, m, m >= 0);
}
static void case_info_peak_mb(ctx *c) {
    double m = c->be->info.peak_mb(c->be, 0);
    info_check(c, m, m >= 0 || m == -1);
}

#include "op_table_det.inc"
#include "op_table_infer.inc"

/* ---- the table ---- */

typedef struct {
    const char *table, *name, *f64, *shapes;
    void (*run)(ctx *c);
    int numeric; // runs at each precision (else once: memory, streams, device)
    int has_f64; // compared with double reference ops (else invariants or exact values)
} op_case;

#define NUMERIC_mem 0
#define NUMERIC_nn 1
#define NUMERIC_loss 1
#define NUMERIC_opt 1
#define NUMERIC_det 1
#define NUMERIC_stream 0
#define NUMERIC_step 1
#define NUMERIC_info 0
/* The list's reference ops, named in a sizeof: one that is not declared fails here. */
#define F64(...) F64_N(__VA_ARGS__, F64_3, F64_2, F64_1, )(__VA_ARGS__)
#define F64_N(a, b, c, f, ...) f
#define F64_1(a) (int)sizeof(&a)
#define F64_2(a, b) (int)(sizeof(&a) + sizeof(&b))
#define F64_3(a, b, c) (int)(sizeof(&a) + sizeof(&b) + sizeof(&c))
#define NO_F64 0
#define BE_OP(table, name, params, args, trace, fields, check, f64, shapes)                                            \
    {#table, #name, #f64, shapes, case_##table##_##name, NUMERIC_##table, f64},
#define BE_OPR(table, name, ret, params, args, trace, fields, check, f64, shapes)                                      \
    {#table, #name, #f64, shapes, case_##table##_##name, NUMERIC_##table, f64},
static const op_case CASES[] = {
#include "mrcnn/backend_ops.def"
};
#undef BE_OP
#undef BE_OPR
#undef F64
#undef F64_N
#undef F64_1
#undef F64_2
#undef F64_3
#undef NO_F64

static int g_rows, g_fail;

static void print_row(const op_case *oc, const char *prec, int dir, const ctx *c) {
    char op[64];
    snprintf(op, sizeof op, "%s.%s", oc->table, oc->name);
    printf("%-36s %-5s %-3s  err %-10.3g bound %-10.3g ratio %-8.3g n %-7ld %s %s\n", op, prec, dir ? "bwd" : "fwd",
           c->err[dir], c->bound[dir], c->ratio[dir], c->n[dir], c->fail[dir] ? "FAIL" : "pass", oc->has_f64 ? "f64" : "");
    g_rows++;
    g_fail += c->fail[dir];
}

static void run_case(const op_case *oc, ctx *c, const char *prec) {
    memset(c->err, 0, sizeof c->err), memset(c->bound, 0, sizeof c->bound), memset(c->ratio, 0, sizeof c->ratio);
    memset(c->n, 0, sizeof c->n), memset(c->fail, 0, sizeof c->fail);
    oc->run(c);
    case_free(c);
    int any = 0;
    for (int dir = 0; dir < 2; dir++)
        if (c->n[dir]) print_row(oc, prec, dir, c), any = 1;
    if (!any) { // a case that checked nothing is a failure, not a pass
        printf("%-36s %-5s      no element checked                                      FAIL\n", oc->name, prec);
        g_rows++, g_fail++;
    }
}

int main(int argc, char **argv) {
    const char *which = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--backend cpu|cuda]\n", argv[0]);
            return 2;
        }
    }
    mrcnn_backend *be;
    if (!strcmp(which, "cuda")) {
        const char *why = NULL;
        be = mrcnn_backend_cuda_create(0, &why);
        if (!be) return test_gpu_skip(why);
    } else if (!strcmp(which, "cpu")) {
        be = mrcnn_backend_cpu_create();
    } else {
        fprintf(stderr, "test_op_table: unknown backend '%s' (cpu or cuda)\n", which);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int n_cases = (int)(sizeof CASES / sizeof CASES[0]);
    const struct {
        mrcnn_dtype p;
        const char *name;
        double up, eta;
    } precs[3] = {{MRCNN_DTYPE_F32, "fp32", 0, 0}, {MRCNN_DTYPE_BF16, "bf16", 0x1p-8, 0}, {MRCNN_DTYPE_F16, "fp16", 0x1p-11, 0x1p-25}};
    printf("op table: %d entries of include/mrcnn/backend_ops.def on the %s backend against the f64 reference\n",
           n_cases, be->name);
    ctx c = {.be = be, .seed = 1234};
    for (int i = 0; i < n_cases; i++) {
        const op_case *oc = &CASES[i];
        for (int p = 0; p < (oc->numeric ? 3 : 1); p++) {
            /* The CUDA backend keeps activations in the storage dtype: its bf16/fp16 rows
             * need the inputs staged in that dtype, which this table does not do yet. */
            if (p > 0 && be->device != MRCNN_DEVICE_CPU) {
                printf("%s.%-30s %-5s      not run: reduced-precision staging for device tensors\n", oc->table,
                       oc->name, precs[p].name);
                continue;
            }
            be->set_precision(be, precs[p].p);
            c.p = precs[p].p, c.up = precs[p].up, c.eta = precs[p].eta;
            run_case(oc, &c, oc->numeric ? precs[p].name : "any");
        }
    }
    be->set_precision(be, MRCNN_DTYPE_F32);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("summary: %d entries, %d rows, %d failed, %.2f s\n", n_cases, g_rows, g_fail,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    mrcnn_backend_destroy(be);
    return g_fail ? 1 : 0;
}
