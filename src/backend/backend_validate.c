/* The argument checks every backend shares (mrcnn_backend_validate, backend.h). Each
 * factory hands its finished backend here; the checked entries of the op list are
 * replaced by wrappers that check shapes (the NHWC / KRSC contract of ops.h), dtypes,
 * devices and layout, then call the entry the backend installed (be->unchecked). So a
 * transposed tensor fails the same way, with the same message, on the CPU and on the
 * GPU, where the CUDA kernels alone would only have compared element counts. A CHECK
 * entry's wrapper is generated: its `shapes` text is the rule (shape_rule.h), compiled
 * once, and the wrapper collects the entry's tensor arguments (its trace_fields) for it.
 * A HANDCHECK entry's v_<name> is written below: its shapes come from a descriptor. The
 * checks are compares on the tensor headers: no allocation, no formatting unless one
 * fails. The losses and the detection-side entries are not wrapped here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "shape_rule.h"

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

static void check_opt(const mrcnn_backend *be, const mrcnn_tensor *t, const char *what, int ndim,
                      const int64_t *shape) {
    if (t) check_float(be, t, what, ndim, shape);
}

static void check_act(mrcnn_activation act, const char *op) {
    MRCNN_CHECK(act == MRCNN_ACT_NONE || act == MRCNN_ACT_RELU, "%s: unknown activation %d", op, (int)act);
}

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

static void check_dx_mode(mrcnn_grad_mode m, const char *op) {
    MRCNN_CHECK(m == MRCNN_GRAD_ADD || m == MRCNN_GRAD_WRITE, "%s: unknown dx mode %d", op, (int)m);
}

static void v_conv2d_backward(const mrcnn_backend *be, const mrcnn_conv2d_desc *d, const mrcnn_tensor *x,
                              const mrcnn_tensor *w, const mrcnn_tensor *dy, mrcnn_activation act,
                              const mrcnn_tensor *y, mrcnn_tensor *dx, mrcnn_grad_mode dx_mode, mrcnn_tensor *dw,
                              mrcnn_tensor *db) {
    int64_t xs[4], ws[4], ys[4];
    conv_shapes(d, xs, ws, ys);
    check_float(be, dy, "conv2d_backward dy", 4, ys);
    check_act(act, "conv2d_backward");
    if (act == MRCNN_ACT_RELU) check_float(be, y, "conv2d_backward y", 4, ys);
    check_dx_mode(dx_mode, "conv2d_backward");
    if (dx) {
        check_float(be, w, "conv2d_backward w", 4, ws);
        check_float(be, dx, "conv2d_backward dx", 4, xs);
    }
    if (dw) {
        check_float(be, x, "conv2d_backward x", 4, xs);
        check_float(be, dw, "conv2d_backward dw", 4, ws);
    }
    check_opt(be, db, "conv2d_backward db", 1, &ws[0]);
    be->unchecked->nn.conv2d_backward(be, d, x, w, dy, act, y, dx, dx_mode, dw, db);
}

/* ---- pooling ---- */

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

/* ---- the CHECK entries: wrappers generated from the op list ---- */

/* Each wrapper collects its tensor arguments in trace_fields order (the rule's names)
 * and checks an mrcnn_activation argument; floats, pointers and sizes are the backend's
 * business. A level array or a descriptor has no notation: such an entry is HANDCHECK. */
#define TR_T(x) ts_[n_++] = (x);
#define TR_I(x)                                                                                                        \
    if (_Generic((x), mrcnn_activation: 1, default: 0)) check_act((mrcnn_activation)(x), r_->op);                      \
    if (_Generic((x), mrcnn_grad_mode: 1, default: 0)) check_dx_mode((mrcnn_grad_mode)(x), r_->op);
