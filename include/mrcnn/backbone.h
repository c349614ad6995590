/* The backbone: ResNet (frozen BN folded into its convs) and the FPN on top of it
 * (src/model/backbone/resnet.c, fpn.c). */
#ifndef MRCNN_BACKBONE_H
#define MRCNN_BACKBONE_H

#include <stdbool.h>
#include "mrcnn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MRCNN_FROZEN_BN_EPS 1e-5f /* torchvision's FrozenBatchNorm2d default */
#define MRCNN_FPN_LEVELS 5        /* P2..P6 */

typedef struct mrcnn_bottleneck {
    mrcnn_conv_layer conv1, conv2, conv3, down;
    bool has_down;
} mrcnn_bottleneck;

typedef struct mrcnn_resnet {
    mrcnn_conv_layer stem;      // 7x7 s2 + folded BN + ReLU, then max-pool 3x3 s2
    int n_blocks[4];            // res2..res5
    mrcnn_bottleneck *blocks[4];
    int out_channels[4];        // C2..C5
    int freeze_at;              // 0 none, 1 stem, 2 stem + res2, ...
} mrcnn_resnet;

typedef struct mrcnn_fpn {
    mrcnn_conv_layer inner[4], layer[4]; // lateral 1x1 and output 3x3, C2..C5
    int out_channels;
} mrcnn_fpn;

/* ---- forward and backward ------------------------------------------------------ */
typedef struct mrcnn_backbone_out {
    mrcnn_tensor stem_in;        // (N, H, W, C') the images in the activation dtype, zero-padded to the stem's input channels
    mrcnn_tensor stem;           // (N, H/4, W/4, C0) after max-pool
    mrcnn_tensor stem_conv;      // (N, H/2, W/2, C0) before max-pool
    mrcnn_tensor *block_out[4];  // per stage, per block: (N, h, w, C)
    mrcnn_tensor *block_a1[4], *block_a2[4], *block_sc[4];
    mrcnn_tensor c[4];           // C2..C5 (aliases of the last block outputs)
    mrcnn_tensor inner[4];       // FPN top-down sums (N, h, w, F)
    mrcnn_tensor p[MRCNN_FPN_LEVELS]; // P2..P6 (N, h, w, F)
} mrcnn_backbone_out;

void mrcnn_resnet_build(mrcnn_model *m);
void mrcnn_fpn_build(mrcnn_model *m);
/* images (N, H, W, 3), H and W divisible by 32. */
void mrcnn_backbone_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                            mrcnn_backbone_out *out);
/* dp[l] (N, h, w, F) for each P level (a NULL data pointer: no gradient there). */
void mrcnn_backbone_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                             mrcnn_backbone_out *out, mrcnn_tensor *dp);
void mrcnn_backbone_out_free(mrcnn_backbone_out *out);
/* The two halves: ResNet fills stem..c; dc[s] (N, h, w, C) are the gradients of
 * C2..C5 (NULL data: none). FPN fills inner and p from c and returns dc. */
void mrcnn_resnet_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                          mrcnn_backbone_out *out);
void mrcnn_resnet_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *images,
                           mrcnn_backbone_out *out, mrcnn_tensor *dc);
void mrcnn_fpn_forward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *out);
/* Gradients of C_s are wanted only where a ResNet stage at or before s trains. */
void mrcnn_fpn_backward(mrcnn_model *m, mrcnn_ws *ws, mrcnn_backbone_out *out, mrcnn_tensor *dp,
                        mrcnn_tensor *dc);
/* True when some parameter before ResNet unit u (0 stem, 1..4 res2..res5) trains,
 * so the gradient of that unit's input is needed. */
bool mrcnn_resnet_needs_input_grad(const mrcnn_model *m, int unit);

#ifdef __cplusplus
}
#endif
#endif
