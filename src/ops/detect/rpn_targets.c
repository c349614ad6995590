/* RPN training targets (assign_targets_to_anchors + encode) and the sampled-anchor
 * weights that turn torchvision's index-based losses into dense weighted sums.
 *
 * The matching is torchvision's Matcher (IoU, thresholds, low-quality matches) fused
 * over the anchors without the (gt, anchors) IoU matrix: one pass finds each anchor's
 * best gt and each gt's best IoU, a second recomputes the IoUs (bitwise the same, one
 * function) to find the anchors that tie for some gt's best. Memory stays O(anchors)
 * instead of O(gt x anchors), which also is the shape a GPU kernel wants. */
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/proposals.h"

/* box_iou's IoU of one pair (box_math.h); never inlined, so that both passes surely
 * compute identical values and the equality test of the low-quality rule is exact. */
__attribute__((noinline)) static float iou_pair(const float *p, const float *q) { return mrcnn_box_iou_pair(p, q); }

void mrcnn_rpn_assign_targets(const float *anchors, int64_t n_anchors, const float *gt_boxes, int n_gt,
                              float fg_iou, float bg_iou, float *labels, float *reg_targets) {
    MRCNN_CHECK(n_anchors >= 0 && n_gt >= 0, "rpn_assign_targets: negative count (%lld anchors, %d gt)",
                (long long)n_anchors, n_gt);
    MRCNN_CHECK(n_anchors == 0 || (anchors && labels && reg_targets), "rpn_assign_targets: NULL argument");
    MRCNN_CHECK(bg_iou <= fg_iou, "rpn_assign_targets: bg threshold %g above fg threshold %g", (double)bg_iou,
                (double)fg_iou);
    if (n_gt == 0) {
        /* Background image: all negatives; zero targets (never used, and finite). */
        for (int64_t i = 0; i < n_anchors; i++) labels[i] = 0.0f;
        if (n_anchors) memset(reg_targets, 0, (size_t)n_anchors * 4 * sizeof(float));
        return;
    }
    MRCNN_CHECK(gt_boxes, "rpn_assign_targets: NULL gt_boxes");
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    /* Per-thread maxima of each gt's IoU, combined after the pass (max is exact, so
     * the result does not depend on the thread count). */
    float *gt_max = MRCNN_MALLOC((size_t)threads * n_gt * sizeof(float), "rpn gt best iou");
    int32_t *best = MRCNN_MALLOC((size_t)(n_anchors ? n_anchors : 1) * sizeof(int32_t), "rpn best gt");
    for (int64_t k = 0; k < (int64_t)threads * n_gt; k++) gt_max[k] = -1.0f;
#pragma omp parallel
    {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        float *mx = gt_max + (int64_t)t * n_gt;
#pragma omp for schedule(static)
        for (int64_t j = 0; j < n_anchors; j++) {
            const float *a = anchors + 4 * j;
            float v = 0;
            int32_t arg = 0;
            for (int g = 0; g < n_gt; g++) {
                float q = iou_pair(gt_boxes + 4 * g, a);
                if (g == 0 || q > v) { // torch.max: the first maximum
                    v = q;
                    arg = g;
                }
                if (q > mx[g]) mx[g] = q;
            }
            best[j] = arg;
            labels[j] = v < bg_iou ? 0.0f : (v < fg_iou ? -1.0f : 1.0f);
        }
    }
    for (int t = 1; t < threads; t++)
        for (int g = 0; g < n_gt; g++)
            if (gt_max[(int64_t)t * n_gt + g] > gt_max[g]) gt_max[g] = gt_max[(int64_t)t * n_gt + g];
    const mrcnn_box_coder coder = mrcnn_box_coder_make(1.0f, 1.0f, 1.0f, 1.0f);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n_anchors; j++) {
        const float *a = anchors + 4 * j;
        /* set_low_quality_matches_: an anchor tying for some gt's best IoU gets its
         * best gt back, whatever its IoU. */
        if (labels[j] != 1.0f)
            for (int g = 0; g < n_gt; g++)
                if (iou_pair(gt_boxes + 4 * g, a) == gt_max[g]) {
                    labels[j] = 1.0f;
                    break;
                }
        /* Targets of the best gt for every anchor (torchvision encodes gt 0 for the
         * unmatched; no loss reads those rows). */
        mrcnn_box_encode(&coder, 1, gt_boxes + 4 * (labels[j] == 1.0f ? best[j] : 0), a, reg_targets + 4 * j);
    }
    free(gt_max);
    free(best);
}

int64_t mrcnn_rpn_sample(const float *labels, int64_t n_anchors, int batch_size, float positive_fraction,
                         const mrcnn_rng *rng, float *obj_weight, float *box_weight) {
    MRCNN_CHECK(n_anchors >= 0, "rpn_sample: negative anchor count %lld", (long long)n_anchors);
    MRCNN_CHECK(n_anchors == 0 || (labels && obj_weight && box_weight), "rpn_sample: NULL argument");
    size_t cap = (size_t)(n_anchors ? n_anchors : 1);
    int32_t *lab = MRCNN_MALLOC(cap * sizeof(int32_t), "rpn sample labels");
    int64_t *pos = MRCNN_MALLOC(cap * sizeof(int64_t), "rpn sampled positives");
    int64_t *neg = MRCNN_MALLOC(cap * sizeof(int64_t), "rpn sampled negatives");
    for (int64_t i = 0; i < n_anchors; i++) lab[i] = labels[i] > 0.5f ? 1 : (labels[i] == 0.0f ? 0 : -1);
    int64_t np = 0, nn = 0;
    mrcnn_sample_balanced(lab, n_anchors, batch_size, positive_fraction, rng, pos, &np, neg, &nn);
    if (n_anchors) {
        memset(obj_weight, 0, (size_t)n_anchors * sizeof(float));
        memset(box_weight, 0, (size_t)n_anchors * 4 * sizeof(float));
    }
    for (int64_t i = 0; i < np; i++) {
        obj_weight[pos[i]] = 1.0f;
        for (int k = 0; k < 4; k++) box_weight[pos[i] * 4 + k] = 1.0f;
    }
    for (int64_t i = 0; i < nn; i++) obj_weight[neg[i]] = 1.0f;
    free(lab);
    free(pos);
    free(neg);
    return np + nn;
}
