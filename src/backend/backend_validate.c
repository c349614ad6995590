/* The argument checks every backend shares (mrcnn_backend_validate, backend.h). Each
 * factory hands its finished backend here; the nn entries are replaced by wrappers that
 * check shapes (the NHWC / KRSC contract of ops.h), dtypes, devices and layout, then
 * call the entry the backend installed (be->unchecked). So a transposed tensor fails
 * the same way, with the same message, on the CPU and on the GPU, where the CUDA
 * kernels alone would only have compared element counts. The checks are compares on
 * the tensor headers: no allocation, no formatting unless one fails. The losses and
 * the detection-side entries are not wrapped here. */
#include <stdio.h>
#include <stdlib.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"

/* Present, on be's device, contiguous, with data: what every backend needs to run. */
static void check_tensor(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what) {
    MRCNN_CHECK(t != NULL, "%s: NULL tensor", what);
    MRCNN_CHECK(t->device == be->device, "%s: tensor is on the %s, the %s backend needs %s memory", what,
                t->device == MRCNN_DEVICE_GPU ? "GPU" : "CPU", be->name,
                be->device == MRCNN_DEVICE_GPU ? "device" : "host");
    MRCNN_CHECK(mrcnn_tensor_is_contiguous(t), "%s: tensor must be contiguous", what);
    MRCNN_CHECK(t->data != NULL || mrcnn_tensor_numel(t) == 0, "%s: NULL data", what);
}

/* check_tensor plus a float dtype (fp32, fp16, bf16: which of them a backend runs in
 * is its own business), of any shape. */
static void check_any(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what) {
    check_tensor(be, t, what);
    MRCNN_CHECK(t->dtype == MRCNN_DTYPE_F32 || t->dtype == MRCNN_DTYPE_F16 || t->dtype == MRCNN_DTYPE_BF16,
                "%s: dtype %s but expected a float dtype (fp32, fp16, bf16)", what, mrcnn_dtype_name(t->dtype));
}

/* check_any plus exactly this shape (-1: any extent). */
static void check_float(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what, int ndim,
                        const int64_t *shape) {
    check_any(be, t, what);
    mrcnn_tensor_check_shape(t, what, ndim, shape);
}

static void check_like(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what, const mrcnn_tensor *ref) {
    check_float(be, t, what, ref->ndim, ref->shape);
}

static void check_opt(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what, int ndim,
                      const int64_t *shape) {
    if (t) check_float(be, t, what, ndim, shape);
}

static void check_act(mrcnn_activation act, const char *op) {
    MRCNN_CHECK(act == MRCNN_ACT_NONE || act == MRCNN_ACT_RELU, "%s: unknown activation %d", op, (int)act);
}

static const int64_t any4[4] = {-1, -1, -1, -1};

/* ---- convolutions ---- */

/* x (N, H, W, C), w (K, R, S, C), y (N, P, Q, K) of the descriptor. */
static void conv_shapes(const mrcnn_conv2d_desc *d, int64_t xs[4], int64_t ws[4], int64_t ys[4]) {
    MRCNN_CHECK(d != NULL, "conv2d: NULL descriptor");
    mrcnn_conv2d_desc_check(d);
    xs[0] = d->n, xs[1] = d->h, xs[2] = d->w, xs[3] = d->c;
    ws[0] = d->k, ws[1] = d->r, ws[2] = d->s, ws[3] = d->c;
    ys[0] = d->n, ys[1] = mrcnn_conv2d_out_h(d), ys[2] = mrcnn_conv2d_out_w(d), ys[3] = d->k;
}

static void v_conv2d_forward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                             const mrcnn_tensor *w, const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    int64_t xs[4], ws[4], ys[4];
    conv_shapes(d, xs, ws, ys);
    check_float(be, x, "conv2d_forward x", 4, xs);
    check_float(be, w, "conv2d_forward w", 4, ws);
    check_opt(be, b, "conv2d_forward b", 1, &ws[0]);
    check_float(be, y, "conv2d_forward y", 4, ys);
    check_act(act, "conv2d_forward");
    be->unchecked->nn.conv2d_forward(be, d, x, w, b, act, y);
}

