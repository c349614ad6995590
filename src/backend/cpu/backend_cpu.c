/* The CPU backend: the float reference ops (ops.h) behind the backend interface. The
 * shape rules of the checked entries are mrcnn_backend_validate's (backend_validate.c),
 * which both CPU factories run last; this file adds what the CPU needs (fp32 data).
 * Rounded-storage mode (set_precision F16/BF16) rounds every activation and gradient an
 * op writes, so mixed-precision behaviour can be studied without a GPU; parameters,
 * optimizer state and loss scalars stay fp32 as on the GPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mrcnn/step_ctl.h"
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"

#define CPU_ALIGN 64

/* A contiguous fp32 CPU tensor with data, or a failure naming `what`. */
static float *f32(const mrcnn_tensor *t, const char *what) {
    MRCNN_CHECK(t != NULL, "%s: NULL tensor", what);
    MRCNN_CHECK(t->device == MRCNN_DEVICE_CPU, "%s: tensor is on the GPU, the cpu backend needs host memory", what);
    mrcnn_tensor_check_dtype(t, what, MRCNN_DTYPE_F32);
    MRCNN_CHECK(mrcnn_tensor_is_contiguous(t), "%s: tensor must be contiguous", what);
    MRCNN_CHECK(t->data != NULL || mrcnn_tensor_numel(t) == 0, "%s: NULL data", what);
    return t->data;
}

/* f32() plus an exact shape (-1 = any). */
static float *f32_shape(const mrcnn_tensor *t, const char *what, int ndim, const int64_t *shape) {
    float *p = f32(t, what);
    mrcnn_tensor_check_shape(t, what, ndim, shape);
    return p;
}

static float *f32_like(const mrcnn_tensor *t, const char *what, const mrcnn_tensor *ref) {
    return f32_shape(t, what, ref->ndim, ref->shape);
}

static void round_out(const mrcnn_backend *be, mrcnn_tensor *t) {
    if (t && be->storage != MRCNN_DTYPE_F32) mrcnn_round_array(t->data, (size_t)mrcnn_tensor_numel(t), be->storage);
}

static void apply_act(mrcnn_activation act, mrcnn_tensor *y) {
    if (act == MRCNN_ACT_RELU) mrcnn_relu_forward(mrcnn_tensor_numel(y), y->data, y->data);
}

static int to_int(int64_t v, const char *what) {
    MRCNN_CHECK(v >= 0 && v <= 0x7fffffff, "%s: extent %lld out of int range", what, (long long)v);
    return (int)v;
}

/* ---- memory ---- */

static void *cpu_alloc(const mrcnn_backend *be, size_t bytes, const char *what) {
    void *p = NULL;
    size_t n = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    MRCNN_CHECK(posix_memalign(&p, CPU_ALIGN, n ? n : CPU_ALIGN) == 0, "cpu alloc: out of memory for %s (%zu bytes)",
                what ? what : "buffer", bytes);
    memset(p, 0, n);
    return p;
}

static void cpu_free(const mrcnn_backend *be, void *p) { free(p); }

static void cpu_zero(const mrcnn_backend *be, mrcnn_tensor *t) {
    MRCNN_CHECK(t && t->device == MRCNN_DEVICE_CPU && mrcnn_tensor_is_contiguous(t), "cpu zero: needs a contiguous host tensor");
    if (t->data) memset(t->data, 0, mrcnn_tensor_nbytes(t));
}

static void cpu_write(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src) {
    MRCNN_CHECK(dst && dst->device == MRCNN_DEVICE_CPU && mrcnn_tensor_is_contiguous(dst), "cpu write: needs a contiguous host tensor");
    MRCNN_CHECK(host_src != NULL || mrcnn_tensor_nbytes(dst) == 0, "cpu write: NULL source");
    if (mrcnn_tensor_nbytes(dst)) memcpy(dst->data, host_src, mrcnn_tensor_nbytes(dst));
    mrcnn_backend_count(be, 0, 0, 0, 1, (uint64_t)mrcnn_tensor_nbytes(dst));
}

