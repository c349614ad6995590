/* The host side of Mask R-CNN's results: inference (mrcnn_model_predict: the box head on
 * every proposal, the post-processing and the mask head on the detections, all backend
 * ops, then one read of the batch's results). */
#include "mrcnn/boxes.h"
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- inference ------------------------------------------------------------------ */

/* The batch's results in one device buffer, so that they come back in one read: fp32
 * words, rows first (the ROIAlign input of the mask head starts the allocation). */
typedef struct {
    mrcnn_tensor all;    // (ND * (7 + M * M) + 1) fp32
    mrcnn_tensor rows;   // (ND, 5) fp32 (image, x1, y1, x2, y2), valid rows first
    mrcnn_tensor scores; // (ND) fp32
    mrcnn_tensor labels; // (ND) int32 (the same words, other type)
    mrcnn_tensor probs;  // (ND, M, M) fp32
    mrcnn_tensor count;  // (1) fp32
} det_packed;

static det_packed det_packed_make(mrcnn_ws *ws, int64_t ND, int M) {
    det_packed p;
    const int64_t mm = (int64_t)M * M;
    // zeroed: on a backend that trims the mask head, rows past the count are never written
    p.all = mrcnn_ws_tensor(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){ND * (7 + mm) + 1});
    float *base = (float *)p.all.data;
    mrcnn_device dev = p.all.device;
    p.rows = mrcnn_tensor_view(base, MRCNN_DTYPE_F32, dev, 2, (int64_t[]){ND, 5});
    p.scores = mrcnn_tensor_view(base + ND * 5, MRCNN_DTYPE_F32, dev, 1, (int64_t[]){ND});
    p.labels = mrcnn_tensor_view(base + ND * 6, MRCNN_DTYPE_I32, dev, 1, (int64_t[]){ND});
    p.probs = mrcnn_tensor_view(base + ND * 7, MRCNN_DTYPE_F32, dev, 3, (int64_t[]){ND, M, M});
    p.count = mrcnn_tensor_view(base + ND * (7 + mm), MRCNN_DTYPE_F32, dev, 1, (int64_t[]){1});
    return p;
}

/* The host copy of the packed buffer into det (per image, D rows each). */
static void det_unpack(const float *h, int N, int D, int M, mrcnn_detections *det) {
    const int64_t ND = (int64_t)N * D, mm = (int64_t)M * M;
    memset(det, 0, sizeof *det);
    det->n_images = N;
    det->cap = D;
    det->mask_size = M;
    det->boxes = MRCNN_CALLOC((size_t)ND * 4, sizeof(float), "detections");
    det->scores = MRCNN_CALLOC((size_t)ND, sizeof(float), "detection scores");
    det->labels = MRCNN_CALLOC((size_t)ND, sizeof(int32_t), "detection labels");
    det->counts = MRCNN_CALLOC((size_t)N, sizeof(int), "detection counts");
    det->mask_probs = MRCNN_CALLOC((size_t)ND * mm, sizeof(float), "mask probabilities");
    const int64_t n = (int64_t)h[ND * (7 + mm)];
    MRCNN_CHECK(n >= 0 && n <= ND, "detect: %lld detections, capacity %lld", (long long)n, (long long)ND);
    const float *rows = h, *scores = h + ND * 5, *probs = h + ND * 7;
    const int32_t *labels = (const int32_t *)(h + ND * 6);
    for (int64_t r = 0; r < n; r++) {
        const int i = (int)rows[r * 5];
        MRCNN_CHECK(i >= 0 && i < N && det->counts[i] < D && (r == 0 || i >= (int)rows[(r - 1) * 5]),
                    "detect: row %lld names image %d out of order (of %d)", (long long)r, i, N);
        const int64_t o = (int64_t)i * D + det->counts[i]++;
        memcpy(det->boxes + o * 4, rows + r * 5 + 1, 4 * sizeof(float));
        det->scores[o] = scores[r];
        det->labels[o] = labels[r];
        memcpy(det->mask_probs + o * mm, probs + r * mm, (size_t)mm * sizeof(float));
    }
}

void mrcnn_model_predict(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st,
                         mrcnn_detections *det) {
    const mrcnn_config *c = &m->cfg;
    const mrcnn_backend *be = m->be;
    mrcnn_model_forward_features(m, ws, b, st);
    mrcnn_model_proposals(m, ws, false, st);
    const int N = st->n_images, P = st->prop_cap, D = c->roi_detections_per_image;
    const int M = 2 * c->mask_head_pooler_resolution;
    const int64_t NP = (int64_t)N * P, ND = (int64_t)N * D;
    det_packed out = det_packed_make(ws, ND, M);
    // every proposal goes through the box head: the valid rows when the backend can tell
    // their count without a wait, the whole capacity (padding rows skipped) otherwise
    mrcnn_tensor rois = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){NP, 5});
    mrcnn_tensor n_rois = mrcnn_ws_tensor_uninit(ws, MRCNN_DTYPE_F32, 1, (int64_t[]){1});
    be->det.proposal_rois(be, &st->proposals_dev, &st->proposal_counts_dev, &rois, &n_rois);
    int64_t R = count_hint(be, &n_rois);
    st->n_rois = (int)(R >= 0 ? R : NP);
    st->rois_dev = rows_view(&rois, st->n_rois);
    model_run_box_head(m, ws, st);
    const mrcnn_detect_desc dd = {
        .n_images = N,
        .num_classes = m->num_classes,
        .max_detections = D,
        .score_thresh = c->roi_score_thresh_test,
        .nms_thresh = c->roi_nms_thresh_test,
        .min_size = 1e-2f, // torchvision's, not a config key
        .coder = mrcnn_box_coder_make(c->box_reg_weights.v[0], c->box_reg_weights.v[1], c->box_reg_weights.v[2],
                                      c->box_reg_weights.v[3]),
    };
    be->det.detect_boxes(be, &dd, &st->box.logits, &st->box.deltas, &st->rois_dev, &st->image_hw_dev, &out.rows,
                         &out.scores, &out.labels, &out.count);
    // the mask head runs on the detections, then the chosen class's probabilities
    int64_t Rf = count_hint(be, &out.count);
    st->n_fg = (int)(Rf >= 0 ? Rf : ND);
    st->fg_rois_dev = rows_view(&out.rows, st->n_fg);
    st->fg_labels_dev = rows_view(&out.labels, st->n_fg);
    model_run_mask_head(m, ws, st);
    if (st->n_fg > 0) {
        mrcnn_tensor probs = rows_view(&out.probs, st->n_fg);
        be->det.mask_probs(be, &st->mask.logits, &st->fg_labels_dev, &probs);
    }
    float *h = MRCNN_MALLOC(mrcnn_tensor_nbytes(&out.all), "detections host copy");
    be->mem.read(be, &out.all, h); // the batch's one read
    det_unpack(h, N, D, M, det);
    free(h);
}

void mrcnn_detections_free(mrcnn_detections *det) {
    free(det->boxes);
    free(det->scores);
    free(det->labels);
    free(det->counts);
    free(det->mask_probs);
    memset(det, 0, sizeof *det);
}
