/* The CPU backend's detection ops (detect_ops.h) over the host helpers of proposals.h and
 * roi_targets.h. The CPU backend's memory is the host's, so the ops read and write the
 * tensors directly: nothing goes through be->mem.read, and a CPU training step shows the
 * round trips (none) that the same step costs on a GPU. The results are the host
 * helpers' exactly, in the layouts the model used to build on the host. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/proposals.h"
#include "mrcnn/roi_targets.h"

static void check_host(const mrcnn_tensor *t, mrcnn_dtype dt, int64_t numel, const char *op, const char *what) {
    MRCNN_CHECK(t != NULL && t->device == MRCNN_DEVICE_CPU, "%s: %s must be a host tensor", op, what);
    MRCNN_CHECK(t->dtype == dt, "%s: %s is %s, expected %s", op, what, mrcnn_dtype_name(t->dtype),
                mrcnn_dtype_name(dt));
    MRCNN_CHECK(mrcnn_tensor_numel(t) == numel, "%s: %s has %lld elements, expected %lld", op, what,
                (long long)mrcnn_tensor_numel(t), (long long)numel);
    MRCNN_CHECK(numel == 0 || t->data != NULL, "%s: %s has no data", op, what);
}

/* x as fp32: the tensor's own memory when it is fp32, else a converted copy in *own
 * (the head outputs may be in the storage dtype). */
static const float *as_f32(const mrcnn_tensor *x, float **own, const char *op) {
    *own = NULL;
    MRCNN_CHECK(x->device == MRCNN_DEVICE_CPU, "%s: host tensors expected", op);
    if (x->dtype == MRCNN_DTYPE_F32) return (const float *)x->data;
    MRCNN_CHECK(x->dtype == MRCNN_DTYPE_F16 || x->dtype == MRCNN_DTYPE_BF16, "%s: dtype %s is not a float dtype",
                op, mrcnn_dtype_name(x->dtype));
    int64_t n = mrcnn_tensor_numel(x);
    float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), "fp32 copy");
    const uint16_t *s = (const uint16_t *)x->data;
    for (int64_t i = 0; i < n; i++)
        h[i] = x->dtype == MRCNN_DTYPE_F16 ? mrcnn_f16_to_f32(s[i]) : mrcnn_bf16_to_f32(s[i]);
    *own = h;
    return h;
}

static void check_gt(const mrcnn_gt_batch *gt, int n_images, const char *op) {
    MRCNN_CHECK(gt != NULL && gt->n_images == n_images && gt->max_gt >= 1, "%s: ground truth of %d images, expected %d",
                op, gt ? gt->n_images : -1, n_images);
    int64_t N = n_images, G = gt->max_gt;
    check_host(&gt->boxes, MRCNN_DTYPE_F32, N * G * 4, op, "gt boxes");
    check_host(&gt->labels, MRCNN_DTYPE_I32, N * G, op, "gt labels");
    check_host(&gt->counts, MRCNN_DTYPE_I32, N, op, "gt counts");
    check_host(&gt->image_hw, MRCNN_DTYPE_I32, N * 2, op, "image sizes");
    const int32_t *cnt = (const int32_t *)gt->counts.data;
    for (int i = 0; i < n_images; i++)
        MRCNN_CHECK(cnt[i] >= 0 && cnt[i] <= gt->max_gt, "%s: image %d has %d gt, capacity %d", op, i, cnt[i],
                    gt->max_gt);
}

/* Image i's stream of an (N, MRCNN_RNG_WORDS) int32 host tensor: the struct's bytes. */
_Static_assert(sizeof(mrcnn_rng) == MRCNN_RNG_WORDS * sizeof(int32_t), "mrcnn_rng is the five words of detect_ops.h");
static mrcnn_rng rng_row(const mrcnn_tensor *rngs, int i) {
    mrcnn_rng r;
    memcpy(&r, (const int32_t *)rngs->data + (size_t)i * MRCNN_RNG_WORDS, sizeof r);
    return r;
}