static void cpu_read(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst) {
    MRCNN_CHECK(src && src->device == MRCNN_DEVICE_CPU && mrcnn_tensor_is_contiguous(src), "cpu read: needs a contiguous host tensor");
    MRCNN_CHECK(host_dst != NULL || mrcnn_tensor_nbytes(src) == 0, "cpu read: NULL destination");
    if (mrcnn_tensor_nbytes(src)) memcpy(host_dst, src->data, mrcnn_tensor_nbytes(src));
    mrcnn_backend_count(be, 1, (uint64_t)mrcnn_tensor_nbytes(src), 1, 0, 0);
}

/* Nothing to wait for, but counted as the CUDA backend's wait is. */
static void cpu_sync(const mrcnn_backend *be) { mrcnn_backend_count(be, 0, 0, 1, 0, 0); }

static void cpu_set_precision(mrcnn_backend *be, mrcnn_dtype storage) {
    MRCNN_CHECK(storage == MRCNN_DTYPE_F32 || storage == MRCNN_DTYPE_F16 || storage == MRCNN_DTYPE_BF16,
                "set_precision: storage dtype %s is not fp32, fp16 or bf16", mrcnn_dtype_name(storage));
    be->storage = storage;
}

/* Host tensors of any float dtype (element counts, devices and layout are checked in
 * front, backend_validate.c); an fp32 output in rounded-storage mode is rounded like
 * every other op output. */
static void cpu_cast(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    int64_t n = mrcnn_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (x->dtype) {
        case MRCNN_DTYPE_F32: v = ((const float *)x->data)[i]; break;
        case MRCNN_DTYPE_F16: v = mrcnn_f16_to_f32(((const uint16_t *)x->data)[i]); break;
        case MRCNN_DTYPE_BF16: v = mrcnn_bf16_to_f32(((const uint16_t *)x->data)[i]); break;
        default: MRCNN_CHECK(0, "cpu cast: input dtype %s is not fp32, fp16 or bf16", mrcnn_dtype_name(x->dtype));
        }
        switch (y->dtype) {
        case MRCNN_DTYPE_F32: ((float *)y->data)[i] = mrcnn_round_to(v, be->storage); break;
        case MRCNN_DTYPE_F16: ((uint16_t *)y->data)[i] = mrcnn_f32_to_f16(v); break;
        case MRCNN_DTYPE_BF16: ((uint16_t *)y->data)[i] = mrcnn_f32_to_bf16(v); break;
        default: MRCNN_CHECK(0, "cpu cast: output dtype %s is not fp32, fp16 or bf16", mrcnn_dtype_name(y->dtype));
        }
    }
}

/* Element i of a host float tensor as float, and a float stored into one (round to
 * nearest even below fp32); the dtypes are checked in front (backend_validate.c). */
static float load_float(const mrcnn_tensor *t, int64_t i) {
    if (t->dtype == MRCNN_DTYPE_F32) return ((const float *)t->data)[i];
    if (t->dtype == MRCNN_DTYPE_F16) return mrcnn_f16_to_f32(((const uint16_t *)t->data)[i]);
    return mrcnn_bf16_to_f32(((const uint16_t *)t->data)[i]);
}

static void store_float(mrcnn_tensor *t, int64_t i, float v) {
    if (t->dtype == MRCNN_DTYPE_F32) ((float *)t->data)[i] = v;
    else if (t->dtype == MRCNN_DTYPE_F16) ((uint16_t *)t->data)[i] = mrcnn_f32_to_f16(v);
    else ((uint16_t *)t->data)[i] = mrcnn_f32_to_bf16(v);
}

/* Stores each value as it is, also in rounded-storage mode: a copy of a value the
 * storage precision holds needs no rounding, and a weight copied in fp32 must stay exact. */
