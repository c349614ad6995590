/* Per-row top-k (detect_internal.h): one block per row finds the k-th largest key by a
 * 4-pass radix select over order-preserving uint32 keys, collects the keys above it
 * and the first (in index order) of those equal to it, and bitonic-sorts them in
 * shared memory by (value descending, index ascending): the host's stable order. */
#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "detect_internal.h"
#include "mrcnn/box_math.h"

#define TOPK_THREADS 1024

/* Larger float, larger key (an order-preserving map of the bits). */
static __device__ __forceinline__ uint32_t order_key(float f) {
    if (f == 0.0f) f = 0.0f; // -0 ties with +0, as the host's float comparison has it
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Radix select, most significant digit first: the kk-th largest key of row[0..n) into
 * *kth, and into *take_eq how many keys equal to it belong to the top kk. Every thread of
 * the block calls it and gets both. */
static __device__ __forceinline__ void topk_radix_select(const void *row, int dt, int64_t n, int kk, uint32_t *kth,
                                                         int64_t *take_eq) {
    __shared__ int hist[256];
    __shared__ uint32_t prefix, mask;
    __shared__ int64_t remaining;
    if (threadIdx.x == 0) {
        prefix = 0;
        mask = 0;
        remaining = kk;
    }
    __syncthreads();
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += TOPK_THREADS) hist[b] = 0;
        __syncthreads();
        const uint32_t pf = prefix, mk = mask;
        for (int64_t i = threadIdx.x; i < n; i += TOPK_THREADS) {
            uint32_t kv = order_key(cu_load(row, i, dt));
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
    *kth = prefix;
    *take_eq = remaining; // how many keys equal to kth, lowest indices first
}

/* Ordered compaction: keys above kth go to key/idx[0, n_gt), the first take_eq equal
 * ones (in index order) after them. The number above is kk - take_eq, so equal keys
 * start there. Every thread of the block calls it. */
static __device__ __forceinline__ void topk_compact(const void *row, int dt, int64_t n, int kk, uint32_t kth,
                                                    int64_t take_eq, uint32_t *key, int32_t *idx) {
    __shared__ int warp_gt[TOPK_THREADS / 32], warp_eq[TOPK_THREADS / 32];
    __shared__ int64_t base_gt, base_eq;
    if (threadIdx.x == 0) base_gt = base_eq = 0;
    __syncthreads();
    const int64_t n_gt = kk - take_eq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t b0 = 0; b0 < n; b0 += TOPK_THREADS) {
        const int64_t i = b0 + threadIdx.x;
        const uint32_t kv = i < n ? order_key(cu_load(row, i, dt)) : 0;
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
}

/* key/idx[0, kk) padded to `padded` (a power of two) with entries that sort last, then
 * a bitonic sort: "before" = larger key, or equal key and lower index. Every thread of
 * the block calls it. */
static __device__ __forceinline__ void topk_sort(int kk, int padded, uint32_t *key, int32_t *idx) {
    for (int i = kk + threadIdx.x; i < padded; i += TOPK_THREADS) {
        key[i] = 0;
        idx[i] = 0x7fffffff;
    }
    __syncthreads();
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
}

/* The block's top kk (<= n) of row[0..n) (dtype dt) into key[0..kk) / idx[0..kk) of
 * shared memory (padded >= kk a power of two), sorted. Every thread of the block calls it. */
static __device__ void topk_block(const void *row, int dt, int64_t n, int kk, int padded, uint32_t *key,
                                  int32_t *idx) {
    uint32_t kth;
    int64_t take_eq;
    topk_radix_select(row, dt, n, kk, &kth, &take_eq);
    topk_compact(row, dt, n, kk, kth, take_eq, key, idx);
    topk_sort(kk, padded, key, idx);
    __syncthreads(); // callers read key/idx next
}

__global__ void k_topk(const float *x, int64_t n, int k, int padded, float *values, int64_t *indices) {
    extern __shared__ uint32_t topk_smem[]; // key[padded], idx[padded]
    uint32_t *key = topk_smem;
    int32_t *idx = (int32_t *)(topk_smem + padded);
    const float *row = x + (int64_t)blockIdx.x * n;
    const int kk = (int64_t)k < n ? k : (int)n;
    topk_block(row, MRCNN_DTYPE_F32, n, kk, padded, key, idx);
    for (int i = threadIdx.x; i < kk; i += TOPK_THREADS) {
        values[(int64_t)blockIdx.x * k + i] = row[idx[i]];
        indices[(int64_t)blockIdx.x * k + i] = idx[i];
    }
}

/* The proposals' first stage (detect_internal.h): block b is (image b / L, level b % L):
 * its top k of the level's logits, then each one decoded against its anchor, clipped,
 * scored and filtered as mrcnn_rpn_proposals does, into the image's candidate rows. */
__global__ void k_proposals_topk(cu_det_levels lv, const float *anchors, const int32_t *image_hw, mrcnn_box_coder coder,
                                 float min_size, float score_thresh, int cap, float *cand_boxes, float *cand_scores,
                                 int32_t *cand_levels, int32_t *n_valid) {
    extern __shared__ uint32_t topk_smem[];
    __shared__ int block_valid;
    const int img = blockIdx.x / lv.n_levels, l = blockIdx.x % lv.n_levels;
    const int kk = lv.k[l];
    if (kk <= 0) return; // uniform over the block
    int padded = 1;
    while (padded < kk) padded <<= 1;
    uint32_t *key = topk_smem;
    int32_t *idx = (int32_t *)(topk_smem + padded);
    const int64_t cnt = lv.count[l];
    const size_t lsz = lv.logit_dt[l] == MRCNN_DTYPE_F32 ? 4 : 2, dsz = lv.delta_dt[l] == MRCNN_DTYPE_F32 ? 4 : 2;
    const char *row = (const char *)lv.logits[l] + (size_t)img * cnt * lsz;
    const char *drow = (const char *)lv.deltas[l] + (size_t)img * cnt * 4 * dsz;
    if (threadIdx.x == 0) block_valid = 0;
    topk_block(row, lv.logit_dt[l], cnt, kk, padded, key, idx);
    const float img_h = (float)image_hw[2 * img], img_w = (float)image_hw[2 * img + 1];
    int mine = 0;
    for (int t = threadIdx.x; t < kk; t += TOPK_THREADS) {
        const int64_t i = idx[t];
        const float v = cu_load(row, i, lv.logit_dt[l]);
        float d[4], box[4];
        for (int c = 0; c < 4; c++) d[c] = cu_load(drow, 4 * i + c, lv.delta_dt[l]);
        mrcnn_box_decode_one(&coder, d, anchors + 4 * (lv.anchor0[l] + i), box);
        box[0] = mrcnn_box_clamp(box[0], img_w);
        box[1] = mrcnn_box_clamp(box[1], img_h);
        box[2] = mrcnn_box_clamp(box[2], img_w);
        box[3] = mrcnn_box_clamp(box[3], img_h);
        /* The host's 1 / (1 + expf(-v)). exp in double rounded to float is the correctly
         * rounded expf, which glibc's (0.502 ulp) matches but in rare near-halfway cases;
         * the device's expf may be up to 2 ulp off. Scores then agree within an ulp. */
        const float e = (float)exp(-(double)v);
        const float sc = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
        const int ok = (box[2] - box[0]) >= min_size && (box[3] - box[1]) >= min_size && sc >= score_thresh;
        const int64_t at = (int64_t)img * cap + lv.slot0[l] + t;
        for (int c = 0; c < 4; c++) cand_boxes[4 * at + c] = box[c];
        cand_scores[at] = ok ? sc : -INFINITY; // sorts after every kept score (>= 0)
        cand_levels[at] = l;
        mine += ok;
    }
    if (mine) atomicAdd(&block_valid, mine);
    __syncthreads();
    if (threadIdx.x == 0 && block_valid) atomicAdd(&n_valid[img], block_valid);
}

extern "C" void mrcnn_cuda_topk(const mrcnn_backend *be, const float *x, int rows, int64_t n, int k, float *values,
                                int64_t *indices) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state, "cuda_topk: needs the CUDA backend");
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

