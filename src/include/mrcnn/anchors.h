/* Anchor generator with torchvision's semantics (AnchorGenerator, v0.14): one size per
 * level, aspect ratios r = h / w; cell anchors round(+-(w, h) / 2) with w = size /
 * sqrt(r), h = size * sqrt(r); shifted by the level stride = padded image size // grid.
 *
 * Layout contract with the RPN head: the head writes objectness (N, H, W, A) and deltas
 * (N, H, W, A * 4) per level (NHWC), and anchors of a level are (H, W, A, 4) in the same
 * (y, x, anchor) order, so anchor i of a level pairs with objectness[n][i] and
 * deltas[n][i * 4 .. i * 4 + 3]. This is torchvision's permute_and_flatten order.
 * Levels are concatenated in order (P2, ..., P6) wherever "all levels" is said. */
#ifndef MRCNN_ANCHORS_H
#define MRCNN_ANCHORS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cell (n_ratios, 4): zero-centered anchors of one size, rounded as torchvision. */
void mrcnn_anchors_cell(float size, const float *ratios, int n_ratios, float *cell);

/* anchors (grid_h, grid_w, n_cell, 4) = cell shifted by (x * stride_w, y * stride_h). */
void mrcnn_anchors_grid(const float *cell, int n_cell, int grid_h, int grid_w, int stride_h, int stride_w,
                        float *anchors);

/* Anchors of all levels for a padded batch of image_h x image_w: level l has grid
 * grid_h[l] x grid_w[l], size sizes[l], stride image // grid. anchors gets
 * (sum_l grid_h[l] * grid_w[l] * n_ratios, 4); level_counts (n_levels) the per-level
 * counts (may be NULL). Returns the total, so call once with anchors = NULL to size it. */
int64_t mrcnn_anchors_generate(int n_levels, const int *sizes, const float *ratios, int n_ratios,
                               const int *grid_h, const int *grid_w, int image_h, int image_w,
                               float *anchors, int64_t *level_counts);

#ifdef __cplusplus
}
#endif
#endif
