/* RPN targets, RPN sampling and proposals, with torchvision's semantics
 * (RegionProposalNetwork, v0.14). Anchors and head outputs follow the layout contract
 * of anchors.h: per image, the anchors of all levels concatenated, each level in
 * (y, x, anchor) order. Host functions over plain float arrays. */
#ifndef MRCNN_PROPOSALS_H
#define MRCNN_PROPOSALS_H

#include <stdint.h>
#include "mrcnn/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* assign_targets_to_anchors + encode for one image. labels (n_anchors) gets 1 (fg),
 * 0 (bg, IoU < bg_iou) or -1 (ignored, between); reg_targets (n_anchors, 4) the
 * (1, 1, 1, 1)-encoded deltas of the matched gt (of gt 0 for non-fg anchors, as
 * torchvision's clamp(min=0)). n_gt = 0: every label 0 and all targets 0 (torchvision
 * encodes zero boxes there, giving -inf that no loss reads; zeros keep weighted sums finite).
 * Matching: IoU >= fg_iou fg, allow_low_quality_matches on. */
void mrcnn_rpn_assign_targets(const float *anchors, int64_t n_anchors, const float *gt_boxes, int n_gt,
                              float fg_iou, float bg_iou, float *labels, float *reg_targets);

/* Balanced sampling of one image's anchor labels (from mrcnn_rpn_assign_targets),
 * written as dense 0/1 weights so that the losses are plain weighted sums:
 * obj_weight (n_anchors) = 1 for every sampled anchor, box_weight (n_anchors, 4) = 1
 * for the 4 deltas of every sampled positive. Returns the sampled count of the image;
 * torchvision normalizes both RPN losses by the sum of these over the batch.
 * rng: mrcnn_rng_make(seed, epoch, global image index, MRCNN_RNG_RPN_SAMPLE). */
int64_t mrcnn_rpn_sample(const float *labels, int64_t n_anchors, int batch_size, float positive_fraction,
                         const mrcnn_rng *rng, float *obj_weight, float *box_weight);

typedef struct mrcnn_proposal_params {
    int pre_nms_top_n;  // per level, per image (2000 train / 1000 test)
    int post_nms_top_n; // per image: the capacity of the output (2000 train / 1000 test)
    float nms_thresh;   // 0.7
    float min_size;     // torchvision's RPN uses 1e-3 (a fixed attribute, not a config key)
    float score_thresh; // on sigmoid(objectness), kept when >=; 0
} mrcnn_proposal_params;

/* filter_proposals for a batch. Per level l: objectness[l] (N, H_l, W_l, A) logits and
 * deltas[l] (N, H_l, W_l, A * 4) (the RPN head's NHWC outputs, also read as
 * (N, level_counts[l]) and (N, level_counts[l], 4)); anchors (sum of level_counts, 4)
 * of all levels (mrcnn_anchors_generate, the same for every image). image_hw (N, 2):
 * each image's size before padding (clip bound). Per image: top pre_nms_top_n per level
 * by logit, decode (1, 1, 1, 1), clip, drop small, score threshold, NMS per level,
 * keep the first post_nms_top_n by score.
 * Outputs (fixed capacity P = post_nms_top_n): boxes (N, P, 4), scores (N, P)
 * (sigmoid probabilities, descending; may be NULL), counts (N); rows past the count
 * are zero. */
void mrcnn_rpn_proposals(const mrcnn_proposal_params *p, int n_images, int n_levels, const int64_t *level_counts,
                         const float *const *objectness, const float *const *deltas, const float *anchors,
                         const int *image_hw, float *boxes, float *scores, int64_t *counts);

#ifdef __cplusplus
}
#endif
#endif
