/* The three heads: the RPN head on the P levels, the box head and the mask head on
 * pooled ROI features. Each head owns its layers, its forward and backward, and its
 * training targets and losses (src/model/heads/rpn_head.c, box_head.c, mask_head.c); the
 * training step (model.h, src/model/maskrcnn.c) orders the stages. */
#ifndef MRCNN_HEADS_H
#define MRCNN_HEADS_H

#include <stdbool.h>
#include "mrcnn/backbone.h"
#include "mrcnn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The training step's batch and state (model.h): the targets and losses read the
 * batch's ground truth and write into the step. */
typedef struct mrcnn_batch mrcnn_batch;
typedef struct mrcnn_pass mrcnn_pass;

typedef struct mrcnn_rpn_head {
    mrcnn_conv_layer conv, cls, bbox; // 3x3 + ReLU; 1x1 -> A; 1x1 -> 4A
    int num_anchors;                  // A per location
} mrcnn_rpn_head;

typedef struct mrcnn_box_head {
    int fc6_w, fc6_b, fc7_w, fc7_b, cls_w, cls_b, bbox_w, bbox_b;
    int in_dim, fc_dim, num_classes; // num_classes includes background
    bool pad_out; // the predictors compute padded outputs (as mrcnn_conv_layer's pad_out)
} mrcnn_box_head;

typedef struct mrcnn_mask_head {
    int n_conv;
    mrcnn_conv_layer conv[8];
    int deconv_w, deconv_b; // (D, 2, 2, D)
    mrcnn_conv_layer logits; // 1x1 -> num_classes
    int dim;
} mrcnn_mask_head;

/* ---- RPN head ------------------------------------------------------------------ */
typedef struct mrcnn_rpn_out {
    mrcnn_tensor t[MRCNN_FPN_LEVELS];      // (N, h, w, F) after the 3x3 conv + ReLU
    mrcnn_tensor logits[MRCNN_FPN_LEVELS]; // (N, h, w, A): anchor order (h, w, a)
    mrcnn_tensor deltas[MRCNN_FPN_LEVELS]; // (N, h, w, 4A): (h, w, a, 4)
} mrcnn_rpn_out;
void mrcnn_rpn_head_build(mrcnn_model *m);
void mrcnn_rpn_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                            mrcnn_rpn_out *out);
/* dlogits/ddeltas like the outputs; dp gets += gradients of the P levels. */
void mrcnn_rpn_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                             const mrcnn_rpn_out *out, const mrcnn_tensor *dlogits,
                             const mrcnn_tensor *ddeltas, mrcnn_tensor *dp);

/* The RPN's training targets in the head's level-major NHWC layout (the sampled count
 * goes to st->n_sampled_dev). */
typedef struct mrcnn_rpn_head_targets {
    mrcnn_tensor labels[MRCNN_FPN_LEVELS], obj_w[MRCNN_FPN_LEVELS]; // (N, h, w, A) fp32
    mrcnn_tensor reg[MRCNN_FPN_LEVELS], reg_w[MRCNN_FPN_LEVELS];    // (N, h, w, 4A) fp32
} mrcnn_rpn_head_targets;
/* Anchor targets of st's anchors against the batch's ground truth (st->gt), sampled
 * with the per-image RPN streams st->rng_rpn (be->det.rpn_targets). Device data only. */
void mrcnn_rpn_head_make_targets(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st, mrcnn_rpn_head_targets *t);
/* loss_objectness and loss_rpn_box_reg into st->loss_dev[0] and [1], normalized by
 * st->n_sampled_dev; when backward, st->dlogits_rpn / ddeltas_rpn get their gradients. */
void mrcnn_rpn_head_losses(mrcnn_model *m, mrcnn_ws *ws, bool backward, mrcnn_pass *st,
                           const mrcnn_rpn_head_targets *t);

/* ---- box head ------------------------------------------------------------------- */
void mrcnn_box_head_build(mrcnn_model *m);

typedef struct mrcnn_box_head_out {
    mrcnn_tensor x;      // (R, 7*7*F) pooled features
    mrcnn_tensor h6, h7; // (R, fc_dim) after ReLU
    mrcnn_tensor logits; // (R, num_classes)
    mrcnn_tensor deltas; // (R, 4 * num_classes)
} mrcnn_box_head_out;
void mrcnn_box_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                            mrcnn_box_head_out *out);
/* dx may be NULL (no gradient to the pooled features); it is written, not added to. */
void mrcnn_box_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_box_head_out *out,
                             const mrcnn_tensor *dlogits, const mrcnn_tensor *ddeltas,
                             mrcnn_tensor *dx);

/* Samples the training ROIs of st's proposals (be->det.roi_sample, with the per-image
 * ROI streams st->rng_roi): fills st->rois_dev,
 * the box targets, the fg rows the mask head trains on, and the counts n_rois_dev,
 * n_fg_dev; st->n_rois / n_fg are the rows the heads run on (the valid rows when the
 * backend knows their count without waiting, the whole capacity otherwise). */
void mrcnn_box_head_sample_rois(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st);
/* loss_classifier and loss_box_reg into st->loss_dev[2] and [3], normalized by
 * st->n_rois_dev; when backward, st->dcls / ddeltas get their gradients. */
void mrcnn_box_head_losses(mrcnn_model *m, mrcnn_ws *ws, bool backward, mrcnn_pass *st);

/* ---- mask head ------------------------------------------------------------------ */
void mrcnn_mask_head_build(mrcnn_model *m);

typedef struct mrcnn_mask_head_out {
    mrcnn_tensor x;         // (R, 14, 14, F) pooled features
    mrcnn_tensor conv[8];   // (R, 14, 14, D) after ReLU
    mrcnn_tensor up;        // (R, 28, 28, D) after deconv + ReLU
    mrcnn_tensor logits;    // (R, 28, 28, K): K = num_classes, or padded (mrcnn_model's pad_align)
} mrcnn_mask_head_out;
void mrcnn_mask_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                             mrcnn_mask_head_out *out);
/* ready: each parameter's gradient is final after its part (else the caller calls
 * mrcnn_mask_head_grads_ready once every chunk of rows has added its part). dx is
 * written, not added to. */
void mrcnn_mask_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_mask_head_out *out,
                              const mrcnn_tensor *dlogits, mrcnn_tensor *dx, bool ready);
void mrcnn_mask_head_grads_ready(mrcnn_model *m);

/* The training step's mask head chunks (model.h's mrcnn_pass): their count and ends for
 * rows rows of N images; gated: the rows are the capacity, not the valid rows. */
#define MRCNN_MASK_CHUNKS_MAX 24
int mrcnn_mask_head_chunks(int64_t rows, int n_images, bool gated, int *end);

/* Mask targets of st's fg rows (be->det.mask_targets) and loss_mask into
 * st->loss_dev[4], normalized by st->n_fg_dev x M x M, from st->mask_gd (the chunks'
 * gathers); trimmed: the head ran on the valid rows only (no padding weights). When
 * backward, st->mask_dg gets its gradient. */
void mrcnn_mask_head_loss(mrcnn_model *m, mrcnn_ws *ws, bool backward, bool trimmed, mrcnn_pass *st);

#ifdef __cplusplus
}
#endif
#endif
