/* Every backward of the CPU ops against central finite differences, in double (the
 * _f64 build of the very same source). The objective is L = sum(gy * y) for a
 * random gy (or dloss * loss for the losses), so the backward gets dy = gy. Every
 * gradient buffer is pre-filled with random values and the check is on the
 * increment, which tests the accumulate (+=) contract at the same time. Inputs stay
 * away from kinks (ReLU at 0, max-pool ties, smooth-L1 at |d| = beta and d = 0),
 * where finite differences are meaningless. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/ops.h"
#include "test_util.h"

#define GRAD_TOL 1e-6 // max|a-b|/max|b| in double; NMSE must stay below its square

typedef double (*objective_fn)(void *ctx);

static double *dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static double *drand(int64_t n, double lo, double hi, uint64_t seed) {
    double *x = dalloc(n);
    test_fill_uniform_f64(x, n, lo, hi, seed);
    return x;
}
static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* A gradient buffer pre-filled with noise; increment() gives what the backward added. */
typedef struct {
    double *g, *g0, *inc;
    int64_t n;
} grad_buf;

static grad_buf gb_make(int64_t n, uint64_t seed) {
    grad_buf b = {drand(n, -1, 1, seed), dalloc(n), dalloc(n), n};
    memcpy(b.g0, b.g, sizeof(double) * (size_t)n);
    return b;
}
static const double *gb_inc(grad_buf *b) {
    for (int64_t i = 0; i < b->n; i++) b->inc[i] = b->g[i] - b->g0[i];
    return b->inc;
}
static void gb_free(grad_buf *b) { free(b->g), free(b->g0), free(b->inc); }

/* Central differences of f over every element of param, compared with the analytic
 * gradient. */
static void check_grad(const char *what, objective_fn f, void *ctx, double *param, int64_t n, const double *analytic,
                       double h) {
    double *fd = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        double keep = param[i];
        param[i] = keep + h;
        double lp = f(ctx);
        param[i] = keep - h;
        double lm = f(ctx);
        param[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
    }
    double err = test_max_rel_err_f64(analytic, fd, n), nmse = test_nmse_f64(analytic, fd, n);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(fd[i]));
    printf("  %-52s n=%-5lld max|a-b|/max|b| = %.2e  nmse = %.2e\n", what, (long long)n, err, nmse);
    free(fd);
    if (!(scale > 0)) fail_msg("%s: the finite-difference gradient is all zero; the check would be vacuous", what);
    if (!(err <= GRAD_TOL && nmse <= GRAD_TOL * GRAD_TOL))
        fail_msg("%s: gradient error %.3g (nmse %.3g) above %.1g", what, err, nmse, GRAD_TOL);
}

static void expect_same(const char *what, const double *a, const double *b, int64_t n) {
    double err = test_max_rel_err_f64(a, b, n);
    if (!(err <= 1e-12)) fail_msg("%s: differs by %.3g", what, err);
}

/* ---------------- conv2d ---------------- */

typedef struct {
    mrcnn_conv2d_desc d;
    double *x, *w, *b, *gy, *y;
    int64_t ny;
} conv_ctx;

static double conv_obj(void *p) {
    conv_ctx *c = p;
    mrcnn_conv2d_forward_f64(&c->d, c->x, c->w, c->b, c->y);
    return dot(c->gy, c->y, c->ny);
}

static void grad_conv_case(const char *name, mrcnn_conv2d_desc d, uint64_t seed) {
    int P = mrcnn_conv2d_out_h(&d), Q = mrcnn_conv2d_out_w(&d);
    int64_t nx = (int64_t)d.n * d.h * d.w * d.c, nw = (int64_t)d.k * d.r * d.s * d.c, ny = (int64_t)d.n * P * Q * d.k;
    conv_ctx c = {d, drand(nx, -1, 1, seed), drand(nw, -1, 1, seed + 1), drand(d.k, -1, 1, seed + 2),
                  drand(ny, -1, 1, seed + 3), dalloc(ny), ny};
    grad_buf dx = gb_make(nx, seed + 4), dw = gb_make(nw, seed + 5), db = gb_make(d.k, seed + 6), dw2 = gb_make(nw, seed + 7);
    mrcnn_conv2d_backward_data_f64(&d, c.gy, c.w, dx.g);
    mrcnn_conv2d_backward_filter_f64(&d, c.x, c.gy, dw.g, db.g);
    mrcnn_conv2d_backward_filter_f64(&d, c.x, c.gy, dw2.g, NULL);
    char what[96];
    snprintf(what, sizeof what, "conv2d %s dx", name);
    check_grad(what, conv_obj, &c, c.x, nx, gb_inc(&dx), 1e-4);
    snprintf(what, sizeof what, "conv2d %s dw", name);
    check_grad(what, conv_obj, &c, c.w, nw, gb_inc(&dw), 1e-4);
    snprintf(what, sizeof what, "conv2d %s db", name);
    check_grad(what, conv_obj, &c, c.b, d.k, gb_inc(&db), 1e-4);
    expect_same("conv2d dw without db", gb_inc(&dw2), gb_inc(&dw), nw);
    free(c.x), free(c.w), free(c.b), free(c.gy), free(c.y);
    gb_free(&dx), gb_free(&dw), gb_free(&db), gb_free(&dw2);
}

