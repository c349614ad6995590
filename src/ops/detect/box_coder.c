/* torchvision's BoxCoder (encode_boxes / decode_single) and box clipping over arrays;
 * the per-box arithmetic is box_math.h's, shared with the CUDA kernels. */
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
    for (int64_t i = 0; i < n; i++) mrcnn_box_encode_one(c, targets + 4 * i, boxes + 4 * i, deltas + 4 * i);
}

void mrcnn_box_decode(const mrcnn_box_coder *c, int64_t n, int k, const float *deltas, const float *boxes,
                      float *out) {
    MRCNN_CHECK(n >= 0 && k > 0, "box_decode: bad count %lld or boxes per reference %d", (long long)n, k);
    MRCNN_CHECK(n == 0 || (c && deltas && boxes && out), "box_decode: NULL argument");
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            mrcnn_box_decode_one(c, deltas + (i * k + j) * 4, boxes + 4 * i, out + (i * k + j) * 4);
}

void mrcnn_box_clip(int64_t n, float *boxes, int img_h, int img_w) {
    MRCNN_CHECK(img_h > 0 && img_w > 0, "box_clip: image size %dx%d must be positive", img_h, img_w);
    for (int64_t i = 0; i < n; i++) {
        float *b = boxes + 4 * i;
        b[0] = mrcnn_box_clamp(b[0], (float)img_w);
        b[1] = mrcnn_box_clamp(b[1], (float)img_h);
        b[2] = mrcnn_box_clamp(b[2], (float)img_w);
        b[3] = mrcnn_box_clamp(b[3], (float)img_h);
    }
}

int mrcnn_box_is_large(const float *box, float min_size) {
    return (box[2] - box[0]) >= min_size && (box[3] - box[1]) >= min_size;
}
