/* ReLU; `x < 0 ? 0 : x` rather than `x > 0 ? x : 0` so that a NaN passes through
 * to the loss scaler's non-finite check instead of being silently zeroed. */
#include "ops_real.h"

void MRCNN_OP(relu_forward)(int64_t n, const real *x, real *y) {
    MRCNN_CHECK(n >= 0, "relu_forward: count %lld is negative", (long long)n);
    MRCNN_CHECK(n == 0 || (x && y), "relu_forward: NULL argument");
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i];
}

/* dx is written, not added to: each caller's dx is a fresh buffer that only this op
 * fills, so the accumulate form cost a zeroing pass and a read of dx besides. */
void MRCNN_OP(relu_backward)(int64_t n, const real *y, const real *dy, real *dx) {
    MRCNN_CHECK(n >= 0, "relu_backward: count %lld is negative", (long long)n);
    MRCNN_CHECK(n == 0 || (y && dy && dx), "relu_backward: NULL argument");
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0;
}
