/* Every op of the CUDA backend against the CPU backend, at fp32, fp16 and bf16.
 *
 * Inputs are fresh random values (never zeros), rounded on the host to the storage
 * dtype so that both backends see identical inputs. Overwritten outputs are
 * poisoned with NaN on both sides before each run, so an element the GPU leaves
 * unwritten shows; accumulated outputs (+=) start from the same random values, so
 * an op that overwrites instead of adding shows too. A NaN or Inf in a GPU result
 * fails regardless of the error metric.
 *
 * Tolerances, as max|gpu - cpu| / max|cpu| per tensor:
 *  - fp32 (TF32 off: the backend default, plus NVIDIA_TF32_OVERRIDE=0): 1e-5. Neither
 *    side pins FMA contraction (nvcc contracts a*b+c, gcc in C11 mode does not); one
 *    contraction changes a result by at most one rounding, about 6e-8 relative, and
 *    the summation order of cuDNN/cuBLAS differs from the CPU's anyway, so the
 *    tolerance, not the compiler flags, absorbs both.
 *  - fp16/bf16 against the CPU backend's rounded-storage mode: 1e-2 (one bf16 ulp is
 *    2^-8 of a value, and values straddling a rounding boundary differ by one ulp).
 *
 * Odd channel counts at the model's own shapes have their own tests: the stem (C = 3),
 * the RPN head's objectness and box convs (K = 3, K = 12) and the mask logits (K = 91).
 *
 * Without a GPU (or in a GPU=0 build) the program prints "skip [gpu]: no GPU (...)" and
 * exits 77, which the runner counts as skipped; when MRCNN_REQUIRE lists gpu, or when
 * the machine has a GPU but the backend did not start, that is a failure: exit 1
 * (test_gpu_skip, tests/common/test_util.h). MRCNN_CUDA_OPS_SELFCHECK=1 runs the
 * harness with the CPU backend in the GPU's slot (tests/cuda/test_cuda_ops_selfcheck.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/step_ctl.h"
#include "mrcnn/backend.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "test_util.h"

static mrcnn_backend *G;     // CUDA backend, conv+bias+ReLU path chosen per shape
static mrcnn_backend *GF;    // CUDA backend with the fused conv+bias+ReLU call forced on
static mrcnn_backend *C;     // CPU backend (the oracle)
static mrcnn_dtype P;        // storage dtype of the current pass
static int g_selfcheck;      // MRCNN_CUDA_OPS_SELFCHECK=1: G and GF are CPU backends (tests the harness)
static uint64_t g_seed = 1000;

static const mrcnn_dtype k_precisions[3] = {MRCNN_DTYPE_F32, MRCNN_DTYPE_F16, MRCNN_DTYPE_BF16};

static double tol(void) { return P == MRCNN_DTYPE_F32 ? 1e-5 : 1e-2; }

static void set_precision(mrcnn_dtype p) {
    P = p;
    C->set_precision(C, p);
    G->set_precision(G, p);
    GF->set_precision(GF, p);
}

/* ---- paired tensors: the same values on the GPU (dtype gdt) and the CPU (fp32) ---- */

typedef struct {
    mrcnn_tensor g, c;
    int64_t n;
    const char *name;
} tpair;

static size_t dsize(mrcnn_dtype dt) { return mrcnn_dtype_size(dt); }

static tpair tp_new(mrcnn_dtype gdt, int ndim, const int64_t *shape, const char *name) {
    tpair p;
    memset(&p, 0, sizeof p);
    p.name = name;
    mrcnn_dtype cdt = (gdt == MRCNN_DTYPE_I32 || gdt == MRCNN_DTYPE_U8) ? gdt : MRCNN_DTYPE_F32;
    if (g_selfcheck) gdt = cdt; // the CPU backend stores fp32 and rounds
    mrcnn_tensor tg = mrcnn_tensor_view(NULL, gdt, G->device, ndim, shape);
    p.n = mrcnn_tensor_numel(&tg);
    tg.data = G->mem.alloc(G, (size_t)p.n * dsize(gdt) + 16, name);
    mrcnn_tensor tc = mrcnn_tensor_view(NULL, cdt, C->device, ndim, shape);
    tc.data = C->mem.alloc(C, (size_t)p.n * dsize(cdt) + 16, name);
    p.g = tg;
    p.c = tc;
    return p;
}

static void tp_free(tpair *p) {
    G->mem.free(G, p->g.data);
    C->mem.free(C, p->c.data);
}

/* Writes host floats (already representable in the GPU dtype) to both sides. */
static void tp_write(tpair *p, const float *h) {
    C->mem.write(C, &p->c, h);
    if (p->g.dtype == MRCNN_DTYPE_F32) {
        G->mem.write(G, &p->g, h);
    } else {
        uint16_t *bits = malloc((size_t)p->n * 2 + 2);
        for (int64_t i = 0; i < p->n; i++)
            bits[i] = p->g.dtype == MRCNN_DTYPE_F16 ? mrcnn_f32_to_f16(h[i]) : mrcnn_f32_to_bf16(h[i]);
        G->mem.write(G, &p->g, bits);
        free(bits);
    }
    G->mem.sync(G);
}

/* Random values in [lo, hi), never exactly zero, rounded to the GPU dtype. */
static void tp_fill(tpair *p, float lo, float hi) {
    float *h = malloc((size_t)p->n * sizeof(float) + 4);
    test_fill_uniform(h, p->n, lo, hi, g_seed++);
    for (int64_t i = 0; i < p->n; i++) {
        if (h[i] == 0.0f) h[i] = 0.5f * (hi > 0 ? hi : lo);
        h[i] = mrcnn_round_to(h[i], p->g.dtype);
    }
    tp_write(p, h);
    free(h);
}

static void tp_poison(tpair *p) {
    float *h = malloc((size_t)p->n * sizeof(float) + 4);
    for (int64_t i = 0; i < p->n; i++) h[i] = NAN;
    tp_write(p, h);
    free(h);
}

static float *tp_read_gpu(const tpair *p) {
    float *h = malloc((size_t)p->n * sizeof(float) + 4);
    if (p->g.dtype == MRCNN_DTYPE_F32) {
        G->mem.read(G, &p->g, h);
    } else {
        uint16_t *bits = malloc((size_t)p->n * 2 + 2);
        G->mem.read(G, &p->g, bits);
        for (int64_t i = 0; i < p->n; i++)
            h[i] = p->g.dtype == MRCNN_DTYPE_F16 ? mrcnn_f16_to_f32(bits[i]) : mrcnn_bf16_to_f32(bits[i]);
        free(bits);
    }
    return h;
}

/* Fails unless every GPU element is finite and max|gpu - cpu| / max|cpu| < t. */
static void tp_expect_tol(const tpair *p, double t, const char *op) {
    float *a = tp_read_gpu(p);
    float *b = malloc((size_t)p->n * sizeof(float) + 4);
    C->mem.read(C, &p->c, b);
    int64_t bad = -1;
    for (int64_t i = 0; i < p->n && bad < 0; i++)
        if (!isfinite(a[i]) || !isfinite(b[i])) bad = i;
    double err = bad >= 0 ? INFINITY : test_max_rel_err(a, b, p->n);
    printf("  %-22s %-5s %-10s n=%-8lld max rel err %.3g (tol %.0e)\n", op, mrcnn_dtype_name(P), p->name,
           (long long)p->n, err, t);
    if (bad >= 0) {
        float ga = a[bad], cb = b[bad];
        free(a);
        free(b);
        fail_msg("%s (%s) %s: element %lld is gpu %g, cpu %g (non-finite: unwritten or overflow)", op,
                 mrcnn_dtype_name(P), p->name, (long long)bad, (double)ga, (double)cb);
    }
    free(a);
    free(b);
    if (!(err < t)) fail_msg("%s (%s) %s: max rel err %.3g >= %.0e", op, mrcnn_dtype_name(P), p->name, err, t);
}

static void tp_expect(const tpair *p, const char *op) { tp_expect_tol(p, tol(), op); }

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TP(dt, name, ...) tp_new((dt), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), (name))

static void need(const void *fn, const char *what) {
    if (!fn) fail_msg("backend op %s is missing (NULL)", what);
}

/* ---- convolutions ------------------------------------------------------------------- */

