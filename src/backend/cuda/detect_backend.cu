/* The CUDA backend's detection stages (be->det, detect_ops.h): RPN targets, proposals,
 * ROI sampling and mask targets, composed from the kernels of detect_ops.cu and
 * topk.cu with the semantics of the host helpers the CPU backend runs (proposals.h,
 * roi_targets.h, torchvision v0.14).
 *
 * Nothing here waits for the device or copies device memory to the host: every buffer
 * has a fixed capacity known from the descriptors and tensor shapes, data-dependent
 * counts (gt per image, proposals per image, sampled rows) stay in device memory and
 * the kernels that need one read it there, and so do the per-image RNG streams (a device
 * tensor the host staged with the batch). So a step's detection work queues without a host round trip and can be
 * captured in a CUDA graph (after one uncaptured run has grown the scratch slot).
 *
 * Temporaries come from one scratch slot (CU_SCRATCH_GEMM), carved once per entry
 * before the first launch: the slot grows at most once per entry, and stream order
 * keeps the next op from touching it before these kernels are done. */
#include <math.h>
#include <string.h>

#include "cuda_dtype.cuh"
#include "cuda_internal.h"
#include "det_grid.h"
#include "detect_internal.h"
#include "mrcnn/box_math.h"

#define DT 256 // threads per block of the elementwise kernels here

static_assert(sizeof(mrcnn_rng) == MRCNN_RNG_WORDS * sizeof(int32_t), "mrcnn_rng is the five words of detect_ops.h");

static size_t al256(size_t b) { return (b + 255) / 256 * 256; }

/* Sizes first, then one cu_scratch call, then the same sequence of takes. */
typedef struct {
    char *base;
    size_t off;
} carve;

static void *take(carve *c, size_t bytes) {
    void *p = c->base ? c->base + c->off : NULL;
    c->off += al256(bytes ? bytes : 1);
    return p;
}

static void need(const mrcnn_tensor *t, mrcnn_dtype dt, int64_t numel, const char *what) {
    cu_check_gpu(t, what);
    MRCNN_CHECK(t->dtype == dt, "%s: dtype %d, expected %d", what, (int)t->dtype, (int)dt);
    cu_check_numel(t, numel, what);
}

static void need_float(const mrcnn_tensor *t, int64_t numel, const char *what) {
    cu_check_float(t, what);
    cu_check_numel(t, numel, what);
}

static void check_gt(const mrcnn_gt_batch *gt, int n_images, int with_masks, const char *op) {
    MRCNN_CHECK(gt && gt->n_images == n_images && gt->max_gt >= 1, "%s: gt batch of %d images (max_gt %d), expected %d",
                op, gt ? gt->n_images : -1, gt ? gt->max_gt : -1, n_images);
    const int64_t N = n_images, G = gt->max_gt;
    need(&gt->boxes, MRCNN_DTYPE_F32, N * G * 4, "gt boxes");
    need(&gt->labels, MRCNN_DTYPE_I32, N * G, "gt labels");
    need(&gt->counts, MRCNN_DTYPE_I32, N, "gt counts");
    need(&gt->image_hw, MRCNN_DTYPE_I32, N * 2, "gt image_hw");
    if (with_masks) {
        MRCNN_CHECK(gt->mask_h > 0 && gt->mask_w > 0, "%s: gt mask size %dx%d", op, gt->mask_h, gt->mask_w);
        if (gt->mask_crops.data) {
            need(&gt->mask_crops, MRCNN_DTYPE_I32, N * G * MRCNN_MASK_CROP_WORDS, "gt mask crops");
            need(&gt->mask_pool, MRCNN_DTYPE_U8, cu_numel(&gt->mask_pool), "gt mask pool");
        } else {
            need(&gt->masks, MRCNN_DTYPE_U8, N * G * gt->mask_h * gt->mask_w, "gt masks");
        }
    }
}

static __device__ __forceinline__ int clamp_count(int v, int cap) { return v < 0 ? 0 : (v > cap ? cap : v); }

/* ---- RPN targets ------------------------------------------------------------------------------ */

typedef struct {
    int n_levels;
    float *labels[CU_DET_MAX_LEVELS], *obj_w[CU_DET_MAX_LEVELS];
    float *reg_t[CU_DET_MAX_LEVELS], *reg_w[CU_DET_MAX_LEVELS];
    int64_t count[CU_DET_MAX_LEVELS], off[CU_DET_MAX_LEVELS];
} rpn_out;

/* First pass of mrcnn_rpn_assign_targets, grid (anchor blocks, image): each anchor's best
 * gt (the first maximum) and its label by the thresholds, and each gt's best IoU over
 * the anchors (gt_max as float bits: IoUs are >= +0, whose bits order as the floats do,
 * and the initial -1 loses to any of them, as the host's -1.0f does; NaN never wins, as
 * `q > mx` on the host). */