static void v_conv2d_backward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                              const mrcnn_tensor *w, const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_tensor *dw,
                              mrcnn_tensor *db) {
    int64_t xs[4], ws[4], ys[4];
    conv_shapes(d, xs, ws, ys);
    check_float(be, dy, "conv2d_backward dy", 4, ys);
    if (dx) {
        check_float(be, w, "conv2d_backward w", 4, ws);
        check_float(be, dx, "conv2d_backward dx", 4, xs);
    }
    if (dw) {
        check_float(be, x, "conv2d_backward x", 4, xs);
        check_float(be, dw, "conv2d_backward dw", 4, ws);
    }
    check_opt(be, db, "conv2d_backward db", 1, &ws[0]);
    be->unchecked->nn.conv2d_backward(be, d, x, w, dy, dx, dw, db);
}

/* x (N, H, W, C), w (K, 2, 2, C) -> y (N, 2H, 2W, K); K from w. */
static void deconv_shapes(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w, const char *xwhat,
                          const char *wwhat, int64_t ys[4]) {
    check_float(be, x, xwhat, 4, any4);
    const int64_t ws[4] = {-1, 2, 2, x->shape[3]};
    check_float(be, w, wwhat, 4, ws);
    ys[0] = x->shape[0], ys[1] = 2 * x->shape[1], ys[2] = 2 * x->shape[2], ys[3] = w->shape[0];
}

static void v_deconv2x2_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    int64_t ys[4];
    deconv_shapes(be, x, w, "deconv2x2_forward x", "deconv2x2_forward w", ys);
    check_opt(be, b, "deconv2x2_forward b", 1, &ys[3]);
    check_float(be, y, "deconv2x2_forward y", 4, ys);
    check_act(act, "deconv2x2_forward");
    be->unchecked->nn.deconv2x2_forward(be, x, w, b, act, y);
}

static void v_deconv2x2_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                                 const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_tensor *dw, mrcnn_tensor *db) {
    int64_t ys[4];
    deconv_shapes(be, x, w, "deconv2x2_backward x", "deconv2x2_backward w", ys);
    check_float(be, dy, "deconv2x2_backward dy", 4, ys);
    if (dx) check_like(be, dx, "deconv2x2_backward dx", x);
    if (dw) check_like(be, dw, "deconv2x2_backward dw", w);
    check_opt(be, db, "deconv2x2_backward db", 1, &ys[3]);
    be->unchecked->nn.deconv2x2_backward(be, x, w, dy, dx, dw, db);
}

/* ---- elementwise and pooling ---- */

static void v_relu_forward(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    check_any(be, x, "relu_forward x");
    check_like(be, y, "relu_forward y", x);
    be->unchecked->nn.relu_forward(be, x, y);
}

static void v_relu_backward(const mrcnn_backend *be, const mrcnn_tensor *y, const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    check_any(be, y, "relu_backward y");
    check_like(be, dy, "relu_backward dy", y);
    check_like(be, dx, "relu_backward dx", y);
    be->unchecked->nn.relu_backward(be, y, dy, dx);
}

static void v_add_forward(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b, mrcnn_activation act,
                          mrcnn_tensor *y) {
    check_any(be, a, "add_forward a");
    check_like(be, b, "add_forward b", a);
    check_like(be, y, "add_forward y", a);
    check_act(act, "add_forward");
    be->unchecked->nn.add_forward(be, a, b, act, y);
}

static void v_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *da, mrcnn_tensor *db) {
    check_any(be, dy, "add_backward dy");
    if (da) check_like(be, da, "add_backward da", dy);
    if (db) check_like(be, db, "add_backward db", dy);
    be->unchecked->nn.add_backward(be, dy, da, db);
}

static void pool_shapes(const mrcnn_pool2d_desc *d, int64_t xs[4], int64_t ys[4]) {
    MRCNN_CHECK(d != NULL, "maxpool2d: NULL descriptor");
    MRCNN_CHECK(d->kernel > 0 && d->stride > 0 && d->pad >= 0, "maxpool2d: kernel %d, stride %d, pad %d are invalid",
                d->kernel, d->stride, d->pad);
    xs[0] = d->n, xs[1] = d->h, xs[2] = d->w, xs[3] = d->c;
    ys[0] = d->n, ys[1] = mrcnn_pool2d_out_h(d), ys[2] = mrcnn_pool2d_out_w(d), ys[3] = d->c;
}

