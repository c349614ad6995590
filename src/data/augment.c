/* Per-image transforms of the loader: resize (shortest edge / max size, bilinear with
 * half-pixel centres, i.e. torch's interpolate(mode="bilinear", align_corners=False)),
 * horizontal flip, normalization and zero padding, fused into one pass that writes the
 * float canvas; and the masks (nearest, as torchvision resizes masks), flipped alike. */
#include "data_internal.h"

#include <math.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/data.h"

void data_resize_shape(int h, int w, int min_size, int max_size, int *nh, int *nw) {
    /* detectron2's ResizeShortestEdge: scale the short side to min_size unless the long
     * side would pass max_size; round to nearest. */
    double s = (double)min_size / (h < w ? h : w);
    const int lng = h > w ? h : w;
    if (max_size > 0 && lng * s > max_size) s = (double)max_size / lng;
    *nh = (int)(h * s + 0.5);
    *nw = (int)(w * s + 0.5);
    if (*nh < 1) *nh = 1;
    if (*nw < 1) *nw = 1;
}

/* Source coordinate of output pixel d under half-pixel centres, split into index and
 * weight; clamped at the borders as torch does. */
static void bilinear_taps(int out, int in, int *i0, int *i1, float *f) {
    const double scale = (double)in / out;
    for (int d = 0; d < out; d++) {
        double s = (d + 0.5) * scale - 0.5;
        if (s < 0) s = 0;
        int a = (int)s;
        if (a > in - 1) a = in - 1;
        i0[d] = a;
        i1[d] = a + 1 < in ? a + 1 : in - 1;
        f[d] = (float)(s - a);
    }
}

void data_resize_normalize(const uint8_t *rgb, int h, int w, int nh, int nw, int flip, const float mean[3],
                           const float std_[3], float *canvas, int ch, int cw, data_scratch *sc) {
    data_scratch_reserve(sc, nw, nh);
    data_scratch_reserve_src(sc, w);
    int *x0 = sc->x0, *x1 = sc->x1, *y0 = sc->y0, *y1 = sc->y1;
    float *fx = sc->fx, *fy = sc->fy;
    bilinear_taps(nw, w, x0, x1, fx);
    bilinear_taps(nh, h, y0, y1, fy);
    const int n3 = nw * 3;
    /* Flat taps over interleaved RGB, with the mirror baked in: output x reads what
     * x' = nw-1-x would. The horizontal pass is then a gather + lerp over n3 values. */
    int *restrict i0 = sc->i0, *restrict i1 = sc->i1;
    float *restrict f3 = sc->f3;
    for (int x = 0; x < nw; x++) {
        const int xs = flip ? nw - 1 - x : x;
        for (int c = 0; c < 3; c++) {
            i0[3 * x + c] = 3 * x0[xs] + c;
            i1[3 * x + c] = 3 * x1[xs] + c;
            f3[3 * x + c] = fx[xs];
        }
    }
    /* Normalization is affine, so it commutes with interpolation: applied to each
     * source row once, as it is converted to float. */
    float *restrict na = sc->na, *restrict nb = sc->nb;
    for (int i = 0; i < 3 * w; i++) na[i] = 1.0f / std_[i % 3], nb[i] = -mean[i % 3] / std_[i % 3];
    /* Two horizontally resampled source rows, reused while consecutive output rows
     * read the same pair. */
    float *rows[2] = {sc->row0, sc->row1};
    int have[2] = {-1, -1};
    float *restrict srcf = sc->srcf;
    for (int y = 0; y < nh; y++) {
        const int want[2] = {y0[y], y1[y]};
        float *r[2];
        for (int k = 0; k < 2; k++) {
            int slot = have[0] == want[k] ? 0 : have[1] == want[k] ? 1 : -1;
            if (slot < 0) {
                slot = have[0] == want[1 - k] ? 1 : 0; /* keep the row the other tap needs */
                const uint8_t *restrict src = rgb + (size_t)want[k] * w * 3;
                for (int i = 0; i < 3 * w; i++) srcf[i] = (float)src[i] * na[i] + nb[i];
                float *restrict dst = rows[slot];
                int i = 0;
#ifdef __AVX2__
                for (; i + 8 <= n3; i += 8) { /* the compiler does not emit gathers on its own */
                    const __m256 p0 = _mm256_i32gather_ps(srcf, _mm256_loadu_si256((const __m256i *)(i0 + i)), 4);
                    const __m256 p1 = _mm256_i32gather_ps(srcf, _mm256_loadu_si256((const __m256i *)(i1 + i)), 4);
                    const __m256 f = _mm256_loadu_ps(f3 + i);
                    _mm256_storeu_ps(dst + i, _mm256_fmadd_ps(f, _mm256_sub_ps(p1, p0), p0));
                }
#endif
                for (; i < n3; i++) {
                    const float p0 = srcf[i0[i]], p1 = srcf[i1[i]];
                    dst[i] = p0 + f3[i] * (p1 - p0);
                }
                have[slot] = want[k];
            }
            r[k] = rows[slot];
        }
        const float f = fy[y];
        float *restrict out = canvas + (size_t)y * cw * 3;
        const float *restrict a = r[0], *restrict b = r[1];
        if (a == b || f == 0.0f) {
            memcpy(out, a, sizeof(float) * (size_t)n3);
        } else {
            for (int i = 0; i < n3; i++) out[i] = a[i] + f * (b[i] - a[i]);
        }
        if (cw > nw) memset(out + n3, 0, sizeof(float) * (size_t)(cw - nw) * 3);
    }
    for (int y = nh; y < ch; y++) memset(canvas + (size_t)y * cw * 3, 0, sizeof(float) * (size_t)cw * 3);
}