__global__ void k_rpn_match(const float *anchors, int64_t na, const float *gt_boxes, const int32_t *gt_counts, int G,
                            float fg_iou, float bg_iou, int32_t *best, int32_t *lab, int *gt_max) {
    extern __shared__ int sh_max[]; // G
    const int img = blockIdx.y;
    const int ng = clamp_count(gt_counts[img], G);
    const float *gb = gt_boxes + (int64_t)img * G * 4;
    for (int g = threadIdx.x; g < G; g += blockDim.x) sh_max[g] = -1;
    __syncthreads();
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < na; j += (int64_t)gridDim.x * blockDim.x) {
        const float *a = anchors + 4 * j;
        float v = 0.0f;
        int32_t arg = 0;
        for (int g = 0; g < ng; g++) {
            const float q = mrcnn_box_iou_pair(gb + 4 * g, a);
            if (g == 0 || q > v) { // torch.max: the first maximum
                v = q;
                arg = g;
            }
            /* -0 (a degenerate box) becomes +0, whose bits beat -1 as the host's -0 > -1.
             * The plain read first skips the atomic for the many anchors that cannot
             * raise the maximum (most IoUs are 0): a stale read only costs an atomic. */
            if (q >= 0.0f) {
                const int qb = __float_as_int(__fadd_rn(q, 0.0f));
                if (qb > *(volatile int *)&sh_max[g]) atomicMax(&sh_max[g], qb);
            }
        }
        best[(int64_t)img * na + j] = arg;
        lab[(int64_t)img * na + j] = ng == 0 ? 0 : (v < bg_iou ? 0 : (v < fg_iou ? -1 : 1));
    }
    __syncthreads();
    for (int g = threadIdx.x; g < ng; g += blockDim.x)
        if (sh_max[g] >= 0) atomicMax(&gt_max[(int64_t)img * G + g], sh_max[g]);
}

/* Second pass, grid (anchor blocks, image): the low-quality rule (an anchor tying for
 * some gt's best IoU is fg), the (1, 1, 1, 1) targets of the best gt (gt 0 for the
 * others, zeros without gt), all scattered level-major into the RPN head's layout;
 * the weights start at zero (k_rpn_weights sets the sampled ones). lab keeps -1/0/1
 * for the sampler. */
__global__ void k_rpn_finish(const float *anchors, int64_t na, const float *gt_boxes, const int32_t *gt_counts, int G,
                             const int32_t *best, int32_t *lab, const int *gt_max, mrcnn_box_coder coder,
                             rpn_out out) {
    const int img = blockIdx.y;
    const int ng = clamp_count(gt_counts[img], G);
    const float *gb = gt_boxes + (int64_t)img * G * 4;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < na; j += (int64_t)gridDim.x * blockDim.x) {
        const float *a = anchors + 4 * j;
        int32_t l = lab[(int64_t)img * na + j];
        if (l != 1)
            for (int g = 0; g < ng; g++)
                if (mrcnn_box_iou_pair(gb + 4 * g, a) == __int_as_float(gt_max[(int64_t)img * G + g])) {
                    l = 1;
                    break;
                }
        lab[(int64_t)img * na + j] = l;
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (ng > 0) mrcnn_box_encode_one(&coder, gb + 4 * (l == 1 ? best[(int64_t)img * na + j] : 0), a, t);
        int lv = 0;
        while (lv + 1 < out.n_levels && j >= out.off[lv + 1]) lv++;
        const int64_t p = (int64_t)img * out.count[lv] + (j - out.off[lv]);
        out.labels[lv][p] = l > 0 ? 1.0f : 0.0f;
        out.obj_w[lv][p] = 0.0f;
        for (int c = 0; c < 4; c++) {
            out.reg_t[lv][4 * p + c] = t[c];
            out.reg_w[lv][4 * p + c] = 0.0f;
        }
    }
}

/* Grid (sample blocks, image): weight 1 on the sampled anchors (and on the 4 deltas of
 * the sampled positives); one thread sums the batch's sampled count. */
__global__ void k_rpn_weights(const int64_t *pos, int pos_cap, const int64_t *neg, int neg_cap, const int64_t *counts,
                              int n_images, rpn_out out, float *n_sampled) {
    const int img = blockIdx.y;
    const int64_t kp = counts[2 * img], kn = counts[2 * img + 1];
    const int span = pos_cap > neg_cap ? pos_cap : neg_cap;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < span; t += gridDim.x * blockDim.x) {
        for (int side = 0; side < 2; side++) {
            if (t >= (side ? kn : kp)) continue;
            const int64_t j = side ? neg[(int64_t)img * neg_cap + t] : pos[(int64_t)img * pos_cap + t];
            int lv = 0;
            while (lv + 1 < out.n_levels && j >= out.off[lv + 1]) lv++;
            const int64_t p = (int64_t)img * out.count[lv] + (j - out.off[lv]);
            out.obj_w[lv][p] = 1.0f;
            if (!side)
                for (int c = 0; c < 4; c++) out.reg_w[lv][4 * p + c] = 1.0f;
        }
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
        int64_t s = 0;
        for (int i = 0; i < n_images; i++) s += counts[2 * i] + counts[2 * i + 1];
        *n_sampled = (float)s;
    }
}

