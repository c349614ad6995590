/* Per-row top-k and the proposals' first stage (detect_internal.h), two ways:
 *
 * - by default, one stable radix sort over the whole batch (cu_det_sort, CUB's
 *   DeviceRadixSort) of det_sort_keys.h's (segment, value) keys, a segment being a row
 *   or an (image, level): every SM takes part however few the segments are, and the
 *   top k of a segment are its first k entries after the sort;
 * - MRCNN_DET_KERNELS=legacy: one block per row finds the k-th largest key by a 4-pass
 *   radix select over order-preserving uint32 keys, collects the keys above it and the
 *   first (in index order) of those equal to it, and bitonic-sorts them in shared memory
 *   by (value descending, index ascending).
 *
 * Both give the host's stable order, bit for bit the same (the same uint32 order keys,
 * ties by the lower index; NaNs too). */
#include <cub/device/device_radix_sort.cuh>
#include <stdlib.h>
#include <string.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "det_sort_keys.h"
#include "detect_internal.h"
#include "mrcnn/box_math.h"

#define TOPK_THREADS 1024

/* Larger float, larger key: det_sort_keys.h's map, which the batch sort uses too. */
static __device__ __forceinline__ uint32_t order_key(float f) { return det_order_key(f); }

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

/* Candidate t (rank t of image img's level l, anchor i of the level): decoded against its
 * anchor, clipped, scored and filtered as mrcnn_rpn_proposals does, into row
 * img * cap + slot0[l] + t. Returns whether it is kept (score >= 0, else -inf). */
static __device__ __forceinline__ int proposal_decode_one(const cu_det_levels &lv, int img, int l, int t, int64_t i,
                                                          const float *anchors, const int32_t *image_hw,
                                                          const mrcnn_box_coder &coder, float min_size,
                                                          float score_thresh, int cap, float *cand_boxes,
                                                          float *cand_scores, int32_t *cand_levels) {
    const int64_t cnt = lv.count[l];
    const size_t lsz = lv.logit_dt[l] == MRCNN_DTYPE_F32 ? 4 : 2, dsz = lv.delta_dt[l] == MRCNN_DTYPE_F32 ? 4 : 2;
    const char *row = (const char *)lv.logits[l] + (size_t)img * cnt * lsz;
    const char *drow = (const char *)lv.deltas[l] + (size_t)img * cnt * 4 * dsz;
    const float img_h = (float)image_hw[2 * img], img_w = (float)image_hw[2 * img + 1];
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
    return ok;
}

/* The proposals' first stage (detect_internal.h), legacy: block b is (image b / L, level
 * b % L): its top k of the level's logits, then each one decoded. */
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
    const size_t lsz = lv.logit_dt[l] == MRCNN_DTYPE_F32 ? 4 : 2;
    const char *row = (const char *)lv.logits[l] + (size_t)img * cnt * lsz;
    if (threadIdx.x == 0) block_valid = 0;
    topk_block(row, lv.logit_dt[l], cnt, kk, padded, key, idx);
    int mine = 0;
    for (int t = threadIdx.x; t < kk; t += TOPK_THREADS)
        mine += proposal_decode_one(lv, img, l, t, idx[t], anchors, image_hw, coder, min_size, score_thresh, cap,
                                    cand_boxes, cand_scores, cand_levels);
    if (mine) atomicAdd(&block_valid, mine);
    __syncthreads();
    if (threadIdx.x == 0 && block_valid) atomicAdd(&n_valid[img], block_valid);
}

/* ---- the batch sort ------------------------------------------------------------------ */

#define SORT_THREADS 256

extern "C" int cu_det_kernels_legacy(void) {
    const char *v = getenv("MRCNN_DET_KERNELS");
    if (!v || !*v || strcmp(v, "sort") == 0) return 0;
    MRCNN_CHECK(strcmp(v, "legacy") == 0, "MRCNN_DET_KERNELS=%s: expected sort (the default) or legacy", v);
    return 1;
}

static size_t sort_al256(size_t b) { return (b + 255) / 256 * 256; }

