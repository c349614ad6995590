/* conv2d as GEMM: NHWC im2col per block of output rows, then one GEMM against the
 * KRSC filter seen as (K, R*S*C). A 1x1 stride-1 conv skips im2col: NHWC input
 * already is the (N*H*W, C) column matrix. */
#include <limits.h>
#include <stdlib.h>

#include "ops_real.h"

static void check_args(const mrcnn_conv2d_desc *d, const char *op, const void *a, const void *b, const void *c) {
    MRCNN_CHECK(d != NULL, "%s: NULL descriptor", op);
    mrcnn_conv2d_desc_check(d);
    MRCNN_CHECK(a != NULL && b != NULL && c != NULL, "%s: NULL tensor argument", op);
    int64_t m = (int64_t)d->n * mrcnn_conv2d_out_h(d) * mrcnn_conv2d_out_w(d);
    int64_t in = (int64_t)d->n * d->h * d->w;
    MRCNN_CHECK(m <= INT_MAX && in <= INT_MAX && (int64_t)d->r * d->s * d->c <= INT_MAX,
                "%s: %lld output / %lld input pixels exceed the GEMM's int range", op, (long long)m, (long long)in);
}

void OP(conv2d_forward)(const mrcnn_conv2d_desc *d, const real *x, const real *w, const real *b, real *y) {
    check_args(d, "conv2d_forward", x, w, y);
    const int Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    if (OP(conv2d_is_pointwise)(d)) {
        OP(gemm)(0, 1, (int)(rows * Q), K, d->c, 1, x, d->c, w, d->c, 0, y, K);
        if (b) OP(ops_bias_add)(rows * Q, K, b, y);
        return;
    }
    const int64_t blk = OP(conv2d_block_rows)(d);
    real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_forward column buffer");
    for (int64_t r0 = 0; r0 < rows; r0 += blk) {
        int64_t r1 = r0 + blk < rows ? r0 + blk : rows;
        int mb = (int)((r1 - r0) * Q);
        OP(conv2d_im2col)(d, x, r0, r1, col);
        real *yb = y + r0 * Q * K;
        OP(gemm)(0, 1, mb, K, rsc, 1, col, rsc, w, rsc, 0, yb, K);
        if (b) OP(ops_bias_add)(mb, K, b, yb);
    }
    free(col);
}

void OP(conv2d_backward_data)(const mrcnn_conv2d_desc *d, const real *dy, const real *w, real *dx) {
    check_args(d, "conv2d_backward_data", dy, w, dx);
    const int Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    if (OP(conv2d_is_pointwise)(d)) {
        OP(gemm)(0, 0, (int)(rows * Q), d->c, K, 1, dy, K, w, d->c, 1, dx, d->c);
        return;
    }
    const int64_t blk = OP(conv2d_block_rows)(d);
    real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_backward_data column buffer");
    for (int64_t r0 = 0; r0 < rows; r0 += blk) {
        int64_t r1 = r0 + blk < rows ? r0 + blk : rows;
        OP(gemm)(0, 0, (int)((r1 - r0) * Q), rsc, K, 1, dy + r0 * Q * K, K, w, rsc, 0, col, rsc);
        OP(conv2d_col2im_add)(d, col, r0, r1, dx);
    }
    free(col);
}

void OP(conv2d_backward_filter)(const mrcnn_conv2d_desc *d, const real *x, const real *dy, real *dw, real *db) {
    check_args(d, "conv2d_backward_filter", x, dy, dw);
    const int Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    if (db) OP(ops_bias_grad)(rows * Q, K, dy, db);
    if (OP(conv2d_is_pointwise)(d)) {
        OP(gemm)(1, 0, K, d->c, (int)(rows * Q), 1, dy, K, x, d->c, 1, dw, d->c);
        return;
    }
    const int64_t blk = OP(conv2d_block_rows)(d);
    real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_backward_filter column buffer");
    for (int64_t r0 = 0; r0 < rows; r0 += blk) {
        int64_t r1 = r0 + blk < rows ? r0 + blk : rows;
        OP(conv2d_im2col)(d, x, r0, r1, col);
        OP(gemm)(1, 0, K, rsc, (int)((r1 - r0) * Q), 1, dy + r0 * Q * K, K, col, rsc, 1, dw, rsc);
    }
    free(col);
}
