/* Op benchmark of the CUDA backend at R50-FPN shapes (800x1216 images, 8 per step):
 * time per call and TFLOP/s (math-bound ops) or GB/s (memory-bound ops), each
 * against the ceiling measured on the project's H200 (shared/device/README.md).
 * Correctness is test_cuda_ops' job; gpu_check.sh runs that first.
 *
 * usage: bench_gpu_ops [--dtype bf16|fp16|fp32] [--iters N] [--cpu-check] [--only GROUP]
 * GROUP: conv, gemm, elementwise, roi_align, misc, upload, workspace or graph.
 * Inputs are random (never constant: constant data flatters tensor cores). Weights
 * are given in the compute dtype, as cuDNN's ceiling was measured; the training
 * path's fp32 master weights add one cast per call. Without a GPU it prints
 * "skip [gpu]: no GPU (...)" and exits 77. --cpu-check runs every case on the CPU backend
 * at fp32 with shapes divided by 8 (a check of the harness, one call per case; with
 * --iters N the memory-bound rows give CPU timings of the same ops).
 * The conv, linear and deconv groups time each backward two more ways: as the model calls
 * it ("bwd relu+write": the layer's ReLU masked inside the op, on CUDA one pass that also
 * sums db; dx written, not added; fp32 master dw and db) and as it called it before
 * b42e94c ("bwd zero+relu+add": dx zeroed, relu_backward into a buffer, the op adding). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/model.h" // mrcnn_backend_cpu_create
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/log.h"

/* Ceilings measured on the H200 (shared/device/README.md). */
#define CEIL_CONV_BF16 430.0 // cuDNN conv 3x3 NHWC fwd+bwd, TFLOP/s
#define CEIL_CONV_FP16 409.0
#define CEIL_CONV_FP32 96.0 // fp32 NCHW (no NHWC fp32 figure was measured)
#define CEIL_GEMM_BF16 784.0 // cuBLAS 8192^3
#define CEIL_GEMM_FP32 51.0
#define CEIL_COPY_GBS 4300.0 // device-to-device copy, read + write

static mrcnn_backend *be;
static mrcnn_dtype DT = MRCNN_DTYPE_BF16;
static int ITERS = 20;
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static int g_div = 1; // --cpu-check: shape divisor
static const char *g_only; // --only GROUP: that group of cases alone

/* 1 when the group runs (every group without --only). */
static int group_on(const char *group) { return !g_only || !strcmp(g_only, group); }

/* A spatial extent or a count, divided for --cpu-check. */
static int sz(int v) { return v / g_div > 0 ? v / g_div : 1; }

typedef struct {
    char name[72];
    double ms;
    double rate;    // TFLOP/s or GB/s
    double ceiling; // same unit, 0: none
    const char *unit;
} result;

static result results[128];
static int n_results;

static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; // [-1, 1)
}

/* A device tensor of dtype dt filled with random values in [-scale, scale). */
static mrcnn_tensor dev_tensor(mrcnn_dtype dt, int ndim, const int64_t *shape, float scale) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dt, be->device, ndim, shape);
    const int64_t n = mrcnn_tensor_numel(&t);
    t.data = be->mem.alloc(be, mrcnn_tensor_nbytes(&t) + 16, "bench tensor");
    void *h = MRCNN_MALLOC((size_t)n * mrcnn_dtype_size(dt) + 16, "bench host buffer");
    for (int64_t i = 0; i < n; i++) {
        float v = scale * frand();
        if (v == 0.0f) v = scale * 0.5f;
        if (dt == MRCNN_DTYPE_F32) ((float *)h)[i] = v;
        else if (dt == MRCNN_DTYPE_F16) ((uint16_t *)h)[i] = mrcnn_f32_to_f16(v);
        else if (dt == MRCNN_DTYPE_BF16) ((uint16_t *)h)[i] = mrcnn_f32_to_bf16(v);
        else if (dt == MRCNN_DTYPE_I32) ((int32_t *)h)[i] = (int32_t)(i % 91) - (i % 17 == 0);
    }
    be->mem.write(be, &t, h);
    be->mem.sync(be);
    free(h);
    return t;
}

static void dev_free(mrcnn_tensor *t) {
    be->mem.free(be, t->data);
    t->data = NULL;
}

