/* Fully connected layer: y (N, out) = x (N, in) w^T + b, three GEMMs backward. */
#include "ops_real.h"

static void check_args(const char *op, int n, int in, int out, const void *x, const void *w) {
    MRCNN_CHECK(n > 0 && in > 0 && out > 0, "%s: sizes (N, in, out) = (%d, %d, %d) must be positive", op, n, in, out);
    MRCNN_CHECK(x != NULL && w != NULL, "%s: NULL input or weight", op);
}

void MRCNN_OP(linear_forward)(int n, int in, int out, const real *x, const real *w, const real *b, real *y) {
    check_args("linear_forward", n, in, out, x, w);
    MRCNN_CHECK(y != NULL, "linear_forward: NULL output");
    MRCNN_OP(gemm)(0, 1, n, out, in, 1, x, in, w, in, 0, y, out);
    if (b) MRCNN_OP(ops_bias_add)(n, out, b, y);
}

void MRCNN_OP(linear_backward)(int n, int in, int out, const real *x, const real *w, const real *dy, real *dx, real *dw,
                           real *db) {
    check_args("linear_backward", n, in, out, x, w);
    MRCNN_CHECK(dy != NULL, "linear_backward: NULL output gradient");
    if (dx) MRCNN_OP(gemm)(0, 0, n, in, out, 1, dy, out, w, in, 1, dx, in);
    if (dw) MRCNN_OP(gemm)(1, 0, out, in, n, 1, dy, out, x, in, 1, dw, in);
    if (db) MRCNN_OP(ops_bias_grad)(n, out, dy, db);
}
