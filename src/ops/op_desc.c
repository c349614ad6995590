/* Shape helpers of the ops (ops.h) that are not templated on `real`, and the
 * frozen-BN fold done once at load: float build only (src/ops is compiled twice). */
#ifndef MRCNN_OPS_F64
#include "mrcnn/check.h"
#include "mrcnn/ops.h"

#include <math.h>

mrcnn_conv2d_desc mrcnn_conv2d_desc_make(int n, int h, int w, int c, int k, int ks, int stride, int pad) {
    mrcnn_conv2d_desc d = {n, h, w, c, k, ks, ks, stride, stride, pad, pad, 1, 1};
    return d;
}

int mrcnn_conv2d_out_h(const mrcnn_conv2d_desc *d) {
    return (d->h + 2 * d->pad_h - d->dil_h * (d->r - 1) - 1) / d->stride_h + 1;
}

int mrcnn_conv2d_out_w(const mrcnn_conv2d_desc *d) {
    return (d->w + 2 * d->pad_w - d->dil_w * (d->s - 1) - 1) / d->stride_w + 1;
}

void mrcnn_conv2d_desc_check(const mrcnn_conv2d_desc *d) {
    MRCNN_CHECK(d->n > 0 && d->h > 0 && d->w > 0 && d->c > 0, "conv2d: input (N, H, W, C) = (%d, %d, %d, %d) must be positive",
                d->n, d->h, d->w, d->c);
    MRCNN_CHECK(d->k > 0 && d->r > 0 && d->s > 0, "conv2d: filter (K, R, S) = (%d, %d, %d) must be positive", d->k, d->r, d->s);
    MRCNN_CHECK(d->stride_h > 0 && d->stride_w > 0, "conv2d: stride (%d, %d) must be positive", d->stride_h, d->stride_w);
    MRCNN_CHECK(d->dil_h > 0 && d->dil_w > 0, "conv2d: dilation (%d, %d) must be positive", d->dil_h, d->dil_w);
    MRCNN_CHECK(d->pad_h >= 0 && d->pad_w >= 0, "conv2d: padding (%d, %d) must not be negative", d->pad_h, d->pad_w);
    MRCNN_CHECK(d->h + 2 * d->pad_h >= d->dil_h * (d->r - 1) + 1 && d->w + 2 * d->pad_w >= d->dil_w * (d->s - 1) + 1,
                "conv2d: padded input %dx%d smaller than the dilated %dx%d filter", d->h + 2 * d->pad_h,
                d->w + 2 * d->pad_w, d->dil_h * (d->r - 1) + 1, d->dil_w * (d->s - 1) + 1);
}

int mrcnn_pool2d_out_h(const mrcnn_pool2d_desc *d) { return (d->h + 2 * d->pad - d->kernel) / d->stride + 1; }
int mrcnn_pool2d_out_w(const mrcnn_pool2d_desc *d) { return (d->w + 2 * d->pad - d->kernel) / d->stride + 1; }

void mrcnn_frozen_bn_fold(float *w, float *b, int had_bias, int k, int64_t rsc, const float *gamma,
                          const float *beta, const float *mean, const float *var, float eps) {
    for (int o = 0; o < k; o++) {
        MRCNN_CHECK(var[o] + eps > 0, "frozen_bn_fold: channel %d has var + eps = %g <= 0", o, (double)(var[o] + eps));
        /* torchvision's FrozenBatchNorm2d: scale = w * rsqrt(var + eps). */
        float scale = gamma[o] / sqrtf(var[o] + eps);
        for (int64_t i = 0; i < rsc; i++) w[o * rsc + i] *= scale;
        float old = had_bias ? b[o] : 0.0f;
        b[o] = beta[o] - mean[o] * scale + old * scale;
    }
}
#endif