static void add_result(const char *name, double ms, double work, int flops, double ceiling) {
    MRCNN_CHECK(n_results < (int)(sizeof results / sizeof *results), "too many bench results");
    result *r = &results[n_results++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ms = ms;
    r->rate = work / (ms * 1e-3) / (flops ? 1e12 : 1e9);
    r->ceiling = ceiling;
    r->unit = flops ? "TFLOP/s" : "GB/s";
    if (ceiling > 0)
        printf("%-60s %-5s %9.3f ms %9.1f %-7s %5.1f%% of %.0f\n", r->name, mrcnn_dtype_name(DT), ms, r->rate, r->unit,
               100.0 * r->rate / ceiling, ceiling);
    else
        printf("%-60s %-5s %9.3f ms %9.1f %-7s\n", r->name, mrcnn_dtype_name(DT), ms, r->rate, r->unit);
    fflush(stdout);
}

/* ---- timing: two warm-up calls (algorithm choice happens there), then ITERS ---- */

typedef void (*op_fn)(void *ctx);

static double time_ms(op_fn fn, void *ctx) {
    fn(ctx);
    fn(ctx);
    be->mem.sync(be);
    double t0 = mrcnn_time_now();
    for (int i = 0; i < ITERS; i++) fn(ctx);
    be->mem.sync(be);
    return (mrcnn_time_now() - t0) * 1e3 / ITERS;
}

/* ---- convolutions ----------------------------------------------------------------------- */

/* Which model-path backward rows a conv case gets: none (the workspace-cap repeat), with
 * dx, or without (the stem: the images need no gradient, the model passes dx NULL). */
typedef enum { MODEL_BWD_NONE, MODEL_BWD_DX, MODEL_BWD_NO_DX } model_bwd;

typedef struct {
    mrcnn_conv2d_desc d;
    model_bwd model;
    mrcnn_tensor x, w, b, y, dy, dx, dw, db, dw32, db32, dmask;
} conv_ctx;

static void conv_fwd(void *c_) {
    conv_ctx *c = c_;
    be->nn.conv2d_forward(be, &c->d, &c->x, &c->w, NULL, MRCNN_ACT_NONE, &c->y);
}
static void conv_fwd_bias_relu(void *c_) {
    conv_ctx *c = c_;
    be->nn.conv2d_forward(be, &c->d, &c->x, &c->w, &c->b, MRCNN_ACT_RELU, &c->y);
}
static void conv_bwd_data(void *c_) {
    conv_ctx *c = c_;
    be->nn.conv2d_backward(be, &c->d, &c->x, &c->w, &c->dy, MRCNN_ACT_NONE, NULL, &c->dx, MRCNN_GRAD_ADD, NULL, NULL);
}
static void conv_bwd_filter(void *c_) {
    conv_ctx *c = c_;
    be->nn.conv2d_backward(be, &c->d, &c->x, &c->w, &c->dy, MRCNN_ACT_NONE, NULL, NULL, MRCNN_GRAD_ADD, &c->dw, NULL);
}
/* As the model calls it (layers.c): one call, y is the forward's ReLU output. */
static void conv_bwd_model(void *c_) {
    conv_ctx *c = c_;
    mrcnn_tensor *dx = c->model == MODEL_BWD_DX ? &c->dx : NULL;
    be->nn.conv2d_backward(be, &c->d, &c->x, &c->w, &c->dy, MRCNN_ACT_RELU, &c->y, dx, MRCNN_GRAD_WRITE, &c->dw32,
                           &c->db32);
}
/* As the model called it before b42e94c: three calls and a separate bias-gradient pass. */
static void conv_bwd_before(void *c_) {
    conv_ctx *c = c_;
    mrcnn_tensor *dx = c->model == MODEL_BWD_DX ? &c->dx : NULL;
    if (dx) be->mem.zero(be, dx);
    be->nn.relu_backward(be, &c->y, &c->dy, &c->dmask);
    be->nn.conv2d_backward(be, &c->d, &c->x, &c->w, &c->dmask, MRCNN_ACT_NONE, NULL, dx, MRCNN_GRAD_ADD, &c->dw32,
                           &c->db32);
}

/* The model-path rows of one conv case (its forward rows have left the ReLU output in y). */
static void bench_conv_model_bwd(conv_ctx *c, const char *label, double flops, double ceil) {
    const mrcnn_conv2d_desc *d = &c->d;
    c->dw32 = dev_tensor(MRCNN_DTYPE_F32, 4, (int64_t[]){d->k, d->r, d->s, d->c}, 1.0f);
    c->db32 = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){d->k}, 1.0f);
    c->dmask = dev_tensor(DT, 4, c->dy.shape, 1.0f);
    const int with_dx = c->model == MODEL_BWD_DX;
    const double work = with_dx ? 2 * flops : flops; // data + filter, or filter alone
    char name[72];
    snprintf(name, sizeof name, "conv %s bwd relu+write%s", label, with_dx ? "" : " (no dx)");
    add_result(name, time_ms(conv_bwd_model, c), work, 1, ceil);
    snprintf(name, sizeof name, "conv %s bwd zero+relu+add%s", label, with_dx ? "" : " (no dx)");
    add_result(name, time_ms(conv_bwd_before, c), work, 1, ceil);
    dev_free(&c->dw32);
    dev_free(&c->db32);
    dev_free(&c->dmask);
}

/* useful_c: input channels that carry data (the stem's 3 of a padded 4 or 8). */
static void bench_conv(const char *label, mrcnn_conv2d_desc d, int useful_c, model_bwd model) {
    conv_ctx c;
    memset(&c, 0, sizeof c);
    c.d = d;
    c.model = model;
    const int p = mrcnn_conv2d_out_h(&d), q = mrcnn_conv2d_out_w(&d);
    c.x = dev_tensor(DT, 4, (int64_t[]){d.n, d.h, d.w, d.c}, 1.0f);
    c.w = dev_tensor(DT, 4, (int64_t[]){d.k, d.r, d.s, d.c}, 0.1f);
    c.b = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){d.k}, 0.1f);
    c.y = dev_tensor(DT, 4, (int64_t[]){d.n, p, q, d.k}, 1.0f);
    c.dy = dev_tensor(DT, 4, (int64_t[]){d.n, p, q, d.k}, 1.0f);
    c.dx = dev_tensor(DT, 4, (int64_t[]){d.n, d.h, d.w, d.c}, 1.0f);
    c.dw = dev_tensor(DT, 4, (int64_t[]){d.k, d.r, d.s, d.c}, 1.0f);
    const double flops = 2.0 * d.n * p * q * d.k * d.r * d.s * useful_c;
    const double ceil = DT == MRCNN_DTYPE_BF16 ? CEIL_CONV_BF16 : DT == MRCNN_DTYPE_F16 ? CEIL_CONV_FP16 : CEIL_CONV_FP32;
    char name[64];
    double f = time_ms(conv_fwd, &c);
    snprintf(name, sizeof name, "conv %s fwd", label);
    add_result(name, f, flops, 1, ceil);
    double fr = time_ms(conv_fwd_bias_relu, &c);
    snprintf(name, sizeof name, "conv %s fwd+bias+relu", label);
    add_result(name, fr, flops, 1, ceil);
    double bd = time_ms(conv_bwd_data, &c);
    snprintf(name, sizeof name, "conv %s bwd data", label);
    add_result(name, bd, flops, 1, ceil);
    double bf = time_ms(conv_bwd_filter, &c);
    snprintf(name, sizeof name, "conv %s bwd filter", label);
    add_result(name, bf, flops, 1, ceil);
    snprintf(name, sizeof name, "conv %s fwd+bwd", label);
    add_result(name, f + bd + bf, 3 * flops, 1, ceil);
    if (model != MODEL_BWD_NONE) bench_conv_model_bwd(&c, label, flops, ceil);
    mrcnn_tensor *all[] = {&c.x, &c.w, &c.b, &c.y, &c.dy, &c.dx, &c.dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dev_free(all[i]);
}

