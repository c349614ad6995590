/* Step-scoped activation buffers and the conv-layer forward/backward used by every
 * module of the network. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mrcnn_ws_init(mrcnn_ws *ws, const mrcnn_backend *be) {
    memset(ws, 0, sizeof *ws);
    ws->be = be;
}

/* zero: 1 zeroes the buffer, 0 leaves it as allocated (poisoned on the CPU, layers.h). */
static mrcnn_tensor ws_alloc(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape, int zero) {
    mrcnn_tensor t = mrcnn_tensor_view(NULL, dtype, ws->be->device, ndim, shape);
    size_t bytes = mrcnn_tensor_nbytes(&t);
    if (ws->n == ws->cap) {
        ws->cap = ws->cap ? 2 * ws->cap : 256;
        ws->ptrs = MRCNN_REALLOC(ws->ptrs, (size_t)ws->cap * sizeof *ws->ptrs, "workspace list");
        ws->sizes = MRCNN_REALLOC(ws->sizes, (size_t)ws->cap * sizeof *ws->sizes, "workspace list");
    }
    t.data = ws->be->mem.alloc(ws->be, bytes ? bytes : 16, "activation");
    ws->sizes[ws->n] = bytes;
    ws->ptrs[ws->n++] = t.data;
    ws->bytes += bytes;
    if (ws->bytes > ws->peak_bytes) ws->peak_bytes = ws->bytes;
    if (bytes && zero) ws->be->mem.zero(ws->be, &t);
    else if (bytes && ws->be->device == MRCNN_DEVICE_CPU) memset(t.data, 0xff, bytes);
    return t;
}

mrcnn_tensor mrcnn_ws_tensor(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape) {
    return ws_alloc(ws, dtype, ndim, shape, 1);
}

mrcnn_tensor mrcnn_ws_tensor_uninit(mrcnn_ws *ws, mrcnn_dtype dtype, int ndim, const int64_t *shape) {
    return ws_alloc(ws, dtype, ndim, shape, 0);
}

mrcnn_dtype mrcnn_ws_act_dtype(const mrcnn_ws *ws) {
    // the CPU backend emulates low precision by rounding fp32 (rounded storage); a GPU
    // backend stores bf16/fp16 natively
    return ws->be->device == MRCNN_DEVICE_GPU ? ws->be->storage : MRCNN_DTYPE_F32;
}

mrcnn_tensor mrcnn_ws_act(mrcnn_ws *ws, int ndim, const int64_t *shape) {
    return mrcnn_ws_tensor(ws, mrcnn_ws_act_dtype(ws), ndim, shape);
}

mrcnn_tensor mrcnn_ws_act_uninit(mrcnn_ws *ws, int ndim, const int64_t *shape) {
    return mrcnn_ws_tensor_uninit(ws, mrcnn_ws_act_dtype(ws), ndim, shape);
}

mrcnn_tensor mrcnn_ws_like(mrcnn_ws *ws, const mrcnn_tensor *t) {
    return mrcnn_ws_tensor(ws, t->dtype, t->ndim, t->shape);
}

void mrcnn_ws_release(mrcnn_ws *ws, mrcnn_tensor *t) {
    if (!t->data) return;
    for (int i = ws->n - 1; i >= 0; i--) {
        if (ws->ptrs[i] != t->data) continue;
        ws->be->mem.free(ws->be, ws->ptrs[i]);
        ws->bytes -= ws->sizes[i];
        ws->ptrs[i] = ws->ptrs[ws->n - 1];
        ws->sizes[i] = ws->sizes[ws->n - 1];
        ws->n--;
        t->data = NULL;
        return;
    }
    MRCNN_CHECK(0, "workspace: releasing a tensor it does not hold");
}

void mrcnn_ws_reset(mrcnn_ws *ws) {
    for (int i = 0; i < ws->n; i++) ws->be->mem.free(ws->be, ws->ptrs[i]);
    ws->n = 0;
    ws->bytes = 0;
}

void mrcnn_ws_free(mrcnn_ws *ws) {
    mrcnn_ws_reset(ws);
    free(ws->ptrs);
    free(ws->sizes);
    memset(ws, 0, sizeof *ws);
}

