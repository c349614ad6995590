/* Transposed conv 2x2 stride 2 (the mask head's upsampler). Its output windows do
 * not overlap, so it is one GEMM Z (M, 4K) = X (M, C) Wp^T plus a scatter of the
 * four (r, s) slices, with Wp the filter reordered to (r, s, k, c) rows so that
 * each slice is K contiguous values. */
#include <stdlib.h>
#include <string.h>

#include "ops_real.h"

static void check_args(const char *op, int n, int h, int w, int c, int k, const void *x, const void *wt) {
    MRCNN_CHECK(n > 0 && h > 0 && w > 0 && c > 0 && k > 0,
                "%s: sizes (N, H, W, C, K) = (%d, %d, %d, %d, %d) must be positive", op, n, h, w, c, k);
    MRCNN_CHECK(x != NULL && wt != NULL, "%s: NULL input or filter", op);
}

/* wt (K, 2, 2, C) -> wp (4, K, C). */
static real *permute_filter(int c, int k, const real *wt) {
    real *wp = MRCNN_MALLOC(sizeof(real) * 4 * (size_t)k * c, "deconv2x2 permuted filter");
    for (int o = 0; o < k; o++)
        for (int rs = 0; rs < 4; rs++)
            memcpy(wp + ((size_t)rs * k + o) * c, wt + ((size_t)o * 4 + rs) * c, sizeof(real) * (size_t)c);
    return wp;
}

void MRCNN_OP(deconv2x2_forward)(int n, int h, int w, int c, int k, const real *x, const real *wt, const real *b, real *y) {
    check_args("deconv2x2_forward", n, h, w, c, k, x, wt);
    MRCNN_CHECK(y != NULL, "deconv2x2_forward: NULL output");
    const int64_t m = (int64_t)n * h * w;
    real *wp = permute_filter(c, k, wt);
    real *z = MRCNN_MALLOC(sizeof(real) * (size_t)m * 4 * k, "deconv2x2 forward products");
    MRCNN_OP(gemm)(0, 1, (int)m, 4 * k, c, 1, x, c, wp, c, 0, z, 4 * k);
#pragma omp parallel for schedule(static) if (m * 4 * k >= OPS_OMP_MIN)
    for (int64_t i = 0; i < m; i++) {
        int64_t ni = i / ((int64_t)h * w);
        int ii = (int)(i / w % h), jj = (int)(i % w);
        for (int rs = 0; rs < 4; rs++) {
            real *dst = y + ((ni * 2 * h + 2 * ii + rs / 2) * 2 * w + 2 * jj + rs % 2) * k;
            const real *src = z + (i * 4 + rs) * k;
            if (b)
                for (int o = 0; o < k; o++) dst[o] = src[o] + b[o];
            else
                memcpy(dst, src, sizeof(real) * (size_t)k);
        }
    }
    free(z);
    free(wp);
}

void MRCNN_OP(deconv2x2_backward)(int n, int h, int w, int c, int k, const real *x, const real *wt, const real *dy,
                              real *dx, real *dw, real *db) {
    check_args("deconv2x2_backward", n, h, w, c, k, x, wt);
    MRCNN_CHECK(dy != NULL, "deconv2x2_backward: NULL output gradient");
    const int64_t m = (int64_t)n * h * w;
    if (db) MRCNN_OP(ops_bias_grad)(m * 4, k, dy, db);
    if (!dx && !dw) return;
    real *dz = MRCNN_MALLOC(sizeof(real) * (size_t)m * 4 * k, "deconv2x2 backward products");
#pragma omp parallel for schedule(static) if (m * 4 * k >= OPS_OMP_MIN)
    for (int64_t i = 0; i < m; i++) {
        int64_t ni = i / ((int64_t)h * w);
        int ii = (int)(i / w % h), jj = (int)(i % w);
        for (int rs = 0; rs < 4; rs++)
            memcpy(dz + (i * 4 + rs) * k, dy + ((ni * 2 * h + 2 * ii + rs / 2) * 2 * w + 2 * jj + rs % 2) * k,
                   sizeof(real) * (size_t)k);
    }
    if (dx) {
        real *wp = permute_filter(c, k, wt);
        MRCNN_OP(gemm)(0, 0, (int)m, c, 4 * k, 1, dz, 4 * k, wp, c, 1, dx, c);
        free(wp);
    }
    if (dw) {
        real *dwp = MRCNN_MALLOC(sizeof(real) * 4 * (size_t)k * c, "deconv2x2 filter gradient");
        MRCNN_OP(gemm)(1, 0, 4 * k, c, (int)m, 1, dz, 4 * k, x, c, 0, dwp, c);
        for (int o = 0; o < k; o++)
            for (int rs = 0; rs < 4; rs++)
                for (int ci = 0; ci < c; ci++) dw[((size_t)o * 4 + rs) * c + ci] += dwp[((size_t)rs * k + o) * c + ci];
        free(dwp);
    }
    free(dz);
}
