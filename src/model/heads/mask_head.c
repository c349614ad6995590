/* Mask head (torchvision's MaskRCNNHeads + MaskRCNNPredictor): NUM_CONV x (3x3 conv
 * + ReLU) on the 14x14 pooled features, a 2x2 stride-2 deconv + ReLU, and a 1x1
 * conv to one 28x28 logit map per class. Also the head's training targets (the gt
 * masks cropped to the fg ROIs) and its loss. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "../model_internal.h"

#include <stdio.h>
#include <string.h>

void mrcnn_mask_head_build(mrcnn_model *m) {
    mrcnn_mask_head *h = &m->mask;
    h->n_conv = m->cfg.mask_head_num_conv;
    h->dim = m->cfg.mask_head_conv_dim;
    MRCNN_CHECK(h->n_conv >= 1 && h->n_conv <= 8, "MODEL.ROI_MASK_HEAD.NUM_CONV = %d outside [1, 8]",
                h->n_conv);
    char name[MRCNN_ARENA_NAME_LEN];
    int cin = m->fpn.out_channels;
    for (int i = 0; i < h->n_conv; i++) {
        snprintf(name, sizeof name, "roi_heads.mask_head.%d.0", i);
        h->conv[i] = mrcnn_conv_layer_add(m, name, cin, h->dim, 3, 1, 1, false, "");
        cin = h->dim;
    }
    h->deconv_w = mrcnn_params_add(&m->params, "roi_heads.mask_predictor.conv5_mask.weight", 4,
                                   (int64_t[]){h->dim, 2, 2, h->dim}, true, "");
    h->deconv_b = mrcnn_params_add(&m->params, "roi_heads.mask_predictor.conv5_mask.bias", 1,
                                   (int64_t[]){h->dim}, true, "");
    h->logits = mrcnn_conv_layer_add(m, "roi_heads.mask_predictor.mask_fcn_logits", h->dim,
                                     m->num_classes, 1, 1, 0, false, "");
    // the logits' readers (gather_class_masks, its backward, mask_probs) take K from the
    // shape and read the label's channel alone
    h->logits.pad_out = true;
}

void mrcnn_mask_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                             mrcnn_mask_head_out *out) {
    mrcnn_mask_head *h = &m->mask;
    out->x = *x;
    int64_t R = x->shape[0], S = x->shape[1];
    const mrcnn_tensor *cur = x;
    for (int i = 0; i < h->n_conv; i++) {
        if (R > 0) out->conv[i] = mrcnn_conv_layer_forward(m, ws, &h->conv[i], cur, MRCNN_ACT_RELU);
        else out->conv[i] = mrcnn_ws_act(ws, 4, (int64_t[]){0, S, S, h->dim});
        cur = &out->conv[i];
    }
    out->up = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){R, 2 * S, 2 * S, h->dim});
    if (R > 0) {
        m->be->nn.deconv2x2_forward(m->be, cur, mrcnn_params_compute(&m->params, h->deconv_w),
                                 mrcnn_arena_get(&m->params.values, h->deconv_b), MRCNN_ACT_RELU,
                                 &out->up);
        out->logits = mrcnn_conv_layer_forward(m, ws, &h->logits, &out->up, MRCNN_ACT_NONE);
    } else {
        out->logits = mrcnn_ws_act(ws, 4,
                                   (int64_t[]){0, 2 * S, 2 * S, mrcnn_conv_layer_out_channels(m, &h->logits)});
    }
}

void mrcnn_mask_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_mask_head_out *out,
                              const mrcnn_tensor *dlogits, mrcnn_tensor *dx, bool ready) {
    mrcnn_mask_head *h = &m->mask;
    if (out->x.shape[0] == 0) return;
    const mrcnn_backend *be = m->be;
    // each op below is its input gradient's only writer (dx included): written, not zeroed first
    mrcnn_tensor dup = grad_buffer(ws, &out->up);
    mrcnn_conv_layer_backward(m, ws, &h->logits, &out->up, NULL, MRCNN_ACT_NONE, dlogits, &dup, MRCNN_GRAD_WRITE);
    if (ready) mrcnn_conv_layer_grad_ready(m, &h->logits);
    const mrcnn_tensor *last = &out->conv[h->n_conv - 1];
    mrcnn_tensor dcur = grad_buffer(ws, last);
    // the upsample's ReLU backward fused (masked by its output up)
    be->nn.deconv2x2_backward(be, last, mrcnn_params_compute(&m->params, h->deconv_w), &dup, MRCNN_ACT_RELU,
                              &out->up, &dcur, MRCNN_GRAD_WRITE, mrcnn_arena_get(&m->params.grads, h->deconv_w),
                              mrcnn_arena_get(&m->params.grads, h->deconv_b));
    if (ready) {
        mrcnn_model_grad_ready(m, h->deconv_w);
        mrcnn_model_grad_ready(m, h->deconv_b);
    }
    for (int i = h->n_conv - 1; i >= 0; i--) {
        const mrcnn_tensor *xin = i > 0 ? &out->conv[i - 1] : &out->x;
        mrcnn_tensor dprev = {0};
        if (i > 0) dprev = grad_buffer(ws, xin);
        mrcnn_conv_layer_backward(m, ws, &h->conv[i], xin, &out->conv[i], MRCNN_ACT_RELU, &dcur,
                                  i > 0 ? &dprev : dx, MRCNN_GRAD_WRITE);
        if (ready) mrcnn_conv_layer_grad_ready(m, &h->conv[i]);
        dcur = dprev;
    }
}

/* In the order the backward finishes them. */
void mrcnn_mask_head_grads_ready(mrcnn_model *m) {
    mrcnn_mask_head *h = &m->mask;
    mrcnn_conv_layer_grad_ready(m, &h->logits);
    mrcnn_model_grad_ready(m, h->deconv_w);
    mrcnn_model_grad_ready(m, h->deconv_b);
    for (int i = h->n_conv - 1; i >= 0; i--) mrcnn_conv_layer_grad_ready(m, &h->conv[i]);
}