static void conv_case(mrcnn_conv2d_desc d, const char *label) {
    const int p = mrcnn_conv2d_out_h(&d), q = mrcnn_conv2d_out_w(&d);
    tpair x = TP(P, "x", d.n, d.h, d.w, d.c);
    tpair w = TP(MRCNN_DTYPE_F32, "w", d.k, d.r, d.s, d.c);
    tpair b = TP(MRCNN_DTYPE_F32, "b", d.k);
    tpair y = TP(P, "y", d.n, p, q, d.k);
    tp_fill(&x, -1, 1);
    tp_fill(&w, -0.5f, 0.5f);
    tp_fill(&b, -0.5f, 0.5f);
    /* Weights are fp32 masters: round them here so that both sides multiply the same values. */
    if (P != MRCNN_DTYPE_F32) {
        float *h = tp_read_gpu(&w);
        mrcnn_round_array(h, (size_t)w.n, P);
        tp_write(&w, h);
        free(h);
    }
    for (int act = 0; act < 2; act++) {
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            for (int fused = 0; fused < 2; fused++) {
                if (fused && !(act && with_bias)) continue;
                mrcnn_backend *g = fused ? GF : G;
                char op[64];
                snprintf(op, sizeof op, "conv %s%s%s%s", label, with_bias ? "+b" : "", act ? "+relu" : "",
                         fused ? " fused" : "");
                tp_poison(&y);
                C->nn.conv2d_forward(C, &d, &x.c, &w.c, with_bias ? &b.c : NULL, (mrcnn_activation)act, &y.c);
                g->nn.conv2d_forward(g, &d, &x.g, &w.g, with_bias ? &b.g : NULL, (mrcnn_activation)act, &y.g);
                g->mem.sync(g); // GF runs on its own stream; reads go through G's
                tp_expect(&y, op);
            }
        }
    }
    /* Backward: dx in the storage dtype, dw and db fp32 (master gradients). */
    tpair dy = TP(P, "dy", d.n, p, q, d.k);
    tpair dx = TP(P, "dx", d.n, d.h, d.w, d.c);
    tpair dw = TP(MRCNN_DTYPE_F32, "dw", d.k, d.r, d.s, d.c);
    tpair db = TP(MRCNN_DTYPE_F32, "db", d.k);
    tp_fill(&dy, -1, 1);
    tp_fill(&dx, -1, 1);
    tp_fill(&dw, -1, 1);
    tp_fill(&db, -1, 1);
    C->nn.conv2d_backward(C, &d, &x.c, &w.c, &dy.c, MRCNN_ACT_NONE, NULL, &dx.c, MRCNN_GRAD_ADD, &dw.c, &db.c);
    G->nn.conv2d_backward(G, &d, &x.g, &w.g, &dy.g, MRCNN_ACT_NONE, NULL, &dx.g, MRCNN_GRAD_ADD, &dw.g, &db.g);
    char op[64];
    snprintf(op, sizeof op, "conv_bwd %s", label);
    tp_expect(&dx, op);
    tp_expect(&dw, op);
    tp_expect(&db, op);
    /* Each output alone (the others NULL). */
    tp_fill(&dw, -1, 1);
    C->nn.conv2d_backward(C, &d, &x.c, &w.c, &dy.c, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, &dw.c, NULL);
    G->nn.conv2d_backward(G, &d, &x.g, &w.g, &dy.g, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, &dw.g, NULL);
    tp_expect(&dw, op);
    /* Weight and bias gradients without dx: how the model calls the stem (the images
     * take no gradient) and every first layer of a trainable stage after a frozen one. */
    tp_fill(&dw, -1, 1);
    tp_fill(&db, -1, 1);
    C->nn.conv2d_backward(C, &d, &x.c, &w.c, &dy.c, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, &dw.c, &db.c);
    G->nn.conv2d_backward(G, &d, &x.g, &w.g, &dy.g, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, &dw.g, &db.g);
    snprintf(op, sizeof op, "conv_bwd %s no dx", label);
    tp_expect(&dw, op);
    tp_expect(&db, op);
    tpair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tp_free(all[i]);
}

/* A failure inside the backend (a check macro) fails the current test instead of
 * aborting the program, so the other tests still report. */
static void guarded(void (*body)(void)) {
    mrcnn_test_catch_begin();
    if (setjmp(mrcnn_test_jmp) == 0) {
        body();
        mrcnn_test_catch_end();
        return;
    }
    mrcnn_test_catch_end();
    fail_msg("failure inside the backend: %s", mrcnn_test_msg);
}
#define GUARDED_TEST(name) \
    static void name(void **state) { guarded(name##_body); }

static void test_conv2d_body(void) {
    need((void *)C->nn.conv2d_forward, "cpu conv2d_forward");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        conv_case(mrcnn_conv2d_desc_make(2, 9, 11, 8, 16, 3, 1, 1), "3x3s1");
        conv_case(mrcnn_conv2d_desc_make(2, 7, 5, 32, 16, 1, 1, 0), "1x1");
        conv_case(mrcnn_conv2d_desc_make(2, 10, 9, 16, 8, 3, 2, 1), "3x3s2");
        conv_case(mrcnn_conv2d_desc_make(1, 12, 14, 4, 8, 7, 2, 3), "7x7s2");
        conv_case(mrcnn_conv2d_desc_make(3, 8, 8, 16, 32, 1, 2, 0), "1x1s2");
    }
}

/* Odd channel counts at the model's shapes (R50-FPN: stem 3 -> 64, 7x7 s2 p3, bias +
 * ReLU forward, dw and db without dx backward; RPN head 1x1 256 -> 3 anchors' objectness
 * and 256 -> 12 box deltas on an odd FPN level; mask logits 1x1 256 -> 91 classes at
 * 28x28 per ROI). None is a multiple of 8, so cuDNN's NHWC paths differ from the other
 * cases' (the half types' tensor-core kernels want multiples of 8). Every combination of
 * bias, ReLU and the fused call, and every backward output set, as in conv_case. */
static void odd_channel_cases(void) {
    conv_case(mrcnn_conv2d_desc_make(2, 30, 38, 3, 64, 7, 2, 3), "stem C3 7x7s2");
    conv_case(mrcnn_conv2d_desc_make(2, 13, 19, 256, 3, 1, 1, 0), "rpn cls K3");
    conv_case(mrcnn_conv2d_desc_make(2, 13, 19, 256, 12, 1, 1, 0), "rpn bbox K12");
    conv_case(mrcnn_conv2d_desc_make(3, 28, 28, 256, 91, 1, 1, 0), "mask logits K91");
}

/* fp32 (TF32 off: FMA-math algorithms only) in a test of its own, so that a half-type
 * failure cannot hide its result. */
static void test_conv2d_odd_fp32_body(void) {
    set_precision(MRCNN_DTYPE_F32);
    odd_channel_cases();
}

static void test_conv2d_odd_half_body(void) {
    for (int i = 1; i < 3; i++) {
        set_precision(k_precisions[i]);
        odd_channel_cases();
    }
}

/* Dilation is not used by R50-FPN; it runs last, so that a cuDNN without an NHWC
 * dilated algorithm (a failure that aborts) cannot hide the other results. */
static void test_conv2d_dilated_body(void) {
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        mrcnn_conv2d_desc dil = mrcnn_conv2d_desc_make(1, 9, 9, 8, 8, 3, 1, 2);
        dil.dil_h = dil.dil_w = 2;
        conv_case(dil, "3x3d2");
    }
}