static void cpu_channel_copy(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    const int64_t m = x->shape[0], c = x->shape[1], d = y->shape[1], k = c < d ? c : d;
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < k; j++) store_float(y, r * d + j, load_float(x, r * c + j));
        for (int64_t j = k; j < d; j++) store_float(y, r * d + j, 0.0f);
    }
}

static void cpu_destroy(mrcnn_backend *be) { free(be); }

/* ---- convolutions ---- */

/* Shapes, layout, devices and activations of the nn entries are checked once, in front
 * of them (mrcnn_backend_validate, src/backend/backend_validate.c, which both CPU
 * factories run); what is left here is what this backend adds: fp32 data, since the
 * CPU ops compute on floats whatever the storage precision. */

static void cpu_conv2d_forward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                               const mrcnn_tensor *w, const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    mrcnn_conv2d_forward(d, f32(x, "conv2d_forward x"), f32(w, "conv2d_forward w"),
                         b ? f32(b, "conv2d_forward b") : NULL, f32(y, "conv2d_forward y"));
    apply_act(act, y);
    round_out(be, y);
}

/* db (K) += column sums of dy, for a bias-only request (no filter gradient). */
static void bias_grad(int64_t m, int k, const float *dy, float *db) {
    for (int c = 0; c < k; c++) {
        double s = 0;
        for (int64_t i = 0; i < m; i++) s += dy[i * k + c];
        db[c] += (float)s;
    }
}

/* The gradient a backward op uses: dy itself, or with act = RELU a copy masked by the
 * layer's output y (dy where y > 0, else 0), made as nn.relu_backward makes it (rounded
 * to the storage like its dx), so the fused op is bit-identical to relu_backward then
 * the op. *tmp is the copy to free, or NULL. */
static const float *grad_in(const mrcnn_backend *be, mrcnn_activation act, const mrcnn_tensor *y,
                            const mrcnn_tensor *dy, const char *what, float **tmp) {
    const float *g = f32(dy, what);
    *tmp = NULL;
    if (act != MRCNN_ACT_RELU) return g;
    const int64_t n = mrcnn_tensor_numel(dy);
    MRCNN_CHECK(y != NULL, "%s: act RELU needs the layer's output y", what);
    MRCNN_CHECK(mrcnn_tensor_numel(y) == n, "%s: y has %lld elements, dy %lld", what,
                (long long)mrcnn_tensor_numel(y), (long long)n);
    float *m = MRCNN_MALLOC(sizeof(float) * (size_t)(n ? n : 1), "masked output gradient");
    mrcnn_relu_backward(n, f32(y, what), g, m);
    if (be->storage != MRCNN_DTYPE_F32) mrcnn_round_array(m, (size_t)n, be->storage);
    return *tmp = m;
}

/* dx_mode WRITE: the op adds into zeros, so the result is the zeroed buffer's, bit for bit. */
static float *dx_target(mrcnn_tensor *dx, mrcnn_grad_mode mode, const char *what) {
    float *p = f32(dx, what);
    if (mode == MRCNN_GRAD_WRITE) memset(p, 0, sizeof(float) * (size_t)mrcnn_tensor_numel(dx));
    return p;
}

static void cpu_conv2d_backward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                                const mrcnn_tensor *w, const mrcnn_tensor *dy, mrcnn_activation act,
                                const mrcnn_tensor *y, mrcnn_tensor *dx, mrcnn_grad_mode dx_mode, mrcnn_tensor *dw,
                                mrcnn_tensor *db) {
    float *tmp;
    const float *g = grad_in(be, act, y, dy, "conv2d_backward dy", &tmp);
    float *pdb = db ? f32(db, "conv2d_backward db") : NULL;
    if (dx)
        mrcnn_conv2d_backward_data(d, g, f32(w, "conv2d_backward w"), dx_target(dx, dx_mode, "conv2d_backward dx"));
    if (dw)
        mrcnn_conv2d_backward_filter(d, f32(x, "conv2d_backward x"), g, f32(dw, "conv2d_backward dw"), pdb);
    else if (pdb)
        bias_grad(mrcnn_tensor_numel(dy) / (d->k ? d->k : 1), d->k, g, pdb);
    free(tmp);
    round_out(be, dx), round_out(be, dw), round_out(be, db);
}