static void cu_det_rpn_targets(const mrcnn_backend *be, const mrcnn_rpn_targets_desc *d, const mrcnn_tensor *anchors,
                               const mrcnn_gt_batch *gt, const mrcnn_tensor *rngs, mrcnn_tensor *labels,
                               mrcnn_tensor *obj_weights, mrcnn_tensor *reg_targets, mrcnn_tensor *reg_weights,
                               mrcnn_tensor *n_sampled) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(d && d->n_images > 0 && d->n_levels > 0 && d->n_levels <= MRCNN_DET_MAX_LEVELS &&
                    d->n_levels <= CU_DET_MAX_LEVELS,
                "rpn_targets: %d images, %d levels", d ? d->n_images : -1, d ? d->n_levels : -1);
    MRCNN_CHECK(d->bg_iou <= d->fg_iou, "rpn_targets: bg threshold %g above fg threshold %g", (double)d->bg_iou,
                (double)d->fg_iou);
    MRCNN_CHECK(d->batch_size_per_image >= 0 && d->positive_fraction >= 0 && d->positive_fraction <= 1,
                "rpn_targets: batch size %d, positive fraction %g", d->batch_size_per_image,
                (double)d->positive_fraction);
    MRCNN_CHECK(rngs && labels && obj_weights && reg_targets && reg_weights && n_sampled, "rpn_targets: NULL argument");
    const int N = d->n_images, G = gt ? gt->max_gt : 0;
    check_gt(gt, N, 0, "rpn_targets");
    need(rngs, MRCNN_DTYPE_I32, (int64_t)N * MRCNN_RNG_WORDS, "rpn_targets rngs");
    rpn_out out;
    memset(&out, 0, sizeof out);
    out.n_levels = d->n_levels;
    int64_t na = 0;
    for (int l = 0; l < d->n_levels; l++) {
        const int64_t c = d->level_counts[l];
        MRCNN_CHECK(c >= 0, "rpn_targets: level %d has %lld anchors", l, (long long)c);
        need(&labels[l], MRCNN_DTYPE_F32, N * c, "rpn_targets labels");
        need(&obj_weights[l], MRCNN_DTYPE_F32, N * c, "rpn_targets obj_weights");
        need(&reg_targets[l], MRCNN_DTYPE_F32, N * c * 4, "rpn_targets reg_targets");
        need(&reg_weights[l], MRCNN_DTYPE_F32, N * c * 4, "rpn_targets reg_weights");
        out.labels[l] = (float *)labels[l].data;
        out.obj_w[l] = (float *)obj_weights[l].data;
        out.reg_t[l] = (float *)reg_targets[l].data;
        out.reg_w[l] = (float *)reg_weights[l].data;
        out.count[l] = c;
        out.off[l] = na;
        na += c;
    }
    need(anchors, MRCNN_DTYPE_F32, na * 4, "rpn_targets anchors");
    need(n_sampled, MRCNN_DTYPE_F32, 1, "rpn_targets n_sampled");
    MRCNN_CHECK(na < 2147483647LL, "rpn_targets: %lld anchors per image", (long long)na);
    const int64_t want_pos = (int64_t)((double)d->batch_size_per_image * (double)d->positive_fraction);
    const int pos_cap = (int)(want_pos > 0 ? want_pos : 1), neg_cap = d->batch_size_per_image > 0 ? d->batch_size_per_image : 1;
    /* torchvision's RPN coder, as mrcnn_box_coder_make(1, 1, 1, 1) (not callable from
     * this library); encode does not use the clamp. */
    const mrcnn_box_coder rpn_coder = {1.0f, 1.0f, 1.0f, 1.0f, (float)log(1000.0 / 16.0)};
    carve c = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) c.base = (char *)cu_scratch(s, CU_SCRATCH_GEMM, c.off), c.off = 0;
        int32_t *best = (int32_t *)take(&c, (size_t)N * na * 4);
        int32_t *lab = (int32_t *)take(&c, (size_t)N * na * 4);
        int *gt_max = (int *)take(&c, (size_t)N * G * 4);
        int64_t *pos = (int64_t *)take(&c, (size_t)N * pos_cap * 8);
        int64_t *neg = (int64_t *)take(&c, (size_t)N * neg_cap * 8);
        int64_t *cnt = (int64_t *)take(&c, (size_t)N * 2 * 8);
        void *work = take(&c, cu_sample_work_bytes(N, na));
        if (!pass) continue;
        MRCNN_CHECK_CUDA(cudaMemsetAsync(gt_max, 0xff, (size_t)N * G * 4, s->stream)); // int -1 each
        if (na > 0) {
            dim3 grid(cu_blocks(na, DT) < 4096 ? cu_blocks(na, DT) : 4096, (unsigned)N);
            k_rpn_match<<<grid, DT, (size_t)G * sizeof(int), s->stream>>>((const float *)anchors->data, na,
                                                                          (const float *)gt->boxes.data,
                                                                          (const int32_t *)gt->counts.data, G,
                                                                          d->fg_iou, d->bg_iou, best, lab, gt_max);
            MRCNN_CHECK_LAUNCH("rpn_targets match");
            k_rpn_finish<<<grid, DT, 0, s->stream>>>((const float *)anchors->data, na, (const float *)gt->boxes.data,
                                                     (const int32_t *)gt->counts.data, G, best, lab, gt_max, rpn_coder, out);
            MRCNN_CHECK_LAUNCH("rpn_targets finish");
        }
        cu_sample_balanced_batched(be, N, lab, na, d->batch_size_per_image, d->positive_fraction,
                                   (const mrcnn_rng *)rngs->data, work, pos, pos_cap, neg, neg_cap, cnt);
        const int span = pos_cap > neg_cap ? pos_cap : neg_cap;
        k_rpn_weights<<<dim3(cu_blocks(span, DT), (unsigned)N), DT, 0, s->stream>>>(pos, pos_cap, neg, neg_cap, cnt, N,
                                                                                  out, (float *)n_sampled->data);
        MRCNN_CHECK_LAUNCH("rpn_targets weights");
    }
}

