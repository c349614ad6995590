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
#include "mrcnn/detect_ops.h"
#include "mrcnn/ops.h"
#include "mrcnn/roi_align.h"
#include "mrcnn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MRCNN_ACT_NONE = 0, MRCNN_ACT_RELU = 1 } mrcnn_activation;

/* The host's round trips to the device, counted by every backend in the same terms,
 * so that the CPU backend shows what a step would cost on a GPU (a device-resident
 * step has none between its start and the log-period read).
 *   reads    device -> host copies the host waits for: read(), nonfinite()'s flag
 *   syncs    every wait of the host for the device: each read, sync(), and the
 *            backend's own waits (a buffer regrowth, timing a convolution algorithm)
 *   uploads  host -> device copies: write() */
typedef struct {
    uint64_t reads, read_bytes, syncs, uploads, upload_bytes;
} mrcnn_backend_stats;

/* A loss's normalizer: max(count, 1) * scale, where count is a 1-element fp32 device
 * tensor (NULL: 1), e.g. the sampled anchors or ROIs of the batch over all ranks, so a
 * data-dependent normalizer never travels through the host. grad_mult multiplies the
 * gradients only (the fp16 loss scale, 1/accumulation steps), never the loss value. */
typedef struct {
    const mrcnn_tensor *count;      // (1) fp32 on the backend's device, or NULL
    float scale;                    // > 0
    float grad_mult;
    const mrcnn_tensor *grad_scale; // (1) fp32 on the device, or NULL: multiplies the gradients too
                                    // (the fp16 loss scale, which the device decides each step)
} mrcnn_loss_norm;

/* The normalizer as a host float: the CPU backend's (count lives in host memory there). */
static inline float mrcnn_loss_norm_host(const mrcnn_loss_norm *n, const float *count) {
    float c = count ? count[0] : 1.0f;
    return (c > 1.0f ? c : 1.0f) * n->scale;
}

typedef struct mrcnn_backend mrcnn_backend;
struct mrcnn_step_desc; // step_ctl.h

/* Options and statistics of the device behind a backend: the one way to set or ask
 * anything of a device, so that no code outside src/backend/cuda calls CUDA. */
typedef struct mrcnn_backend_info {
    /* TF32 tensor cores for fp32 convolutions and GEMMs (off by default; MRCNN_TF32=1
     * at creation sets it too). The CPU has none: a no-op there, math stays fp32. */
    void (*set_tf32)(mrcnn_backend *be, int on);
    /* Compute capability as major * 10 + minor; 0 on the CPU. */
    int (*compute_capability)(const mrcnn_backend *be);
    /* The device in words into buf: "GPU-<uuid> (<name>)", or "cpu". Returns buf. */
    const char *(*device_name)(const mrcnn_backend *be, char *buf, size_t len);
    /* Memory in use on the device, MiB: the GPU's (total - free, every process's, the
     * CUDA context included; 0 when the driver does not say), or this process's RSS. */
    double (*memory_used_mb)(const mrcnn_backend *be);
    /* High-water mark of the memory the backend holds, MiB. GPU: what alloc handed out
     * (the stream-ordered pool's peak) since creation or the last reset (reset = 1
     * restarts it), -1 without a pool (MRCNN_CUDA_POOL=0); CPU: the process's max RSS
     * (reset is ignored). */
    double (*peak_mb)(const mrcnn_backend *be, int reset);
} mrcnn_backend_info;

struct mrcnn_backend {
    const char *name; // "cpu" or "cuda"
    mrcnn_device device;
    mrcnn_dtype storage; // activation/gradient storage dtype (set_precision)

    void (*set_precision)(mrcnn_backend *be, mrcnn_dtype storage);
    void (*destroy)(mrcnn_backend *be); // frees state and the struct itself

    /* Entries in sub-tables by concern (be->mem.write, be->nn.conv2d_forward, ...). */
    struct {
        void *(*alloc)(const mrcnn_backend *be, size_t bytes, const char *what);
        void (*free)(const mrcnn_backend *be, void *p);
        void (*zero)(const mrcnn_backend *be, mrcnn_tensor *t);
        void (*write)(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src); // host -> device
        void (*read)(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst);  // device -> host, waits
        void (*sync)(const mrcnn_backend *be);
    } mem;