static void cpu_rpn_targets(const mrcnn_backend *be, const mrcnn_rpn_targets_desc *d, const mrcnn_tensor *anchors,
                            const mrcnn_gt_batch *gt, const mrcnn_tensor *rngs, mrcnn_tensor *labels,
                            mrcnn_tensor *obj_weights, mrcnn_tensor *reg_targets, mrcnn_tensor *reg_weights,
                            mrcnn_tensor *n_sampled) {
    const char *op = "rpn_targets";
    MRCNN_CHECK(d->n_levels >= 1 && d->n_levels <= MRCNN_DET_MAX_LEVELS, "%s: %d levels", op, d->n_levels);
    int N = d->n_images, L = d->n_levels;
    int64_t nA = 0;
    for (int l = 0; l < L; l++) nA += d->level_counts[l];
    check_host(anchors, MRCNN_DTYPE_F32, nA * 4, op, "anchors");
    check_gt(gt, N, op);
    check_host(rngs, MRCNN_DTYPE_I32, (int64_t)N * MRCNN_RNG_WORDS, op, "rng streams");
    for (int l = 0; l < L; l++) {
        int64_t c = d->level_counts[l];
        check_host(&labels[l], MRCNN_DTYPE_F32, N * c, op, "labels");
        check_host(&obj_weights[l], MRCNN_DTYPE_F32, N * c, op, "objectness weights");
        check_host(&reg_targets[l], MRCNN_DTYPE_F32, N * c * 4, op, "regression targets");
        check_host(&reg_weights[l], MRCNN_DTYPE_F32, N * c * 4, op, "regression weights");
    }
    check_host(n_sampled, MRCNN_DTYPE_F32, 1, op, "sampled count");
    float *lab = MRCNN_MALLOC((size_t)nA * sizeof(float), "rpn labels");
    float *reg = MRCNN_MALLOC((size_t)nA * 4 * sizeof(float), "rpn targets");
    float *ow = MRCNN_MALLOC((size_t)nA * sizeof(float), "rpn obj weights");
    float *bw = MRCNN_MALLOC((size_t)nA * 4 * sizeof(float), "rpn box weights");
    const int32_t *cnt = (const int32_t *)gt->counts.data;
    double sampled = 0;
    for (int i = 0; i < N; i++) {
        memset(ow, 0, (size_t)nA * sizeof(float));
        memset(bw, 0, (size_t)nA * 4 * sizeof(float));
        mrcnn_rpn_assign_targets((const float *)anchors->data, nA,
                                 (const float *)gt->boxes.data + (size_t)i * gt->max_gt * 4, cnt[i], d->fg_iou,
                                 d->bg_iou, lab, reg);
        mrcnn_rng rng = rng_row(rngs, i);
        sampled += (double)mrcnn_rpn_sample(lab, nA, d->batch_size_per_image, d->positive_fraction, &rng, ow, bw);
        // the image-major anchors (all levels) regrouped level-major, as the head's NHWC outputs
        int64_t off = 0;
        for (int l = 0; l < L; l++) {
            int64_t c = d->level_counts[l];
            float *tl = (float *)labels[l].data + i * c, *wl = (float *)obj_weights[l].data + i * c;
            for (int64_t j = 0; j < c; j++) tl[j] = lab[off + j] > 0 ? 1.0f : 0.0f;
            memcpy(wl, ow + off, (size_t)c * sizeof(float));
            memcpy((float *)reg_targets[l].data + i * c * 4, reg + off * 4, (size_t)c * 4 * sizeof(float));
            memcpy((float *)reg_weights[l].data + i * c * 4, bw + off * 4, (size_t)c * 4 * sizeof(float));
            off += c;
        }
    }
    ((float *)n_sampled->data)[0] = (float)sampled;
    free(lab);
    free(reg);
    free(ow);
    free(bw);
}