static void cpu_bias_grad(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *db) {
    const int k = to_int(db->shape[0], "bias_grad K");
    bias_grad(k ? mrcnn_tensor_numel(dy) / k : 0, k, f32(dy, "bias_grad dy"), f32(db, "bias_grad db"));
    round_out(be, db);
}

static void cpu_deconv2x2_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                  const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    mrcnn_deconv2x2_forward(to_int(x->shape[0], "deconv2x2 N"), to_int(x->shape[1], "deconv2x2 H"),
                            to_int(x->shape[2], "deconv2x2 W"), to_int(x->shape[3], "deconv2x2 C"),
                            to_int(w->shape[0], "deconv2x2 K"), f32(x, "deconv2x2_forward x"),
                            f32(w, "deconv2x2_forward w"), b ? f32(b, "deconv2x2_forward b") : NULL,
                            f32(y, "deconv2x2_forward y"));
    apply_act(act, y);
    round_out(be, y);
}

static void cpu_deconv2x2_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                   const mrcnn_tensor *dy, mrcnn_activation act, const mrcnn_tensor *y,
                                   mrcnn_tensor *dx, mrcnn_grad_mode dx_mode, mrcnn_tensor *dw, mrcnn_tensor *db) {
    float *tmp;
    const float *g = grad_in(be, act, y, dy, "deconv2x2_backward dy", &tmp);
    mrcnn_deconv2x2_backward(to_int(x->shape[0], "deconv2x2 N"), to_int(x->shape[1], "deconv2x2 H"),
                             to_int(x->shape[2], "deconv2x2 W"), to_int(x->shape[3], "deconv2x2 C"),
                             to_int(w->shape[0], "deconv2x2 K"), f32(x, "deconv2x2_backward x"),
                             f32(w, "deconv2x2_backward w"), g,
                             dx ? dx_target(dx, dx_mode, "deconv2x2_backward dx") : NULL,
                             dw ? f32(dw, "deconv2x2_backward dw") : NULL,
                             db ? f32(db, "deconv2x2_backward db") : NULL);
    free(tmp);
    round_out(be, dx), round_out(be, dw), round_out(be, db);
}

/* ---- elementwise and pooling ---- */

static void cpu_relu_forward(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    mrcnn_relu_forward(mrcnn_tensor_numel(x), f32(x, "relu_forward x"), f32(y, "relu_forward y"));
    round_out(be, y);
}

static void cpu_relu_backward(const mrcnn_backend *be, const mrcnn_tensor *y, const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    mrcnn_relu_backward(mrcnn_tensor_numel(y), f32(y, "relu_backward y"), f32(dy, "relu_backward dy"),
                        f32(dx, "relu_backward dx"));
    round_out(be, dx);
}

/* The residual join y = relu(round(a + b)) in one pass over memory. Bit-identical to
 * add_forward, round_out, relu_forward: rounding keeps the sign and 0, and relu's
 * `v < 0 ? 0 : v` (ops' form: -0 and NaN pass) is applied to the rounded sum. */
static void add_relu(int64_t n, const float *a, const float *b, float *y, mrcnn_dtype storage) {
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (int64_t i = 0; i < n; i++) {
        float v = a[i] + b[i];
        if (storage != MRCNN_DTYPE_F32) v = mrcnn_round_to(v, storage);
        y[i] = v < 0 ? 0 : v;
    }
}

static void cpu_add_forward(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b, mrcnn_activation act,
                            mrcnn_tensor *y) {
    const float *pa = f32(a, "add_forward a"), *pb = f32(b, "add_forward b");
    float *py = f32(y, "add_forward y");
    if (act == MRCNN_ACT_RELU) {
        add_relu(mrcnn_tensor_numel(a), pa, pb, py, be->storage);
        return;
    }
    mrcnn_add_forward(mrcnn_tensor_numel(a), pa, pb, py);
    round_out(be, y);
}

