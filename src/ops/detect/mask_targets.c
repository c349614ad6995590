/* Mask targets (torchvision's project_masks_on_boxes: roi_align of the binary gt mask,
 * scale 1, adaptive sampling, aligned = False) and the per-class gathers of the box and
 * mask losses. The sampling is box_math.h's (ROIAlign's frame and taps over the uint8
 * mask), shared with the CUDA kernel. */
#include <math.h>
#include <string.h>

#include "mrcnn/box_math.h"
#include "mrcnn/check.h"
#include "mrcnn/roi_targets.h"

void mrcnn_mask_targets(const uint8_t *gt_masks, int n_gt, int img_h, int img_w, const float *boxes,
                        const int32_t *gt_index, int n, int m, float *targets) {
    MRCNN_CHECK(n >= 0 && m > 0 && img_h > 0 && img_w > 0, "mask_targets: %d rois, size %d, image %dx%d", n, m, img_h,
                img_w);
    MRCNN_CHECK(n == 0 || (gt_masks && boxes && gt_index && targets), "mask_targets: NULL argument");
    const int64_t hw = (int64_t)img_h * img_w;
    for (int i = 0; i < n; i++)
        MRCNN_CHECK(gt_index[i] >= 0 && gt_index[i] < n_gt, "mask_targets: roi %d matched gt %d outside [0, %d)", i,
                    gt_index[i], n_gt);
#pragma omp parallel for schedule(dynamic, 4)
    for (int i = 0; i < n; i++) {
        const uint8_t *mask = gt_masks + gt_index[i] * hw;
        float *out = targets + (int64_t)i * m * m;
        /* roi_align(mask, box, (m, m), spatial_scale 1, sampling_ratio -1, aligned False);
         * a box that cannot be sampled (non-finite) gets zeros, as ROIAlign gives it. */
        mrcnn_roi_frame f;
        if (!mrcnn_roi_frame_make(boxes + 4 * i, 1.0f, 0, m, m, 0, &f)) {
            memset(out, 0, (size_t)m * m * sizeof(float));
            continue;
        }
        for (int ph = 0; ph < m; ph++)
            for (int pw = 0; pw < m; pw++) out[ph * m + pw] = mrcnn_mask_roi_bin(mask, img_h, img_w, &f, ph, pw);
    }
}

void mrcnn_mask_targets_cropped(const uint8_t *pool, int64_t pool_bytes, const int32_t *crops, int n_gt, int img_h,
                                int img_w, const float *boxes, const int32_t *gt_index, int n, int m, float *targets) {
    MRCNN_CHECK(n >= 0 && m > 0 && img_h > 0 && img_w > 0, "mask_targets: %d rois, size %d, image %dx%d", n, m, img_h,
                img_w);
    MRCNN_CHECK(n == 0 || (pool && crops && boxes && gt_index && targets), "mask_targets: NULL argument");
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(gt_index[i] >= 0 && gt_index[i] < n_gt, "mask_targets: roi %d matched gt %d outside [0, %d)", i,
                    gt_index[i], n_gt);
        const mrcnn_mask_crop c = mrcnn_mask_crop_load(crops + (int64_t)gt_index[i] * MRCNN_MASK_CROP_WORDS);
        MRCNN_CHECK(c.y0 >= 0 && c.x0 >= 0 && c.h >= 0 && c.w >= 0 && c.y0 + c.h <= img_h && c.x0 + c.w <= img_w &&
                        c.offset >= 0 && c.offset + (int64_t)c.h * c.w <= pool_bytes,
                    "mask_targets: gt %d's crop (%d, %d) %dx%d at %lld is outside the %dx%d image or the %lld-byte "
                    "pool",
                    gt_index[i], c.y0, c.x0, c.h, c.w, (long long)c.offset, img_h, img_w, (long long)pool_bytes);
    }
#pragma omp parallel for schedule(dynamic, 4)
    for (int i = 0; i < n; i++) {
        const mrcnn_mask_crop c = mrcnn_mask_crop_load(crops + (int64_t)gt_index[i] * MRCNN_MASK_CROP_WORDS);
        float *out = targets + (int64_t)i * m * m;
        mrcnn_roi_frame f; // as mrcnn_mask_targets: a box that cannot be sampled gets zeros
        if (!mrcnn_roi_frame_make(boxes + 4 * i, 1.0f, 0, m, m, 0, &f)) {
            memset(out, 0, (size_t)m * m * sizeof(float));
            continue;
        }
        for (int ph = 0; ph < m; ph++)
            for (int pw = 0; pw < m; pw++)
                out[ph * m + pw] = mrcnn_mask_crop_roi_bin(pool, &c, img_h, img_w, &f, ph, pw);
    }
}

void mrcnn_gather_class_deltas(int n, int k, const float *deltas, const int32_t *labels, float *out) {
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(labels[i] < k, "gather_class_deltas: roi %d label %d outside [0, %d)", i, labels[i], k);
        if (labels[i] < 0) {
            memset(out + 4 * i, 0, 4 * sizeof(float));
            continue;
        }
        memcpy(out + 4 * i, deltas + ((int64_t)i * k + labels[i]) * 4, 4 * sizeof(float));
    }
}

void mrcnn_gather_class_deltas_backward(int n, int k, const float *dout, const int32_t *labels, float *ddeltas) {
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(labels[i] < k, "gather_class_deltas_backward: roi %d label %d outside [0, %d)", i, labels[i], k);
        if (labels[i] < 0) continue;
        float *g = ddeltas + ((int64_t)i * k + labels[i]) * 4;
        for (int j = 0; j < 4; j++) g[j] += dout[4 * i + j];
    }
}

void mrcnn_gather_class_masks(int n, int m, int k, const float *logits, const int32_t *labels, float *out) {
    const int64_t mm = (int64_t)m * m;
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(labels[i] < k, "gather_class_masks: roi %d label %d outside [0, %d)", i, labels[i], k);
        float *o = out + i * mm;
        if (labels[i] < 0) {
            memset(o, 0, (size_t)mm * sizeof(float));
            continue;
        }
        const float *x = logits + i * mm * k + labels[i];
        for (int64_t p = 0; p < mm; p++) o[p] = x[p * k];
    }
}

void mrcnn_gather_class_masks_backward(int n, int m, int k, const float *dout, const int32_t *labels,
                                       float *dlogits) {
    const int64_t mm = (int64_t)m * m;
    for (int i = 0; i < n; i++) {
        MRCNN_CHECK(labels[i] < k, "gather_class_masks_backward: roi %d label %d outside [0, %d)", i, labels[i], k);
        if (labels[i] < 0) continue;
        float *g = dlogits + i * mm * k + labels[i];
        const float *d = dout + i * mm;
        for (int64_t p = 0; p < mm; p++) g[p * k] += d[p];
    }
}
