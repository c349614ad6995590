/* The step-scoped workspace (mrcnn_ws) and the conv layer helpers every part of the
 * network is built from (src/model/layers.c). */
#ifndef MRCNN_LAYERS_H
#define MRCNN_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mrcnn/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model these helpers register parameters in and report gradients to (model.h). */
typedef struct mrcnn_model mrcnn_model;

/* ---- activations --------------------------------------------------------------
 * Step-scoped device buffers: every tensor the forward keeps for the backward is
 * allocated here and released together by mrcnn_ws_reset. */
typedef struct mrcnn_ws {
    const mrcnn_backend *be;
    void **ptrs;
    size_t *sizes; // (cap) bytes of each allocation
    int n, cap;
    size_t bytes, peak_bytes;
} mrcnn_ws;
void mrcnn_ws_init(mrcnn_ws *ws, const mrcnn_backend *be);
/* A zeroed contiguous tensor of the backend's device: for buffers an op ADDS into
 * (every backward output, ops.h). */
mrcnn_tensor mrcnn_ws_tensor(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape);
mrcnn_tensor mrcnn_ws_like(mrcnn_ws *ws, const mrcnn_tensor *t);
/* The same, not zeroed: only for an output the next op overwrites whole before anything
 * reads it (a forward's y, ops_decl.inc's "overwritten"), which saves a memset per
 * activation on the GPU. The CPU backend fills it with all-ones bytes instead (NaN in
 * fp32), so a read before the write turns the tests' results NaN rather than passing
 * on the zeros fresh host pages would hold. */
mrcnn_tensor mrcnn_ws_tensor_uninit(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape);
mrcnn_tensor mrcnn_ws_act_uninit(mrcnn_ws *ws, int ndim, const int64_t *shape);
/* Activations (and, through mrcnn_ws_like, their gradients) are stored in the backend's
 * storage dtype on a GPU backend, in fp32 on the CPU (whose rounded-storage mode rounds
 * fp32 instead). Loss inputs, targets, ROIs and loss values stay fp32. */
mrcnn_dtype mrcnn_ws_act_dtype(const mrcnn_ws *ws);
mrcnn_tensor mrcnn_ws_act(mrcnn_ws *ws, int ndim, const int64_t *shape);
/* Frees one tensor of this workspace early (backward temporaries), so the peak stays
 * near the forward's saved activations. t->data becomes NULL. */
void mrcnn_ws_release(mrcnn_ws *ws, mrcnn_tensor *t);
void mrcnn_ws_reset(mrcnn_ws *ws);
void mrcnn_ws_free(mrcnn_ws *ws);

/* ---- layers ------------------------------------------------------------------- */
typedef struct mrcnn_conv_layer {
    int w, b;            // param indices: w (K, R, S, C), b (K)
    int cin, cout, ks, stride, pad;
    bool frozen;
    /* The output's channels may be padded to a multiple of the model's pad_align with
     * zero filters (mrcnn_conv_layer_out_channels): set only where every consumer of the
     * output takes its channel count from the shape and reads the first cout channels
     * alone (a per-class gather by label), so a padding channel never acts as a class,
     * or that takes them through mrcnn_channels_slice. */
    bool pad_out;
    /* The input's channels may be padded likewise (mrcnn_conv_layer_in_channels): the
     * caller passes x with zero channels after the real ones (mrcnn_channels_pad), the
     * layer computes with a copy of its weight holding zero input channels after them.
     * No dx: the one such layer (the stem) takes the images. */
    bool pad_in;
} mrcnn_conv_layer;

/* Registers a conv layer "<name>.weight" (K, R, S, C) and "<name>.bias" (K); bn is
 * the frozen BN folded into it ("" for none). */
mrcnn_conv_layer mrcnn_conv_layer_add(mrcnn_model *m, const char *name, int cin, int cout, int ks,
                                      int stride, int pad, bool frozen, const char *bn);
/* Reports a parameter's gradient final (once per step; frozen ones never). */
void mrcnn_model_grad_ready(mrcnn_model *m, int param_index);
void mrcnn_conv_layer_grad_ready(mrcnn_model *m, const mrcnn_conv_layer *l);
/* c rounded up to a multiple of the model's pad_align. */
int mrcnn_model_padded(const mrcnn_model *m, int c);
/* A step-scoped zeroed (k, ...) fp32 copy of t (a weight, bias or their gradients, fp32)
 * holding t's rows first: a layer's zero output rows after the real ones. The copy is
 * exact on a GPU and on the CPU in fp32 (refused in its rounded-storage mode, whose cast
 * rounds). _store copies the first rows back into t (the gradients a backward added). */
mrcnn_tensor mrcnn_padded_rows(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *t, int k);
void mrcnn_padded_rows_store(mrcnn_model *m, const mrcnn_tensor *p, mrcnn_tensor *t);
/* The channels of the layer's output: cout, or with pad_out and a model pad_align above
 * 1, cout rounded up to a multiple of it (tensor-core shapes on a GPU). */
int mrcnn_conv_layer_out_channels(const mrcnn_model *m, const mrcnn_conv_layer *l);
/* The channels of the layer's input: cin, or with pad_in likewise rounded up. */
int mrcnn_conv_layer_in_channels(const mrcnn_model *m, const mrcnn_conv_layer *l);
/* Channel padding for consumers that take a fixed channel count: y (..., kp) = x (..., k)
 * followed by kp - k zero channels, in x's dtype; and y (..., k) = the first k channels of
 * x (..., kp). Both are one nn.channel_copy: exact copies (-0 and non-finite values
 * included). The slice's backward is the pad (zero gradient into the padding channels). */
mrcnn_tensor mrcnn_channels_pad(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int kp);
mrcnn_tensor mrcnn_channels_slice(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int k);
/* Conv layer helpers: y = act(conv(x) + b); backward writes or adds dx (dx_mode; NULL: skip) and,
 * unless the layer is frozen, into its parameter gradients. y and dy have
 * mrcnn_conv_layer_out_channels channels; the parameters keep their (cout, ...) shapes:
 * a padded layer computes with views holding zero rows (or input channels) after them. */
mrcnn_tensor mrcnn_conv_layer_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                                      const mrcnn_tensor *x, mrcnn_activation act);
/* The weight and bias layer l computes with (forward and input gradient): the weight's
 * compute copy and the fp32 bias, or for a padded layer its padded views (params.h:
 * mrcnn_params_padded, made on first use and remade once per step). */
void mrcnn_conv_layer_weights(mrcnn_model *m, const mrcnn_conv_layer *l, mrcnn_tensor *w, mrcnn_tensor *b);
void mrcnn_conv_layer_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                               const mrcnn_tensor *x, const mrcnn_tensor *y, mrcnn_activation act,
                               const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_grad_mode dx_mode);

#ifdef __cplusplus
}
#endif
#endif
