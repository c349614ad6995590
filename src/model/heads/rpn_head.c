/* RPN head shared across the five levels: 3x3 conv + ReLU, then 1x1 objectness (A)
 * and 1x1 box deltas (4A). In NHWC the outputs are already in torchvision's
 * flattened anchor order (h, w, a) and (h, w, a, 4). The shared weights gather
 * their gradient over all levels because the backward ops accumulate. Also the
 * head's training targets (anchor matching and sampling) and its two losses,
 * objectness and box regression. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "../model_internal.h"

#include <stdlib.h>
#include <string.h>

void mrcnn_rpn_head_build(mrcnn_model *m) {
    mrcnn_rpn_head *h = &m->rpn;
    int F = m->fpn.out_channels;
    h->num_anchors = m->cfg.anchor_ratios.n;
    MRCNN_CHECK(h->num_anchors > 0, "MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS is empty");
    MRCNN_CHECK(m->cfg.anchor_sizes.n == MRCNN_FPN_LEVELS,
                "MODEL.ANCHOR_GENERATOR.SIZES has %d sizes; the FPN has %d levels (one size each)",
                m->cfg.anchor_sizes.n, MRCNN_FPN_LEVELS);
    h->conv = mrcnn_conv_layer_add(m, "rpn.head.conv.0.0", F, F, 3, 1, 1, false, "");
    h->cls = mrcnn_conv_layer_add(m, "rpn.head.cls_logits", F, h->num_anchors, 1, 1, 0, false, "");
    h->bbox = mrcnn_conv_layer_add(m, "rpn.head.bbox_pred", F, 4 * h->num_anchors, 1, 1, 0, false,
                                   "");
    /* A and 4A channels (3, 12) miss a GPU's tensor-core GEMMs: both convs compute padded
     * outputs, and the targets, losses and proposals, which take A per location, read
     * their first channels (mrcnn_channels_slice). */
    h->cls.pad_out = true;
    h->bbox.pad_out = true;
}

/* conv's output (N, h, w, cout), from its padded one when the layer pads. */
static mrcnn_tensor head_out(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l, const mrcnn_tensor *t) {
    mrcnn_tensor y = mrcnn_conv_layer_forward(m, ws, l, t, MRCNN_ACT_NONE);
    if (y.shape[3] == l->cout) return y;
    mrcnn_tensor s = mrcnn_channels_slice(m, ws, &y, l->cout);
    mrcnn_ws_release(ws, &y);
    return s;
}

/* The backward of head_out: dy's padding channels zero. */
static void head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l, const mrcnn_tensor *t,
                          const mrcnn_tensor *dy, mrcnn_tensor *dt, mrcnn_grad_mode dt_mode) {
    const int k = mrcnn_conv_layer_out_channels(m, l);
    if (k == l->cout) {
        mrcnn_conv_layer_backward(m, ws, l, t, NULL, MRCNN_ACT_NONE, dy, dt, dt_mode);
        return;
    }
    mrcnn_tensor dp = mrcnn_channels_pad(m, ws, dy, k);
    mrcnn_conv_layer_backward(m, ws, l, t, NULL, MRCNN_ACT_NONE, &dp, dt, dt_mode);
    mrcnn_ws_release(ws, &dp);
}

void mrcnn_rpn_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                            mrcnn_rpn_out *out) {
    mrcnn_rpn_head *h = &m->rpn;
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        out->t[l] = mrcnn_conv_layer_forward(m, ws, &h->conv, &bb->p[l], MRCNN_ACT_RELU);
        out->logits[l] = head_out(m, ws, &h->cls, &out->t[l]);
        out->deltas[l] = head_out(m, ws, &h->bbox, &out->t[l]);
    }
}

void mrcnn_rpn_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                             const mrcnn_rpn_out *out, const mrcnn_tensor *dlogits,
                             const mrcnn_tensor *ddeltas, mrcnn_tensor *dp) {
    mrcnn_rpn_head *h = &m->rpn;
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        // the objectness conv writes dt, the box conv adds to it
        mrcnn_tensor dt = grad_buffer(ws, &out->t[l]);
        head_backward(m, ws, &h->cls, &out->t[l], &dlogits[l], &dt, MRCNN_GRAD_WRITE);
        head_backward(m, ws, &h->bbox, &out->t[l], &ddeltas[l], &dt, MRCNN_GRAD_ADD);
        // dp[l] holds the ROIAligns' gradients already (or is this call's, written here)
        mrcnn_grad_mode mode = MRCNN_GRAD_ADD;
        if (!dp[l].data) dp[l] = grad_buffer(ws, &bb->p[l]), mode = MRCNN_GRAD_WRITE;
        mrcnn_conv_layer_backward(m, ws, &h->conv, &bb->p[l], &out->t[l], MRCNN_ACT_RELU, &dt,
                                  &dp[l], mode);
        mrcnn_ws_release(ws, &dt);
    }
    // shared over the levels: final only now
    mrcnn_conv_layer_grad_ready(m, &h->cls);
    mrcnn_conv_layer_grad_ready(m, &h->bbox);
    mrcnn_conv_layer_grad_ready(m, &h->conv);
}

