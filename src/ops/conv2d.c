/* conv2d as GEMM: NHWC im2col per block of output rows, then one GEMM against the
 * KRSC filter seen as (K, R*S*C). A 1x1 stride-1 conv skips im2col: NHWC input
 * already is the (N*H*W, C) column matrix.
 *
 * Threads: with enough blocks, each OpenMP thread takes whole blocks and runs
 * im2col, GEMM and col2im on its own block (single-threaded GEMM), so a block is
 * produced and consumed in one core's cache and threads never wait on each other
 * between the phases. Small feature maps (few blocks) instead run the blocks in
 * sequence with each phase split across the threads (MRCNN_OP(gemm) splits C). */
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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

/* Threads for the per-thread block path, or 1 for the shared path. */
static int block_threads(int64_t n_blocks) {
    if (omp_in_parallel()) return 1;
    MRCNN_OP(ops_blas_serial)();
    int nt = omp_get_max_threads();
    return n_blocks >= 2 * (int64_t)nt ? nt : 1;
}

/* Output rows [ib*blk, ib*blk + blk) of the forward. */
static void forward_block(const mrcnn_conv2d_desc *d, const real *x, const real *w, const real *b, real *y, int64_t ib,
                          int64_t blk, real *col) {
    const int Q = mrcnn_conv2d_out_w(d), K = d->k, rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    int64_t r0 = ib * blk, r1 = r0 + blk < rows ? r0 + blk : rows;
    int mb = (int)((r1 - r0) * Q);
    real *yb = y + r0 * Q * K;
    MRCNN_OP(conv2d_im2col)(d, x, r0, r1, col);
    MRCNN_OP(gemm)(0, 1, mb, K, rsc, 1, col, rsc, w, rsc, 0, yb, K);
    if (b) MRCNN_OP(ops_bias_add)(mb, K, b, yb);
}