static void v_maxpool2d_forward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x,
                                mrcnn_tensor *y) {
    int64_t xs[4], ys[4];
    pool_shapes(d, xs, ys);
    check_float(be, x, "maxpool2d_forward x", 4, xs);
    check_float(be, y, "maxpool2d_forward y", 4, ys);
    be->unchecked->nn.maxpool2d_forward(be, d, x, y);
}

static void v_maxpool2d_backward(const mrcnn_backend *be, const mrcnn_pool2d_desc *d, const mrcnn_tensor *x,
                                 const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    int64_t xs[4], ys[4];
    pool_shapes(d, xs, ys);
    check_float(be, x, "maxpool2d_backward x", 4, xs);
    check_float(be, dy, "maxpool2d_backward dy", 4, ys);
    check_float(be, dx, "maxpool2d_backward dx", 4, xs);
    be->unchecked->nn.maxpool2d_backward(be, d, x, dy, dx);
}

/* top (N, h, w, C) upsampled (nearest) to lateral's (N, H, W, C). */
static void v_upsample_add_forward(const mrcnn_backend *be, const mrcnn_tensor *top, const mrcnn_tensor *lateral,
                                   mrcnn_tensor *y) {
    check_float(be, lateral, "upsample_add_forward lateral", 4, any4);
    const int64_t ts[4] = {lateral->shape[0], -1, -1, lateral->shape[3]};
    check_float(be, top, "upsample_add_forward top", 4, ts);
    check_like(be, y, "upsample_add_forward y", lateral);
    be->unchecked->nn.upsample_add_forward(be, top, lateral, y);
}

static void v_upsample_add_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *dtop,
                                    mrcnn_tensor *dlateral) {
    check_float(be, dy, "upsample_add_backward dy", 4, any4);
    const int64_t ts[4] = {dy->shape[0], -1, -1, dy->shape[3]};
    check_opt(be, dtop, "upsample_add_backward dtop", 4, ts);
    if (dlateral) check_like(be, dlateral, "upsample_add_backward dlateral", dy);
    be->unchecked->nn.upsample_add_backward(be, dy, dtop, dlateral);
}

/* ---- fully connected: x (N, ...) flattened per row, w (out, in), y (N, out) ---- */

static void linear_shapes(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w, const char *xwhat,
                          const char *wwhat, int64_t ys[2]) {
    check_any(be, x, xwhat);
    MRCNN_CHECK(x->ndim >= 2 && x->shape[0] > 0, "%s: needs a (N, ...) tensor with N > 0, got %d dims", xwhat, x->ndim);
    const int64_t ws[2] = {-1, mrcnn_tensor_numel(x) / x->shape[0]};
    check_float(be, w, wwhat, 2, ws);
    ys[0] = x->shape[0], ys[1] = w->shape[0];
}

static void v_linear_forward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                             const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y) {
    int64_t ys[2];
    linear_shapes(be, x, w, "linear_forward x", "linear_forward w", ys);
    check_opt(be, b, "linear_forward b", 1, &ys[1]);
    check_float(be, y, "linear_forward y", 2, ys);
    check_act(act, "linear_forward");
    be->unchecked->nn.linear_forward(be, x, w, b, act, y);
}

static void v_linear_backward(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                              const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_tensor *dw, mrcnn_tensor *db) {
    int64_t ys[2];
    linear_shapes(be, x, w, "linear_backward x", "linear_backward w", ys);
    check_float(be, dy, "linear_backward dy", 2, ys);
    if (dx) check_like(be, dx, "linear_backward dx", x);
    if (dw) check_like(be, dw, "linear_backward dw", w);
    check_opt(be, db, "linear_backward db", 1, &ys[1]);
    be->unchecked->nn.linear_backward(be, x, w, dy, dx, dw, db);
}

/* ---- bias gradient: dy (..., K), db (K) ---- */

static void v_bias_grad(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *db) {
    check_any(be, dy, "bias_grad dy");
    MRCNN_CHECK(dy->ndim >= 1, "bias_grad dy: needs a (..., K) tensor, got %d dims", dy->ndim);
    check_float(be, db, "bias_grad db", 1, &dy->shape[dy->ndim - 1]);
    be->unchecked->nn.bias_grad(be, dy, db);
}

