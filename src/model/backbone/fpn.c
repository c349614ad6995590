/* Feature pyramid (torchvision's FeaturePyramidNetwork + LastLevelMaxPool): lateral
 * 1x1 convs on C2..C5, top-down nearest upsampling with sums, 3x3 output convs, and
 * P6 as a 1x1 stride-2 max-pool of P5. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "../model_internal.h"

#include <stdio.h>
#include <string.h>

void mrcnn_fpn_build(mrcnn_model *m) {
    mrcnn_fpn *f = &m->fpn;
    int F = m->cfg.fpn_out_channels;
    MRCNN_CHECK(F > 0, "MODEL.FPN.OUT_CHANNELS = %d must be positive", F);
    f->out_channels = F;
    char name[MRCNN_ARENA_NAME_LEN];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "backbone.fpn.inner_blocks.%d.0", i);
        f->inner[i] = mrcnn_conv_layer_add(m, name, m->resnet.out_channels[i], F, 1, 1, 0, false, "");
        snprintf(name, sizeof name, "backbone.fpn.layer_blocks.%d.0", i);
        f->layer[i] = mrcnn_conv_layer_add(m, name, F, F, 3, 1, 1, false, "");
    }
}

static mrcnn_pool2d_desc p6_desc(const mrcnn_tensor *p5) {
    mrcnn_pool2d_desc d = {(int)p5->shape[0], (int)p5->shape[1], (int)p5->shape[2],
                           (int)p5->shape[3], 1, 2, 0};
    return d;
}

void mrcnn_fpn_forward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *o) {
    const mrcnn_backend *be = m->be;
    mrcnn_fpn *f = &m->fpn;
    o->inner[3] = mrcnn_conv_layer_forward(m, ws, &f->inner[3], &o->c[3], MRCNN_ACT_NONE);
    o->p[3] = mrcnn_conv_layer_forward(m, ws, &f->layer[3], &o->inner[3], MRCNN_ACT_NONE);
    for (int i = 2; i >= 0; i--) {
        mrcnn_tensor lat = mrcnn_conv_layer_forward(m, ws, &f->inner[i], &o->c[i], MRCNN_ACT_NONE);
        // the sum overwrites the lateral: its backward needs neither
        be->nn.upsample_add_forward(be, &o->inner[i + 1], &lat, &lat);
        o->inner[i] = lat;
        o->p[i] = mrcnn_conv_layer_forward(m, ws, &f->layer[i], &o->inner[i], MRCNN_ACT_NONE);
    }
    mrcnn_pool2d_desc pd = p6_desc(&o->p[3]);
    // maxpool2d_forward overwrites P6 whole
    o->p[4] = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){pd.n, mrcnn_pool2d_out_h(&pd), mrcnn_pool2d_out_w(&pd), pd.c});
    be->nn.maxpool2d_forward(be, &pd, &o->p[3], &o->p[4]);
}

void mrcnn_fpn_backward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *o, mrcnn_tensor *dp,
                        mrcnn_tensor *dc) {
    const mrcnn_backend *be = m->be;
    mrcnn_fpn *f = &m->fpn;
    // P5's gradient gathers the head's and P6's (maxpool2d_backward adds): zeroed
    mrcnn_tensor dp5 = mrcnn_ws_like(ws, &o->p[3]);
    if (dp[3].data) be->nn.add_forward(be, &dp5, &dp[3], MRCNN_ACT_NONE, &dp5);
    if (dp[4].data) {
        mrcnn_pool2d_desc pd = p6_desc(&o->p[3]);
        be->nn.maxpool2d_backward(be, &pd, &o->p[3], &dp[4], &dp5);
    }
    mrcnn_tensor dinner[4];
    for (int i = 0; i < 4; i++) {
        const mrcnn_tensor *g = i == 3 ? &dp5 : &dp[i];
        // the output conv writes it first (upsample_add_backward adds the level below's
        // later); without a gradient from above it starts at zero
        dinner[i] = g->data ? grad_buffer(ws, &o->inner[i]) : mrcnn_ws_like(ws, &o->inner[i]);
        if (g->data)
            mrcnn_conv_layer_backward(m, ws, &f->layer[i], &o->inner[i], NULL, MRCNN_ACT_NONE, g,
                                      &dinner[i], MRCNN_GRAD_WRITE);
        mrcnn_conv_layer_grad_ready(m, &f->layer[i]);
    }
    for (int i = 0; i < 4; i++) {
        // the sum's gradient reaches both the lateral (dinner[i] itself) and the level above
        if (i < 3)
            be->nn.upsample_add_backward(be, &dinner[i], &dinner[i + 1], NULL);
        bool want = mrcnn_resnet_needs_input_grad(m, i + 2);
        // a dc[i] of this call's making has the lateral conv as its only writer
        mrcnn_grad_mode mode = MRCNN_GRAD_ADD;
        if (want && !dc[i].data) dc[i] = grad_buffer(ws, &o->c[i]), mode = MRCNN_GRAD_WRITE;
        mrcnn_conv_layer_backward(m, ws, &f->inner[i], &o->c[i], NULL, MRCNN_ACT_NONE, &dinner[i],
                                  want ? &dc[i] : NULL, mode);
        mrcnn_conv_layer_grad_ready(m, &f->inner[i]);
        mrcnn_ws_release(ws, &dinner[i]);
    }
    mrcnn_ws_release(ws, &dp5);
}

void mrcnn_backbone_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                            mrcnn_backbone_out *out) {
    memset(out, 0, sizeof *out);
    mrcnn_resnet_forward(m, ws, images, out);
    mrcnn_fpn_forward(m, ws, out);
}

void mrcnn_backbone_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                             mrcnn_backbone_out *out, mrcnn_tensor *dp) {
    mrcnn_tensor dc[4];
    memset(dc, 0, sizeof dc);
    mrcnn_fpn_backward(m, ws, out, dp, dc);
    mrcnn_resnet_backward(m, ws, images, out, dc);
}
