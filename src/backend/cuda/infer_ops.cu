/* The CUDA backend's inference ops (detect_ops.h: proposal_rois, detect_boxes,
 * mask_probs), so that a batch's detections stay on the device until the one read that
 * returns them. Semantics and float arithmetic of the host post-processing the CPU
 * backend runs (postprocess.h: softmax in the same order, box_math.h's decode and
 * clamp, per-class greedy NMS in stable score order, the first max_detections); expf
 * may differ from the host's by an ulp or two.
 *
 * detect_boxes: one thread per (row, foreground class) scores, decodes, clips and
 * filters a candidate; the candidates are compacted per image, keeping the
 * MRCNN_DETECT_MAX_CANDIDATES highest-scoring when there are more (ties in candidate
 * order): by default one stable radix sort of the batch's candidates by (image, score)
 * (cu_det_sort, det_sort_keys.h) and a take of each image's first ones;
 * MRCNN_DET_KERNELS=legacy: one block per image (a radix select on the score bits and
 * an ordered compaction). cu_nms_batched runs every image's NMS at once and stops at
 * max_detections; one thread per output row gathers the kept candidates, compacted over
 * the batch. Nothing waits for the device.
 * Temporaries come from the CU_SCRATCH_GEMM slot, carved once per call. */
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <math.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "det_sort_keys.h"
#include "detect_internal.h"
#include "mrcnn/box_math.h"

#define IT 256             // threads per block of the elementwise kernels here
#define COMPACT_THREADS 512 // one block per image

static cu_state *infer_state(const mrcnn_backend *be, const char *op) {
    MRCNN_CHECK(be && be->device == MRCNN_DEVICE_GPU && be->state, "%s: needs the CUDA backend", op);
    return cu_st(be);
}

static size_t al256(size_t b) { return (b + 255) / 256 * 256; }

static void need(const mrcnn_tensor *t, mrcnn_dtype dt, int64_t numel, const char *what) {
    cu_check_gpu(t, what);
    MRCNN_CHECK(t->dtype == dt, "%s: dtype %d, expected %d", what, (int)t->dtype, (int)dt);
    cu_check_numel(t, numel, what);
}

/* The image of flat row t of per-image counts (clamped to [0, cap]) laid end to end, and
 * t's place in it; -1 past their sum. *sum gets the sum. N is small (a batch). */
static __device__ __forceinline__ int row_image(int64_t t, int n, const int32_t *counts, int cap, int64_t *j,
                                                int64_t *sum) {
    int64_t acc = 0;
    int img = -1;
    for (int i = 0; i < n; i++) {
        int c = counts[i];
        c = c < 0 ? 0 : (c > cap ? cap : c);
        if (img < 0 && t < acc + c) img = i, *j = t - acc;
        acc += c;
    }
    *sum = acc;
    return img;
}

/* ---- proposal_rois ------------------------------------------------------------------ */

__global__ void k_proposal_rois(int n, int P, const float *prop, const int32_t *counts, float *rois, float *n_rois) {
    CU_GRID_STRIDE(t, (int64_t)n * P) {
        int64_t j = 0, sum;
        const int img = row_image(t, n, counts, P, &j, &sum);
        float *o = rois + t * 5;
        o[0] = img >= 0 ? (float)img : -1.0f;
        for (int k = 0; k < 4; k++) o[1 + k] = img >= 0 ? prop[((int64_t)img * P + j) * 4 + k] : 0.0f;
        if (t == 0) *n_rois = (float)sum;
    }
}

static void cu_proposal_rois(const mrcnn_backend *be, const mrcnn_tensor *proposals, const mrcnn_tensor *counts,
                             mrcnn_tensor *rois, mrcnn_tensor *n_rois) {
    cu_state *s = infer_state(be, "proposal_rois");
    MRCNN_CHECK(proposals && proposals->ndim == 3 && proposals->shape[2] == 4, "proposal_rois: proposals (N, P, 4)");
    const int64_t N = proposals->shape[0], P = proposals->shape[1];
    need(proposals, MRCNN_DTYPE_F32, N * P * 4, "proposal_rois proposals");
    need(counts, MRCNN_DTYPE_I32, N, "proposal_rois counts");
    need(rois, MRCNN_DTYPE_F32, N * P * 5, "proposal_rois rois");
    need(n_rois, MRCNN_DTYPE_F32, 1, "proposal_rois n_rois");
    if (N * P == 0) {
        MRCNN_CHECK_CUDA(cudaMemsetAsync(n_rois->data, 0, sizeof(float), s->stream));
        return;
    }
    k_proposal_rois<<<cu_blocks(N * P, IT), IT, 0, s->stream>>>((int)N, (int)P, (const float *)proposals->data,
                                                                 (const int32_t *)counts->data, (float *)rois->data,
                                                                 (float *)n_rois->data);
    MRCNN_CHECK_LAUNCH("proposal_rois");
}