static void cpu_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *da, mrcnn_tensor *db) {
    mrcnn_add_backward(mrcnn_tensor_numel(dy), f32(dy, "add_backward dy"), da ? f32(da, "add_backward da") : NULL,
                       db ? f32(db, "add_backward db") : NULL);
    round_out(be, da), round_out(be, db);
}

static void cpu_maxpool2d_forward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x, mrcnn_tensor *y) {
    mrcnn_maxpool2d_forward(d, f32(x, "maxpool2d_forward x"), f32(y, "maxpool2d_forward y"));
    round_out(be, y);
}

static void cpu_maxpool2d_backward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x,
                                   const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    mrcnn_maxpool2d_backward(d, f32(x, "maxpool2d_backward x"), f32(dy, "maxpool2d_backward dy"),
                             f32(dx, "maxpool2d_backward dx"));
    round_out(be, dx);
}

static void cpu_upsample_add_forward(const mrcnn_backend *be, const mrcnn_tensor *top, const mrcnn_tensor *lateral,
                                     mrcnn_tensor *y) {
    mrcnn_upsample_add_forward(to_int(top->shape[0], "upsample N"), to_int(top->shape[1], "upsample h"),
                               to_int(top->shape[2], "upsample w"), to_int(lateral->shape[1], "upsample H"),
                               to_int(lateral->shape[2], "upsample W"), to_int(top->shape[3], "upsample C"),
                               f32(top, "upsample_add_forward top"), f32(lateral, "upsample_add_forward lateral"),
                               f32(y, "upsample_add_forward y"));
    round_out(be, y);
}

static void cpu_upsample_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *dtop,
                                      mrcnn_tensor *dlateral) {
    mrcnn_upsample_add_backward(to_int(dy->shape[0], "upsample N"), dtop ? to_int(dtop->shape[1], "upsample h") : 1,
                                dtop ? to_int(dtop->shape[2], "upsample w") : 1, to_int(dy->shape[1], "upsample H"),
                                to_int(dy->shape[2], "upsample W"), to_int(dy->shape[3], "upsample C"),
                                f32(dy, "upsample_add_backward dy"), dtop ? f32(dtop, "upsample_add_backward dtop") : NULL,
                                dlateral ? f32(dlateral, "upsample_add_backward dlateral") : NULL);
    round_out(be, dtop), round_out(be, dlateral);
}

/* ---- fully connected: x may be any (N, ...) block, flattened per row ---- */

static void cpu_linear_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                               const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    mrcnn_linear_forward(to_int(x->shape[0], "linear N"), to_int(w->shape[1], "linear in"), to_int(w->shape[0], "linear out"),
                         f32(x, "linear_forward x"), f32(w, "linear_forward w"), b ? f32(b, "linear_forward b") : NULL,
                         f32(y, "linear_forward y"));
    apply_act(act, y);
    round_out(be, y);
}

static void cpu_linear_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                const mrcnn_tensor *dy, mrcnn_activation act, const mrcnn_tensor *y, mrcnn_tensor *dx,
                                mrcnn_grad_mode dx_mode, mrcnn_tensor *dw, mrcnn_tensor *db) {
    float *tmp;
    const float *g = grad_in(be, act, y, dy, "linear_backward dy", &tmp);
    mrcnn_linear_backward(to_int(x->shape[0], "linear N"), to_int(w->shape[1], "linear in"), to_int(w->shape[0], "linear out"),
                          f32(x, "linear_backward x"), f32(w, "linear_backward w"), g,
                          dx ? dx_target(dx, dx_mode, "linear_backward dx") : NULL,
                          dw ? f32(dw, "linear_backward dw") : NULL, db ? f32(db, "linear_backward db") : NULL);
    free(tmp);
    round_out(be, dx), round_out(be, dw), round_out(be, db);
}

/* ---- losses ---- */

