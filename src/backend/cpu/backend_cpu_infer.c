/* The CPU backend's inference ops (detect_ops.h: proposal_rois, detect_boxes,
 * mask_probs) over the host post-processing of postprocess.h, so that the CPU's
 * detections are exactly what that code computes. As the training detection ops
 * (backend_cpu_detect.c) they read and write host memory directly: no be->mem.read,
 * so the CPU backend's counters show the reads the same inference makes on a GPU. */
#include <stdlib.h>
#include <string.h>

#include "mrcnn/backend.h"
#include "mrcnn/check.h"
#include "mrcnn/half.h"
#include "mrcnn/postprocess.h"

static void check_host(const mrcnn_tensor *t, mrcnn_dtype dt, int64_t numel, const char *op, const char *what) {
    MRCNN_CHECK(t != NULL && t->device == MRCNN_DEVICE_CPU, "%s: %s must be a host tensor", op, what);
    MRCNN_CHECK(t->dtype == dt, "%s: %s is %s, expected %s", op, what, mrcnn_dtype_name(t->dtype),
                mrcnn_dtype_name(dt));
    MRCNN_CHECK(mrcnn_tensor_numel(t) == numel, "%s: %s has %lld elements, expected %lld", op, what,
                (long long)mrcnn_tensor_numel(t), (long long)numel);
    MRCNN_CHECK(numel == 0 || t->data != NULL, "%s: %s has no data", op, what);
}

/* x as fp32: its own memory when fp32, else a copy with each 16-bit value widened
 * exactly (so the values are those the host post-processing used to read back). */
static const float *as_f32(const mrcnn_tensor *x, int64_t numel, float **own, const char *op, const char *what) {
    *own = NULL;
    MRCNN_CHECK(x != NULL && x->device == MRCNN_DEVICE_CPU, "%s: %s must be a host tensor", op, what);
    MRCNN_CHECK(mrcnn_tensor_numel(x) == numel, "%s: %s has %lld elements, expected %lld", op, what,
                (long long)mrcnn_tensor_numel(x), (long long)numel);
    if (x->dtype == MRCNN_DTYPE_F32) return (const float *)x->data;
    MRCNN_CHECK(x->dtype == MRCNN_DTYPE_F16 || x->dtype == MRCNN_DTYPE_BF16, "%s: %s is %s, not a float dtype", op,
                what, mrcnn_dtype_name(x->dtype));
    float *h = MRCNN_MALLOC((size_t)(numel ? numel : 1) * sizeof(float), "fp32 copy");
    const uint16_t *s = (const uint16_t *)x->data;
    for (int64_t i = 0; i < numel; i++)
        h[i] = x->dtype == MRCNN_DTYPE_F16 ? mrcnn_f16_to_f32(s[i]) : mrcnn_bf16_to_f32(s[i]);
    *own = h;
    return h;
}

static void cpu_proposal_rois(const mrcnn_backend *be, const mrcnn_tensor *proposals, const mrcnn_tensor *counts,
                              mrcnn_tensor *rois, mrcnn_tensor *n_rois) {
    const char *op = "proposal_rois";
    MRCNN_CHECK(proposals && proposals->ndim == 3 && proposals->shape[2] == 4, "%s: proposals must be (N, P, 4)", op);
    const int64_t N = proposals->shape[0], P = proposals->shape[1];
    check_host(proposals, MRCNN_DTYPE_F32, N * P * 4, op, "proposals");
    check_host(counts, MRCNN_DTYPE_I32, N, op, "proposal counts");
    check_host(rois, MRCNN_DTYPE_F32, N * P * 5, op, "rois");
    check_host(n_rois, MRCNN_DTYPE_F32, 1, op, "roi count");
    const float *pr = (const float *)proposals->data;
    const int32_t *pc = (const int32_t *)counts->data;
    float *out = (float *)rois->data;
    int64_t R = 0;
    for (int64_t i = 0; i < N; i++) {
        MRCNN_CHECK(pc[i] >= 0 && pc[i] <= P, "%s: image %lld has %d proposals, capacity %lld", op, (long long)i,
                    pc[i], (long long)P);
        for (int j = 0; j < pc[i]; j++, R++) {
            out[R * 5] = (float)i;
            memcpy(out + R * 5 + 1, pr + (i * P + j) * 4, 4 * sizeof(float));
        }
    }
    for (int64_t r = R; r < N * P; r++) {
        out[r * 5] = -1.0f;
        memset(out + r * 5 + 1, 0, 4 * sizeof(float));
    }
    ((float *)n_rois->data)[0] = (float)R;
}

