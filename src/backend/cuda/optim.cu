/* The fused SGD update over the flat arenas, the Inf/NaN scan of the loss scaler, and
 * the training step's device-resident bookkeeping (be->step, step_ctl.h). */
#include <math.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "mrcnn/step_ctl.h"

#define CU_THREADS 256

/* PyTorch's SGD with momentum (dampening 0, no Nesterov), on fp32 master weights:
 * g = grad * grad_scale * q + wd * mask * p; v = momentum * v + g; p -= lr * v.
 * mask: NULL (decay everything), fp32 (a factor per element) or uint8 (0 or 1); with
 * q (a float mask of 2n elements: its second row, the folded-BN preconditioner,
 * train.h), else q = 1. */
static __device__ __forceinline__ void sgd_elem(float *p, const void *g, int gt, float *v, const void *mask, int mt,
                                                int with_q, int64_t n, int64_t i, float lr, float mom, float wd,
                                                float scale) {
    float pi = p[i];
    float m = 1.0f, q = 1.0f;
    if (mask) m = mt == MRCNN_DTYPE_U8 ? (float)((const uint8_t *)mask)[i] : cu_load(mask, i, mt);
    if (with_q) q = cu_load(mask, n + i, mt);
    float gi = cu_load(g, i, gt) * scale * q + wd * m * pi;
    float vi = mom * v[i] + gi;
    v[i] = vi;
    p[i] = pi - lr * vi;
}

__global__ void k_sgd(float *p, const void *g, int gt, float *v, const void *mask, int mt, int with_q, int64_t n,
                      float lr, float mom, float wd, float scale) {
    CU_GRID_STRIDE(i, n) { sgd_elem(p, g, gt, v, mask, mt, with_q, n, i, lr, mom, wd, scale); }
}

/* The arguments both SGD entries take, checked alike; returns the element count and in
 * *with_q whether decay_mask carries the preconditioner row (2n elements). */
static int64_t check_sgd(const char *op, const mrcnn_tensor *params, const mrcnn_tensor *grads,
                         const mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, int *with_q) {
    cu_check_gpu(params, op);
    MRCNN_CHECK(params->dtype == MRCNN_DTYPE_F32, "%s: params must be fp32 master weights", op);
    const int64_t n = cu_numel(params);
    cu_check_float(grads, op);
    cu_check_numel(grads, n, op);
    cu_check_gpu(momentum, op);
    MRCNN_CHECK(momentum->dtype == MRCNN_DTYPE_F32, "%s: momentum must be fp32", op);
    cu_check_numel(momentum, n, op);
    if (decay_mask) {
        cu_check_gpu(decay_mask, op);
        MRCNN_CHECK(decay_mask->dtype == MRCNN_DTYPE_U8 || decay_mask->dtype == MRCNN_DTYPE_F32 ||
                        decay_mask->dtype == MRCNN_DTYPE_F16 || decay_mask->dtype == MRCNN_DTYPE_BF16,
                    "%s: decay_mask must be uint8 or a float dtype", op);
        *with_q = n > 0 && cu_numel(decay_mask) == 2 * n && decay_mask->dtype != MRCNN_DTYPE_U8;
        if (!*with_q) cu_check_numel(decay_mask, n, op);
    }
    return n;
}

static void cu_sgd_update(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                          mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float lr, float momentum_coef,
                          float weight_decay, float grad_scale) {
    int with_q = 0;
    const int64_t n = check_sgd("sgd_update", params, grads, momentum, decay_mask, &with_q);
    if (n == 0) return;
    k_sgd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        (float *)params->data, grads->data, grads->dtype, (float *)momentum->data, decay_mask ? decay_mask->data : NULL,
        decay_mask ? decay_mask->dtype : MRCNN_DTYPE_F32, with_q, n, lr, momentum_coef, weight_decay, grad_scale);
    MRCNN_CHECK_LAUNCH("sgd_update");
}