static void cpu_proposals(const mrcnn_backend *be, const mrcnn_proposals_desc *d, const mrcnn_tensor *logits,
                          const mrcnn_tensor *deltas, const mrcnn_tensor *anchors, const mrcnn_tensor *image_hw,
                          mrcnn_tensor *boxes, mrcnn_tensor *scores, mrcnn_tensor *counts) {
    const char *op = "proposals";
    MRCNN_CHECK(d->n_levels >= 1 && d->n_levels <= MRCNN_DET_MAX_LEVELS, "%s: %d levels", op, d->n_levels);
    int N = d->n_images, L = d->n_levels, P = d->post_nms_top_n;
    int64_t nA = 0;
    for (int l = 0; l < L; l++) {
        nA += d->level_counts[l];
        MRCNN_CHECK(mrcnn_tensor_numel(&logits[l]) == N * d->level_counts[l] &&
                        mrcnn_tensor_numel(&deltas[l]) == N * d->level_counts[l] * 4,
                    "%s: level %d has %lld logits and %lld deltas for %lld anchors per image", op, l,
                    (long long)mrcnn_tensor_numel(&logits[l]), (long long)mrcnn_tensor_numel(&deltas[l]),
                    (long long)d->level_counts[l]);
    }
    check_host(anchors, MRCNN_DTYPE_F32, nA * 4, op, "anchors");
    check_host(image_hw, MRCNN_DTYPE_I32, (int64_t)N * 2, op, "image sizes");
    check_host(boxes, MRCNN_DTYPE_F32, (int64_t)N * P * 4, op, "boxes");
    if (scores) check_host(scores, MRCNN_DTYPE_F32, (int64_t)N * P, op, "scores");
    check_host(counts, MRCNN_DTYPE_I32, N, op, "counts");
    const float *obj[MRCNN_DET_MAX_LEVELS], *del[MRCNN_DET_MAX_LEVELS];
    float *own[2 * MRCNN_DET_MAX_LEVELS];
    for (int l = 0; l < L; l++) {
        obj[l] = as_f32(&logits[l], &own[2 * l], op);
        del[l] = as_f32(&deltas[l], &own[2 * l + 1], op);
    }
    mrcnn_proposal_params pp = {.pre_nms_top_n = d->pre_nms_top_n,
                                .post_nms_top_n = P,
                                .nms_thresh = d->nms_thresh,
                                .min_size = d->min_size,
                                .score_thresh = d->score_thresh};
    int64_t *c64 = MRCNN_MALLOC((size_t)N * sizeof(int64_t), "proposal counts");
    mrcnn_rpn_proposals(&pp, N, L, d->level_counts, obj, del, (const float *)anchors->data,
                        (const int *)image_hw->data, (float *)boxes->data, scores ? (float *)scores->data : NULL, c64);
    for (int i = 0; i < N; i++) ((int32_t *)counts->data)[i] = (int32_t)c64[i];
    free(c64);
    for (int l = 0; l < 2 * L; l++) free(own[l]);
}