    struct {
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
        /* y = act(a + b), overwritten (y may alias a or b). act = RELU is the bottleneck's
         * residual join in one pass, bit-identical to add then relu_forward; its backward
         * is relu_backward on this y (y > 0 where the stored sum is), then add_backward. */
        void (*add_forward)(const mrcnn_backend *be, const mrcnn_tensor *a, const mrcnn_tensor *b,
                            mrcnn_activation act, mrcnn_tensor *y);
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
        /* multi-level ROIAlign (roi_align.h): feats is an array of d->n_levels tensors, each
         * (N, H_l, W_l, C); rois (R, 5) fp32 (image index, x1, y1, x2, y2), image index < 0
         * marks a padding row; y (R, out_h, out_w, C). Backward accumulates into dfeats
         * (array of d->n_levels tensors; the boxes get no gradient). */
        void (*roi_align_forward)(const mrcnn_backend *be, const mrcnn_roi_align_desc *d,
                                  const mrcnn_tensor *feats, const mrcnn_tensor *rois, mrcnn_tensor *y);
        void (*roi_align_backward)(const mrcnn_backend *be, const mrcnn_roi_align_desc *d,
                                   const mrcnn_tensor *rois, const mrcnn_tensor *dy, mrcnn_tensor *dfeats);
        /* y = x converted to y's dtype (same element count; fp32/fp16/bf16, round to
         * nearest even): the model casts fp32 input images to the activation dtype. */
        void (*cast)(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y);
    } nn;

    struct {
        /* losses: sum_i weight_i l_i / normalizer into a 1-element fp32 device tensor (so no
         * host round trip is forced), dx += grad_mult d loss/dx; weight may be NULL. The
         * normalizer is a device scalar too (mrcnn_loss_norm): the counts it comes from are
         * made and all-reduced on the device. */
        void (*bce_logits)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                           const mrcnn_tensor *weight, const mrcnn_loss_norm *norm, mrcnn_tensor *loss,
                           mrcnn_tensor *dx /* += d loss/dx, or NULL */);
        void (*softmax_ce)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                           const mrcnn_loss_norm *norm, mrcnn_tensor *loss, mrcnn_tensor *dx);
        void (*smooth_l1)(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *t,
                          const mrcnn_tensor *weight, float beta, const mrcnn_loss_norm *norm, mrcnn_tensor *loss,
                          mrcnn_tensor *dx);
    } loss;

    struct {
        /* optimizer: fused SGD with momentum and weight decay over the flat arenas
         * (fp32 master weights); grad_scale multiplies gradients first (1/loss scale).
         * PyTorch semantics: v = mu v + (grad_scale q g + weight_decay decay_mask p); p -= lr v.
         * decay_mask: fp32, one value per parameter (0 exempts it), or NULL for all ones; or
         * (2, n): those, then q per parameter (the folded-BN preconditioner, train.h), else 1. */
        void (*sgd_update)(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                           mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float lr,
                           float momentum_coef, float weight_decay, float grad_scale);
        /* 1 when any element of t is Inf or NaN (for the fp16 loss scaler). */
        int (*nonfinite)(const mrcnn_backend *be, const mrcnn_tensor *t);
    } opt;

    /* The detection stages of training (detect_ops.h): RPN targets, proposals, ROI
     * sampling, mask targets, the per-class gathers and count_hint, so that a training
     * step reads nothing back to the host. */
    mrcnn_backend_detect det;

    /* Ordering against other streams, and graphs. Events are opaque handles
     * (a cudaEvent_t on the CUDA backend, so NCCL's glue can use them directly); the CPU
     * backend runs every op before returning, so there its events are a dummy and every
     * entry is a no-op. None of them waits on the host.
     *   event_record: ev marks the work queued so far on the compute stream
     *   event_wait:   the compute stream's later work starts after ev (recorded on any
     *                 stream of the device, e.g. NCCL's)
     * Graphs: graph_begin returns 1 when it started recording the compute stream (the
     * region's ops are captured, not run), 0 when the backend cannot (CPU) or the capture
     * did not start, and then the caller runs the region directly. graph_end returns the
     * instantiated region, or NULL when the capture failed at its end (the capture was
     * invalidated, work forked to another stream was never joined, or the graph does not
     * instantiate; the stream is usable again and nothing of the region ran: run it
     * directly); graph_launch replays it on the compute stream, and a launch that fails
     * queues nothing. Inside a graph guard (check.h; the trainer opens one around each
     * graph call and the captured region) every such failure, and a library call that
     * fails inside the region, is recorded for the caller instead of stopping the run or
     * warning; without a guard graph_begin's and graph_launch's failures stop the run
     * and graph_end's warn. The region
     * must be capture-safe: no host read or sync, no buffer growth or algorithm search
     * (run it once uncaptured first), the same device addresses each replay. Caller's
     * pattern:
     *   if (!g && be->stream.graph_begin(be)) { region(); g = be->stream.graph_end(be); }
     *   if (g) be->stream.graph_launch(be, g); else region();
     * graph_epoch: a counter that changes whenever the backend reallocated an internal
     * buffer (CUDA: cuDNN workspace, scratch), after which every graph captured before
     * points at freed memory and must be destroyed and captured again. NULL (CPU, test
     * backends): 0, never changes. */
    struct {
        void *(*event_create)(const mrcnn_backend *be);
        void (*event_destroy)(const mrcnn_backend *be, void *ev);
        void (*event_record)(const mrcnn_backend *be, void *ev);
        void (*event_wait)(const mrcnn_backend *be, void *ev);
        int (*graph_begin)(const mrcnn_backend *be);
        void *(*graph_end)(const mrcnn_backend *be);
        void (*graph_launch)(const mrcnn_backend *be, void *graph);
        void (*graph_destroy)(const mrcnn_backend *be, void *graph);
        uint64_t (*graph_epoch)(const mrcnn_backend *be);
    } stream;

    /* The training step's bookkeeping on the device, so that a step has no
     * host read: the trainer keeps one small fp32 "step control" vector (step_ctl.h)
     * and reads it once per log period. None of these waits on the host.
     *   axpy:          acc (n) fp32 += mult * x (n) fp32 (a micro-batch's loss terms)
     *   nonfinite_or:  flag (1) fp32 = 1 when flag != 0 or any element of t (a float
     *                  dtype) is Inf/NaN, else 0 (the int-returning nonfinite above
     *                  reads its flag back; this one leaves it on the device)
     *   sum_squares:   out (1) fp32 = sum of w t^2 (t fp32; clipping's norm; w (n) fp32
     *                  per-element weights, the preconditioner q, or NULL for 1)
     *   decide:        mrcnn_step_decide (step_ctl.h) on ctl (MRCNN_CTL_SIZE(n)) fp32:
     *                  apply or skip, clip coefficient, fp16 loss scaler, log window
     *                  (the newest skipped step's index from ctl[MRCNN_CTL_STEP_INDEX])
     *   sgd_update:    sgd_update above, with the skip flag, the gradient multiplier and
     *                  the learning rate taken from the control vector ctl (at least
     *                  MRCNN_CTL_STEP elements) fp32 on the device: ctl[MRCNN_CTL_APPLY],
     *                  ctl[MRCNN_CTL_GRAD_SCALE] (decide wrote them) and ctl[MRCNN_CTL_LR]
     *                  (the host wrote it before the step): a skipped step leaves params
     *                  and momentum untouched, and a captured update replays with each
     *                  step's lr */
    struct {
        void (*axpy)(const mrcnn_backend *be, float mult, const mrcnn_tensor *x, mrcnn_tensor *acc);
        void (*nonfinite_or)(const mrcnn_backend *be, const mrcnn_tensor *t, mrcnn_tensor *flag);
        void (*sum_squares)(const mrcnn_backend *be, const mrcnn_tensor *t, const mrcnn_tensor *w,
                            mrcnn_tensor *out);
        void (*decide)(const mrcnn_backend *be, const struct mrcnn_step_desc *d, mrcnn_tensor *ctl);
        void (*sgd_update)(const mrcnn_backend *be, mrcnn_tensor *params, const mrcnn_tensor *grads,
                           mrcnn_tensor *momentum, const mrcnn_tensor *decay_mask, float momentum_coef,
                           float weight_decay, const mrcnn_tensor *ctl);
    } step;

    void *state;              // backend-private (handles, caches)
    mrcnn_backend_stats stats; // since creation; read with mrcnn_backend_stats_get
    mrcnn_backend_info info;   // device options and statistics (above)
    /* The entries as the backend installed them; the argument checks that
     * mrcnn_backend_validate puts in their place call these. NULL: not wrapped. */
    const mrcnn_backend *unchecked;
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

