/* The host side of Mask R-CNN's results: inference (mrcnn_model_detect: the box head on
 * every proposal, the host's postprocessing, the mask head on the detections) and the
 * tests' view of a training step (mrcnn_model_read_step). Both read device tensors back;
 * the training path reads nothing here. */
#include "mrcnn/check.h"
#include "mrcnn/model.h"
#include "mrcnn/postprocess.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

static float *read_host(const mrcnn_backend *be, const mrcnn_tensor *t) {
    int64_t n = mrcnn_tensor_numel(t);
    float *h = MRCNN_MALLOC((size_t)(n ? n : 1) * sizeof(float), "host copy");
    mrcnn_read_f32(be, t, h);
    return h;
}

/* Host copies of the proposals (inference, tests). */
static void read_proposals(const mrcnn_model *m, mrcnn_step *st) {
    int N = st->n_images, P = st->prop_cap;
    free(st->proposals);
    free(st->proposal_scores);
    free(st->proposal_counts);
    st->proposals = MRCNN_MALLOC((size_t)N * P * 4 * sizeof(float) + 1, "proposals");
    st->proposal_scores = MRCNN_MALLOC((size_t)N * P * sizeof(float) + 1, "proposal scores");
    st->proposal_counts = MRCNN_MALLOC((size_t)N * sizeof(int64_t), "proposal counts");
    int32_t *cnt = MRCNN_MALLOC((size_t)N * sizeof(int32_t), "proposal counts");
    if ((int64_t)N * P > 0) {
        m->be->mem.read(m->be, &st->proposals_dev, st->proposals);
        m->be->mem.read(m->be, &st->proposal_scores_dev, st->proposal_scores);
    }
    m->be->mem.read(m->be, &st->proposal_counts_dev, cnt);
    for (int i = 0; i < N; i++) st->proposal_counts[i] = cnt[i];
    free(cnt);
}

/* Rows of a compacted (rows, 5) ROI tensor up to the first padding row, as host arrays. */
static int read_valid_rois(const mrcnn_backend *be, const mrcnn_tensor *rois, const mrcnn_tensor *labels,
                           float **h_rois, int32_t **h_labels) {
    int64_t rows = rois->shape[0];
    float *r = MRCNN_MALLOC((size_t)(rows ? rows : 1) * 5 * sizeof(float), "rois");
    int32_t *l = MRCNN_MALLOC((size_t)(rows ? rows : 1) * sizeof(int32_t), "roi labels");
    if (rows) {
        be->mem.read(be, rois, r);
        be->mem.read(be, labels, l);
    }
    int n = 0;
    while (n < rows && r[n * 5] >= 0) n++;
    *h_rois = r;
    *h_labels = l;
    return n;
}

void mrcnn_model_read_step(const mrcnn_model *m, mrcnn_step *st) {
    const mrcnn_backend *be = m->be;
    int N = st->n_images;
    mrcnn_model_read_losses(m, st, &st->losses);
    float counts[3];
    be->mem.read(be, &st->counts_dev, counts);
    st->rpn_sampled = counts[0];
    read_proposals(m, st);
    free(st->rois);
    free(st->roi_labels);
    free(st->roi_image_start);
    free(st->fg_rois);
    free(st->fg_labels);
    free(st->fg_gt);
    int R = read_valid_rois(be, &st->rois_dev, &st->roi_labels_dev, &st->rois, &st->roi_labels);
    st->roi_image_start = MRCNN_CALLOC((size_t)N + 1, sizeof(int), "roi image starts");
    for (int i = 0, r = 0; i <= N; i++) {
        while (r < R && (int)st->rois[r * 5] < i) r++;
        st->roi_image_start[i] = r;
    }
    int Rf = read_valid_rois(be, &st->fg_rois_dev, &st->fg_labels_dev, &st->fg_rois, &st->fg_labels);
    st->fg_gt = MRCNN_MALLOC((size_t)(st->n_fg ? st->n_fg : 1) * sizeof(int32_t), "fg gt");
    if (st->n_fg) be->mem.read(be, &st->fg_gt_dev, st->fg_gt);
    for (int r = 0; r < Rf; r++) st->fg_gt[r] -= (int)st->fg_rois[r * 5] * st->gt.max_gt;
}

/* ---- inference ------------------------------------------------------------------ */

