#include "test_scene.h"

#include <stdio.h>
#include <stdlib.h>

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