/* ---- proposals ---------------------------------------------------------------------------------- */

/* Grid (row blocks, image): the kept candidates in NMS order, zeros past the count. */
__global__ void k_proposals_out(const float *cand_boxes, const float *cand_scores, const int32_t *keep,
                                const int32_t *kept, int cap, int P, float *boxes, float *scores, int32_t *counts) {
    const int img = blockIdx.y;
    const int nk = clamp_count(kept[img], P);
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < P; t += gridDim.x * blockDim.x) {
        const int64_t o = (int64_t)img * P + t;
        if (t < nk) {
            const int64_t r = (int64_t)img * cap + keep[(int64_t)img * cap + t];
            for (int c = 0; c < 4; c++) boxes[4 * o + c] = cand_boxes[4 * r + c];
            if (scores) scores[o] = cand_scores[r];
        } else {
            for (int c = 0; c < 4; c++) boxes[4 * o + c] = 0.0f;
            if (scores) scores[o] = 0.0f;
        }
        if (t == 0) counts[img] = nk;
    }
}

static void cu_det_proposals(const mrcnn_backend *be, const mrcnn_proposals_desc *d, const mrcnn_tensor *logits,
                             const mrcnn_tensor *deltas, const mrcnn_tensor *anchors, const mrcnn_tensor *image_hw,
                             mrcnn_tensor *boxes, mrcnn_tensor *scores, mrcnn_tensor *counts) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(d && d->n_images > 0 && d->n_levels > 0 && d->n_levels <= MRCNN_DET_MAX_LEVELS &&
                    d->n_levels <= CU_DET_MAX_LEVELS,
                "proposals: %d images, %d levels", d ? d->n_images : -1, d ? d->n_levels : -1);
    MRCNN_CHECK(d->pre_nms_top_n > 0 && d->post_nms_top_n > 0, "proposals: pre/post NMS top-n %d/%d must be positive",
                d->pre_nms_top_n, d->post_nms_top_n);
    MRCNN_CHECK(logits && deltas && boxes && counts, "proposals: NULL argument");
    const int N = d->n_images, P = d->post_nms_top_n;
    cu_det_levels lv;
    memset(&lv, 0, sizeof lv);
    lv.n_levels = d->n_levels;
    int64_t na = 0, cap = 0;
    for (int l = 0; l < d->n_levels; l++) {
        const int64_t cnt = d->level_counts[l];
        MRCNN_CHECK(cnt >= 0, "proposals: level %d has %lld anchors", l, (long long)cnt);
        need_float(&logits[l], N * cnt, "proposals logits");
        need_float(&deltas[l], N * cnt * 4, "proposals deltas");
        lv.logits[l] = logits[l].data;
        lv.deltas[l] = deltas[l].data;
        lv.logit_dt[l] = logits[l].dtype;
        lv.delta_dt[l] = deltas[l].dtype;
        lv.count[l] = cnt;
        lv.anchor0[l] = na;
        lv.slot0[l] = (int)cap;
        lv.k[l] = (int)(cnt < d->pre_nms_top_n ? cnt : d->pre_nms_top_n);
        na += cnt;
        cap += lv.k[l];
    }
    MRCNN_CHECK(cap <= MRCNN_CUDA_NMS_MAX, "proposals: %lld candidates per image before NMS, at most %d "
                "(levels x pre-NMS top-n)", (long long)cap, MRCNN_CUDA_NMS_MAX);
    need(anchors, MRCNN_DTYPE_F32, na * 4, "proposals anchors");
    need(image_hw, MRCNN_DTYPE_I32, (int64_t)N * 2, "proposals image_hw");
    need(boxes, MRCNN_DTYPE_F32, (int64_t)N * P * 4, "proposals boxes");
    if (scores) need(scores, MRCNN_DTYPE_F32, (int64_t)N * P, "proposals scores");
    need(counts, MRCNN_DTYPE_I32, N, "proposals counts");
    const int C = (int)(cap > 0 ? cap : 1);
    carve c = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) c.base = (char *)cu_scratch(s, CU_SCRATCH_GEMM, c.off), c.off = 0;
        float *cb = (float *)take(&c, (size_t)N * C * 16);
        float *cs = (float *)take(&c, (size_t)N * C * 4);
        int32_t *cl = (int32_t *)take(&c, (size_t)N * C * 4);
        int32_t *nv = (int32_t *)take(&c, (size_t)N * 4);
        int32_t *keep = (int32_t *)take(&c, (size_t)N * C * 4);
        int32_t *kept = (int32_t *)take(&c, (size_t)N * 4);
        /* one region for the top-k's sort, then the NMS: stream order runs them apart */
        const size_t topk_bytes = cap > 0 ? cu_proposals_work_bytes(N, &lv) : 0, nms_bytes = cu_nms_work_bytes(N, C);
        void *work = take(&c, topk_bytes > nms_bytes ? topk_bytes : nms_bytes);
        if (!pass) continue;
        if (cap > 0) {
            cu_proposals_topk_decode(be, N, &lv, (const float *)anchors->data, (const int32_t *)image_hw->data,
                                     d->min_size, d->score_thresh, C, work, cb, cs, cl, nv);
            /* NMS per level (batched by level), all images in one launch of each kernel,
             * stopping at post_nms_top_n kept boxes. */
            cu_nms_batched(be, N, C, cb, cs, cl, nv, d->nms_thresh, P, work, keep, kept);
        } else {
            MRCNN_CHECK_CUDA(cudaMemsetAsync(kept, 0, (size_t)N * 4, s->stream));
        }
        k_proposals_out<<<dim3(cu_blocks(P, DT), (unsigned)N), DT, 0, s->stream>>>(
            cb, cs, keep, kept, C, P, (float *)boxes->data, scores ? (float *)scores->data : NULL,
            (int32_t *)counts->data);
        MRCNN_CHECK_LAUNCH("proposals out");
    }
}

