/* Per-row top-k (cuda_ops.h): one block per row finds the k-th largest key by a
 * 4-pass radix select over order-preserving uint32 keys, collects the keys above it
 * and the first (in index order) of those equal to it, and bitonic-sorts them in
 * shared memory by (value descending, index ascending): the host's stable order. */
#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "mrcnn/cuda_ops.h"

#define TOPK_THREADS 1024

/* Larger float, larger key (an order-preserving map of the bits). */
static __device__ __forceinline__ uint32_t order_key(float f) {
    if (f == 0.0f) f = 0.0f; // -0 ties with +0, as the host's float comparison has it
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void k_topk(const float *x, int64_t n, int k, int padded, float *values, int64_t *indices) {
    extern __shared__ uint32_t topk_smem[]; // key[padded], idx[padded]
    uint32_t *key = topk_smem;
    int32_t *idx = (int32_t *)(topk_smem + padded);
    __shared__ int hist[256];
    __shared__ uint32_t prefix, mask;
    __shared__ int64_t remaining;
    __shared__ int warp_gt[TOPK_THREADS / 32], warp_eq[TOPK_THREADS / 32];
    __shared__ int64_t base_gt, base_eq;
    const float *row = x + (int64_t)blockIdx.x * n;
    const int kk = (int64_t)k < n ? k : (int)n;
    if (threadIdx.x == 0) {
        prefix = 0;
        mask = 0;
        remaining = kk;
    }
    __syncthreads();
    /* Radix select, most significant digit first. */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += TOPK_THREADS) hist[b] = 0;
        __syncthreads();
        const uint32_t pf = prefix, mk = mask;
        for (int64_t i = threadIdx.x; i < n; i += TOPK_THREADS) {
            uint32_t kv = order_key(row[i]);
            if ((kv & mk) == pf) atomicAdd(&hist[(kv >> shift) & 0xFF], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t above = 0;
            int g = 255;
            for (; g > 0; g--) {
                if (above + hist[g] >= remaining) break;
                above += hist[g];
            }
            remaining -= above;
            prefix |= (uint32_t)g << shift;
            mask |= 0xFFu << shift;
        }
        __syncthreads();
    }
    const uint32_t kth = prefix;
    const int64_t take_eq = remaining; // how many keys equal to kth, lowest indices first
    if (threadIdx.x == 0) base_gt = base_eq = 0;
    __syncthreads();
    /* Ordered compaction: keys above kth go to [0, n_gt), equal ones after them. The
     * number above is kk - take_eq, so equal keys start there. */
    const int64_t n_gt = kk - take_eq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t b0 = 0; b0 < n; b0 += TOPK_THREADS) {
        const int64_t i = b0 + threadIdx.x;
        const uint32_t kv = i < n ? order_key(row[i]) : 0;
        const int gt = i < n && kv > kth, eq = i < n && kv == kth;
        const unsigned bg = __ballot_sync(0xffffffffu, gt), be_ = __ballot_sync(0xffffffffu, eq);
        const unsigned below = (1u << lane) - 1u;
        if (lane == 0) {
            warp_gt[warp] = __popc(bg);
            warp_eq[warp] = __popc(be_);
        }
        __syncthreads();
        int64_t og = base_gt, oe = base_eq;
        for (int w = 0; w < warp; w++) {
            og += warp_gt[w];
            oe += warp_eq[w];
        }
        if (gt) {
            int64_t at = og + __popc(bg & below);
            key[at] = kv;
            idx[at] = (int32_t)i;
        }
        if (eq) {
            int64_t r = oe + __popc(be_ & below);
            if (r < take_eq) {
                key[n_gt + r] = kv;
                idx[n_gt + r] = (int32_t)i;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < TOPK_THREADS / 32; w++) {
                base_gt += warp_gt[w];
                base_eq += warp_eq[w];
            }
        __syncthreads();
    }
    for (int i = kk + threadIdx.x; i < padded; i += TOPK_THREADS) {
        key[i] = 0;
        idx[i] = 0x7fffffff;
    }
    __syncthreads();
    /* Bitonic sort: "before" = larger key, or equal key and lower index. */
    for (int size = 2; size <= padded; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < padded; i += TOPK_THREADS) {
                int j = i ^ stride;
                if (j > i) {
                    int before = key[i] > key[j] || (key[i] == key[j] && idx[i] < idx[j]);
                    int ascending = (i & size) == 0;
                    if (before != ascending) {
                        uint32_t tk = key[i];
                        key[i] = key[j];
                        key[j] = tk;
                        int32_t ti = idx[i];
                        idx[i] = idx[j];
                        idx[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < kk; i += TOPK_THREADS) {
        values[(int64_t)blockIdx.x * k + i] = row[idx[i]];
        indices[(int64_t)blockIdx.x * k + i] = idx[i];
    }
}

extern "C" void mrcnn_cuda_topk(const mrcnn_backend *be, const float *x, int rows, int64_t n, int k, float *values,
                                int64_t *indices) {
    MRCNN_CHECK(be && be->name && be->name[0] == 'c' && be->state, "cuda_topk: needs the CUDA backend");
    MRCNN_CHECK(rows >= 0 && n >= 0 && n < 2147483647LL && k > 0 && k <= MRCNN_CUDA_TOPK_MAX,
                "cuda_topk: rows %d, n %lld, k %d (at most %d)", rows, (long long)n, k, MRCNN_CUDA_TOPK_MAX);
    if (rows == 0 || n == 0) return;
    const int kk = (int64_t)k < n ? k : (int)n;
    int padded = 1;
    while (padded < kk) padded <<= 1;
    const int smem = padded * 8;
    MRCNN_CHECK_CUDA(cudaFuncSetAttribute(k_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    k_topk<<<(unsigned)rows, TOPK_THREADS, (size_t)smem, cu_st(be)->stream>>>(x, n, k, padded, values, indices);
    MRCNN_CHECK_LAUNCH("topk");
}

extern "C" void mrcnn_cuda_cast(const mrcnn_backend *be, const mrcnn_tensor *x, mrcnn_tensor *y) {
    MRCNN_CHECK(be && be->name && be->name[0] == 'c' && be->state, "cuda_cast: needs the CUDA backend");
    cu_check_float(x, "cuda_cast x");
    cu_check_float(y, "cuda_cast y");
    cu_check_numel(y, cu_numel(x), "cuda_cast y");
    cu_cast(cu_st(be), x->data, x->dtype, y->data, y->dtype, cu_numel(x));
}