/* ---- targets and losses (called by the training step, maskrcnn.c) ---------------- */

void mrcnn_rpn_head_make_targets(mrcnn_model *m, mrcnn_ws *ws, mrcnn_pass *st, mrcnn_rpn_head_targets *t) {
    const mrcnn_config *c = &m->cfg;
    int N = st->n_images, A = m->rpn.num_anchors;
    mrcnn_rpn_targets_desc d = {
        .n_images = N,
        .n_levels = MRCNN_FPN_LEVELS,
        .fg_iou = c->rpn_iou_thresholds.v[1],
        .bg_iou = c->rpn_iou_thresholds.v[0],
        .batch_size_per_image = c->rpn_batch_size_per_image,
        .positive_fraction = c->rpn_positive_fraction,
    };
    memcpy(d.level_counts, st->level_counts, sizeof d.level_counts);
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        const mrcnn_tensor *x = &st->rpn.logits[l], *dl = &st->rpn.deltas[l];
        MRCNN_CHECK(mrcnn_tensor_numel(x) == N * st->level_counts[l] && x->shape[3] == A,
                    "RPN level %d: %lld logits but %lld anchors per image", l,
                    (long long)mrcnn_tensor_numel(x), (long long)st->level_counts[l]);
        // rpn_targets writes all four for every anchor: not zeroed
        t->labels[l] = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, x->ndim, x->shape);
        t->obj_w[l] = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, x->ndim, x->shape);
        t->reg[l] = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, dl->ndim, dl->shape);
        t->reg_w[l] = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, dl->ndim, dl->shape);
    }
    m->be->det.rpn_targets(m->be, &d, &st->anchors_dev, &st->gt, &st->rng_rpn, t->labels, t->obj_w, t->reg,
                           t->reg_w, &st->n_sampled_dev);
}

/* RPN losses: one BCE and one smooth-L1 per level normalized by the batch's sampled
 * count; the levels' terms are then summed into loss_dev[0] and [1]. */
void mrcnn_rpn_head_losses(mrcnn_model *m, mrcnn_ws *ws, bool backward, mrcnn_pass *st,
                           const mrcnn_rpn_head_targets *t) {
    const mrcnn_backend *be = m->be;
    mrcnn_loss_norm norm = {.count = &st->n_sampled_dev, .scale = 1.0f, .grad_mult = loss_mult(m), .grad_scale = m->loss_scale};
    mrcnn_tensor levels = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){2, MRCNN_FPN_LEVELS});
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        const mrcnn_tensor *x = &st->rpn.logits[l], *d = &st->rpn.deltas[l];
        mrcnn_tensor lo = elem_view(&levels, l), lb = elem_view(&levels, MRCNN_FPN_LEVELS + l);
        if (backward) {
            st->dlogits_rpn[l] = mrcnn_ws_like(ws, x);
            st->ddeltas_rpn[l] = mrcnn_ws_like(ws, d);
        }
        be->loss.bce_logits(be, x, &t->labels[l], &t->obj_w[l], &norm, &lo, backward ? &st->dlogits_rpn[l] : NULL);
        be->loss.smooth_l1(be, d, &t->reg[l], &t->reg_w[l], m->cfg.rpn_smooth_l1_beta, &norm, &lb,
                      backward ? &st->ddeltas_rpn[l] : NULL);
    }
    /* The sum of the levels as a loss op: smooth-L1 with beta 0 against zeros is sum |x|,
     * which over these nonnegative terms is their sum, accumulated in double and written
     * in fp32 unrounded (add_forward would round to the storage dtype in the CPU's
     * rounded-storage mode). */
    // an input that must read zero: stays a zeroing allocation
    mrcnn_tensor zeros = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){MRCNN_FPN_LEVELS});
    mrcnn_loss_norm one = {.count = NULL, .scale = 1.0f, .grad_mult = 1.0f};
    for (int k = 0; k < 2; k++) {
        mrcnn_tensor row = mrcnn_tensor_view((float *)levels.data + k * MRCNN_FPN_LEVELS, MRCNN_DTYPE_F32,
                                             levels.device, 1, (int64_t[]){MRCNN_FPN_LEVELS});
        mrcnn_tensor out = elem_view(&st->loss_dev, k);
        be->loss.smooth_l1(be, &row, &zeros, NULL, 0.0f, &one, &out, NULL);
    }
}