void mrcnn_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_step *st,
                        mrcnn_detections *det) {
    const mrcnn_config *c = &m->cfg;
    mrcnn_model_forward_features(m, ws, b, st);
    mrcnn_model_proposals(m, ws, false, st);
    read_proposals(m, st);
    int N = st->n_images, K = m->num_classes, D = c->roi_detections_per_image;
    int M = 2 * c->mask_head_pooler_resolution;
    // every proposal goes through the box head
    int R = 0;
    for (int i = 0; i < N; i++) R += (int)st->proposal_counts[i];
    st->rois = MRCNN_MALLOC((size_t)(R ? R : 1) * 5 * sizeof(float), "rois");
    st->roi_image_start = MRCNN_CALLOC((size_t)N + 1, sizeof(int), "roi image starts");
    R = 0;
    for (int i = 0; i < N; i++) {
        st->roi_image_start[i] = R;
        for (int j = 0; j < st->proposal_counts[i]; j++, R++) {
            st->rois[R * 5] = (float)i;
            memcpy(st->rois + R * 5 + 1, st->proposals + ((size_t)i * st->prop_cap + j) * 4,
                   4 * sizeof(float));
        }
    }
    st->roi_image_start[N] = R;
    st->n_rois = R;
    st->rois_dev = model_upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){R, 5}, st->rois);
    model_run_box_head(m, ws, st);
    float *logits = read_host(m->be, &st->box.logits);
    float *deltas = read_host(m->be, &st->box.deltas);
    memset(det, 0, sizeof *det);
    det->n_images = N;
    det->cap = D;
    det->mask_size = M;
    det->boxes = MRCNN_CALLOC((size_t)N * D * 4, sizeof(float), "detections");
    det->scores = MRCNN_CALLOC((size_t)N * D, sizeof(float), "detection scores");
    det->labels = MRCNN_CALLOC((size_t)N * D, sizeof(int32_t), "detection labels");
    det->counts = MRCNN_CALLOC((size_t)N, sizeof(int), "detection counts");
    det->mask_probs = MRCNN_CALLOC((size_t)N * D * M * M, sizeof(float), "mask probabilities");
    mrcnn_detect_params dp = {
        .num_classes = K,
        .score_thresh = c->roi_score_thresh_test,
        .nms_thresh = c->roi_nms_thresh_test,
        .max_detections = D,
        .min_size = 1e-2f,
        .coder = mrcnn_box_coder_make(c->box_reg_weights.v[0], c->box_reg_weights.v[1],
                                      c->box_reg_weights.v[2], c->box_reg_weights.v[3]),
    };
    int Rf = 0;
    for (int i = 0; i < N; i++) {
        int r0 = st->roi_image_start[i], n = st->roi_image_start[i + 1] - r0;
        float *pb = MRCNN_MALLOC((size_t)(n ? n : 1) * 4 * sizeof(float), "proposal boxes");
        for (int j = 0; j < n; j++) memcpy(pb + j * 4, st->rois + (r0 + j) * 5 + 1, 4 * sizeof(float));
        det->counts[i] = mrcnn_detect_postprocess(&dp, n, logits + (size_t)r0 * K,
                                                  deltas + (size_t)r0 * K * 4, pb, b->image_hw[2 * i],
                                                  b->image_hw[2 * i + 1], det->boxes + (size_t)i * D * 4,
                                                  det->scores + (size_t)i * D,
                                                  det->labels + (size_t)i * D);
        Rf += det->counts[i];
        free(pb);
    }
    free(logits);
    free(deltas);
    // the mask head runs on the detections
    st->fg_rois = MRCNN_MALLOC((size_t)(Rf ? Rf : 1) * 5 * sizeof(float), "detection rois");
    st->fg_labels = MRCNN_MALLOC((size_t)(Rf ? Rf : 1) * sizeof(int32_t), "detection labels");
    Rf = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < det->counts[i]; j++, Rf++) {
            st->fg_rois[Rf * 5] = (float)i;
            memcpy(st->fg_rois + Rf * 5 + 1, det->boxes + ((size_t)i * D + j) * 4, 4 * sizeof(float));
            st->fg_labels[Rf] = det->labels[(size_t)i * D + j];
        }
    st->n_fg = Rf;
    st->fg_rois_dev = model_upload(ws, MRCNN_DTYPE_F32, 2, (int64_t[]){Rf, 5}, st->fg_rois);
    model_run_mask_head(m, ws, st);
    if (Rf > 0) {
        float *ml = read_host(m->be, &st->mask.logits);
        float *probs = MRCNN_MALLOC((size_t)Rf * M * M * sizeof(float), "mask probs");
        mrcnn_mask_probs(Rf, M, K, ml, st->fg_labels, probs);
        Rf = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < det->counts[i]; j++, Rf++)
                memcpy(det->mask_probs + ((size_t)i * D + j) * M * M, probs + (size_t)Rf * M * M,
                       (size_t)M * M * sizeof(float));
        free(ml);
        free(probs);
    }
}

void mrcnn_detections_free(mrcnn_detections *det) {
    free(det->boxes);
    free(det->scores);
    free(det->labels);
    free(det->counts);
    free(det->mask_probs);
    memset(det, 0, sizeof *det);
}