/* Ungated: one chunk. Gated: ends N, 2N, 4N, ... up to the capacity. A chunk runs when
 * the count passes its first row, so P positives run the chunk ending at the first end
 * >= P: N rows, or fewer than 2P. The first chunk is N rows because every image with a
 * gt box has a positive (its gt box is a candidate). */
int mrcnn_mask_head_chunks(int64_t rows, int n_images, bool gated, int *end) {
    int n = 0;
    for (int64_t e = n_images > 0 ? n_images : 1; gated && e < rows && n < MRCNN_MASK_CHUNKS_MAX - 1; e *= 2)
        end[n++] = (int)e;
    end[n++] = (int)rows;
    return n;
}

/* ---- targets and losses (called by the training step, maskrcnn.c) ---------------- */

/* Mask targets (on the device) and the mask loss into loss_dev[4], normalized by the
 * batch's fg ROIs x M x M. The label's logits (mask_gd) are the chunks' gathers, and
 * their gradient (mask_dg) goes back through the chunks' backward. */
void mrcnn_mask_head_loss(mrcnn_model *m, mrcnn_ws *ws, bool backward, bool trimmed, mrcnn_pass *st) {
    const mrcnn_backend *be = m->be;
    int Rf = st->n_fg, M = 2 * m->cfg.mask_head_pooler_resolution;
    // no fg rows: torchvision's mask_logits.sum() * 0, a zero loss with zero gradients
    if (Rf == 0) return;
    int64_t sh[3] = {Rf, M, M};
    // targets and weights overwrite every row; dg, a gradient added into, is zeroed
    mrcnn_tensor td = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 3, sh);
    // on the valid rows alone every weight is 1: no weights, the unweighted sum as before
    mrcnn_tensor wd = trimmed ? (mrcnn_tensor){0} : mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 3, sh);
    be->det.mask_targets(be, &st->gt, &st->fg_rois_dev, &st->fg_gt_dev, M, &td, trimmed ? NULL : &wd);
    st->mask_dg = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 3, sh);
    mrcnn_tensor lm = elem_view(&st->loss_dev, 4);
    mrcnn_loss_norm norm = {.count = &st->n_fg_dev, .scale = (float)(M * M), .grad_mult = loss_mult(m), .grad_scale = m->loss_scale};
    be->loss.bce_logits(be, &st->mask_gd, &td, trimmed ? NULL : &wd, &norm, &lm, backward ? &st->mask_dg : NULL);
}