static void cpu_detect_boxes(const mrcnn_backend *be, const mrcnn_detect_desc *d, const mrcnn_tensor *logits,
                             const mrcnn_tensor *deltas, const mrcnn_tensor *rois, const mrcnn_tensor *image_hw,
                             mrcnn_tensor *boxes, mrcnn_tensor *scores, mrcnn_tensor *labels, mrcnn_tensor *count) {
    const char *op = "detect_boxes";
    MRCNN_CHECK(d && d->n_images >= 0 && d->num_classes >= 2 && d->max_detections > 0,
                "%s: %d images, %d classes (with background), %d detections", op, d ? d->n_images : -1,
                d ? d->num_classes : -1, d ? d->max_detections : -1);
    MRCNN_CHECK(rois && rois->ndim == 2 && rois->shape[1] == 5, "%s: rois must be (R, 5)", op);
    const int N = d->n_images, K = d->num_classes, D = d->max_detections;
    const int64_t R = rois->shape[0], ND = (int64_t)N * D;
    check_host(rois, MRCNN_DTYPE_F32, R * 5, op, "rois");
    check_host(image_hw, MRCNN_DTYPE_I32, (int64_t)N * 2, op, "image sizes");
    check_host(boxes, MRCNN_DTYPE_F32, ND * 5, op, "boxes");
    check_host(scores, MRCNN_DTYPE_F32, ND, op, "scores");
    check_host(labels, MRCNN_DTYPE_I32, ND, op, "labels");
    check_host(count, MRCNN_DTYPE_F32, 1, op, "count");
    float *own_l, *own_d;
    const float *lg = as_f32(logits, R * K, &own_l, op, "logits");
    const float *dl = as_f32(deltas, R * K * 4, &own_d, op, "deltas");
    const float *rr = (const float *)rois->data;
    const int32_t *hw = (const int32_t *)image_hw->data;
    float *ob = (float *)boxes->data, *os = (float *)scores->data;
    int32_t *ol = (int32_t *)labels->data;
    const mrcnn_detect_params p = {.num_classes = K,
                                   .score_thresh = d->score_thresh,
                                   .nms_thresh = d->nms_thresh,
                                   .max_detections = D,
                                   .min_size = d->min_size,
                                   .coder = d->coder};
    float *pb = MRCNN_MALLOC((size_t)(R ? R : 1) * 4 * sizeof(float), "proposal boxes");
    float *db = MRCNN_MALLOC((size_t)D * 4 * sizeof(float), "detection boxes");
    float *ds = MRCNN_MALLOC((size_t)D * sizeof(float), "detection scores");
    int32_t *dlab = MRCNN_MALLOC((size_t)D * sizeof(int32_t), "detection labels");
    int64_t out = 0, r = 0;
    for (int i = 0; i < N; i++) {
        // image i's rows: the next run of rows with index i (proposal_rois' order)
        const int64_t r0 = r;
        while (r < R && rr[r * 5] == (float)i) {
            memcpy(pb + (r - r0) * 4, rr + r * 5 + 1, 4 * sizeof(float));
            r++;
        }
        const int n = mrcnn_detect_postprocess(&p, (int)(r - r0), lg + r0 * K, dl + r0 * K * 4, pb, hw[2 * i],
                                               hw[2 * i + 1], db, ds, dlab);
        for (int j = 0; j < n; j++, out++) {
            ob[out * 5] = (float)i;
            memcpy(ob + out * 5 + 1, db + j * 4, 4 * sizeof(float));
            os[out] = ds[j];
            ol[out] = dlab[j];
        }
    }
    for (; r < R; r++)
        MRCNN_CHECK(rr[r * 5] < 0, "%s: row %lld of image %g is out of image order or past %d images", op, (long long)r,
                    (double)rr[r * 5], N);
    for (int64_t t = out; t < ND; t++) {
        ob[t * 5] = -1.0f;
        memset(ob + t * 5 + 1, 0, 4 * sizeof(float));
        os[t] = 0.0f;
        ol[t] = -1;
    }
    ((float *)count->data)[0] = (float)out;
    free(pb);
    free(db);
    free(ds);
    free(dlab);
    free(own_l);
    free(own_d);
}

static void cpu_mask_probs(const mrcnn_backend *be, const mrcnn_tensor *x, const mrcnn_tensor *labels,
                           mrcnn_tensor *y) {
    const char *op = "mask_probs";
    MRCNN_CHECK(x && x->ndim == 4 && x->shape[1] == x->shape[2], "%s: mask logits must be (R, M, M, K)", op);
    const int64_t R = x->shape[0], M = x->shape[1], K = x->shape[3], mm = M * M;
    check_host(labels, MRCNN_DTYPE_I32, R, op, "labels");
    check_host(y, MRCNN_DTYPE_F32, R * mm, op, "probabilities");
    float *own;
    const float *xf = as_f32(x, R * mm * K, &own, op, "mask logits");
    const int32_t *lab = (const int32_t *)labels->data;
    float *out = (float *)y->data;
    for (int64_t r = 0; r < R; r++) {
        if (lab[r] >= 0 && lab[r] < K) mrcnn_mask_probs(1, (int)M, (int)K, xf + r * mm * K, lab + r, out + r * mm);
        else memset(out + r * mm, 0, (size_t)mm * sizeof(float));
    }
    free(own);
}

void mrcnn_cpu_fill_infer_ops(mrcnn_backend *be) {
    be->det.proposal_rois = cpu_proposal_rois;
    be->det.detect_boxes = cpu_detect_boxes;
    be->det.mask_probs = cpu_mask_probs;
}