static void test_deconv2x2_body(void) {
    need((void *)C->nn.deconv2x2_forward, "cpu deconv2x2_forward");
    const int n = 3, h = 5, w = 4, c = 16, k = 8;
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        tpair x = TP(P, "x", n, h, w, c), wt = TP(MRCNN_DTYPE_F32, "w", k, 2, 2, c), b = TP(MRCNN_DTYPE_F32, "b", k);
        tpair y = TP(P, "y", n, 2 * h, 2 * w, k);
        tp_fill(&x, -1, 1);
        tp_fill(&wt, -0.5f, 0.5f);
        tp_fill(&b, -0.5f, 0.5f);
        if (P != MRCNN_DTYPE_F32) {
            float *hw = tp_read_gpu(&wt);
            mrcnn_round_array(hw, (size_t)wt.n, P);
            tp_write(&wt, hw);
            free(hw);
        }
        for (int act = 0; act < 2; act++) {
            tp_poison(&y);
            C->nn.deconv2x2_forward(C, &x.c, &wt.c, act ? &b.c : NULL, (mrcnn_activation)act, &y.c);
            G->nn.deconv2x2_forward(G, &x.g, &wt.g, act ? &b.g : NULL, (mrcnn_activation)act, &y.g);
            tp_expect(&y, act ? "deconv2x2+b+relu" : "deconv2x2");
        }
        tpair dy = TP(P, "dy", n, 2 * h, 2 * w, k), dx = TP(P, "dx", n, h, w, c);
        tpair dw = TP(MRCNN_DTYPE_F32, "dw", k, 2, 2, c), db = TP(MRCNN_DTYPE_F32, "db", k);
        tp_fill(&dy, -1, 1);
        tp_fill(&dx, -1, 1);
        tp_fill(&dw, -1, 1);
        tp_fill(&db, -1, 1);
        C->nn.deconv2x2_backward(C, &x.c, &wt.c, &dy.c, MRCNN_ACT_NONE, NULL, &dx.c, MRCNN_GRAD_ADD, &dw.c, &db.c);
        G->nn.deconv2x2_backward(G, &x.g, &wt.g, &dy.g, MRCNN_ACT_NONE, NULL, &dx.g, MRCNN_GRAD_ADD, &dw.g, &db.g);
        tp_expect(&dx, "deconv2x2_bwd");
        tp_expect(&dw, "deconv2x2_bwd");
        tp_expect(&db, "deconv2x2_bwd");
        tpair *all[] = {&x, &wt, &b, &y, &dy, &dx, &dw, &db};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
    }
}

static void test_linear_body(void) {
    need((void *)C->nn.linear_forward, "cpu linear_forward");
    const int n = 37, in = 6 * 7 * 7, out = 45;
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        tpair x = TP(P, "x", n, in), w = TP(MRCNN_DTYPE_F32, "w", out, in), b = TP(MRCNN_DTYPE_F32, "b", out);
        tpair y = TP(P, "y", n, out);
        tp_fill(&x, -1, 1);
        tp_fill(&w, -0.2f, 0.2f);
        tp_fill(&b, -0.5f, 0.5f);
        if (P != MRCNN_DTYPE_F32) {
            float *hw = tp_read_gpu(&w);
            mrcnn_round_array(hw, (size_t)w.n, P);
            tp_write(&w, hw);
            free(hw);
        }
        for (int act = 0; act < 2; act++) {
            tp_poison(&y);
            C->nn.linear_forward(C, &x.c, &w.c, act ? &b.c : NULL, (mrcnn_activation)act, &y.c);
            G->nn.linear_forward(G, &x.g, &w.g, act ? &b.g : NULL, (mrcnn_activation)act, &y.g);
            tp_expect(&y, act ? "linear+b+relu" : "linear");
        }
        tpair dy = TP(P, "dy", n, out), dx = TP(P, "dx", n, in);
        tpair dw = TP(MRCNN_DTYPE_F32, "dw", out, in), db = TP(MRCNN_DTYPE_F32, "db", out);
        tp_fill(&dy, -1, 1);
        tp_fill(&dx, -1, 1);
        tp_fill(&dw, -1, 1);
        tp_fill(&db, -1, 1);
        C->nn.linear_backward(C, &x.c, &w.c, &dy.c, MRCNN_ACT_NONE, NULL, &dx.c, MRCNN_GRAD_ADD, &dw.c, &db.c);
        G->nn.linear_backward(G, &x.g, &w.g, &dy.g, MRCNN_ACT_NONE, NULL, &dx.g, MRCNN_GRAD_ADD, &dw.g, &db.g);
        tp_expect(&dx, "linear_bwd");
        tp_expect(&dw, "linear_bwd");
        tp_expect(&db, "linear_bwd");
        tpair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
    }
}

/* ---- elementwise, pooling, upsampling ----------------------------------------------- */

/* The same random values (rounded to the GPU dtype) into p and q, both sides. */
static void tp_fill_same(tpair *p, tpair *q, float lo, float hi) {
    float *h = malloc((size_t)p->n * sizeof(float) + 4);
    test_fill_uniform(h, p->n, lo, hi, g_seed++);
    for (int64_t i = 0; i < p->n; i++) {
        if (h[i] == 0.0f) h[i] = 0.5f * (hi > 0 ? hi : lo);
        h[i] = mrcnn_round_to(h[i], p->g.dtype);
    }
    tp_write(p, h);
    tp_write(q, h);
    free(h);
}

/* The GPU sides of p and q hold the same bits (read as fp32: fp16/bf16 widen exactly),
 * e.g. the fused residual join against add then relu on the same backend. */
static void tp_expect_gpu_same(const tpair *p, const tpair *q, const char *op) {
    float *a = tp_read_gpu(p), *b = tp_read_gpu(q);
    for (int64_t i = 0; i < p->n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            float x = a[i], y = b[i];
            free(a);
            free(b);
            fail_msg("%s (%s): gpu element %lld is %g, unfused gives %g", op, mrcnn_dtype_name(P), (long long)i,
                     (double)x, (double)y);
        }
    printf("  %-22s %-5s %-10s n=%-8lld gpu fused == gpu unfused, bit for bit\n", op, mrcnn_dtype_name(P), p->name,
           (long long)p->n);
    free(a);
    free(b);
}

static void test_relu_add_body(void) {
    need((void *)C->nn.relu_forward, "cpu relu_forward");
    need((void *)C->nn.add_forward, "cpu add_forward");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        const int64_t n = 3 * 17 * 19 + 5;
        tpair x = TP(P, "x", n), y = TP(P, "y", n), dy = TP(P, "dy", n), dx = TP(P, "dx", n);
        tpair a = TP(P, "a", n), b = TP(P, "b", n);
        tp_fill(&x, -1, 1);
        tp_poison(&y);
        C->nn.relu_forward(C, &x.c, &y.c);
        G->nn.relu_forward(G, &x.g, &y.g);
        tp_expect(&y, "relu");
        tp_fill(&dy, -1, 1);
        tp_fill(&dx, -1, 1);
        C->nn.relu_backward(C, &y.c, &dy.c, &dx.c);
        G->nn.relu_backward(G, &y.g, &dy.g, &dx.g);
        tp_expect(&dx, "relu_bwd");
        tp_fill(&a, -1, 1);
        tp_fill(&b, -1, 1);
        tp_poison(&y);
        C->nn.add_forward(C, &a.c, &b.c, MRCNN_ACT_NONE, &y.c);
        G->nn.add_forward(G, &a.g, &b.g, MRCNN_ACT_NONE, &y.g);
        tp_expect(&y, "add");
        /* The fused residual join: against the CPU, and against add then relu on the GPU. */
        tpair y2 = TP(P, "y2", n);
        tp_poison(&y);
        tp_poison(&y2);
        C->nn.add_forward(C, &a.c, &b.c, MRCNN_ACT_RELU, &y.c);
        G->nn.add_forward(G, &a.g, &b.g, MRCNN_ACT_RELU, &y.g);
        tp_expect(&y, "add+relu");
        G->nn.add_forward(G, &a.g, &b.g, MRCNN_ACT_NONE, &y2.g);
        G->nn.relu_forward(G, &y2.g, &y2.g);
        tp_expect_gpu_same(&y, &y2, "add+relu");
        tp_free(&y2);
        C->nn.add_backward(C, &dy.c, &a.c, &b.c);
        G->nn.add_backward(G, &dy.g, &a.g, &b.g);
        tp_expect(&a, "add_bwd");
        tp_expect(&b, "add_bwd");
        tpair *all[] = {&x, &y, &dy, &dx, &a, &b};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
    }
}

/* Elements [k, n) of p as a pair of views: a shift of one element leaves the GPU data
 * off 16-byte alignment, so the scalar loops run instead of the 16-byte ones. */
static tpair tp_shift(const tpair *p, int64_t k) {
    tpair v = *p;
    v.n = p->n - k;
    v.g.data = (char *)p->g.data + k * (int64_t)dsize(p->g.dtype);
    v.c.data = (char *)p->c.data + k * (int64_t)dsize(p->c.dtype);
    v.g.shape[0] = v.c.shape[0] = v.n;
    return v;
}

/* The streaming kernels' 16-byte path (aligned, one dtype, with a tail of n % 8), the
 * scalar path (misaligned views, n below the vector threshold), mixed dtypes, and the
 * bottleneck's in-place residual add followed by ReLU. */
