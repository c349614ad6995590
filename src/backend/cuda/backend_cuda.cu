/* The CUDA backend: creation (safe on machines without a GPU or driver), memory,
 * precision, and the helpers the op files share (scratch, casts of operands). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "detect_internal.h"
#include "mrcnn/log.h"

/* cuDNN workspace cap: on an H200 the fastest algorithms of R50-FPN's large convs
 * (8 x 800x1216) want hundreds of MB to a few GB, and 256 MB excluded them. The one
 * workspace buffer grows only to what the chosen algorithms use, so the cap bounds the
 * choice, not memory held: 1/32 of the device memory, clamped to [256 MB, 4 GB];
 * MRCNN_CUDNN_WORKSPACE_MB overrides it. */
#define CU_MIN_WORKSPACE_MB 256
#define CU_MAX_WORKSPACE_MB 4096
/* Largest pinned staging ring for be->mem.write; MRCNN_CUDA_PINNED_MB overrides (0: off). */
#define CU_DEFAULT_PINNED_MB 512

size_t cu_dtype_size(mrcnn_dtype dt) {
    switch (dt) {
    case MRCNN_DTYPE_F32: case MRCNN_DTYPE_I32: return 4;
    case MRCNN_DTYPE_F16: case MRCNN_DTYPE_BF16: return 2;
    case MRCNN_DTYPE_U8: return 1;
    case MRCNN_DTYPE_F64: case MRCNN_DTYPE_I64: return 8;
    default: break;
    }
    MRCNN_CHECK(0, "unknown dtype %d", (int)dt);
    return 0;
}

int64_t cu_numel(const mrcnn_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int cu_contiguous(const mrcnn_tensor *t) {
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != stride) return 0;
        stride *= t->shape[i];
    }
    return 1;
}

void cu_check_gpu(const mrcnn_tensor *t, const char *what) {
    MRCNN_CHECK(t != NULL, "%s: tensor is NULL", what);
    MRCNN_CHECK(t->device == MRCNN_DEVICE_GPU, "%s: tensor is on the CPU, the CUDA backend needs GPU memory", what);
    MRCNN_CHECK(cu_contiguous(t), "%s: tensor is not contiguous", what);
    MRCNN_CHECK(t->data != NULL || cu_numel(t) == 0, "%s: tensor has no data", what);
}

void cu_check_float(const mrcnn_tensor *t, const char *what) {
    cu_check_gpu(t, what);
    MRCNN_CHECK(t->dtype == MRCNN_DTYPE_F32 || t->dtype == MRCNN_DTYPE_F16 || t->dtype == MRCNN_DTYPE_BF16,
                "%s: dtype %d is not fp32, fp16 or bf16", what, (int)t->dtype);
}

void cu_check_numel(const mrcnn_tensor *t, int64_t n, const char *what) {
    MRCNN_CHECK(cu_numel(t) == n, "%s: %lld elements but expected %lld", what,
                (long long)cu_numel(t), (long long)n);
}

static void *cu_grow(cu_state *s, void **buf, size_t *size, size_t bytes, const char *what) {
    if (bytes <= *size) return *buf;
    /* The capture is then dropped (nothing recorded runs, so the small buffer is never
     * used) and the step rerun directly, where the buffer grows. */
    if (s->capturing && mrcnn_graph_guard_note("CUDA graph capture: %s must grow to %zu bytes inside the captured "
                                               "region", what, bytes))
        return *buf;
    MRCNN_CHECK(!s->capturing, "CUDA graph capture: %s must grow to %zu bytes inside a captured region; run the "
                "region once uncaptured first so every buffer reaches its size", what, bytes);
    /* Grow by half again, so a slowly rising need reallocates a few times only. */
    size_t want = bytes + bytes / 2;
    if (*buf) {
        MRCNN_CHECK_CUDA(cudaStreamSynchronize(s->stream));
        mrcnn_backend_count(s->owner, 0, 0, 1, 0, 0);
        MRCNN_CHECK_CUDA(cudaFree(*buf));
        *buf = NULL;
        *size = 0;
    }
    cudaError_t e = cudaMalloc(buf, want);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        MRCNN_CHECK(0, "cudaMalloc of %zu bytes for %s failed: %s", want, what, cudaGetErrorString(e));
    }
    *size = want;
    s->graph_epoch++; // a new address: captured graphs that used this buffer are stale (stream.graph_epoch)
    return *buf;
}

