/* Registration hook for the model-specific ops (box ops, ROIAlign, NMS, ...) of the
 * CPU backend: mrcnn_backend_cpu_create calls it after the generic ops, so the
 * model's ops live beside the model rather than in the generic backend file.
 * Each model op adds its assignment here as it lands. */
#include "mrcnn/backend.h"

/* src/model/roi_align_cpu.c */
void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

/* src/model/gather_cpu.c */
void mrcnn_cpu_fill_gather_ops(mrcnn_backend *be);

void mrcnn_backend_cpu_fill_model_ops(mrcnn_backend *be) {
    be->roi_align_forward = mrcnn_cpu_roi_align_forward;
    be->roi_align_backward = mrcnn_cpu_roi_align_backward;
    mrcnn_cpu_fill_gather_ops(be);
}
