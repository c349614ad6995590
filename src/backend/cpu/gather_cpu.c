/* The CPU backend's per-ROI class gathers (backend.h), over the host functions of
 * roi_targets.h: fp32 host tensors only, as every CPU op. */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/roi_targets.h"

static void check_args(const mrcnn_tensor *x, const mrcnn_tensor *labels, const mrcnn_tensor *y, int64_t rows,
                       int64_t x_row, int64_t y_row, const char *op) {
    MRCNN_CHECK(x->device == MRCNN_DEVICE_CPU && labels->device == MRCNN_DEVICE_CPU && y->device == MRCNN_DEVICE_CPU,
                "%s: host tensors expected", op);
    mrcnn_tensor_check_dtype(x, op, MRCNN_DTYPE_F32);
    mrcnn_tensor_check_dtype(y, op, MRCNN_DTYPE_F32);
    mrcnn_tensor_check_dtype(labels, op, MRCNN_DTYPE_I32);
    MRCNN_CHECK(mrcnn_tensor_numel(labels) == rows && mrcnn_tensor_numel(x) == rows * x_row &&
                    mrcnn_tensor_numel(y) == rows * y_row,
                "%s: %lld labels, %lld per-class values and %lld gathered values do not match %lld rows", op,
                (long long)mrcnn_tensor_numel(labels), (long long)mrcnn_tensor_numel(x),
                (long long)mrcnn_tensor_numel(y), (long long)rows);
}

/* x (R, M, M, K): M from y (R, M, M). */
static void mask_dims(const mrcnn_tensor *x, const mrcnn_tensor *y, int *r, int *m, int *k, const char *op) {
    MRCNN_CHECK(x->ndim == 4 && y->ndim == 3 && x->shape[1] == y->shape[1] && x->shape[2] == y->shape[2] &&
                    x->shape[0] == y->shape[0],
                "%s: per-class masks must be (R, M, M, K) and gathered ones (R, M, M)", op);
    *r = (int)x->shape[0];
    *m = (int)x->shape[1];
    *k = (int)x->shape[3];
}

static void cpu_gather_masks(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                             mrcnn_tensor *y) {
    int r, m, k;
    mask_dims(x, y, &r, &m, &k, "gather_class_masks");
    check_args(x, labels, y, r, (int64_t)m * m * k, (int64_t)m * m, "gather_class_masks");
    if (r) mrcnn_gather_class_masks(r, m, k, x->data, labels->data, y->data);
}

static void cpu_gather_masks_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, const mrcnn_tensor *labels,
                                      mrcnn_tensor *dx) {
    int r, m, k;
    mask_dims(dx, dy, &r, &m, &k, "gather_class_masks_backward");
    check_args(dx, labels, dy, r, (int64_t)m * m * k, (int64_t)m * m, "gather_class_masks_backward");
    if (r) mrcnn_gather_class_masks_backward(r, m, k, dy->data, labels->data, dx->data);
}

static void cpu_gather_deltas(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                              mrcnn_tensor *y) {
    int64_t r = mrcnn_tensor_numel(labels), k = r ? mrcnn_tensor_numel(x) / (4 * r) : 0;
    check_args(x, labels, y, r, 4 * k, 4, "gather_class_deltas");
    if (r) mrcnn_gather_class_deltas((int)r, (int)k, x->data, labels->data, y->data);
}

static void cpu_gather_deltas_backward(const mrcnn_backend *be, const mrcnn_tensor *dy, const mrcnn_tensor *labels,
                                       mrcnn_tensor *dx) {
    int64_t r = mrcnn_tensor_numel(labels), k = r ? mrcnn_tensor_numel(dx) / (4 * r) : 0;
    check_args(dx, labels, dy, r, 4 * k, 4, "gather_class_deltas_backward");
    if (r) mrcnn_gather_class_deltas_backward((int)r, (int)k, dy->data, labels->data, dx->data);
}

void mrcnn_cpu_fill_gather_ops(mrcnn_backend *be) {
    be->det.gather_class_masks = cpu_gather_masks;
    be->det.gather_class_masks_backward = cpu_gather_masks_backward;
    be->det.gather_class_deltas = cpu_gather_deltas;
    be->det.gather_class_deltas_backward = cpu_gather_deltas_backward;
}