void *cu_scratch(cu_state *s, int slot, size_t bytes) {
    return cu_grow(s, &s->scratch[slot], &s->scratch_size[slot], bytes, "scratch");
}

void *cu_workspace(cu_state *s, size_t bytes) {
    if (bytes == 0) return s->workspace;
    return cu_grow(s, &s->workspace, &s->workspace_size, bytes, "cuDNN workspace");
}

const void *cu_as_dtype(cu_state *s, const mrcnn_tensor *t, mrcnn_dtype dt, int slot) {
    if (t->dtype == dt) return t->data;
    int64_t n = cu_numel(t);
    void *dst = cu_scratch(s, slot, (size_t)n * cu_dtype_size(dt));
    cu_cast(s, t->data, t->dtype, dst, dt, n);
    return dst;
}

/* ---- launch checks (cuda_check.h) ------------------------------------------------- */

extern "C" int mrcnn_cuda_sync_check(void) {
    static const int on = [] {
        const char *v = getenv("MRCNN_CUDA_SYNC_CHECK");
        return v && *v && atoi(v) != 0 ? 1 : 0;
    }(); // read once, thread-safe (C++ local static)
    return on;
}

/* Captures open on this thread (stream.graph_begin): a device synchronisation would
 * invalidate them, so MRCNN_CUDA_SYNC_CHECK's per-launch check waits until the replay. */
static thread_local int cu_captures_open = 0;

