/* Private to src/ops: one source compiles twice, as float (mrcnn_<op>) and, with
 * -DMRCNN_OPS_F64=1, as double (mrcnn_<op>_f64) for the finite-difference tests.
 * Definitions and calls of a function compiled twice name it MRCNN_OP(<op>), the same
 * macro the declarations in include/mrcnn/ops_decl.inc use, so no list of names has
 * to follow the ops: a public op's definition is checked against its declaration in
 * both builds, and a twice-compiled function written with its plain name is defined
 * by both object sets (a duplicate symbol at link, and tests/ops/test_ops_f64_names.sh). */
#ifndef MRCNN_OPS_REAL_H
#define MRCNN_OPS_REAL_H

#include <cblas.h>
#include <stdint.h>

#include "mrcnn/check.h"
/* They declare the float and the double names side by side. */
#include "mrcnn/ops.h"
#include "mrcnn/roi_align.h"

#ifdef MRCNN_OPS_F64
typedef double real;
#define OPS_CBLAS_GEMM cblas_dgemm
#define OPS_REAL_NAME "f64"
#define MRCNN_OP(name) mrcnn_##name##_f64
#else
typedef float real;
#define OPS_CBLAS_GEMM cblas_sgemm
#define OPS_REAL_NAME "f32"
#define MRCNN_OP(name) mrcnn_##name
#endif

/* Elementwise loops below this size stay on one thread: forking costs more. */
#define OPS_OMP_MIN 32768

/* Shared by conv2d's forward and backward passes (conv2d_im2col.c). Rows of the
 * column matrix are output pixels of rows [row0, row1) of the flattened (N*P)
 * output-row index; each row holds the (R, S, C) patch, zero where padded. */
void MRCNN_OP(conv2d_im2col)(const mrcnn_conv2d_desc *d, const real *x, int64_t row0, int64_t row1,
                         real *col);
/* dx (N, H, W, C) += the patches of col scattered back, for the same row block,
 * restricted to the input rows [in0, in1) of the flattened (N*H) row index. */
void MRCNN_OP(conv2d_col2im_add)(const mrcnn_conv2d_desc *d, const real *col, int64_t row0,
                             int64_t row1, int64_t in0, int64_t in1, real *dx);
/* Rows per block so that one column block stays near a cache-friendly size. */
int64_t MRCNN_OP(conv2d_block_rows)(const mrcnn_conv2d_desc *d);
/* True when the conv is a plain GEMM over the input (1x1, stride 1, no padding). */
int MRCNN_OP(conv2d_is_pointwise)(const mrcnn_conv2d_desc *d);

/* Puts OpenBLAS in single-threaded mode (threads come from OpenMP, gemm.c says why).
 * Must run outside parallel regions, before any gemm called from inside one. */
void MRCNN_OP(ops_blas_serial)(void);
/* y (M, K) += b (K) on every row; db (K) += column sums of dy (M, K). */
void MRCNN_OP(ops_bias_add)(int64_t m, int k, const real *b, real *y);
void MRCNN_OP(ops_bias_grad)(int64_t m, int k, const real *dy, real *db);

#endif
