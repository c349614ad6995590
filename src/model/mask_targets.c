/* Mask targets (torchvision's project_masks_on_boxes: roi_align of the binary gt mask,
 * scale 1, adaptive sampling, aligned = False) and the per-class gathers of the box and
 * mask losses. The bilinear sampling reads the uint8 masks directly, with the float
 * arithmetic of the ROIAlign kernel, so no float copy of a full-image mask is made. */
#include <math.h>
#include <string.h>

#include "mrcnn/check.h"
#include "mrcnn/roi_targets.h"

static float mask_bilinear(const uint8_t *m, int H, int W, float y, float x) {
    if (y < -1.0f || y > (float)H || x < -1.0f || x > (float)W) return 0.0f;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int yl = (int)y, xl = (int)x, yh, xh;
    if (yl >= H - 1) {
        yh = yl = H - 1;
        y = (float)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= W - 1) {
        xh = xl = W - 1;
        x = (float)xl;
    } else {
        xh = xl + 1;
    }
    float ly = y - (float)yl, lx = x - (float)xl, hy = 1.0f - ly, hx = 1.0f - lx;
    float v1 = m[(int64_t)yl * W + xl] ? 1.0f : 0.0f, v2 = m[(int64_t)yl * W + xh] ? 1.0f : 0.0f;
    float v3 = m[(int64_t)yh * W + xl] ? 1.0f : 0.0f, v4 = m[(int64_t)yh * W + xh] ? 1.0f : 0.0f;
    return hy * hx * v1 + hy * lx * v2 + ly * hx * v3 + ly * lx * v4;
}

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
        const float *b = boxes + 4 * i;
        float x0 = b[0], y0 = b[1];
        float rw = b[2] - b[0], rh = b[3] - b[1];
        rw = rw > 1.0f ? rw : 1.0f;
        rh = rh > 1.0f ? rh : 1.0f;
        float bh = rh / (float)m, bw = rw / (float)m;
        int gh = (int)ceilf(rh / (float)m), gw = (int)ceilf(rw / (float)m);
        float cnt = (float)(gh * gw > 1 ? gh * gw : 1);
        float *out = targets + (int64_t)i * m * m;
        for (int ph = 0; ph < m; ph++)
            for (int pw = 0; pw < m; pw++) {
                float acc = 0.0f;
                for (int iy = 0; iy < gh; iy++) {
                    float y = y0 + (float)ph * bh + (float)(iy + .5f) * bh / (float)gh;
                    for (int ix = 0; ix < gw; ix++) {
                        float x = x0 + (float)pw * bw + (float)(ix + .5f) * bw / (float)gw;
                        acc += mask_bilinear(mask, img_h, img_w, y, x);
                    }
                }
                out[ph * m + pw] = acc / cnt;
            }
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
