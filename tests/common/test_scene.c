#include "test_scene.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/rng.h"

void test_scene_draw(float *image, uint8_t *mask, int h, int w, const float b[4], int cls, bool ellipse) {
    float cx = 0.5f * (b[0] + b[2]), cy = 0.5f * (b[1] + b[3]);
    float rx = 0.5f * (b[2] - b[0]), ry = 0.5f * (b[3] - b[1]);
    for (int y = (int)b[1]; y < (int)b[3]; y++)
        for (int x = (int)b[0]; x < (int)b[2]; x++) {
            float dx = (x + 0.5f - cx) / rx, dy = (y + 0.5f - cy) / ry;
            if (ellipse && dx * dx + dy * dy > 1) continue;
            mask[(size_t)y * w + x] = 1;
            float *px = image + ((size_t)y * w + x) * 3;
            px[0] = cls == 1 ? 1.0f : -0.5f;
            px[1] = cls == 2 ? 1.0f : -0.5f;
            px[2] = cls == 3 ? 1.0f : -0.5f;
        }
    (void)h;
}

void test_tiny_config(mrcnn_config *cfg) {
    mrcnn_config_defaults(cfg);
    char path[512];
    snprintf(path, sizeof path, "%s/configs/tiny.yaml", getenv("ROOT") ? getenv("ROOT") : ".");
    mrcnn_config_load(cfg, path);
}

void test_batch_make(test_batch *s, uint64_t seed) {
    enum { N = TEST_BATCH_N, H = TEST_BATCH_H, W = TEST_BATCH_W, G = TEST_BATCH_G };
    memset(s, 0, sizeof *s);
    mrcnn_rng r = mrcnn_rng_make(seed, 0, 0, MRCNN_RNG_TEST);
    uint64_t k = 0;
    for (int i = 0; i < N * H * W * 3; i++) s->images[i] = 0.2f * (mrcnn_rng_uniform(&r, k++) - 0.5f);
    for (int i = 0; i < N; i++) {
        s->hw[2 * i] = H;
        s->hw[2 * i + 1] = W;
        for (int g = 0; g < G; g++) {
            float bw = 24 + 40 * mrcnn_rng_uniform(&r, k++), bh = 24 + 40 * mrcnn_rng_uniform(&r, k++);
            float x1 = (W - bw) * mrcnn_rng_uniform(&r, k++), y1 = (H - bh) * mrcnn_rng_uniform(&r, k++);
            float *b = s->boxes[i] + g * 4;
            b[0] = floorf(x1);
            b[1] = floorf(y1);
            b[2] = floorf(x1 + bw);
            b[3] = floorf(y1 + bh);
            s->labels[i][g] = 1 + g % 3;
            test_scene_draw(s->images + (size_t)i * H * W * 3, s->masks[i] + (size_t)g * H * W, H, W, b,
                            s->labels[i][g], g % 2 == 1);
        }
        s->gt[i] = (mrcnn_image_gt){G, s->boxes[i], s->labels[i], s->masks[i]};
    }
}