/* ---- ROI sampling --------------------------------------------------------------------------------- */

/* Grid (candidate blocks, image): image i's candidates are its proposals (slots
 * [0, P), valid below counts[i]) then its gt boxes (slots P + [0, G), valid below its
 * gt count), torchvision's add_gt_proposals with gaps. The gaps get label -1, which the
 * sampler ignores, so the positives and negatives it sees, their order and hence the
 * Philox draws are the host's on its compact list. Matching at one threshold as
 * mrcnn_matcher_match (no low-quality rule); label = the matched gt's label, 0 below the
 * threshold. */
__global__ void k_roi_match(const float *props, const int32_t *prop_counts, int P, const float *gt_boxes,
                            const int32_t *gt_labels, const int32_t *gt_counts, int G, float thresh, int32_t *lab,
                            int32_t *match) {
    const int img = blockIdx.y, C = P + G;
    const int np = clamp_count(prop_counts[img], P), ng = clamp_count(gt_counts[img], G);
    const float *gb = gt_boxes + (int64_t)img * G * 4;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
        const int64_t o = (int64_t)img * C + j;
        const int valid = j < P ? j < np : j - P < ng;
        if (!valid) {
            lab[o] = -1;
            match[o] = -1;
            continue;
        }
        const float *box = j < P ? props + ((int64_t)img * P + j) * 4 : gb + 4 * (j - P);
        int32_t m = MRCNN_MATCH_BELOW_LOW;
        if (ng > 0) {
            float v = mrcnn_box_iou_pair(gb, box);
            int32_t arg = 0;
            for (int g = 1; g < ng; g++) {
                const float q = mrcnn_box_iou_pair(gb + 4 * g, box);
                if (q > v) {
                    v = q;
                    arg = g;
                }
            }
            m = v < thresh ? MRCNN_MATCH_BELOW_LOW : (v < thresh ? MRCNN_MATCH_BETWEEN : arg);
        }
        match[o] = m;
        lab[o] = m >= 0 ? gt_labels[(int64_t)img * G + m] : (m == MRCNN_MATCH_BELOW_LOW ? 0 : -1);
    }
}

/* Legacy (MRCNN_DET_KERNELS=legacy), one thread: each image's first output row and
 * first fg row (the exclusive prefix of its sampled counts: valid rows first, in image
 * order), and the batch's counts. */
__global__ void k_roi_prefix(const int64_t *cnt, int n_images, int32_t *off, int32_t *foff, float *n_rois,
                             float *n_fg) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int32_t r = 0, f = 0;
    for (int i = 0; i < n_images; i++) {
        off[i] = r;
        foff[i] = f;
        r += (int32_t)(cnt[2 * i] + cnt[2 * i + 1]);
        f += (int32_t)cnt[2 * i];
    }
    off[n_images] = r;
    foff[n_images] = f;
    *n_rois = (float)r;
    *n_fg = (float)f;
}

typedef struct {
    float *rois;
    int32_t *labels, *box_labels;
    float *reg_t, *reg_w, *fg_rois;
    int32_t *fg_labels, *fg_gt;
} roi_out;

/* Sampled entry t of image img (t < kp: positive t, else negative t - kp) into its row:
 * off + its rank in ascending candidate order (the host's sorted selection), and a
 * positive again as fg row foff + t. */
static __device__ __forceinline__ void roi_row_write(int img, int64_t t, const float *props, int P,
                                                     const float *gt_boxes, int G, const int32_t *lab,
                                                     const int32_t *match, const int64_t *ps, int64_t kp,
                                                     const int64_t *ns, int64_t kn, int32_t off, int32_t foff,
                                                     const mrcnn_box_coder &coder, const roi_out &out) {
    const int C = P + G;
    const float *gb = gt_boxes + (int64_t)img * G * 4;
    const int positive = t < kp;
    const int64_t a = positive ? t : t - kp;
    const int64_t cidx = positive ? ps[a] : ns[a];
    const int64_t r = off + det_roi_rank(ps, kp, ns, kn, t);
    const float *box = cidx < P ? props + ((int64_t)img * P + cidx) * 4 : gb + 4 * (cidx - P);
    const int32_t l = lab[(int64_t)img * C + cidx], m = match[(int64_t)img * C + cidx];
    out.rois[5 * r] = (float)img;
    for (int k = 0; k < 4; k++) out.rois[5 * r + 1 + k] = box[k];
    out.labels[r] = l;
    out.box_labels[r] = positive ? l : -1;
    float tg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (positive) mrcnn_box_encode_one(&coder, gb + 4 * m, box, tg);
    for (int k = 0; k < 4; k++) {
        out.reg_t[4 * r + k] = tg[k];
        out.reg_w[4 * r + k] = positive ? 1.0f : 0.0f;
    }
    if (positive) {
        const int64_t f = foff + a;
        out.fg_rois[5 * f] = (float)img;
        for (int k = 0; k < 4; k++) out.fg_rois[5 * f + 1 + k] = box[k];
        out.fg_labels[f] = l;
        out.fg_gt[f] = img * G + m;
    }
}

