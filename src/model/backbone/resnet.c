/* ResNet bottleneck backbones (R50, R101, and a narrow one-block-per-stage "tiny"
 * for tests and the demo). Frozen BN is folded into every conv at load, so each
 * conv here carries a bias. The stride sits in the 3x3 (torchvision) or in the
 * first 1x1 (MSRA / detectron2) by MODEL.RESNETS.STRIDE_IN_1X1. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "../model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool unit_frozen(const mrcnn_resnet *r, int unit) { return unit < r->freeze_at; }

bool mrcnn_resnet_needs_input_grad(const mrcnn_model *m, int unit) {
    // units 0..unit-1 hold a trainable one when freeze_at <= unit - 1
    return m->resnet.freeze_at <= unit - 1;
}

void mrcnn_resnet_build(mrcnn_model *m) {
    const mrcnn_config *cfg = &m->cfg;
    mrcnn_resnet *r = &m->resnet;
    memset(r, 0, sizeof *r);
    int stem_c, inner[4], out[4];
    int depth[4];
    if (strcmp(cfg->backbone_name, "tiny") == 0) {
        MRCNN_CHECK(cfg->tiny_channels.n == 4, "MODEL.TINY.CHANNELS: %d widths but the tiny backbone "
                    "has 4 stages", cfg->tiny_channels.n);
        stem_c = cfg->tiny_channels.v[0];
        for (int s = 0; s < 4; s++) {
            MRCNN_CHECK(cfg->tiny_channels.v[s] >= 4, "MODEL.TINY.CHANNELS[%d] = %d is under 4", s,
                        cfg->tiny_channels.v[s]);
            out[s] = cfg->tiny_channels.v[s];
            inner[s] = out[s] / 4;
            depth[s] = 1;
        }
    } else {
        int d3;
        if (strcmp(cfg->backbone_name, "resnet50") == 0) d3 = 6;
        else if (strcmp(cfg->backbone_name, "resnet101") == 0) d3 = 23;
        else MRCNN_CHECK(0, "MODEL.BACKBONE.NAME '%s': expected resnet50, resnet101 or tiny",
                         cfg->backbone_name);
        stem_c = 64;
        int d[4] = {3, 4, d3, 3};
        for (int s = 0; s < 4; s++) {
            inner[s] = 64 << s;
            out[s] = 256 << s;
            depth[s] = d[s];
        }
    }
    MRCNN_CHECK(cfg->backbone_freeze_at >= 0 && cfg->backbone_freeze_at <= 5,
                "MODEL.BACKBONE.FREEZE_AT = %d outside [0, 5]", cfg->backbone_freeze_at);
    r->freeze_at = cfg->backbone_freeze_at;
    r->stem = mrcnn_conv_layer_add(m, "backbone.body.conv1", 3, stem_c, 7, 2, 3, unit_frozen(r, 0),
                                   "backbone.body.bn1");
    // 3 channels miss a GPU's tensor-core convolutions: the forward pads the images
    r->stem.pad_in = true;
    int cin = stem_c;
    char name[MRCNN_ARENA_NAME_LEN], bn[MRCNN_ARENA_NAME_LEN];
    for (int s = 0; s < 4; s++) {
        bool frozen = unit_frozen(r, s + 1);
        r->n_blocks[s] = depth[s];
        r->out_channels[s] = out[s];
        r->blocks[s] = MRCNN_CALLOC((size_t)depth[s], sizeof(mrcnn_bottleneck), "resnet blocks");
        for (int b = 0; b < depth[s]; b++) {
            mrcnn_bottleneck *k = &r->blocks[s][b];
            int stride = (b == 0 && s > 0) ? 2 : 1;
            int s1 = cfg->resnets_stride_in_1x1 ? stride : 1, s3 = cfg->resnets_stride_in_1x1 ? 1 : stride;
            const char *pre = "backbone.body.layer";
#define NAMES(suffix_conv, suffix_bn)                                                   \
    snprintf(name, sizeof name, "%s%d.%d.%s", pre, s + 1, b, suffix_conv);              \
    snprintf(bn, sizeof bn, "%s%d.%d.%s", pre, s + 1, b, suffix_bn)
            NAMES("conv1", "bn1");
            k->conv1 = mrcnn_conv_layer_add(m, name, cin, inner[s], 1, s1, 0, frozen, bn);
            NAMES("conv2", "bn2");
            k->conv2 = mrcnn_conv_layer_add(m, name, inner[s], inner[s], 3, s3, 1, frozen, bn);
            NAMES("conv3", "bn3");
            k->conv3 = mrcnn_conv_layer_add(m, name, inner[s], out[s], 1, 1, 0, frozen, bn);
            k->has_down = (b == 0);
            if (k->has_down) {
                NAMES("downsample.0", "downsample.1");
                k->down = mrcnn_conv_layer_add(m, name, cin, out[s], 1, stride, 0, frozen, bn);
            }
#undef NAMES
            cin = out[s];
        }
    }
}

void mrcnn_resnet_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                          mrcnn_backbone_out *o) {
    const mrcnn_backend *be = m->be;
    mrcnn_resnet *r = &m->resnet;
    MRCNN_CHECK(images->ndim == 4 && images->shape[3] == 3 && images->shape[1] % 32 == 0 &&
                images->shape[2] % 32 == 0,
                "backbone: images must be (N, H, W, 3) with H and W divisible by 32, got (%lld, %lld, "
                "%lld, %lld)", (long long)images->shape[0], (long long)images->shape[1],
                (long long)images->shape[2], (long long)images->shape[3]);
    /* The stem's input: the images in the activation dtype (a GPU backend's bf16/fp16)
     * with zero channels up to the stem's padded width, cast and pad in one pass. */
    const int c = mrcnn_conv_layer_in_channels(m, &r->stem);
    const mrcnn_dtype act = mrcnn_ws_act_dtype(ws);
    o->stem_in = *images;
    if (c != 3 || images->dtype != act) {
        const int64_t rows = images->shape[0] * images->shape[1] * images->shape[2];
        o->stem_in = mrcnn_ws_tensor_uninit(ws, act, 4, (int64_t[]){images->shape[0], images->shape[1],
                                                                    images->shape[2], c}); // written whole
        mrcnn_tensor x = mrcnn_tensor_reshape(images, 2, (int64_t[]){rows, 3});
        mrcnn_tensor y = mrcnn_tensor_reshape(&o->stem_in, 2, (int64_t[]){rows, c});
        be->nn.channel_copy(be, &x, &y);
    }
    o->stem_conv = mrcnn_conv_layer_forward(m, ws, &r->stem, &o->stem_in, MRCNN_ACT_RELU);
    mrcnn_pool2d_desc pd = {(int)o->stem_conv.shape[0], (int)o->stem_conv.shape[1],
                            (int)o->stem_conv.shape[2], (int)o->stem_conv.shape[3], 3, 2, 1};
    // maxpool2d_forward overwrites the output whole
    o->stem = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){pd.n, mrcnn_pool2d_out_h(&pd), mrcnn_pool2d_out_w(&pd), pd.c});
    be->nn.maxpool2d_forward(be, &pd, &o->stem_conv, &o->stem);
    const mrcnn_tensor *x = &o->stem;
    for (int s = 0; s < 4; s++) {
        int nb = r->n_blocks[s];
        o->block_out[s] = MRCNN_CALLOC((size_t)nb, sizeof(mrcnn_tensor), "block outputs");
        o->block_a1[s] = MRCNN_CALLOC((size_t)nb, sizeof(mrcnn_tensor), "block a1");
        o->block_a2[s] = MRCNN_CALLOC((size_t)nb, sizeof(mrcnn_tensor), "block a2");
        o->block_sc[s] = MRCNN_CALLOC((size_t)nb, sizeof(mrcnn_tensor), "block shortcuts");
        for (int b = 0; b < nb; b++) {
            const mrcnn_bottleneck *k = &r->blocks[s][b];
            o->block_a1[s][b] = mrcnn_conv_layer_forward(m, ws, &k->conv1, x, MRCNN_ACT_RELU);
            o->block_a2[s][b] = mrcnn_conv_layer_forward(m, ws, &k->conv2, &o->block_a1[s][b],
                                                         MRCNN_ACT_RELU);
            // conv3's output becomes the block output in place, relu(conv3 + shortcut) in
            // one fused pass: the backward needs only the post-ReLU sum
            mrcnn_tensor y = mrcnn_conv_layer_forward(m, ws, &k->conv3, &o->block_a2[s][b],
                                                      MRCNN_ACT_NONE);
            const mrcnn_tensor *sc = x;
            if (k->has_down) {
                o->block_sc[s][b] = mrcnn_conv_layer_forward(m, ws, &k->down, x, MRCNN_ACT_NONE);
                sc = &o->block_sc[s][b];
            }
            be->nn.add_forward(be, &y, sc, MRCNN_ACT_RELU, &y);
            o->block_out[s][b] = y;
            x = &o->block_out[s][b];
        }
        o->c[s] = *x;
    }
}