#define TR_F(x)
#define TR_P(x)
#define TR_SZ(x)
#define TR_LV(x, max) _Static_assert(0, "a CHECK entry cannot take a level array: make it HANDCHECK");
#define TR_D(kind, d) _Static_assert(0, "a CHECK entry cannot take a descriptor: make it HANDCHECK");
#define VALIDATE_GEN_NOCHECK(...)
#define VALIDATE_GEN_HANDCHECK(...)
#define VALIDATE_GEN_CHECK(ret, table, name, params, args, retkw, ...)                                                 \
    static mrcnn_shape_rule rule_##name;                                                                               \
    static ret v_##name params {                                                                                       \
        const mrcnn_shape_rule *r_ = &rule_##name;                                                                     \
        const mrcnn_tensor *ts_[MRCNN_SHAPE_RULE_MAX_ARGS];                                                            \
        int n_ = 0;                                                                                                    \
        __VA_ARGS__(void) n_;                                                                                          \
        mrcnn_shape_rule_check(r_, be, ts_);                                                                           \
        retkw be->unchecked->table.name args;                                                                          \
    }
#define BE_OP(table, name, params, args, trace, fields, check, ...)                                                    \
    VALIDATE_GEN_##check(void, table, name, params, args, , fields)
#define BE_OPR(table, name, ret, params, args, trace, fields, check, ...)                                              \
    VALIDATE_GEN_##check(ret, table, name, params, args, return, fields)
#include "mrcnn/backend_ops.def"
#undef BE_OP
#undef BE_OPR
#undef TR_T
#undef TR_I
#undef TR_LV
#undef TR_D

/* The rules, compiled once for every backend: the tensor arguments' names from
 * trace_fields, the rule from the shapes column. */
#define TR_T(x) #x,
#define TR_I(x)
#define TR_LV(x, max)
#define TR_D(kind, d)
#define COMPILE_NOCHECK(...)
#define COMPILE_HANDCHECK(...)
#define COMPILE_CHECK(name, shapes, ...)                                                                               \
    {                                                                                                                  \
        static const char *const names_[] = {__VA_ARGS__ NULL};                                                        \
        mrcnn_shape_rule_compile(&rule_##name, #name, shapes, names_, (int)(sizeof names_ / sizeof *names_) - 1);      \
    }
#define BE_OP(table, name, params, args, trace, fields, check, f64, shapes) COMPILE_##check(name, shapes, fields)
#define BE_OPR(table, name, ret, params, args, trace, fields, check, f64, shapes) COMPILE_##check(name, shapes, fields)

static void compile_rules(void) {
#include "mrcnn/backend_ops.def"
}
#undef BE_OP
#undef BE_OPR

/* ---- installation ---- */

/* The copy of the installed entries goes with the backend. */
static void v_destroy(mrcnn_backend *be) {
    mrcnn_backend *raw = (mrcnn_backend *)be->unchecked;
    be->unchecked = NULL;
    void (*destroy)(mrcnn_backend *) = raw->destroy;
    free(raw);
    if (destroy) destroy(be);
}

/* The CHECK and HANDCHECK entries of the op list, each in front of the entry the backend installed.
 * An entry the backend left NULL stays NULL (the generic CPU backend has no ROIAlign);
 * one installed after an earlier call (the full CPU backend adds ROIAlign to the
 * generic one) is wrapped by the next call; one already wrapped stays as it is. */
#define VALIDATE_NOCHECK(table, name)
#define VALIDATE_HANDCHECK VALIDATE_CHECK
#define VALIDATE_CHECK(table, name)                                                                                    \
    if (be->table.name && be->table.name != v_##name) {                                                                \
        raw->table.name = be->table.name;                                                                              \
        be->table.name = v_##name;                                                                                     \
    }
#define BE_OP(table, name, params, args, trace, fields, check, ...) VALIDATE_##check(table, name)
#define BE_OPR(table, name, ret, params, args, trace, fields, check, ...) VALIDATE_##check(table, name)

void mrcnn_backend_validate(mrcnn_backend *be) {
    MRCNN_CHECK(be != NULL, "mrcnn_backend_validate: NULL backend");
    static pthread_once_t compiled = PTHREAD_ONCE_INIT;
    pthread_once(&compiled, compile_rules);
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
