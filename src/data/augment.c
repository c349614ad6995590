/* Per-image transforms of the loader: resize (shortest edge / max size, bilinear with
 * half-pixel centres, i.e. torch's interpolate(mode="bilinear", align_corners=False)),
 * horizontal flip, normalization and zero padding, fused into one pass that writes the
 * float canvas; and the masks (nearest, as torchvision resizes masks), flipped alike. */
#include "data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

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
    int *x0 = sc->x0, *x1 = sc->x1, *y0 = sc->y0, *y1 = sc->y1;
    float *fx = sc->fx, *fy = sc->fy;
    bilinear_taps(nw, w, x0, x1, fx);
    bilinear_taps(nh, h, y0, y1, fy);
    if (flip) { /* bake the mirror into the taps: output x reads what x' = nw-1-x would */
        for (int a = 0, b = nw - 1; a < b; a++, b--) {
            int t = x0[a]; x0[a] = x0[b]; x0[b] = t;
            t = x1[a]; x1[a] = x1[b]; x1[b] = t;
            float u = fx[a]; fx[a] = fx[b]; fx[b] = u;
        }
    }
    float inv[3], off[3];
    for (int c = 0; c < 3; c++) inv[c] = 1.0f / std_[c], off[c] = -mean[c] / std_[c];
    /* Two horizontally resampled source rows, reused while consecutive output rows
     * read the same pair. */
    float *rows[2] = {sc->row0, sc->row1};
    int have[2] = {-1, -1};
    const int n3 = nw * 3;
    for (int y = 0; y < nh; y++) {
        const int want[2] = {y0[y], y1[y]};
        float *r[2];
        for (int k = 0; k < 2; k++) {
            int slot = have[0] == want[k] ? 0 : have[1] == want[k] ? 1 : -1;
            if (slot < 0) {
                slot = have[0] == want[1 - k] ? 1 : 0; /* keep the row the other tap needs */
                const uint8_t *src = rgb + (size_t)want[k] * w * 3;
                float *dst = rows[slot];
                for (int x = 0; x < nw; x++) {
                    const uint8_t *p0 = src + 3 * x0[x], *p1 = src + 3 * x1[x];
                    const float f = fx[x];
                    dst[3 * x] = p0[0] + f * (p1[0] - p0[0]);
                    dst[3 * x + 1] = p0[1] + f * (p1[1] - p0[1]);
                    dst[3 * x + 2] = p0[2] + f * (p1[2] - p0[2]);
                }
                have[slot] = want[k];
            }
            r[k] = rows[slot];
        }
        const float f = fy[y];
        float *out = canvas + (size_t)y * cw * 3;
        const float *a = r[0], *b = r[1];
        for (int i = 0; i < n3; i += 3) {
            out[i] = (a[i] + f * (b[i] - a[i])) * inv[0] + off[0];
            out[i + 1] = (a[i + 1] + f * (b[i + 1] - a[i + 1])) * inv[1] + off[1];
            out[i + 2] = (a[i + 2] + f * (b[i + 2] - a[i + 2])) * inv[2] + off[2];
        }
        if (cw > nw) memset(out + n3, 0, sizeof(float) * (size_t)(cw - nw) * 3);
    }
    for (int y = nh; y < ch; y++) memset(canvas + (size_t)y * cw * 3, 0, sizeof(float) * (size_t)cw * 3);
}

void data_mask_resize(const uint8_t *colmajor, int h, int w, int nh, int nw, int flip, uint8_t *out, int ch, int cw,
                      data_scratch *sc) {
    data_scratch_reserve(sc, nw, nh);
    int *xs = sc->x0, *ys = sc->y0;
    /* torch's "nearest": src = floor(dst * in / out). */
    for (int x = 0; x < nw; x++) {
        int s = (int)floor((double)x * w / nw);
        xs[flip ? nw - 1 - x : x] = (s < w ? s : w - 1) * h;
    }
    for (int y = 0; y < nh; y++) {
        int s = (int)floor((double)y * h / nh);
        ys[y] = s < h ? s : h - 1;
    }
    for (int y = 0; y < nh; y++) {
        uint8_t *o = out + (size_t)y * cw;
        if (y > 0 && ys[y] == ys[y - 1]) {
            memcpy(o, o - cw, (size_t)cw);
            continue;
        }
        const uint8_t *col = colmajor + ys[y];
        for (int x = 0; x < nw; x++) o[x] = col[xs[x]];
        if (cw > nw) memset(o + nw, 0, (size_t)(cw - nw));
    }
    if (ch > nh) memset(out + (size_t)nh * cw, 0, (size_t)(ch - nh) * cw);
}

void data_scratch_reserve(data_scratch *sc, int nw, int nh) {
    if (nw > sc->cap_w) {
        sc->x0 = MRCNN_REALLOC(sc->x0, sizeof(int) * (size_t)nw, "resize taps");
        sc->x1 = MRCNN_REALLOC(sc->x1, sizeof(int) * (size_t)nw, "resize taps");
        sc->fx = MRCNN_REALLOC(sc->fx, sizeof(float) * (size_t)nw, "resize weights");
        sc->row0 = MRCNN_REALLOC(sc->row0, sizeof(float) * 3 * (size_t)nw, "resize row");
        sc->row1 = MRCNN_REALLOC(sc->row1, sizeof(float) * 3 * (size_t)nw, "resize row");
        sc->cap_w = nw;
    }
    if (nh > sc->cap_h) {
        sc->y0 = MRCNN_REALLOC(sc->y0, sizeof(int) * (size_t)nh, "resize taps");
        sc->y1 = MRCNN_REALLOC(sc->y1, sizeof(int) * (size_t)nh, "resize taps");
        sc->fy = MRCNN_REALLOC(sc->fy, sizeof(float) * (size_t)nh, "resize weights");
        sc->cap_h = nh;
    }
}

void data_scratch_free(data_scratch *sc) {
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
