/* Box head (torchvision's TwoMLPHead + FastRCNNPredictor): fc6 and fc7 with ReLU on
 * the NHWC-flattened (7, 7, F) pooled features, then class logits and
 * class-specific box deltas. Also the head's training targets (ROI sampling) and its
 * two losses, classifier and box regression. */
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "../model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_linear(mrcnn_model *m, const char *name, int out, int in, int *b) {
    char buf[MRCNN_ARENA_NAME_LEN];
    snprintf(buf, sizeof buf, "%s.weight", name);
    int w = mrcnn_params_add(&m->params, buf, 2, (int64_t[]){out, in}, true, "");
    snprintf(buf, sizeof buf, "%s.bias", name);
    *b = mrcnn_params_add(&m->params, buf, 1, (int64_t[]){out}, true, "");
    return w;
}

void mrcnn_box_head_build(mrcnn_model *m) {
    mrcnn_box_head *h = &m->box;
    int r = m->cfg.box_head_pooler_resolution;
    h->in_dim = r * r * m->fpn.out_channels;
    h->fc_dim = m->cfg.box_head_fc_dim;
    h->num_classes = m->num_classes;
    MRCNN_CHECK(h->fc_dim > 0 && r > 0, "box head: FC_DIM %d and POOLER_RESOLUTION %d must be positive",
                h->fc_dim, r);
    h->fc6_w = add_linear(m, "roi_heads.box_head.fc6", h->fc_dim, h->in_dim, &h->fc6_b);
    h->fc7_w = add_linear(m, "roi_heads.box_head.fc7", h->fc_dim, h->fc_dim, &h->fc7_b);
    h->cls_w = add_linear(m, "roi_heads.box_predictor.cls_score", h->num_classes, h->fc_dim, &h->cls_b);
    h->bbox_w = add_linear(m, "roi_heads.box_predictor.bbox_pred", 4 * h->num_classes, h->fc_dim,
                           &h->bbox_b);
    h->pad_out = true; // predictor_fwd
}

static mrcnn_tensor linear_fwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int w, int b,
                               mrcnn_activation act) {
    mrcnn_tensor *W = mrcnn_params_compute(&m->params, w); // cast once per step (params.h)
    mrcnn_tensor y = mrcnn_ws_act_uninit(ws, 2, (int64_t[]){x->shape[0], W->shape[0]});
    if (x->shape[0] > 0)
        m->be->nn.linear_forward(m->be, x, W, mrcnn_arena_get(&m->params.values, b), act, &y);
    return y;
}

/* act = RELU: the ReLU's backward is fused into linear_backward (masked by y). */
static void linear_bwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, const mrcnn_tensor *y,
                       mrcnn_activation act, int w, int b, const mrcnn_tensor *dy, mrcnn_tensor *dx,
                       mrcnn_grad_mode dx_mode) {
    if (x->shape[0] == 0) return;
    m->be->nn.linear_backward(m->be, x, mrcnn_params_compute(&m->params, w), dy, act, y, dx, dx_mode,
                              mrcnn_arena_get(&m->params.grads, w), mrcnn_arena_get(&m->params.grads, b));
    mrcnn_model_grad_ready(m, w);
    mrcnn_model_grad_ready(m, b);
}

/* The class logits' and box deltas' K and 4K outputs (81 and 324 with COCO's classes)
 * miss a GPU's tensor-core GEMMs: the predictors compute them with zero weight rows up
 * to a multiple of pad_align and take the first K out (mrcnn_channels_slice), since the
 * losses, the per-class gather and detection read K values per row. */
/* The rows predictor (w, b) computes: K, or padded to a multiple of pad_align; for a
 * padded one its weight and bias views (params.h: made once per step) in *wp, *bp. */
static int predictor_weights(mrcnn_model *m, int w, int b, mrcnn_tensor *wp, mrcnn_tensor *bp) {
    const mrcnn_tensor *W = mrcnn_arena_get(&m->params.values, w);
    const int k = (int)W->shape[0], kp = m->box.pad_out ? mrcnn_model_padded(m, k) : k;
    if (kp != k) {
        *wp = mrcnn_params_padded(&m->params, w, kp, W->shape[1]);
        *bp = mrcnn_params_padded(&m->params, b, kp, kp);
    }
    return kp;
}

void model_box_head_views(mrcnn_model *m) {
    mrcnn_tensor wp, bp;
    predictor_weights(m, m->box.cls_w, m->box.cls_b, &wp, &bp);
    predictor_weights(m, m->box.bbox_w, m->box.bbox_b, &wp, &bp);
}

static mrcnn_tensor predictor_fwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int w, int b) {
    const int k = (int)mrcnn_arena_get(&m->params.values, w)->shape[0];
    mrcnn_tensor wp, bp;
    const int kp = predictor_weights(m, w, b, &wp, &bp);
    if (kp == k || x->shape[0] == 0) return linear_fwd(m, ws, x, w, b, MRCNN_ACT_NONE);
    mrcnn_tensor yp = mrcnn_ws_act_uninit(ws, 2, (int64_t[]){x->shape[0], kp});
    m->be->nn.linear_forward(m->be, x, &wp, &bp, MRCNN_ACT_NONE, &yp);
    mrcnn_tensor y = mrcnn_channels_slice(m, ws, &yp, k);
    mrcnn_ws_release(ws, &yp);
    return y;
}