extern "C" void mrcnn_cuda_check_launch(const char *what, const char *file, int line) {
    const int sync = mrcnn_cuda_sync_check() && cu_captures_open == 0;
    cudaError_t e = cudaGetLastError();
    /* Inside a capture a launch is recorded, not run: its error (a refused or
     * invalidated capture) goes to the trainer, which reruns the step directly, where a
     * real launch error of this kernel stops the run below. */
    if (e != cudaSuccess && mrcnn_graph_guard_note("CUDA kernel %s: launch failed: %s: %s (%s:%d)", what ? what : "?",
                                                   cudaGetErrorName(e), cudaGetErrorString(e), file, line))
        return;
    if (e != cudaSuccess)
        mrcnn_failf("CUDA", "kernel launch", file, line, "CUDA kernel %s: launch failed: %s: %s%s", what ? what : "?",
                    cudaGetErrorName(e), cudaGetErrorString(e),
                    sync ? ""
                         : " (a fault of an earlier kernel also surfaces here: rerun with MRCNN_CUDA_SYNC_CHECK=1 "
                           "to have each kernel checked as it finishes)");
    if (!sync) return;
    e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        mrcnn_failf("CUDA", "cudaDeviceSynchronize", file, line,
                    "CUDA kernel %s failed while running: %s: %s (MRCNN_CUDA_SYNC_CHECK=1: the device was "
                    "synchronised after this launch and was clean at the previous check)",
                    what ? what : "?", cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" void mrcnn_cuda_debug_sync(const char *what, const char *file, int line) {
    if (!mrcnn_cuda_sync_check() || cu_captures_open > 0) return;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        mrcnn_failf("CUDA", "cudaDeviceSynchronize", file, line,
                    "%s failed while running: %s: %s (MRCNN_CUDA_SYNC_CHECK=1: the device was synchronised "
                    "after this call and was clean at the previous check)",
                    what ? what : "?", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- memory --------------------------------------------------------------------- */

/* be->mem.alloc / be->mem.free: stream-ordered from the device's default pool, which keeps
 * what it was given (release threshold: never), so after the first step the
 * activations reuse the memory that step reserved, like one arena sized by it, and a
 * free is no device-wide synchronization (cudaFree is). Everything the backend runs
 * is on its one stream, so a block freed there is reused only after the kernels that
 * read it. Without pool support (or MRCNN_CUDA_POOL=0): plain cudaMalloc / cudaFree. */
/* An allocation that fails inside a capture (one already broken by a refused call, or
 * cudaMalloc, which a capture refuses) is recorded in the trainer's graph guard, and the
 * region goes on recording into a capture that will be dropped: it gets a placeholder
 * address that nothing dereferences (nothing recorded runs), distinct per allocation (an
 * op may check aliasing), never device memory, and ignored by cu_free. */
#define CU_PLACEHOLDER_BASE ((uintptr_t)0xdead0000000000ull)
#define CU_PLACEHOLDER_SPAN ((uintptr_t)1 << 40)
static thread_local uintptr_t cu_placeholder_next = 0;

static int cu_is_placeholder(const void *p) {
    const uintptr_t u = (uintptr_t)p;
    return u >= CU_PLACEHOLDER_BASE && u < CU_PLACEHOLDER_BASE + CU_PLACEHOLDER_SPAN;
}

static void *cu_alloc(const mrcnn_backend *be, size_t bytes, const char *what) {
    cu_state *s = cu_st(be);
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = s->use_pool ? cudaMallocAsync(&p, bytes, s->stream) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (s->capturing && mrcnn_graph_guard_note("cudaMalloc%s of %zu bytes for %s inside the captured region "
                                                   "failed: %s", s->use_pool ? "Async" : "", bytes,
                                                   what ? what : "?", cudaGetErrorString(e))) {
            void *placeholder = (void *)(CU_PLACEHOLDER_BASE + cu_placeholder_next);
            cu_placeholder_next = (cu_placeholder_next + ((bytes + 255) & ~(size_t)255)) % CU_PLACEHOLDER_SPAN;
            return placeholder;
        }
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        MRCNN_CHECK(0, "cudaMalloc%s of %zu bytes for %s failed: %s (%zu of %zu MB free)", s->use_pool ? "Async" : "",
                    bytes, what ? what : "?", cudaGetErrorString(e), free_b >> 20, total_b >> 20);
    }
    return p;
}

static void cu_free(const mrcnn_backend *be, void *p) {
    if (!p || cu_is_placeholder(p)) return;
    if (cu_st(be)->use_pool) MRCNN_CHECK_CUDA(cudaFreeAsync(p, cu_st(be)->stream));
    else MRCNN_CHECK_CUDA(cudaFree(p));
}

/* ---- device options and statistics (be->info) ------------------------------------ */

static double cu_peak_mb(const mrcnn_backend *be, int reset) {
    cu_state *s = cu_st(be);
    if (!s->use_pool) return -1;
    uint64_t high = 0;
    MRCNN_CHECK_CUDA(cudaMemPoolGetAttribute(s->pool, cudaMemPoolAttrUsedMemHigh, &high));
    if (reset) {
        uint64_t zero = 0;
        MRCNN_CHECK_CUDA(cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrUsedMemHigh, &zero));
    }
    return (double)high / (1024.0 * 1024.0);
}

static void cu_set_tf32(mrcnn_backend *be, int on) { cu_st(be)->tf32 = on ? 1 : 0; }

static int cu_compute_capability(const mrcnn_backend *be) {
    int major = 0, minor = 0, dev = cu_st(be)->device;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

/* "GPU-<uuid> (<name>)", as nvidia-smi -L names it, so a log line finds the board. */
static const char *cu_device_name(const mrcnn_backend *be, char *buf, size_t len) {
    const int dev = cu_st(be)->device;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, len, "unknown (cudaGetDeviceProperties failed for device %d)", dev);
        return buf;
    }
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x (%s)", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15], p.name);
    return buf;
}

/* cudaMemGetInfo answers for the current device: switch to ours and back. */
static double cu_memory_used_mb(const mrcnn_backend *be) {
    const int dev = cu_st(be)->device;
    int prev = 0;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || (prev != dev && cudaSetDevice(dev) != cudaSuccess)) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (prev != dev) cudaSetDevice(prev);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess ? (double)(total_b - free_b) / (1024.0 * 1024.0) : 0;
}

