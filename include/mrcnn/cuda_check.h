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
        if (e_ != cudaSuccess) mrcnn_fail("CUDA", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_CUBLAS(call)                                                       \
    do {                                                                               \
        cublasStatus_t e_ = (call);                                                    \
        if (e_ != CUBLAS_STATUS_SUCCESS) mrcnn_fail("cuBLAS", #call, cublasGetStatusString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_CUDNN(call)                                                        \
    do {                                                                               \
        cudnnStatus_t e_ = (call);                                                     \
        if (e_ != CUDNN_STATUS_SUCCESS) mrcnn_fail("cuDNN", #call, cudnnGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define MRCNN_CHECK_NCCL(call)                                                         \
    do {                                                                               \
        ncclResult_t e_ = (call);                                                      \
        if (e_ != ncclSuccess) mrcnn_fail("NCCL", #call, ncclGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
/* Kernel launches report errors only through cudaGetLastError. */
#define MRCNN_CHECK_LAUNCH(what) MRCNN_CHECK_CUDA(cudaGetLastError())

#endif
