/* The full CPU backend: the generic ops of src/core/backend_cpu.c plus the
 * model-specific ops (ROIAlign, class gathers), which live beside the model. The
 * factory sits here, above both, so the backend layer never calls up into the model. */
#include "mrcnn/model.h"

/* src/model/roi_align_cpu.c */
void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

/* src/model/gather_cpu.c */
void mrcnn_cpu_fill_gather_ops(mrcnn_backend *be);

mrcnn_backend *mrcnn_backend_cpu_create(void) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->roi_align_forward = mrcnn_cpu_roi_align_forward;
    be->roi_align_backward = mrcnn_cpu_roi_align_backward;
    mrcnn_cpu_fill_gather_ops(be);
    return be;
}