__global__ void k_nonfinite(const void *x, int xt, int64_t n, int *flag) {
    int bad = 0;
    CU_GRID_STRIDE(i, n) {
        if (!isfinite(cu_load(x, i, xt))) bad = 1;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

/* The one host round trip of the loss scaler: the flag is read back here. */
static int cu_nonfinite(const mrcnn_backend *be, const mrcnn_tensor *t) {
    cu_state *s = cu_st(be);
    cu_check_float(t, "nonfinite");
    const int64_t n = cu_numel(t);
    if (n == 0) return 0;
    MRCNN_CHECK_CUDA(cudaMemsetAsync(s->flag_dev, 0, sizeof(int), s->stream));
    k_nonfinite<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(t->data, t->dtype, n, s->flag_dev);
    MRCNN_CHECK_LAUNCH("nonfinite");
    MRCNN_CHECK_CUDA(cudaMemcpyAsync(s->flag_host, s->flag_dev, sizeof(int), cudaMemcpyDeviceToHost, s->stream));
    MRCNN_CHECK_CUDA(cudaStreamSynchronize(s->stream));
    mrcnn_backend_count(be, 1, sizeof(int), 1, 0, 0);
    return *s->flag_host != 0;
}

/* ---- the training step's bookkeeping on the device (backend.h, be->step) ----
 * Nothing here waits on the host: the trainer reads the control vector (step_ctl.h)
 * once per log period. */

static void cu_check_f32(const mrcnn_tensor *t, const char *what) {
    cu_check_gpu(t, what);
    MRCNN_CHECK(t->dtype == MRCNN_DTYPE_F32, "%s: needs an fp32 tensor", what);
}

__global__ void k_step_axpy(float mult, const float *x, float *acc, int64_t n) {
    CU_GRID_STRIDE(i, n) { acc[i] += mult * x[i]; }
}

static void cu_step_axpy(const mrcnn_backend *be, float mult, const mrcnn_tensor *x, mrcnn_tensor *acc) {
    cu_check_f32(x, "step axpy x");
    cu_check_f32(acc, "step axpy acc");
    const int64_t n = cu_numel(acc);
    cu_check_numel(x, n, "step axpy x");
    if (n == 0) return;
    k_step_axpy<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(mult, (const float *)x->data,
                                                                               (float *)acc->data, n);
    MRCNN_CHECK_LAUNCH("step axpy");
}

/* flag = 1 when any element is Inf/NaN; only ever raised, so blocks race harmlessly. */
__global__ void k_step_nonfinite(const void *x, int xt, int64_t n, float *flag) {
    int bad = 0;
    CU_GRID_STRIDE(i, n) {
        if (!isfinite(cu_load(x, i, xt))) bad = 1;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}

__global__ void k_step_flag_norm(float *flag) { *flag = *flag != 0.0f ? 1.0f : 0.0f; }

static void cu_step_nonfinite_or(const mrcnn_backend *be, const mrcnn_tensor *t, mrcnn_tensor *flag) {
    cu_state *s = cu_st(be);
    cu_check_float(t, "step nonfinite_or");
    cu_check_f32(flag, "step nonfinite_or flag");
    const int64_t n = cu_numel(t);
    k_step_flag_norm<<<1, 1, 0, s->stream>>>((float *)flag->data); // any nonzero in -> exactly 1
    MRCNN_CHECK_LAUNCH("step nonfinite_or");
    if (n == 0) return;
    k_step_nonfinite<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, s->stream>>>(t->data, t->dtype, n,
                                                                            (float *)flag->data);
    MRCNN_CHECK_LAUNCH("step nonfinite_or");
}

/* Block sums in double (the CPU's accumulation), one atomic per block into a double
 * scratch, then one thread stores it as fp32: the order of the block atomics is the
 * only nondeterminism (a last-bit difference in a clipping norm). */
__global__ void k_step_sumsq(const float *x, const float *w, int64_t n, double *acc) {
    __shared__ double part[CU_THREADS];
    double s = 0;
    CU_GRID_STRIDE(i, n) {
        double v = x[i];
        s += v * v * (w ? (double)w[i] : 1.0);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(acc, part[0]);
}

__global__ void k_step_store(const double *acc, float *out) { *out = (float)*acc; }

static void cu_step_sum_squares(const mrcnn_backend *be, const mrcnn_tensor *t, const mrcnn_tensor *w,
                                mrcnn_tensor *out) {
    cu_state *s = cu_st(be);
    cu_check_f32(t, "step sum_squares t");
    cu_check_f32(out, "step sum_squares out");
    const int64_t n = cu_numel(t);
    if (w) {
        cu_check_f32(w, "step sum_squares w");
        cu_check_numel(w, n, "step sum_squares w");
    }
    double *acc = (double *)cu_scratch(s, CU_SCRATCH_REDUCE, sizeof(double)) /* free between ops */;
    MRCNN_CHECK_CUDA(cudaMemsetAsync(acc, 0, sizeof(double), s->stream));
    if (n > 0) {
        int blocks = cu_blocks(n, CU_THREADS);
        if (blocks > 1024) blocks = 1024; // grid-stride: fewer atomics
        k_step_sumsq<<<blocks, CU_THREADS, 0, s->stream>>>((const float *)t->data, w ? (const float *)w->data : NULL,
                                                            n, acc);
        MRCNN_CHECK_LAUNCH("step sum_squares");
    }
    k_step_store<<<1, 1, 0, s->stream>>>(acc, (float *)out->data);
    MRCNN_CHECK_LAUNCH("step sum_squares");
}

/* The decision is a handful of scalars: one thread runs the CPU's function. d is the
 * same every step (the step index is read from ctl), so a captured decide replays. */
__global__ void k_step_decide(mrcnn_step_desc d, float *ctl) { mrcnn_step_decide(&d, ctl); }

static void cu_step_decide(const mrcnn_backend *be, const mrcnn_step_desc *d, mrcnn_tensor *ctl) {
    cu_check_f32(ctl, "step decide ctl");
    MRCNN_CHECK(cu_numel(ctl) >= MRCNN_CTL_SIZE(d->n_losses), "step decide: control vector of %lld elements, %d needed",
                (long long)cu_numel(ctl), MRCNN_CTL_SIZE(d->n_losses));
    k_step_decide<<<1, 1, 0, cu_st(be)->stream>>>(*d, (float *)ctl->data);
    MRCNN_CHECK_LAUNCH("step decide");
}

/* k_sgd with apply, grad_scale and lr read from the control vector on the device (none of
 * them a kernel argument, so a captured update replays with each step's values): a
 * skipped step writes nothing. */
__global__ void k_sgd_ctl(float *p, const void *g, int gt, float *v, const void *mask, int mt, int with_q, int64_t n,
                          float mom, float wd, const float *ctl) {
    if (ctl[MRCNN_CTL_APPLY] == 0.0f) return;
    const float scale = ctl[MRCNN_CTL_GRAD_SCALE], lr = ctl[MRCNN_CTL_LR];
    CU_GRID_STRIDE(i, n) { sgd_elem(p, g, gt, v, mask, mt, with_q, n, i, lr, mom, wd, scale); }
}

static void cu_step_sgd_update(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                               mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float momentum_coef,
                               float weight_decay, const mrcnn_tensor *ctl) {
    int with_q = 0;
    const int64_t n = check_sgd("step sgd_update", params, grads, momentum, decay_mask, &with_q);
    cu_check_f32(ctl, "step sgd_update ctl");
    MRCNN_CHECK(cu_numel(ctl) >= MRCNN_CTL_STEP,
                "step sgd_update: control vector of %lld elements, %d needed (apply, grad_scale, lr)",
                (long long)cu_numel(ctl), (int)MRCNN_CTL_STEP);
    if (n == 0) return;
    k_sgd_ctl<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        (float *)params->data, grads->data, grads->dtype, (float *)momentum->data, decay_mask ? decay_mask->data : NULL,
        decay_mask ? decay_mask->dtype : MRCNN_DTYPE_F32, with_q, n, momentum_coef, weight_decay,
        (const float *)ctl->data);
    MRCNN_CHECK_LAUNCH("step sgd_update");
}

void cu_fill_optim_ops(mrcnn_backend *be) {
    be->opt.sgd_update = cu_sgd_update;
    be->opt.nonfinite = cu_nonfinite;
    be->step.axpy = cu_step_axpy;
    be->step.nonfinite_or = cu_step_nonfinite_or;
    be->step.sum_squares = cu_step_sum_squares;
    be->step.decide = cu_step_decide;
    be->step.sgd_update = cu_step_sgd_update;
}
