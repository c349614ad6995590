/* The CPU backend's ROIAlign entries: the float op (src/ops/roi_align.c); outputs
 * rounded to the storage precision as every CPU op. Descriptor, shapes, devices and
 * layout are checked in front of the entries (backend_validate.c); what is left here is
 * what this backend adds: fp32 data, since the CPU op computes on floats. The backward
 * is the scatter or, with MRCNN_ROI_BWD=gather, the gather (roi_align.h). */
#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/roi_align.h"

void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

static void levels_f32(const mrcnn_roi_align_desc *d, const mrcnn_tensor *f, const char *what) {
    for (int l = 0; l < d->n_levels; l++) mrcnn_tensor_check_dtype(&f[l], what, MRCNN_DTYPE_F32);
}

void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y) {
    levels_f32(d, feats, "roi_align features");
    mrcnn_tensor_check_dtype(y, "roi_align output", MRCNN_DTYPE_F32);
    const float *f[MRCNN_ROI_MAX_LEVELS];
    for (int l = 0; l < d->n_levels; l++) f[l] = feats[l].data;
    mrcnn_roi_align_forward(d, f, rois->shape[0], rois->data, y->data);
    if (be->storage != MRCNN_DTYPE_F32) mrcnn_round_array(y->data, (size_t)mrcnn_tensor_numel(y), be->storage);
}

void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats) {
    levels_f32(d, dfeats, "roi_align feature gradients");
    mrcnn_tensor_check_dtype(dy, "roi_align output gradient", MRCNN_DTYPE_F32);
    float *g[MRCNN_ROI_MAX_LEVELS];
    for (int l = 0; l < d->n_levels; l++) g[l] = dfeats[l].data;
    if (mrcnn_roi_align_bwd_gather())
        mrcnn_roi_align_backward_gather(d, rois->shape[0], rois->data, dy->data, g);
    else
        mrcnn_roi_align_backward(d, rois->shape[0], rois->data, dy->data, g);
    if (be->storage != MRCNN_DTYPE_F32)
        for (int l = 0; l < d->n_levels; l++)
            mrcnn_round_array(dfeats[l].data, (size_t)mrcnn_tensor_numel(&dfeats[l]), be->storage);
}
