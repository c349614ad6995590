/* Which of cuDNN's convolution algorithms to run: the rule of conv_cudnn.cu as a pure
 * host function over plain candidates (no cuDNN types), so that a CPU test drives it
 * with the lists cuDNN may offer (tests/cuda/test_conv_algo_pick.c). Plain C, included
 * by conv_cudnn.cu (C++) and by the test. */
#ifndef MRCNN_CU_ALGO_PICK_H
#define MRCNN_CU_ALGO_PICK_H

#include <stddef.h>

/* One entry of a cudnnFind* / cudnnGet*_v7 answer, in cuDNN's order (fastest first). */
typedef struct cu_algo_cand {
    int algo;      // cuDNN's algorithm enum value (kept for messages)
    int ok;        // status CUDNN_STATUS_SUCCESS
    int fma;       // math type CUDNN_FMA_MATH (no TF32 tensor cores)
    int transform; // FFT or Winograd: rounding beyond plain fp32 summation
    size_t memory; // workspace bytes
} cu_algo_cand;

typedef enum {
    CU_PICK_NONE = 0, // nothing acceptable: the caller fails with the list
    CU_PICK_FIRST,    // the first acceptable entry under the precision's rule
    CU_PICK_RELAXED,  // strict fp32 had no FMA-math non-transform entry: the first
                        // FMA-math entry with a transform (the caller logs it once)
} cu_pick_kind;

/* Index of the entry to run, or -1; *kind says how it was found. Every mode needs
 * success and a workspace within ws_limit. strict (fp32 without TF32) wants FMA math
 * without transforms; when cuDNN offers none (seen possible at odd channel counts:
 * C = 3, K = 3, 12, 91) a transform is better than aborting the run, while a math type
 * that may use TF32 stays excluded: the result would no longer be fp32. */
static inline int cu_algo_pick(const cu_algo_cand *c, int n, int strict, size_t ws_limit, cu_pick_kind *kind) {
    *kind = CU_PICK_NONE;
    for (int i = 0; i < n; i++)
        if (c[i].ok && c[i].memory <= ws_limit && (!strict || (c[i].fma && !c[i].transform))) {
            *kind = CU_PICK_FIRST;
            return i;
        }
    if (!strict) return -1;
    for (int i = 0; i < n; i++)
        if (c[i].ok && c[i].memory <= ws_limit && c[i].fma) {
            *kind = CU_PICK_RELAXED;
            return i;
        }
    return -1;
}

#endif