/* ---- detect_boxes --------------------------------------------------------------------- */

/* Candidate t = r * (K - 1) + (k - 1): class k of row r. cs gets its score, or -inf when
 * dropped (padding row, score <= thresh or NaN, box too small); ci its image, or -1. */
__global__ void k_det_candidates(int64_t R, int K, const void *logits, int lt, const void *deltas, int dtd,
                                 const float *rois, const int32_t *image_hw, int n_images, mrcnn_box_coder coder,
                                 float score_thresh, float min_size, float *cs, float *cb, int32_t *ci) {
    CU_GRID_STRIDE(t, R * (K - 1)) {
        const int64_t r = t / (K - 1);
        const int k = (int)(t % (K - 1)) + 1;
        const float fi = rois[r * 5];
        int img = fi >= 0.0f && fi < (float)n_images ? (int)fi : -1;
        float score = -INFINITY, b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (img >= 0) {
            // the host's softmax: max, then the sum of expf in class order, one division
            const int64_t base = r * K;
            float mx = cu_load(logits, base, lt);
            for (int q = 1; q < K; q++) {
                const float v = cu_load(logits, base + q, lt);
                mx = v > mx ? v : mx;
            }
            float sum = 0.0f;
            for (int q = 0; q < K; q++) sum = __fadd_rn(sum, expf(__fsub_rn(cu_load(logits, base + q, lt), mx)));
            const float sc = __fdiv_rn(expf(__fsub_rn(cu_load(logits, base + k, lt), mx)), sum);
            float d[4];
            for (int q = 0; q < 4; q++) d[q] = cu_load(deltas, (base + k) * 4 + q, dtd);
            mrcnn_box_decode_one(&coder, d, rois + r * 5 + 1, b);
            const float h = (float)image_hw[2 * img], w = (float)image_hw[2 * img + 1];
            b[0] = mrcnn_box_clamp(b[0], w);
            b[1] = mrcnn_box_clamp(b[1], h);
            b[2] = mrcnn_box_clamp(b[2], w);
            b[3] = mrcnn_box_clamp(b[3], h);
            if (sc > score_thresh && (b[2] - b[0]) >= min_size && (b[3] - b[1]) >= min_size) score = sc;
            else img = -1;
        }
        cs[t] = score;
        ci[t] = img;
        for (int q = 0; q < 4; q++) cb[t * 4 + q] = b[q];
    }
}

typedef cub::BlockScan<int, COMPACT_THREADS> compact_scan;
typedef cub::BlockReduce<int, COMPACT_THREADS> compact_reduce;

/* Legacy (MRCNN_DET_KERNELS=legacy). Block `img`: image img's candidates into its cap
 * slots in candidate order (so the NMS sort's index tie-break is the host's), scores of
 * unused slots -inf, n_valid[img] their number. Over cap: those scoring above T plus the
 * first ties at T, T the cap-th highest score (a 32-step radix select on the bits;
 * scores are >= 0, whose bits order as the values). */