static void test_vector_paths_body(void) {
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        const int64_t sizes[3] = {8192 + 5, 37, 4096};
        for (int si = 0; si < 3; si++) {
            for (int shift = 0; shift < 2; shift++) {
                const int64_t n = sizes[si] + shift;
                tpair X = TP(P, "x", n), Y = TP(P, "y", n), DY = TP(P, "dy", n), DX = TP(P, "dx", n);
                tpair A = TP(P, "a", n), B = TP(P, "b", n), A2 = TP(P, "a unfused", n);
                tpair x = tp_shift(&X, shift), y = tp_shift(&Y, shift), dy = tp_shift(&DY, shift);
                tpair dx = tp_shift(&DX, shift), a = tp_shift(&A, shift), b = tp_shift(&B, shift);
                tpair a2 = tp_shift(&A2, shift);
                char op[48];
                snprintf(op, sizeof op, "vec n=%lld%s", (long long)x.n, shift ? " misaligned" : "");
                tp_fill(&x, -1, 1);
                tp_poison(&y);
                C->nn.relu_forward(C, &x.c, &y.c);
                G->nn.relu_forward(G, &x.g, &y.g);
                tp_expect(&y, op);
                tp_fill(&dy, -1, 1);
                tp_fill(&dx, -1, 1);
                C->nn.relu_backward(C, &y.c, &dy.c, &dx.c);
                G->nn.relu_backward(G, &y.g, &dy.g, &dx.g);
                tp_expect(&dx, op);
                tp_fill_same(&a, &a2, -1, 1);
                tp_fill(&b, -1, 1);
                /* Residual join in place as resnet.c calls it, a = relu(a + b) in one pass,
                 * and the two-call form it replaced (add, then relu) on a copy. */
                C->nn.add_forward(C, &a.c, &b.c, MRCNN_ACT_RELU, &a.c);
                G->nn.add_forward(G, &a.g, &b.g, MRCNN_ACT_RELU, &a.g);
                tp_expect(&a, op);
                C->nn.add_forward(C, &a2.c, &b.c, MRCNN_ACT_NONE, &a2.c);
                G->nn.add_forward(G, &a2.g, &b.g, MRCNN_ACT_NONE, &a2.g);
                C->nn.relu_forward(C, &a2.c, &a2.c);
                G->nn.relu_forward(G, &a2.g, &a2.g);
                tp_expect(&a2, op);
                tp_expect_gpu_same(&a, &a2, op);
                C->nn.add_backward(C, &dy.c, &b.c, NULL);
                G->nn.add_backward(G, &dy.g, &b.g, NULL);
                tp_expect(&b, op);
                if (P != MRCNN_DTYPE_F32) {
                    /* Mixed dtypes (a 16-bit gradient into an fp32 buffer): the scalar path. */
                    tpair f = TP(MRCNN_DTYPE_F32, "f32 acc", n);
                    tpair fv = tp_shift(&f, shift);
                    tp_fill(&fv, -1, 1);
                    C->nn.add_backward(C, &dy.c, &fv.c, NULL);
                    G->nn.add_backward(G, &dy.g, &fv.g, NULL);
                    tp_expect(&fv, op);
                    tp_free(&f);
                }
                tpair *all[] = {&X, &Y, &DY, &DX, &A, &B, &A2};
                for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
            }
        }
    }
}

/* be->mem.write through the pinned staging ring: many uploads in flight, wrapping the ring,
 * then one larger than the ring (it grows); every one must land intact, and the host
 * buffer may be reused at once. */
static void test_write_staging_body(void) {
    if (g_selfcheck) return;
    const int64_t n = 1 << 20; // 4 MB each
    float *h = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    mrcnn_tensor t[24];
    for (int k = 0; k < 24; k++) {
        t[k] = mrcnn_tensor_view(G->mem.alloc(G, (size_t)n * 4, "staging test"), MRCNN_DTYPE_F32, G->device, 1, &n);
        for (int64_t i = 0; i < n; i++) h[i] = (float)(k * 1000003 + i);
        G->mem.write(G, &t[k], h); // h is overwritten for the next one at once
    }
    for (int k = 0; k < 24; k++) {
        G->mem.read(G, &t[k], back);
        for (int64_t i = 0; i < n; i++)
            if (back[i] != (float)(k * 1000003 + i))
                fail_msg("pinned write %d: element %lld is %g, want %g", k, (long long)i, (double)back[i],
                         (double)(float)(k * 1000003 + i));
        G->mem.free(G, t[k].data);
    }
    const int64_t big = 48 << 20; // 192 MB: past the first ring, within the default cap
    float *hb = malloc((size_t)big * sizeof(float)), *bb = malloc((size_t)big * sizeof(float));
    for (int64_t i = 0; i < big; i++) hb[i] = (float)(i % 65521);
    mrcnn_tensor tb = mrcnn_tensor_view(G->mem.alloc(G, (size_t)big * 4, "staging big"), MRCNN_DTYPE_F32, G->device, 1, &big);
    G->mem.write(G, &tb, hb);
    memset(hb, 0, (size_t)big * sizeof(float));
    G->mem.read(G, &tb, bb);
    for (int64_t i = 0; i < big; i++)
        if (bb[i] != (float)(i % 65521)) fail_msg("big pinned write: element %lld is %g", (long long)i, (double)bb[i]);
    G->mem.free(G, tb.data);
    free(h);
    free(back);
    free(hb);
    free(bb);
}

/* be->stream: an event recorded after a write orders a second backend's stream; a
 * captured graph replays its ops (zero then add, twice: y = 2 (a + b)). */
static void test_stream_graph_body(void) {
    need((void *)G->stream.event_create, "cuda stream.event_create");
    set_precision(MRCNN_DTYPE_F32);
    const int64_t n = 4099;
    tpair a = TP(MRCNN_DTYPE_F32, "a", n), b = TP(MRCNN_DTYPE_F32, "b", n), y = TP(MRCNN_DTYPE_F32, "y", n);
    tp_fill(&a, -1, 1);
    tp_fill(&b, -1, 1);
    /* GF's stream waits for G's event, then adds what G wrote. */
    void *ev = G->stream.event_create(G);
    float *h = malloc((size_t)n * sizeof(float));
    test_fill_uniform(h, n, -1, 1, g_seed++);
    C->mem.write(C, &a.c, h);
    G->mem.write(G, &a.g, h);
    G->stream.event_record(G, ev);
    GF->stream.event_wait(GF, ev);
    GF->nn.add_forward(GF, &a.g, &b.g, MRCNN_ACT_NONE, &y.g);
    GF->mem.sync(GF);
    C->nn.add_forward(C, &a.c, &b.c, MRCNN_ACT_NONE, &y.c);
    tp_expect(&y, "event ordering");
    G->stream.event_destroy(G, ev);
    free(h);
    /* Graph: the region is captured, not run, then replayed twice. */
    G->nn.add_forward(G, &a.g, &b.g, MRCNN_ACT_NONE, &y.g); // warm-up outside the capture (nothing grows inside)
    G->mem.zero(G, &y.g);
    void *g = NULL;
    int captured = G->stream.graph_begin(G);
    if (!g_selfcheck) assert_int_equal(captured, 1);
    if (captured) {
        G->nn.add_backward(G, &a.g, &y.g, NULL); // y += a
        G->nn.add_backward(G, &b.g, &y.g, NULL); // y += b
        g = G->stream.graph_end(G);
        assert_non_null(g);
        G->stream.graph_launch(G, g);
        G->stream.graph_launch(G, g);
        G->stream.graph_destroy(G, g);
    }
    C->mem.zero(C, &y.c);
    for (int k = 0; k < 2; k++) {
        C->nn.add_backward(C, &a.c, &y.c, NULL);
        C->nn.add_backward(C, &b.c, &y.c, NULL);
    }
    if (!captured) { // CPU in the GPU's slot: the region runs directly
        G->nn.add_backward(G, &a.g, &y.g, NULL);
        G->nn.add_backward(G, &b.g, &y.g, NULL);
        G->nn.add_backward(G, &a.g, &y.g, NULL);
        G->nn.add_backward(G, &b.g, &y.g, NULL);
    }
    tp_expect(&y, "graph replay");
    tp_free(&a);
    tp_free(&b);
    tp_free(&y);
}

