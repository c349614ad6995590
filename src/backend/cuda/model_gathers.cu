/* Anchor grids and the per-class gathers of the box and mask losses on the device
 * (detect_internal.h), as src/ops/detect/anchors.c and mask_targets.c compute them (the anchor
 * coordinates with box_math.h's code). */
#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "mrcnn/box_math.h"
#include "detect_internal.h"

#define CU_THREADS 256
#define ANCHOR_MAX_CELL 16

typedef struct {
    float v[ANCHOR_MAX_CELL * 4];
} anchor_cells;

static cu_state *cuda_state_of(const mrcnn_backend *be, const char *op) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state,
                "%s: needs the CUDA backend", op);
    return cu_st(be);
}

__global__ void k_anchors_grid(anchor_cells cell, int n_cell, int grid_h, int grid_w, int stride_h, int stride_w,
                               float *anchors) {
    const int64_t total = (int64_t)grid_h * grid_w * n_cell * 4;
    CU_GRID_STRIDE(t, total) {
        const int c = (int)(t & 3);
        const int64_t r = t >> 2;
        const int a = (int)(r % n_cell);
        const int64_t yx = r / n_cell;
        const int x = (int)(yx % grid_w), y = (int)(yx / grid_w);
        anchors[t] = mrcnn_anchor_coord(cell.v, a, c, y, x, stride_h, stride_w);
    }
}

extern "C" void mrcnn_cuda_anchors_grid(const mrcnn_backend *be, const float *cell, int n_cell, int grid_h, int grid_w,
                                        int stride_h, int stride_w, float *anchors) {
    cu_state *s = cuda_state_of(be, "cuda_anchors_grid");
    MRCNN_CHECK(cell && n_cell > 0 && n_cell <= ANCHOR_MAX_CELL && grid_h > 0 && grid_w > 0 && stride_h > 0 &&
                    stride_w > 0,
                "cuda_anchors_grid: cells %d (at most %d), grid %dx%d, stride %dx%d", n_cell, ANCHOR_MAX_CELL, grid_h,
                grid_w, stride_h, stride_w);
    anchor_cells c;
    for (int i = 0; i < 4 * n_cell; i++) c.v[i] = cell[i];
    const int64_t total = (int64_t)grid_h * grid_w * n_cell * 4;
    k_anchors_grid<<<cu_blocks(total, CU_THREADS), CU_THREADS, 0, s->stream>>>(c, n_cell, grid_h, grid_w, stride_h,
                                                                                 stride_w, anchors);
    MRCNN_CHECK_LAUNCH("anchors_grid");
}

/* out (n, per) = channel labels[i] of x (n, per, k) (deltas: per = 4 with the class
 * outer, handled by the index maps below). */
__global__ void k_gather_deltas(int n, int k, const void *x, int dt, const int32_t *labels, float *out) {
    CU_GRID_STRIDE(t, (int64_t)n * 4) {
        const int64_t i = t >> 2;
        const int lab = labels[i];
        out[t] = (lab >= 0 && lab < k) ? cu_load(x, (i * k + lab) * 4 + (t & 3), dt) : 0.0f;
    }
}

__global__ void k_gather_deltas_bwd(int n, int k, const float *dout, const int32_t *labels, void *dx, int dt) {
    CU_GRID_STRIDE(t, (int64_t)n * 4) {
        const int64_t i = t >> 2;
        const int lab = labels[i];
        if (lab < 0 || lab >= k) continue;
        const int64_t at = (i * k + lab) * 4 + (t & 3);
        cu_store(dx, at, dt, cu_load(dx, at, dt) + dout[t]);
    }
}

__global__ void k_gather_masks(int n, int64_t mm, int k, const void *x, int dt, const int32_t *labels, float *out) {
    CU_GRID_STRIDE(t, (int64_t)n * mm) {
        const int64_t i = t / mm, p = t % mm;
        const int lab = labels[i];
        out[t] = (lab >= 0 && lab < k) ? cu_load(x, (i * mm + p) * k + lab, dt) : 0.0f;
    }
}