static void test_grad_conv2d(void **state) {
    grad_conv_case("2x7x5x3->4 3x3 s2 p1", mrcnn_conv2d_desc_make(2, 7, 5, 3, 4, 3, 2, 1), 100);
    grad_conv_case("2x7x5x3->4 3x3 s1 p2 dil2", (mrcnn_conv2d_desc){2, 7, 5, 3, 4, 3, 3, 1, 1, 2, 2, 2, 2}, 200);
    grad_conv_case("1x9x8x4->3 3x2 s(2,1) p(1,0) dil(1,3)", (mrcnn_conv2d_desc){1, 9, 8, 4, 3, 3, 2, 2, 1, 1, 0, 1, 3}, 300);
    grad_conv_case("2x5x7x6->5 1x1 (pointwise GEMM)", mrcnn_conv2d_desc_make(2, 5, 7, 6, 5, 1, 1, 0), 400);
    grad_conv_case("2x7x9x6->5 1x1 s2", mrcnn_conv2d_desc_make(2, 7, 9, 6, 5, 1, 2, 0), 500);
    grad_conv_case("1x13x11x3->4 7x7 s2 p3 (stem)", mrcnn_conv2d_desc_make(1, 13, 11, 3, 4, 7, 2, 3), 600);
}

/* Shapes with several column blocks (one boundary inside an image), too large for
 * per-element differences: conv is bilinear, so <gy, conv(x, w)> must equal
 * <dx, x> and <dw, w> exactly, and db the sums of gy. A wrong element anywhere
 * breaks the identity (random x and w are not orthogonal to an error). */
static void adjoint_case(const char *name, mrcnn_conv2d_desc d, uint64_t seed) {
    int P = mrcnn_conv2d_out_h(&d), Q = mrcnn_conv2d_out_w(&d);
    int64_t nx = (int64_t)d.n * d.h * d.w * d.c, nw = (int64_t)d.k * d.r * d.s * d.c, ny = (int64_t)d.n * P * Q * d.k;
    double *x = drand(nx, -1, 1, seed), *w = drand(nw, -1, 1, seed + 1), *gy = drand(ny, -1, 1, seed + 2), *y = dalloc(ny);
    grad_buf dx = gb_make(nx, seed + 3), dw = gb_make(nw, seed + 4), db = gb_make(d.k, seed + 5);
    mrcnn_conv2d_forward_f64(&d, x, w, NULL, y);
    mrcnn_conv2d_backward_data_f64(&d, gy, w, dx.g);
    mrcnn_conv2d_backward_filter_f64(&d, x, gy, dw.g, db.g);
    double l = dot(gy, y, ny), lx = dot(gb_inc(&dx), x, nx), lw = dot(gb_inc(&dw), w, nw);
    double scale = 0; // sum |gy * y| bounds the rounding of every dot product
    for (int64_t i = 0; i < ny; i++) scale += fabs(gy[i] * y[i]);
    double *sums = dalloc(d.k);
    for (int64_t i = 0; i < ny; i++) sums[i % d.k] += gy[i];
    double eb = test_max_rel_err_f64(gb_inc(&db), sums, d.k);
    printf("  conv2d %-40s |<gy,y>-<dx,x>| = %.2e, |<gy,y>-<dw,w>| = %.2e (of %.2e), db %.2e\n", name, fabs(l - lx),
           fabs(l - lw), scale, eb);
    assert_true(fabs(l - lx) <= 1e-12 * scale);
    assert_true(fabs(l - lw) <= 1e-12 * scale);
    assert_true(eb <= 1e-12);
    free(x), free(w), free(gy), free(y), free(sums);
    gb_free(&dx), gb_free(&dw), gb_free(&db);
}

