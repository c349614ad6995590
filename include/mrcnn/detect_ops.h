/* The detection stages of training as backend ops:
 * RPN targets, proposals, ROI sampling, mask targets and the per-class gathers run
 * where the tensors live, so a training step reads nothing back to the host. Every
 * output has a fixed capacity; where rows are compacted over the batch (ROIs, fg ROIs)
 * the valid rows come first in image order, padding rows after (image index -1, label
 * -1, weight 0: ROIAlign writes zeros for them, the losses and gathers skip them).
 * Counts are 1-element fp32 device tensors (exact below 2^24) that feed
 * mrcnn_loss_norm.count directly. Semantics are the host helpers' (proposals.h,
 * roi_targets.h), which the CPU backend runs (src/backend/cpu/backend_cpu_detect.c). */
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
typedef struct mrcnn_backend_detect {
    /* RPN: assign targets (IoU fg / bg, low-quality matches), encode (1, 1, 1, 1),
     * balanced sampling, then scatter level-major as the RPN head's NHWC outputs. */
    void (*rpn_targets)(const mrcnn_backend *be, const mrcnn_rpn_targets_desc *d,
                        const mrcnn_tensor *anchors,   // (A_total, 4) fp32, all levels of one image
                        const mrcnn_gt_batch *gt,
                        const mrcnn_tensor *rngs,      // (N, MRCNN_RNG_WORDS) int32: MRCNN_RNG_RPN_SAMPLE streams
                        mrcnn_tensor *labels,          // [n_levels] each (N, H_l, W_l, A) fp32 0/1
                        mrcnn_tensor *obj_weights,     // [n_levels] same shape, 1 = sampled
                        mrcnn_tensor *reg_targets,     // [n_levels] (N, H_l, W_l, 4A) fp32
                        mrcnn_tensor *reg_weights,     // [n_levels] same, 1 on the 4 deltas of sampled positives
                        mrcnn_tensor *n_sampled);      // (1) fp32: sampled anchors over this rank's batch
    /* Proposals: per image, per level top pre_nms_top_n by logit, decode, clip to
     * image_hw, drop small, score threshold, NMS per level, keep post_nms_top_n. */
    void (*proposals)(const mrcnn_backend *be, const mrcnn_proposals_desc *d,
                      const mrcnn_tensor *logits,   // [n_levels] (N, H_l, W_l, A) any float dtype
                      const mrcnn_tensor *deltas,   // [n_levels] (N, H_l, W_l, 4A) any float dtype
                      const mrcnn_tensor *anchors,  // (A_total, 4) fp32
                      const mrcnn_tensor *image_hw, // (N, 2) int32
                      mrcnn_tensor *boxes,          // (N, P, 4) fp32, rows past the count zero
                      mrcnn_tensor *scores,         // (N, P) fp32 sigmoid, descending
                      mrcnn_tensor *counts);        // (N) int32
    /* ROI sampling (gt appended to the proposals, match at iou_thresh, balanced
     * sampling, encode with coder), compacted over the batch, valid rows first. */
    void (*roi_sample)(const mrcnn_backend *be, const mrcnn_roi_sample_desc *d,
                       const mrcnn_tensor *proposals, // (N, P, 4) fp32
                       const mrcnn_tensor *counts,    // (N) int32
                       const mrcnn_gt_batch *gt,
                       const mrcnn_tensor *rngs,   // (N, MRCNN_RNG_WORDS) int32: MRCNN_RNG_ROI_SAMPLE streams
                       mrcnn_tensor *rois,         // (N*S, 5) fp32 (image, x1, y1, x2, y2); padding image -1
                       mrcnn_tensor *labels,       // (N*S) int32: 0 bg, 1..K-1 fg, -1 padding
                       mrcnn_tensor *box_labels,   // (N*S) int32: the label on fg rows, -1 elsewhere
                       mrcnn_tensor *reg_targets,  // (N*S, 4) fp32
                       mrcnn_tensor *reg_weights,  // (N*S, 4) fp32: 1 on fg rows
                       mrcnn_tensor *fg_rois,      // (N*F, 5) fp32, padding image -1
                       mrcnn_tensor *fg_labels,    // (N*F) int32, -1 padding
                       mrcnn_tensor *fg_gt,        // (N*F) int32: matched gt as image*G + j, -1 padding
                       mrcnn_tensor *n_rois,       // (1) fp32
                       mrcnn_tensor *n_fg);        // (1) fp32
    /* Mask targets of the fg rows: roi_align of the matched gt mask (the image's own
     * size as bounds), m x m; weights 1 on valid rows, 0 on padding rows. rows = the
     * first dimension of fg_rois, fg_gt, targets and weights (any prefix of the
     * capacity: the model trims when it can). */
    void (*mask_targets)(const mrcnn_backend *be, const mrcnn_gt_batch *gt,
                         const mrcnn_tensor *fg_rois, // (rows, 5) fp32
                         const mrcnn_tensor *fg_gt,   // (rows) int32
                         int m,
                         mrcnn_tensor *targets,       // (rows, m, m) fp32
                         mrcnn_tensor *weights);      // (rows, m, m) fp32, or NULL (rows trimmed: no padding)
    /* Per-ROI slices of the predicted class for the box and mask losses: labels (R)
     * int32 (< 0: zeros, no gradient); masks x (R, M, M, K) -> y (R, M, M), deltas
     * x (R, 4K) -> y (R, 4); x in any float dtype, y fp32. Backward adds dy into the
     * label's slice of dx. */
    void (*gather_class_masks)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                               mrcnn_tensor *y);
    void (*gather_class_masks_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy,
                                        const mrcnn_tensor *labels, mrcnn_tensor *dx);
    void (*gather_class_deltas)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                                mrcnn_tensor *y);
    void (*gather_class_deltas_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy,
                                         const mrcnn_tensor *labels, mrcnn_tensor *dx);
    /* Inference (mrcnn_model_detect), so that a batch's detections come back to the host
     * in one read. proposal_rois: the proposals as ROI rows (image, x1, y1, x2, y2),
     * compacted over the batch (valid rows first, in image order; padding rows image -1,
     * zeros), n_rois (1) fp32 their count. */
    void (*proposal_rois)(const mrcnn_backend *be,
                          const mrcnn_tensor *proposals, // (N, P, 4) fp32
                          const mrcnn_tensor *counts,    // (N) int32
                          mrcnn_tensor *rois,            // (N*P, 5) fp32
                          mrcnn_tensor *n_rois);         // (1) fp32
    /* The box head's outputs on rois (padding rows skipped) post-processed per image as
     * mrcnn_detect_postprocess: softmax, per-class decode, clip to image_hw, score and
     * size thresholds, per-class NMS, the best max_detections. The detections are
     * compacted over the batch: image order, by descending score within an image (that
     * function's order); padding rows image -1, zero box and score, label -1. A GPU keeps
     * at most MRCNN_DETECT_MAX_CANDIDATES (class, box) candidates per image before the NMS,
     * the highest-scoring ones. */
    void (*detect_boxes)(const mrcnn_backend *be, const mrcnn_detect_desc *d,
                         const mrcnn_tensor *logits,   // (R, K) any float dtype
                         const mrcnn_tensor *deltas,   // (R, 4K) any float dtype
                         const mrcnn_tensor *rois,     // (R, 5) fp32, as proposal_rois makes them
                         const mrcnn_tensor *image_hw, // (N, 2) int32
                         mrcnn_tensor *boxes,          // (N*D, 5) fp32 (image, x1, y1, x2, y2)
                         mrcnn_tensor *scores,         // (N*D) fp32
                         mrcnn_tensor *labels,         // (N*D) int32, 1..K-1
                         mrcnn_tensor *count);         // (1) fp32: the valid rows
    /* maskrcnn_inference: y (R, M, M) fp32 = sigmoid of channel labels[r] of the mask
     * logits x (R, M, M, K) (any float dtype), as mrcnn_mask_probs; rows whose label is
     * outside [0, K) get zeros. */
    void (*mask_probs)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels, mrcnn_tensor *y);
    /* The value of a 1-element count tensor when the host can see it WITHOUT waiting
     * for the device (the CPU backend, whose memory is the host's: not a read), else -1
     * (CUDA). The model trims the ROI heads to the valid rows when it can and runs the
     * full capacity otherwise, so no step waits on a count. NULL entry: -1. A backend
     * that answers (>= 0) makes the step's calls depend on the data, so its shape key
     * (mrcnn_model_stage) is 0: such a step is never replayed as a graph. */
    int64_t (*count_hint)(const mrcnn_backend *be, const mrcnn_tensor *count);
} mrcnn_backend_detect;

#ifdef __cplusplus
}
#endif
#endif
