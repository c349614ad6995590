/* The CUDA backend: creation (safe on machines without a GPU or driver), memory,
 * precision, and the helpers the op files share (scratch, casts of operands). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define CU_DEFAULT_WORKSPACE_MB 256

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

extern "C" void mrcnn_cuda_check_launch(const char *what, const char *file, int line) {
    const int sync = mrcnn_cuda_sync_check();
    cudaError_t e = cudaGetLastError();
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
    if (!mrcnn_cuda_sync_check()) return;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        mrcnn_failf("CUDA", "cudaDeviceSynchronize", file, line,
                    "%s failed while running: %s: %s (MRCNN_CUDA_SYNC_CHECK=1: the device was synchronised "
                    "after this call and was clean at the previous check)",
                    what ? what : "?", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- memory --------------------------------------------------------------------- */

/* be->alloc / be->free: stream-ordered from the device's default pool, which keeps
 * what it was given (release threshold: never), so after the first step the
 * activations reuse the memory that step reserved, like one arena sized by it, and a
 * free is no device-wide synchronization (cudaFree is). Everything the backend runs
 * is on its one stream, so a block freed there is reused only after the kernels that
 * read it. Without pool support (or MRCNN_CUDA_POOL=0): plain cudaMalloc / cudaFree. */
static void *cu_alloc(const mrcnn_backend *be, size_t bytes, const char *what) {
    cu_state *s = cu_st(be);
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = s->use_pool ? cudaMallocAsync(&p, bytes, s->stream) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        MRCNN_CHECK(0, "cudaMalloc%s of %zu bytes for %s failed: %s (%zu of %zu MB free)", s->use_pool ? "Async" : "",
                    bytes, what ? what : "?", cudaGetErrorString(e), free_b >> 20, total_b >> 20);
    }
    return p;
}

static void cu_free(const mrcnn_backend *be, void *p) {
    if (!p) return;
    if (cu_st(be)->use_pool) MRCNN_CHECK_CUDA(cudaFreeAsync(p, cu_st(be)->stream));
    else MRCNN_CHECK_CUDA(cudaFree(p));
}

extern "C" double mrcnn_backend_cuda_pool_peak_mb(const mrcnn_backend *be, int reset) {
    MRCNN_CHECK(be && be->name && strcmp(be->name, "cuda") == 0, "pool_peak: not a CUDA backend");
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

static void cu_zero(const mrcnn_backend *be, mrcnn_tensor *t) {
    cu_check_gpu(t, "zero");
    size_t bytes = (size_t)cu_numel(t) * cu_dtype_size(t->dtype);
    if (bytes) MRCNN_CHECK_CUDA(cudaMemsetAsync(t->data, 0, bytes, cu_st(be)->stream));
}

/* Asynchronous: from pinned memory the copy may still run after return, so the
 * caller keeps host_src unchanged until the next sync or read. */
static void cu_write(const mrcnn_backend *be, mrcnn_tensor *dst, const void *host_src) {
    cu_check_gpu(dst, "write");
    size_t bytes = (size_t)cu_numel(dst) * cu_dtype_size(dst->dtype);
    if (bytes)
        MRCNN_CHECK_CUDA(cudaMemcpyAsync(dst->data, host_src, bytes, cudaMemcpyHostToDevice, cu_st(be)->stream));
    mrcnn_backend_count(be, 0, 0, 0, 1, bytes);
}

static void cu_read(const mrcnn_backend *be, const mrcnn_tensor *src, void *host_dst) {
    cu_check_gpu(src, "read");
    size_t bytes = (size_t)cu_numel(src) * cu_dtype_size(src->dtype);
    if (bytes)
        MRCNN_CHECK_CUDA(cudaMemcpyAsync(host_dst, src->data, bytes, cudaMemcpyDeviceToHost, cu_st(be)->stream));
    MRCNN_CHECK_CUDA(cudaStreamSynchronize(cu_st(be)->stream));
    mrcnn_backend_count(be, 1, bytes, 1, 0, 0);
}

static void cu_sync(const mrcnn_backend *be) {
    MRCNN_CHECK_CUDA(cudaStreamSynchronize(cu_st(be)->stream));
    mrcnn_backend_count(be, 0, 0, 1, 0, 0);
}

static void cu_set_precision(mrcnn_backend *be, mrcnn_dtype storage) {
    MRCNN_CHECK(storage == MRCNN_DTYPE_F32 || storage == MRCNN_DTYPE_F16 || storage == MRCNN_DTYPE_BF16,
                "set_precision: storage dtype %d is not fp32, fp16 or bf16", (int)storage);
    be->storage = storage;
}

static void cu_cast_op(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    cu_check_float(x, "cast x");
    cu_check_float(y, "cast y");
    cu_check_numel(y, cu_numel(x), "cast y");
    cu_cast(cu_st(be), x->data, x->dtype, y->data, y->dtype, cu_numel(x));
}

static void cu_destroy(mrcnn_backend *be) {
    if (!be) return;
    cu_state *s = cu_st(be);
    if (s) {
        cudaStreamSynchronize(s->stream);
        cu_conv_cache_free(s);
        for (int i = 0; i < CU_SCRATCH_COUNT; i++)
            if (s->scratch[i]) cudaFree(s->scratch[i]);
        if (s->workspace) cudaFree(s->workspace);
        if (s->flag_dev) cudaFree(s->flag_dev);
        if (s->flag_host) cudaFreeHost(s->flag_host);
        if (s->cublas) cublasDestroy(s->cublas);
        if (s->cudnn) cudnnDestroy(s->cudnn);
        if (s->stream) cudaStreamDestroy(s->stream);
        free(s);
    }
    free(be);
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : dflt;
}

extern "C" mrcnn_backend *mrcnn_backend_cuda_create(int device, const char **why) {
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
    s->workspace_limit = (size_t)env_int("MRCNN_CUDNN_WORKSPACE_MB", CU_DEFAULT_WORKSPACE_MB) << 20;
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
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->zero = cu_zero;
    be->write = cu_write;
    be->read = cu_read;
    be->sync = cu_sync;
    be->set_precision = cu_set_precision;
    be->cast = cu_cast_op;
    be->destroy = cu_destroy;
    cu_fill_conv_ops(be);
    cu_fill_gemm_ops(be);
    cu_fill_elementwise_ops(be);
    cu_fill_loss_ops(be);
    cu_fill_optim_ops(be);
    cu_fill_roi_ops(be);
    cu_fill_gather_ops(be);
    if (why) *why = NULL;
    return be;
}

extern "C" void mrcnn_backend_cuda_set_tf32(mrcnn_backend *be, int on) {
    MRCNN_CHECK(be && be->name && strcmp(be->name, "cuda") == 0, "set_tf32: not a CUDA backend");
    cu_st(be)->tf32 = on ? 1 : 0;
}