__global__ void k_det_compact(int64_t C, int K, int cap, const float *cs, const float *cb, const int32_t *ci,
                              float *ss, float *sb, int32_t *sl, int32_t *n_valid) {
    __shared__ union {
        compact_scan::TempStorage scan;
        compact_reduce::TempStorage reduce;
    } tmp;
    __shared__ int sh_sum, sh_base, sh_tie_base;
    const int img = blockIdx.x;
    int mine = 0;
    for (int64_t t = threadIdx.x; t < C; t += COMPACT_THREADS) mine += ci[t] == img;
    int total = compact_reduce(tmp.reduce).Sum(mine);
    if (threadIdx.x == 0) sh_sum = total;
    __syncthreads();
    total = sh_sum;
    const bool over = total > cap;
    unsigned thr = 0;
    int take_ties = 0;
    if (over) {
        for (int bit = 31; bit >= 0; bit--) {
            const unsigned cand = thr | (1u << bit);
            int c = 0;
            for (int64_t t = threadIdx.x; t < C; t += COMPACT_THREADS)
                c += ci[t] == img && __float_as_uint(cs[t]) >= cand;
            __syncthreads(); // tmp and sh_sum are free again
            const int all = compact_reduce(tmp.reduce).Sum(c);
            if (threadIdx.x == 0) sh_sum = all;
            __syncthreads();
            if (sh_sum >= cap) thr = cand;
        }
        int c = 0;
        for (int64_t t = threadIdx.x; t < C; t += COMPACT_THREADS) c += ci[t] == img && __float_as_uint(cs[t]) > thr;
        __syncthreads();
        const int above = compact_reduce(tmp.reduce).Sum(c);
        if (threadIdx.x == 0) sh_sum = above;
        __syncthreads();
        take_ties = cap - sh_sum;
    }
    if (threadIdx.x == 0) sh_base = sh_tie_base = 0;
    __syncthreads();
    for (int64_t c0 = 0; c0 < C; c0 += COMPACT_THREADS) {
        const int64_t t = c0 + threadIdx.x;
        const bool v = t < C && ci[t] == img;
        const unsigned bits = v ? __float_as_uint(cs[t]) : 0u;
        const int tie = over && v && bits == thr;
        int tie_rank, tie_sum, pos, sel_sum;
        compact_scan(tmp.scan).ExclusiveSum(tie, tie_rank, tie_sum);
        __syncthreads();
        const int sel = v && (!over || bits > thr || (tie && sh_tie_base + tie_rank < take_ties));
        compact_scan(tmp.scan).ExclusiveSum(sel, pos, sel_sum);
        if (sel) {
            const int64_t o = (int64_t)img * cap + sh_base + pos;
            ss[o] = cs[t];
            for (int q = 0; q < 4; q++) sb[o * 4 + q] = cb[t * 4 + q];
            sl[o] = (int)(t % (K - 1)) + 1;
        }
        __syncthreads();
        if (threadIdx.x == 0) sh_base += sel_sum, sh_tie_base += tie_sum;
        __syncthreads();
    }
    const int n = sh_base;
    for (int q = n + threadIdx.x; q < cap; q += COMPACT_THREADS) ss[(int64_t)img * cap + q] = -INFINITY;
    if (threadIdx.x == 0) n_valid[img] = n;
}

/* The default compaction's keys, one thread per candidate t (no grid stride, so that
 * every lane reaches the vote): key (its image, or n_images when dropped, which sorts
 * after every image; its score), value t; each image's candidates counted, one atomic
 * per (warp, image). */
__global__ void k_det_keys(int64_t C, int n_images, const float *cs, const int32_t *ci, uint64_t *keys, int32_t *vals,
                           int32_t *img_count) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int img = -1;
    if (t < C) {
        const int c = ci[t];
        img = c >= 0 && c < n_images ? c : -1;
        keys[t] = det_sort_key((uint32_t)(img >= 0 ? img : n_images), cs[t]);
        vals[t] = (int32_t)t;
    }
    const unsigned peers = __match_any_sync(0xffffffffu, img);
    if (img >= 0 && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&img_count[img], __popc(peers));
}

/* Slot j of image img: rank j of the image's candidates in the sorted batch (score
 * descending, candidate order among ties), the first min(count, cap); score -inf past
 * them. The set is the legacy compaction's (above the cap-th score, then the first
 * ties), in another slot order, but the NMS's stable sort puts equal scores in slot
 * order, which here is candidate order as there: the same boxes come out. */
__global__ void k_det_take(int n_images, int cap, int K, const int32_t *img_count, const int32_t *sorted,
                           const float *cs, const float *cb, float *ss, float *sb, int32_t *sl, int32_t *n_valid) {
    CU_GRID_STRIDE(q, (int64_t)n_images * cap) {
        const int img = (int)(q / cap), j = (int)(q % cap);
        const int n = img_count[img] < cap ? img_count[img] : cap;
        if (j < n) {
            const int64_t t = sorted[det_segment_start(img_count, img) + j];
            ss[q] = cs[t];
            for (int k = 0; k < 4; k++) sb[q * 4 + k] = cb[t * 4 + k];
            sl[q] = (int)(t % (K - 1)) + 1;
        } else {
            ss[q] = -INFINITY;
        }
        if (j == 0) n_valid[img] = n;
    }
}

/* Output row t: the kept candidates of the images end to end (at most D each), padding
 * rows after (image -1, zeros, label -1); count the total. */
