/* Box primitives of the detector, with exactly torchvision's semantics
 * (torchvision/ops/boxes.py, models/detection/_utils.py, v0.14).
 *
 * A box is 4 floats (x1, y1, x2, y2) in input-image pixels, width = x2 - x1 (no +1).
 * Arrays of boxes are (n, 4) row-major. All functions here run on the host over
 * plain arrays; they are the CPU reference the CUDA versions are checked against.
 * The arithmetic on single boxes (IoU, encode, decode, clamp) is box_math.h's, which
 * both backends share. */
#ifndef MRCNN_BOXES_H
#define MRCNN_BOXES_H

#include <stdint.h>
#include "mrcnn/box_math.h"
#include "mrcnn/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* iou (n, m) = IoU of a (n, 4) against b (m, 4); 0/0 gives NaN as in torchvision
 * (degenerate boxes do not occur after remove_small). */
void mrcnn_box_iou(const float *a, int64_t n, const float *b, int64_t m, float *iou);

/* torchvision's BoxCoder (mrcnn_box_coder and the per-box math: box_math.h). */
mrcnn_box_coder mrcnn_box_coder_make(float wx, float wy, float ww, float wh);
/* deltas (n, 4) encoding targets (n, 4) (the reference/gt boxes) relative to
 * boxes (n, 4) (anchors or proposals): torchvision's encode_single(targets, boxes). */
void mrcnn_box_encode(const mrcnn_box_coder *c, int64_t n, const float *targets, const float *boxes,
                      float *deltas);
/* out (n, k, 4) = decode of deltas (n, k, 4) (k boxes per reference, e.g. one per
 * class) against boxes (n, 4). out may alias deltas. */
void mrcnn_box_decode(const mrcnn_box_coder *c, int64_t n, int k, const float *deltas, const float *boxes,
                      float *out);
/* Clamps x to [0, img_w] and y to [0, img_h] in place (clip_boxes_to_image). */
void mrcnn_box_clip(int64_t n, float *boxes, int img_h, int img_w);
/* 1 when both sides are >= min_size (remove_small_boxes keeps these). */
int mrcnn_box_is_large(const float *box, float min_size);

/* NMS as torchvision's CPU kernel: order by score descending (stable: on equal scores
 * the lower index first), keep a box unless it has IoU > thresh with an already kept
 * one. keep (capacity n) gets the kept indices in that order; returns their count.
 * batched_nms: boxes only suppress boxes with the same idxs[i] (class or level); idxs
 * NULL: one class (torchvision's nms). */
int64_t mrcnn_batched_nms(const float *boxes, const float *scores, const int32_t *idxs, int64_t n,
                          float thresh, int64_t *keep);

/* torchvision's Matcher. iou (g, n): ground truth by row. matches (n) gets the best gt
 * (first on ties, as torch.max), or MRCNN_MATCH_BELOW_LOW (< low) or
 * MRCNN_MATCH_BETWEEN (in [low, high)). allow_low_quality: every prediction that ties
 * for the best IoU of some gt gets back its best gt (set_low_quality_matches_). g = 0
 * is allowed here (all BELOW_LOW); torchvision's callers special-case it the same way. */
#define MRCNN_MATCH_BELOW_LOW (-1)
#define MRCNN_MATCH_BETWEEN (-2)
void mrcnn_matcher_match(const float *iou, int g, int64_t n, float high, float low, int allow_low_quality,
                         int32_t *matches);

/* BalancedPositiveNegativeSampler on labels (n): > 0 positive, 0 negative, < 0 ignored.
 * num_pos = min(#pos, (int)(batch * fraction)), num_neg = min(#neg, batch - num_pos).
 * When a class has no more candidates than it takes, it takes all of them and draws no
 * random numbers (the parity tests rely on this); otherwise a partial Fisher-Yates
 * shuffle on rng (positives draw from index 0, negatives from index 1 << 40).
 * pos_idx (capacity num_pos) and neg_idx (capacity num_neg) get the chosen indices in
 * ascending order (torchvision returns masks, so its order is the index order). */
void mrcnn_sample_balanced(const int32_t *labels, int64_t n, int batch_size, float positive_fraction,
                           const mrcnn_rng *rng, int64_t *pos_idx, int64_t *n_pos, int64_t *neg_idx,
                           int64_t *n_neg);

#ifdef __cplusplus
}
#endif
#endif
