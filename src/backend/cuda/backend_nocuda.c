/* Linked only into GPU=0 builds, in place of src/backend/cuda/: the CUDA backend is absent
 * (src/backend/cuda/backend_cuda_open.c in GPU=1 builds). */
#include "mrcnn/backend.h"

#include <stddef.h>

mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why) {
    if (why) *why = "this build has no CUDA (built with GPU=0)";
    return NULL;
}

int mrcnn_backend_cuda_device_count(void) { return 0; }
