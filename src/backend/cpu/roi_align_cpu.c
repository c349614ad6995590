/* The CPU backend's ROIAlign entries: shape checks on the tensors, then the float op
 * (src/ops/roi_align.c); outputs rounded to the storage precision as every CPU op. */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/roi_align.h"

void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

static void check_levels(const mrcnn_roi_align_desc *d, const mrcnn_tensor *f, const char *what) {
    mrcnn_roi_align_desc_check(d);
    MRCNN_CHECK(f, "roi_align: NULL %s", what);
    for (int l = 0; l < d->n_levels; l++) {
        int64_t shape[4] = {d->n_images, d->level_h[l], d->level_w[l], d->channels};
        mrcnn_tensor_check_dtype(&f[l], what, MRCNN_DTYPE_F32);
        mrcnn_tensor_check_shape(&f[l], what, 4, shape);
        MRCNN_CHECK(mrcnn_tensor_is_contiguous(&f[l]), "roi_align: %s level %d is not contiguous", what, l);
    }
}

static int64_t check_rois(const mrcnn_tensor *rois) {
    int64_t shape[2] = {-1, 5};
    mrcnn_tensor_check_dtype(rois, "roi_align rois", MRCNN_DTYPE_F32);
    mrcnn_tensor_check_shape(rois, "roi_align rois", 2, shape);
    return rois->shape[0];
}

static void check_out(const mrcnn_roi_align_desc *d, const mrcnn_tensor *y, int64_t r, const char *what) {
    int64_t shape[4] = {r, d->out_h, d->out_w, d->channels};
    mrcnn_tensor_check_dtype(y, what, MRCNN_DTYPE_F32);
    mrcnn_tensor_check_shape(y, what, 4, shape);
}

void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y) {
    check_levels(d, feats, "roi_align features");
    int64_t r = check_rois(rois);
    check_out(d, y, r, "roi_align output");
    const float *f[MRCNN_ROI_MAX_LEVELS];
    for (int l = 0; l < d->n_levels; l++) f[l] = feats[l].data;
    mrcnn_roi_align_forward(d, f, r, rois->data, y->data);
    if (be->storage != MRCNN_DTYPE_F32) mrcnn_round_array(y->data, (size_t)mrcnn_tensor_numel(y), be->storage);
}

void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    check_levels(d, dfeats, "roi_align feature gradients");
    int64_t r = check_rois(rois);
    check_out(d, dy, r, "roi_align output gradient");
    float *g[MRCNN_ROI_MAX_LEVELS];
    for (int l = 0; l < d->n_levels; l++) g[l] = dfeats[l].data;
    mrcnn_roi_align_backward(d, r, rois->data, dy->data, g);
    if (be->storage != MRCNN_DTYPE_F32)
        for (int l = 0; l < d->n_levels; l++)
            mrcnn_round_array(dfeats[l].data, (size_t)mrcnn_tensor_numel(&dfeats[l]), be->storage);
}