void MRCNN_OP(conv2d_forward)(const mrcnn_conv2d_desc *d, const real *x, const real *w, const real *b, real *y) {
    check_args(d, "conv2d_forward", x, w, y);
    const int Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    if (MRCNN_OP(conv2d_is_pointwise)(d)) {
        MRCNN_OP(gemm)(0, 1, (int)(rows * Q), K, d->c, 1, x, d->c, w, d->c, 0, y, K);
        if (b) MRCNN_OP(ops_bias_add)(rows * Q, K, b, y);
        return;
    }
    const int64_t blk = MRCNN_OP(conv2d_block_rows)(d), n_blocks = (rows + blk - 1) / blk;
    const int nt = block_threads(n_blocks);
    /* No `parallel if (0)` for the shared path: regions nested in even an inactive
     * one get fresh threads from libgomp each time, which cost 4x here. */
    if (nt == 1) {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_forward column buffer");
        for (int64_t ib = 0; ib < n_blocks; ib++) forward_block(d, x, w, b, y, ib, blk, col);
        free(col);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_forward column buffer");
        /* Dynamic: on a shared machine a descheduled thread should not hold up the rest. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t ib = 0; ib < n_blocks; ib++) forward_block(d, x, w, b, y, ib, blk, col);
        free(col);
    }
}

/* Per-thread path: work is split over chunks of input rows (never crossing an
 * image), so each dx row has one writer. A chunk recomputes the few output rows
 * it shares with its neighbours instead of synchronizing with them. */
void MRCNN_OP(conv2d_backward_data)(const mrcnn_conv2d_desc *d, const real *dy, const real *w, real *dx) {
    check_args(d, "conv2d_backward_data", dy, w, dx);
    const int P = mrcnn_conv2d_out_h(d), Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * P;
    if (MRCNN_OP(conv2d_is_pointwise)(d)) {
        MRCNN_OP(gemm)(0, 0, (int)(rows * Q), d->c, K, 1, dy, K, w, d->c, 1, dx, d->c);
        return;
    }
    const int64_t blk = MRCNN_OP(conv2d_block_rows)(d);
    const int reach = (d->r - 1) * d->dil_h; // input rows one output row's window spans, minus one
    int64_t chunk_h = blk * d->stride_h - reach;
    if (chunk_h < 1) chunk_h = 1;
    const int64_t chunks_per_image = (d->h + chunk_h - 1) / chunk_h, n_chunks = d->n * chunks_per_image;
    const int nt = block_threads(n_chunks);
    if (nt == 1) {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_backward_data column buffer");
        for (int64_t r0 = 0; r0 < rows; r0 += blk) {
            int64_t r1 = r0 + blk < rows ? r0 + blk : rows;
            MRCNN_OP(gemm)(0, 0, (int)((r1 - r0) * Q), rsc, K, 1, dy + r0 * Q * K, K, w, rsc, 0, col, rsc);
            MRCNN_OP(conv2d_col2im_add)(d, col, r0, r1, 0, (int64_t)d->n * d->h, dx);
        }
        free(col);
        return;
    }
    /* Output rows feeding input rows [ha, hb): p with p*sh - pad + r*dil in [ha, hb). */
    const int64_t cap = (chunk_h - 1 + reach) / d->stride_h + 2;
#pragma omp parallel num_threads(nt)
    {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(cap * Q) * rsc, "conv2d_backward_data column buffer");
#pragma omp for schedule(dynamic, 1)
        for (int64_t ic = 0; ic < n_chunks; ic++) {
            int64_t n = ic / chunks_per_image, ha = ic % chunks_per_image * chunk_h;
            int64_t hb = ha + chunk_h < d->h ? ha + chunk_h : d->h;
            int64_t lo = ha + d->pad_h - reach, hi = hb - 1 + d->pad_h;
            int64_t p0 = lo <= 0 ? 0 : (lo + d->stride_h - 1) / d->stride_h, p1 = hi < 0 ? -1 : hi / d->stride_h;
            if (p1 > P - 1) p1 = P - 1;
            if (p1 < p0) continue;
            int64_t r0 = n * P + p0, r1 = n * P + p1 + 1;
            MRCNN_CHECK(r1 - r0 <= cap, "conv2d_backward_data: chunk needs %lld output rows, buffer holds %lld",
                        (long long)(r1 - r0), (long long)cap);
            MRCNN_OP(gemm)(0, 0, (int)((r1 - r0) * Q), rsc, K, 1, dy + r0 * Q * K, K, w, rsc, 0, col, rsc);
            MRCNN_OP(conv2d_col2im_add)(d, col, r0, r1, n * d->h + ha, n * d->h + hb, dx);
        }
        free(col);
    }
}

/* dw (K, R*S*C) += the filter gradient of output rows [ib*blk, ib*blk + blk). */
static void filter_block(const mrcnn_conv2d_desc *d, const real *x, const real *dy, real *dw, int64_t ib, int64_t blk,
                         real *col) {
    const int Q = mrcnn_conv2d_out_w(d), K = d->k, rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    int64_t r0 = ib * blk, r1 = r0 + blk < rows ? r0 + blk : rows;
    MRCNN_OP(conv2d_im2col)(d, x, r0, r1, col);
    MRCNN_OP(gemm)(1, 0, K, rsc, (int)((r1 - r0) * Q), 1, dy + r0 * Q * K, K, col, rsc, 1, dw, rsc);
}

/* Per-thread path: each thread sums its blocks into a private dw, and the partial
 * sums are added in thread order (static schedule: reproducible for a fixed
 * thread count). */
void MRCNN_OP(conv2d_backward_filter)(const mrcnn_conv2d_desc *d, const real *x, const real *dy, real *dw, real *db) {
    check_args(d, "conv2d_backward_filter", x, dy, dw);
    const int Q = mrcnn_conv2d_out_w(d), K = d->k;
    const int rsc = d->r * d->s * d->c;
    const int64_t rows = (int64_t)d->n * mrcnn_conv2d_out_h(d);
    if (db) MRCNN_OP(ops_bias_grad)(rows * Q, K, dy, db);
    if (MRCNN_OP(conv2d_is_pointwise)(d)) {
        MRCNN_OP(gemm)(1, 0, K, d->c, (int)(rows * Q), 1, dy, K, x, d->c, 1, dw, d->c);
        return;
    }
    const int64_t blk = MRCNN_OP(conv2d_block_rows)(d), n_blocks = (rows + blk - 1) / blk;
    const int nt = block_threads(n_blocks);
    const int64_t nw = (int64_t)K * rsc;
    if (nt == 1) {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_backward_filter column buffer");
        for (int64_t ib = 0; ib < n_blocks; ib++) filter_block(d, x, dy, dw, ib, blk, col);
        free(col);
        return;
    }
    real *part = MRCNN_CALLOC((size_t)nt * nw, sizeof(real), "conv2d_backward_filter partial sums");
#pragma omp parallel num_threads(nt)
    {
        real *col = MRCNN_MALLOC(sizeof(real) * (size_t)(blk * Q) * rsc, "conv2d_backward_filter column buffer");
        real *acc = part + (size_t)omp_get_thread_num() * nw;
#pragma omp for schedule(static)
        for (int64_t ib = 0; ib < n_blocks; ib++) filter_block(d, x, dy, acc, ib, blk, col);
        free(col);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nw; i++) {
            real s = 0;
            for (int t = 0; t < nt; t++) s += part[(size_t)t * nw + i];
            dw[i] += s;
        }
    }
    free(part);
}
