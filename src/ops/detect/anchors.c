/* torchvision's AnchorGenerator: rounded zero-centered cell anchors shifted over each
 * level's grid, in the (y, x, anchor) order of the RPN head's NHWC outputs (the shift is
 * box_math.h's, shared with the CUDA kernel). */
#include <math.h>

#include "mrcnn/anchors.h"
#include "mrcnn/box_math.h"
#include "mrcnn/check.h"

void mrcnn_anchors_cell(float size, const float *ratios, int n_ratios, float *cell) {
    MRCNN_CHECK(size > 0 && n_ratios > 0, "anchors_cell: size %g and ratio count %d must be positive", (double)size,
                n_ratios);
    for (int r = 0; r < n_ratios; r++) {
        MRCNN_CHECK(ratios[r] > 0, "anchors_cell: aspect ratio %d is %g, must be positive", r, (double)ratios[r]);
        float hr = sqrtf(ratios[r]);
        float wr = 1.0f / hr;
        float ws = wr * size, hs = hr * size;
        /* torch.round rounds half to even, as rintf in the default rounding mode. */
        cell[4 * r + 0] = rintf(-ws / 2.0f);
        cell[4 * r + 1] = rintf(-hs / 2.0f);
        cell[4 * r + 2] = rintf(ws / 2.0f);
        cell[4 * r + 3] = rintf(hs / 2.0f);
    }
}

void mrcnn_anchors_grid(const float *cell, int n_cell, int grid_h, int grid_w, int stride_h, int stride_w,
                        float *anchors) {
    MRCNN_CHECK(n_cell > 0 && grid_h > 0 && grid_w > 0 && stride_h > 0 && stride_w > 0,
                "anchors_grid: cells %d, grid %dx%d, stride %dx%d must be positive", n_cell, grid_h, grid_w, stride_h,
                stride_w);
    for (int y = 0; y < grid_h; y++)
        for (int x = 0; x < grid_w; x++)
            for (int a = 0; a < n_cell; a++) {
                float *o = anchors + (((int64_t)y * grid_w + x) * n_cell + a) * 4;
                for (int k = 0; k < 4; k++) o[k] = mrcnn_anchor_coord(cell, a, k, y, x, stride_h, stride_w);
            }
}

int64_t mrcnn_anchors_generate(int n_levels, const int *sizes, const float *ratios, int n_ratios,
                               const int *grid_h, const int *grid_w, int image_h, int image_w,
                               float *anchors, int64_t *level_counts) {
    MRCNN_CHECK(n_levels > 0 && n_ratios > 0 && n_ratios <= 64, "anchors_generate: %d levels, %d ratios", n_levels,
                n_ratios);
    MRCNN_CHECK(image_h > 0 && image_w > 0, "anchors_generate: image %dx%d must be positive", image_h, image_w);
    int64_t total = 0;
    for (int l = 0; l < n_levels; l++) {
        MRCNN_CHECK(grid_h[l] > 0 && grid_w[l] > 0 && grid_h[l] <= image_h && grid_w[l] <= image_w,
                    "anchors_generate: level %d grid %dx%d does not fit the image %dx%d", l, grid_h[l], grid_w[l],
                    image_h, image_w);
        int64_t count = (int64_t)grid_h[l] * grid_w[l] * n_ratios;
        if (anchors) {
            float cell[64 * 4];
            mrcnn_anchors_cell((float)sizes[l], ratios, n_ratios, cell);
            /* torchvision's stride: padded image size // grid size. */
            mrcnn_anchors_grid(cell, n_ratios, grid_h[l], grid_w[l], image_h / grid_h[l], image_w / grid_w[l],
                               anchors + total * 4);
        }
        if (level_counts) level_counts[l] = count;
        total += count;
    }
    return total;
}
