/* The full CPU backend: the generic ops of backend_cpu.c plus ROIAlign, the class gathers and
 * the detection ops of detect_ops.h (roi_align_cpu.c, gather_cpu.c, backend_cpu_detect.c,
 * backend_cpu_infer.c). */
#include "mrcnn/backend.h"

/* roi_align_cpu.c */
void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

/* gather_cpu.c */
void mrcnn_cpu_fill_gather_ops(mrcnn_backend *be);
/* backend_cpu_detect.c */
void mrcnn_cpu_fill_detect_ops(mrcnn_backend *be);
/* backend_cpu_infer.c */
void mrcnn_cpu_fill_infer_ops(mrcnn_backend *be);

mrcnn_backend *mrcnn_backend_cpu_create(void) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->nn.roi_align_forward = mrcnn_cpu_roi_align_forward;
    be->nn.roi_align_backward = mrcnn_cpu_roi_align_backward;
    mrcnn_cpu_fill_gather_ops(be);
    mrcnn_cpu_fill_detect_ops(be);
    mrcnn_cpu_fill_infer_ops(be);
    mrcnn_backend_validate(be); // last: the checks wrap the entries as installed
    return be;
}
