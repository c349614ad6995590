/* Inference post-processing with torchvision's semantics (RoIHeads.postprocess_detections,
 * maskrcnn_inference, GeneralizedRCNNTransform.postprocess, paste_masks_in_image,
 * v0.14). Host functions over plain arrays. */
#ifndef MRCNN_POSTPROCESS_H
#define MRCNN_POSTPROCESS_H

#include <stdint.h>
#include "mrcnn/boxes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_detect_params {
    int num_classes;      // K including background (column 0)
    float score_thresh;   // 0.05: kept when score > thresh
    float nms_thresh;     // 0.5, per class
    int max_detections;   // 100: the capacity D of the outputs
    float min_size;       // torchvision uses 1e-2 (fixed, not a config key)
    mrcnn_box_coder coder; // (10, 10, 5, 5)
} mrcnn_detect_params;

/* postprocess_detections for one image: class_logits (r, K), box_deltas (r, K * 4)
 * (class-major, the box predictor's layout), proposals (r, 4), the image size before
 * padding (clip bound). Softmax, decode per class, clip, drop background, score > thresh,
 * drop small, NMS per class, the first D by score.
 * Outputs (capacity D): boxes (D, 4), scores (D), labels (D) in 1..K-1; rows past the
 * count are zero. Returns the count. */
int mrcnn_detect_postprocess(const mrcnn_detect_params *p, int r, const float *class_logits,
                             const float *box_deltas, const float *proposals, int img_h, int img_w,
                             float *boxes, float *scores, int32_t *labels);

/* maskrcnn_inference: probs (n, m, m) = sigmoid of channel labels[i] of the mask
 * logits (n, m, m, k) (NHWC). */
void mrcnn_mask_probs(int n, int m, int k, const float *logits, const int32_t *labels, float *probs);

/* resize_boxes: boxes (n, 4) from a resized image (from_h, from_w) back to the original
 * (to_h, to_w), in place, with torchvision's float ratios. */
void mrcnn_boxes_rescale(int64_t n, float *boxes, int from_h, int from_w, int to_h, int to_w);

/* paste_masks_in_image for one mask: mask (m, m) probabilities, box (4) in the output
 * image's pixels; out (img_h, img_w) gets the mask expanded by 1 pixel of padding,
 * resized bilinearly (align_corners = False) to the integer box and pasted, zero
 * elsewhere. out_u8 variant: out = prob > thresh (torchvision users threshold at 0.5). */
void mrcnn_paste_mask(const float *mask, int m, const float *box, int img_h, int img_w, float *out);
void mrcnn_paste_mask_u8(const float *mask, int m, const float *box, int img_h, int img_w, float thresh,
                         uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
