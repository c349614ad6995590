/* Private to src/backend/cuda: loads and stores of F32/F16/BF16 elements as float, with the
 * dtype chosen at run time (uniform across a launch, so the branch costs little)
 * instead of one template instance per dtype, which keeps the library small.
 * Inline definitions here because without relocatable device code every .cu file
 * needs its own copy; like rng.h, this is the exception to "no definitions in
 * headers". */
#ifndef MRCNN_CUDA_DTYPE_CUH
#define MRCNN_CUDA_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "mrcnn/tensor.h"

static __device__ __forceinline__ float cu_load(const void *p, int64_t i, int dt) {
    if (dt == MRCNN_DTYPE_F32) return ((const float *)p)[i];
    if (dt == MRCNN_DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* Round to nearest even, as half.h does on the CPU. */
static __device__ __forceinline__ void cu_store(void *p, int64_t i, int dt, float v) {
    if (dt == MRCNN_DTYPE_F32) ((float *)p)[i] = v;
    else if (dt == MRCNN_DTYPE_F16) ((__half *)p)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}

#define CU_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#endif
