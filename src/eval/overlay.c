/* Detections drawn over an image for people to look at: masks blended at half
 * opacity in one colour per instance, box outlines in the same colour, and a label
 * ("name 0.93") on a filled tab above the box (inside it at the top edge). */
#include "mrcnn/overlay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"

/* Tableau-10: distinct hues that stay visible over photos. */
static const uint8_t k_palette[10][3] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
};

int mrcnn_text_width(const char *text, int scale) {
    int n = (int)strlen(text);
    return n > 0 ? (n * (MRCNN_FONT_W + 1) - 1) * scale : 0;
}

static void put(uint8_t *rgb, int h, int w, int x, int y, const uint8_t c[3]) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    memcpy(rgb + ((size_t)y * w + x) * 3, c, 3);
}

static void fill_rect(uint8_t *rgb, int h, int w, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    for (int y = y0 < 0 ? 0 : y0; y < y1 && y < h; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x1 && x < w; x++) memcpy(rgb + ((size_t)y * w + x) * 3, c, 3);
}

void mrcnn_draw_text(uint8_t *rgb, int h, int w, int x, int y, const char *text, int scale, const uint8_t color[3]) {
    for (int i = 0; text[i]; i++) {
        int ch = (unsigned char)text[i];
        if (ch < 32 || ch > 126) ch = '?';
        const uint8_t *g = mrcnn_font5x7[ch - 32];
        int gx = x + i * (MRCNN_FONT_W + 1) * scale;
        for (int cx = 0; cx < MRCNN_FONT_W; cx++)
            for (int cy = 0; cy < MRCNN_FONT_H; cy++)
                if (g[cx] >> cy & 1)
                    for (int dy = 0; dy < scale; dy++)
                        for (int dx = 0; dx < scale; dx++) put(rgb, h, w, gx + cx * scale + dx, y + cy * scale + dy, color);
    }
}

static void draw_box(uint8_t *rgb, int h, int w, const float *b, int t, const uint8_t c[3]) {
    int x0 = (int)(b[0] + 0.5f), y0 = (int)(b[1] + 0.5f), x1 = (int)(b[2] + 0.5f), y1 = (int)(b[3] + 0.5f);
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    fill_rect(rgb, h, w, x0, y0, x1, y0 + t, c);
    fill_rect(rgb, h, w, x0, y1 - t, x1, y1, c);
    fill_rect(rgb, h, w, x0, y0, x0 + t, y1, c);
    fill_rect(rgb, h, w, x1 - t, y0, x1, y1, c);
}

static int overlaps(const int *a, const int *b) { return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]; }

int mrcnn_overlay_draw(uint8_t *rgb, const mrcnn_instances *inst, const char *const *names, int n_names,
                       float score_thresh) {
    const int h = inst->h, w = inst->w, short_side = h < w ? h : w;
    const int scale = short_side >= 600 ? 2 : 1, thick = short_side >= 400 ? 2 : 1;
    uint8_t *mask = MRCNN_MALLOC((size_t)h * w, "overlay mask");
    int (*placed)[4] = MRCNN_MALLOC(sizeof *placed * (size_t)(inst->n + 1), "label boxes");
    int drawn = 0, n_placed = 0;
    /* masks and boxes lowest score first, so the most confident instances end up on top */
    for (int i = inst->n - 1; i >= 0; i--) {
        if (inst->scores[i] < score_thresh) continue;
        const uint8_t *c = k_palette[i % 10];
        mrcnn_rle_to_mask(&inst->masks[i], mask);
        for (size_t p = 0; p < (size_t)h * w; p++)
            if (mask[p])
                for (int k = 0; k < 3; k++) rgb[p * 3 + k] = (uint8_t)((rgb[p * 3 + k] + c[k] + 1) / 2);
        draw_box(rgb, h, w, inst->boxes + 4 * i, thick, c);
        drawn++;
    }
    /* labels after every mask and box, so none is covered; highest score first picks its
     * place: above the box, else inside its top edge, moved down past earlier labels */
    for (int i = 0; i < inst->n; i++) {
        if (inst->scores[i] < score_thresh) continue;
        const uint8_t *c = k_palette[i % 10];
        char label[160];
        int cls = inst->classes[i];
        if (names && cls >= 0 && cls < n_names) snprintf(label, sizeof label, "%s %.2f", names[cls], inst->scores[i]);
        else snprintf(label, sizeof label, "class %d %.2f", cls + 1, inst->scores[i]);
        int tw = mrcnn_text_width(label, scale) + 2 * scale, th = (MRCNN_FONT_H + 2) * scale;
        int x = (int)(inst->boxes[4 * i] + 0.5f), y = (int)(inst->boxes[4 * i + 1] + 0.5f) - th;
        if (y < 0) y = (int)(inst->boxes[4 * i + 1] + 0.5f);
        if (x + tw > w) x = w - tw;
        if (x < 0) x = 0;
        int r[4] = {x, y, x + tw, y + th};
        for (int tries = 0; tries < 8; tries++) {
            int hit = 0;
            for (int j = 0; j < n_placed && !hit; j++) hit = overlaps(r, placed[j]);
            if (!hit || r[3] + th > h) break;
            r[1] += th, r[3] += th;
        }
        memcpy(placed[n_placed++], r, sizeof r);
        fill_rect(rgb, h, w, r[0], r[1], r[2], r[3], c);
        int luma = (299 * c[0] + 587 * c[1] + 114 * c[2]) / 1000;
        static const uint8_t white[3] = {255, 255, 255}, black[3] = {0, 0, 0};
        mrcnn_draw_text(rgb, h, w, r[0] + scale, r[1] + scale, label, scale, luma > 150 ? black : white);
    }
    free(placed);
    free(mask);
    return drawn;
}