/* One thread: blocks in sequence, some crossing an image boundary. Three threads:
 * the per-thread block path (forward, filter) and input-row chunks (data). */
static void test_adjoint_conv2d_multiblock(void **state) {
    const int threads[2] = {1, 3};
    int keep = omp_get_max_threads();
    for (int i = 0; i < 2; i++) {
        omp_set_num_threads(threads[i]);
        printf("  %d thread(s):\n", threads[i]);
        adjoint_case("3x31x29x64->8 3x3 s1 p1", mrcnn_conv2d_desc_make(3, 31, 29, 64, 8, 3, 1, 1), 700);
        adjoint_case("3x61x45x96->5 3x3 s2 p2 dil2", (mrcnn_conv2d_desc){3, 61, 45, 96, 5, 3, 3, 2, 2, 2, 2, 2, 2}, 800);
        adjoint_case("2x70x50x40->36 1x1 s1 (pointwise)", mrcnn_conv2d_desc_make(2, 70, 50, 40, 36, 1, 1, 0), 900);
    }
    omp_set_num_threads(keep);
}

/* ---------------- deconv 2x2 s2 ---------------- */

typedef struct {
    int n, h, w, c, k;
    double *x, *wt, *b, *gy, *y;
    int64_t ny;
} deconv_ctx;

static double deconv_obj(void *p) {
    deconv_ctx *c = p;
    mrcnn_deconv2x2_forward_f64(c->n, c->h, c->w, c->c, c->k, c->x, c->wt, c->b, c->y);
    return dot(c->gy, c->y, c->ny);
}

static void test_grad_deconv2x2(void **state) {
    const int n = 2, h = 3, w = 5, c = 7, k = 4;
    int64_t nx = n * h * w * c, nw = k * 4 * c, ny = n * 4 * h * w * k;
    deconv_ctx t = {n, h, w, c, k, drand(nx, -1, 1, 1), drand(nw, -1, 1, 2), drand(k, -1, 1, 3), drand(ny, -1, 1, 4),
                    dalloc(ny), ny};
    grad_buf dx = gb_make(nx, 5), dw = gb_make(nw, 6), db = gb_make(k, 7);
    mrcnn_deconv2x2_backward_f64(n, h, w, c, k, t.x, t.wt, t.gy, dx.g, dw.g, db.g);
    check_grad("deconv2x2 2x3x5x7->4 dx", deconv_obj, &t, t.x, nx, gb_inc(&dx), 1e-4);
    check_grad("deconv2x2 dw", deconv_obj, &t, t.wt, nw, gb_inc(&dw), 1e-4);
    check_grad("deconv2x2 db", deconv_obj, &t, t.b, k, gb_inc(&db), 1e-4);
    /* Each output alone (the others NULL) gives the same increments. */
    grad_buf dx1 = gb_make(nx, 8), dw1 = gb_make(nw, 9), db1 = gb_make(k, 10);
    mrcnn_deconv2x2_backward_f64(n, h, w, c, k, t.x, t.wt, t.gy, dx1.g, NULL, NULL);
    mrcnn_deconv2x2_backward_f64(n, h, w, c, k, t.x, t.wt, t.gy, NULL, dw1.g, NULL);
    mrcnn_deconv2x2_backward_f64(n, h, w, c, k, t.x, t.wt, t.gy, NULL, NULL, db1.g);
    expect_same("deconv2x2 dx alone", gb_inc(&dx1), gb_inc(&dx), nx);
    expect_same("deconv2x2 dw alone", gb_inc(&dw1), gb_inc(&dw), nw);
    expect_same("deconv2x2 db alone", gb_inc(&db1), gb_inc(&db), k);
    free(t.x), free(t.wt), free(t.b), free(t.gy), free(t.y);
    gb_free(&dx), gb_free(&dw), gb_free(&db), gb_free(&dx1), gb_free(&dw1), gb_free(&db1);
}

/* ---------------- ReLU, add ---------------- */

typedef struct {
    int64_t m;
    int c;
    double *x, *a, *b, *gy, *y;
} ew_ctx;

static double relu_obj(void *p) {
    ew_ctx *e = p;
    mrcnn_relu_forward_f64(e->m, e->x, e->y);
    return dot(e->gy, e->y, e->m);
}
static double add_obj(void *p) {
    ew_ctx *e = p;
    mrcnn_add_forward_f64(e->m, e->a, e->b, e->y);
    return dot(e->gy, e->y, e->m);
}