/* predictor_fwd's backward: dy's padding columns zero, the gradients through padded
 * copies that start from the arena's (accumulation as the unpadded layer's), the zero
 * rows' gradients dropped. */
static void predictor_bwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int w, int b, const mrcnn_tensor *dy,
                          mrcnn_tensor *dx, mrcnn_grad_mode dx_mode) {
    const int k = (int)mrcnn_arena_get(&m->params.values, w)->shape[0];
    mrcnn_tensor wp, bp;
    const int kp = predictor_weights(m, w, b, &wp, &bp);
    if (kp == k || x->shape[0] == 0) {
        linear_bwd(m, ws, x, NULL, MRCNN_ACT_NONE, w, b, dy, dx, dx_mode);
        return;
    }
    mrcnn_tensor *dw = mrcnn_arena_get(&m->params.grads, w), *db = mrcnn_arena_get(&m->params.grads, b);
    mrcnn_tensor dyp = mrcnn_channels_pad(m, ws, dy, kp);
    mrcnn_tensor dwp = mrcnn_padded_rows(m, ws, dw, kp), dbp = mrcnn_padded_rows(m, ws, db, kp);
    m->be->nn.linear_backward(m->be, x, &wp, &dyp, MRCNN_ACT_NONE, NULL, dx, dx_mode, &dwp, &dbp);
    mrcnn_padded_rows_store(m, &dwp, dw);
    mrcnn_padded_rows_store(m, &dbp, db);
    mrcnn_ws_release(ws, &dbp);
    mrcnn_ws_release(ws, &dwp);
    mrcnn_ws_release(ws, &dyp);
    mrcnn_model_grad_ready(m, w);
    mrcnn_model_grad_ready(m, b);
}

void mrcnn_box_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                            mrcnn_box_head_out *out) {
    mrcnn_box_head *h = &m->box;
    out->x = mrcnn_tensor_reshape(x, 2, (int64_t[]){x->shape[0], h->in_dim});
    out->h6 = linear_fwd(m, ws, &out->x, h->fc6_w, h->fc6_b, MRCNN_ACT_RELU);
    out->h7 = linear_fwd(m, ws, &out->h6, h->fc7_w, h->fc7_b, MRCNN_ACT_RELU);
    out->logits = predictor_fwd(m, ws, &out->h7, h->cls_w, h->cls_b);
    out->deltas = predictor_fwd(m, ws, &out->h7, h->bbox_w, h->bbox_b);
}

void mrcnn_box_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_box_head_out *out,
                             const mrcnn_tensor *dlogits, const mrcnn_tensor *ddeltas,
                             mrcnn_tensor *dx) {
    mrcnn_box_head *h = &m->box;
    // dh7: the class predictor writes it, the box predictor adds; dh6 and dx have one writer
    mrcnn_tensor dh7 = grad_buffer(ws, &out->h7), dh6 = grad_buffer(ws, &out->h6);
    predictor_bwd(m, ws, &out->h7, h->cls_w, h->cls_b, dlogits, &dh7, MRCNN_GRAD_WRITE);
    predictor_bwd(m, ws, &out->h7, h->bbox_w, h->bbox_b, ddeltas, &dh7, MRCNN_GRAD_ADD);
    linear_bwd(m, ws, &out->h6, &out->h7, MRCNN_ACT_RELU, h->fc7_w, h->fc7_b, &dh7, &dh6, MRCNN_GRAD_WRITE);
    mrcnn_tensor dx2;
    if (dx) dx2 = mrcnn_tensor_reshape(dx, 2, (int64_t[]){dx->shape[0], h->in_dim});
    linear_bwd(m, ws, &out->x, &out->h6, MRCNN_ACT_RELU, h->fc6_w, h->fc6_b, &dh6, dx ? &dx2 : NULL,
               MRCNN_GRAD_WRITE);
}

/* ---- targets and losses (called by the training step, maskrcnn.c) ---------------- */

/* Positives per image that the mask head can need, from the config and the staged shapes
 * alone: at most (int)(S x fraction), the balanced sampler's quota with its truncation
 * (balanced_sampler.c), however many candidates match, and at most the image's candidates
 * (its P proposals and its G gt boxes). The valid fg rows come first over the batch, so N
 * times this bound holds every one of them: a backend that cannot tell the count without
 * waiting runs the mask head on these rows instead of on the capacity N*F, which configs
 * size for the largest setting (MAX_FG_PER_IMAGE 128 with 8 ROIs per image ran it on 64
 * times the rows a step can fill). The bound never changes within a shape key (G is the
 * staged bucket), so a captured step replays; positives below the quota still cost the
 * quota's rows, as no device count reaches the host. */