static void cpu_roi_sample(const mrcnn_backend *be, const mrcnn_roi_sample_desc *d, const mrcnn_tensor *proposals,
                           const mrcnn_tensor *counts, const mrcnn_gt_batch *gt, const mrcnn_tensor *rngs,
                           mrcnn_tensor *rois, mrcnn_tensor *labels, mrcnn_tensor *box_labels,
                           mrcnn_tensor *reg_targets, mrcnn_tensor *reg_weights, mrcnn_tensor *fg_rois,
                           mrcnn_tensor *fg_labels, mrcnn_tensor *fg_gt, mrcnn_tensor *n_rois, mrcnn_tensor *n_fg) {
    const char *op = "roi_sample";
    int N = d->n_images, P = d->prop_cap, S = d->batch_size_per_image, F = d->max_fg, G;
    check_gt(gt, N, op);
    G = gt->max_gt;
    check_host(rngs, MRCNN_DTYPE_I32, (int64_t)N * MRCNN_RNG_WORDS, op, "rng streams");
    check_host(proposals, MRCNN_DTYPE_F32, (int64_t)N * P * 4, op, "proposals");
    check_host(counts, MRCNN_DTYPE_I32, N, op, "proposal counts");
    int64_t NS = (int64_t)N * S, NF = (int64_t)N * F;
    check_host(rois, MRCNN_DTYPE_F32, NS * 5, op, "rois");
    check_host(labels, MRCNN_DTYPE_I32, NS, op, "labels");
    check_host(box_labels, MRCNN_DTYPE_I32, NS, op, "box labels");
    check_host(reg_targets, MRCNN_DTYPE_F32, NS * 4, op, "regression targets");
    check_host(reg_weights, MRCNN_DTYPE_F32, NS * 4, op, "regression weights");
    check_host(fg_rois, MRCNN_DTYPE_F32, NF * 5, op, "fg rois");
    check_host(fg_labels, MRCNN_DTYPE_I32, NF, op, "fg labels");
    check_host(fg_gt, MRCNN_DTYPE_I32, NF, op, "fg gt");
    check_host(n_rois, MRCNN_DTYPE_F32, 1, op, "roi count");
    check_host(n_fg, MRCNN_DTYPE_F32, 1, op, "fg count");
    mrcnn_roi_sample_params sp = {.batch_size_per_image = S,
                                  .positive_fraction = d->positive_fraction,
                                  .iou_thresh = d->iou_thresh,
                                  .max_fg = F,
                                  .coder = d->coder};
    float *rb = MRCNN_MALLOC((size_t)S * 4 * sizeof(float), "sampled rois");
    int32_t *lb = MRCNN_MALLOC((size_t)S * sizeof(int32_t), "roi labels");
    int32_t *mt = MRCNN_MALLOC((size_t)S * sizeof(int32_t), "roi matches");
    float *rt = MRCNN_MALLOC((size_t)S * 4 * sizeof(float), "roi targets");
    int32_t *fi = MRCNN_MALLOC((size_t)(F ? F : 1) * sizeof(int32_t), "fg index");
    float *o_rois = (float *)rois->data, *o_rt = (float *)reg_targets->data, *o_rw = (float *)reg_weights->data;
    int32_t *o_lab = (int32_t *)labels->data, *o_bl = (int32_t *)box_labels->data;
    float *o_fr = (float *)fg_rois->data;
    int32_t *o_fl = (int32_t *)fg_labels->data, *o_fg = (int32_t *)fg_gt->data;
    const int32_t *pc = (const int32_t *)counts->data, *gc = (const int32_t *)gt->counts.data;
    int64_t R = 0, Rf = 0;
    for (int i = 0; i < N; i++) {
        MRCNN_CHECK(pc[i] >= 0 && pc[i] <= P, "%s: image %d has %d proposals, capacity %d", op, i, pc[i], P);
        mrcnn_rng rng = rng_row(rngs, i);
        int nf = 0;
        int cnt = mrcnn_roi_sample(&sp, (const float *)proposals->data + (size_t)i * P * 4, pc[i],
                                   (const float *)gt->boxes.data + (size_t)i * G * 4,
                                   (const int32_t *)gt->labels.data + (size_t)i * G, gc[i], &rng, rb, lb, mt, rt, fi,
                                   &nf);
        for (int j = 0; j < cnt; j++, R++) {
            o_rois[R * 5] = (float)i;
            memcpy(o_rois + R * 5 + 1, rb + j * 4, 4 * sizeof(float));
            o_lab[R] = lb[j];
            o_bl[R] = lb[j] > 0 ? lb[j] : -1;
            memcpy(o_rt + R * 4, rt + j * 4, 4 * sizeof(float));
            float w = lb[j] > 0 ? 1.0f : 0.0f;
            o_rw[R * 4] = o_rw[R * 4 + 1] = o_rw[R * 4 + 2] = o_rw[R * 4 + 3] = w;
        }
        for (int j = 0; j < nf; j++, Rf++) {
            int r = fi[j];
            o_fr[Rf * 5] = (float)i;
            memcpy(o_fr + Rf * 5 + 1, rb + r * 4, 4 * sizeof(float));
            o_fl[Rf] = lb[r];
            o_fg[Rf] = i * G + mt[r];
        }
    }
    // padding rows: image -1 (ROIAlign zeros, no gradient), label -1 (skipped), weight 0
    for (int64_t r = R; r < NS; r++) {
        o_rois[r * 5] = -1.0f;
        memset(o_rois + r * 5 + 1, 0, 4 * sizeof(float));
        o_lab[r] = o_bl[r] = -1;
        memset(o_rt + r * 4, 0, 4 * sizeof(float));
        memset(o_rw + r * 4, 0, 4 * sizeof(float));
    }
    for (int64_t r = Rf; r < NF; r++) {
        o_fr[r * 5] = -1.0f;
        memset(o_fr + r * 5 + 1, 0, 4 * sizeof(float));
        o_fl[r] = o_fg[r] = -1;
    }
    ((float *)n_rois->data)[0] = (float)R;
    ((float *)n_fg->data)[0] = (float)Rf;
    free(rb);
    free(lb);
    free(mt);
    free(rt);
    free(fi);
}