/* ---- GEMM-shaped ops: linear (box head fc6) and the mask head's deconv ---------------------- */

typedef struct {
    mrcnn_tensor x, w, b, y, dy, dx, dw, db, dmask;
} lin_ctx;

static void lin_fwd(void *c_) {
    lin_ctx *c = c_;
    be->nn.linear_forward(be, &c->x, &c->w, &c->b, MRCNN_ACT_RELU, &c->y);
}
static void lin_bwd(void *c_) {
    lin_ctx *c = c_;
    be->nn.linear_backward(be, &c->x, &c->w, &c->dy, MRCNN_ACT_NONE, NULL, &c->dx, MRCNN_GRAD_ADD, &c->dw, &c->db);
}
/* As the model calls it (box head fc6/fc7): y is the forward's ReLU output ... */
static void lin_bwd_model(void *c_) {
    lin_ctx *c = c_;
    be->nn.linear_backward(be, &c->x, &c->w, &c->dy, MRCNN_ACT_RELU, &c->y, &c->dx, MRCNN_GRAD_WRITE, &c->dw, &c->db);
}
/* ... and as it called it before b42e94c. */
static void lin_bwd_before(void *c_) {
    lin_ctx *c = c_;
    be->mem.zero(be, &c->dx);
    be->nn.relu_backward(be, &c->y, &c->dy, &c->dmask);
    be->nn.linear_backward(be, &c->x, &c->w, &c->dmask, MRCNN_ACT_NONE, NULL, &c->dx, MRCNN_GRAD_ADD, &c->dw, &c->db);
}
static void deconv_fwd(void *c_) {
    lin_ctx *c = c_;
    be->nn.deconv2x2_forward(be, &c->x, &c->w, &c->b, MRCNN_ACT_RELU, &c->y);
}
static void deconv_bwd(void *c_) {
    lin_ctx *c = c_;
    be->nn.deconv2x2_backward(be, &c->x, &c->w, &c->dy, MRCNN_ACT_NONE, NULL, &c->dx, MRCNN_GRAD_ADD, &c->dw, &c->db);
}
/* As the mask head's upsample calls it, and as it called it before b42e94c. */
static void deconv_bwd_model(void *c_) {
    lin_ctx *c = c_;
    be->nn.deconv2x2_backward(be, &c->x, &c->w, &c->dy, MRCNN_ACT_RELU, &c->y, &c->dx, MRCNN_GRAD_WRITE, &c->dw,
                              &c->db);
}
static void deconv_bwd_before(void *c_) {
    lin_ctx *c = c_;
    be->mem.zero(be, &c->dx);
    be->nn.relu_backward(be, &c->y, &c->dy, &c->dmask);
    be->nn.deconv2x2_backward(be, &c->x, &c->w, &c->dmask, MRCNN_ACT_NONE, NULL, &c->dx, MRCNN_GRAD_ADD, &c->dw,
                              &c->db);
}

static void bench_linear(int n, int in, int out) {
    lin_ctx c;
    c.x = dev_tensor(DT, 2, (int64_t[]){n, in}, 1.0f);
    c.w = dev_tensor(DT, 2, (int64_t[]){out, in}, 0.01f);
    c.b = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){out}, 0.1f);
    c.y = dev_tensor(DT, 2, (int64_t[]){n, out}, 1.0f);
    c.dy = dev_tensor(DT, 2, (int64_t[]){n, out}, 1.0f);
    c.dmask = dev_tensor(DT, 2, (int64_t[]){n, out}, 1.0f);
    c.dx = dev_tensor(DT, 2, (int64_t[]){n, in}, 1.0f);
    c.dw = dev_tensor(MRCNN_DTYPE_F32, 2, (int64_t[]){out, in}, 1.0f);
    c.db = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){out}, 1.0f);
    const double flops = 2.0 * n * in * out;
    const double ceil = DT == MRCNN_DTYPE_F32 ? CEIL_GEMM_FP32 : CEIL_GEMM_BF16;
    char name[64];
    snprintf(name, sizeof name, "linear %dx%d->%d fwd+bias+relu", n, in, out);
    add_result(name, time_ms(lin_fwd, &c), flops, 1, ceil);
    snprintf(name, sizeof name, "linear %dx%d->%d bwd (dx,dw,db)", n, in, out);
    add_result(name, time_ms(lin_bwd, &c), 2 * flops, 1, ceil);
    snprintf(name, sizeof name, "linear %dx%d->%d bwd relu+write", n, in, out);
    add_result(name, time_ms(lin_bwd_model, &c), 2 * flops, 1, ceil);
    snprintf(name, sizeof name, "linear %dx%d->%d bwd zero+relu+add", n, in, out);
    add_result(name, time_ms(lin_bwd_before, &c), 2 * flops, 1, ceil);
    mrcnn_tensor *all[] = {&c.x, &c.w, &c.b, &c.y, &c.dy, &c.dx, &c.dw, &c.db, &c.dmask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dev_free(all[i]);
}