/* Padding rows past the batch's counts: image -1, labels -1, zero targets and weights. */
static __device__ __forceinline__ void roi_pad_row(int64_t t, const roi_out &out) {
    out.rois[5 * t] = -1.0f;
    for (int k = 0; k < 4; k++) {
        out.rois[5 * t + 1 + k] = 0.0f;
        out.reg_t[4 * t + k] = 0.0f;
        out.reg_w[4 * t + k] = 0.0f;
    }
    out.labels[t] = -1;
    out.box_labels[t] = -1;
}

static __device__ __forceinline__ void roi_pad_fg_row(int64_t t, const roi_out &out) {
    out.fg_rois[5 * t] = -1.0f;
    for (int k = 0; k < 4; k++) out.fg_rois[5 * t + 1 + k] = 0.0f;
    out.fg_labels[t] = -1;
    out.fg_gt[t] = -1;
}

/* Legacy (MRCNN_DET_KERNELS=legacy), one block per image: its sampled entries. */
__global__ void k_roi_rows(const float *props, int P, const float *gt_boxes, int G, const int32_t *lab,
                           const int32_t *match, const int64_t *pos, int pos_cap, const int64_t *neg, int neg_cap,
                           const int64_t *cnt, const int32_t *off, const int32_t *foff, mrcnn_box_coder coder,
                           roi_out out) {
    const int img = blockIdx.x;
    const int64_t kp = cnt[2 * img], kn = cnt[2 * img + 1];
    const int64_t *ps = pos + (int64_t)img * pos_cap, *ns = neg + (int64_t)img * neg_cap;
    for (int64_t t = threadIdx.x; t < kp + kn; t += blockDim.x)
        roi_row_write(img, t, props, P, gt_boxes, G, lab, match, ps, kp, ns, kn, off[img], foff[img], coder, out);
}

/* Legacy: padding rows past the batch's counts (k_roi_prefix's totals). */
__global__ void k_roi_pad(int n_rows, int n_fg_rows, const int32_t *off, const int32_t *foff, int n_images,
                          roi_out out) {
    const int r0 = off[n_images], f0 = foff[n_images];
    const int span = n_rows > n_fg_rows ? n_rows : n_fg_rows;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < span; t += gridDim.x * blockDim.x) {
        if (t >= r0 && t < n_rows) roi_pad_row(t, out);
        if (t >= f0 && t < n_fg_rows) roi_pad_fg_row(t, out);
    }
}

/* The default: one launch for the prefix, the rows and the padding, grid (slots, image)
 * with max(S, F) slots per image. Slot t of image img writes sampled entry t (kp + kn <= S
 * entries) at the image's offset (det_roi_offsets: a sum over the images before it, read
 * where needed instead of by a one-thread kernel), padding row img * S + t past the
 * batch's rows and fg padding row img * F + t past its fg rows (det_pad_row); slot
 * (0, 0) writes the batch's counts. */
__global__ void k_roi_rows_grid(const float *props, int P, const float *gt_boxes, int G, const int32_t *lab,
                                const int32_t *match, const int64_t *pos, int pos_cap, const int64_t *neg, int S,
                                int F, const int64_t *cnt, int n_images, mrcnn_box_coder coder, roi_out out,
                                float *n_rois, float *n_fg) {
    const int img = blockIdx.y;
    int32_t off, foff, rows, fg_rows;
    det_roi_offsets(cnt, img, &off, &foff);
    det_roi_offsets(cnt, n_images, &rows, &fg_rows);
    const int64_t kp = cnt[2 * img], kn = cnt[2 * img + 1];
    const int64_t *ps = pos + (int64_t)img * pos_cap, *ns = neg + (int64_t)img * S;
    const int span = S > F ? S : F;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < span; t += (int64_t)gridDim.x * blockDim.x) {
        if (t < kp + kn) roi_row_write(img, t, props, P, gt_boxes, G, lab, match, ps, kp, ns, kn, off, foff, coder, out);
        const int64_t pr = det_pad_row(img, t, S, rows), pf = det_pad_row(img, t, F, fg_rows);
        if (pr >= 0) roi_pad_row(pr, out);
        if (pf >= 0) roi_pad_fg_row(pf, out);
        if (img == 0 && t == 0) {
            *n_rois = (float)rows;
            *n_fg = (float)fg_rows;
        }
    }
}