static void maxpool_case(mrcnn_pool2d_desc d) {
    const int p = mrcnn_pool2d_out_h(&d), q = mrcnn_pool2d_out_w(&d);
    tpair x = TP(P, "x", d.n, d.h, d.w, d.c), y = TP(P, "y", d.n, p, q, d.c);
    tpair dy = TP(P, "dy", d.n, p, q, d.c), dx = TP(P, "dx", d.n, d.h, d.w, d.c);
    tp_fill(&x, -1, 1);
    tp_poison(&y);
    C->nn.maxpool2d_forward(C, &d, &x.c, &y.c);
    G->nn.maxpool2d_forward(G, &d, &x.g, &y.g);
    tp_expect(&y, "maxpool");
    tp_fill(&dy, -1, 1);
    tp_fill(&dx, -1, 1);
    C->nn.maxpool2d_backward(C, &d, &x.c, &dy.c, &dx.c);
    G->nn.maxpool2d_backward(G, &d, &x.g, &dy.g, &dx.g);
    tp_expect(&dx, "maxpool_bwd");
    /* Ties: a constant block makes every window's first element the maximum. */
    float *h = malloc((size_t)x.n * sizeof(float));
    test_fill_uniform(h, x.n, -1, 1, g_seed++);
    for (int64_t i = 0; i < x.n / 2; i++) h[i] = 0.25f;
    tp_write(&x, h);
    free(h);
    C->nn.maxpool2d_backward(C, &d, &x.c, &dy.c, &dx.c);
    G->nn.maxpool2d_backward(G, &d, &x.g, &dy.g, &dx.g);
    tp_expect(&dx, "maxpool_bwd ties");
    tpair *all[] = {&x, &y, &dy, &dx};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
}

static void test_maxpool_body(void) {
    need((void *)C->nn.maxpool2d_forward, "cpu maxpool2d_forward");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        maxpool_case((mrcnn_pool2d_desc){2, 9, 10, 8, 3, 2, 1});
        maxpool_case((mrcnn_pool2d_desc){1, 8, 8, 5, 2, 2, 0});
        maxpool_case((mrcnn_pool2d_desc){1, 7, 6, 3, 1, 2, 0}); // P6: kernel 1, stride 2
    }
}

static void upsample_case(int n, int h, int w, int H, int W, int c) {
    tpair top = TP(P, "top", n, h, w, c), lat = TP(P, "lateral", n, H, W, c), y = TP(P, "y", n, H, W, c);
    tp_fill(&top, -1, 1);
    tp_fill(&lat, -1, 1);
    tp_poison(&y);
    C->nn.upsample_add_forward(C, &top.c, &lat.c, &y.c);
    G->nn.upsample_add_forward(G, &top.g, &lat.g, &y.g);
    tp_expect(&y, "upsample_add");
    tpair dy = TP(P, "dy", n, H, W, c);
    tp_fill(&dy, -1, 1);
    C->nn.upsample_add_backward(C, &dy.c, &top.c, &lat.c); // top and lateral now act as gradients (+=)
    G->nn.upsample_add_backward(G, &dy.g, &top.g, &lat.g);
    tp_expect(&top, "upsample_add_bwd");
    tp_expect(&lat, "upsample_add_bwd");
    tpair *all[] = {&top, &lat, &y, &dy};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
}

static void test_upsample_add_body(void) {
    need((void *)C->nn.upsample_add_forward, "cpu upsample_add_forward");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        upsample_case(2, 4, 5, 8, 10, 8);
        upsample_case(1, 3, 5, 7, 9, 4); // non-integer ratios: floor(dst * in / out)
        upsample_case(1, 13, 19, 25, 38, 4); // odd FPN level sizes (800x1216 / 64 -> / 32)
    }
}

/* ---- losses -------------------------------------------------------------------------- */

static void expect_loss(const tpair *l, const char *op) { tp_expect_tol(l, P == MRCNN_DTYPE_F32 ? 1e-5 : 1e-2, op); }

/* A normalizer by value (no count tensor). */
#define NORM(v) (&(mrcnn_loss_norm){.count = NULL, .scale = (v), .grad_mult = 1.0f})

static void test_losses_body(void) {
    need((void *)C->loss.bce_logits, "cpu bce_logits");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        const int64_t n = 3001;
        tpair x = TP(P, "x", n), t = TP(P, "t", n), wgt = TP(P, "weight", n), dx = TP(P, "dx", n);
        tpair loss = TP(MRCNN_DTYPE_F32, "loss", 1);
        tp_fill(&x, -6, 6);
        tp_fill(&t, 0, 1);
        tp_fill(&wgt, 0, 2);
        for (int w = 0; w < 2; w++) {
            tp_fill(&dx, -0.01f, 0.01f);
            tp_poison(&loss);
            C->loss.bce_logits(C, &x.c, &t.c, w ? &wgt.c : NULL, NORM(517.0f), &loss.c, &dx.c);
            G->loss.bce_logits(G, &x.g, &t.g, w ? &wgt.g : NULL, NORM(517.0f), &loss.g, &dx.g);
            expect_loss(&loss, w ? "bce_logits weighted" : "bce_logits");
            tp_expect(&dx, w ? "bce_logits weighted" : "bce_logits");
        }
        /* Loss only (dx NULL). */
        tp_poison(&loss);
        C->loss.bce_logits(C, &x.c, &t.c, NULL, NORM(3.0f), &loss.c, NULL);
        G->loss.bce_logits(G, &x.g, &t.g, NULL, NORM(3.0f), &loss.g, NULL);
        expect_loss(&loss, "bce_logits no dx");
        /* The normalizer read on the device: a count tensor (47 sampled) times a scale, and a
         * gradient multiplier (the fp16 loss scale) that leaves the loss value alone. */
        tpair cnt = TP(MRCNN_DTYPE_F32, "count", 1);
        const float c47 = 47.0f;
        tp_write(&cnt, &c47);
        tpair gsc = TP(MRCNN_DTYPE_F32, "grad scale", 1);
        const float g8 = 8.0f;
        tp_write(&gsc, &g8);
        mrcnn_loss_norm nc = {.count = &cnt.c, .scale = 4.0f, .grad_mult = 8.0f, .grad_scale = &gsc.c};
        mrcnn_loss_norm ng = {.count = &cnt.g, .scale = 4.0f, .grad_mult = 8.0f, .grad_scale = &gsc.g};
        tp_fill(&dx, -0.01f, 0.01f);
        tp_poison(&loss);
        C->loss.bce_logits(C, &x.c, &t.c, &wgt.c, &nc, &loss.c, &dx.c);
        G->loss.bce_logits(G, &x.g, &t.g, &wgt.g, &ng, &loss.g, &dx.g);
        expect_loss(&loss, "bce_logits device count");
        tp_expect(&dx, "bce_logits device count");
        tp_free(&cnt);
        tp_free(&gsc);

        const float betas[2] = {1.0f / 9.0f, 0.0f};
        tp_fill(&t, -2, 2);
        for (int bi = 0; bi < 2; bi++) {
            for (int w = 0; w < 2; w++) {
                tp_fill(&dx, -0.01f, 0.01f);
                tp_poison(&loss);
                C->loss.smooth_l1(C, &x.c, &t.c, w ? &wgt.c : NULL, betas[bi], NORM(211.0f), &loss.c, &dx.c);
                G->loss.smooth_l1(G, &x.g, &t.g, w ? &wgt.g : NULL, betas[bi], NORM(211.0f), &loss.g, &dx.g);
                expect_loss(&loss, bi ? "smooth_l1 beta 0" : "smooth_l1 beta 1/9");
                tp_expect(&dx, bi ? "smooth_l1 beta 0" : "smooth_l1 beta 1/9");
            }
        }

        const int rows = 301, classes = 91;
        tpair lx = TP(P, "logits", rows, classes), ldx = TP(P, "dx", rows, classes);
        tpair lab = TP(MRCNN_DTYPE_I32, "labels", rows);
        int32_t *hl = malloc(rows * sizeof(int32_t));
        float *u = malloc(rows * sizeof(float));
        test_fill_uniform(u, rows, 0, 1, g_seed++);
        for (int r = 0; r < rows; r++) hl[r] = r % 7 == 3 ? -1 : (int32_t)(u[r] * classes) % classes;
        C->mem.write(C, &lab.c, hl);
        G->mem.write(G, &lab.g, hl);
        G->mem.sync(G);
        free(hl);
        free(u);
        tp_fill(&lx, -4, 4);
        tp_fill(&ldx, -0.01f, 0.01f);
        tp_poison(&loss);
        C->loss.softmax_ce(C, &lx.c, &lab.c, NORM(256.0f), &loss.c, &ldx.c);
        G->loss.softmax_ce(G, &lx.g, &lab.g, NORM(256.0f), &loss.g, &ldx.g);
        expect_loss(&loss, "softmax_ce");
        tp_expect(&ldx, "softmax_ce");
        tpair *all[] = {&x, &t, &wgt, &dx, &loss, &lx, &ldx, &lab};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
    }
}