static void bench_deconv(int r, int s, int ch, int k) {
    lin_ctx c;
    c.x = dev_tensor(DT, 4, (int64_t[]){r, s, s, ch}, 1.0f);
    c.w = dev_tensor(DT, 4, (int64_t[]){k, 2, 2, ch}, 0.05f);
    c.b = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){k}, 0.1f);
    c.y = dev_tensor(DT, 4, (int64_t[]){r, 2 * s, 2 * s, k}, 1.0f);
    c.dy = dev_tensor(DT, 4, (int64_t[]){r, 2 * s, 2 * s, k}, 1.0f);
    c.dmask = dev_tensor(DT, 4, (int64_t[]){r, 2 * s, 2 * s, k}, 1.0f);
    c.dx = dev_tensor(DT, 4, (int64_t[]){r, s, s, ch}, 1.0f);
    c.dw = dev_tensor(MRCNN_DTYPE_F32, 4, (int64_t[]){k, 2, 2, ch}, 1.0f);
    c.db = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){k}, 1.0f);
    const double flops = 2.0 * r * s * s * ch * 4.0 * k;
    const double ceil = DT == MRCNN_DTYPE_F32 ? CEIL_GEMM_FP32 : CEIL_GEMM_BF16;
    char name[64];
    snprintf(name, sizeof name, "deconv2x2 %d@%dx%d x%d fwd", ch, s, s, r);
    add_result(name, time_ms(deconv_fwd, &c), flops, 1, ceil);
    snprintf(name, sizeof name, "deconv2x2 %d@%dx%d x%d bwd", ch, s, s, r);
    add_result(name, time_ms(deconv_bwd, &c), 2 * flops, 1, ceil);
    snprintf(name, sizeof name, "deconv2x2 %d@%dx%d x%d bwd relu+write", ch, s, s, r);
    add_result(name, time_ms(deconv_bwd_model, &c), 2 * flops, 1, ceil);
    snprintf(name, sizeof name, "deconv2x2 %d@%dx%d x%d bwd zero+relu+add", ch, s, s, r);
    add_result(name, time_ms(deconv_bwd_before, &c), 2 * flops, 1, ceil);
    mrcnn_tensor *all[] = {&c.x, &c.w, &c.b, &c.y, &c.dy, &c.dx, &c.dw, &c.db, &c.dmask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dev_free(all[i]);
}

/* ---- memory-bound ops ------------------------------------------------------------------------ */

typedef struct {
    mrcnn_tensor a, b, y, dy, dx, top;
    mrcnn_pool2d_desc pool;
} mem_ctx;

static void relu_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.relu_forward(be, &c->a, &c->y);
}
static void relu_bwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.relu_backward(be, &c->y, &c->dy, &c->dx);
}
static void add_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.add_forward(be, &c->a, &c->b, MRCNN_ACT_NONE, &c->y);
}
static void pool_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.maxpool2d_forward(be, &c->pool, &c->a, &c->y);
}
static void pool_bwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.maxpool2d_backward(be, &c->pool, &c->a, &c->dy, &c->dx);
}
static void up_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.upsample_add_forward(be, &c->top, &c->a, &c->y);
}
static void up_bwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.upsample_add_backward(be, &c->dy, &c->top, &c->dx);
}

/* The bottleneck's residual join as the model called it before: y = a + b, then relu
 * in place (two passes over y) ... */
static void add_relu_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.add_forward(be, &c->a, &c->b, MRCNN_ACT_NONE, &c->y);
    be->nn.relu_forward(be, &c->y, &c->y);
}
/* ... and as it calls it now (resnet.c): one fused pass, in place on conv3's output. */
static void add_relu_fused(void *c_) {
    mem_ctx *c = c_;
    be->nn.add_forward(be, &c->y, &c->b, MRCNN_ACT_RELU, &c->y);
}
static void zero_fwd(void *c_) {
    mem_ctx *c = c_;
    be->mem.zero(be, &c->y);
}
/* One activation from the model's workspace and back, zeroed (mrcnn_ws_act: what every
 * forward output cost before) and not (mrcnn_ws_act_uninit: outputs an op overwrites;
 * on the CPU it writes the NaN poison instead, so there it costs the same). */
static mrcnn_ws bench_ws;
static void ws_act_zeroed(void *c_) {
    mem_ctx *c = c_;
    mrcnn_tensor t = mrcnn_ws_act(&bench_ws, c->y.ndim, c->y.shape);
    mrcnn_ws_release(&bench_ws, &t);
}
static void ws_act_uninit(void *c_) {
    mem_ctx *c = c_;
    mrcnn_tensor t = mrcnn_ws_act_uninit(&bench_ws, c->y.ndim, c->y.shape);
    mrcnn_ws_release(&bench_ws, &t);
}
static void acc_fwd(void *c_) {
    mem_ctx *c = c_;
    be->nn.add_backward(be, &c->dy, &c->dx, NULL);
}