static int64_t fg_rows_per_image(const mrcnn_config *c, int prop_cap, int max_gt) {
    const int64_t F = c->mask_head_max_fg_per_image, cand = (int64_t)prop_cap + max_gt;
    const int64_t quota = (int64_t)((double)c->roi_batch_size_per_image * (double)c->roi_positive_fraction);
    const int64_t f = F < quota ? F : quota;
    return f < cand ? f : cand;
}

/* Samples ROIs per image into the capacity N*S (N*F fg rows), compacted over the
 * batch, and chooses the rows the heads run on: the valid ones when the backend
 * knows their count without waiting, otherwise the capacity N*S and N times
 * fg_rows_per_image. */
void mrcnn_box_head_sample_rois(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st) {
    const mrcnn_config *c = &m->cfg;
    int N = st->n_images, S = c->roi_batch_size_per_image, F = c->mask_head_max_fg_per_image;
    mrcnn_roi_sample_desc d = {
        .n_images = N,
        .prop_cap = st->prop_cap,
        .batch_size_per_image = S,
        .max_fg = F,
        .positive_fraction = c->roi_positive_fraction,
        .iou_thresh = c->roi_iou_threshold,
        .coder = mrcnn_box_coder_make(c->box_reg_weights.v[0], c->box_reg_weights.v[1], c->box_reg_weights.v[2],
                                      c->box_reg_weights.v[3]),
    };
    int64_t NS = (int64_t)N * S, NF = (int64_t)N * F;
    // roi_sample writes every row of its outputs, padding rows included: not zeroed
    mrcnn_tensor rois = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 5});
    mrcnn_tensor labels = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){NS});
    mrcnn_tensor box_labels = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){NS});
    mrcnn_tensor reg = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 4});
    mrcnn_tensor reg_w = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){NS, 4});
    mrcnn_tensor fg_rois = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){NF, 5});
    mrcnn_tensor fg_labels = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){NF});
    mrcnn_tensor fg_gt = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_I32, 1, (int64_t[]){NF});
    m->be->det.roi_sample(m->be, &d, &st->proposals_dev, &st->proposal_counts_dev, &st->gt, &st->rng_roi, &rois,
                          &labels, &box_labels, &reg, &reg_w, &fg_rois, &fg_labels, &fg_gt, &st->n_rois_dev,
                          &st->n_fg_dev);
    // this rank's counts: taken before m->count_sum turns them into the batch's
    int64_t R = count_hint(m->be, &st->n_rois_dev), Rf = count_hint(m->be, &st->n_fg_dev);
    R = R >= 0 ? R : NS;
    Rf = Rf >= 0 ? Rf : N * fg_rows_per_image(c, st->prop_cap, st->gt.max_gt);
    st->n_rois = (int)R;
    st->n_fg = (int)Rf;
    st->rois_dev = rows_view(&rois, R);
    st->roi_labels_dev = rows_view(&labels, R);
    st->roi_box_labels_dev = rows_view(&box_labels, R);
    st->roi_reg_targets_dev = rows_view(&reg, R);
    st->roi_reg_weights_dev = rows_view(&reg_w, R);
    st->fg_rois_dev = rows_view(&fg_rois, Rf);
    st->fg_labels_dev = rows_view(&fg_labels, Rf);
    st->fg_gt_dev = rows_view(&fg_gt, Rf);
}

/* Classifier and box-regression losses into loss_dev[2] and [3], normalized by the
 * batch's sampled ROIs. */
void mrcnn_box_head_losses(mrcnn_model *m, mrcnn_ws *ws, bool backward, mrcnn_pass *st) {
    const mrcnn_backend *be = m->be;
    int R = st->n_rois;
    mrcnn_loss_norm norm = {.count = &st->n_rois_dev, .scale = 1.0f, .grad_mult = loss_mult(m), .grad_scale = m->loss_scale};
    mrcnn_tensor lc = elem_view(&st->loss_dev, 2), lb = elem_view(&st->loss_dev, 3);
    if (backward) {
        st->dcls = mrcnn_ws_like(ws, &st->box.logits);
        st->ddeltas = mrcnn_ws_like(ws, &st->box.deltas);
    }
    if (R == 0) return; // both terms stay zero
    be->loss.softmax_ce(be, &st->box.logits, &st->roi_labels_dev, &norm, &lc, backward ? &st->dcls : NULL);
    // box regression on the gt class of the foreground only, gathered on the device
    int64_t s4[2] = {R, 4};
    mrcnn_tensor gd = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, s4);
    be->det.gather_class_deltas(be, &st->box.deltas, &st->roi_box_labels_dev, &gd);
    mrcnn_tensor dg = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 2, s4);
    be->loss.smooth_l1(be, &gd, &st->roi_reg_targets_dev, &st->roi_reg_weights_dev, m->cfg.box_smooth_l1_beta, &norm,
                  &lb, backward ? &dg : NULL);
    if (backward) be->det.gather_class_deltas_backward(be, &dg, &st->roi_box_labels_dev, &st->ddeltas);
}