mrcnn_conv_layer mrcnn_conv_layer_add(mrcnn_model *m, const char *name, int cin, int cout, int ks,
                                      int stride, int pad, bool frozen, const char *bn) {
    mrcnn_conv_layer l = {.cin = cin, .cout = cout, .ks = ks, .stride = stride, .pad = pad,
                          .frozen = frozen};
    char buf[MRCNN_ARENA_NAME_LEN];
    snprintf(buf, sizeof buf, "%s.weight", name);
    l.w = mrcnn_params_add(&m->params, buf, 4, (int64_t[]){cout, ks, ks, cin}, !frozen, bn);
    snprintf(buf, sizeof buf, "%s.bias", name);
    /* A bias folded from a frozen BN (bn set) is the BN's shift: frozen, as torchvision's
     * FrozenBatchNorm2d and detectron2 keep it, even when the conv itself trains (a
     * trained shift was 25,088 extra parameters on R50, found by bench/accuracy.sh). */
    l.b = mrcnn_params_add(&m->params, buf, 1, (int64_t[]){cout}, !frozen && !(bn && bn[0]), "");
    return l;
}

void mrcnn_model_grad_ready(mrcnn_model *m, int i) {
    if (!m->params.trainable[i] || !m->grad_reported || m->grad_reported[i]) return;
    m->grad_reported[i] = true;
    if (m->grad_ready) m->grad_ready(i, m->grad_ready_ctx);
}

void mrcnn_conv_layer_grad_ready(mrcnn_model *m, const mrcnn_conv_layer *l) {
    mrcnn_model_grad_ready(m, l->w);
    mrcnn_model_grad_ready(m, l->b);
}

int mrcnn_model_padded(const mrcnn_model *m, int c) {
    const int a = m->pad_align > 1 ? m->pad_align : 1;
    return (c + a - 1) / a * a;
}

int mrcnn_conv_layer_out_channels(const mrcnn_model *m, const mrcnn_conv_layer *l) {
    return l->pad_out ? mrcnn_model_padded(m, l->cout) : l->cout;
}

int mrcnn_conv_layer_in_channels(const mrcnn_model *m, const mrcnn_conv_layer *l) {
    return l->pad_in ? mrcnn_model_padded(m, l->cin) : l->cin;
}

static mrcnn_conv2d_desc layer_desc(const mrcnn_model *m, const mrcnn_conv_layer *l, const mrcnn_tensor *x, int k) {
    const int c = mrcnn_conv_layer_in_channels(m, l);
    MRCNN_CHECK(x->ndim == 4 && x->shape[3] == c, "conv layer: input has %lld channels (rank %d) but the layer takes %d",
                (long long)x->shape[x->ndim - 1], x->ndim, c);
    return mrcnn_conv2d_desc_make((int)x->shape[0], (int)x->shape[1], (int)x->shape[2], c, k, l->ks, l->stride,
                                  l->pad);
}

/* x (..., c) as rows (M, c). */
static mrcnn_tensor as_rows(const mrcnn_tensor *x, int64_t c) {
    return mrcnn_tensor_reshape(x, 2, (int64_t[]){mrcnn_tensor_numel(x) / c, c});
}

/* y's rows from x's (the first channels, or all of x's and zeros after), in one pass. */
static void channels_copy(mrcnn_model *m, const mrcnn_tensor *x, mrcnn_tensor *y, const char *what) {
    const int64_t c = x->shape[x->ndim - 1], d = y->shape[y->ndim - 1];
    MRCNN_CHECK(c > 0 && d > 0 && mrcnn_tensor_numel(x) / c == mrcnn_tensor_numel(y) / d,
                "%s: %lld channels to %lld, %lld and %lld elements", what, (long long)c, (long long)d,
                (long long)mrcnn_tensor_numel(x), (long long)mrcnn_tensor_numel(y));
    mrcnn_tensor xr = as_rows(x, c), yr = as_rows(y, d);
    m->be->nn.channel_copy(m->be, &xr, &yr);
}