/* CUB's temporary bytes for n pairs up to end_bit on the current device: a host-side
 * query (no device work, no allocation), remembered per shape. */
static size_t det_sort_temp_bytes(int64_t n, int end_bit) {
    static thread_local struct {
        int64_t n;
        int end_bit, device;
        size_t bytes;
    } memo[8];
    static thread_local int n_memo = 0, next_memo = 0;
    int device = 0;
    MRCNN_CHECK_CUDA(cudaGetDevice(&device));
    for (int i = 0; i < n_memo; i++)
        if (memo[i].n == n && memo[i].end_bit == end_bit && memo[i].device == device) return memo[i].bytes;
    size_t bytes = 0;
    cub::DoubleBuffer<uint64_t> keys(NULL, NULL);
    cub::DoubleBuffer<int32_t> vals(NULL, NULL);
    MRCNN_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(NULL, bytes, keys, vals, (int)n, 0, end_bit));
    const int at = n_memo < 8 ? n_memo++ : (next_memo++ & 7);
    memo[at].n = n;
    memo[at].end_bit = end_bit;
    memo[at].device = device;
    memo[at].bytes = bytes;
    return bytes;
}

/* work: keys and their alternate buffer (8 bytes each), values and theirs (4 bytes), CUB's
 * temp. The sort ping-pongs between each pair (cub::DoubleBuffer), so its temp needs no
 * copies of them. */
extern "C" size_t cu_det_sort_bytes(int64_t n, int64_t n_segments) {
    MRCNN_CHECK(n >= 0 && n < 2147483647LL && n_segments >= 1, "det sort: %lld items in %lld segments", (long long)n,
                (long long)n_segments);
    const size_t m = (size_t)(n ? n : 1);
    return 2 * sort_al256(m * 8) + 2 * sort_al256(m * 4) + sort_al256(det_sort_temp_bytes(n, det_sort_end_bit(n_segments)));
}

extern "C" void cu_det_sort_inputs(void *work, int64_t n, uint64_t **keys, int32_t **values) {
    const size_t m = (size_t)(n ? n : 1);
    *keys = (uint64_t *)work;
    *values = (int32_t *)((char *)work + 2 * sort_al256(m * 8));
}

extern "C" const int32_t *cu_det_sort(const mrcnn_backend *be, void *work, int64_t n, int64_t n_segments) {
    const size_t m = (size_t)(n ? n : 1);
    char *w = (char *)work;
    cub::DoubleBuffer<uint64_t> keys((uint64_t *)w, (uint64_t *)(w + sort_al256(m * 8)));
    cub::DoubleBuffer<int32_t> vals((int32_t *)(w + 2 * sort_al256(m * 8)),
                                    (int32_t *)(w + 2 * sort_al256(m * 8) + sort_al256(m * 4)));
    void *temp = w + 2 * sort_al256(m * 8) + 2 * sort_al256(m * 4);
    if (n == 0) return vals.Current();
    const int end_bit = det_sort_end_bit(n_segments);
    size_t temp_bytes = det_sort_temp_bytes(n, end_bit);
    MRCNN_CHECK_CUDA(
        cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, vals, (int)n, 0, end_bit, cu_st(be)->stream));
    MRCNN_CHECK_LAUNCH("det sort");
    return vals.Current(); // the buffer the last pass wrote, chosen on the host: the same in a replay
}

/* ---- per-row top-k ------------------------------------------------------------------- */

/* Entry p of x (rows, n): key (row p / n, x[p]), value its column. */
__global__ void k_topk_keys(const float *x, int64_t n, int64_t total, uint64_t *keys, int32_t *vals) {
    CU_GRID_STRIDE(p, total) {
        const int64_t row = p / n;
        keys[p] = det_sort_key((uint32_t)row, x[p]);
        vals[p] = (int32_t)(p - row * n);
    }
}