static void bench_elementwise(void) {
    const int64_t shape[4] = {sz(8), sz(200), sz(304), 256};
    const double es = (double)mrcnn_dtype_size(DT);
    mem_ctx c;
    memset(&c, 0, sizeof c);
    c.a = dev_tensor(DT, 4, shape, 1.0f);
    c.b = dev_tensor(DT, 4, shape, 1.0f);
    c.y = dev_tensor(DT, 4, shape, 1.0f);
    c.dy = dev_tensor(DT, 4, shape, 1.0f);
    c.dx = dev_tensor(DT, 4, shape, 1.0f);
    const double n = (double)mrcnn_tensor_numel(&c.a);
    add_result("relu fwd 8x200x304x256", time_ms(relu_fwd, &c), 2 * n * es, 0, CEIL_COPY_GBS);
    add_result("relu bwd 8x200x304x256", time_ms(relu_bwd, &c), 4 * n * es, 0, CEIL_COPY_GBS);
    add_result("add fwd 8x200x304x256", time_ms(add_fwd, &c), 3 * n * es, 0, CEIL_COPY_GBS);
    add_result("add+relu (2 calls) 8x200x304x256", time_ms(add_relu_fwd, &c), 5 * n * es, 0, CEIL_COPY_GBS);
    /* Bytes of the fused pass (read a, b, write y): the two-call form moves 5n. */
    add_result("add+relu fused 8x200x304x256", time_ms(add_relu_fused, &c), 3 * n * es, 0, CEIL_COPY_GBS);
    add_result("accumulate dx += dy 8x200x304x256", time_ms(acc_fwd, &c), 3 * n * es, 0, CEIL_COPY_GBS);
    /* What zeroing one activation costs (the model zeroes every buffer it allocates,
     * also outputs an op overwrites whole). */
    add_result("zero 8x200x304x256", time_ms(zero_fwd, &c), n * es, 0, CEIL_COPY_GBS);
    mrcnn_ws_init(&bench_ws, be);
    add_result("ws activation alloc+free, zeroed", time_ms(ws_act_zeroed, &c), n * es, 0, 0);
    add_result("ws activation alloc+free, uninit", time_ms(ws_act_uninit, &c), n * es, 0, 0);
    mrcnn_ws_free(&bench_ws);
    {
        /* The same ops on views one element off 16-byte alignment: the scalar loops, for
         * the gain of the 16-byte path above. */
        mem_ctx m = c;
        const int64_t nm = (int64_t)n - 1;
        mrcnn_tensor *v[] = {&m.a, &m.b, &m.y, &m.dy, &m.dx};
        for (size_t i = 0; i < sizeof v / sizeof *v; i++)
            *v[i] = mrcnn_tensor_view((char *)v[i]->data + mrcnn_dtype_size(DT), DT, be->device, 1, &nm);
        add_result("relu fwd (scalar path, misaligned)", time_ms(relu_fwd, &m), 2 * n * es, 0, CEIL_COPY_GBS);
        add_result("relu bwd (scalar path, misaligned)", time_ms(relu_bwd, &m), 4 * n * es, 0, CEIL_COPY_GBS);
        add_result("add fwd (scalar path, misaligned)", time_ms(add_fwd, &m), 3 * n * es, 0, CEIL_COPY_GBS);
    }
    /* FPN top-down: P3 (8, 100, 152, 256) upsampled onto P2's lateral. */
    c.top = dev_tensor(DT, 4, (int64_t[]){sz(8), sz(200) / 2, sz(304) / 2, 256}, 1.0f);
    const double nt = n / 4;
    add_result("upsample_add fwd P3->P2 256", time_ms(up_fwd, &c), (2 * n + nt) * es, 0, CEIL_COPY_GBS);
    add_result("upsample_add bwd P3->P2 256", time_ms(up_bwd, &c), (3 * n + 2 * nt) * es, 0, CEIL_COPY_GBS);
    mrcnn_tensor *all[] = {&c.a, &c.b, &c.y, &c.dy, &c.dx, &c.top};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dev_free(all[i]);

    /* Stem max-pool 3x3 s2 p1: (8, 400, 608, 64) -> (8, 200, 304, 64). */
    memset(&c, 0, sizeof c);
    c.pool = (mrcnn_pool2d_desc){sz(8), 2 * sz(200), 2 * sz(304), 64, 3, 2, 1};
    c.a = dev_tensor(DT, 4, (int64_t[]){sz(8), 2 * sz(200), 2 * sz(304), 64}, 1.0f);
    c.dx = dev_tensor(DT, 4, (int64_t[]){sz(8), 2 * sz(200), 2 * sz(304), 64}, 1.0f);
    c.y = dev_tensor(DT, 4, (int64_t[]){sz(8), sz(200), sz(304), 64}, 1.0f);
    c.dy = dev_tensor(DT, 4, (int64_t[]){sz(8), sz(200), sz(304), 64}, 1.0f);
    const double ni = (double)mrcnn_tensor_numel(&c.a), no = (double)mrcnn_tensor_numel(&c.y);
    add_result("maxpool 3x3s2 fwd 8x400x608x64", time_ms(pool_fwd, &c), (ni + no) * es, 0, CEIL_COPY_GBS);
    add_result("maxpool 3x3s2 bwd 8x400x608x64", time_ms(pool_bwd, &c), (3 * ni + no) * es, 0, CEIL_COPY_GBS);
    mrcnn_tensor *all2[] = {&c.a, &c.dx, &c.y, &c.dy};
    for (size_t i = 0; i < sizeof all2 / sizeof *all2; i++) dev_free(all2[i]);
}

/* ---- ROIAlign, losses, optimizer ------------------------------------------------------------- */

typedef struct {
    mrcnn_roi_align_desc d;
    mrcnn_tensor feats[4], dfeats[4], rois, y, dy;
} roi_ctx;

