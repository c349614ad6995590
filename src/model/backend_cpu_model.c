/* The full CPU backend: the generic ops of src/core/backend_cpu.c plus the
 * model-specific ops (ROIAlign, the detection ops of detect_ops.h), which live beside the model. The
 * factory sits here, above both, so the backend layer never calls up into the model;
 * so does mrcnn_backend_open, the one place that chooses between CPU and GPU. */
#include "mrcnn/log.h"
#include "mrcnn/model.h"

/* src/model/roi_align_cpu.c */
void mrcnn_cpu_roi_align_forward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *feats,
                                 const mrcnn_tensor *rois, mrcnn_tensor *y);
void mrcnn_cpu_roi_align_backward(const mrcnn_backend *be, const mrcnn_roi_align_desc *d, const mrcnn_tensor *rois,
                                  const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

/* src/model/gather_cpu.c */
void mrcnn_cpu_fill_gather_ops(mrcnn_backend *be);
/* src/model/backend_cpu_detect.c */
void mrcnn_cpu_fill_detect_ops(mrcnn_backend *be);

mrcnn_backend *mrcnn_backend_cpu_create(void) {
    mrcnn_backend *be = mrcnn_backend_cpu_create_generic();
    be->nn.roi_align_forward = mrcnn_cpu_roi_align_forward;
    be->nn.roi_align_backward = mrcnn_cpu_roi_align_backward;
    mrcnn_cpu_fill_gather_ops(be);
    mrcnn_cpu_fill_detect_ops(be);
    mrcnn_backend_validate(be); // last: the checks wrap the entries as installed
    return be;
}

mrcnn_backend *mrcnn_backend_open(const mrcnn_backend_open_opts *o, const char **why) {
    if (why) *why = NULL;
    if (o->device == MRCNN_DEVICE_CPU) return mrcnn_backend_cpu_create();
    const char *reason = "no GPU visible";
    mrcnn_backend *be = o->gpu >= 0 ? mrcnn_backend_cuda_create(o->gpu, &reason) : NULL;
    if (be) return be;
    if (!reason) reason = "no GPU";
    if (!o->fallback) {
        if (why) *why = reason;
        return NULL;
    }
    mrcnn_warn("MODEL.DEVICE=cuda but %s: %s", reason, o->fallback);
    return mrcnn_backend_cpu_create();
}
