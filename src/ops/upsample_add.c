/* FPN top-down merge: nearest x2 upsample of the coarser level plus the lateral. */
#include "ops_real.h"

static void check_args(const char *op, int n, int h, int w, int H, int W, int c) {
    MRCNN_CHECK(n > 0 && h > 0 && w > 0 && H > 0 && W > 0 && c > 0,
                "%s: sizes (N, h, w, H, W, C) = (%d, %d, %d, %d, %d, %d) must be positive", op, n, h, w, H, W, c);
}

void MRCNN_OP(upsample_add_forward)(int n, int h, int w, int H, int W, int c, const real *top, const real *lateral, real *y) {
    check_args("upsample_add_forward", n, h, w, H, W, c);
    MRCNN_CHECK(top && lateral && y, "upsample_add_forward: NULL argument");
    const int64_t rows = (int64_t)n * H;
#pragma omp parallel for schedule(static) if (rows * W * c >= OPS_OMP_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t ni = row / H;
        int i = (int)(row % H * h / H);
        for (int j = 0; j < W; j++) {
            int jt = (int)((int64_t)j * w / W);
            const real *t = top + ((ni * h + i) * w + jt) * c;
            const real *l = lateral + (row * W + j) * c;
            real *o = y + (row * W + j) * c;
            for (int k = 0; k < c; k++) o[k] = l[k] + t[k];
        }
    }
}

void MRCNN_OP(upsample_add_backward)(int n, int h, int w, int H, int W, int c, const real *dy, real *dtop, real *dlateral) {
    check_args("upsample_add_backward", n, h, w, H, W, c);
    MRCNN_CHECK(dy != NULL, "upsample_add_backward: NULL output gradient");
    const int64_t total = (int64_t)n * H * W * c;
    if (dlateral) {
#pragma omp parallel for schedule(static) if (total >= OPS_OMP_MIN)
        for (int64_t i = 0; i < total; i++) dlateral[i] += dy[i];
    }
    if (!dtop) return;
    /* Gather per source row: output rows [ceil(i H / h), ceil((i+1) H / h)) read row i. */
    const int64_t src_rows = (int64_t)n * h;
#pragma omp parallel for schedule(static) if (total >= OPS_OMP_MIN)
    for (int64_t sr = 0; sr < src_rows; sr++) {
        int64_t ni = sr / h;
        int i = (int)(sr % h);
        int64_t r0 = ((int64_t)i * H + h - 1) / h, r1 = ((int64_t)(i + 1) * H + h - 1) / h;
        if (r1 > H) r1 = H;
        for (int64_t r = r0; r < r1; r++) {
            for (int j = 0; j < W; j++) {
                int jt = (int)((int64_t)j * w / W);
                real *t = dtop + (sr * w + jt) * c;
                const real *g = dy + ((ni * H + r) * W + j) * c;
                for (int k = 0; k < c; k++) t[k] += g[k];
            }
        }
    }
}
