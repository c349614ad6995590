/* RPN head shared across the five levels: 3x3 conv + ReLU, then 1x1 objectness (A)
 * and 1x1 box deltas (4A). In NHWC the outputs are already in torchvision's
 * flattened anchor order (h, w, a) and (h, w, a, 4). The shared weights gather
 * their gradient over all levels because the backward ops accumulate. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"

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
}

void mrcnn_rpn_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                            mrcnn_rpn_out *out) {
    mrcnn_rpn_head *h = &m->rpn;
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        out->t[l] = mrcnn_conv_layer_forward(m, ws, &h->conv, &bb->p[l], MRCNN_ACT_RELU);
        out->logits[l] = mrcnn_conv_layer_forward(m, ws, &h->cls, &out->t[l], MRCNN_ACT_NONE);
        out->deltas[l] = mrcnn_conv_layer_forward(m, ws, &h->bbox, &out->t[l], MRCNN_ACT_NONE);
    }
}

void mrcnn_rpn_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_backbone_out *bb,
                             const mrcnn_rpn_out *out, const mrcnn_tensor *dlogits,
                             const mrcnn_tensor *ddeltas, mrcnn_tensor *dp) {
    mrcnn_rpn_head *h = &m->rpn;
    for (int l = 0; l < MRCNN_FPN_LEVELS; l++) {
        mrcnn_tensor dt = mrcnn_ws_like(ws, &out->t[l]);
        mrcnn_conv_layer_backward(m, ws, &h->cls, &out->t[l], NULL, MRCNN_ACT_NONE, &dlogits[l], &dt);
        mrcnn_conv_layer_backward(m, ws, &h->bbox, &out->t[l], NULL, MRCNN_ACT_NONE, &ddeltas[l],
                                  &dt);
        if (!dp[l].data) dp[l] = mrcnn_ws_like(ws, &bb->p[l]);
        mrcnn_conv_layer_backward(m, ws, &h->conv, &bb->p[l], &out->t[l], MRCNN_ACT_RELU, &dt,
                                  &dp[l]);
        mrcnn_ws_release(ws, &dt);
    }
    // shared over the levels: final only now
    mrcnn_conv_layer_grad_ready(m, &h->cls);
    mrcnn_conv_layer_grad_ready(m, &h->bbox);
    mrcnn_conv_layer_grad_ready(m, &h->conv);
}
