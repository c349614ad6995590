/* ROI-head training samples (torchvision's select_training_samples): gt boxes appended
 * to the proposals, matched at one IoU threshold, balanced sampling, and the box
 * regression targets, into fixed-capacity per-image arrays. */
#include <stdlib.h>
#include <string.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/roi_targets.h"

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int mrcnn_roi_sample(const mrcnn_roi_sample_params *p, const float *proposals, int n_prop,
                     const float *gt_boxes, const int32_t *gt_labels, int n_gt, const mrcnn_rng *rng,
                     float *rois, int32_t *labels, int32_t *matched_gt, float *reg_targets, int32_t *fg_index,
                     int *n_fg) {
    MRCNN_CHECK(p && rois && labels && matched_gt && reg_targets && fg_index && n_fg, "roi_sample: NULL argument");
    MRCNN_CHECK(n_prop >= 0 && n_gt >= 0, "roi_sample: negative count (%d proposals, %d gt)", n_prop, n_gt);
    MRCNN_CHECK((n_prop == 0 || proposals) && (n_gt == 0 || (gt_boxes && gt_labels)), "roi_sample: NULL boxes");
    const int S = p->batch_size_per_image;
    MRCNN_CHECK(S > 0 && p->max_fg > 0, "roi_sample: batch size per image %d and max fg %d must be positive", S,
                p->max_fg);
    const int64_t n = (int64_t)n_prop + n_gt;
    MRCNN_CHECK(n > 0, "roi_sample: no proposals and no gt boxes");
    for (int g = 0; g < n_gt; g++)
        MRCNN_CHECK(gt_labels[g] > 0, "roi_sample: gt %d has label %d, must be >= 1 (0 is background)", g, gt_labels[g]);
    float *cand = MRCNN_MALLOC((size_t)n * 4 * sizeof(float), "roi candidates");
    if (n_prop) memcpy(cand, proposals, (size_t)n_prop * 4 * sizeof(float));
    if (n_gt) memcpy(cand + (int64_t)n_prop * 4, gt_boxes, (size_t)n_gt * 4 * sizeof(float));
    int32_t *match = MRCNN_MALLOC((size_t)n * sizeof(int32_t), "roi matches");
    int32_t *lab = MRCNN_MALLOC((size_t)n * sizeof(int32_t), "roi labels");
    if (n_gt) {
        float *iou = MRCNN_MALLOC((size_t)n_gt * (size_t)n * sizeof(float), "roi iou matrix");
        mrcnn_box_iou(gt_boxes, n_gt, cand, n, iou);
        mrcnn_matcher_match(iou, n_gt, n, p->iou_thresh, p->iou_thresh, 0, match);
        free(iou);
    } else {
        for (int64_t i = 0; i < n; i++) match[i] = MRCNN_MATCH_BELOW_LOW;
    }
    for (int64_t i = 0; i < n; i++) {
        if (match[i] >= 0) {
            lab[i] = gt_labels[match[i]];
        } else {
            lab[i] = match[i] == MRCNN_MATCH_BELOW_LOW ? 0 : -1;
        }
    }
    int64_t *sel = MRCNN_MALLOC((size_t)n * sizeof(int64_t), "roi sampled");
    int64_t *neg = MRCNN_MALLOC((size_t)n * sizeof(int64_t), "roi sampled negatives");
    int64_t np = 0, nn = 0;
    mrcnn_sample_balanced(lab, n, S, p->positive_fraction, rng, sel, &np, neg, &nn);
    memcpy(sel + np, neg, (size_t)nn * sizeof(int64_t));
    free(neg);
    const int64_t count = np + nn;
    if (np > p->max_fg) {
        free(cand);
        free(match);
        free(lab);
        free(sel);
        MRCNN_CHECK(0, "roi_sample: %lld sampled positives exceed MODEL.ROI_MASK_HEAD.MAX_FG_PER_IMAGE = %d",
                    (long long)np, p->max_fg);
    }
    qsort(sel, (size_t)count, sizeof(int64_t), cmp_i64);
    memset(rois, 0, (size_t)S * 4 * sizeof(float));
    memset(reg_targets, 0, (size_t)S * 4 * sizeof(float));
    memset(matched_gt, 0, (size_t)S * sizeof(int32_t));
    memset(fg_index, 0, (size_t)p->max_fg * sizeof(int32_t));
    int nf = 0;
    for (int64_t t = 0; t < S; t++) labels[t] = -1;
    for (int64_t t = 0; t < count; t++) {
        int64_t i = sel[t];
        memcpy(rois + 4 * t, cand + 4 * i, 4 * sizeof(float));
        labels[t] = lab[i];
        matched_gt[t] = match[i] < 0 ? 0 : match[i];
        if (lab[i] > 0) {
            mrcnn_box_encode(&p->coder, 1, gt_boxes + 4 * match[i], cand + 4 * i, reg_targets + 4 * t);
            fg_index[nf++] = (int32_t)t;
        }
    }
    *n_fg = nf;
    free(cand);
    free(match);
    free(lab);
    free(sel);
    return (int)count;
}