/* The CPU backend with the generic ops only (src/backend/cpu/backend_cpu.c); ROIAlign,
 * the class gathers and the detection ops are NULL. */
mrcnn_backend *mrcnn_backend_cpu_create_generic(void);
/* The full CPU backend, its own instance per call (so set_precision stays local): the
 * generic ops plus ROIAlign, the class gathers and the detection ops of detect_ops.h
 * (src/backend/cpu/backend_cpu_create.c). */
mrcnn_backend *mrcnn_backend_cpu_create(void);
/* The CUDA backend on the given device, or NULL when the build has no CUDA or no
 * GPU is visible; *why gets the reason then. */
mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why);
/* Visible CUDA devices (0 in GPU=0 builds or without a driver), for choosing a rank's
 * GPU before any backend exists. */
int mrcnn_backend_cuda_device_count(void);
/* "cpu" or "cuda" (MODEL.DEVICE) as a device; fails naming anything else. */
mrcnn_device mrcnn_backend_device_parse(const char *name);
/* Puts shape, dtype and device checks in front of the nn entries (convolutions,
 * deconvolution, linear, elementwise, pooling, upsample_add, ROIAlign, cast), the same
 * for every backend (src/backend/backend_validate.c): NHWC activations, KRSC filters,
 * tensors contiguous on be's device, float dtypes. A failure names the op, the
 * argument and both shapes. Each backend factory calls it last; no allocation per call. */
void mrcnn_backend_validate(mrcnn_backend *be);
void mrcnn_backend_destroy(mrcnn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
