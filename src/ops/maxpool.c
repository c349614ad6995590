/* Max-pool, NHWC. Padding counts as -inf; the backward routes each gradient to the
 * first maximum in (r, s) scan order, as PyTorch does; a NaN wins like in PyTorch. */
#include <math.h>

#include "ops_real.h"

/* Channels per backward task: tasks own disjoint channels of one image, so the
 * overlapping 3x3 s2 windows need no atomics. */
#define POOL_CHANNEL_CHUNK 16

static void check_desc(const char *op, const mrcnn_pool2d_desc *d) {
    MRCNN_CHECK(d != NULL, "%s: NULL descriptor", op);
    MRCNN_CHECK(d->n > 0 && d->h > 0 && d->w > 0 && d->c > 0, "%s: input (N, H, W, C) = (%d, %d, %d, %d) must be positive", op,
                d->n, d->h, d->w, d->c);
    MRCNN_CHECK(d->kernel > 0 && d->stride > 0, "%s: kernel %d and stride %d must be positive", op, d->kernel, d->stride);
    MRCNN_CHECK(d->pad >= 0 && 2 * d->pad <= d->kernel, "%s: padding %d must be in [0, kernel/2] (kernel %d)", op, d->pad,
                d->kernel);
    MRCNN_CHECK(d->h + 2 * d->pad >= d->kernel && d->w + 2 * d->pad >= d->kernel,
                "%s: padded input %dx%d smaller than the %dx%d window", op, d->h + 2 * d->pad, d->w + 2 * d->pad, d->kernel,
                d->kernel);
}

static inline int beats(real v, real best) { return v > best || v != v; }

void MRCNN_OP(maxpool2d_forward)(const mrcnn_pool2d_desc *d, const real *x, real *y) {
    check_desc("maxpool2d_forward", d);
    MRCNN_CHECK(x && y, "maxpool2d_forward: NULL argument");
    const int P = mrcnn_pool2d_out_h(d), Q = mrcnn_pool2d_out_w(d), C = d->c;
    const int64_t n_out = (int64_t)d->n * P * Q;
#pragma omp parallel for schedule(static) if (n_out * C * d->kernel >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n_out; i++) {
        int n = (int)(i / ((int64_t)P * Q)), p = (int)(i / Q % P), q = (int)(i % Q);
        real *out = y + i * C;
        for (int c = 0; c < C; c++) out[c] = -INFINITY;
        for (int r = 0; r < d->kernel; r++) {
            int h = p * d->stride - d->pad + r;
            if (h < 0 || h >= d->h) continue;
            for (int s = 0; s < d->kernel; s++) {
                int w = q * d->stride - d->pad + s;
                if (w < 0 || w >= d->w) continue;
                const real *src = x + (((int64_t)n * d->h + h) * d->w + w) * C;
                for (int c = 0; c < C; c++)
                    if (beats(src[c], out[c])) out[c] = src[c];
            }
        }
    }
}

void MRCNN_OP(maxpool2d_backward)(const mrcnn_pool2d_desc *d, const real *x, const real *dy, real *dx) {
    check_desc("maxpool2d_backward", d);
    MRCNN_CHECK(x && dy && dx, "maxpool2d_backward: NULL argument");
    const int P = mrcnn_pool2d_out_h(d), Q = mrcnn_pool2d_out_w(d), C = d->c;
    const int chunks = (C + POOL_CHANNEL_CHUNK - 1) / POOL_CHANNEL_CHUNK;
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)d->n * P * Q * C * d->kernel >= OPS_OMP_MIN)
    for (int n = 0; n < d->n; n++) {
        for (int ch = 0; ch < chunks; ch++) {
            int c0 = ch * POOL_CHANNEL_CHUNK, c1 = c0 + POOL_CHANNEL_CHUNK < C ? c0 + POOL_CHANNEL_CHUNK : C;
            const real *img = x + (int64_t)n * d->h * d->w * C;
            real *dimg = dx + (int64_t)n * d->h * d->w * C;
            for (int p = 0; p < P; p++) {
                for (int q = 0; q < Q; q++) {
                    const real *g = dy + (((int64_t)n * P + p) * Q + q) * C;
                    for (int c = c0; c < c1; c++) {
                        real best = -INFINITY;
                        int64_t arg = -1;
                        for (int r = 0; r < d->kernel; r++) {
                            int h = p * d->stride - d->pad + r;
                            if (h < 0 || h >= d->h) continue;
                            for (int s = 0; s < d->kernel; s++) {
                                int w = q * d->stride - d->pad + s;
                                if (w < 0 || w >= d->w) continue;
                                int64_t at = ((int64_t)h * d->w + w) * C + c;
                                if (arg < 0 || (best == best && beats(img[at], best))) { // the first NaN stays
                                    best = img[at];
                                    arg = at;
                                }
                            }
                        }
                        if (arg >= 0) dimg[arg] += g[c];
                    }
                }
            }
        }
    }
}
