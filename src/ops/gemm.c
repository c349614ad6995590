/* Row-major GEMM through OpenBLAS, with the argument checks cblas leaves to xerbla. */
#include "ops_real.h"

void OP(gemm)(int trans_a, int trans_b, int m, int n, int k, real alpha, const real *a, int lda,
              const real *b, int ldb, real beta, real *c, int ldc) {
    MRCNN_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: sizes (m, n, k) = (%d, %d, %d) must not be negative", m, n, k);
    int a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    MRCNN_CHECK(lda >= (a_cols > 1 ? a_cols : 1), "gemm: lda %d < %d columns of A%s", lda, a_cols, trans_a ? " (transposed)" : "");
    MRCNN_CHECK(ldb >= (b_cols > 1 ? b_cols : 1), "gemm: ldb %d < %d columns of B%s", ldb, b_cols, trans_b ? " (transposed)" : "");
    MRCNN_CHECK(ldc >= (n > 1 ? n : 1), "gemm: ldc %d < n %d", ldc, n);
    if (m == 0 || n == 0) return;
    MRCNN_CHECK(c != NULL && (k == 0 || (a != NULL && b != NULL)), "gemm: NULL matrix pointer (a %p, b %p, c %p)",
                (const void *)a, (const void *)b, (void *)c);
    OPS_CBLAS_GEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                   alpha, a, lda, b, ldb, beta, c, ldc);
}
