/* torchvision's paste_masks_in_image for one mask: pad the m x m mask by one pixel,
 * expand the box by the same factor, truncate it to integers, resize the padded mask
 * bilinearly (F.interpolate, align_corners = False, float math) to the box and paste. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/postprocess.h"
#include "mrcnn/test_hooks.h"

/* Source index and weights of F.interpolate's linear mode along one axis. */
static void linear_index(int in, int out, int dst, int *i0, int *i1, float *l0, float *l1) {
    float scale = (float)in / (float)out;
    float real = scale * ((float)dst + 0.5f) - 0.5f;
    if (real < 0) real = 0;
    int i = (int)real;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    float l = real - (float)i;
    l = l < 0 ? 0 : (l > 1 ? 1 : l);
    *l1 = l;
    *l0 = 1.0f - l;
}

/* Pads mask (m, m) by one zero pixel: value at padded (y, x). */
static float padded_at(const float *mask, int m, int y, int x) {
    if (y < 1 || x < 1 || y > m || x > m) return 0.0f;
    return mask[(y - 1) * m + (x - 1)];
}

typedef void (*paste_put)(void *out, int64_t at, float v, float thresh);

static void put_f32(void *out, int64_t at, float v, float thresh) { ((float *)out)[at] = v; }
static void put_u8(void *out, int64_t at, float v, float thresh) { ((uint8_t *)out)[at] = v > thresh; }

static void paste(const float *mask, int m, const float *box, int img_h, int img_w, void *out, size_t elem,
                  paste_put put, float thresh) {
    MRCNN_CHECK(mask && box && out && m > 0 && img_h > 0 && img_w > 0, "paste_mask: bad argument (m %d, image %dx%d)",
                m, img_h, img_w);
    memset(out, 0, (size_t)img_h * img_w * elem);
    /* expand_masks / expand_boxes: scale (m + 2) / m as a float multiplier. */
    const float scale = (float)((double)(m + 2) / (double)m);
    float w_half = (box[2] - box[0]) * 0.5f, h_half = (box[3] - box[1]) * 0.5f;
    float x_c = (box[2] + box[0]) * 0.5f, y_c = (box[3] + box[1]) * 0.5f;
    w_half *= scale;
    h_half *= scale;
    int64_t b0 = (int64_t)(x_c - w_half), b1 = (int64_t)(y_c - h_half);
    int64_t b2 = (int64_t)(x_c + w_half), b3 = (int64_t)(y_c + h_half);
    int64_t w = b2 - b0 + 1, h = b3 - b1 + 1;
    if (w < 1) w = 1;
    if (h < 1) h = 1;
    int64_t x0 = b0 > 0 ? b0 : 0, x1 = b2 + 1 < img_w ? b2 + 1 : img_w;
    int64_t y0 = b1 > 0 ? b1 : 0, y1 = b3 + 1 < img_h ? b3 + 1 : img_h;
    const int mp = m + 2;
    for (int64_t y = y0; y < y1; y++) {
        int64_t sy = y - b1; // row of the resized mask
        if (sy >= h) break;
        int r0, r1;
        float hl0, hl1;
        linear_index(mp, (int)h, (int)sy, &r0, &r1, &hl0, &hl1);
        for (int64_t x = x0; x < x1; x++) {
            int64_t sx = x - b0;
            if (sx >= w) break;
            int c0, c1;
            float wl0, wl1;
            linear_index(mp, (int)w, (int)sx, &c0, &c1, &wl0, &wl1);
            float top = wl0 * padded_at(mask, m, r0, c0) + wl1 * padded_at(mask, m, r0, c1);
            float bot = wl0 * padded_at(mask, m, r1, c0) + wl1 * padded_at(mask, m, r1, c1);
            put(out, y * img_w + x, hl0 * top + hl1 * bot, thresh);
        }
    }
}

/* The pasted probabilities before the threshold, which torchvision's parity test compares:
 * inference pastes the binary mask (_u8) through the same static paste. */
MRCNN_TEST_HOOK void mrcnn_paste_mask(const float *mask, int m, const float *box, int img_h, int img_w, float *out) {
    paste(mask, m, box, img_h, img_w, out, sizeof(float), put_f32, 0.0f);
}

void mrcnn_paste_mask_u8(const float *mask, int m, const float *box, int img_h, int img_w, float thresh,
                         uint8_t *out) {
    paste(mask, m, box, img_h, img_w, out, sizeof(uint8_t), put_u8, thresh);
}