static void roi_fwd(void *c_) {
    roi_ctx *c = c_;
    be->nn.roi_align_forward(be, &c->d, c->feats, &c->rois, &c->y);
}
static void roi_bwd(void *c_) {
    roi_ctx *c = c_;
    be->nn.roi_align_backward(be, &c->d, &c->rois, &c->dy, c->dfeats);
}

static void bench_roi_align(int r, int out) {
    roi_ctx c;
    memset(&c, 0, sizeof c);
    const int lh[4] = {sz(200), sz(100), sz(50), sz(25)}, lw[4] = {sz(304), sz(152), sz(76), sz(38)}, C = 256, n = sz(8);
    c.d = mrcnn_roi_align_desc_make(n, C, 4, 2, lh, lw, out, 2, 0);
    for (int l = 0; l < 4; l++) {
        c.feats[l] = dev_tensor(DT, 4, (int64_t[]){n, lh[l], lw[l], C}, 1.0f);
        c.dfeats[l] = dev_tensor(DT, 4, (int64_t[]){n, lh[l], lw[l], C}, 1.0f);
    }
    /* Boxes of 16..512 px over the 800x1216 canvas, all images. */
    float *h = MRCNN_MALLOC((size_t)r * 5 * sizeof(float), "rois");
    for (int i = 0; i < r; i++) {
        float sz = 16.0f + 248.0f * (frand() + 1.0f), cx = 608.0f + 600.0f * frand(), cy = 400.0f + 390.0f * frand();
        h[5 * i] = (float)(i % n);
        h[5 * i + 1] = cx - sz / 2;
        h[5 * i + 2] = cy - sz / 2;
        h[5 * i + 3] = cx + sz / 2;
        h[5 * i + 4] = cy + sz / 2;
    }
    c.rois = mrcnn_tensor_view(NULL, MRCNN_DTYPE_F32, be->device, 2, (int64_t[]){r, 5});
    c.rois.data = be->mem.alloc(be, (size_t)r * 5 * sizeof(float), "rois");
    be->mem.write(be, &c.rois, h);
    be->mem.sync(be);
    free(h);
    c.y = dev_tensor(DT, 4, (int64_t[]){r, out, out, C}, 1.0f);
    c.dy = dev_tensor(DT, 4, (int64_t[]){r, out, out, C}, 1.0f);
    const double es = (double)mrcnn_dtype_size(DT);
    const double bytes = (double)r * out * out * C * es; // output only: the gathers are cached reads
    char name[64];
    snprintf(name, sizeof name, "roi_align %dx%d x%d fwd (out bytes)", out, out, r);
    add_result(name, time_ms(roi_fwd, &c), bytes, 0, 0);
    snprintf(name, sizeof name, "roi_align %dx%d x%d bwd (dy bytes)", out, out, r);
    add_result(name, time_ms(roi_bwd, &c), bytes, 0, 0);
    if (DT != MRCNN_DTYPE_F32) {
        /* The fp16/bf16 gradient paths (roi_align.cu): every level through an fp32
         * scratch (the old way: 661 MB at this shape), and every level by storage-dtype
         * atomics; the default above keeps P3-P5 in scratch and P2 in atomics. */
        setenv("MRCNN_ROI_BWD_SCRATCH_MB", "100000", 1);
        snprintf(name, sizeof name, "roi_align %dx%d x%d bwd all fp32 scratch", out, out, r);
        add_result(name, time_ms(roi_bwd, &c), bytes, 0, 0);
        setenv("MRCNN_ROI_BWD_SCRATCH_MB", "0", 1);
        snprintf(name, sizeof name, "roi_align %dx%d x%d bwd all storage atomics", out, out, r);
        add_result(name, time_ms(roi_bwd, &c), bytes, 0, 0);
        unsetenv("MRCNN_ROI_BWD_SCRATCH_MB");
    }
    /* The backward without atomics (list, sort by pixel, sum per pixel): the default
     * becomes gather once this row is not slower than the bwd row above. */
    setenv("MRCNN_ROI_BWD", "gather", 1);
    snprintf(name, sizeof name, "roi_align %dx%d x%d bwd gather (no atomics)", out, out, r);
    add_result(name, time_ms(roi_bwd, &c), bytes, 0, 0);
    unsetenv("MRCNN_ROI_BWD");
    for (int l = 0; l < 4; l++) {
        dev_free(&c.feats[l]);
        dev_free(&c.dfeats[l]);
    }
    dev_free(&c.rois);
    dev_free(&c.y);
    dev_free(&c.dy);
}

typedef struct {
    mrcnn_tensor x, t, dx, loss, labels, p, g, v, mask;
} misc_ctx;

static void bce(void *c_) {
    misc_ctx *c = c_;
    be->loss.bce_logits(be, &c->x, &c->t, NULL, &(mrcnn_loss_norm){.scale = 1000.0f, .grad_mult = 1.0f}, &c->loss, &c->dx);
}
static void ce(void *c_) {
    misc_ctx *c = c_;
    be->loss.softmax_ce(be, &c->x, &c->labels, &(mrcnn_loss_norm){.scale = 512.0f, .grad_mult = 1.0f}, &c->loss, &c->dx);
}
static void sgd(void *c_) {
    misc_ctx *c = c_;
    be->opt.sgd_update(be, &c->p, &c->g, &c->v, &c->mask, 0.0f, 0.9f, 1e-4f, 1.0f);
}
static int nonfinite_result;
static void nonfinite(void *c_) {
    misc_ctx *c = c_;
    nonfinite_result |= be->opt.nonfinite(be, &c->g);
}