extern "C" void cu_proposals_topk_decode(const mrcnn_backend *be, int n_images, const cu_det_levels *lv,
                                         const float *anchors, const int32_t *image_hw, float min_size,
                                         float score_thresh, int cap, float *cand_boxes, float *cand_scores,
                                         int32_t *cand_levels, int32_t *n_valid) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state, "cuda_proposals: needs the CUDA backend");
    MRCNN_CHECK(lv && lv->n_levels > 0 && lv->n_levels <= CU_DET_MAX_LEVELS && n_images >= 0,
                "cuda_proposals: %d levels (at most %d), %d images", lv ? lv->n_levels : -1, CU_DET_MAX_LEVELS,
                n_images);
    cudaStream_t st = cu_st(be)->stream;
    MRCNN_CHECK_CUDA(cudaMemsetAsync(n_valid, 0, (size_t)n_images * sizeof(int32_t), st));
    int kmax = 0;
    for (int l = 0; l < lv->n_levels; l++) {
        MRCNN_CHECK(lv->k[l] >= 0 && lv->k[l] <= MRCNN_CUDA_TOPK_MAX && lv->count[l] < 2147483647LL,
                    "cuda_proposals: level %d keeps %d of %lld (at most %d)", l, lv->k[l], (long long)lv->count[l],
                    MRCNN_CUDA_TOPK_MAX);
        if (lv->k[l] > kmax) kmax = lv->k[l];
    }
    if (n_images == 0 || kmax == 0) return;
    int padded = 1;
    while (padded < kmax) padded <<= 1;
    const int smem = padded * 8;
    /* torchvision's RPN box coder: weights (1, 1, 1, 1), clamp at log(1000 / 16) rounded
     * to float, as mrcnn_box_coder_make (not callable from this library). */
    mrcnn_box_coder coder = {1.0f, 1.0f, 1.0f, 1.0f, (float)log(1000.0 / 16.0)};
    MRCNN_CHECK_CUDA(cudaFuncSetAttribute(k_proposals_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    k_proposals_topk<<<(unsigned)(n_images * lv->n_levels), TOPK_THREADS, (size_t)smem, st>>>(
        *lv, anchors, image_hw, coder, min_size, score_thresh, cap, cand_boxes, cand_scores, cand_levels, n_valid);
    MRCNN_CHECK_LAUNCH("proposals topk");
}