static void write_loss(mrcnn_tensor *loss, float value, const char *what) {
    if (!loss) return;
    float *p = f32(loss, what);
    MRCNN_CHECK(mrcnn_tensor_numel(loss) == 1, "%s: loss tensor must hold 1 element, has %lld", what,
                (long long)mrcnn_tensor_numel(loss));
    p[0] = value;
}

static const float *same_numel(const mrcnn_tensor *t, const char *what, const mrcnn_tensor *ref) {
    if (!t) return NULL;
    const float *p = f32(t, what);
    MRCNN_CHECK(mrcnn_tensor_numel(t) == mrcnn_tensor_numel(ref), "%s: %lld elements but the logits have %lld", what,
                (long long)mrcnn_tensor_numel(t), (long long)mrcnn_tensor_numel(ref));
    return p;
}

/* The normalizer's count is in host memory here: reading it is no round trip. */
static float cpu_norm(const mrcnn_loss_norm *n, const char *op) {
    MRCNN_CHECK(n != NULL && n->scale > 0, "%s: the loss normalizer needs a positive scale", op);
    const float *c = NULL;
    if (n->count) {
        c = f32(n->count, op);
        MRCNN_CHECK(mrcnn_tensor_numel(n->count) == 1, "%s: the normalizer count must hold 1 element, has %lld", op,
                    (long long)mrcnn_tensor_numel(n->count));
    }
    return mrcnn_loss_norm_host(n, c);
}

/* grad_mult times the device-held gradient scale (host memory here). */
static float cpu_grad_mult(const mrcnn_loss_norm *n, const char *op) {
    if (!n->grad_scale) return n->grad_mult;
    const float *g = f32(n->grad_scale, op);
    MRCNN_CHECK(mrcnn_tensor_numel(n->grad_scale) == 1, "%s: the gradient scale must hold 1 element, has %lld", op,
                (long long)mrcnn_tensor_numel(n->grad_scale));
    return n->grad_mult * g[0];
}

static void cpu_bce_logits(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t, const mrcnn_tensor *weight,
                           const mrcnn_loss_norm *ln, mrcnn_tensor *loss, mrcnn_tensor *dx) {
    float norm = cpu_norm(ln, "bce_logits");
    const float *px = f32(x, "bce_logits x");
    int64_t n = mrcnn_tensor_numel(x);
    const float *pt = same_numel(t, "bce_logits targets", x), *pw = same_numel(weight, "bce_logits weight", x);
    MRCNN_CHECK(pt != NULL, "bce_logits: NULL targets");
    if (loss) write_loss(loss, mrcnn_bce_logits_forward(n, px, pt, pw, norm), "bce_logits loss");
    if (dx) {
        mrcnn_bce_logits_backward(n, px, pt, pw, norm, cpu_grad_mult(ln, "bce_logits"), f32_like(dx, "bce_logits dx", x));
        round_out(be, dx);
    }
}

static void cpu_softmax_ce(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                           const mrcnn_loss_norm *ln, mrcnn_tensor *loss, mrcnn_tensor *dx) {
    float norm = cpu_norm(ln, "softmax_ce");
    int64_t xs[2] = {-1, -1};
    const float *px = f32_shape(x, "softmax_ce x", 2, xs);
    MRCNN_CHECK(labels != NULL && labels->device == MRCNN_DEVICE_CPU, "softmax_ce: labels must be a host tensor");
    mrcnn_tensor_check_dtype(labels, "softmax_ce labels", MRCNN_DTYPE_I32);
    int64_t ls[1] = {x->shape[0]};
    mrcnn_tensor_check_shape(labels, "softmax_ce labels", 1, ls);
    int n = to_int(x->shape[0], "softmax_ce rows"), c = to_int(x->shape[1], "softmax_ce classes");
    if (loss) write_loss(loss, mrcnn_softmax_ce_forward(n, c, px, labels->data, norm), "softmax_ce loss");
    if (dx) {
        mrcnn_softmax_ce_backward(n, c, px, labels->data, norm, cpu_grad_mult(ln, "softmax_ce"), f32_like(dx, "softmax_ce dx", x));
        round_out(be, dx);
    }
}

