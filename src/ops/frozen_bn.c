/* Frozen batch-norm at run time (when it is not folded into the conv before it). */
#include "ops_real.h"

void mrcnn_frozen_bn_forward(int64_t m, int c, const real *x, const real *scale, const real *shift, real *y) {
    MRCNN_CHECK(m >= 0 && c > 0, "frozen_bn_forward: rows %lld must not be negative and channels %d must be positive",
                (long long)m, c);
    MRCNN_CHECK(x && scale && shift && y, "frozen_bn_forward: NULL argument");
#pragma omp parallel for schedule(static) if (m * c >= OPS_OMP_MIN)
    for (int64_t i = 0; i < m; i++)
        for (int j = 0; j < c; j++) y[i * c + j] = x[i * c + j] * scale[j] + shift[j];
}

void mrcnn_frozen_bn_backward(int64_t m, int c, const real *dy, const real *scale, real *dx) {
    MRCNN_CHECK(m >= 0 && c > 0, "frozen_bn_backward: rows %lld must not be negative and channels %d must be positive",
                (long long)m, c);
    MRCNN_CHECK(dy && scale && dx, "frozen_bn_backward: NULL argument");
#pragma omp parallel for schedule(static) if (m * c >= OPS_OMP_MIN)
    for (int64_t i = 0; i < m; i++)
        for (int j = 0; j < c; j++) dx[i * c + j] += dy[i * c + j] * scale[j];
}