__global__ void k_det_gather(int n, int D, int cap, const int32_t *keep, const int32_t *kept, const float *sb,
                             const float *ss, const int32_t *sl, float *boxes, float *scores, int32_t *labels,
                             float *count) {
    CU_GRID_STRIDE(t, (int64_t)n * D) {
        int64_t j = 0, sum;
        const int img = row_image(t, n, kept, D, &j, &sum);
        float *o = boxes + t * 5;
        if (img >= 0) {
            const int64_t q = (int64_t)img * cap + keep[(int64_t)img * cap + j];
            o[0] = (float)img;
            for (int k = 0; k < 4; k++) o[1 + k] = sb[q * 4 + k];
            scores[t] = ss[q];
            labels[t] = sl[q];
        } else {
            o[0] = -1.0f;
            for (int k = 0; k < 4; k++) o[1 + k] = 0.0f;
            scores[t] = 0.0f;
            labels[t] = -1;
        }
        if (t == 0) *count = (float)sum;
    }
}

static void cu_detect_boxes(const mrcnn_backend *be, const mrcnn_detect_desc *d, const mrcnn_tensor *logits,
                            const mrcnn_tensor *deltas, const mrcnn_tensor *rois, const mrcnn_tensor *image_hw,
                            mrcnn_tensor *boxes, mrcnn_tensor *scores, mrcnn_tensor *labels, mrcnn_tensor *count) {
    cu_state *s = infer_state(be, "detect_boxes");
    MRCNN_CHECK(d && d->n_images >= 0 && d->num_classes >= 2 && d->max_detections > 0,
                "detect_boxes: %d images, %d classes (with background), %d detections", d ? d->n_images : -1,
                d ? d->num_classes : -1, d ? d->max_detections : -1);
    MRCNN_CHECK(rois && rois->ndim == 2 && rois->shape[1] == 5, "detect_boxes: rois (R, 5)");
    const int N = d->n_images, K = d->num_classes, D = d->max_detections;
    const int64_t R = rois->shape[0], ND = (int64_t)N * D, C = R * (K - 1);
    need(rois, MRCNN_DTYPE_F32, R * 5, "detect_boxes rois");
    cu_check_float(logits, "detect_boxes logits");
    cu_check_numel(logits, R * K, "detect_boxes logits");
    cu_check_float(deltas, "detect_boxes deltas");
    cu_check_numel(deltas, R * K * 4, "detect_boxes deltas");
    need(image_hw, MRCNN_DTYPE_I32, (int64_t)N * 2, "detect_boxes image_hw");
    need(boxes, MRCNN_DTYPE_F32, ND * 5, "detect_boxes boxes");
    need(scores, MRCNN_DTYPE_F32, ND, "detect_boxes scores");
    need(labels, MRCNN_DTYPE_I32, ND, "detect_boxes labels");
    need(count, MRCNN_DTYPE_F32, 1, "detect_boxes count");
    if (N == 0) {
        MRCNN_CHECK_CUDA(cudaMemsetAsync(count->data, 0, sizeof(float), s->stream));
        return;
    }
    const int cap = (int)(C < MRCNN_DETECT_MAX_CANDIDATES ? (C > 0 ? C : 1) : MRCNN_DETECT_MAX_CANDIDATES);
    const size_t nc = (size_t)N * cap;
    MRCNN_CHECK(C < 2147483647LL, "detect_boxes: %lld candidates, at most 2^31 - 1", (long long)C);
    /* the compaction's sort (and its per-image counts) and the NMS share slot 9: stream
     * order runs them apart */
    const size_t sort_bytes = C > 0 ? cu_det_sort_bytes(C, (int64_t)N + 1) + al256((size_t)N * 4) : 0;
    const size_t nms_bytes = cu_nms_work_bytes(N, cap);
    const size_t sz[10] = {al256((size_t)C * 4),     al256((size_t)C * 16), al256((size_t)C * 4),
                           al256(nc * 4),            al256(nc * 16),        al256(nc * 4),
                           al256((size_t)N * 4),     al256(nc * 4),         al256((size_t)N * 4),
                           al256(sort_bytes > nms_bytes ? sort_bytes : nms_bytes)};
    size_t total = 0;
    for (int i = 0; i < 10; i++) total += sz[i];
    char *p = (char *)cu_scratch(s, CU_SCRATCH_GEMM, total);
    void *slot[10];
    for (int i = 0; i < 10; i++) slot[i] = p, p += sz[i];
    float *cs = (float *)slot[0], *cb = (float *)slot[1], *ss = (float *)slot[3], *sb = (float *)slot[4];
    int32_t *ci = (int32_t *)slot[2], *sl = (int32_t *)slot[5], *nv = (int32_t *)slot[6], *keep = (int32_t *)slot[7];
    int32_t *kept = (int32_t *)slot[8];
    if (C > 0) {
        k_det_candidates<<<cu_blocks(C, IT), IT, 0, s->stream>>>(
            R, K, logits->data, (int)logits->dtype, deltas->data, (int)deltas->dtype, (const float *)rois->data,
            (const int32_t *)image_hw->data, N, d->coder, d->score_thresh, d->min_size, cs, cb, ci);
        MRCNN_CHECK_LAUNCH("detect_boxes candidates");
        if (cu_det_kernels_legacy()) {
            k_det_compact<<<(unsigned)N, COMPACT_THREADS, 0, s->stream>>>(C, K, cap, cs, cb, ci, ss, sb, sl, nv);
            MRCNN_CHECK_LAUNCH("detect_boxes compact");
        } else {
            int32_t *img_count = (int32_t *)slot[9];
            void *sort_work = (char *)slot[9] + al256((size_t)N * 4);
            uint64_t *keys;
            int32_t *vals;
            cu_det_sort_inputs(sort_work, C, &keys, &vals);
            MRCNN_CHECK_CUDA(cudaMemsetAsync(img_count, 0, (size_t)N * 4, s->stream));
            k_det_keys<<<(unsigned)((C + IT - 1) / IT), IT, 0, s->stream>>>(C, N, cs, ci, keys, vals, img_count);
            MRCNN_CHECK_LAUNCH("detect_boxes keys");
            const int32_t *sorted = cu_det_sort(be, sort_work, C, (int64_t)N + 1);
            k_det_take<<<cu_blocks((int64_t)nc, IT), IT, 0, s->stream>>>(N, cap, K, img_count, sorted, cs, cb, ss, sb,
                                                                          sl, nv);
            MRCNN_CHECK_LAUNCH("detect_boxes take");
        }
        cu_nms_batched(be, N, cap, sb, ss, sl, nv, d->nms_thresh, D, slot[9], keep, kept);
    } else {
        MRCNN_CHECK_CUDA(cudaMemsetAsync(kept, 0, (size_t)N * sizeof(int32_t), s->stream));
    }
    k_det_gather<<<cu_blocks(ND, IT), IT, 0, s->stream>>>(N, D, cap, keep, kept, sb, ss, sl, (float *)boxes->data,
                                                           (float *)scores->data, (int32_t *)labels->data,
                                                           (float *)count->data);
    MRCNN_CHECK_LAUNCH("detect_boxes gather");
}