__global__ void k_gather_masks_bwd(int n, int64_t mm, int k, const float *dout, const int32_t *labels, void *dx,
                                   int dt) {
    CU_GRID_STRIDE(t, (int64_t)n * mm) {
        const int64_t i = t / mm, p = t % mm;
        const int lab = labels[i];
        if (lab < 0 || lab >= k) continue;
        const int64_t at = (i * mm + p) * k + lab;
        cu_store(dx, at, dt, cu_load(dx, at, dt) + dout[t]);
    }
}

static void check_gather(int n, int k, mrcnn_dtype dt, const char *op) {
    MRCNN_CHECK(n >= 0 && k > 0, "%s: %d rows, %d classes", op, n, k);
    MRCNN_CHECK(dt == MRCNN_DTYPE_F32 || dt == MRCNN_DTYPE_F16 || dt == MRCNN_DTYPE_BF16,
                "%s: dtype %d is not fp32, fp16 or bf16", op, (int)dt);
}

extern "C" void mrcnn_cuda_gather_class_deltas(const mrcnn_backend *be, int n, int k, const void *deltas,
                                               mrcnn_dtype dt, const int32_t *labels, float *out) {
    cu_state *s = cuda_state_of(be, "cuda_gather_class_deltas");
    check_gather(n, k, dt, "cuda_gather_class_deltas");
    if (n == 0) return;
    k_gather_deltas<<<cu_blocks((int64_t)n * 4, CU_THREADS), CU_THREADS, 0, s->stream>>>(n, k, deltas, dt, labels, out);
    MRCNN_CHECK_LAUNCH("gather_class_deltas");
}

extern "C" void mrcnn_cuda_gather_class_deltas_backward(const mrcnn_backend *be, int n, int k, const float *dout,
                                                        const int32_t *labels, void *ddeltas, mrcnn_dtype dt) {
    cu_state *s = cuda_state_of(be, "cuda_gather_class_deltas_backward");
    check_gather(n, k, dt, "cuda_gather_class_deltas_backward");
    if (n == 0) return;
    k_gather_deltas_bwd<<<cu_blocks((int64_t)n * 4, CU_THREADS), CU_THREADS, 0, s->stream>>>(n, k, dout, labels,
                                                                                             ddeltas, dt);
    MRCNN_CHECK_LAUNCH("gather_class_deltas_backward");
}

extern "C" void mrcnn_cuda_gather_class_masks(const mrcnn_backend *be, int n, int m, int k, const void *logits,
                                              mrcnn_dtype dt, const int32_t *labels, float *out) {
    cu_state *s = cuda_state_of(be, "cuda_gather_class_masks");
    check_gather(n, k, dt, "cuda_gather_class_masks");
    MRCNN_CHECK(m > 0, "cuda_gather_class_masks: mask size %d", m);
    if (n == 0) return;
    const int64_t mm = (int64_t)m * m;
    k_gather_masks<<<cu_blocks(n * mm, CU_THREADS), CU_THREADS, 0, s->stream>>>(n, mm, k, logits, dt, labels, out);
    MRCNN_CHECK_LAUNCH("gather_class_masks");
}

extern "C" void mrcnn_cuda_gather_class_masks_backward(const mrcnn_backend *be, int n, int m, int k, const float *dout,
                                                       const int32_t *labels, void *dlogits, mrcnn_dtype dt) {
    cu_state *s = cuda_state_of(be, "cuda_gather_class_masks_backward");
    check_gather(n, k, dt, "cuda_gather_class_masks_backward");
    MRCNN_CHECK(m > 0, "cuda_gather_class_masks_backward: mask size %d", m);
    if (n == 0) return;
    const int64_t mm = (int64_t)m * m;
    k_gather_masks_bwd<<<cu_blocks(n * mm, CU_THREADS), CU_THREADS, 0, s->stream>>>(n, mm, k, dout, labels, dlogits,
                                                                                   dt);
    MRCNN_CHECK_LAUNCH("gather_class_masks_backward");
}

