/* Box head (torchvision's TwoMLPHead + FastRCNNPredictor): fc6 and fc7 with ReLU on
 * the NHWC-flattened (7, 7, F) pooled features, then class logits and
 * class-specific box deltas. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"

#include <stdio.h>
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
}

static mrcnn_tensor linear_fwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int w, int b,
                               mrcnn_activation act) {
    mrcnn_tensor *W = mrcnn_arena_get(&m->params.values, w);
    mrcnn_tensor y = mrcnn_ws_act(ws, 2, (int64_t[]){x->shape[0], W->shape[0]});
    if (x->shape[0] > 0)
        m->be->nn.linear_forward(m->be, x, W, mrcnn_arena_get(&m->params.values, b), act, &y);
    return y;
}

static void linear_bwd(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, const mrcnn_tensor *y,
                       mrcnn_activation act, int w, int b, const mrcnn_tensor *dy, mrcnn_tensor *dx) {
    if (x->shape[0] == 0) return;
    const mrcnn_tensor *g = dy;
    mrcnn_tensor dpre;
    if (act == MRCNN_ACT_RELU) {
        dpre = mrcnn_ws_like(ws, dy);
        m->be->nn.relu_backward(m->be, y, dy, &dpre);
        g = &dpre;
    }
    m->be->nn.linear_backward(m->be, x, mrcnn_arena_get(&m->params.values, w), g, dx,
                           mrcnn_arena_get(&m->params.grads, w), mrcnn_arena_get(&m->params.grads, b));
    if (act == MRCNN_ACT_RELU) mrcnn_ws_release(ws, &dpre);
    mrcnn_model_grad_ready(m, w);
    mrcnn_model_grad_ready(m, b);
}

void mrcnn_box_head_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x,
                            mrcnn_box_head_out *out) {
    mrcnn_box_head *h = &m->box;
    out->x = mrcnn_tensor_reshape(x, 2, (int64_t[]){x->shape[0], h->in_dim});
    out->h6 = linear_fwd(m, ws, &out->x, h->fc6_w, h->fc6_b, MRCNN_ACT_RELU);
    out->h7 = linear_fwd(m, ws, &out->h6, h->fc7_w, h->fc7_b, MRCNN_ACT_RELU);
    out->logits = linear_fwd(m, ws, &out->h7, h->cls_w, h->cls_b, MRCNN_ACT_NONE);
    out->deltas = linear_fwd(m, ws, &out->h7, h->bbox_w, h->bbox_b, MRCNN_ACT_NONE);
}

void mrcnn_box_head_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_box_head_out *out,
                             const mrcnn_tensor *dlogits, const mrcnn_tensor *ddeltas,
                             mrcnn_tensor *dx) {
    mrcnn_box_head *h = &m->box;
    mrcnn_tensor dh7 = mrcnn_ws_like(ws, &out->h7), dh6 = mrcnn_ws_like(ws, &out->h6);
    linear_bwd(m, ws, &out->h7, NULL, MRCNN_ACT_NONE, h->cls_w, h->cls_b, dlogits, &dh7);
    linear_bwd(m, ws, &out->h7, NULL, MRCNN_ACT_NONE, h->bbox_w, h->bbox_b, ddeltas, &dh7);
    linear_bwd(m, ws, &out->h6, &out->h7, MRCNN_ACT_RELU, h->fc7_w, h->fc7_b, &dh7, &dh6);
    mrcnn_tensor dx2;
    if (dx) dx2 = mrcnn_tensor_reshape(dx, 2, (int64_t[]){dx->shape[0], h->in_dim});
    linear_bwd(m, ws, &out->x, &out->h6, MRCNN_ACT_RELU, h->fc6_w, h->fc6_b, &dh6, dx ? &dx2 : NULL);
}