/* ---- mask_probs --------------------------------------------------------------------- */

__global__ void k_mask_probs(int64_t R, int64_t mm, int K, const void *x, int dt, const int32_t *labels, float *y) {
    CU_GRID_STRIDE(t, R * mm) {
        const int64_t r = t / mm;
        const int lab = labels[r];
        y[t] = lab >= 0 && lab < K ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-cu_load(x, t * K + lab, dt)))) : 0.0f;
    }
}

static void cu_mask_probs(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                          mrcnn_tensor *y) {
    cu_state *s = infer_state(be, "mask_probs");
    MRCNN_CHECK(x && x->ndim == 4 && x->shape[1] == x->shape[2], "mask_probs: mask logits (R, M, M, K)");
    const int64_t R = x->shape[0], mm = x->shape[1] * x->shape[2];
    const int K = (int)x->shape[3];
    cu_check_float(x, "mask_probs logits");
    need(labels, MRCNN_DTYPE_I32, R, "mask_probs labels");
    need(y, MRCNN_DTYPE_F32, R * mm, "mask_probs probabilities");
    if (R * mm == 0) return;
    k_mask_probs<<<cu_blocks(R * mm, IT), IT, 0, s->stream>>>(R, mm, K, x->data, (int)x->dtype,
                                                                (const int32_t *)labels->data, (float *)y->data);
    MRCNN_CHECK_LAUNCH("mask_probs");
}

void cu_fill_infer_ops(mrcnn_backend *be) {
    be->det.proposal_rois = cu_proposal_rois;
    be->det.detect_boxes = cu_detect_boxes;
    be->det.mask_probs = cu_mask_probs;
}
