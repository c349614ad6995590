/* The fused SGD update over the flat arenas and the Inf/NaN scan of the loss scaler. */
#include <math.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"

#define CU_THREADS 256

/* PyTorch's SGD with momentum (dampening 0, no Nesterov), on fp32 master weights:
 * g = grad * grad_scale + wd * mask * p; v = momentum * v + g; p -= lr * v.
 * mask: NULL (decay everything), fp32 (a factor per element) or uint8 (0 or 1). */
__global__ void k_sgd(float *p, const void *g, int gt, float *v, const void *mask, int mt, int64_t n, float lr,
                      float mom, float wd, float scale) {
    CU_GRID_STRIDE(i, n) {
        float pi = p[i];
        float m = 1.0f;
        if (mask) m = mt == MRCNN_DTYPE_U8 ? (float)((const uint8_t *)mask)[i] : cu_load(mask, i, mt);
        float gi = cu_load(g, i, gt) * scale + wd * m * pi;
        float vi = mom * v[i] + gi;
        v[i] = vi;
        p[i] = pi - lr * vi;
    }
}

static void cu_sgd_update(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                          mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float lr, float momentum_coef,
                          float weight_decay, float grad_scale) {
    cu_check_gpu(params, "sgd_update params");
    MRCNN_CHECK(params->dtype == MRCNN_DTYPE_F32, "sgd_update: params must be fp32 master weights");
    const int64_t n = cu_numel(params);
    cu_check_float(grads, "sgd_update grads");
    cu_check_numel(grads, n, "sgd_update grads");
    cu_check_gpu(momentum, "sgd_update momentum");
    MRCNN_CHECK(momentum->dtype == MRCNN_DTYPE_F32, "sgd_update: momentum must be fp32");
    cu_check_numel(momentum, n, "sgd_update momentum");
    if (decay_mask) {
        cu_check_gpu(decay_mask, "sgd_update decay_mask");
        MRCNN_CHECK(decay_mask->dtype == MRCNN_DTYPE_U8 || decay_mask->dtype == MRCNN_DTYPE_F32 ||
                        decay_mask->dtype == MRCNN_DTYPE_F16 || decay_mask->dtype == MRCNN_DTYPE_BF16,
                    "sgd_update: decay_mask must be uint8 or a float dtype");
        cu_check_numel(decay_mask, n, "sgd_update decay_mask");
    }
    if (n == 0) return;
    k_sgd<<<cu_blocks(n, CU_THREADS), CU_THREADS, 0, cu_st(be)->stream>>>(
        (float *)params->data, grads->data, grads->dtype, (float *)momentum->data, decay_mask ? decay_mask->data : NULL,
        decay_mask ? decay_mask->dtype : MRCNN_DTYPE_F32, n, lr, momentum_coef, weight_decay, grad_scale);
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

void cu_fill_optim_ops(mrcnn_backend *be) {
    be->sgd_update = cu_sgd_update;
    be->nonfinite = cu_nonfinite;
}