static void cpu_smooth_l1(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t, const mrcnn_tensor *weight,
                          float beta, const mrcnn_loss_norm *ln, mrcnn_tensor *loss, mrcnn_tensor *dx) {
    float norm = cpu_norm(ln, "smooth_l1");
    const float *px = f32(x, "smooth_l1 x");
    int64_t n = mrcnn_tensor_numel(x);
    const float *pt = same_numel(t, "smooth_l1 targets", x), *pw = same_numel(weight, "smooth_l1 weight", x);
    MRCNN_CHECK(pt != NULL, "smooth_l1: NULL targets");
    if (loss) write_loss(loss, mrcnn_smooth_l1_forward(n, px, pt, pw, beta, norm), "smooth_l1 loss");
    if (dx) {
        mrcnn_smooth_l1_backward(n, px, pt, pw, beta, norm, cpu_grad_mult(ln, "smooth_l1"), f32_like(dx, "smooth_l1 dx", x));
        round_out(be, dx);
    }
}

/* ---- optimizer ---- */

/* PyTorch's SGD: g' = grad_scale * q * g + weight_decay * mask * p; v = mu v + g'; p -= lr v.
 * decay_mask: (n) per element (0 exempts, e.g. biases and norms), or (2, n): that, then
 * the gradient's preconditioner q (train.h); NULL for all ones. */
static void cpu_sgd_update(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                           mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float lr, float momentum_coef,
                           float weight_decay, float grad_scale) {
    float *p = f32(params, "sgd_update params");
    const float *g = same_numel(grads, "sgd_update grads", params);
    float *v = (float *)same_numel(momentum, "sgd_update momentum", params);
    const int64_t n = mrcnn_tensor_numel(params);
    const int with_q = decay_mask && mrcnn_tensor_numel(decay_mask) == 2 * n && n > 0;
    const float *mask = with_q ? f32(decay_mask, "sgd_update decay_mask") : same_numel(decay_mask, "sgd_update decay_mask", params);
    const float *q = with_q ? mask + n : NULL;
    MRCNN_CHECK(g != NULL && v != NULL, "sgd_update: NULL grads or momentum");
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] * grad_scale * (q ? q[i] : 1.0f) + weight_decay * (mask ? mask[i] : 1.0f) * p[i];
        v[i] = momentum_coef * v[i] + d;
        p[i] -= lr * v[i];
    }
}

static int cpu_nonfinite(const mrcnn_backend *be, const mrcnn_tensor *t) {
    const float *p = f32(t, "nonfinite");
    const int64_t n = mrcnn_tensor_numel(t);
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(p[i]);
    mrcnn_backend_count(be, 1, sizeof(int), 1, 0, 0); // the CUDA backend reads a flag back here
    return bad;
}

/* Streams and graphs (backend.h): every CPU op has finished when it returns, so an
 * event orders nothing and there is no graph to record; the region runs directly. */
static char cpu_event_dummy;
static void *cpu_event_create(const mrcnn_backend *be) { return &cpu_event_dummy; }
static void cpu_event_nop(const mrcnn_backend *be, void *ev) {}
static int cpu_graph_begin(const mrcnn_backend *be) { return 0; }
static void *cpu_graph_end(const mrcnn_backend *be) { return NULL; }
static void cpu_graph_nop(const mrcnn_backend *be, void *graph) {}
static uint64_t cpu_graph_epoch(const mrcnn_backend *be) { return 0; } // no graphs: never stale
/* The count is in host memory and every earlier op has finished: read it, no wait. */
static void cpu_run_if(const mrcnn_backend *be, const mrcnn_tensor *count, int64_t above, void (*body)(void *ctx),
                       void *ctx) {
    MRCNN_CHECK(count && count->dtype == MRCNN_DTYPE_F32 && mrcnn_tensor_numel(count) == 1 && count->data,
                "run_if: a 1-element fp32 host count expected");
    if ((double)((const float *)count->data)[0] > (double)above) body(ctx);
}