static void cu_zero(const mrcnn_backend *be, mrcnn_tensor *t) {
    cu_check_gpu(t, "zero");
    size_t bytes = (size_t)cu_numel(t) * cu_dtype_size(t->dtype);
    if (bytes) MRCNN_CHECK_CUDA(cudaMemsetAsync(t->data, 0, bytes, cu_st(be)->stream));
}

/* ---- pinned staging ring for be->mem.write ---------------------------------------------- */

/* Retires the oldest upload still reading the ring; with wait, waits for it (a sync,
 * counted), else returns 0 while it runs. */
static int pinned_retire(cu_state *s, int wait) {
    cudaEvent_t ev = s->pinned_pend[s->pinned_first].ev;
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        if (!wait) return 0;
        MRCNN_CHECK_CUDA(cudaEventSynchronize(ev));
        mrcnn_backend_count(s->owner, 0, 0, 1, 0, 0);
    } else if (e != cudaSuccess) {
        MRCNN_CHECK_CUDA(e);
    }
    s->pinned_first = (s->pinned_first + 1) % CU_PINNED_SLOTS;
    s->pinned_count--;
    return 1;
}

static void pinned_free(cu_state *s) {
    while (s->pinned_count > 0) pinned_retire(s, 1);
    if (s->pinned) cudaFreeHost(s->pinned);
    s->pinned = NULL;
    s->pinned_size = s->pinned_head = 0;
}

/* Copies host_src into the ring and queues the DMA from there: 1, or 0 when the write
 * should go directly (too large, pinned memory unavailable). A region is reused only
 * after the copies reading it finished; in steady state they did long ago (a step
 * apart), so no wait happens. */
static int pinned_write(cu_state *s, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || bytes > s->pinned_max / 2) return 0;
    if (bytes > s->pinned_size) {
        pinned_free(s);
        size_t want = 2 * bytes > ((size_t)64 << 20) ? 2 * bytes : ((size_t)64 << 20);
        if (want > s->pinned_max) want = s->pinned_max;
        if (cudaMallocHost((void **)&s->pinned, want) != cudaSuccess) {
            (void)cudaGetLastError();
            s->pinned = NULL;
            s->pinned_max = 0; // pinned memory refused (locked-memory limit): direct copies from now on
            return 0;
        }
        s->pinned_size = want;
        if (!s->pinned_pend[0].ev)
            for (int i = 0; i < CU_PINNED_SLOTS; i++)
                MRCNN_CHECK_CUDA(cudaEventCreateWithFlags(&s->pinned_pend[i].ev, cudaEventDisableTiming));
    }
    size_t lo = s->pinned_head + bytes <= s->pinned_size ? s->pinned_head : 0, hi = lo + bytes;
    /* Wait through the newest pending copy that overlaps [lo, hi) (they retire in order),
     * or for the oldest when every slot is taken; then drop the finished ones. */
    int last = -1;
    for (int k = 0; k < s->pinned_count; k++) {
        const int i = (s->pinned_first + k) % CU_PINNED_SLOTS;
        if (s->pinned_pend[i].lo < hi && lo < s->pinned_pend[i].hi) last = k;
    }
    if (last < 0 && s->pinned_count == CU_PINNED_SLOTS) last = 0;
    for (int k = 0; k <= last; k++) pinned_retire(s, 1);
    while (s->pinned_count > 0 && pinned_retire(s, 0)) {
    }
    memcpy(s->pinned + lo, src, bytes);
    MRCNN_CHECK_CUDA(cudaMemcpyAsync(dst, s->pinned + lo, bytes, cudaMemcpyHostToDevice, s->stream));
    const int slot = (s->pinned_first + s->pinned_count) % CU_PINNED_SLOTS;
    s->pinned_pend[slot].lo = lo;
    s->pinned_pend[slot].hi = hi;
    MRCNN_CHECK_CUDA(cudaEventRecord(s->pinned_pend[slot].ev, s->stream));
    s->pinned_count++;
    s->pinned_head = hi;
    return 1;
}

/* Pinned (page-locked or registered) host memory needs no staging: the DMA reads it
 * directly. */
