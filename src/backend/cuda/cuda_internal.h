/* Private to src/backend/cuda: the CUDA backend's state and the helpers its files share.
 * Every op runs on the one stream held here; scratch buffers are reused across ops
 * because stream order serializes them. Only .cu files include this. */
#ifndef MRCNN_CUDA_INTERNAL_H
#define MRCNN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>


#include "mrcnn/backend.h"
#include "mrcnn/cuda_check.h"

/* Scratch slots: one growable device buffer each, so that an op can hold several
 * temporaries at once (a cast weight, a cast bias, an fp16 gradient block). */
enum {
    CU_SCRATCH_W = 0,    // weights cast to the compute dtype
    CU_SCRATCH_B,        // bias cast to the compute dtype
    CU_SCRATCH_GRAD,     // dw/db in the compute dtype before accumulation into fp32
    CU_SCRATCH_GEMM,     // deconv GEMM block (rows, 4K)
    CU_SCRATCH_REDUCE,   // per-block partial sums of the loss reductions (double)
    CU_SCRATCH_DMASK,    // a backward's ReLU-masked output gradient (cu_relu_grad_bias)
    CU_SCRATCH_COUNT
};

typedef struct cu_conv_algo cu_conv_algo; // conv_cudnn.cu

#define CU_PINNED_SLOTS 64 // uploads in flight through the pinned staging ring

typedef struct cu_state {
    int device;
    cudaStream_t stream;
    cudaStream_t body_stream; // stands in for stream while stream.run_if captures a conditional body
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    int tf32;          // fp32 convs/GEMMs may use TF32 tensor cores
    int fused_mode;    // conv+bias+ReLU: -1 choose per shape by timing, 0 never, 1 always
    int algo_find;     // 1: cudnnFind* (timed), 0: cudnnGet*_v7 (heuristics)
    size_t workspace_limit;
    void *workspace;
    size_t workspace_size;
    void *scratch[CU_SCRATCH_COUNT];
    size_t scratch_size[CU_SCRATCH_COUNT];
    int *flag_dev;     // (1) int for the Inf/NaN scan
    int *flag_host;    // pinned mirror of flag_dev
    cudaMemPool_t pool; // the device's default pool when use_pool (stream-ordered be->mem.alloc/free)
    int use_pool;
    cu_conv_algo *algos; // open-addressing hash map, cap entries
    int n_algos, cap_algos;
    const mrcnn_backend *owner; // whose stats count the backend's own waits
    /* be->mem.write's pinned staging ring (backend_cuda.cu): a host -> device copy from
     * pinned memory is a true DMA that the host does not wait for, and the caller's
     * buffer is free again on return. pinned_pend[] are the copies still reading it. */
    char *pinned;
    size_t pinned_size, pinned_head, pinned_max;
    struct { size_t lo, hi; cudaEvent_t ev; } pinned_pend[CU_PINNED_SLOTS];
    int pinned_first, pinned_count;
    int capturing;     // inside stream.graph_begin / graph_end
    uint64_t graph_epoch; // bumped by every scratch/workspace (re)allocation: graphs captured before are stale
} cu_state;

static inline cu_state *cu_st(const mrcnn_backend *be) { return (cu_state *)be->state; }

/* Element sizes without calling into libmrcnn.a, so the shared library stands alone. */
size_t cu_dtype_size(mrcnn_dtype dt);
int64_t cu_numel(const mrcnn_tensor *t);
/* Fails unless t is a contiguous GPU tensor of a floating dtype (F32/F16/BF16). */
void cu_check_float(const mrcnn_tensor *t, const char *what);
/* Fails unless t is a contiguous GPU tensor. */
void cu_check_gpu(const mrcnn_tensor *t, const char *what);
void cu_check_numel(const mrcnn_tensor *t, int64_t n, const char *what);

/* A device buffer of at least `bytes` in slot; grows (never shrinks) on demand. */
void *cu_scratch(cu_state *s, int slot, size_t bytes);
void *cu_workspace(cu_state *s, size_t bytes);
/* t's data as dtype dt: t->data itself when it already is, else a cast copy in slot. */
const void *cu_as_dtype(cu_state *s, const mrcnn_tensor *t, mrcnn_dtype dt, int slot);

/* Elementwise helpers (elementwise.cu); dtypes are F32/F16/BF16 unless noted. */
void cu_cast(cu_state *s, const void *x, mrcnn_dtype xt, void *y, mrcnn_dtype yt, int64_t n);
/* y += x over n elements. */
void cu_accumulate(cu_state *s, const void *x, mrcnn_dtype xt, void *y, mrcnn_dtype yt, int64_t n);
/* y (M, K) = act(y + b (K)); b may be NULL. */
void cu_bias_act(cu_state *s, void *y, mrcnn_dtype yt, int64_t m, int k, const void *b,
                 mrcnn_dtype bt, int relu);
/* y = a + b, then ReLU when relu (the residual join of a bottleneck in one pass; y may
 * alias a or b). */
void cu_add_act(cu_state *s, const void *a, mrcnn_dtype at, const void *b, mrcnn_dtype bt, void *y, mrcnn_dtype yt,
                int64_t n, int relu);
/* db (K) += column sums of dy (M, K), summed in a fixed order (deterministic). */
void cu_bias_grad(cu_state *s, const void *dy, mrcnn_dtype dyt, int64_t m, int k, void *db,
                  mrcnn_dtype dbt);

/* The output gradient a backward op with act RELU uses: g (M, K) = dy where y > 0,
 * else 0, in dy's dtype, written to scratch (CU_SCRATCH_DMASK) and returned; with db
 * (NULL: none), db (K) += g's column sums in the same pass over y and dy (as
 * cu_bias_grad on g, bit for bit). */
const void *cu_relu_grad_bias(cu_state *s, const void *y, mrcnn_dtype yt, const void *dy, mrcnn_dtype dyt, int64_t m,
                              int k, void *db, mrcnn_dtype dbt);

/* Fillers of the vtable, one per file. */
void cu_fill_conv_ops(mrcnn_backend *be);
void cu_fill_gemm_ops(mrcnn_backend *be);
void cu_fill_elementwise_ops(mrcnn_backend *be);
void cu_fill_loss_ops(mrcnn_backend *be);
void cu_fill_optim_ops(mrcnn_backend *be);
void cu_fill_roi_ops(mrcnn_backend *be);
void cu_fill_gather_ops(mrcnn_backend *be); // model_gathers.cu
void cu_conv_cache_free(cu_state *s);

/* Launch geometry for grid-stride loops: enough blocks to fill the GPU, capped. */
static inline unsigned cu_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 8) b = 65535LL * 8;
    return (unsigned)b;
}

#endif
