/* Linked only into GPU=0 builds, in place of src/cuda/: the CUDA backend is absent. */
#include "mrcnn/backend.h"

#include <stddef.h>

mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why) {
    if (why) *why = "this build has no CUDA (built with GPU=0)";
    return NULL;
}