/* ---- optimizer and the Inf/NaN scan ----------------------------------------------------- */

static void test_sgd_body(void) {
    need((void *)C->opt.sgd_update, "cpu sgd_update");
    set_precision(MRCNN_DTYPE_F32);
    const int64_t n = 100003;
    tpair p = TP(MRCNN_DTYPE_F32, "params", n), g = TP(MRCNN_DTYPE_F32, "grads", n);
    tpair v = TP(MRCNN_DTYPE_F32, "momentum", n), m = TP(MRCNN_DTYPE_F32, "decay_mask", n);
    tp_fill(&p, -1, 1);
    tp_fill(&g, -100, 100);
    tp_fill(&v, -1, 1);
    float *hm = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) hm[i] = i % 3 == 0 ? 0.0f : (i % 3 == 1 ? 1.0f : 0.5f);
    tp_write(&m, hm);
    free(hm);
    for (int step = 0; step < 3; step++) {
        C->opt.sgd_update(C, &p.c, &g.c, &v.c, &m.c, 0.02f, 0.9f, 1e-4f, 1.0f / 128.0f);
        G->opt.sgd_update(G, &p.g, &g.g, &v.g, &m.g, 0.02f, 0.9f, 1e-4f, 1.0f / 128.0f);
    }
    tp_expect(&p, "sgd_update");
    tp_expect(&v, "sgd_update");
    /* with the preconditioner row: (2n) coefficients, decay multipliers then q = s^2 */
    tpair q = TP(MRCNN_DTYPE_F32, "decay_mask and q", 2 * n);
    float *hq = malloc((size_t)(2 * n) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        hq[i] = i % 3 == 0 ? 0.0f : 1.0f;
        hq[n + i] = i % 5 == 0 ? 1.0f : 0.01f + 0.37f * (float)(i % 67); // s^2 over 0.01..25
    }
    tp_write(&q, hq);
    free(hq);
    for (int step = 0; step < 3; step++) {
        C->opt.sgd_update(C, &p.c, &g.c, &v.c, &q.c, 0.02f, 0.9f, 1e-4f, 1.0f / 128.0f);
        G->opt.sgd_update(G, &p.g, &g.g, &v.g, &q.g, 0.02f, 0.9f, 1e-4f, 1.0f / 128.0f);
    }
    tp_expect(&p, "sgd_update (preconditioned)");
    tp_expect(&v, "sgd_update (preconditioned)");
    tpair *all[] = {&p, &g, &v, &m, &q};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
}

static void test_nonfinite_body(void) {
    need((void *)C->opt.nonfinite, "cpu nonfinite");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        const int64_t n = 70001;
        tpair x = TP(P, "x", n);
        tp_fill(&x, -1000, 1000);
        assert_int_equal(G->opt.nonfinite(G, &x.g), 0);
        assert_int_equal(C->opt.nonfinite(C, &x.c), 0);
        const float specials[3] = {INFINITY, -INFINITY, NAN};
        const int64_t where[3] = {0, n / 2 + 7, n - 1};
        for (int s = 0; s < 3; s++) {
            float *h = malloc((size_t)n * sizeof(float));
            test_fill_uniform(h, n, -1000, 1000, g_seed++);
            mrcnn_round_array(h, (size_t)n, P);
            h[where[s]] = specials[s];
            tp_write(&x, h);
            free(h);
            assert_int_equal(G->opt.nonfinite(G, &x.g), 1);
            assert_int_equal(C->opt.nonfinite(C, &x.c), 1);
        }
        tp_free(&x);
    }
}

/* ---- the training step's device ops (be->step, step_ctl.h) --------------------- */

static mrcnn_tensor step_view(const mrcnn_tensor *t, int offset, int64_t n) {
    return mrcnn_tensor_view((float *)t->data + offset, MRCNN_DTYPE_F32, t->device, 1, &n);
}

/* Reads the control vectors of both sides, which must agree: the decisions and counts
 * exactly, the values within fp32 rounding. */
static void step_ctl_expect(const tpair *ctl, int nl, const char *when) {
    float *g = tp_read_gpu(ctl);
    float *c = malloc((size_t)ctl->n * sizeof(float));
    C->mem.read(C, &ctl->c, c);
    const int exact[] = {MRCNN_CTL_APPLY, MRCNN_CTL_SCALE, MRCNN_CTL_CLEAN, MRCNN_CTL_SKIPPED, MRCNN_CTL_NONFINITE,
                         MRCNN_CTL_WIN_FINITE(nl), MRCNN_CTL_WIN_COUNTED(nl), MRCNN_CTL_WIN_ADAPT(nl),
                         MRCNN_CTL_WIN_BAD_STEP(nl), MRCNN_CTL_FLAG(nl)};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (g[exact[i]] != c[exact[i]])
            fail_msg("step ops %s: control slot %d is gpu %g, cpu %g", when, exact[i], (double)g[exact[i]],
                     (double)c[exact[i]]);
    for (int64_t i = 0; i < ctl->n; i++) {
        double d = fabs((double)g[i] - c[i]), m = fabs((double)c[i]);
        if (!(d <= 1e-5 * (m > 1 ? m : 1)) && !(isnan(g[i]) && isnan(c[i])))
            fail_msg("step ops %s: control slot %lld is gpu %g, cpu %g", when, (long long)i, (double)g[i],
                     (double)c[i]);
    }
    free(g);
    free(c);
}

/* The step's lr and index into both control vectors: one write each, as the trainer's
 * stage does before the region. */
static void step_ctl_lr_index(tpair *ctl, float lr, int64_t index) {
    const float li[2] = {lr, (float)index};
    mrcnn_tensor c = step_view(&ctl->c, MRCNN_CTL_LR, 2), g = step_view(&ctl->g, MRCNN_CTL_LR, 2);
    C->mem.write(C, &c, li);
    G->mem.write(G, &g, li);
}

/* The trainer's region on one side: terms accumulated (axpy), the flag (bad: an extra
 * Inf/NaN source, or NULL), the norm, the decision (fp16 scaler, clipping, window) and
 * the update that a skipped step leaves out. No host value changes between steps. */
static void step_ops_region(mrcnn_backend *be, int side, tpair *ctl, int nl, tpair *terms, tpair *gr, tpair *bad,
                            tpair *p, tpair *v, tpair *mask) {
    mrcnn_tensor *c = side ? &ctl->g : &ctl->c;
    mrcnn_tensor stepv = step_view(c, MRCNN_CTL_STEP, nl + 1), tv = step_view(c, MRCNN_CTL_STEP, nl),
                 fl = step_view(c, MRCNN_CTL_FLAG(nl), 1), sq = step_view(c, MRCNN_CTL_SUMSQ, 1);
    be->mem.zero(be, &stepv);
    be->step.axpy(be, 0.5f, side ? &terms->g : &terms->c, &tv);
    be->step.axpy(be, 0.5f, side ? &terms->g : &terms->c, &tv);
    be->step.nonfinite_or(be, side ? &gr->g : &gr->c, &fl);
    if (bad) be->step.nonfinite_or(be, side ? &bad->g : &bad->c, &fl);
    be->step.sum_squares(be, side ? &gr->g : &gr->c, NULL, &sq);
    mrcnn_step_desc d = {.n_losses = nl, .scaler_enabled = 1, .scales_loss = 1, .growth_interval = 2,
                         .clip_enabled = 1, .clip_value = 100.0f, .inv_world = 1.0f, .inv_accum = 1.0f};
    be->step.decide(be, &d, c);
    be->step.sgd_update(be, side ? &p->g : &p->c, side ? &gr->g : &gr->c, side ? &v->g : &v->c,
                        side ? &mask->g : &mask->c, 0.9f, 1e-4f, c);
}