static void test_grad_relu(void **state) {
    const int64_t n = 3 * 5 * 7;
    ew_ctx e = {n, 1, drand(n, 0.1, 1, 1), NULL, NULL, drand(n, -1, 1, 2), dalloc(n)};
    double *sign = drand(n, -1, 1, 3);
    for (int64_t i = 0; i < n; i++) e.x[i] *= sign[i] < 0 ? -1 : 1; // |x| >= 0.1: no kink within h
    mrcnn_relu_forward_f64(n, e.x, e.y);
    grad_buf dx = gb_make(n, 4); // prefilled: relu_backward writes dx, so none of g0 may show through
    mrcnn_relu_backward_f64(n, e.y, e.gy, dx.g);
    check_grad("relu 105 dx", relu_obj, &e, e.x, n, dx.g, 1e-4);
    free(e.x), free(e.gy), free(e.y), free(sign);
    gb_free(&dx);
}

static void test_grad_add(void **state) {
    const int64_t n = 3 * 5 * 7;
    ew_ctx e = {n, 1, NULL, drand(n, -1, 1, 1), drand(n, -1, 1, 2), drand(n, -1, 1, 3), dalloc(n)};
    grad_buf da = gb_make(n, 4), db = gb_make(n, 5), da1 = gb_make(n, 6);
    mrcnn_add_backward_f64(n, e.gy, da.g, db.g);
    check_grad("add da", add_obj, &e, e.a, n, gb_inc(&da), 1e-4);
    check_grad("add db", add_obj, &e, e.b, n, gb_inc(&db), 1e-4);
    mrcnn_add_backward_f64(n, e.gy, da1.g, NULL);
    expect_same("add da alone", gb_inc(&da1), gb_inc(&da), n);
    free(e.a), free(e.b), free(e.gy), free(e.y);
    gb_free(&da), gb_free(&db), gb_free(&da1);
}

/* ---------------- max-pool ---------------- */

typedef struct {
    mrcnn_pool2d_desc d;
    double *x, *gy, *y;
    int64_t ny;
} pool_ctx;

static double pool_obj(void *p) {
    pool_ctx *c = p;
    mrcnn_maxpool2d_forward_f64(&c->d, c->x, c->y);
    return dot(c->gy, c->y, c->ny);
}

static void grad_pool_case(const char *name, mrcnn_pool2d_desc d, uint64_t seed) {
    int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * mrcnn_pool2d_out_h(&d) * mrcnn_pool2d_out_w(&d) * d.c;
    pool_ctx c = {d, dalloc(nx), drand(ny, -1, 1, seed), dalloc(ny), ny};
    /* Distinct values 0.01 apart in a scrambled order: no ties within h. */
    for (int64_t i = 0; i < nx; i++) c.x[i] = (double)((i * 7919 + seed) % nx) * 0.01 - 1;
    grad_buf dx = gb_make(nx, seed + 1);
    mrcnn_maxpool2d_backward_f64(&d, c.x, c.gy, dx.g);
    check_grad(name, pool_obj, &c, c.x, nx, gb_inc(&dx), 1e-4);
    free(c.x), free(c.gy), free(c.y);
    gb_free(&dx);
}

static void test_grad_maxpool(void **state) {
    grad_pool_case("maxpool 3x3 s2 p1 2x9x7x5 dx", (mrcnn_pool2d_desc){2, 9, 7, 5, 3, 2, 1}, 11);
    grad_pool_case("maxpool 3x3 s2 p1 1x7x6x33 dx (channel chunks)", (mrcnn_pool2d_desc){1, 7, 6, 33, 3, 2, 1}, 12);
    grad_pool_case("maxpool 1x1 s2 (P6) 1x7x9x4 dx", (mrcnn_pool2d_desc){1, 7, 9, 4, 1, 2, 0}, 13);
    grad_pool_case("maxpool 2x2 s2 1x5x7x3 dx", (mrcnn_pool2d_desc){1, 5, 7, 3, 2, 2, 0}, 14);
}

/* ---------------- upsample + add ---------------- */

typedef struct {
    int n, h, w, H, W, c;
    double *top, *lat, *gy, *y;
    int64_t ny;
} up_ctx;

