/* The CPU backend's step ops (backend.h, be->step): the training step's bookkeeping
 * in host memory, which on the CPU is the device's, so none of it counts as a read. */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/step_ctl.h"

#include <math.h>

static float *f32_of(const mrcnn_tensor *t, const char *what) {
    MRCNN_CHECK(t != NULL && t->dtype == MRCNN_DTYPE_F32, "step op %s: needs an fp32 tensor", what);
    MRCNN_CHECK(t->device == MRCNN_DEVICE_CPU, "step op %s: tensor is not in host memory", what);
    return (float *)t->data;
}

static void cpu_step_axpy(const mrcnn_backend *be, float mult, const mrcnn_tensor *x, mrcnn_tensor *acc) {
    const float *xs = f32_of(x, "axpy x");
    float *a = f32_of(acc, "axpy acc");
    const int64_t n = mrcnn_tensor_numel(acc);
    MRCNN_CHECK(mrcnn_tensor_numel(x) == n, "step op axpy: x has %lld elements, acc %lld",
                (long long)mrcnn_tensor_numel(x), (long long)n);
    for (int64_t i = 0; i < n; i++) a[i] += mult * xs[i];
}

/* Any float dtype: the CUDA one takes fp16/bf16 tensors too. */
static float load_any(const mrcnn_tensor *t, int64_t i) {
    switch (t->dtype) {
    case MRCNN_DTYPE_F32: return ((const float *)t->data)[i];
    case MRCNN_DTYPE_F16: return mrcnn_f16_to_f32(((const uint16_t *)t->data)[i]);
    case MRCNN_DTYPE_BF16: return mrcnn_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: MRCNN_CHECK(0, "step op nonfinite_or: tensor is not a float dtype"); return 0;
    }
}

static void cpu_step_nonfinite_or(const mrcnn_backend *be, const mrcnn_tensor *t, mrcnn_tensor *flag) {
    float *f = f32_of(flag, "nonfinite_or flag");
    MRCNN_CHECK(t->device == MRCNN_DEVICE_CPU, "step op nonfinite_or: tensor is not in host memory");
    const int64_t n = mrcnn_tensor_numel(t);
    int bad = f[0] != 0.0f;
    if (!bad && t->dtype == MRCNN_DTYPE_F32) {
        const float *p = t->data;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= 65536)
        for (int64_t i = 0; i < n; i++) bad |= !isfinite(p[i]);
    } else
        for (int64_t i = 0; i < n && !bad; i++) bad = !isfinite(load_any(t, i));
    f[0] = bad ? 1.0f : 0.0f;
}

static void cpu_step_sum_squares(const mrcnn_backend *be, const mrcnn_tensor *t, const mrcnn_tensor *w,
                                 mrcnn_tensor *out) {
    const float *p = f32_of(t, "sum_squares t");
    float *o = f32_of(out, "sum_squares out");
    const int64_t n = mrcnn_tensor_numel(t);
    const float *q = w ? f32_of(w, "sum_squares w") : NULL;
    MRCNN_CHECK(!w || mrcnn_tensor_numel(w) == n, "step op sum_squares: w has %lld elements, t %lld",
                (long long)mrcnn_tensor_numel(w), (long long)n);
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) s += (double)p[i] * p[i] * (q ? (double)q[i] : 1.0);
    o[0] = (float)s;
}

static void cpu_step_decide(const mrcnn_backend *be, const mrcnn_step_desc *d, mrcnn_tensor *ctl) {
    float *c = f32_of(ctl, "decide ctl");
    MRCNN_CHECK(mrcnn_tensor_numel(ctl) >= MRCNN_CTL_SIZE(d->n_losses),
                "step op decide: control vector of %lld elements, %d needed", (long long)mrcnn_tensor_numel(ctl),
                MRCNN_CTL_SIZE(d->n_losses));
    mrcnn_step_decide(d, c);
}

/* be->opt.sgd_update with apply, grad_scale and lr from the control vector: the same
 * arithmetic, or nothing when the step is skipped. */
static void cpu_step_sgd_update(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                                mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float momentum_coef,
                                float weight_decay, const mrcnn_tensor *ctl) {
    const float *c = f32_of(ctl, "sgd_update ctl");
    MRCNN_CHECK(mrcnn_tensor_numel(ctl) >= MRCNN_CTL_STEP,
                "step op sgd_update: control vector of %lld elements, %d needed (apply, grad_scale, lr)",
                (long long)mrcnn_tensor_numel(ctl), (int)MRCNN_CTL_STEP);
    if (c[MRCNN_CTL_APPLY] == 0.0f) return;
    be->opt.sgd_update(be, params, grads, momentum, decay_mask, c[MRCNN_CTL_LR], momentum_coef, weight_decay,
                       c[MRCNN_CTL_GRAD_SCALE]);
}

void mrcnn_backend_cpu_fill_step(mrcnn_backend *be) {
    be->step.axpy = cpu_step_axpy;
    be->step.nonfinite_or = cpu_step_nonfinite_or;
    be->step.sum_squares = cpu_step_sum_squares;
    be->step.decide = cpu_step_decide;
    be->step.sgd_update = cpu_step_sgd_update;
}
