#include "mrcnn/backend.h"

#include <string.h>

#include "mrcnn/check.h"

mrcnn_device mrcnn_backend_device_parse(const char *name) {
    if (name && !strcmp(name, "cuda")) return MRCNN_DEVICE_GPU;
    MRCNN_CHECK(name && !strcmp(name, "cpu"), "MODEL.DEVICE '%s' is unknown (cpu or cuda)", name ? name : "(null)");
    return MRCNN_DEVICE_CPU;
}

void mrcnn_backend_destroy(mrcnn_backend *be) {
    if (be && be->destroy) be->destroy(be);
}
