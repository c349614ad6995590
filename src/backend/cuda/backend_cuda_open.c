/* The CUDA backend's factory entry points on the host side (in libmrcnn.a, GPU=1
 * builds; src/backend/cuda/backend_nocuda.c stands in for them in GPU=0 builds). The backend
 * itself is built in libmrcnn_cuda.so; the argument checks every backend shares
 * (backend_validate.c) are put in front of it here, so that the shared library never
 * depends on a part of libmrcnn.a that a program might not have linked. */
#include "mrcnn/backend.h"

#include <cuda_runtime_api.h>

/* src/backend/cuda/backend_cuda.cu */
mrcnn_backend *mrcnn_cuda_backend_new(int device, const char **why);

mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why) {
    mrcnn_backend *be = mrcnn_cuda_backend_new(device, why);
    if (be) mrcnn_backend_validate(be);
    return be;
}

int mrcnn_backend_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