static void bench_misc(void) {
    const double es = (double)mrcnn_dtype_size(DT);
    misc_ctx c;
    memset(&c, 0, sizeof c);
    c.loss = dev_tensor(MRCNN_DTYPE_F32, 1, (int64_t[]){1}, 1.0f);
    /* Mask loss: 8 x 128 fg ROIs of 28x28 logits. */
    const int64_t nm = (int64_t)sz(1024) * 28 * 28;
    c.x = dev_tensor(DT, 1, &nm, 4.0f);
    c.t = dev_tensor(DT, 1, &nm, 1.0f);
    c.dx = dev_tensor(DT, 1, &nm, 1.0f);
    add_result("bce_logits 1024x28x28 (+dx)", time_ms(bce, &c), 4.0 * nm * es, 0, CEIL_COPY_GBS);
    dev_free(&c.x);
    dev_free(&c.t);
    dev_free(&c.dx);
    /* Box classifier: 8 x 512 ROIs, 91 classes. */
    c.x = dev_tensor(DT, 2, (int64_t[]){sz(4096), 91}, 4.0f);
    c.dx = dev_tensor(DT, 2, (int64_t[]){sz(4096), 91}, 1.0f);
    c.labels = dev_tensor(MRCNN_DTYPE_I32, 1, (int64_t[]){sz(4096)}, 1.0f);
    add_result("softmax_ce 4096x91 (+dx)", time_ms(ce, &c), 3.0 * sz(4096) * 91 * es, 0, CEIL_COPY_GBS);
    dev_free(&c.x);
    dev_free(&c.dx);
    dev_free(&c.labels);
    /* Fused SGD over a 44 M-parameter arena (R50-FPN Mask R-CNN): 24 bytes per parameter. */
    const int64_t np = 44000000 / g_div;
    c.p = dev_tensor(MRCNN_DTYPE_F32, 1, &np, 1.0f);
    c.g = dev_tensor(MRCNN_DTYPE_F32, 1, &np, 1.0f);
    c.v = dev_tensor(MRCNN_DTYPE_F32, 1, &np, 1.0f);
    c.mask = dev_tensor(MRCNN_DTYPE_F32, 1, &np, 1.0f);
    add_result("sgd_update 44M fp32", time_ms(sgd, &c), 24.0 * np, 0, CEIL_COPY_GBS);
    add_result("nonfinite scan 44M fp32 (+readback)", time_ms(nonfinite, &c), 4.0 * np, 0, CEIL_COPY_GBS);
    MRCNN_CHECK(nonfinite_result == 0, "nonfinite reported Inf/NaN in finite data");
    mrcnn_tensor *all[] = {&c.loss, &c.p, &c.g, &c.v, &c.mask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dev_free(all[i]);
}

/* ---- uploads, workspace cap, graphs ----------------------------------------------------------- */

/* A second backend made under one environment setting (the knobs are read at creation). */
static mrcnn_backend *backend_with(const char *var, const char *val) {
    if (g_div > 1) return mrcnn_backend_cpu_create();
    setenv(var, val, 1);
    const char *why = NULL;
    mrcnn_backend *b = mrcnn_backend_cuda_create(0, &why);
    unsetenv(var);
    MRCNN_CHECK(b != NULL, "second CUDA backend (%s=%s): %s", var, val, why ? why : "?");
    b->set_precision(b, DT);
    return b;
}

typedef struct {
    mrcnn_tensor img;
    void *host;
} up_ctx;

static void upload(void *c_) {
    up_ctx *c = c_;
    be->mem.write(be, &c->img, c->host);
}

/* The image batch (8 x 800x1216x3 fp32, 93 MB) from pageable host memory, as the loader
 * hands it: through the pinned staging ring (default) and directly (MRCNN_CUDA_PINNED_MB=0). */
static void bench_upload(void) {
    const int64_t shape[4] = {sz(8), sz(800), sz(1216), 3};
    up_ctx c;
    c.img = dev_tensor(MRCNN_DTYPE_F32, 4, shape, 1.0f);
    const size_t bytes = mrcnn_tensor_nbytes(&c.img);
    c.host = MRCNN_MALLOC(bytes, "bench image batch");
    memset(c.host, 0x3c, bytes);
    add_result("write image batch 8x800x1216x3 (pinned ring)", time_ms(upload, &c), (double)bytes, 0, 0);
    dev_free(&c.img);
    mrcnn_backend *saved = be;
    be = backend_with("MRCNN_CUDA_PINNED_MB", "0");
    c.img = dev_tensor(MRCNN_DTYPE_F32, 4, shape, 1.0f);
    add_result("write image batch 8x800x1216x3 (pageable)", time_ms(upload, &c), (double)bytes, 0, 0);
    dev_free(&c.img);
    mrcnn_backend_destroy(be);
    be = saved;
    free(c.host);
}

/* FPN P2's 3x3 conv under the old 256 MB cuDNN workspace cap, beside the default cap
 * (1/32 of device memory, 4 GB on the H200) that the conv rows above ran with. */
static void bench_workspace_cap(void) {
    mrcnn_backend *saved = be;
    be = backend_with("MRCNN_CUDNN_WORKSPACE_MB", "256");
    bench_conv("FPN P2 3x3 256 b8 ws256MB", mrcnn_conv2d_desc_make(sz(8), sz(200), sz(304), 256, 256, 3, 1, 1), 256,
               MODEL_BWD_NONE);
    mrcnn_backend_destroy(be);
    be = saved;
}

/* Launch-bound work: 64 small accumulations (a head's worth of tiny ops), launched one
 * by one and replayed from a CUDA graph (be->stream; the CPU backend runs them directly). */
typedef struct {
    mrcnn_tensor x, y;
    void *graph;
} graph_ctx;

static void small_ops(void *c_) {
    graph_ctx *c = c_;
    for (int i = 0; i < 64; i++) be->nn.add_backward(be, &c->x, &c->y, NULL);
}
static void small_ops_graph(void *c_) {
    graph_ctx *c = c_;
    if (c->graph) be->stream.graph_launch(be, c->graph);
    else small_ops(c);
}

static void bench_graph(void) {
    graph_ctx c;
    memset(&c, 0, sizeof c);
    const int64_t n = 4096;
    c.x = dev_tensor(MRCNN_DTYPE_F32, 1, &n, 1e-3f);
    c.y = dev_tensor(MRCNN_DTYPE_F32, 1, &n, 1.0f);
    add_result("64 small ops, launched", time_ms(small_ops, &c), 64.0 * 3 * n * 4, 0, 0);
    if (be->stream.graph_begin(be)) {
        small_ops(&c);
        c.graph = be->stream.graph_end(be);
    }
    add_result("64 small ops, graph replay", time_ms(small_ops_graph, &c), 64.0 * 3 * n * 4, 0, 0);
    if (c.graph) be->stream.graph_destroy(be, c.graph);
    dev_free(&c.x);
    dev_free(&c.y);
}

int main(int argc, char **argv) {
    int iters_given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            int dt = mrcnn_dtype_parse(argv[++i]);
            MRCNN_CHECK(dt == MRCNN_DTYPE_F32 || dt == MRCNN_DTYPE_F16 || dt == MRCNN_DTYPE_BF16,
                        "--dtype %s: expected bf16, fp16 or fp32", argv[i]);
            DT = (mrcnn_dtype)dt;
        } else if (!strcmp(argv[i], "--cpu-check")) {
            g_div = 8;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            g_only = argv[++i];
            const char *groups = " conv gemm elementwise roi_align misc upload workspace graph ";
            char key[48];
            snprintf(key, sizeof key, " %s ", g_only);
            MRCNN_CHECK(strstr(groups, key) != NULL, "--only %s: expected one of%s", g_only, groups);
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            ITERS = atoi(argv[++i]);
            MRCNN_CHECK(ITERS > 0, "--iters must be positive");
            iters_given = 1;
        } else {
            fprintf(stderr, "usage: bench_gpu_ops [--dtype bf16|fp16|fp32] [--iters N] [--cpu-check] [--only GROUP]\n");
            return 2;
        }
    }
    const char *why = NULL;
    if (g_div > 1) {
        be = mrcnn_backend_cpu_create();
        DT = MRCNN_DTYPE_F32;
        if (!iters_given) ITERS = 1; // --iters N: CPU timings worth reading (still shapes / 8)
        printf("cpu-check: every case on the CPU backend, shapes / %d (not a benchmark)\n", g_div);
    } else {
        be = mrcnn_backend_cuda_create(0, &why);
        if (!be) {
            printf("skip [gpu]: no GPU (%s)\n", why ? why : "?");
            return 77;
        }
    }
    be->set_precision(be, DT);
    printf("%-60s %-5s %12s %17s %s\n", "op", "dtype", "time", "rate", "of measured ceiling");
    if (group_on("conv")) {
        /* The model's ReLU convs at these shapes: res2 conv2 and conv1, the RPN conv on P2 (the
         * FPN output conv, same shape, has no ReLU: its backward is the plain bwd data/filter
         * rows), the stem (no dx), the mask head's convs. */
        bench_conv("res2 3x3 64@200x304 b8", mrcnn_conv2d_desc_make(sz(8), sz(200), sz(304), 64, 64, 3, 1, 1), 64,
                   MODEL_BWD_DX);
        bench_conv("1x1 256->64@200x304 b8", mrcnn_conv2d_desc_make(sz(8), sz(200), sz(304), 256, 64, 1, 1, 0), 256,
                   MODEL_BWD_DX);
        bench_conv("FPN P2 3x3 256@200x304 b8", mrcnn_conv2d_desc_make(sz(8), sz(200), sz(304), 256, 256, 3, 1, 1), 256,
                   MODEL_BWD_DX);
        bench_conv("stem 7x7s2 C4(3)@800x1216 b8", mrcnn_conv2d_desc_make(sz(8), sz(800), sz(1216), 4, 64, 7, 2, 3), 3,
                   MODEL_BWD_NO_DX);
        bench_conv("stem 7x7s2 C8(3)@800x1216 b8", mrcnn_conv2d_desc_make(sz(8), sz(800), sz(1216), 8, 64, 7, 2, 3), 3,
                   MODEL_BWD_NO_DX);
        bench_conv("mask 3x3 256@14x14 x1024", mrcnn_conv2d_desc_make(sz(1024), 14, 14, 256, 256, 3, 1, 1), 256,
                   MODEL_BWD_DX);
    }
    if (group_on("gemm")) {
        bench_linear(sz(4096), 256 * 7 * 7, 1024);
        bench_linear(sz(4096), 1024, 1024);
        bench_deconv(sz(1024), 14, 256, 256);
    }
    if (group_on("elementwise")) bench_elementwise();
    if (group_on("roi_align")) {
        bench_roi_align(sz(4096), 7);
        bench_roi_align(sz(1024), 14);
    }
    if (group_on("misc")) bench_misc();
    if (group_on("upload")) bench_upload();
    if (group_on("workspace")) bench_workspace_cap();
    if (group_on("graph")) bench_graph();
    mrcnn_backend_destroy(be);
    printf("bench_gpu_ops: %d results (%s, %d iterations each)\n", n_results, mrcnn_dtype_name(DT), ITERS);
    return 0;
}
