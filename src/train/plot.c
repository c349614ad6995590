/* A small line plot as a PNG (mrcnn_png_write_rgb): white canvas, axes with tick marks and
 * labels from a built-in 5x7 digit font, the curve in blue. Enough to eyeball a
 * loss curve without Python. */
#include "mrcnn/metrics.h"
#include "mrcnn/check.h"
#include "mrcnn/png_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *px; // (h, w, 3)
    int w, h;
} canvas;

static void put(canvas *c, int x, int y, const unsigned char rgb[3]) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

static void line(canvas *c, int x0, int y0, int x1, int y1, const unsigned char rgb[3], int thick) {
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1, err = dx + dy;
    for (;;) {
        for (int a = 0; a < thick; a++)
            for (int b = 0; b < thick; b++) put(c, x0 + a, y0 + b, rgb);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
    }
}

/* 5x7 glyphs for "0-9 . - e" and a few letters of the titles; rows top to bottom,
 * bit 4 = leftmost column. */
static const char *k_glyph_chars = "0123456789.-e";
static const unsigned char k_glyphs[][7] = {
    {14, 17, 19, 21, 25, 17, 14}, {4, 12, 4, 4, 4, 4, 14},   {14, 17, 1, 2, 4, 8, 31},
    {31, 2, 4, 2, 1, 17, 14},     {2, 6, 10, 18, 31, 2, 2},  {31, 16, 30, 1, 1, 17, 14},
    {6, 8, 16, 30, 17, 17, 14},   {31, 1, 2, 4, 8, 8, 8},    {14, 17, 17, 14, 17, 17, 14},
    {14, 17, 17, 15, 1, 2, 12},   {0, 0, 0, 0, 0, 12, 12},   {0, 0, 0, 31, 0, 0, 0},
    {0, 0, 14, 17, 31, 16, 14},
};

static void text(canvas *c, int x, int y, const char *s, const unsigned char rgb[3]) {
    for (; *s; s++, x += 6) {
        const char *g = strchr(k_glyph_chars, *s);
        if (!g) continue; // letters are not drawn: labels are numbers
        const unsigned char *rows = k_glyphs[g - k_glyph_chars];
        for (int r = 0; r < 7; r++)
            for (int b = 0; b < 5; b++)
                if (rows[r] & (16 >> b)) put(c, x + b, y + r, rgb);
    }
}

void mrcnn_plot_png(const char *path, const double *x, const double *y, int n, int w, int h, const char *title) {
    MRCNN_CHECK(n >= 1 && w >= 64 && h >= 48, "plot %s: need >= 1 point and >= 64x48 pixels (got %d, %dx%d)", path,
                n, w, h);
    canvas c = {MRCNN_MALLOC((size_t)w * h * 3, "plot canvas"), w, h};
    memset(c.px, 255, (size_t)w * h * 3);
    double x0 = x[0], x1 = x[0], y0 = y[0], y1 = y[0];
    for (int i = 1; i < n; i++) {
        x0 = fmin(x0, x[i]); x1 = fmax(x1, x[i]);
        if (isfinite(y[i])) { y0 = fmin(y0, y[i]); y1 = fmax(y1, y[i]); }
    }
    if (x1 == x0) x1 = x0 + 1;
    if (!(y1 > y0)) y1 = y0 + 1;
    y0 = fmin(y0, 0.0); // a loss axis from 0 shows how far it fell
    const int L = 56, R = w - 16, T = 16, B = h - 28;
    const unsigned char black[3] = {0, 0, 0}, grey[3] = {220, 220, 220}, blue[3] = {31, 119, 180};
    for (int k = 0; k <= 4; k++) {
        int yy = B - (B - T) * k / 4, xx = L + (R - L) * k / 4;
        line(&c, L, yy, R, yy, grey, 1);
        line(&c, L - 4, yy, L, yy, black, 1);
        line(&c, xx, B, xx, B + 4, black, 1);
        char lab[32];
        snprintf(lab, sizeof lab, "%.3g", y0 + (y1 - y0) * k / 4);
        text(&c, 4, yy - 3, lab, black);
        snprintf(lab, sizeof lab, "%.0f", x0 + (x1 - x0) * k / 4);
        text(&c, xx - 3 * (int)strlen(lab), B + 8, lab, black);
    }
    line(&c, L, T, L, B, black, 1);
    line(&c, L, B, R, B, black, 1);
    int px = -1, py = -1;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i])) continue;
        int xx = L + (int)lround((x[i] - x0) / (x1 - x0) * (R - L));
        int yy = B - (int)lround((y[i] - y0) / (y1 - y0) * (B - T));
        if (px >= 0) line(&c, px, py, xx, yy, blue, 2);
        else put(&c, xx, yy, blue);
        px = xx;
        py = yy;
    }
    char err[1200];
    const int ok = mrcnn_png_write_rgb(path, c.px, h, w, title ? title : "", err, sizeof err);
    free(c.px);
    MRCNN_CHECK(ok, "plot: %s", err);
}

int mrcnn_plot_metrics_json(const char *json_path, const char *png_path) {
    FILE *f = fopen(json_path, "r");
    MRCNN_CHECK(f != NULL, "plot: cannot open %s", json_path);
    int cap = 1024, n = 0;
    double *x = MRCNN_MALLOC(sizeof(double) * cap, "plot x"), *y = MRCNN_MALLOC(sizeof(double) * cap, "plot y");
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        long long step;
        double loss;
        const char *s = strstr(line, "\"step\":"), *l = strstr(line, "\"total_loss\":");
        if (!s || !l || sscanf(s + 7, "%lld", &step) != 1 || sscanf(l + 13, "%lf", &loss) != 1) continue;
        /* A resumed run repeats the steps after its checkpoint: drop the stale tail. */
        while (n > 0 && x[n - 1] >= (double)step) n--;
        if (n == cap) {
            cap *= 2;
            x = MRCNN_REALLOC(x, sizeof(double) * cap, "plot x");
            y = MRCNN_REALLOC(y, sizeof(double) * cap, "plot y");
        }
        x[n] = (double)step;
        y[n] = loss;
        n++;
    }
    fclose(f);
    if (n > 0) mrcnn_plot_png(png_path, x, y, n, 640, 360, "total loss");
    free(x);
    free(y);
    return n;
}
