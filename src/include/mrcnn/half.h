/* fp16 and bf16 conversions (round to nearest even; NaN and Inf kept), and the CPU
 * "rounded storage" mode: values stored as fp32 but rounded to fp16/bf16 after
 * every op, so mixed-precision behaviour can be tested without a GPU. */
#ifndef MRCNN_HALF_H
#define MRCNN_HALF_H

#include <stddef.h>
#include <stdint.h>
#include "mrcnn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

uint16_t mrcnn_f32_to_f16(float x);
float mrcnn_f16_to_f32(uint16_t h);
uint16_t mrcnn_f32_to_bf16(float x);
float mrcnn_bf16_to_f32(uint16_t h);
/* x rounded to the nearest value of dtype (F16 or BF16); F32 returns x. */
float mrcnn_round_to(float x, mrcnn_dtype dtype);
/* In place over n floats. */
void mrcnn_round_array(float *x, size_t n, mrcnn_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