static void cpu_mask_targets(const mrcnn_backend *be, const mrcnn_gt_batch *gt, const mrcnn_tensor *fg_rois,
                             const mrcnn_tensor *fg_gt, int m, mrcnn_tensor *targets, mrcnn_tensor *weights) {
    const char *op = "mask_targets";
    MRCNN_CHECK(gt != NULL && m > 0, "%s: no ground truth or mask size %d", op, m);
    check_gt(gt, gt->n_images, op);
    int64_t rows = fg_rois->ndim >= 1 ? fg_rois->shape[0] : 0, mm = (int64_t)m * m;
    int N = gt->n_images, G = gt->max_gt, H = gt->mask_h, W = gt->mask_w;
    check_host(fg_rois, MRCNN_DTYPE_F32, rows * 5, op, "fg rois");
    check_host(fg_gt, MRCNN_DTYPE_I32, rows, op, "fg gt");
    check_host(targets, MRCNN_DTYPE_F32, rows * mm, op, "targets");
    if (weights) check_host(weights, MRCNN_DTYPE_F32, rows * mm, op, "weights");
    const float *fr = (const float *)fg_rois->data;
    const int32_t *fg = (const int32_t *)fg_gt->data, *hw = (const int32_t *)gt->image_hw.data;
    const int32_t *gc = (const int32_t *)gt->counts.data;
    float *tg = (float *)targets->data, *wt = weights ? (float *)weights->data : NULL;
    bool any = false;
    for (int64_t r = 0; r < rows; r++) any |= fg[r] >= 0;
    const bool compact = gt->mask_crops.data != NULL;
    if (any && compact) {
        check_host(&gt->mask_crops, MRCNN_DTYPE_I32, (int64_t)N * G * MRCNN_MASK_CROP_WORDS, op, "gt mask crops");
        MRCNN_CHECK(gt->mask_pool.data && gt->mask_pool.dtype == MRCNN_DTYPE_U8 &&
                        gt->mask_pool.device == MRCNN_DEVICE_CPU,
                    "%s: compact masks without a uint8 host pool", op);
    } else if (any) {
        check_host(&gt->masks, MRCNN_DTYPE_U8, (int64_t)N * G * H * W, op, "gt masks");
    }
    float *box = MRCNN_MALLOC((size_t)(rows ? rows : 1) * 4 * sizeof(float), "mask boxes");
    int32_t *idx = MRCNN_MALLOC((size_t)(rows ? rows : 1) * sizeof(int32_t), "mask gt index");
    uint8_t *dense = NULL;
    for (int64_t r0 = 0; r0 < rows;) {
        if (fg[r0] < 0) {
            memset(tg + r0 * mm, 0, (size_t)mm * sizeof(float));
            if (wt) memset(wt + r0 * mm, 0, (size_t)mm * sizeof(float));
            r0++;
            continue;
        }
        // one call per run of rows of the same image, over that image's masks alone
        int i = fg[r0] / G;
        int64_t r1 = r0;
        while (r1 < rows && fg[r1] >= 0 && fg[r1] / G == i) {
            memcpy(box + (r1 - r0) * 4, fr + r1 * 5 + 1, 4 * sizeof(float));
            idx[r1 - r0] = fg[r1] - i * G;
            r1++;
        }
        MRCNN_CHECK(i >= 0 && i < N, "%s: row %lld matched gt %d outside %d images x %d", op, (long long)r0, fg[r0],
                    N, G);
        int h = hw[2 * i], w = hw[2 * i + 1];
        MRCNN_CHECK(h > 0 && w > 0 && h <= H && w <= W, "%s: image %d is %dx%d, masks are %dx%d", op, i, h, w, H, W);
        if (compact) {
            mrcnn_mask_targets_cropped((const uint8_t *)gt->mask_pool.data, mrcnn_tensor_numel(&gt->mask_pool),
                                       (const int32_t *)gt->mask_crops.data + (size_t)i * G * MRCNN_MASK_CROP_WORDS,
                                       gc[i], h, w, box, idx, (int)(r1 - r0), m, tg + r0 * mm);
            if (wt)
                for (int64_t k = r0 * mm; k < r1 * mm; k++) wt[k] = 1.0f;
            r0 = r1;
            continue;
        }
        const uint8_t *src = (const uint8_t *)gt->masks.data + (size_t)i * G * H * W;
        const uint8_t *mk = src;
        if (h != H || w != W) {
            // the helper takes (n_gt, h, w) dense masks; the batch's rows have stride W
            if (!dense) dense = MRCNN_MALLOC((size_t)G * H * W, "dense masks");
            for (int g = 0; g < gc[i]; g++)
                for (int y = 0; y < h; y++)
                    memcpy(dense + ((size_t)g * h + y) * w, src + ((size_t)g * H + y) * W, (size_t)w);
            mk = dense;
        }
        mrcnn_mask_targets(mk, gc[i], h, w, box, idx, (int)(r1 - r0), m, tg + r0 * mm);
        if (wt)
            for (int64_t k = r0 * mm; k < r1 * mm; k++) wt[k] = 1.0f;
        r0 = r1;
    }
    free(dense);
    free(box);
    free(idx);
}

static int64_t cpu_count_hint(const mrcnn_backend *be, const mrcnn_tensor *count) {
    MRCNN_CHECK(count != NULL && count->device == MRCNN_DEVICE_CPU && count->dtype == MRCNN_DTYPE_F32 &&
                    mrcnn_tensor_numel(count) == 1,
                "count_hint: a 1-element fp32 host tensor expected");
    return (int64_t)((const float *)count->data)[0];
}

void mrcnn_cpu_fill_detect_ops(mrcnn_backend *be) {
    be->det.rpn_targets = cpu_rpn_targets;
    be->det.proposals = cpu_proposals;
    be->det.roi_sample = cpu_roi_sample;
    be->det.mask_targets = cpu_mask_targets;
    be->det.count_hint = cpu_count_hint;
}