static double up_obj(void *p) {
    up_ctx *u = p;
    mrcnn_upsample_add_forward_f64(u->n, u->h, u->w, u->H, u->W, u->c, u->top, u->lat, u->y);
    return dot(u->gy, u->y, u->ny);
}

static void grad_up_case(const char *name, int n, int h, int w, int H, int W, int c, uint64_t seed) {
    int64_t nt = (int64_t)n * h * w * c, ny = (int64_t)n * H * W * c;
    up_ctx u = {n, h, w, H, W, c, drand(nt, -1, 1, seed), drand(ny, -1, 1, seed + 1), drand(ny, -1, 1, seed + 2), dalloc(ny), ny};
    grad_buf dt = gb_make(nt, seed + 3), dl = gb_make(ny, seed + 4), dt1 = gb_make(nt, seed + 5), dl1 = gb_make(ny, seed + 6);
    mrcnn_upsample_add_backward_f64(n, h, w, H, W, c, u.gy, dt.g, dl.g);
    char what[96];
    snprintf(what, sizeof what, "upsample_add %s dtop", name);
    check_grad(what, up_obj, &u, u.top, nt, gb_inc(&dt), 1e-4);
    snprintf(what, sizeof what, "upsample_add %s dlateral", name);
    check_grad(what, up_obj, &u, u.lat, ny, gb_inc(&dl), 1e-4);
    mrcnn_upsample_add_backward_f64(n, h, w, H, W, c, u.gy, dt1.g, NULL);
    mrcnn_upsample_add_backward_f64(n, h, w, H, W, c, u.gy, NULL, dl1.g);
    expect_same("upsample_add dtop alone", gb_inc(&dt1), gb_inc(&dt), nt);
    expect_same("upsample_add dlateral alone", gb_inc(&dl1), gb_inc(&dl), ny);
    free(u.top), free(u.lat), free(u.gy), free(u.y);
    gb_free(&dt), gb_free(&dl), gb_free(&dt1), gb_free(&dl1);
}

static void test_grad_upsample_add(void **state) {
    grad_up_case("2x3x4->6x8 c5", 2, 3, 4, 6, 8, 5, 21);
    grad_up_case("1x4x3->7x5 c3 (odd)", 1, 4, 3, 7, 5, 3, 22);
}

/* ---------------- linear ---------------- */

typedef struct {
    int n, in, out;
    double *x, *w, *b, *gy, *y;
} lin_ctx;

static double lin_obj(void *p) {
    lin_ctx *l = p;
    mrcnn_linear_forward_f64(l->n, l->in, l->out, l->x, l->w, l->b, l->y);
    return dot(l->gy, l->y, (int64_t)l->n * l->out);
}

static void test_grad_linear(void **state) {
    const int n = 5, in = 13, out = 7;
    lin_ctx l = {n, in, out, drand(n * in, -1, 1, 1), drand(out * in, -1, 1, 2), drand(out, -1, 1, 3),
                 drand(n * out, -1, 1, 4), dalloc(n * out)};
    grad_buf dx = gb_make(n * in, 5), dw = gb_make(out * in, 6), db = gb_make(out, 7);
    mrcnn_linear_backward_f64(n, in, out, l.x, l.w, l.gy, dx.g, dw.g, db.g);
    check_grad("linear 5x13->7 dx", lin_obj, &l, l.x, n * in, gb_inc(&dx), 1e-4);
    check_grad("linear dw", lin_obj, &l, l.w, out * in, gb_inc(&dw), 1e-4);
    check_grad("linear db", lin_obj, &l, l.b, out, gb_inc(&db), 1e-4);
    grad_buf dw1 = gb_make(out * in, 8);
    mrcnn_linear_backward_f64(n, in, out, l.x, l.w, l.gy, NULL, dw1.g, NULL);
    expect_same("linear dw alone", gb_inc(&dw1), gb_inc(&dw), out * in);
    free(l.x), free(l.w), free(l.b), free(l.gy), free(l.y);
    gb_free(&dx), gb_free(&dw), gb_free(&db), gb_free(&dw1);
}

/* ---------------- losses ---------------- */

typedef struct {
    int64_t n;
    int c;
    double *x, *t, *wt, beta, norm, dloss;
    const int32_t *labels;
} loss_ctx;

