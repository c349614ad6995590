/* Multi-level ROIAlign with torchvision's semantics (ops.roi_align and
 * ops.MultiScaleRoIAlign, v0.14), over NHWC features, all images and all levels in one
 * call. Forward and backward (to the features only: the boxes are constants, as in
 * torchvision).
 *
 * rois (R, 5) rows are (image index, x1, y1, x2, y2) in input-image pixels, the format
 * of torchvision's roi_align. A row with image index < 0 is padding (fixed-capacity
 * arrays): its output is zero and it gets no gradient. An image index >= n_images (or
 * NaN) is an error. A roi whose box cannot be sampled is empty, like padding: a NaN or
 * +-Inf coordinate, a width or height that overflows, or, with adaptive sampling
 * (sampling_ratio <= 0), a grid of fewer than 1 or more than 1024 points per axis and
 * bin (a box over 7000 feature pixels across; torchvision's kernel casts such values to
 * int, which is undefined). A sampling point outside [-1, H] x [-1, W] adds nothing, as
 * in torchvision.
 * Level of a roi (LevelMapper): floor(canonical_level + log2(sqrt(area) / canonical_scale)
 * + 1e-6) clamped to [first_level, first_level + n_levels - 1], in float as torchvision.
 * The level and the sampling arithmetic are box_math.h's, the one implementation of
 * every backend (mrcnn_roi_level); the descriptor check is defined with the op
 * (src/ops/roi_align.c), mrcnn_roi_align_desc_make with the model's defaults.
 * Level l (0-based among the inputs) has spatial scale 1 / 2^(first_level + l).
 * Output y (R, out_h, out_w, C): NHWC, so the box head's flatten is (7, 7, C) order.
 *
 * The op is compiled for float (mrcnn_roi_align_*) and double (mrcnn_roi_align_*_f64)
 * from src/ops/roi_align.c, so finite-difference checks run in double. */
#ifndef MRCNN_ROI_ALIGN_H
#define MRCNN_ROI_ALIGN_H

/* A roi whose adaptive grid (sampling_ratio <= 0) would hold more sampling points than
 * this per axis and bin is empty, on every backend: no box inside an image comes near it. */
#define MRCNN_ROI_ALIGN_MAX_GRID 1024

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_ROI_MAX_LEVELS 8

typedef struct mrcnn_roi_align_desc {
    int n_images, channels;                // N, C of every level
    int n_levels;                          // 4 (P2..P5); 1 with first_level = 0 gives plain roi_align
    int first_level;                       // 2: level l has scale 1 / 2^(first_level + l)
    int level_h[MRCNN_ROI_MAX_LEVELS];     // H_l
    int level_w[MRCNN_ROI_MAX_LEVELS];     // W_l
    float spatial_scale[MRCNN_ROI_MAX_LEVELS]; // 1 / 2^(first_level + l), or set by hand
    int canonical_level;                   // 4
    float canonical_scale;                 // 224
    int out_h, out_w;                      // 7 (box head) or 14 (mask head)
    int sampling_ratio;                    // 2; <= 0: adaptive ceil(roi_size / out)
    int aligned;                           // 0 as torchvision's MultiScaleRoIAlign; 1 shifts by -0.5
} mrcnn_roi_align_desc;

/* A descriptor with torchvision's defaults (canonical 4 / 224) and the scales of
 * levels first_level.. ; level_h/level_w (n_levels). */
mrcnn_roi_align_desc mrcnn_roi_align_desc_make(int n_images, int channels, int n_levels, int first_level,
                                               const int *level_h, const int *level_w, int out_hw,
                                               int sampling_ratio, int aligned);
/* Fails naming the bad field. */
void mrcnn_roi_align_desc_check(const mrcnn_roi_align_desc *d);

#define MRCNN_ROI_ALIGN_DECL(REAL, NAME)                                                              \
    /* feats[l] (N, H_l, W_l, C); rois (R, 5); y (R, out_h, out_w, C) overwritten. */                 \
    void NAME(forward)(const mrcnn_roi_align_desc *d, const REAL *const *feats, int64_t r,            \
                       const REAL *rois, REAL *y);                                                    \
    /* dfeats[l] (N, H_l, W_l, C) += the adjoint of forward applied to dy (R, out_h, out_w, C);       \
     * a NULL dfeats[l] is skipped. */                                                                 \
    void NAME(backward)(const mrcnn_roi_align_desc *d, int64_t r, const REAL *rois, const REAL *dy,    \
                        REAL *const *dfeats);                                                          \
    /* The same adjoint by gather, without a write shared between bins: every (roi, bin)'s \
     * taps merged per pixel are listed, sorted by pixel (stably), and each pixel's list is \
     * summed per channel and added to dfeats in one rounding. Deterministic; equal to       \
     * backward up to the order of the sum (its rounding bound: tests/ops/test_roi_align_gather.c). */ \
    void NAME(backward_gather)(const mrcnn_roi_align_desc *d, int64_t r, const REAL *rois,            \
                               const REAL *dy, REAL *const *dfeats);

/* MRCNN_ROI_BWD: which backward the backends run, read at every call: unset, empty or
 * "scatter" (0: per-element adds, atomics on the GPU), "gather" (1: backward_gather's
 * sorted lists; on the GPU for sampling_ratio 1..4, else the scatter). Anything else fails. */
int mrcnn_roi_align_bwd_gather(void);

#define MRCNN_ROI_ALIGN_NAME_F32(x) mrcnn_roi_align_##x
#define MRCNN_ROI_ALIGN_NAME_F64(x) mrcnn_roi_align_##x##_f64
MRCNN_ROI_ALIGN_DECL(float, MRCNN_ROI_ALIGN_NAME_F32)
MRCNN_ROI_ALIGN_DECL(double, MRCNN_ROI_ALIGN_NAME_F64)

#ifdef __cplusplus
}
#endif
#endif