void data_mask_resize(const uint8_t *colmajor, int h, int w, int nh, int nw, int flip, uint8_t *out, int ch, int cw,
                      const int src_box[4], data_scratch *sc) {
    data_scratch_reserve(sc, nw, nh);
    int *xs = sc->x0, *ys = sc->y0;
    /* torch's "nearest": src = floor(dst * in / out). */
    int xa = nw, xb = -1, ya = nh, yb = -1; /* output columns/rows that can be 1 */
    for (int x = 0; x < nw; x++) {
        int s = (int)floor((double)x * w / nw);
        if (s > w - 1) s = w - 1;
        const int d = flip ? nw - 1 - x : x;
        xs[d] = s * h;
        if (!src_box || (s >= src_box[0] && s < src_box[2])) {
            if (d < xa) xa = d;
            if (d > xb) xb = d;
        }
    }
    for (int y = 0; y < nh; y++) {
        int s = (int)floor((double)y * h / nh);
        ys[y] = s < h ? s : h - 1;
        if (!src_box || (ys[y] >= src_box[1] && ys[y] < src_box[3])) {
            if (y < ya) ya = y;
            if (y > yb) yb = y;
        }
    }
    /* Masks are mostly background: zero the canvas, then gather only inside the
     * resized bounding box of the source's ones. */
    memset(out, 0, (size_t)ch * cw);
    for (int y = ya; y <= yb && xa <= xb; y++) {
        uint8_t *o = out + (size_t)y * cw;
        if (y > ya && ys[y] == ys[y - 1]) {
            memcpy(o + xa, o - cw + xa, (size_t)(xb - xa + 1));
            continue;
        }
        const uint8_t *col = colmajor + ys[y];
        for (int x = xa; x <= xb; x++) o[x] = col[xs[x]];
    }
}

void data_scratch_reserve(data_scratch *sc, int nw, int nh) {
    if (nw > sc->cap_w) {
        sc->x0 = MRCNN_REALLOC(sc->x0, sizeof(int) * (size_t)nw, "resize taps");
        sc->x1 = MRCNN_REALLOC(sc->x1, sizeof(int) * (size_t)nw, "resize taps");
        sc->fx = MRCNN_REALLOC(sc->fx, sizeof(float) * (size_t)nw, "resize weights");
        sc->row0 = MRCNN_REALLOC(sc->row0, sizeof(float) * 3 * (size_t)nw, "resize row");
        sc->row1 = MRCNN_REALLOC(sc->row1, sizeof(float) * 3 * (size_t)nw, "resize row");
        sc->i0 = MRCNN_REALLOC(sc->i0, sizeof(int) * 3 * (size_t)nw, "resize taps");
        sc->i1 = MRCNN_REALLOC(sc->i1, sizeof(int) * 3 * (size_t)nw, "resize taps");
        sc->f3 = MRCNN_REALLOC(sc->f3, sizeof(float) * 3 * (size_t)nw, "resize weights");
        sc->cap_w = nw;
    }
    if (nh > sc->cap_h) {
        sc->y0 = MRCNN_REALLOC(sc->y0, sizeof(int) * (size_t)nh, "resize taps");
        sc->y1 = MRCNN_REALLOC(sc->y1, sizeof(int) * (size_t)nh, "resize taps");
        sc->fy = MRCNN_REALLOC(sc->fy, sizeof(float) * (size_t)nh, "resize weights");
        sc->cap_h = nh;
    }
}

void data_scratch_reserve_src(data_scratch *sc, int w) {
    if (w > sc->cap_src) {
        sc->srcf = MRCNN_REALLOC(sc->srcf, sizeof(float) * 3 * (size_t)w, "resize source row");
        sc->na = MRCNN_REALLOC(sc->na, sizeof(float) * 3 * (size_t)w, "normalization");
        sc->nb = MRCNN_REALLOC(sc->nb, sizeof(float) * 3 * (size_t)w, "normalization");
        sc->cap_src = w;
    }
}

void data_scratch_free(data_scratch *sc) {
    free(sc->i0);
    free(sc->i1);
    free(sc->f3);
    free(sc->srcf);
    free(sc->na);
    free(sc->nb);
    free(sc->x0);
    free(sc->x1);
    free(sc->y0);
    free(sc->y1);
    free(sc->fx);
    free(sc->fy);
    free(sc->row0);
    free(sc->row1);
    memset(sc, 0, sizeof *sc);
}

void mrcnn_data_resize_shape(int h, int w, int min_size, int max_size, int *nh, int *nw) {
    data_resize_shape(h, w, min_size, max_size, nh, nw);
}

void mrcnn_data_resize_normalize(const uint8_t *rgb, int h, int w, int nh, int nw, const float mean[3],
                                 const float std_[3], float *canvas, int ch, int cw) {
    data_scratch sc;
    memset(&sc, 0, sizeof sc);
    data_resize_normalize(rgb, h, w, nh, nw, 0, mean, std_, canvas, ch, cw, &sc);
    data_scratch_free(&sc);
}