static void test_step_ops_body(void) {
    need((void *)C->step.decide, "cpu step.decide");
    need((void *)G->step.decide, "gpu step.decide");
    set_precision(MRCNN_DTYPE_F32);
    /* sum of squares over a large gradient (blocks, grid stride) */
    const int64_t n = 300007;
    tpair g = TP(MRCNN_DTYPE_F32, "grads", n), out = TP(MRCNN_DTYPE_F32, "sumsq", 1);
    tp_fill(&g, -3, 3);
    C->step.sum_squares(C, &g.c, NULL, &out.c);
    G->step.sum_squares(G, &g.g, NULL, &out.g);
    tp_expect(&out, "step sum_squares");
    /* weighted by the preconditioner (the clipping norm over s g) */
    tpair w = TP(MRCNN_DTYPE_F32, "weights", n);
    tp_fill(&w, 0.01f, 25.0f);
    C->step.sum_squares(C, &g.c, &w.c, &out.c);
    G->step.sum_squares(G, &g.g, &w.g, &out.g);
    tp_expect(&out, "step sum_squares (weighted)");
    tp_free(&w);
    /* Inf/NaN into a flag, every storage dtype; the flag stays raised */
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        const int64_t m = 70001;
        tpair x = TP(P, "x", m), flag = TP(MRCNN_DTYPE_F32, "flag", 1);
        tp_fill(&x, -1000, 1000);
        const float zero = 0;
        tp_write(&flag, &zero);
        G->step.nonfinite_or(G, &x.g, &flag.g);
        float *f = tp_read_gpu(&flag);
        assert_float_equal(f[0], 0, 0);
        free(f);
        float *h = malloc((size_t)m * sizeof(float));
        test_fill_uniform(h, m, -1000, 1000, g_seed++);
        mrcnn_round_array(h, (size_t)m, P);
        h[m / 2 + 3] = i == 1 ? INFINITY : NAN;
        tp_write(&x, h);
        G->step.nonfinite_or(G, &x.g, &flag.g);
        f = tp_read_gpu(&flag);
        assert_float_equal(f[0], 1, 0);
        free(f);
        tp_fill(&x, -1, 1); // finite again: the flag keeps its 1
        G->step.nonfinite_or(G, &x.g, &flag.g);
        f = tp_read_gpu(&flag);
        assert_float_equal(f[0], 1, 0);
        free(f);
        free(h);
        tp_free(&x);
        tp_free(&flag);
    }
    set_precision(MRCNN_DTYPE_F32);
    /* Steps as the trainer runs them: terms accumulated (axpy), the flag, the norm,
     * the decision (fp16 scaler, clipping, window) and the update that a skipped step
     * leaves out; the same control vector and weights on both sides. */
    const int nl = 3;
    const int64_t np = 50021;
    tpair ctl = TP(MRCNN_DTYPE_F32, "ctl", MRCNN_CTL_SIZE(3));
    tpair p = TP(MRCNN_DTYPE_F32, "params", np), gr = TP(MRCNN_DTYPE_F32, "grads", np);
    tpair v = TP(MRCNN_DTYPE_F32, "momentum", np), mask = TP(MRCNN_DTYPE_F32, "decay_mask", np);
    tpair terms = TP(MRCNN_DTYPE_F32, "terms", 3), bad = TP(MRCNN_DTYPE_F32, "bad", 2);
    float *hc = calloc((size_t)ctl.n, sizeof(float));
    hc[MRCNN_CTL_SCALE] = 8.0f;
    tp_write(&ctl, hc);
    free(hc);
    tp_fill(&p, -1, 1);
    tp_fill(&v, -0.1f, 0.1f);
    tp_fill(&mask, 0, 1);
    const float nan2[2] = {1.0f, NAN};
    tp_write(&bad, nan2);
    const int flags[] = {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0};
    int64_t last_bad = -1;
    for (int step = 0; step < (int)(sizeof flags / sizeof *flags); step++) {
        tp_fill(&gr, -50, 50);
        tp_fill(&terms, 0.1f, 3);
        step_ctl_lr_index(&ctl, 0.01f * (float)(1 + step % 4), 100 + step);
        mrcnn_backend *bes[2] = {C, G};
        for (int side = 0; side < 2; side++)
            step_ops_region(bes[side], side, &ctl, nl, &terms, &gr, flags[step] ? &bad : NULL, &p, &v, &mask);
        char when[32];
        snprintf(when, sizeof when, "step %d", step);
        step_ctl_expect(&ctl, nl, when);
        tp_expect(&p, "step sgd_update");
        tp_expect(&v, "step sgd_update");
        if (flags[step]) last_bad = 100 + step;
        float *gc = tp_read_gpu(&ctl); // decide took the index from the vector
        assert_float_equal(gc[MRCNN_CTL_WIN_BAD_STEP(nl)], (float)(last_bad + 1), 0);
        free(gc);
    }
    /* The same region captured once on the GPU (trainer_step.c's pattern) and replayed
     * with each step's lr and index written into the vector before the launch; the CPU
     * runs it directly. A replay that kept the captured step's lr or index differs. */
    void *graph = NULL;
    int captured = 0;
    for (int step = 0; step < 4; step++) {
        tp_fill(&gr, -50, 50);
        if (step == 2) { // a NaN gradient: skipped on both sides, its index in the window
            float *h = malloc((size_t)gr.n * sizeof(float));
            test_fill_uniform(h, gr.n, -50, 50, g_seed++);
            h[gr.n / 3] = NAN;
            tp_write(&gr, h);
            free(h);
        }
        tp_fill(&terms, 0.1f, 3);
        step_ctl_lr_index(&ctl, 0.03f / (float)(1 + step), 200 + step);
        step_ops_region(C, 0, &ctl, nl, &terms, &gr, NULL, &p, &v, &mask);
        if (!graph && G->stream.graph_begin(G)) {
            step_ops_region(G, 1, &ctl, nl, &terms, &gr, NULL, &p, &v, &mask);
            graph = G->stream.graph_end(G);
            assert_non_null(graph);
            captured++;
        }
        if (graph) G->stream.graph_launch(G, graph);
        else step_ops_region(G, 1, &ctl, nl, &terms, &gr, NULL, &p, &v, &mask); // selfcheck: a CPU "GPU"
        char when[48];
        snprintf(when, sizeof when, "graph replay %d", step);
        step_ctl_expect(&ctl, nl, when);
        tp_expect(&p, "step sgd_update (graph replay)");
        tp_expect(&v, "step sgd_update (graph replay)");
        float *gc = tp_read_gpu(&ctl);
        assert_float_equal(gc[MRCNN_CTL_WIN_BAD_STEP(nl)], step >= 2 ? 203.0f : (float)(last_bad + 1), 0);
        free(gc);
    }
    if (graph) G->stream.graph_destroy(G, graph);
    if (!g_selfcheck) assert_int_equal(captured, 1);
    /* graph_epoch: present on the GPU, and it only moves when a buffer is reallocated */
    if (!g_selfcheck) {
        need((void *)G->stream.graph_epoch, "gpu stream.graph_epoch");
        const uint64_t e0 = G->stream.graph_epoch(G);
        step_ops_region(G, 1, &ctl, nl, &terms, &gr, NULL, &p, &v, &mask); // sizes reached already
        assert_true(G->stream.graph_epoch(G) == e0);
    }
    tpair *all[] = {&g, &out, &ctl, &p, &gr, &v, &mask, &terms, &bad};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) tp_free(all[j]);
}

/* ---- ROIAlign ---------------------------------------------------------------------------- */

/* budget_mb: MRCNN_ROI_BWD_SCRATCH_MB for the backward (NULL: the default, every
 * level's fp32 scratch fits); "0" sends every fp16/bf16 level to storage-dtype atomics,
 * "0.05" the largest level only (52 KB holds levels 1-3 here, 26 KB). Storage atomics
 * round at every add: bf16 gets 5e-2 (a few ulps of 2^-8 over the few adds an element
 * takes here), fp16 keeps 1e-2. */
static void roi_case_budget(int sampling, int aligned, const char *budget_mb);
static void roi_case(int sampling, int aligned) { roi_case_budget(sampling, aligned, NULL); }
/* MRCNN_ROI_BWD for both backends' backward (NULL: unset, the scatter). "gather": the
 * CPU's gather against the GPU's (adaptive sampling: the GPU scatters), every dtype in one
 * rounding per element, so the default tolerance. */
static const char *g_roi_bwd = NULL;

