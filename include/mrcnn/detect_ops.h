/* The detection stages of training as backend ops:
 * RPN targets, proposals, ROI sampling, mask targets and the per-class gathers run
 * where the tensors live, so a training step reads nothing back to the host. Every
 * output has a fixed capacity; where rows are compacted over the batch (ROIs, fg ROIs)
 * the valid rows come first in image order, padding rows after (image index -1, label
 * -1, weight 0: ROIAlign writes zeros for them, the losses and gathers skip them).
 * Counts are 1-element fp32 device tensors (exact below 2^24) that feed
 * mrcnn_loss_norm.count directly. Semantics are the host helpers' (proposals.h,
 * roi_targets.h), which the CPU backend runs (src/backend/cpu/backend_cpu_detect.c).
 * The entries themselves are the det lines of include/mrcnn/backend_ops.def. */
#ifndef MRCNN_DETECT_OPS_H
#define MRCNN_DETECT_OPS_H

#include <stdint.h>
#include "mrcnn/box_math.h"
#include "mrcnn/rng.h"
#include "mrcnn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most FPN levels a descriptor describes (model.h's MRCNN_FPN_LEVELS, P2..P6). */
#define MRCNN_DET_MAX_LEVELS 5

typedef struct mrcnn_backend mrcnn_backend;

/* The batch's ground truth on the device, uploaded once per step (uploads are allowed,
 * reads are not). */
typedef struct mrcnn_gt_batch {
    int n_images, max_gt;   // N, G (G >= 1 so that no tensor is empty)
    int mask_h, mask_w;     // H, W: the padded batch size
    mrcnn_tensor boxes;     // (N, G, 4) fp32, rows past counts[i] zero
    mrcnn_tensor labels;    // (N, G) int32, -1 past the count
    mrcnn_tensor counts;    // (N) int32
    mrcnn_tensor masks;     // (N, G, H, W) uint8: image i's masks cover its top-left image_hw[i]
                            // region (row stride W); mask targets use the image's own size as
                            // bounds, as the host helper does. Unused (data NULL) when the
                            // masks are compact (mask_crops below)
    mrcnn_tensor image_hw;  // (N, 2) int32: sizes before padding
    /* Compact masks (box_math.h's mrcnn_mask_crop), what the training step stages: mask j
     * of image i is zero outside its crop, whose pixels lie in mask_pool. The mask targets
     * equal those of the full masks bit for bit. mask_crops.data NULL: the full masks. */
    mrcnn_tensor mask_crops; // (N, G, MRCNN_MASK_CROP_WORDS) int32: offset, y0, x0, h, w
    mrcnn_tensor mask_pool;  // (bytes) uint8: the crops' pixels, row-major, one after the other
} mrcnn_gt_batch;

typedef struct mrcnn_rpn_targets_desc {
    int n_images, n_levels;
    int64_t level_counts[MRCNN_DET_MAX_LEVELS]; // H_l * W_l * A per image
    float fg_iou, bg_iou;                       // 0.7, 0.3
    int batch_size_per_image;                   // 256
    float positive_fraction;                    // 0.5
} mrcnn_rpn_targets_desc;

typedef struct mrcnn_proposals_desc {
    int n_images, n_levels;
    int64_t level_counts[MRCNN_DET_MAX_LEVELS];
    int pre_nms_top_n;  // per level, per image
    int post_nms_top_n; // per image: capacity P of the outputs
    float nms_thresh, min_size, score_thresh;
} mrcnn_proposals_desc;

typedef struct mrcnn_roi_sample_desc {
    int n_images;
    int prop_cap;             // P: rows per image of the proposals
    int batch_size_per_image; // S
    int max_fg;               // F (MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE); more positives fail naming the key
    float positive_fraction, iou_thresh;
    mrcnn_box_coder coder;    // (10, 10, 5, 5)
} mrcnn_roi_sample_desc;

/* Inference's box post-processing, per image as postprocess.h's mrcnn_detect_postprocess
 * (torchvision's RoIHeads.postprocess_detections). */
typedef struct mrcnn_detect_desc {
    int n_images;         // N
    int num_classes;      // K including background (column 0)
    int max_detections;   // D: the capacity per image
    float score_thresh;   // kept when score > thresh
    float nms_thresh;     // per class
    float min_size;       // boxes narrower or lower than this are dropped
    mrcnn_box_coder coder; // (10, 10, 5, 5)
} mrcnn_detect_desc;

/* RNG: rngs is an (N, MRCNN_RNG_WORDS) int32 tensor on the backend's device, row i the
 * five words of image i's mrcnn_rng (key[0], key[1], ctr[0], ctr[1], ctr[2], the struct's
 * bytes), keyed as the host helpers key them (mrcnn_rng_make(seed, epoch, image index,
 * MRCNN_RNG_RPN_SAMPLE / MRCNN_RNG_ROI_SAMPLE)). Device data rather than host values
 * passed into the kernels: the streams change every batch, and a captured step (a CUDA
 * graph) replays the same calls, so the host stages them into device memory instead.
 * Same streams, same draws: the results equal the host helpers' exactly. */
#define MRCNN_RNG_WORDS 5
/* Candidates per image a GPU's detect_boxes keeps for its NMS (its sort and mask fit). */
#define MRCNN_DETECT_MAX_CANDIDATES 16384

#ifdef __cplusplus
}
#endif
#endif
