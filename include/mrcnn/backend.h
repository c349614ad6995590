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
/* How a backward op stores its input gradient dx: added to what dx holds, or written
 * over it (the op is the buffer's only writer, so it need not be zeroed first). */
typedef enum { MRCNN_GRAD_ADD = 0, MRCNN_GRAD_WRITE = 1 } mrcnn_grad_mode;

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

struct mrcnn_backend {
    const char *name; // "cpu" or "cuda"
    mrcnn_device device;
    mrcnn_dtype storage; // activation/gradient storage dtype (set_precision)

    void (*set_precision)(mrcnn_backend *be, mrcnn_dtype storage);
    void (*destroy)(mrcnn_backend *be); // frees state and the struct itself

    /* Entries in sub-tables by concern (be->mem.write, be->nn.conv2d_forward, ...). The
     * members are the op list's entries (backend_ops.def, where each is described), one
     * sub-table per table column: BE_IN_<table> keeps that table's lines. */
#define BE_KEEP(x) x
#define BE_DROP(x)
#define BE_MEMBER(ret, name, params) ret(*name) params;
#define BE_OP(table, name, params, ...) BE_IN_##table(BE_MEMBER(void, name, params))
#define BE_OPR(table, name, ret, params, ...) BE_IN_##table(BE_MEMBER(ret, name, params))
#define BE_IN_mem BE_DROP
#define BE_IN_nn BE_DROP
#define BE_IN_loss BE_DROP
#define BE_IN_opt BE_DROP
#define BE_IN_det BE_DROP
#define BE_IN_stream BE_DROP
#define BE_IN_step BE_DROP
#define BE_IN_info BE_DROP

    /* device memory: alloc, free, zero, write (host -> device), read (device -> host,
     * waits), sync */
    struct {
#undef BE_IN_mem
#define BE_IN_mem BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_mem
#define BE_IN_mem BE_DROP
    } mem;

    /* the network's layers, forward and backward */
    struct {
#undef BE_IN_nn
#define BE_IN_nn BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_nn
#define BE_IN_nn BE_DROP
    } nn;

    /* losses: sum_i weight_i l_i / normalizer into a 1-element fp32 device tensor (so no
     * host round trip is forced), dx += grad_mult d loss/dx; weight may be NULL. The
     * normalizer is a device scalar too (mrcnn_loss_norm): the counts it comes from are
     * made and all-reduced on the device. */
    struct {
#undef BE_IN_loss
#define BE_IN_loss BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_loss
#define BE_IN_loss BE_DROP
    } loss;

    /* the optimizer (fp32 master weights) and the fp16 loss scaler's overflow test */
    struct {
#undef BE_IN_opt
#define BE_IN_opt BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_opt
#define BE_IN_opt BE_DROP
    } opt;

    /* The detection stages of training (detect_ops.h): RPN targets, proposals, ROI
     * sampling, mask targets, the per-class gathers and count_hint, so that a training
     * step reads nothing back to the host; and inference's, so that a batch's detections
     * come back in one read. */
    struct {
#undef BE_IN_det
#define BE_IN_det BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_det
#define BE_IN_det BE_DROP
    } det;

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
#undef BE_IN_stream
#define BE_IN_stream BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_stream
#define BE_IN_stream BE_DROP
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
#undef BE_IN_step
#define BE_IN_step BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_step
#define BE_IN_step BE_DROP
    } step;

    void *state;              // backend-private (handles, caches)
    mrcnn_backend_stats stats; // since creation; read with mrcnn_backend_stats_get
    /* Options and statistics of the device behind a backend: the one way to set or ask
     * anything of a device, so that no code outside src/backend/cuda calls CUDA. */
    struct {
#undef BE_IN_info
#define BE_IN_info BE_KEEP
#include "mrcnn/backend_ops.def"
#undef BE_IN_info
#define BE_IN_info BE_DROP
    } info;
    /* The entries as the backend installed them; the argument checks that
     * mrcnn_backend_validate puts in their place call these. NULL: not wrapped. */
    const mrcnn_backend *unchecked;
};
#undef BE_KEEP
#undef BE_DROP
#undef BE_MEMBER
#undef BE_OP
#undef BE_OPR
#undef BE_IN_mem
#undef BE_IN_nn
#undef BE_IN_loss
#undef BE_IN_opt
#undef BE_IN_det
#undef BE_IN_stream
#undef BE_IN_step
#undef BE_IN_info

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
 * deconvolution, linear, bias_grad, elementwise, pooling, upsample_add, ROIAlign, cast:
 * the CHECK and HANDCHECK lines of backend_ops.def), the same
 * for every backend (src/backend/backend_validate.c): NHWC activations, KRSC filters,
 * tensors contiguous on be's device, float dtypes. A failure names the op, the
 * argument and both shapes. Each backend factory calls it last; no allocation per call. */
void mrcnn_backend_validate(mrcnn_backend *be);
void mrcnn_backend_destroy(mrcnn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
