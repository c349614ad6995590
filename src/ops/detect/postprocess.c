/* Detections for one image, as torchvision's RoIHeads.postprocess_detections:
 * softmax, per-class decode, clip, background dropped, score threshold, small boxes
 * dropped, per-class NMS, the best max_detections. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/postprocess.h"

int mrcnn_detect_postprocess(const mrcnn_detect_params *p, int r, const float *class_logits,
                             const float *box_deltas, const float *proposals, int img_h, int img_w,
                             float *boxes, float *scores, int32_t *labels) {
    MRCNN_CHECK(p && boxes && scores && labels, "detect_postprocess: NULL argument");
    MRCNN_CHECK(r >= 0 && (r == 0 || (class_logits && box_deltas && proposals)), "detect_postprocess: %d rois", r);
    const int K = p->num_classes, D = p->max_detections;
    MRCNN_CHECK(K >= 2 && D > 0, "detect_postprocess: %d classes (with background) and %d detections", K, D);
    memset(boxes, 0, (size_t)D * 4 * sizeof(float));
    memset(scores, 0, (size_t)D * sizeof(float));
    memset(labels, 0, (size_t)D * sizeof(int32_t));
    if (r == 0) return 0;
    const int64_t nc = (int64_t)r * (K - 1);
    float *dec = MRCNN_MALLOC((size_t)r * K * 4 * sizeof(float), "detect decoded boxes");
    float *prob = MRCNN_MALLOC((size_t)K * sizeof(float), "detect softmax");
    float *cb = MRCNN_MALLOC((size_t)nc * 4 * sizeof(float), "detect candidate boxes");
    float *cs = MRCNN_MALLOC((size_t)nc * sizeof(float), "detect candidate scores");
    int32_t *cl = MRCNN_MALLOC((size_t)nc * sizeof(int32_t), "detect candidate labels");
    int64_t *keep = MRCNN_MALLOC((size_t)nc * sizeof(int64_t), "detect keep");
    mrcnn_box_decode(&p->coder, r, K, box_deltas, proposals, dec);
    mrcnn_box_clip((int64_t)r * K, dec, img_h, img_w);
    int64_t n = 0;
    for (int i = 0; i < r; i++) {
        const float *x = class_logits + (int64_t)i * K;
        float mx = x[0];
        for (int k = 1; k < K; k++) mx = x[k] > mx ? x[k] : mx;
        float sum = 0.0f;
        for (int k = 0; k < K; k++) {
            prob[k] = expf(x[k] - mx);
            sum += prob[k];
        }
        for (int k = 1; k < K; k++) {
            float s = prob[k] / sum;
            const float *b = dec + ((int64_t)i * K + k) * 4;
            if (!(s > p->score_thresh) || !mrcnn_box_is_large(b, p->min_size)) continue;
            memcpy(cb + 4 * n, b, 4 * sizeof(float));
            cs[n] = s;
            cl[n] = k;
            n++;
        }
    }
    int64_t nk = mrcnn_batched_nms(cb, cs, cl, n, p->nms_thresh, keep);
    if (nk > D) nk = D;
    for (int64_t t = 0; t < nk; t++) {
        memcpy(boxes + 4 * t, cb + 4 * keep[t], 4 * sizeof(float));
        scores[t] = cs[keep[t]];
        labels[t] = cl[keep[t]];
    }
    free(dec);
    free(prob);
    free(cb);
    free(cs);
    free(cl);
    free(keep);
    return (int)nk;
}

void mrcnn_mask_probs(int n, int m, int k, const float *logits, const int32_t *labels, float *probs) {
    const int64_t mm = (int64_t)m * m;
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(labels[i] >= 0 && labels[i] < k, "mask_probs: detection %d label %d outside [0, %d)", i, labels[i],
                    k);
        const float *x = logits + i * mm * k + labels[i];
        for (int64_t q = 0; q < mm; q++) probs[i * mm + q] = 1.0f / (1.0f + expf(-x[q * k]));
    }
}

void mrcnn_boxes_rescale(int64_t n, float *boxes, int from_h, int from_w, int to_h, int to_w) {
    MRCNN_CHECK(from_h > 0 && from_w > 0 && to_h > 0 && to_w > 0, "boxes_rescale: sizes %dx%d -> %dx%d", from_h,
                from_w, to_h, to_w);
    const float rh = (float)to_h / (float)from_h, rw = (float)to_w / (float)from_w;
    for (int64_t i = 0; i < n; i++) {
        boxes[4 * i + 0] *= rw;
        boxes[4 * i + 1] *= rh;
        boxes[4 * i + 2] *= rw;
        boxes[4 * i + 3] *= rh;
    }
}