void mrcnn_resnet_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                           mrcnn_backbone_out *o, mrcnn_tensor *dc) {
    const mrcnn_backend *be = m->be;
    mrcnn_resnet *r = &m->resnet;
    mrcnn_tensor dnext = {0}; // gradient of the current block's output
    for (int s = 3; s >= 0; s--) {
        // freezing is a prefix: a frozen stage means nothing before it trains either
        if (unit_frozen(r, s + 1)) break;
        for (int b = r->n_blocks[s] - 1; b >= 0; b--) {
            const mrcnn_bottleneck *k = &r->blocks[s][b];
            const mrcnn_tensor *xin = b > 0 ? &o->block_out[s][b - 1]
                                            : (s > 0 ? &o->block_out[s - 1][r->n_blocks[s - 1] - 1]
                                                     : &o->stem);
            mrcnn_tensor dy;
            if (b == r->n_blocks[s] - 1) {
                // the stage output gathers the FPN's gradient and the next stage's
                if (dnext.data && dc[s].data) {
                    be->nn.add_forward(be, &dnext, &dc[s], MRCNN_ACT_NONE, &dnext);
                    dy = dnext;
                } else if (dnext.data) {
                    dy = dnext;
                } else if (dc[s].data) {
                    dy = dc[s];
                } else {
                    dy = mrcnn_ws_like(ws, &o->block_out[s][b]);
                }
            } else {
                dy = dnext;
            }
            // earlier blocks of this stage train; before it, only if an earlier unit does
            bool want_dx = b > 0 || mrcnn_resnet_needs_input_grad(m, s + 1);
            // the fused join's ReLU backward, masked by its output: a pass of its own, since
            // two ops read the masked gradient (conv3 and the shortcut); relu_backward writes
            // all of dsum, so it is not zeroed first
            mrcnn_tensor dsum = mrcnn_ws_tensor_uninit(ws, dy.dtype, dy.ndim, dy.shape);
            be->nn.relu_backward(be, &o->block_out[s][b], &dy, &dsum);
            // da2, da1: each conv is its input gradient's only writer (written, not zeroed)
            mrcnn_tensor da2 = grad_buffer(ws, &o->block_a2[s][b]);
            mrcnn_conv_layer_backward(m, ws, &k->conv3, &o->block_a2[s][b], NULL, MRCNN_ACT_NONE,
                                      &dsum, &da2, MRCNN_GRAD_WRITE);
            mrcnn_tensor da1 = grad_buffer(ws, &o->block_a1[s][b]);
            mrcnn_conv_layer_backward(m, ws, &k->conv2, &o->block_a1[s][b], &o->block_a2[s][b],
                                      MRCNN_ACT_RELU, &da2, &da1, MRCNN_GRAD_WRITE);
            mrcnn_ws_release(ws, &da2);
            // the block input's gradient: conv1's, written, then the shortcut's added
            mrcnn_tensor dx = {0};
            if (want_dx) dx = grad_buffer(ws, xin);
            mrcnn_conv_layer_backward(m, ws, &k->conv1, xin, &o->block_a1[s][b], MRCNN_ACT_RELU,
                                      &da1, want_dx ? &dx : NULL, MRCNN_GRAD_WRITE);
            if (k->has_down)
                mrcnn_conv_layer_backward(m, ws, &k->down, xin, NULL, MRCNN_ACT_NONE, &dsum,
                                          want_dx ? &dx : NULL, MRCNN_GRAD_ADD);
            else if (want_dx)
                be->nn.add_forward(be, &dx, &dsum, MRCNN_ACT_NONE, &dx);
            mrcnn_conv_layer_grad_ready(m, &k->conv3);
            mrcnn_conv_layer_grad_ready(m, &k->conv2);
            mrcnn_conv_layer_grad_ready(m, &k->conv1);
            if (k->has_down) mrcnn_conv_layer_grad_ready(m, &k->down);
            mrcnn_ws_release(ws, &da1);
            mrcnn_ws_release(ws, &dsum);
            // dy is this block's own buffer unless it is the FPN's dc[s] (the caller's)
            if (dy.data != dc[s].data) mrcnn_ws_release(ws, &dy);
            dnext = dx;
        }
    }
    // the stem trains only with FREEZE_AT 0
    if (!unit_frozen(r, 0) && dnext.data) {
        mrcnn_pool2d_desc pd = {(int)o->stem_conv.shape[0], (int)o->stem_conv.shape[1],
                                (int)o->stem_conv.shape[2], (int)o->stem_conv.shape[3], 3, 2, 1};
        mrcnn_tensor dconv = mrcnn_ws_like(ws, &o->stem_conv);
        be->nn.maxpool2d_backward(be, &pd, &o->stem_conv, &dnext, &dconv);
        mrcnn_conv_layer_backward(m, ws, &r->stem, &o->stem_in, &o->stem_conv, MRCNN_ACT_RELU, &dconv,
                                  NULL, MRCNN_GRAD_ADD);
        mrcnn_conv_layer_grad_ready(m, &r->stem);
    }
}

void mrcnn_backbone_out_free(mrcnn_backbone_out *o) {
    for (int s = 0; s < 4; s++) {
        free(o->block_out[s]);
        free(o->block_a1[s]);
        free(o->block_a2[s]);
        free(o->block_sc[s]);
    }
    memset(o, 0, sizeof *o);
}
