/* SOLVER.PRECISION applied to a backend: the activation storage dtype and TF32.
 *   fp32  fp32 storage, fp32 math (no TF32)
 *   tf32  fp32 storage, TF32 tensor cores for convolutions and GEMMs (GPU only; the CPU
 *         runs plain fp32)
 *   fp16  fp16 storage (the trainer's loss scaler runs)
 *   bf16  bf16 storage
 *   auto  (or "") bf16 on a GPU of compute capability 8.0 or newer, else fp32
 * Master weights, gradients of the weights, optimizer state and loss values stay fp32
 * in every mode. */
#ifndef MRCNN_PRECISION_H
#define MRCNN_PRECISION_H

#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when name is one of the modes above. */
int mrcnn_precision_valid(const char *name);
/* Applies name to be and returns the mode chosen ("fp32", "tf32", "fp16" or "bf16";
 * auto resolved). Fails naming the value when it is not a mode. */
const char *mrcnn_precision_apply(mrcnn_backend *be, const char *name);

#ifdef __cplusplus
}
#endif
#endif