static int host_is_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Through the pinned ring (host_src is free again on return, and the host does not
 * wait for the DMA, where a pageable copy waits for the stream's earlier work); from
 * memory already pinned, or larger than half the ring's cap, directly, and then
 * host_src must stay unchanged until the next sync or read. */
static void cu_write(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src) {
    cu_state *s = cu_st(be);
    cu_check_gpu(dst, "write");
    MRCNN_CHECK(!s->capturing, "CUDA graph capture: be->mem.write inside a captured region (a replay would copy stale "
                "host data); upload before graph_begin");
    size_t bytes = (size_t)cu_numel(dst) * cu_dtype_size(dst->dtype);
    if (bytes && !host_is_pinned(host_src) && !pinned_write(s, dst->data, host_src, bytes))
        MRCNN_CHECK_CUDA(cudaMemcpyAsync(dst->data, host_src, bytes, cudaMemcpyHostToDevice, s->stream));
    mrcnn_backend_count(be, 0, 0, 0, 1, bytes);
}

static void cu_read(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst) {
    cu_check_gpu(src, "read");
    MRCNN_CHECK(!cu_st(be)->capturing, "CUDA graph capture: be->mem.read inside a captured region (a host read)");
    size_t bytes = (size_t)cu_numel(src) * cu_dtype_size(src->dtype);
    if (bytes)
        MRCNN_CHECK_CUDA(cudaMemcpyAsync(host_dst, src->data, bytes, cudaMemcpyDeviceToHost, cu_st(be)->stream));
    MRCNN_CHECK_CUDA(cudaStreamSynchronize(cu_st(be)->stream));
    mrcnn_backend_count(be, 1, bytes, 1, 0, 0);
}

static void cu_sync(const mrcnn_backend *be) {
    MRCNN_CHECK(!cu_st(be)->capturing, "CUDA graph capture: be->mem.sync inside a captured region");
    MRCNN_CHECK_CUDA(cudaStreamSynchronize(cu_st(be)->stream));
    mrcnn_backend_count(be, 0, 0, 1, 0, 0);
}

static void cu_set_precision(mrcnn_backend *be, mrcnn_dtype storage) {
    MRCNN_CHECK(storage == MRCNN_DTYPE_F32 || storage == MRCNN_DTYPE_F16 || storage == MRCNN_DTYPE_BF16,
                "set_precision: storage dtype %d is not fp32, fp16 or bf16", (int)storage);
    be->storage = storage;
}

/* nn.cast: devices, float dtypes and equal counts are checked in front (backend_validate.c). */
static void cu_cast_op(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    cu_cast(cu_st(be), x->data, x->dtype, y->data, y->dtype, cu_numel(x));
}

/* ---- streams, events, graphs (backend.h be->stream) ----------------------------------- */

static void *cu_event_create(const mrcnn_backend *be) {
    cudaEvent_t ev;
    MRCNN_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (void *)ev;
}

static void cu_event_destroy(const mrcnn_backend *be, void *ev) {
    if (ev) MRCNN_CHECK_CUDA(cudaEventDestroy((cudaEvent_t)ev));
}

static void cu_event_record(const mrcnn_backend *be, void *ev) {
    MRCNN_CHECK_CUDA(cudaEventRecord((cudaEvent_t)ev, cu_st(be)->stream));
}

static void cu_event_wait(const mrcnn_backend *be, void *ev) {
    MRCNN_CHECK_CUDA(cudaStreamWaitEvent(cu_st(be)->stream, (cudaEvent_t)ev, 0));
}

/* Thread-local capture: the loader's threads may call CUDA (pinned buffers) meanwhile.
 * A capture that cannot start returns 0 (the caller runs the region directly) after
 * reporting it through the check family: recorded inside the trainer's graph guard,
 * fatal elsewhere. */
static int cu_graph_begin(const mrcnn_backend *be) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(!s->capturing, "graph_begin: a capture is already open");
    cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // not the direct run's first launch check's error
        mrcnn_fail_call("CUDA", "cudaStreamBeginCapture", cudaGetErrorString(e), __FILE__, __LINE__);
        return 0;
    }
    s->capturing = 1;
    cu_captures_open++;
    return 1;
}

