/* The one place that chooses between the CPU and the GPU backend. It sits above both
 * (src/backend/cpu, src/backend/cuda), so neither backend calls the other. */
#include "mrcnn/backend_open.h"

#include "mrcnn/log.h"

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