/* ---- device options and statistics: the host's memory is the process's ---- */

static void cpu_set_tf32(mrcnn_backend *be, int on) {} // no tensor cores: tf32 runs as fp32

static int cpu_compute_capability(const mrcnn_backend *be) { return 0; }

static const char *cpu_device_name(const mrcnn_backend *be, char *buf, size_t len) {
    snprintf(buf, len, "cpu");
    return buf;
}

/* Resident set now (/proc/self/statm's second field, in pages); 0 when unreadable. */
static double cpu_memory_used_mb(const mrcnn_backend *be) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    int ok = f && fscanf(f, "%ld %ld", &pages, &resident) == 2;
    if (f) fclose(f);
    return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0) : 0;
}

static double cpu_peak_mb(const mrcnn_backend *be, int reset) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; // kB on Linux
}

mrcnn_backend *mrcnn_backend_cpu_create_generic(void) {
    mrcnn_backend *be = MRCNN_CALLOC(1, sizeof *be, "cpu backend");
    be->name = "cpu";
    be->device = MRCNN_DEVICE_CPU;
    be->storage = MRCNN_DTYPE_F32;
    be->mem.alloc = cpu_alloc;
    be->mem.free = cpu_free;
    be->mem.zero = cpu_zero;
    be->mem.write = cpu_write;
    be->mem.read = cpu_read;
    be->mem.sync = cpu_sync;
    be->set_precision = cpu_set_precision;
    be->nn.cast = cpu_cast;
    be->destroy = cpu_destroy;
    be->nn.conv2d_forward = cpu_conv2d_forward;
    be->nn.conv2d_backward = cpu_conv2d_backward;
    be->nn.deconv2x2_forward = cpu_deconv2x2_forward;
    be->nn.deconv2x2_backward = cpu_deconv2x2_backward;
    be->nn.relu_forward = cpu_relu_forward;
    be->nn.relu_backward = cpu_relu_backward;
    be->nn.add_forward = cpu_add_forward;
    be->nn.add_backward = cpu_add_backward;
    be->nn.maxpool2d_forward = cpu_maxpool2d_forward;
    be->nn.maxpool2d_backward = cpu_maxpool2d_backward;
    be->nn.upsample_add_forward = cpu_upsample_add_forward;
    be->nn.upsample_add_backward = cpu_upsample_add_backward;
    be->nn.linear_forward = cpu_linear_forward;
    be->nn.linear_backward = cpu_linear_backward;
    be->nn.bias_grad = cpu_bias_grad;
    be->nn.channel_copy = cpu_channel_copy;
    be->loss.bce_logits = cpu_bce_logits;
    be->loss.softmax_ce = cpu_softmax_ce;
    be->loss.smooth_l1 = cpu_smooth_l1;
    be->opt.sgd_update = cpu_sgd_update;
    be->opt.nonfinite = cpu_nonfinite;
    be->stream.event_create = cpu_event_create;
    be->stream.event_destroy = cpu_event_nop;
    be->stream.event_record = cpu_event_nop;
    be->stream.event_wait = cpu_event_nop;
    be->stream.graph_begin = cpu_graph_begin;
    be->stream.graph_end = cpu_graph_end;
    be->stream.graph_launch = cpu_graph_nop;
    be->stream.graph_destroy = cpu_graph_nop;
    be->stream.graph_epoch = cpu_graph_epoch;
    be->stream.run_if = cpu_run_if;
    be->info.set_tf32 = cpu_set_tf32;
    be->info.compute_capability = cpu_compute_capability;
    be->info.device_name = cpu_device_name;
    be->info.memory_used_mb = cpu_memory_used_mb;
    be->info.peak_mb = cpu_peak_mb;
    mrcnn_backend_cpu_fill_step(be); // the training step's bookkeeping (backend_cpu_step.c)
    mrcnn_backend_validate(be);      // the shape checks, in front of the entries above
    return be;
}
