/* One backend interface, a struct of function pointers chosen at start (as ggml
 * does). The model code builds the same network for every backend and never
 * branches on #ifdef. Tensors passed to a backend live on its device; its ops are
 * asynchronous, and only read_* / sync wait.
 *
 * Semantics are those of the CPU ops (ops.h): NHWC activations, KRSC filters,
 * backward outputs accumulate (+=). Precision: `storage` is the dtype activations
 * and gradients are kept in (fp32, fp16, bf16); math is fp32. The CPU backend
 * emulates fp16/bf16 storage by rounding every op output (half.h). */
#ifndef MRCNN_BACKEND_H
#define MRCNN_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "mrcnn/ops.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MRCNN_ACT_NONE = 0, MRCNN_ACT_RELU = 1 } mrcnn_activation;

/* The host's round trips to the device, counted by every backend in the same terms,
 * so that the CPU backend shows what a step would cost on a GPU (issue 12: a device-
 * resident step has none between its start and the log-period read).
 *   reads    device -> host copies the host waits for: read(), nonfinite()'s flag
 *   syncs    every wait of the host for the device: each read, sync(), and the
 *            backend's own waits (a buffer regrowth, timing a convolution algorithm)
 *   uploads  host -> device copies: write() */
typedef struct {
    uint64_t reads, read_bytes, syncs, uploads, upload_bytes;
} mrcnn_backend_stats;

typedef struct mrcnn_backend mrcnn_backend;
struct mrcnn_backend {
    const char *name; // "cpu" or "cuda"
    mrcnn_device device;
    mrcnn_dtype storage; // activation/gradient storage dtype (set_precision)

    /* memory */
    void *(*alloc)(const mrcnn_backend *be, size_t bytes, const char *what);
    void (*free)(const mrcnn_backend *be, void *p);
    void (*zero)(const mrcnn_backend *be, mrcnn_tensor *t);
    void (*write)(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src); // host -> device
    void (*read)(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst);  // device -> host, waits
    void (*sync)(const mrcnn_backend *be);
    void (*set_precision)(mrcnn_backend *be, mrcnn_dtype storage);
    /* y = x converted to y's dtype (same element count; fp32/fp16/bf16, round to
     * nearest even): the model casts fp32 input images to the activation dtype. */
    void (*cast)(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y);
    void (*destroy)(mrcnn_backend *be); // frees state and the struct itself

    /* convolutions; act = RELU fuses bias + ReLU into the forward */
    void (*conv2d_forward)(const mrcnn_backend *be, const mrcnn_conv2d_desc *d,
                           const mrcnn_tensor *x, const mrcnn_tensor *w, const mrcnn_tensor *b,
                           mrcnn_activation act, mrcnn_tensor *y);
    void (*conv2d_backward)(const mrcnn_backend *be, const mrcnn_conv2d_desc *d,
                            const mrcnn_tensor *x, const mrcnn_tensor *w, const mrcnn_tensor *dy,
                            mrcnn_tensor *dx, mrcnn_tensor *dw, mrcnn_tensor *db); // each may be NULL
    void (*deconv2x2_forward)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                              const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y);
    void (*deconv2x2_backward)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                               const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_tensor *dw,
                               mrcnn_tensor *db);
    /* elementwise and pooling */
    void (*relu_forward)(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y);
    void (*relu_backward)(const mrcnn_backend *be, const mrcnn_tensor *y, const mrcnn_tensor *dy,
                          mrcnn_tensor *dx);
    void (*add_forward)(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b,
                        mrcnn_tensor *y);
    void (*add_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy, mrcnn_tensor *da,
                         mrcnn_tensor *db);
    void (*maxpool2d_forward)(const mrcnn_backend *be, const mrcnn_pool2d_desc *d,
                              const mrcnn_tensor *x, mrcnn_tensor *y);
    void (*maxpool2d_backward)(const mrcnn_backend *be, const mrcnn_pool2d_desc *d,
                               const mrcnn_tensor *x, const mrcnn_tensor *dy, mrcnn_tensor *dx);
    void (*upsample_add_forward)(const mrcnn_backend *be, const mrcnn_tensor *top,
                                 const mrcnn_tensor *lateral, mrcnn_tensor *y);
    void (*upsample_add_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy,
                                  mrcnn_tensor *dtop, mrcnn_tensor *dlateral);
    /* fully connected: x (N, in), w (out, in), b (out) */
    void (*linear_forward)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                           const mrcnn_tensor *b, mrcnn_activation act, mrcnn_tensor *y);
    void (*linear_backward)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *w,
                            const mrcnn_tensor *dy, mrcnn_tensor *dx, mrcnn_tensor *dw,
                            mrcnn_tensor *db);
    /* losses: scalar results are written to a 1-element fp32 device tensor, so no
     * host round trip is forced; weight may be NULL. */
    void (*bce_logits)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                       const mrcnn_tensor *weight, float norm, mrcnn_tensor *loss,
                       mrcnn_tensor *dx /* += d loss/dx, or NULL */);
    void (*softmax_ce)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                       float norm, mrcnn_tensor *loss, mrcnn_tensor *dx);
    void (*smooth_l1)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                      const mrcnn_tensor *weight, float beta, float norm, mrcnn_tensor *loss,
                      mrcnn_tensor *dx);
    /* optimizer: fused SGD with momentum and weight decay over the flat arenas
     * (fp32 master weights); grad_scale multiplies gradients first (1/loss scale).
     * PyTorch semantics: v = mu v + (grad_scale g + weight_decay decay_mask p); p -= lr v.
     * decay_mask: fp32, one value per parameter (0 exempts it), or NULL for all ones. */
    void (*sgd_update)(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                       mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float lr,
                       float momentum_coef, float weight_decay, float grad_scale);
    /* 1 when any element of t is Inf or NaN (for the fp16 loss scaler). */
    int (*nonfinite)(const mrcnn_backend *be, const mrcnn_tensor *t);

    /* multi-level ROIAlign (roi_align.h): feats is an array of d->n_levels tensors, each
     * (N, H_l, W_l, C); rois (R, 5) fp32 (image index, x1, y1, x2, y2), image index < 0
     * marks a padding row; y (R, out_h, out_w, C). Backward accumulates into dfeats
     * (array of d->n_levels tensors; the boxes get no gradient). */
    void (*roi_align_forward)(const mrcnn_backend *be, const mrcnn_roi_align_desc *d,
                              const mrcnn_tensor *feats, const mrcnn_tensor *rois, mrcnn_tensor *y);
    void (*roi_align_backward)(const mrcnn_backend *be, const mrcnn_roi_align_desc *d,
                               const mrcnn_tensor *rois, const mrcnn_tensor *dy, mrcnn_tensor *dfeats);

    /* Per-ROI slices of the predicted class for the box and mask losses, so the
     * per-class outputs never travel to the host: labels (R) int32 (< 0: zeros, no
     * gradient); masks x (R, M, M, K) -> y (R, M, M), deltas x (R, 4K) -> y (R, 4);
     * x in any float dtype, y fp32 (the losses run in fp32). Backward adds dy into
     * the label's slice of dx. */
    void (*gather_class_masks)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                               mrcnn_tensor *y);
    void (*gather_class_masks_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy,
                                        const mrcnn_tensor *labels, mrcnn_tensor *dx);
    void (*gather_class_deltas)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                                mrcnn_tensor *y);
    void (*gather_class_deltas_backward)(const mrcnn_backend *be, const mrcnn_tensor *dy,
                                         const mrcnn_tensor *labels, mrcnn_tensor *dx);

    void *state;              // backend-private (handles, caches)
    mrcnn_backend_stats stats; // since creation; read with mrcnn_backend_stats_get
};