/* Allocations made inside the region (stream-ordered be->mem.alloc) become graph memory
 * nodes; AutoFreeOnLaunch releases one left unfreed before the next replay. A capture
 * that failed (cudaStreamEndCapture's errors, e.g. an invalidated capture, are not
 * sticky: the stream is usable again) or does not instantiate returns NULL, its cause
 * recorded in the trainer's graph guard (a warning without one), and the caller runs
 * the region directly: nothing of it ran while capturing. The runtime's last error is
 * cleared whatever the outcome: a call refused inside the region left it set, and the
 * direct run's first launch check would otherwise report it as that kernel's. */
static void *cu_graph_end(const mrcnn_backend *be) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(s->capturing, "graph_end without graph_begin");
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    s->capturing = 0;
    cu_captures_open--;
    (void)cudaGetLastError();
    if (e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        if (!mrcnn_graph_guard_note("CUDA graph capture failed: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e)))
            mrcnn_warn("CUDA graph capture failed: %s: %s (an op in the region synchronised, read to the host, or "
                       "used another stream without an event); the region runs uncaptured",
                       cudaGetErrorName(e), cudaGetErrorString(e));
        return NULL;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (!mrcnn_graph_guard_note("CUDA graph instantiation failed: %s: %s", cudaGetErrorName(e),
                                    cudaGetErrorString(e)))
            mrcnn_warn("CUDA graph instantiation failed: %s: %s; the region runs uncaptured", cudaGetErrorName(e),
                       cudaGetErrorString(e));
        return NULL;
    }
    return (void *)x;
}

/* A launch that fails returns before anything of the graph was queued; inside the
 * trainer's graph guard the failure is recorded and the step runs directly. */
static void cu_graph_launch(const mrcnn_backend *be, void *graph) {
    MRCNN_CHECK(graph != NULL, "graph_launch: NULL graph");
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, cu_st(be)->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        mrcnn_fail_call("CUDA", "cudaGraphLaunch", cudaGetErrorString(e), __FILE__, __LINE__);
        return;
    }
    MRCNN_CUDA_DEBUG_SYNC("cudaGraphLaunch");
}