/* ---- the backend's gather ops (backend.h) over the entry points above ---------------- */

static void gather_check(const mrcnn_tensor *x, const mrcnn_tensor *labels, const mrcnn_tensor *y, int64_t rows,
                         int64_t x_row, int64_t y_row, const char *op) {
    cu_check_float(x, op);
    cu_check_gpu(labels, op);
    cu_check_gpu(y, op);
    MRCNN_CHECK(labels->dtype == MRCNN_DTYPE_I32 && y->dtype == MRCNN_DTYPE_F32, "%s: labels int32 and gathered fp32 expected", op);
    MRCNN_CHECK(cu_numel(labels) == rows && cu_numel(x) == rows * x_row && cu_numel(y) == rows * y_row,
                "%s: %lld labels, %lld per-class values and %lld gathered values do not match %lld rows", op,
                (long long)cu_numel(labels), (long long)cu_numel(x), (long long)cu_numel(y), (long long)rows);
}

static void cu_gather_masks_op(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                               mrcnn_tensor *y) {
    MRCNN_CHECK(x->ndim == 4 && y->ndim == 3, "gather_class_masks: x (R, M, M, K) and y (R, M, M) expected");
    const int64_t r = x->shape[0], m = x->shape[1], k = x->shape[3];
    gather_check(x, labels, y, r, m * m * k, m * m, "gather_class_masks");
    mrcnn_cuda_gather_class_masks(be, (int)r, (int)m, (int)k, x->data, x->dtype, (const int32_t *)labels->data,
                                  (float *)y->data);
}

static void cu_gather_masks_bwd_op(const mrcnn_backend *be, const mrcnn_tensor *dy, const mrcnn_tensor *labels,
                                   mrcnn_tensor *dx) {
    MRCNN_CHECK(dx->ndim == 4 && dy->ndim == 3, "gather_class_masks_backward: dx (R, M, M, K) and dy (R, M, M) expected");
    const int64_t r = dx->shape[0], m = dx->shape[1], k = dx->shape[3];
    gather_check(dx, labels, dy, r, m * m * k, m * m, "gather_class_masks_backward");
    mrcnn_cuda_gather_class_masks_backward(be, (int)r, (int)m, (int)k, (const float *)dy->data,
                                           (const int32_t *)labels->data, dx->data, dx->dtype);
}

static void cu_gather_deltas_op(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                                mrcnn_tensor *y) {
    const int64_t r = cu_numel(labels), k = r ? cu_numel(x) / (4 * r) : 1;
    gather_check(x, labels, y, r, 4 * k, 4, "gather_class_deltas");
    mrcnn_cuda_gather_class_deltas(be, (int)r, (int)k, x->data, x->dtype, (const int32_t *)labels->data,
                                   (float *)y->data);
}

static void cu_gather_deltas_bwd_op(const mrcnn_backend *be, const mrcnn_tensor *dy, const mrcnn_tensor *labels,
                                    mrcnn_tensor *dx) {
    const int64_t r = cu_numel(labels), k = r ? cu_numel(dx) / (4 * r) : 1;
    gather_check(dx, labels, dy, r, 4 * k, 4, "gather_class_deltas_backward");
    mrcnn_cuda_gather_class_deltas_backward(be, (int)r, (int)k, (const float *)dy->data,
                                            (const int32_t *)labels->data, dx->data, dx->dtype);
}

void cu_fill_gather_ops(mrcnn_backend *be) {
    be->det.gather_class_masks = cu_gather_masks_op;
    be->det.gather_class_masks_backward = cu_gather_masks_bwd_op;
    be->det.gather_class_deltas = cu_gather_deltas_op;
    be->det.gather_class_deltas_backward = cu_gather_deltas_bwd_op;
}