/* Output (row, t < kk): rank t of the row, the row's span of the sorted batch. */
__global__ void k_topk_gather(const float *x, int64_t n, int k, int kk, int rows, const int32_t *sorted, float *values,
                              int64_t *indices) {
    CU_GRID_STRIDE(q, (int64_t)rows * kk) {
        const int row = (int)(q / kk), t = (int)(q % kk);
        const int32_t i = sorted[det_sorted_pos(row, n, 0, t)];
        values[(int64_t)row * k + t] = x[(int64_t)row * n + i];
        indices[(int64_t)row * k + t] = i;
    }
}

extern "C" void mrcnn_cuda_topk(const mrcnn_backend *be, const float *x, int rows, int64_t n, int k, float *values,
                                int64_t *indices) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state, "cuda_topk: needs the CUDA backend");
    MRCNN_CHECK(rows >= 0 && n >= 0 && n < 2147483647LL && k > 0 && k <= MRCNN_CUDA_TOPK_MAX,
                "cuda_topk: rows %d, n %lld, k %d (at most %d)", rows, (long long)n, k, MRCNN_CUDA_TOPK_MAX);
    if (rows == 0 || n == 0) return;
    cudaStream_t st = cu_st(be)->stream;
    const int kk = (int64_t)k < n ? k : (int)n;
    if (!cu_det_kernels_legacy()) {
        const int64_t total = (int64_t)rows * n;
        MRCNN_CHECK(total < 2147483647LL, "cuda_topk: %d rows of %lld, at most 2^31 - 1 entries", rows, (long long)n);
        void *work = cu_scratch(cu_st(be), CU_SCRATCH_GEMM, cu_det_sort_bytes(total, rows));
        uint64_t *keys;
        int32_t *vals;
        cu_det_sort_inputs(work, total, &keys, &vals);
        k_topk_keys<<<cu_blocks(total, SORT_THREADS), SORT_THREADS, 0, st>>>(x, n, total, keys, vals);
        MRCNN_CHECK_LAUNCH("topk keys");
        const int32_t *sorted = cu_det_sort(be, work, total, rows);
        k_topk_gather<<<cu_blocks((int64_t)rows * kk, SORT_THREADS), SORT_THREADS, 0, st>>>(x, n, k, kk, rows, sorted,
                                                                                          values, indices);
        MRCNN_CHECK_LAUNCH("topk gather");
        return;
    }
    int padded = 1;
    while (padded < kk) padded <<= 1;
    const int smem = padded * 8;
    MRCNN_CHECK_CUDA(cudaFuncSetAttribute(k_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    k_topk<<<(unsigned)rows, TOPK_THREADS, (size_t)smem, st>>>(x, n, k, padded, values, indices);
    MRCNN_CHECK_LAUNCH("topk");
}

/* ---- the proposals' first stage ------------------------------------------------------- */

/* Entry p of the batch's anchors, (image, level, anchor) flattened with na per image:
 * key (segment image * L + level, logit), value the anchor's index within its level. */
__global__ void k_proposals_keys(cu_det_levels lv, int64_t na, int64_t total, uint64_t *keys, int32_t *vals) {
    CU_GRID_STRIDE(p, total) {
        const int img = (int)(p / na);
        const int64_t r = p - (int64_t)img * na;
        const int l = det_part_of(r, lv.anchor0, lv.n_levels);
        const int64_t i = r - lv.anchor0[l];
        keys[p] = det_sort_key((uint32_t)(img * lv.n_levels + l),
                               cu_load(lv.logits[l], (int64_t)img * lv.count[l] + i, lv.logit_dt[l]));
        vals[p] = (int32_t)i;
    }
}

/* One thread per candidate row (image t / cap, slot t % cap: level l, rank slot - slot0[l]),
 * no grid stride, so that every lane of a warp reaches the vote: the row's anchor is
 * rank t of its segment in the sorted batch; kept rows are counted per image with one
 * atomic per (warp, image). */
__global__ void k_proposals_decode(cu_det_levels lv, int64_t na, const int32_t *sorted, int n_images,
                                   const float *anchors, const int32_t *image_hw, mrcnn_box_coder coder, float min_size,
                                   float score_thresh, int cap, float *cand_boxes, float *cand_scores,
                                   int32_t *cand_levels, int32_t *n_valid) {
    const int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int img = -1, ok = 0;
    if (q < (int64_t)n_images * cap) {
        const int im = (int)(q / cap), slot = (int)(q % cap);
        const int l = det_part_of_i32(slot, lv.slot0, lv.n_levels);
        const int t = slot - lv.slot0[l];
        if (t < lv.k[l]) { // rows past the levels' candidates stay untouched, as in the legacy kernel
            img = im;
            const int32_t i = sorted[det_sorted_pos(im, na, lv.anchor0[l], t)];
            ok = proposal_decode_one(lv, im, l, t, i, anchors, image_hw, coder, min_size, score_thresh, cap,
                                     cand_boxes, cand_scores, cand_levels);
        }
    }
    const unsigned peers = __match_any_sync(0xffffffffu, img), kept = __ballot_sync(0xffffffffu, ok);
    const int lane = threadIdx.x & 31;
    if (img >= 0 && lane == __ffs(peers) - 1 && (peers & kept)) atomicAdd(&n_valid[img], __popc(peers & kept));
}

static int64_t proposals_anchors(const cu_det_levels *lv) {
    int64_t na = 0;
    for (int l = 0; l < lv->n_levels; l++) na += lv->count[l];
    return na;
}

extern "C" size_t cu_proposals_work_bytes(int n_images, const cu_det_levels *lv) {
    return cu_det_sort_bytes((int64_t)n_images * proposals_anchors(lv),
                             (int64_t)(n_images > 0 ? n_images : 1) * lv->n_levels);
}

extern "C" void cu_proposals_topk_decode(const mrcnn_backend *be, int n_images, const cu_det_levels *lv,
                                         const float *anchors, const int32_t *image_hw, float min_size,
                                         float score_thresh, int cap, void *work, float *cand_boxes,
                                         float *cand_scores, int32_t *cand_levels, int32_t *n_valid) {
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
    /* torchvision's RPN box coder: weights (1, 1, 1, 1), clamp at log(1000 / 16) rounded
     * to float, as mrcnn_box_coder_make (not callable from this library). */
    mrcnn_box_coder coder = {1.0f, 1.0f, 1.0f, 1.0f, (float)log(1000.0 / 16.0)};
    if (!cu_det_kernels_legacy()) {
        MRCNN_CHECK(work != NULL, "cuda_proposals: no work buffer");
        const int64_t na = proposals_anchors(lv), total = (int64_t)n_images * na;
        const int64_t n_seg = (int64_t)n_images * lv->n_levels;
        uint64_t *keys;
        int32_t *vals;
        cu_det_sort_inputs(work, total, &keys, &vals);
        k_proposals_keys<<<cu_blocks(total, SORT_THREADS), SORT_THREADS, 0, st>>>(*lv, na, total, keys, vals);
        MRCNN_CHECK_LAUNCH("proposals keys");
        const int32_t *sorted = cu_det_sort(be, work, total, n_seg);
        const int64_t rows = (int64_t)n_images * cap;
        k_proposals_decode<<<(unsigned)((rows + SORT_THREADS - 1) / SORT_THREADS), SORT_THREADS, 0, st>>>(
            *lv, na, sorted, n_images, anchors, image_hw, coder, min_size, score_thresh, cap, cand_boxes, cand_scores,
            cand_levels, n_valid);
        MRCNN_CHECK_LAUNCH("proposals decode");
        return;
    }
    int padded = 1;
    while (padded < kmax) padded <<= 1;
    const int smem = padded * 8;
    MRCNN_CHECK_CUDA(cudaFuncSetAttribute(k_proposals_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    k_proposals_topk<<<(unsigned)(n_images * lv->n_levels), TOPK_THREADS, (size_t)smem, st>>>(
        *lv, anchors, image_hw, coder, min_size, score_thresh, cap, cand_boxes, cand_scores, cand_levels, n_valid);
    MRCNN_CHECK_LAUNCH("proposals topk");
}
