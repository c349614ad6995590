/* Losses: sum_i weight_i * l_i / normalizer into a 1-element fp32 device tensor, and
 * dx += grad_mult * d loss / dx (mrcnn_loss_norm: the count is read on the device).
 * Sums are taken in double over a fixed grid and then reduced by one block in a fixed
 * order, so results are deterministic run to run.
 * Labels are not range-checked on the device (that would cost a host round trip);
 * a label outside [-1, C) is treated as ignored. */
#include <math.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"

#define RT 256          // threads per reduction block (a power of two)
#define RMAX_BLOCKS 256 // partial sums per loss

/* mrcnn_loss_norm on the device: the count is read by the kernel, never by the host. */
static __device__ __forceinline__ float norm_of(const float *count, float scale) {
    float c = count ? count[0] : 1.0f;
    return (c > 1.0f ? c : 1.0f) * scale;
}

static __device__ __forceinline__ void block_sum_store(double acc, double *part) {
    __shared__ double sh[RT];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = RT / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

__global__ void k_reduce_finish(const double *part, int nparts, const float *count, float scale, float *loss) {
    __shared__ double sh[RT];
    double a = 0;
    for (int i = threadIdx.x; i < nparts; i += RT) a += part[i];
    sh[threadIdx.x] = a;
    __syncthreads();
    for (int w = RT / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(sh[0] / norm_of(count, scale));
}

static unsigned reduce_blocks(int64_t n) {
    int64_t b = (n + RT - 1) / RT;
    if (b < 1) b = 1;
    if (b > RMAX_BLOCKS) b = RMAX_BLOCKS;
    return (unsigned)b;
}

static const float *count_ptr(const mrcnn_loss_norm *n) { return n->count ? (const float *)n->count->data : NULL; }
static const float *gscale_ptr(const mrcnn_loss_norm *n) {
    return n->grad_scale ? (const float *)n->grad_scale->data : NULL;
}

static void finish(cu_state *s, double *part, unsigned nparts, const mrcnn_loss_norm *n, mrcnn_tensor *loss) {
    if (!loss) return;
    k_reduce_finish<<<1, RT, 0, s->stream>>>(part, (int)nparts, count_ptr(n), n->scale, (float *)loss->data);
    MRCNN_CHECK_LAUNCH("loss reduce");
}

/* loss may be NULL (gradient only), as on the CPU backend. */
static void check_loss_out(const mrcnn_tensor *loss, const mrcnn_loss_norm *n, const char *op) {
    MRCNN_CHECK(n != NULL && n->scale > 0, "%s: the loss normalizer needs a positive scale", op);
    if (n->count) {
        cu_check_gpu(n->count, op);
        MRCNN_CHECK(n->count->dtype == MRCNN_DTYPE_F32 && cu_numel(n->count) == 1,
                    "%s: the normalizer count must be a 1-element fp32 tensor", op);
    }
    if (n->grad_scale) {
        cu_check_gpu(n->grad_scale, op);
        MRCNN_CHECK(n->grad_scale->dtype == MRCNN_DTYPE_F32 && cu_numel(n->grad_scale) == 1,
                    "%s: the gradient scale must be a 1-element fp32 tensor", op);
    }
    if (!loss) return;
    cu_check_gpu(loss, op);
    MRCNN_CHECK(loss->dtype == MRCNN_DTYPE_F32 && cu_numel(loss) == 1, "%s: loss must be a 1-element fp32 tensor", op);
}

static void check_same(const mrcnn_tensor *t, int64_t n, const char *what) {
    cu_check_float(t, what);
    cu_check_numel(t, n, what);
}

/* ---- sigmoid BCE with logits ---------------------------------------------------------------- */

__global__ void k_bce(const void *x, int xt, const void *t, int tt, const void *wgt, int wt, int64_t n, const float *count,
                      float scale, float gmul, const float *gscale, double *part, void *dx, int dxt) {
    const float inv_norm = gmul * (gscale ? gscale[0] : 1.0f) / norm_of(count, scale);
    double acc = 0;
    CU_GRID_STRIDE(i, n) {
        float v = cu_load(x, i, xt), y = cu_load(t, i, tt);
        float wi = wgt ? cu_load(wgt, i, wt) : 1.0f;
        double l = (double)(v > 0 ? v : 0) - (double)v * y + log1p(exp(-fabs((double)v)));
        acc += wi * l;
        if (dx) {
            float sig;
            if (v >= 0) {
                sig = 1.0f / (1.0f + expf(-v));
            } else {
                float e = expf(v);
                sig = e / (1.0f + e);
            }
            cu_store(dx, i, dxt, cu_load(dx, i, dxt) + wi * ((sig - y) * inv_norm));
        }
    }
    block_sum_store(acc, part);
}

static void cu_bce_logits(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                          const mrcnn_tensor *weight, const mrcnn_loss_norm *norm, mrcnn_tensor *loss,
                          mrcnn_tensor *dx) {
    cu_state *s = cu_st(be);
    cu_check_float(x, "bce_logits x");
    const int64_t n = cu_numel(x);
    check_same(t, n, "bce_logits targets");
    if (weight) check_same(weight, n, "bce_logits weight");
    if (dx) check_same(dx, n, "bce_logits dx");
    check_loss_out(loss, norm, "bce_logits");
    unsigned g = reduce_blocks(n);
    double *part = (double *)cu_scratch(s, CU_SCRATCH_REDUCE, RMAX_BLOCKS * sizeof(double));
    k_bce<<<g, RT, 0, s->stream>>>(x->data, x->dtype, t->data, t->dtype, weight ? weight->data : NULL,
                                   weight ? weight->dtype : MRCNN_DTYPE_F32, n, count_ptr(norm), norm->scale,
                                   norm->grad_mult, gscale_ptr(norm), part,
                                   dx ? dx->data : NULL, dx ? dx->dtype : MRCNN_DTYPE_F32);
    MRCNN_CHECK_LAUNCH("bce_logits");
    finish(s, part, g, norm, loss);
}

/* ---- softmax cross-entropy, one warp per row ------------------------------------------------ */

__global__ void k_softmax_ce(const void *x, int xt, const int32_t *labels, int rows, int c, const float *count,
                             float scale, float gmul, const float *gscale, double *part, void *dx, int dxt) {
    const float inv_norm = gmul * (gscale ? gscale[0] : 1.0f) / norm_of(count, scale);
    const int lane = threadIdx.x & 31;
    const int warps_per_block = RT / 32;
    const int64_t warp = (int64_t)blockIdx.x * warps_per_block + (threadIdx.x >> 5);
    const int64_t nwarps = (int64_t)gridDim.x * warps_per_block;
    double acc = 0;
    for (int64_t row = warp; row < rows; row += nwarps) {
        const int lab = labels[row];
        if (lab < 0 || lab >= c) continue; // uniform across the warp
        const int64_t base = row * c;
        float mx = -INFINITY;
        for (int j = lane; j < c; j += 32) mx = fmaxf(mx, cu_load(x, base + j, xt));
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0;
        for (int j = lane; j < c; j += 32) sum += exp((double)cu_load(x, base + j, xt) - mx);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) acc += (double)mx + log(sum) - (double)cu_load(x, base + lab, xt);
        if (dx) {
            for (int j = lane; j < c; j += 32) {
                double p = exp((double)cu_load(x, base + j, xt) - mx) / sum;
                float g = (float)(inv_norm * (p - (j == lab ? 1.0 : 0.0)));
                cu_store(dx, base + j, dxt, cu_load(dx, base + j, dxt) + g);
            }
        }
    }
    block_sum_store(acc, part);
}

static void cu_softmax_ce(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                          const mrcnn_loss_norm *norm, mrcnn_tensor *loss, mrcnn_tensor *dx) {
    cu_state *s = cu_st(be);
    cu_check_float(x, "softmax_ce x");
    MRCNN_CHECK(x->ndim == 2, "softmax_ce: x must be (N, C), has %d dims", x->ndim);
    const int rows = (int)x->shape[0], c = (int)x->shape[1];
    MRCNN_CHECK(c > 0, "softmax_ce: C must be positive");
    cu_check_gpu(labels, "softmax_ce labels");
    MRCNN_CHECK(labels->dtype == MRCNN_DTYPE_I32, "softmax_ce: labels must be int32");
    cu_check_numel(labels, rows, "softmax_ce labels (N)");
    if (dx) check_same(dx, (int64_t)rows * c, "softmax_ce dx");
    check_loss_out(loss, norm, "softmax_ce");
    unsigned g = reduce_blocks((int64_t)rows * 32);
    double *part = (double *)cu_scratch(s, CU_SCRATCH_REDUCE, RMAX_BLOCKS * sizeof(double));
    k_softmax_ce<<<g, RT, 0, s->stream>>>(x->data, x->dtype, (const int32_t *)labels->data, rows, c, count_ptr(norm),
                                          norm->scale, norm->grad_mult, gscale_ptr(norm), part,
                                          dx ? dx->data : NULL, dx ? dx->dtype : MRCNN_DTYPE_F32);
    MRCNN_CHECK_LAUNCH("softmax_ce");
    finish(s, part, g, norm, loss);
}

/* ---- smooth L1 ------------------------------------------------------------------------------- */

__global__ void k_smooth_l1(const void *x, int xt, const void *t, int tt, const void *wgt, int wt, int64_t n,
                            float beta, const float *count, float scale, float gmul, const float *gscale, double *part, void *dx,
                            int dxt) {
    const float inv_norm = gmul * (gscale ? gscale[0] : 1.0f) / norm_of(count, scale);
    double acc = 0;
    CU_GRID_STRIDE(i, n) {
        float xv = cu_load(x, i, xt), tv = cu_load(t, i, tt);
        float wi = wgt ? cu_load(wgt, i, wt) : 1.0f;
        double a = fabs((double)xv - (double)tv);
        double l = a < beta ? 0.5 * a * a / beta : a - 0.5 * beta;
        acc += wi * l;
        if (dx) {
            float d = xv - tv;
            float gd = fabsf(d) < beta ? d / beta : (float)((d > 0) - (d < 0));
            cu_store(dx, i, dxt, cu_load(dx, i, dxt) + wi * gd * inv_norm);
        }
    }
    block_sum_store(acc, part);
}

static void cu_smooth_l1(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                         const mrcnn_tensor *weight, float beta, const mrcnn_loss_norm *norm, mrcnn_tensor *loss,
                         mrcnn_tensor *dx) {
    cu_state *s = cu_st(be);
    cu_check_float(x, "smooth_l1 x");
    const int64_t n = cu_numel(x);
    check_same(t, n, "smooth_l1 targets");
    if (weight) check_same(weight, n, "smooth_l1 weight");
    if (dx) check_same(dx, n, "smooth_l1 dx");
    check_loss_out(loss, norm, "smooth_l1");
    MRCNN_CHECK(beta >= 0, "smooth_l1: beta %g must not be negative", (double)beta);
    unsigned g = reduce_blocks(n);
    double *part = (double *)cu_scratch(s, CU_SCRATCH_REDUCE, RMAX_BLOCKS * sizeof(double));
    k_smooth_l1<<<g, RT, 0, s->stream>>>(x->data, x->dtype, t->data, t->dtype, weight ? weight->data : NULL,
                                         weight ? weight->dtype : MRCNN_DTYPE_F32, n, beta, count_ptr(norm), norm->scale,
                                         norm->grad_mult, gscale_ptr(norm), part,
                                         dx ? dx->data : NULL, dx ? dx->dtype : MRCNN_DTYPE_F32);
    MRCNN_CHECK_LAUNCH("smooth_l1");
    finish(s, part, g, norm, loss);
}

void cu_fill_loss_ops(mrcnn_backend *be) {
    be->loss.bce_logits = cu_bce_logits;
    be->loss.softmax_ce = cu_softmax_ce;
    be->loss.smooth_l1 = cu_smooth_l1;
}
