/* Per-channel bias over the rows of a (M, K) matrix, shared by conv, deconv and linear. */
#include <omp.h>
#include <stdlib.h>

#include "ops_real.h"

void MRCNN_OP(ops_bias_add)(int64_t m, int k, const real *b, real *y) {
#pragma omp parallel for schedule(static) if (m * k >= OPS_OMP_MIN)
    for (int64_t i = 0; i < m; i++)
        for (int c = 0; c < k; c++) y[i * k + c] += b[c];
}

/* Per-thread partial sums in double, combined in thread order: the float result
 * keeps its precision over millions of rows and is reproducible for a fixed thread
 * count. */
void MRCNN_OP(ops_bias_grad)(int64_t m, int k, const real *dy, real *db) {
    int nt = m * k >= OPS_OMP_MIN ? omp_get_max_threads() : 1;
    double *part = MRCNN_CALLOC((size_t)nt * k, sizeof(double), "bias gradient partial sums");
#pragma omp parallel num_threads(nt)
    {
        double *acc = part + (size_t)omp_get_thread_num() * k;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++)
            for (int c = 0; c < k; c++) acc[c] += dy[i * k + c];
    }
    for (int c = 0; c < k; c++) {
        double s = 0;
        for (int t = 0; t < nt; t++) s += part[(size_t)t * k + c];
        db[c] += (real)s;
    }
    free(part);
}
