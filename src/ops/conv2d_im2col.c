/* NHWC im2col / col2im for conv2d, over blocks of output rows so that the column
 * buffer stays bounded (a 800x1344 stem would need 300 MB in one piece). */
#include <stdlib.h>
#include <string.h>

#include "ops_real.h"

/* Column block of about 1 MB of floats: a thread's block is still in its L2/L3
 * when the GEMM packs it; but never fewer than CONV_BLOCK_MIN_PIXELS output pixels,
 * below which the GEMM's M is too short to run near peak. */
#define CONV_BLOCK_ELEMS (256 * 1024)
#define CONV_BLOCK_MIN_PIXELS 192

int MRCNN_OP(conv2d_is_pointwise)(const mrcnn_conv2d_desc *d) {
    return d->r == 1 && d->s == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 && d->pad_w == 0;
}

int64_t MRCNN_OP(conv2d_block_rows)(const mrcnn_conv2d_desc *d) {
    int64_t p = mrcnn_conv2d_out_h(d), q = mrcnn_conv2d_out_w(d);
    int64_t row = q * d->r * d->s * d->c;
    int64_t rows = CONV_BLOCK_ELEMS / (row > 0 ? row : 1);
    int64_t min_rows = (CONV_BLOCK_MIN_PIXELS + q - 1) / q;
    if (rows < min_rows) rows = min_rows;
    if (rows > d->n * p) rows = d->n * p;
    return rows;
}

void MRCNN_OP(conv2d_im2col)(const mrcnn_conv2d_desc *d, const real *x, int64_t row0, int64_t row1, real *col) {
    const int P = mrcnn_conv2d_out_h(d), Q = mrcnn_conv2d_out_w(d);
    const int H = d->h, W = d->w, C = d->c, R = d->r, S = d->s;
    const int64_t rsc = (int64_t)R * S * C, n_pix = (row1 - row0) * Q;
#pragma omp parallel for schedule(static) if (n_pix * rsc >= OPS_OMP_MIN)
    for (int64_t i = 0; i < n_pix; i++) {
        int64_t rr = row0 + i / Q;
        int q = (int)(i % Q), n = (int)(rr / P), p = (int)(rr % P);
        real *dst = col + i * rsc;
        const real *img = x + (int64_t)n * H * W * C;
        int w0 = q * d->stride_w - d->pad_w;
        int w_last = w0 + (S - 1) * d->dil_w;
        for (int r = 0; r < R; r++, dst += (int64_t)S * C) {
            int h = p * d->stride_h - d->pad_h + r * d->dil_h;
            if (h < 0 || h >= H) {
                memset(dst, 0, sizeof(real) * (size_t)S * C);
                continue;
            }
            const real *src = img + ((int64_t)h * W) * C;
            if (d->dil_w == 1 && w0 >= 0 && w_last < W) {
                /* Undilated window fully inside: S pixels are S*C contiguous values. */
                memcpy(dst, src + (int64_t)w0 * C, sizeof(real) * (size_t)S * C);
                continue;
            }
            for (int s = 0; s < S; s++) {
                int w = w0 + s * d->dil_w;
                if (w < 0 || w >= W)
                    memset(dst + (int64_t)s * C, 0, sizeof(real) * (size_t)C);
                else
                    memcpy(dst + (int64_t)s * C, src + (int64_t)w * C, sizeof(real) * (size_t)C);
            }
        }
    }
}

#define COL2IM_MAX_R 64

/* Gather form: each input row is owned by one thread, so no atomics are needed.
 * The (s, q) taps that reach each input column are listed once, as offsets into a
 * column-matrix row, so the inner loops only visit taps that exist (a 7x7 s2
 * window has ~12 of its 49 per pixel). */
void MRCNN_OP(conv2d_col2im_add)(const mrcnn_conv2d_desc *d, const real *col, int64_t row0, int64_t row1, int64_t in0,
                             int64_t in1, real *dx) {
    const int P = mrcnn_conv2d_out_h(d), Q = mrcnn_conv2d_out_w(d);
    const int H = d->h, W = d->w, C = d->c, R = d->r, S = d->s;
    const int sh = d->stride_h, sw = d->stride_w;
    const int64_t rsc = (int64_t)R * S * C;
    MRCNN_CHECK(R <= COL2IM_MAX_R, "conv2d backward data: filter height %d above the supported %d", R, COL2IM_MAX_R);
    int64_t *w_taps = MRCNN_MALLOC(sizeof(int64_t) * (size_t)W * S, "col2im column taps");
    int *w_count = MRCNN_MALLOC(sizeof(int) * (size_t)W, "col2im column tap counts");
    for (int w = 0; w < W; w++) {
        int cnt = 0;
        for (int s = 0; s < S; s++) {
            int wq = w + d->pad_w - s * d->dil_w;
            if (wq < 0 || wq % sw || wq / sw >= Q) continue;
            w_taps[(int64_t)w * S + cnt++] = (int64_t)(wq / sw) * rsc + (int64_t)s * C;
        }
        w_count[w] = cnt;
    }
    for (int n = (int)(row0 / P); n <= (int)((row1 - 1) / P); n++) {
        int pa = (int64_t)n * P < row0 ? (int)(row0 - (int64_t)n * P) : 0;
        int pb = (int64_t)(n + 1) * P > row1 ? (int)(row1 - (int64_t)n * P) : P;
        int h_lo = pa * sh - d->pad_h, h_hi = (pb - 1) * sh - d->pad_h + (R - 1) * d->dil_h;
        if (h_lo < 0) h_lo = 0;
        if (h_hi > H - 1) h_hi = H - 1;
        if (h_lo < in0 - (int64_t)n * H) h_lo = (int)(in0 - (int64_t)n * H);
        if (h_hi > in1 - 1 - (int64_t)n * H) h_hi = (int)(in1 - 1 - (int64_t)n * H);
#pragma omp parallel for schedule(static) if ((int64_t)(h_hi - h_lo + 1) * W * C * R * S >= OPS_OMP_MIN)
        for (int h = h_lo; h <= h_hi; h++) {
            int64_t h_taps[COL2IM_MAX_R];
            int n_h = 0;
            for (int r = 0; r < R; r++) {
                int hp = h + d->pad_h - r * d->dil_h;
                if (hp < 0 || hp % sh) continue;
                int p = hp / sh;
                if (p < pa || p >= pb) continue;
                h_taps[n_h++] = ((int64_t)n * P + p - row0) * Q * rsc + (int64_t)r * S * C;
            }
            for (int w = 0; w < W; w++) {
                real *out = dx + (((int64_t)n * H + h) * W + w) * C;
                const int64_t *wt = w_taps + (int64_t)w * S;
                for (int i = 0; i < n_h; i++)
                    for (int j = 0; j < w_count[w]; j++) {
                        const real *src = col + h_taps[i] + wt[j];
                        for (int c = 0; c < C; c++) out[c] += src[c];
                    }
            }
        }
    }
    free(w_taps);
    free(w_count);
}
