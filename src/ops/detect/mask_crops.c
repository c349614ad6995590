/* Compact ground truth (roi_targets.h): each gt mask as the rectangle around its nonzero
 * pixels. A mask target reads the mask only through bilinear taps, and a tap outside
 * the rectangle reads a zero either way, so the targets do not change; the step stages
 * and uploads a few MB instead of the batch's full-size (N, G, H, W) masks. */
#include <stdint.h>
#include <string.h>

#include "mrcnn/box_math.h"
#include "mrcnn/check.h"
#include "mrcnn/roi_targets.h"

/* The first nonzero byte of p[0, n), or n; eight bytes at a time. */
static int first_nonzero(const uint8_t *p, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v) break;
    }
    while (i < n && !p[i]) i++;
    return i;
}

/* The last nonzero byte of p[from, n), or from - 1 when there is none. */
static int last_nonzero(const uint8_t *p, int from, int n) {
    int i = n;
    for (; i - 8 >= from; i -= 8) {
        uint64_t v;
        memcpy(&v, p + i - 8, 8);
        if (v) break;
    }
    while (i > from && !p[i - 1]) i--;
    return i - 1;
}

/* The rectangle around mask m's nonzero pixels (h rows of w, stride bytes apart) into
 * c[1..4] (y0, x0, h, w; zeros when it has none). */
static void mask_extent(const uint8_t *m, int h, int w, size_t stride, int32_t *c) {
    int y0 = -1, y1 = -1, x0 = w, x1 = -1;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = m + (size_t)y * stride;
        const int l = first_nonzero(row, w);
        if (l == w) continue;
        if (y0 < 0) y0 = y;
        y1 = y;
        if (l < x0) x0 = l;
        // only a pixel right of the widest row so far can widen the rectangle
        const int r = last_nonzero(row, l > x1 ? l : x1 + 1, w);
        if (r > x1) x1 = r;
    }
    if (y0 < 0) return; // empty: h = w = 0
    c[1] = y0;
    c[2] = x0;
    c[3] = y1 - y0 + 1;
    c[4] = x1 - x0 + 1;
}

/* Bytes from one row of image i's masks to the next. */
static size_t row_stride(const int *strides, const int *hw, int i) {
    return (size_t)(strides ? strides[i] : hw[2 * i + 1]);
}

size_t mrcnn_mask_crops_make(const uint8_t *const *masks, const int *strides, const int *counts, const int *hw,
                             int N, int G, int32_t *crops) {
    MRCNN_CHECK(N > 0 && G > 0 && masks && counts && hw && crops, "mask crops: %d images, capacity %d", N, G);
    memset(crops, 0, sizeof *crops * (size_t)N * G * MRCNN_MASK_CROP_WORDS);
    for (int i = 0; i < N; i++) {
        MRCNN_CHECK(counts[i] >= 0 && counts[i] <= G, "mask crops: image %d has %d masks (capacity %d)", i,
                    counts[i], G);
        MRCNN_CHECK(!strides || strides[i] >= hw[2 * i + 1], "mask crops: image %d's rows are %d bytes apart but "
                    "%d wide", i, strides[i], hw[2 * i + 1]);
        for (int j = 0; j < counts[i]; j++)
            MRCNN_CHECK(masks[(size_t)i * G + j], "mask crops: image %d has no mask %d", i, j);
    }
    // the scan reads every full-size mask once: the masks in parallel, the offsets after
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < N * G; k++) {
        const int i = k / G, j = k % G;
        if (j < counts[i])
            mask_extent(masks[k], hw[2 * i], hw[2 * i + 1], row_stride(strides, hw, i),
                        crops + (size_t)k * MRCNN_MASK_CROP_WORDS);
    }
    size_t total = 0;
    for (int k = 0; k < N * G; k++) {
        int32_t *c = crops + (size_t)k * MRCNN_MASK_CROP_WORDS;
        const size_t bytes = (size_t)c[3] * (size_t)c[4];
        MRCNN_CHECK(total + bytes <= INT32_MAX, "mask crops: the batch's masks need more than %d bytes", INT32_MAX);
        c[0] = bytes ? (int32_t)total : 0;
        total += bytes;
    }
    return total;
}

void mrcnn_mask_crops_copy(const uint8_t *const *masks, const int *strides, const int *counts, const int *hw, int N,
                           int G, const int32_t *crops, uint8_t *pool) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < N * G; k++) {
        const int i = k / G, j = k % G;
        if (j >= counts[i]) continue;
        const size_t stride = row_stride(strides, hw, i);
        const mrcnn_mask_crop c = mrcnn_mask_crop_load(crops + (size_t)k * MRCNN_MASK_CROP_WORDS);
        for (int y = 0; y < c.h; y++)
            memcpy(pool + c.offset + (size_t)y * c.w, masks[k] + (size_t)(c.y0 + y) * stride + c.x0, (size_t)c.w);
    }
}