mrcnn_tensor mrcnn_channels_pad(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int kp) {
    MRCNN_CHECK(kp >= x->shape[x->ndim - 1], "channel padding: %lld channels into %d",
                (long long)x->shape[x->ndim - 1], kp);
    int64_t shape[MRCNN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = kp;
    mrcnn_tensor y = mrcnn_ws_tensor_uninit(ws, x->dtype, x->ndim, shape); // the copy writes the zeros too
    channels_copy(m, x, &y, "channel padding");
    return y;
}

/* y (..., k) = the first k channels of x (..., kp), y allocated by the caller. */
static void channels_slice_into(mrcnn_model *m, const mrcnn_tensor *x, mrcnn_tensor *y) {
    MRCNN_CHECK(y->shape[y->ndim - 1] <= x->shape[x->ndim - 1], "channel slice: %lld channels of %lld",
                (long long)y->shape[y->ndim - 1], (long long)x->shape[x->ndim - 1]);
    channels_copy(m, x, y, "channel slice");
}

mrcnn_tensor mrcnn_channels_slice(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *x, int k) {
    int64_t shape[MRCNN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = k;
    mrcnn_tensor y = mrcnn_ws_tensor_uninit(ws, x->dtype, x->ndim, shape); // the copy writes it whole
    channels_slice_into(m, x, &y);
    return y;
}

/* A zeroed (k, ...) fp32 tensor whose first rows are a copy of t (a weight's or a bias's
 * gradient, which the backward adds to; the weights themselves are padded views made
 * once per step, mrcnn_params_padded): KRSC keeps the output channel slowest, so the copy is a
 * prefix and the zero filters follow it. The copy is a cast fp32 -> fp32, exact on a
 * GPU and on the CPU in fp32; the CPU's rounded-storage mode would round it. */
mrcnn_tensor mrcnn_padded_rows(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *t, int k) {
    const mrcnn_backend *be = m->be;
    MRCNN_CHECK(be->device == MRCNN_DEVICE_GPU || be->storage == MRCNN_DTYPE_F32,
                "conv layer: padded output channels (pad_align %d) need an exact copy of the weights, but "
                "the cpu backend's cast rounds in its rounded-storage mode (storage %s); use pad_align 1 there",
                m->pad_align, mrcnn_dtype_name(be->storage));
    int64_t shape[MRCNN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = k;
    mrcnn_tensor p = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, t->ndim, shape);
    mrcnn_tensor head = mrcnn_tensor_view(p.data, p.dtype, p.device, t->ndim, t->shape);
    be->nn.cast(be, t, &head);
    return p;
}

/* t (K, R, S, C) fp32 (a weight's gradient) with zero input channels up to c: an exact
 * copy as mrcnn_padded_rows', which the CPU's rounded-storage mode would round too. */
static mrcnn_tensor padded_in_copy(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_tensor *t, int c) {
    MRCNN_CHECK(m->be->device == MRCNN_DEVICE_GPU || m->be->storage == MRCNN_DTYPE_F32,
                "conv layer: padded input channels (pad_align %d) need an exact copy of the weights, but the cpu "
                "backend rounds in its rounded-storage mode (storage %s); use pad_align 1 there",
                m->pad_align, mrcnn_dtype_name(m->be->storage));
    return mrcnn_channels_pad(m, ws, t, c);
}

/* The first rows of a padded copy back into t (the gradients the backward added). */
void mrcnn_padded_rows_store(mrcnn_model *m, const mrcnn_tensor *p, mrcnn_tensor *t) {
    mrcnn_tensor head = mrcnn_tensor_view(p->data, p->dtype, p->device, t->ndim, t->shape);
    m->be->nn.cast(m->be, &head, t);
}

void mrcnn_conv_layer_weights(mrcnn_model *m, const mrcnn_conv_layer *l, mrcnn_tensor *w, mrcnn_tensor *b) {
    const mrcnn_tensor *v = mrcnn_arena_get(&m->params.values, l->w);
    const int k = mrcnn_conv_layer_out_channels(m, l), c = mrcnn_conv_layer_in_channels(m, l);
    *b = *mrcnn_arena_get(&m->params.values, l->b);
    if (c != l->cin) { // zero input channels
        *w = mrcnn_params_padded(&m->params, l->w, v->shape[0], c);
    } else if (k == l->cout) { // the weights in the compute dtype, cast once per step
        *w = *mrcnn_params_compute(&m->params, l->w);
    } else { // zero filters and zero bias entries up to k
        *w = mrcnn_params_padded(&m->params, l->w, k, v->shape[v->ndim - 1]);
        *b = mrcnn_params_padded(&m->params, l->b, k, k);
    }
}

mrcnn_tensor mrcnn_conv_layer_forward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                                      const mrcnn_tensor *x, mrcnn_activation act) {
    const int k = mrcnn_conv_layer_out_channels(m, l);
    mrcnn_conv2d_desc d = layer_desc(m, l, x, k);
    // conv2d_forward overwrites y whole
    mrcnn_tensor y = mrcnn_ws_act_uninit(ws, 4, (int64_t[]){d.n, mrcnn_conv2d_out_h(&d), mrcnn_conv2d_out_w(&d), k});
    mrcnn_tensor w, b;
    mrcnn_conv_layer_weights(m, l, &w, &b);
    m->be->nn.conv2d_forward(m->be, &d, x, &w, &b, act, &y);
    return y;
}

/* act = RELU: the ReLU's backward is fused into conv2d_backward (masked by y). dx_mode:
 * WRITE where this layer is dx's only writer (an uninitialised buffer), ADD where
 * another gradient is added to it. */
void mrcnn_conv_layer_backward(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_conv_layer *l,
                               const mrcnn_tensor *x, const mrcnn_tensor *y, mrcnn_activation act,
                               const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_grad_mode dx_mode) {
    if (l->frozen && !dx) return;
    const mrcnn_backend *be = m->be;
    const int k = mrcnn_conv_layer_out_channels(m, l);
    mrcnn_conv2d_desc d = layer_desc(m, l, x, k);
    mrcnn_tensor w, b;
    mrcnn_conv_layer_weights(m, l, &w, &b);
    mrcnn_tensor *dw = l->frozen ? NULL : mrcnn_arena_get(&m->params.grads, l->w);
    mrcnn_tensor *db = l->frozen || !m->params.trainable[l->b] ? NULL : mrcnn_arena_get(&m->params.grads, l->b);
    if (d.c != l->cin) {
        /* As below for the input channels: the weight gradient through a padded copy that
         * starts from the arena's, its real channels copied back, the padding's dropped. */
        MRCNN_CHECK(!dx, "conv layer: a layer with padded input channels gives no input gradient");
        mrcnn_tensor dwp = {0};
        if (dw) dwp = padded_in_copy(m, ws, dw, d.c);
        be->nn.conv2d_backward(be, &d, x, &w, dy, act, y, NULL, dx_mode, dw ? &dwp : NULL, db);
        if (dw) channels_slice_into(m, &dwp, dw);
        mrcnn_ws_release(ws, &dwp);
    } else if (k == l->cout) {
        be->nn.conv2d_backward(be, &d, x, &w, dy, act, y, dx, dx_mode, dw, db);
    } else {
        /* The gradients go through padded copies that start from the arena's, so the
         * backward adds into the same values as the unpadded layer does (accumulation
         * over calls and micro-batches included); the zero filters' gradients, zero
         * since dy's padding channels are, are dropped. */
        mrcnn_tensor dwp = {0}, dbp = {0};
        if (dw) dwp = mrcnn_padded_rows(m, ws, dw, k);
        if (db) dbp = mrcnn_padded_rows(m, ws, db, k);
        be->nn.conv2d_backward(be, &d, x, &w, dy, act, y, dx, dx_mode, dw ? &dwp : NULL, db ? &dbp : NULL);
        if (dw) mrcnn_padded_rows_store(m, &dwp, dw);
        if (db) mrcnn_padded_rows_store(m, &dbp, db);
        mrcnn_ws_release(ws, &dbp);
        mrcnn_ws_release(ws, &dwp);
    }
}
