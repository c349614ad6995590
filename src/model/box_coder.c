/* torchvision's BoxCoder (encode_boxes / decode_single) and box clipping, in float with
 * the same order of operations so that results agree to the last bits. */
#include <math.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"

mrcnn_box_coder mrcnn_box_coder_make(float wx, float wy, float ww, float wh) {
    MRCNN_CHECK(wx > 0 && wy > 0 && ww > 0 && wh > 0, "box_coder: weights (%g, %g, %g, %g) must be positive",
                (double)wx, (double)wy, (double)ww, (double)wh);
    /* torch.clamp(max=python float) rounds the bound to the tensor's float. */
    mrcnn_box_coder c = {wx, wy, ww, wh, (float)log(1000.0 / 16.0)};
    return c;
}

void mrcnn_box_encode(const mrcnn_box_coder *c, int64_t n, const float *targets, const float *boxes,
                      float *deltas) {
    MRCNN_CHECK(n >= 0, "box_encode: negative count %lld", (long long)n);
    MRCNN_CHECK(n == 0 || (c && targets && boxes && deltas), "box_encode: NULL argument");
    for (int64_t i = 0; i < n; i++) {
        const float *p = boxes + 4 * i, *g = targets + 4 * i;
        float ew = p[2] - p[0], eh = p[3] - p[1];
        float ex = p[0] + 0.5f * ew, ey = p[1] + 0.5f * eh;
        float gw = g[2] - g[0], gh = g[3] - g[1];
        float gx = g[0] + 0.5f * gw, gy = g[1] + 0.5f * gh;
        float *d = deltas + 4 * i;
        d[0] = c->wx * (gx - ex) / ew;
        d[1] = c->wy * (gy - ey) / eh;
        d[2] = c->ww * logf(gw / ew);
        d[3] = c->wh * logf(gh / eh);
    }
}

void mrcnn_box_decode(const mrcnn_box_coder *c, int64_t n, int k, const float *deltas, const float *boxes,
                      float *out) {
    MRCNN_CHECK(n >= 0 && k > 0, "box_decode: bad count %lld or boxes per reference %d", (long long)n, k);
    MRCNN_CHECK(n == 0 || (c && deltas && boxes && out), "box_decode: NULL argument");
    for (int64_t i = 0; i < n; i++) {
        const float *b = boxes + 4 * i;
        float w = b[2] - b[0], h = b[3] - b[1];
        float cx = b[0] + 0.5f * w, cy = b[1] + 0.5f * h;
        for (int j = 0; j < k; j++) {
            const float *d = deltas + (i * k + j) * 4;
            float dx = d[0] / c->wx, dy = d[1] / c->wy;
            float dw = d[2] / c->ww, dh = d[3] / c->wh;
            dw = dw > c->clip ? c->clip : dw;
            dh = dh > c->clip ? c->clip : dh;
            float px = dx * w + cx, py = dy * h + cy;
            float pw = expf(dw) * w, ph = expf(dh) * h;
            float hw = 0.5f * pw, hh = 0.5f * ph;
            float *o = out + (i * k + j) * 4;
            o[0] = px - hw;
            o[1] = py - hh;
            o[2] = px + hw;
            o[3] = py + hh;
        }
    }
}

static float clampf(float v, float hi) { return v < 0.0f ? 0.0f : (v > hi ? hi : v); }

void mrcnn_box_clip(int64_t n, float *boxes, int img_h, int img_w) {
    MRCNN_CHECK(img_h > 0 && img_w > 0, "box_clip: image size %dx%d must be positive", img_h, img_w);
    for (int64_t i = 0; i < n; i++) {
        float *b = boxes + 4 * i;
        b[0] = clampf(b[0], (float)img_w);
        b[1] = clampf(b[1], (float)img_h);
        b[2] = clampf(b[2], (float)img_w);
        b[3] = clampf(b[3], (float)img_h);
    }
}

int mrcnn_box_is_large(const float *box, float min_size) {
    return (box[2] - box[0]) >= min_size && (box[3] - box[1]) >= min_size;
}
