/* Elementwise add (residual connections). */
#include "ops_real.h"

void MRCNN_OP(add_forward)(int64_t n, const real *a, const real *b, real *y) {
    MRCNN_CHECK(n >= 0, "add_forward: count %lld is negative", (long long)n);
    MRCNN_CHECK(n == 0 || (a && b && y), "add_forward: NULL argument");
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void MRCNN_OP(add_backward)(int64_t n, const real *dy, real *da, real *db) {
    MRCNN_CHECK(n >= 0, "add_backward: count %lld is negative", (long long)n);
    MRCNN_CHECK(n == 0 || dy, "add_backward: NULL output gradient");
    if (da) {
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
        for (int64_t i = 0; i < n; i++) da[i] += dy[i];
    }
    if (db) {
#pragma omp parallel for schedule(static) if (n >= OPS_OMP_MIN)
        for (int64_t i = 0; i < n; i++) db[i] += dy[i];
    }
}