static void cu_det_roi_sample(const mrcnn_backend *be, const mrcnn_roi_sample_desc *d, const mrcnn_tensor *proposals,
                              const mrcnn_tensor *counts, const mrcnn_gt_batch *gt, const mrcnn_tensor *rngs,
                              mrcnn_tensor *rois, mrcnn_tensor *labels, mrcnn_tensor *box_labels,
                              mrcnn_tensor *reg_targets, mrcnn_tensor *reg_weights, mrcnn_tensor *fg_rois,
                              mrcnn_tensor *fg_labels, mrcnn_tensor *fg_gt, mrcnn_tensor *n_rois, mrcnn_tensor *n_fg) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(d && d->n_images > 0 && d->prop_cap >= 0 && d->batch_size_per_image > 0 && d->max_fg > 0,
                "roi_sample: %d images, %d proposals, batch size %d, max fg %d", d ? d->n_images : -1,
                d ? d->prop_cap : -1, d ? d->batch_size_per_image : -1, d ? d->max_fg : -1);
    MRCNN_CHECK(d->positive_fraction >= 0 && d->positive_fraction <= 1, "roi_sample: positive fraction %g",
                (double)d->positive_fraction);
    MRCNN_CHECK(rngs && rois && labels && box_labels && reg_targets && reg_weights && fg_rois && fg_labels && fg_gt &&
                    n_rois && n_fg,
                "roi_sample: NULL argument");
    const int N = d->n_images, P = d->prop_cap, S = d->batch_size_per_image, F = d->max_fg;
    check_gt(gt, N, 0, "roi_sample");
    need(rngs, MRCNN_DTYPE_I32, (int64_t)N * MRCNN_RNG_WORDS, "roi_sample rngs");
    const int G = gt->max_gt, C = P + G;
    /* The host fails when an image samples more than F positives; the sampler takes at
     * most (int)(S * fraction), so a capacity at least that never overflows, and one
     * below it is refused here, before anything runs (no count is read back to decide). */
    const int64_t want_pos = (int64_t)((double)S * (double)d->positive_fraction);
    MRCNN_CHECK(want_pos <= F, "roi_sample: up to %lld sampled positives per image (batch %d x fraction %g) exceed "
                "MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE = %d", (long long)want_pos, S, (double)d->positive_fraction, F);
    need(proposals, MRCNN_DTYPE_F32, (int64_t)N * P * 4, "roi_sample proposals");
    need(counts, MRCNN_DTYPE_I32, N, "roi_sample counts");
    need(rois, MRCNN_DTYPE_F32, (int64_t)N * S * 5, "roi_sample rois");
    need(labels, MRCNN_DTYPE_I32, (int64_t)N * S, "roi_sample labels");
    need(box_labels, MRCNN_DTYPE_I32, (int64_t)N * S, "roi_sample box_labels");
    need(reg_targets, MRCNN_DTYPE_F32, (int64_t)N * S * 4, "roi_sample reg_targets");
    need(reg_weights, MRCNN_DTYPE_F32, (int64_t)N * S * 4, "roi_sample reg_weights");
    need(fg_rois, MRCNN_DTYPE_F32, (int64_t)N * F * 5, "roi_sample fg_rois");
    need(fg_labels, MRCNN_DTYPE_I32, (int64_t)N * F, "roi_sample fg_labels");
    need(fg_gt, MRCNN_DTYPE_I32, (int64_t)N * F, "roi_sample fg_gt");
    need(n_rois, MRCNN_DTYPE_F32, 1, "roi_sample n_rois");
    need(n_fg, MRCNN_DTYPE_F32, 1, "roi_sample n_fg");
    roi_out out = {(float *)rois->data,        (int32_t *)labels->data,     (int32_t *)box_labels->data,
                   (float *)reg_targets->data, (float *)reg_weights->data,  (float *)fg_rois->data,
                   (int32_t *)fg_labels->data, (int32_t *)fg_gt->data};
    const int pos_cap = (int)(want_pos > 0 ? want_pos : 1);
    carve c = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) c.base = (char *)cu_scratch(s, CU_SCRATCH_GEMM, c.off), c.off = 0;
        int32_t *lab = (int32_t *)take(&c, (size_t)N * C * 4);
        int32_t *match = (int32_t *)take(&c, (size_t)N * C * 4);
        int64_t *pos = (int64_t *)take(&c, (size_t)N * pos_cap * 8);
        int64_t *neg = (int64_t *)take(&c, (size_t)N * S * 8);
        int64_t *cnt = (int64_t *)take(&c, (size_t)N * 2 * 8);
        int32_t *off = (int32_t *)take(&c, (size_t)(N + 1) * 4);
        int32_t *foff = (int32_t *)take(&c, (size_t)(N + 1) * 4);
        void *work = take(&c, cu_sample_work_bytes(N, C));
        if (!pass) continue;
        k_roi_match<<<dim3(cu_blocks(C, DT), (unsigned)N), DT, 0, s->stream>>>(
            (const float *)proposals->data, (const int32_t *)counts->data, P, (const float *)gt->boxes.data,
            (const int32_t *)gt->labels.data, (const int32_t *)gt->counts.data, G, d->iou_thresh, lab, match);
        MRCNN_CHECK_LAUNCH("roi_sample match");
        cu_sample_balanced_batched(be, N, lab, C, S, d->positive_fraction, (const mrcnn_rng *)rngs->data, work, pos,
                                   pos_cap, neg, S, cnt);
        if (!cu_det_kernels_legacy()) {
            const int span = S > F ? S : F;
            k_roi_rows_grid<<<dim3(cu_blocks(span, DT), (unsigned)N), DT, 0, s->stream>>>(
                (const float *)proposals->data, P, (const float *)gt->boxes.data, G, lab, match, pos, pos_cap, neg, S,
                F, cnt, N, d->coder, out, (float *)n_rois->data, (float *)n_fg->data);
            MRCNN_CHECK_LAUNCH("roi_sample rows");
            continue;
        }
        k_roi_prefix<<<1, 1, 0, s->stream>>>(cnt, N, off, foff, (float *)n_rois->data, (float *)n_fg->data);
        MRCNN_CHECK_LAUNCH("roi_sample prefix");
        k_roi_rows<<<(unsigned)N, DT, 0, s->stream>>>((const float *)proposals->data, P,
                                                      (const float *)gt->boxes.data, G, lab, match, pos, pos_cap, neg,
                                                      S, cnt, off, foff, d->coder, out);
        MRCNN_CHECK_LAUNCH("roi_sample rows");
        const int span = N * S > N * F ? N * S : N * F;
        k_roi_pad<<<cu_blocks(span, DT), DT, 0, s->stream>>>(N * S, N * F, off, foff, N, out);
        MRCNN_CHECK_LAUNCH("roi_sample padding");
    }
}

