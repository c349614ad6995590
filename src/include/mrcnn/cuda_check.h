/* The CUDA-side members of the check family (check.h). Only .cu files and the
 * NCCL glue include this, so host-only builds never need the CUDA headers. */
#ifndef MRCNN_CUDA_CHECK_H
#define MRCNN_CUDA_CHECK_H

#include "mrcnn/check.h"
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#define MRCNN_CHECK_CUDA(call)                                                         \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) mrcnn_fail_call("CUDA", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_CUBLAS(call)                                                       \
    do {                                                                               \
        cublasStatus_t e_ = (call);                                                    \
        if (e_ != CUBLAS_STATUS_SUCCESS) mrcnn_fail_call("cuBLAS", #call, cublasGetStatusString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_CUDNN(call)                                                        \
    do {                                                                               \
        cudnnStatus_t e_ = (call);                                                     \
        if (e_ != CUDNN_STATUS_SUCCESS) mrcnn_fail_call("cuDNN", #call, cudnnGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_NCCL(call)                                                         \
    do {                                                                               \
        ncclResult_t e_ = (call);                                                      \
        if (e_ != ncclSuccess) mrcnn_fail_call("NCCL", #call, ncclGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
/* Inside a graph guard (check.h: a capture or a graph launch on this thread) a failing
 * call is recorded and the macro returns, so the trainer can run the step directly;
 * elsewhere it stops the run. */
/* Kernel launches report errors only through cudaGetLastError. MRCNN_CHECK_LAUNCH("op")
 * after each launch fails with the op (kernel) named, the CUDA error's name and text,
 * and file:line. An asynchronous fault (illegal address, trap) of a kernel surfaces
 * only at a later call, so by default it may be reported at another kernel; with
 * MRCNN_CUDA_SYNC_CHECK=1 in the environment (read once per process) every launch is
 * followed by a device synchronisation, so the fault is reported at the kernel that
 * caused it (slow: for debugging and for the GPU op tests). MRCNN_CUDA_DEBUG_SYNC("call")
 * does the same after a library call that launches kernels (cuDNN, cuBLAS): nothing
 * unless that mode is on. Both are defined in src/backend/cuda/backend_cuda.cu. */
#ifdef __cplusplus
extern "C" {
#endif
void mrcnn_cuda_check_launch(const char *what, const char *file, int line);
void mrcnn_cuda_debug_sync(const char *what, const char *file, int line);
/* 1 when MRCNN_CUDA_SYNC_CHECK is set to a nonzero number. */
int mrcnn_cuda_sync_check(void);
#ifdef __cplusplus
}
#endif
#define MRCNN_CHECK_LAUNCH(what) mrcnn_cuda_check_launch((what), __FILE__, __LINE__)
#define MRCNN_CUDA_DEBUG_SYNC(what) mrcnn_cuda_debug_sync((what), __FILE__, __LINE__)

#endif