static double bce_obj(void *p) {
    loss_ctx *l = p;
    return l->dloss * mrcnn_bce_logits_forward_f64(l->n, l->x, l->t, l->wt, l->norm);
}
static double ce_obj(void *p) {
    loss_ctx *l = p;
    return l->dloss * mrcnn_softmax_ce_forward_f64((int)l->n, l->c, l->x, l->labels, l->norm);
}
static double sl1_obj(void *p) {
    loss_ctx *l = p;
    return l->dloss * mrcnn_smooth_l1_forward_f64(l->n, l->x, l->t, l->wt, l->beta, l->norm);
}

static void test_grad_bce_logits(void **state) {
    const int64_t n = 41;
    double *wt = drand(n, 0, 2, 3);
    for (int use_w = 0; use_w < 2; use_w++) {
        loss_ctx l = {n, 0, drand(n, -5, 5, 1), drand(n, 0, 1, 2), use_w ? wt : NULL, 0, 3.0, 0.7, NULL};
        int neg = 0;
        for (int64_t i = 0; i < n; i++) neg += l.x[i] < 0;
        assert_true(neg > 0 && neg < n); // both branches of the stable sigmoid
        grad_buf dx = gb_make(n, 4);
        mrcnn_bce_logits_backward_f64(n, l.x, l.t, l.wt, l.norm, l.dloss, dx.g);
        check_grad(use_w ? "bce_logits dx (weighted)" : "bce_logits dx", bce_obj, &l, l.x, n, gb_inc(&dx), 1e-5);
        free(l.x), free(l.t);
        gb_free(&dx);
    }
    free(wt);
}

static void test_grad_softmax_ce(void **state) {
    const int rows = 9, cls = 5;
    int32_t labels[9] = {0, 4, -1, 2, 3, -1, 1, 4, 0};
    loss_ctx l = {rows, cls, drand(rows * cls, -3, 3, 1), NULL, NULL, 0, 7.0, 1.3, labels};
    grad_buf dx = gb_make(rows * cls, 2);
    mrcnn_softmax_ce_backward_f64(rows, cls, l.x, labels, l.norm, l.dloss, dx.g);
    check_grad("softmax_ce 9x5 dx (2 rows ignored)", ce_obj, &l, l.x, rows * cls, gb_inc(&dx), 1e-5);
    for (int j = 0; j < cls; j++) assert_true(dx.inc[2 * cls + j] == 0 && dx.inc[5 * cls + j] == 0);
    free(l.x);
    gb_free(&dx);
}

static void test_grad_smooth_l1(void **state) {
    const int64_t n = 48;
    double *wt = drand(n, 0, 2, 3);
    for (int bi = 0; bi < 2; bi++) {
        double beta = bi ? 1.0 / 9 : 0;
        for (int use_w = 0; use_w < 2; use_w++) {
            loss_ctx l = {n, 0, dalloc(n), drand(n, -1, 1, 1), use_w ? wt : NULL, beta, 4.0, 0.9, NULL};
            /* |d| alternates between (0.01, 0.1) (quadratic zone) and (0.12, 0.5) with
             * both signs: away from 0 and from beta = 1/9. */
            double *u = drand(n, 0, 1, 2);
            for (int64_t i = 0; i < n; i++) {
                double mag = i % 2 ? 0.01 + 0.09 * u[i] : 0.12 + 0.38 * u[i];
                l.x[i] = l.t[i] + (i % 4 < 2 ? mag : -mag);
            }
            grad_buf dx = gb_make(n, 5);
            mrcnn_smooth_l1_backward_f64(n, l.x, l.t, l.wt, beta, l.norm, l.dloss, dx.g);
            char what[96];
            snprintf(what, sizeof what, "smooth_l1 beta=%s dx%s", bi ? "1/9" : "0 (L1)", use_w ? " (weighted)" : "");
            check_grad(what, sl1_obj, &l, l.x, n, gb_inc(&dx), 1e-5);
            free(l.x), free(l.t), free(u);
            gb_free(&dx);
        }
    }
    free(wt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_conv2d),
        cmocka_unit_test(test_adjoint_conv2d_multiblock),
        cmocka_unit_test(test_grad_deconv2x2),
        cmocka_unit_test(test_grad_relu),
        cmocka_unit_test(test_grad_add),
        cmocka_unit_test(test_grad_maxpool),
        cmocka_unit_test(test_grad_upsample_add),
        cmocka_unit_test(test_grad_linear),
        cmocka_unit_test(test_grad_bce_logits),
        cmocka_unit_test(test_grad_softmax_ce),
        cmocka_unit_test(test_grad_smooth_l1),
    };
    return cmocka_run_group_tests_name("grad_ops", tests, NULL, NULL);
}
