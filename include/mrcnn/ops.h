/* CPU reference ops: the oracle every other backend is tested against.
 *
 * Layout everywhere: activations NHWC, conv filters KRSC (K out, R x S kernel,
 * C in), linear weights (out, in). Each op is a forward and a backward.
 * Backward outputs ACCUMULATE (+=) into their gradient buffers, like cuDNN with
 * beta = 1: a weight used at several places (the RPN head over five levels)
 * gathers its gradient without extra buffers. Callers zero gradients first.
 *
 * The ops are compiled twice from one source: with real = float (mrcnn_<op>) and
 * with real = double (mrcnn_<op>_f64), so that finite-difference gradient tests
 * run in double precision on the very code that trains in float. The sources name each
 * op MRCNN_OP(<op>), which src/ops/ops_real.h spells for the build's type. */
#ifndef MRCNN_OPS_H
#define MRCNN_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Shapes of a 2-D convolution; output size follows PyTorch's rule. */
typedef struct mrcnn_conv2d_desc {
    int n, h, w, c;    // input (N, H, W, C)
    int k, r, s;       // filter (K, R, S, C)
    int stride_h, stride_w;
    int pad_h, pad_w;
    int dil_h, dil_w;
} mrcnn_conv2d_desc;

/* Fills the common square case: kernel ks, stride, pad, dilation 1. */
mrcnn_conv2d_desc mrcnn_conv2d_desc_make(int n, int h, int w, int c, int k, int ks,
                                         int stride, int pad);
int mrcnn_conv2d_out_h(const mrcnn_conv2d_desc *d);
int mrcnn_conv2d_out_w(const mrcnn_conv2d_desc *d);
/* Fails with a message naming the bad field. */
void mrcnn_conv2d_desc_check(const mrcnn_conv2d_desc *d);

typedef struct mrcnn_pool2d_desc {
    int n, h, w, c; // input (N, H, W, C)
    int kernel, stride, pad;
} mrcnn_pool2d_desc;
int mrcnn_pool2d_out_h(const mrcnn_pool2d_desc *d);
int mrcnn_pool2d_out_w(const mrcnn_pool2d_desc *d);

/* Folds frozen batch-norm (gamma, beta, mean, var, eps) into the conv before it:
 * w (K, RSC) scaled per output channel in place, b (K) = beta - mean * scale
 * (+ scale * old bias when had_bias). Float only: done once at load. */
void mrcnn_frozen_bn_fold(float *w, float *b, int had_bias, int k, int64_t rsc,
                          const float *gamma, const float *beta, const float *mean,
                          const float *var, float eps);

#define MRCNN_REAL float
#define MRCNN_OP(name) mrcnn_##name
#include "mrcnn/ops_decl.inc"
#undef MRCNN_REAL
#undef MRCNN_OP

#define MRCNN_REAL double
#define MRCNN_OP(name) mrcnn_##name##_f64
#include "mrcnn/ops_decl.inc"
#undef MRCNN_REAL
#undef MRCNN_OP

#ifdef __cplusplus
}
#endif
#endif