/* ---- mask targets ------------------------------------------------------------------------------------ */

/* The mask of gt g (image * G + j) as a crop (box_math.h): the staged batch's compact
 * crop, or, for full-size masks, the image's h x w region at row stride W, so that one
 * sampling routine, the host's, serves both. */
static __device__ mrcnn_mask_crop mask_crop_of(const int32_t *crops, int g, int H, int W, int h, int w) {
    if (crops) return mrcnn_mask_crop_load(crops + (int64_t)g * MRCNN_MASK_CROP_WORDS);
    mrcnn_mask_crop c;
    c.offset = (int64_t)g * H * W;
    c.y0 = 0;
    c.x0 = 0;
    c.h = h;
    c.w = w;
    c.stride = W;
    return c;
}

/* masks: the pool of the crops, or the (N, G, H, W) full masks when crops is NULL. */
__global__ void k_det_mask_targets(const uint8_t *masks, const int32_t *crops, int n_gt_total, int G, int H, int W,
                                   const int32_t *image_hw, const float *fg_rois, const int32_t *fg_gt, int rows, int m,
                                   float *targets, float *weights) {
    const int64_t mm = (int64_t)m * m, total = (int64_t)rows * mm;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int r = (int)(t / mm), ph = (int)(t % mm / m), pw = (int)(t % m);
        const int g = fg_gt[r];
        if (g < 0 || g >= n_gt_total) { // a padding row
            targets[t] = 0.0f;
            if (weights) weights[t] = 0.0f;
            continue;
        }
        const int img = g / G;
        int h = image_hw[2 * img], w = image_hw[2 * img + 1];
        h = h < H ? h : H;
        w = w < W ? w : W;
        mrcnn_roi_frame f; // a box that cannot be sampled gets zeros, as on the host
        if (h > 0 && w > 0 && mrcnn_roi_frame_make(fg_rois + 5 * (int64_t)r + 1, 1.0f, 0, m, m, 0, &f)) {
            const mrcnn_mask_crop c = mask_crop_of(crops, g, H, W, h, w);
            targets[t] = mrcnn_mask_crop_roi_bin(masks, &c, h, w, &f, ph, pw);
        } else {
            targets[t] = 0.0f;
        }
        if (weights) weights[t] = 1.0f;
    }
}

static void cu_det_mask_targets(const mrcnn_backend *be, const mrcnn_gt_batch *gt, const mrcnn_tensor *fg_rois,
                                const mrcnn_tensor *fg_gt, int m, mrcnn_tensor *targets, mrcnn_tensor *weights) {
    cu_state *s = cu_st(be);
    MRCNN_CHECK(gt && fg_rois && fg_gt && targets && m > 0, "mask_targets: NULL argument or size %d", m);
    check_gt(gt, gt->n_images, 1, "mask_targets");
    cu_check_gpu(fg_gt, "mask_targets fg_gt");
    const int64_t rows = cu_numel(fg_gt);
    need(fg_gt, MRCNN_DTYPE_I32, rows, "mask_targets fg_gt");
    need(fg_rois, MRCNN_DTYPE_F32, rows * 5, "mask_targets fg_rois");
    need(targets, MRCNN_DTYPE_F32, rows * m * m, "mask_targets targets");
    if (weights) need(weights, MRCNN_DTYPE_F32, rows * m * m, "mask_targets weights"); // optional, as on the CPU
    if (rows == 0) return;
    const int64_t total = rows * m * m;
    const bool compact = gt->mask_crops.data != NULL;
    k_det_mask_targets<<<cu_blocks(total, DT), DT, 0, s->stream>>>(
        (const uint8_t *)(compact ? gt->mask_pool.data : gt->masks.data), (const int32_t *)gt->mask_crops.data,
        gt->n_images * gt->max_gt, gt->max_gt, gt->mask_h, gt->mask_w,
        (const int32_t *)gt->image_hw.data, (const float *)fg_rois->data, (const int32_t *)fg_gt->data, (int)rows, m,
        (float *)targets->data, weights ? (float *)weights->data : NULL);
    MRCNN_CHECK_LAUNCH("mask_targets");
}

/* The device's counts stay there: the model runs the full capacity (detect_ops.h). */
static int64_t cu_det_count_hint(const mrcnn_backend *be, const mrcnn_tensor *count) { return -1; }

void cu_fill_detect_ops(mrcnn_backend *be) {
    be->det.rpn_targets = cu_det_rpn_targets;
    be->det.proposals = cu_det_proposals;
    be->det.roi_sample = cu_det_roi_sample;
    be->det.mask_targets = cu_det_mask_targets;
    be->det.count_hint = cu_det_count_hint;
}