static void roi_case_budget(int sampling, int aligned, const char *budget_mb) {
    const int n = 2, c = 8, levels = 4;
    const int lh[4] = {32, 16, 8, 4}, lw[4] = {40, 20, 10, 5};
    mrcnn_roi_align_desc d = mrcnn_roi_align_desc_make(n, c, levels, 2, lh, lw, 7, sampling, aligned);
    tpair f[4], df[4];
    mrcnn_tensor fg[4], fc[4], dfg[4], dfc[4];
    for (int l = 0; l < levels; l++) {
        f[l] = TP(P, "feat", n, lh[l], lw[l], c);
        df[l] = TP(P, "dfeat", n, lh[l], lw[l], c);
        tp_fill(&f[l], -1, 1);
        tp_fill(&df[l], -1, 1);
        fg[l] = f[l].g;
        fc[l] = f[l].c;
        dfg[l] = df[l].g;
        dfc[l] = df[l].c;
    }
    const int r = 61;
    tpair rois = TP(MRCNN_DTYPE_F32, "rois", r, 5);
    float *h = malloc(r * 5 * sizeof(float)), *u = malloc(r * 5 * sizeof(float));
    test_fill_uniform(u, r * 5, 0, 1, g_seed++);
    for (int i = 0; i < r; i++) {
        float *b = h + 5 * i, *q = u + 5 * i;
        /* Sizes from 2 to 200 px on a 128 x 160 image (all four levels), some past the border. */
        float size = 2.0f * powf(100.0f, q[0]);
        float cx = -10 + 180 * q[1], cy = -10 + 148 * q[2];
        float aspect = 0.5f + 1.5f * q[3];
        b[0] = i % 13 == 5 ? -1.0f : (float)(i % n);
        b[1] = cx - 0.5f * size * aspect;
        b[2] = cy - 0.5f * size / aspect;
        b[3] = cx + 0.5f * size * aspect;
        b[4] = cy + 0.5f * size / aspect;
    }
    /* Non-finite and overflowing boxes are empty on both backends (zeros, no gradient):
     * a NaN sample position cast to int would index anywhere. */
    h[5 * 7 + 1] = NAN;
    h[5 * 19 + 4] = INFINITY;
    h[5 * 31 + 3] = 3e38f, h[5 * 31 + 1] = -3e38f;
    /* Squares of 224, 112 and 448 px sit exactly on LevelMapper boundaries (levels 4, 3,
     * 5), where the two backends' log2f could round apart; 223 px just below one. An
     * inverted box: an empty adaptive grid when aligned (box_math.h's frame). */
    const float side[4] = {224.0f, 112.0f, 448.0f, 223.0f};
    for (int k = 0; k < 4; k++) {
        float *b = h + 5 * (40 + k);
        b[0] = (float)(k % n), b[1] = 3.0f, b[2] = 5.0f, b[3] = 3.0f + side[k], b[4] = 5.0f + side[k];
    }
    h[5 * 45 + 3] = h[5 * 45 + 1] - 20.0f;
    tp_write(&rois, h);
    free(h);
    free(u);
    tpair y = TP(P, "y", r, 7, 7, c);
    tp_poison(&y);
    C->nn.roi_align_forward(C, &d, fc, &rois.c, &y.c);
    G->nn.roi_align_forward(G, &d, fg, &rois.g, &y.g);
    tp_expect(&y, sampling > 0 ? "roi_align" : "roi_align adaptive");
    tpair dy = TP(P, "dy", r, 7, 7, c);
    tp_fill(&dy, -1, 1);
    if (g_roi_bwd) setenv("MRCNN_ROI_BWD", g_roi_bwd, 1);
    C->nn.roi_align_backward(C, &d, &rois.c, &dy.c, dfc);
    if (budget_mb) setenv("MRCNN_ROI_BWD_SCRATCH_MB", budget_mb, 1);
    G->nn.roi_align_backward(G, &d, &rois.g, &dy.g, dfg);
    G->mem.sync(G);
    if (budget_mb) unsetenv("MRCNN_ROI_BWD_SCRATCH_MB");
    if (g_roi_bwd) unsetenv("MRCNN_ROI_BWD");
    const double t = budget_mb && !g_roi_bwd && P == MRCNN_DTYPE_BF16 ? 5e-2 : tol();
    char op[80];
    snprintf(op, sizeof op, "roi_align_bwd%s%s%s%s", sampling > 0 ? "" : " adaptive", g_roi_bwd ? " gather" : "",
             budget_mb ? " budget " : "", budget_mb ? budget_mb : "");
    for (int l = 0; l < levels; l++) tp_expect_tol(&df[l], t, op);
    for (int l = 0; l < levels; l++) {
        tp_free(&f[l]);
        tp_free(&df[l]);
    }
    tp_free(&rois);
    tp_free(&y);
    tp_free(&dy);
}

static void test_roi_align_body(void) {
    need((void *)C->nn.roi_align_forward, "cpu roi_align_forward");
    need((void *)G->nn.roi_align_forward, "cuda roi_align_forward");
    for (int i = 0; i < 3; i++) {
        set_precision(k_precisions[i]);
        roi_case(2, 0);
        roi_case(0, 1);
        /* Half levels past the fp32 scratch budget: storage-dtype atomics (all levels,
         * then the largest only). */
        roi_case_budget(2, 0, "0");
        roi_case_budget(0, 1, "0.05");
        /* The backward by gather, which ignores the scratch budget: sampling 1..4 on
         * the GPU's gather kernels, adaptive on its scatter. */
        g_roi_bwd = "gather";
        roi_case(2, 0);
        roi_case(4, 1);
        roi_case(1, 0);
        roi_case_budget(2, 1, "0");
        roi_case(0, 1);
        g_roi_bwd = NULL;
    }
}

GUARDED_TEST(test_conv2d)
GUARDED_TEST(test_conv2d_odd_fp32)
GUARDED_TEST(test_conv2d_odd_half)
GUARDED_TEST(test_conv2d_dilated)
GUARDED_TEST(test_deconv2x2)
GUARDED_TEST(test_linear)
GUARDED_TEST(test_relu_add)
GUARDED_TEST(test_maxpool)
GUARDED_TEST(test_upsample_add)
GUARDED_TEST(test_losses)
GUARDED_TEST(test_sgd)
GUARDED_TEST(test_nonfinite)
GUARDED_TEST(test_roi_align)
GUARDED_TEST(test_vector_paths)
GUARDED_TEST(test_write_staging)
GUARDED_TEST(test_stream_graph)
GUARDED_TEST(test_step_ops)

int main(void) {
    /* TF32 stays off in cuBLAS and cuDNN for the fp32 comparisons. */
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
    const char *why = NULL;
    const char *sc = getenv("MRCNN_CUDA_OPS_SELFCHECK");
    g_selfcheck = sc && atoi(sc) != 0;
    if (g_selfcheck) {
        /* The harness itself (fills, poison, accumulate set-ups, metrics) on a machine
         * without a GPU: every comparison must come out exact. */
        printf("self-check: CPU backend against CPU backend\n");
        G = mrcnn_backend_cpu_create();
        GF = mrcnn_backend_cpu_create();
    } else {
        G = mrcnn_backend_cuda_create(0, &why);
        if (!G) return test_gpu_skip(why);
        setenv("MRCNN_CONV_FUSED", "1", 1);
        GF = mrcnn_backend_cuda_create(0, &why);
        unsetenv("MRCNN_CONV_FUSED");
        MRCNN_CHECK(GF != NULL, "second CUDA backend: %s", why ? why : "?");
    }
    C = mrcnn_backend_cpu_create();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d),     cmocka_unit_test(test_conv2d_odd_fp32),
        cmocka_unit_test(test_conv2d_odd_half),
        cmocka_unit_test(test_deconv2x2),  cmocka_unit_test(test_linear),
        cmocka_unit_test(test_relu_add),   cmocka_unit_test(test_maxpool),   cmocka_unit_test(test_upsample_add),
        cmocka_unit_test(test_losses),     cmocka_unit_test(test_sgd),       cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_roi_align),  cmocka_unit_test(test_conv2d_dilated),
        cmocka_unit_test(test_vector_paths), cmocka_unit_test(test_write_staging),
        cmocka_unit_test(test_stream_graph),
        cmocka_unit_test(test_step_ops),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mrcnn_test_catch_end();
    mrcnn_backend_destroy(G);
    mrcnn_backend_destroy(GF);
    mrcnn_backend_destroy(C);
    return rc;
}