static void cu_graph_destroy(const mrcnn_backend *be, void *graph) {
    if (graph) MRCNN_CHECK_CUDA(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static uint64_t cu_graph_epoch(const mrcnn_backend *be) { return cu_st(be)->graph_epoch; }

/* Opens run_if's body when the count is above the threshold (one thread; the node that
 * reads the handle follows this kernel in the graph). */
__global__ void k_run_if_set(cudaGraphConditionalHandle h, const float *count, long long above) {
    cudaGraphSetConditional(h, (double)count[0] > (double)above ? 1u : 0u);
}

static void cu_set_streams(cu_state *s, cudaStream_t st) {
    s->stream = st;
    MRCNN_CHECK_CUDNN(cudnnSetStream(s->cudnn, st));
    MRCNN_CHECK_CUBLAS(cublasSetStream(s->cublas, st));
}

/* Inside a capture: k_run_if_set on the compute stream, then an IF conditional node
 * after it in the captured graph, and body's ops captured into the node's body graph on
 * body_stream, which stands in for the compute stream (cuDNN's and cuBLAS's too) until
 * the body ends; the capture goes on after the node. Outside a capture body runs: its
 * rows past the count weigh nothing. A body may not open another run_if, allocate
 * stream-ordered memory or record events (a conditional body holds kernels, memsets,
 * copies and conditionals only). */
static void cu_run_if(const mrcnn_backend *be, const mrcnn_tensor *count, int64_t above, void (*body)(void *ctx),
                      void *ctx) {
    cu_state *s = cu_st(be);
    cu_check_gpu(count, "run_if count");
    MRCNN_CHECK(count->dtype == MRCNN_DTYPE_F32 && cu_numel(count) == 1, "run_if: a 1-element fp32 count expected");
    if (!s->capturing) {
        body(ctx);
        return;
    }
    MRCNN_CHECK(s->stream != s->body_stream, "run_if: opened inside another run_if's body");
    cudaStreamCaptureStatus cs;
    cudaGraph_t g = NULL;
    const cudaGraphNode_t *deps = NULL;
    size_t n_deps = 0;
    MRCNN_CHECK_CUDA(cudaStreamGetCaptureInfo(s->stream, &cs, NULL, &g, NULL, NULL, NULL));
    MRCNN_CHECK(cs == cudaStreamCaptureStatusActive, "run_if: the compute stream's capture is not active");
    cudaGraphConditionalHandle h;
    MRCNN_CHECK_CUDA(cudaGraphConditionalHandleCreate(&h, g, 0, cudaGraphCondAssignDefault));
    k_run_if_set<<<1, 1, 0, s->stream>>>(h, (const float *)count->data, (long long)above);
    MRCNN_CHECK_CUDA(cudaGetLastError());
    MRCNN_CHECK_CUDA(cudaStreamGetCaptureInfo(s->stream, &cs, NULL, &g, &deps, NULL, &n_deps));
    cudaGraphNodeParams p = {cudaGraphNodeTypeConditional}; // the rest zero
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 1;
    cudaGraphNode_t node;
    MRCNN_CHECK_CUDA(cudaGraphAddNode(&node, g, deps, NULL, n_deps, &p));
    MRCNN_CHECK_CUDA(cudaStreamUpdateCaptureDependencies(s->stream, &node, NULL, 1, cudaStreamSetCaptureDependencies));
    cudaStream_t compute = s->stream;
    MRCNN_CHECK_CUDA(cudaStreamBeginCaptureToGraph(s->body_stream, p.conditional.phGraph_out[0], NULL, NULL, 0,
                                                   cudaStreamCaptureModeThreadLocal));
    cu_set_streams(s, s->body_stream);
    body(ctx);
    cu_set_streams(s, compute);
    cudaGraph_t captured = NULL;
    MRCNN_CHECK_CUDA(cudaStreamEndCapture(s->body_stream, &captured));
}

static void cu_destroy(mrcnn_backend *be) {
    if (!be) return;
    cu_state *s = cu_st(be);
    if (s) {
        cudaStreamSynchronize(s->stream);
        cu_conv_cache_free(s);
        pinned_free(s);
        for (int i = 0; i < CU_PINNED_SLOTS; i++)
            if (s->pinned_pend[i].ev) cudaEventDestroy(s->pinned_pend[i].ev);
        for (int i = 0; i < CU_SCRATCH_COUNT; i++)
            if (s->scratch[i]) cudaFree(s->scratch[i]);
        if (s->workspace) cudaFree(s->workspace);
        if (s->flag_dev) cudaFree(s->flag_dev);
        if (s->flag_host) cudaFreeHost(s->flag_host);
        if (s->cublas) cublasDestroy(s->cublas);
        if (s->cudnn) cudnnDestroy(s->cudnn);
        if (s->stream) cudaStreamDestroy(s->stream);
        if (s->body_stream) cudaStreamDestroy(s->body_stream);
        free(s);
    }
    free(be);
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : dflt;
}

/* The backend as built here; mrcnn_backend_cuda_create (backend_cuda_open.c, in the
 * static library) adds the shared argument checks, which live in libmrcnn.a. */
extern "C" mrcnn_backend *mrcnn_cuda_backend_new(int device, const char **why) {
    static char reason[256];
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        snprintf(reason, sizeof reason, "cudaGetDeviceCount: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device visible");
        if (why) *why = reason;
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(reason, sizeof reason, "device %d requested but %d visible", device, count);
        if (why) *why = reason;
        return NULL;
    }
    MRCNN_CHECK_CUDA(cudaSetDevice(device));

    cu_state *s = (cu_state *)MRCNN_CALLOC(1, sizeof *s, "CUDA backend state");
    s->device = device;
    MRCNN_CHECK_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    MRCNN_CHECK_CUDA(cudaStreamCreateWithFlags(&s->body_stream, cudaStreamNonBlocking));
    MRCNN_CHECK_CUDNN(cudnnCreate(&s->cudnn));
    MRCNN_CHECK_CUDNN(cudnnSetStream(s->cudnn, s->stream));
    MRCNN_CHECK_CUBLAS(cublasCreate(&s->cublas));
    MRCNN_CHECK_CUBLAS(cublasSetStream(s->cublas, s->stream));
    /* Pedantic-free default math; TF32 is asked for per call through the compute type. */
    MRCNN_CHECK_CUBLAS(cublasSetMathMode(s->cublas, CUBLAS_DEFAULT_MATH));
    MRCNN_CHECK_CUDA(cudaMalloc((void **)&s->flag_dev, sizeof(int)));
    MRCNN_CHECK_CUDA(cudaMallocHost((void **)&s->flag_host, sizeof(int)));
    /* Knobs for benchmarks and tests; the defaults are what training wants. */
    s->tf32 = env_int("MRCNN_TF32", 0);
    s->fused_mode = env_int("MRCNN_CONV_FUSED", -1);
    s->algo_find = env_int("MRCNN_CUDNN_FIND", 1);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) total_b = 0;
    size_t ws_mb = (total_b >> 20) / 32;
    ws_mb = ws_mb < CU_MIN_WORKSPACE_MB ? CU_MIN_WORKSPACE_MB : ws_mb > CU_MAX_WORKSPACE_MB ? CU_MAX_WORKSPACE_MB : ws_mb;
    s->workspace_limit = (size_t)env_int("MRCNN_CUDNN_WORKSPACE_MB", (int)ws_mb) << 20;
    s->pinned_max = (size_t)env_int("MRCNN_CUDA_PINNED_MB", CU_DEFAULT_PINNED_MB) << 20;
    int pools = 0;
    if (env_int("MRCNN_CUDA_POOL", 1) &&
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess && pools) {
        MRCNN_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&s->pool, device));
        uint64_t keep = ~(uint64_t)0;
        MRCNN_CHECK_CUDA(cudaMemPoolSetAttribute(s->pool, cudaMemPoolAttrReleaseThreshold, &keep));
        s->use_pool = 1;
    }
    (void)cudaGetLastError();

    mrcnn_backend *be = (mrcnn_backend *)MRCNN_CALLOC(1, sizeof *be, "CUDA backend");
    be->name = "cuda";
    be->device = MRCNN_DEVICE_GPU;
    be->storage = MRCNN_DTYPE_F32;
    be->state = s;
    s->owner = be;
    be->mem.alloc = cu_alloc;
    be->mem.free = cu_free;
    be->mem.zero = cu_zero;
    be->mem.write = cu_write;
    be->mem.read = cu_read;
    be->mem.sync = cu_sync;
    be->set_precision = cu_set_precision;
    be->nn.cast = cu_cast_op;
    be->destroy = cu_destroy;
    be->stream.event_create = cu_event_create;
    be->stream.event_destroy = cu_event_destroy;
    be->stream.event_record = cu_event_record;
    be->stream.event_wait = cu_event_wait;
    be->stream.graph_begin = cu_graph_begin;
    be->stream.graph_end = cu_graph_end;
    be->stream.graph_launch = cu_graph_launch;
    be->stream.graph_destroy = cu_graph_destroy;
    be->stream.graph_epoch = cu_graph_epoch;
    be->stream.run_if = cu_run_if;
    cu_fill_conv_ops(be);
    cu_fill_gemm_ops(be);
    cu_fill_elementwise_ops(be);
    cu_fill_loss_ops(be);
    cu_fill_optim_ops(be);
    cu_fill_roi_ops(be);
    cu_fill_gather_ops(be);
    cu_fill_detect_ops(be);
    cu_fill_infer_ops(be);
    be->info.set_tf32 = cu_set_tf32;
    be->info.compute_capability = cu_compute_capability;
    be->info.device_name = cu_device_name;
    be->info.memory_used_mb = cu_memory_used_mb;
    be->info.peak_mb = cu_peak_mb;
    if (why) *why = NULL;
    return be;
}
