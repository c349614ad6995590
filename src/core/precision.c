/* SOLVER.PRECISION -> backend storage dtype and TF32 (precision.h). */
#include "mrcnn/precision.h"

#include <string.h>

#include "mrcnn/check.h"

#ifdef MRCNN_HAVE_CUDA_HEADERS
#include <cuda_runtime_api.h>
#endif

int mrcnn_precision_valid(const char *name) {
    static const char *const modes[] = {"", "auto", "fp32", "tf32", "fp16", "bf16"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (name && !strcmp(name, modes[i])) return 1;
    return 0;
}

int mrcnn_precision_device_cc(void) {
#ifdef MRCNN_HAVE_CUDA_HEADERS
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
#else
    return 0;
#endif
}

const char *mrcnn_precision_apply(mrcnn_backend *be, const char *name) {
    MRCNN_CHECK(mrcnn_precision_valid(name), "SOLVER.PRECISION '%s' is unknown (fp32, tf32, fp16, bf16 or auto)",
                name ? name : "(null)");
    const int gpu = be->device == MRCNN_DEVICE_GPU;
    const char *mode = name;
    if (!strcmp(name, "") || !strcmp(name, "auto")) mode = gpu && mrcnn_precision_device_cc() >= 80 ? "bf16" : "fp32";
    mrcnn_dtype storage = !strcmp(mode, "fp16") ? MRCNN_DTYPE_F16 : !strcmp(mode, "bf16") ? MRCNN_DTYPE_BF16
                                                                                           : MRCNN_DTYPE_F32;
    be->set_precision(be, storage);
#ifdef MRCNN_HAVE_CUDA_HEADERS
    if (gpu) mrcnn_backend_cuda_set_tf32(be, !strcmp(mode, "tf32"));
#endif
    return mode;
}