/* Counting goes through a const handle (the ops take one); a backend is never an object
 * defined const, so writing its counters is defined. Relaxed atomics: loader and I/O
 * threads may read or write too. */
static inline void mrcnn_backend_count(const mrcnn_backend *be, uint64_t reads, uint64_t read_bytes, uint64_t syncs,
                                       uint64_t uploads, uint64_t upload_bytes) {
    mrcnn_backend_stats *s = (mrcnn_backend_stats *)&be->stats;
    if (reads) __atomic_fetch_add(&s->reads, reads, __ATOMIC_RELAXED);
    if (read_bytes) __atomic_fetch_add(&s->read_bytes, read_bytes, __ATOMIC_RELAXED);
    if (syncs) __atomic_fetch_add(&s->syncs, syncs, __ATOMIC_RELAXED);
    if (uploads) __atomic_fetch_add(&s->uploads, uploads, __ATOMIC_RELAXED);
    if (upload_bytes) __atomic_fetch_add(&s->upload_bytes, upload_bytes, __ATOMIC_RELAXED);
}

static inline mrcnn_backend_stats mrcnn_backend_stats_get(const mrcnn_backend *be) {
    mrcnn_backend_stats s;
    s.reads = __atomic_load_n(&be->stats.reads, __ATOMIC_RELAXED);
    s.read_bytes = __atomic_load_n(&be->stats.read_bytes, __ATOMIC_RELAXED);
    s.syncs = __atomic_load_n(&be->stats.syncs, __ATOMIC_RELAXED);
    s.uploads = __atomic_load_n(&be->stats.uploads, __ATOMIC_RELAXED);
    s.upload_bytes = __atomic_load_n(&be->stats.upload_bytes, __ATOMIC_RELAXED);
    return s;
}

/* The CPU backend with the generic ops only (src/core/backend_cpu.c); the model's ops
 * (ROIAlign, class gathers) are NULL. mrcnn_backend_cpu_create (model.h) is the full
 * CPU backend: this plus the model's ops, installed from above. */
mrcnn_backend *mrcnn_backend_cpu_create_generic(void);
/* The CUDA backend on the given device, or NULL when the build has no CUDA or no
 * GPU is visible; *why gets the reason then. */
mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why);
/* TF32 tensor cores for fp32 convolutions and GEMMs of a CUDA backend (off by default;
 * MRCNN_TF32=1 at creation sets it too). Defined in src/cuda only: call it for a GPU
 * backend of a CUDA build. */
void mrcnn_backend_cuda_set_tf32(mrcnn_backend *be, int on);
void mrcnn_backend_destroy(mrcnn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
