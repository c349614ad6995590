/* Training targets of the ROI heads, with torchvision's semantics (RoIHeads,
 * v0.14): proposal sampling with the gt boxes appended, box regression targets,
 * mask targets, and the per-class gathers the box and mask losses need.
 * Host functions over plain arrays. */
#ifndef MRCNN_ROI_TARGETS_H
#define MRCNN_ROI_TARGETS_H

#include <stddef.h>
#include <stdint.h>
#include "mrcnn/boxes.h"
#include "mrcnn/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_roi_sample_params {
    int batch_size_per_image; // 512: the capacity S of the per-image outputs
    float positive_fraction;  // 0.25
    float iou_thresh;         // 0.5: fg at or above, bg below (no ignored band, no low-quality matches)
    int max_fg;               // MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE (128): capacity F of fg_index;
                              // more sampled positives than this is an error naming the key
    mrcnn_box_coder coder;    // (10, 10, 5, 5)
} mrcnn_roi_sample_params;

/* select_training_samples for one image. Candidates are proposals (n_prop, 4) followed
 * by gt_boxes (n_gt, 4) (add_gt_proposals); gt_labels (n_gt) in 1..K. Matching at
 * iou_thresh; background label 0; sampling as mrcnn_sample_balanced on
 * rng = mrcnn_rng_make(seed, epoch, global image index, MRCNN_RNG_ROI_SAMPLE).
 * The sampled candidates keep torchvision's order (ascending candidate index, positives
 * and negatives mixed). Outputs, fixed capacity S = batch_size_per_image:
 *   rois (S, 4), labels (S) (0 = background, -1 in rows past the count),
 *   matched_gt (S) (gt index of each roi; 0 for background as torchvision's clamp),
 *   reg_targets (S, 4) (encode of the matched gt against the roi for the positives;
 *   zero for background rows, which no loss reads),
 *   fg_index (F = max_fg): positions in rois of the positives, in order, for the mask
 *   head; *n_fg their count. Rows past the count are zero. Returns the count.
 * n_gt = 0 is allowed: every candidate is background (torchvision's dummy gt). */
int mrcnn_roi_sample(const mrcnn_roi_sample_params *p, const float *proposals, int n_prop,
                     const float *gt_boxes, const int32_t *gt_labels, int n_gt, const mrcnn_rng *rng,
                     float *rois, int32_t *labels, int32_t *matched_gt, float *reg_targets, int32_t *fg_index,
                     int *n_fg);

/* project_masks_on_boxes: targets (n, m, m) = roi_align of gt mask gt_index[i]
 * (gt_masks (n_gt, img_h, img_w), uint8, nonzero inside) over boxes (n, 4), spatial
 * scale 1, adaptive sampling ratio (ceil(roi_size / m)), aligned = False. The values are
 * fractions in [0, 1], not thresholded: torchvision's BCE takes them as they are. */
void mrcnn_mask_targets(const uint8_t *gt_masks, int n_gt, int img_h, int img_w, const float *boxes,
                        const int32_t *gt_index, int n, int m, float *targets);
/* The same targets from compact masks (box_math.h's mrcnn_mask_crop): crops (n_gt,
 * MRCNN_MASK_CROP_WORDS) int32 into pool (pool_bytes), each inside the image and the
 * pool; bit for bit mrcnn_mask_targets of the full masks. */
void mrcnn_mask_targets_cropped(const uint8_t *pool, int64_t pool_bytes, const int32_t *crops, int n_gt, int img_h,
                                int img_w, const float *boxes, const int32_t *gt_index, int n, int m, float *targets);

/* Compact ground truth for a batch (the staging of a training step): crops (N, G,
 * MRCNN_MASK_CROP_WORDS) int32, mask j < counts[i] of image i kept as the rectangle
 * around its nonzero pixels, packed one after the other; rows past a count are zeros
 * (empty). masks (N * G): mask j of image i is hw[2i] rows of hw[2i+1] uint8, the first
 * at masks[i * G + j], each next one strides[i] bytes further (strides NULL: hw[2i+1]),
 * so a mask may be read in place inside a larger buffer (the loader's padded canvas).
 * Returns the pool bytes the crops need (fails above INT32_MAX). */
size_t mrcnn_mask_crops_make(const uint8_t *const *masks, const int *strides, const int *counts, const int *hw,
                             int N, int G, int32_t *crops);
/* Copies the crops' pixels into pool (at least what mrcnn_mask_crops_make returned). */
void mrcnn_mask_crops_copy(const uint8_t *const *masks, const int *strides, const int *counts, const int *hw, int N,
                           int G, const int32_t *crops, uint8_t *pool);

/* Per-class gathers, for the losses on the gt class only.
 * Box deltas (n, k, 4) (the box predictor's (n, k * 4)): out (n, 4) = deltas[i][labels[i]];
 * backward: ddeltas[i][labels[i]] += dout[i]. Rows with labels[i] < 0 are skipped
 * (out zero). */
void mrcnn_gather_class_deltas(int n, int k, const float *deltas, const int32_t *labels, float *out);
void mrcnn_gather_class_deltas_backward(int n, int k, const float *dout, const int32_t *labels,
                                        float *ddeltas);
/* Mask logits (n, m, m, k) NHWC: out (n, m, m) = channel labels[i] of roi i;
 * backward: dlogits[i][..][labels[i]] += dout[i]. Rows with labels[i] < 0 are skipped. */
void mrcnn_gather_class_masks(int n, int m, int k, const float *logits, const int32_t *labels, float *out);
void mrcnn_gather_class_masks_backward(int n, int m, int k, const float *dout, const int32_t *labels,
                                       float *dlogits);

#ifdef __cplusplus
}
#endif
#endif