/* ---- ROIAlign: levels (N, H_l, W_l, C), rois (R, 5) fp32, y (R, out_h, out_w, C) ---- */

static void roi_shapes(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *levels,
                       const char *lwhat, const mrcnn_tensor *rois, const mrcnn_tensor *y, const char *ywhat) {
    MRCNN_CHECK(d != NULL, "roi_align: NULL descriptor");
    mrcnn_roi_align_desc_check(d);
    MRCNN_CHECK(levels != NULL, "roi_align: NULL %s", lwhat);
    for (int l = 0; l < d->n_levels; l++) {
        const int64_t fs[4] = {d->n_images, d->level_h[l], d->level_w[l], d->channels};
        check_float(be, &levels[l], lwhat, 4, fs);
    }
    static const int64_t rs[2] = {-1, 5};
    check_tensor(be, rois, "roi_align rois");
    mrcnn_tensor_check_dtype(rois, "roi_align rois", MRCNN_DTYPE_F32);
    mrcnn_tensor_check_shape(rois, "roi_align rois", 2, rs);
    const int64_t ys[4] = {rois->shape[0], d->out_h, d->out_w, d->channels};
    check_float(be, y, ywhat, 4, ys);
}

static void v_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                const mrcnn_tensor *rois, mrcnn_tensor *y) {
    roi_shapes(be, d, feats, "roi_align features", rois, y, "roi_align output");
    be->unchecked->nn.roi_align_forward(be, d, feats, rois, y);
}

static void v_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                 const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    roi_shapes(be, d, dfeats, "roi_align feature gradients", rois, dy, "roi_align output gradient");
    be->unchecked->nn.roi_align_backward(be, d, rois, dy, dfeats);
}

/* ---- cast: same element count, any float dtypes ---- */

static void v_cast(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    check_any(be, x, "cast x");
    check_any(be, y, "cast y");
    if (mrcnn_tensor_numel(x) != mrcnn_tensor_numel(y)) {
        char a[128], b[128];
        MRCNN_CHECK(0, "cast y: shape %s has %lld elements but x %s has %lld", mrcnn_tensor_shape_str(y, a, sizeof a),
                    (long long)mrcnn_tensor_numel(y), mrcnn_tensor_shape_str(x, b, sizeof b),
                    (long long)mrcnn_tensor_numel(x));
    }
    be->unchecked->nn.cast(be, x, y);
}

/* ---- installation ---- */

/* The copy of the installed entries goes with the backend. */
static void v_destroy(mrcnn_backend *be) {
    mrcnn_backend *raw = (mrcnn_backend *)be->unchecked;
    be->unchecked = NULL;
    void (*destroy)(mrcnn_backend *) = raw->destroy;
    free(raw);
    if (destroy) destroy(be);
}

/* The CHECK entries of the op list, each in front of the entry the backend installed.
 * An entry the backend left NULL stays NULL (the generic CPU backend has no ROIAlign);
 * one installed after an earlier call (the full CPU backend adds ROIAlign to the
 * generic one) is wrapped by the next call; one already wrapped stays as it is. */
#define VALIDATE_NOCHECK(table, name)
#define VALIDATE_CHECK(table, name)                                                                                    \
    if (be->table.name && be->table.name != v_##name) {                                                                \
        raw->table.name = be->table.name;                                                                              \
        be->table.name = v_##name;                                                                                     \
    }
#define BE_OP(table, name, params, args, trace, fields, check, ...) VALIDATE_##check(table, name)
#define BE_OPR(table, name, ret, params, args, trace, fields, check, ...) VALIDATE_##check(table, name)

void mrcnn_backend_validate(mrcnn_backend *be) {
    MRCNN_CHECK(be != NULL, "mrcnn_backend_validate: NULL backend");
    mrcnn_backend *raw = (mrcnn_backend *)be->unchecked;
    if (raw && be->destroy != v_destroy) return; // wrapped again on top (a trace): leave the layers alone
    if (!raw) {
        raw = MRCNN_MALLOC(sizeof *raw, "backend entries");
        *raw = *be;
        be->unchecked = raw;
    }
#include "mrcnn/backend_ops.def"
    be->destroy = v_destroy;
}
#undef BE_OP
#undef BE_OPR
