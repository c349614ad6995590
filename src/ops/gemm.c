/* Row-major GEMM through OpenBLAS, with the argument checks cblas leaves to xerbla.
 *
 * Threads: OpenMP splits C into row (or column) slabs and each thread runs a
 * single-threaded OpenBLAS call on its slab. OpenBLAS's own pthread pool would
 * otherwise spin (for up to 2^28 cycles) beside the OpenMP threads of im2col and
 * the elementwise ops, and the two pools together ran conv2d at a quarter of the
 * GEMM rate on 2 cores. One pool (OpenMP) also nests safely: a gemm called
 * inside a parallel region runs on its caller's thread. */
#include <omp.h>

#include "ops_real.h"

/* Below this many multiply-adds one thread is faster than forking. */
#define GEMM_SPLIT_MIN_MACS (1 << 21)
/* Slab boundaries on multiples of this, so that OpenBLAS kernels see whole tiles. */
#define GEMM_SPLIT_ALIGN 16

static void blas(int trans_a, int trans_b, int m, int n, int k, real alpha, const real *a, int lda, const real *b,
                 int ldb, real beta, real *c, int ldc) {
    OPS_CBLAS_GEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                   alpha, a, lda, b, ldb, beta, c, ldc);
}

void MRCNN_OP(ops_blas_serial)(void) {
    if (!omp_in_parallel() && openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* At load as well: the first gemm may come from inside someone's parallel region,
 * where switching OpenBLAS's pool is not safe. */
__attribute__((constructor)) static void blas_serial_at_load(void) { MRCNN_OP(ops_blas_serial)(); }

void MRCNN_OP(gemm)(int trans_a, int trans_b, int m, int n, int k, real alpha, const real *a, int lda, const real *b,
                int ldb, real beta, real *c, int ldc) {
    MRCNN_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: sizes (m, n, k) = (%d, %d, %d) must not be negative", m, n, k);
    int a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    MRCNN_CHECK(lda >= (a_cols > 1 ? a_cols : 1), "gemm: lda %d < %d columns of A%s", lda, a_cols, trans_a ? " (transposed)" : "");
    MRCNN_CHECK(ldb >= (b_cols > 1 ? b_cols : 1), "gemm: ldb %d < %d columns of B%s", ldb, b_cols, trans_b ? " (transposed)" : "");
    MRCNN_CHECK(ldc >= (n > 1 ? n : 1), "gemm: ldc %d < n %d", ldc, n);
    if (m == 0 || n == 0) return;
    MRCNN_CHECK(c != NULL && (k == 0 || (a != NULL && b != NULL)), "gemm: NULL matrix pointer (a %p, b %p, c %p)",
                (const void *)a, (const void *)b, (void *)c);
    MRCNN_OP(ops_blas_serial)();
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int split_m = m >= n;
    const int extent = split_m ? m : n;
    if ((double)m * n * k < GEMM_SPLIT_MIN_MACS) nt = 1;
    if (nt > extent / GEMM_SPLIT_ALIGN) nt = extent / GEMM_SPLIT_ALIGN;
    if (nt <= 1) {
        blas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), nth = omp_get_num_threads();
        int tiles = (extent + GEMM_SPLIT_ALIGN - 1) / GEMM_SPLIT_ALIGN;
        int lo = (int)((int64_t)tiles * t / nth) * GEMM_SPLIT_ALIGN;
        int hi = (int)((int64_t)tiles * (t + 1) / nth) * GEMM_SPLIT_ALIGN;
        if (hi > extent) hi = extent;
        if (hi > lo) {
            if (split_m)
                blas(trans_a, trans_b, hi - lo, n, k, alpha, trans_a ? a + lo : a + (int64_t)lo * lda, lda, b, ldb, beta,
                     c + (int64_t)lo * ldc, ldc);
            else
                blas(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, trans_b ? b + (int64_t)lo * ldb : b + lo, ldb, beta,
                     c + lo, ldc);
        }
    }
}
