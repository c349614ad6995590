/* RPN training targets (assign_targets_to_anchors + encode) and the sampled-anchor
 * weights that turn torchvision's index-based losses into dense weighted sums. */
#include <stdlib.h>
#include <string.h>

#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/proposals.h"

void mrcnn_rpn_assign_targets(const float *anchors, int64_t n_anchors, const float *gt_boxes, int n_gt,
                              float fg_iou, float bg_iou, float *labels, float *reg_targets) {
    MRCNN_CHECK(n_anchors >= 0 && n_gt >= 0, "rpn_assign_targets: negative count (%lld anchors, %d gt)",
                (long long)n_anchors, n_gt);
    MRCNN_CHECK(n_anchors == 0 || (anchors && labels && reg_targets), "rpn_assign_targets: NULL argument");
    if (n_gt == 0) {
        /* Background image: all negatives; zero targets (never used, and finite). */
        for (int64_t i = 0; i < n_anchors; i++) labels[i] = 0.0f;
        if (n_anchors) memset(reg_targets, 0, (size_t)n_anchors * 4 * sizeof(float));
        return;
    }
    MRCNN_CHECK(gt_boxes, "rpn_assign_targets: NULL gt_boxes");
    float *iou = MRCNN_MALLOC((size_t)n_gt * (size_t)n_anchors * sizeof(float), "rpn iou matrix");
    int32_t *m = MRCNN_MALLOC((size_t)(n_anchors ? n_anchors : 1) * sizeof(int32_t), "rpn matches");
    mrcnn_box_iou(gt_boxes, n_gt, anchors, n_anchors, iou);
    mrcnn_matcher_match(iou, n_gt, n_anchors, fg_iou, bg_iou, 1, m);
    free(iou);
    mrcnn_box_coder coder = mrcnn_box_coder_make(1.0f, 1.0f, 1.0f, 1.0f);
    for (int64_t i = 0; i < n_anchors; i++) {
        int32_t g = m[i] < 0 ? 0 : m[i];
        labels[i] = m[i] >= 0 ? 1.0f : (m[i] == MRCNN_MATCH_BELOW_LOW ? 0.0f : -1.0f);
        mrcnn_box_encode(&coder, 1, gt_boxes + 4 * g, anchors + 4 * i, reg_targets + 4 * i);
    }
    free(m);
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
