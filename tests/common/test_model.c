#include "test_model.h"

#include <stdlib.h>

#include "mrcnn/check.h"
#include "mrcnn/half.h"

/* Host copies of the proposals. */
static void read_proposals(const mrcnn_model *m, mrcnn_pass *st) {
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

void test_model_read_pass(const mrcnn_model *m, mrcnn_pass *st) {
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

void test_model_detect(mrcnn_model *m, mrcnn_ws *ws, const mrcnn_batch *b, mrcnn_pass *st, mrcnn_detections *det) {
    mrcnn_model_predict(m, ws, b, st, det);
    read_proposals(m, st);
}

void test_read_f32(const mrcnn_backend *be, const mrcnn_tensor *t, float *host) {
    int64_t n = mrcnn_tensor_numel(t);
    if (!n) return;
    if (t->dtype == MRCNN_DTYPE_F32) {
        be->mem.read(be, t, host);
        return;
    }
    MRCNN_CHECK(t->dtype == MRCNN_DTYPE_F16 || t->dtype == MRCNN_DTYPE_BF16,
                "read_f32: dtype %s is not fp32, fp16 or bf16", mrcnn_dtype_name(t->dtype));
    uint16_t *h = MRCNN_MALLOC((size_t)n * sizeof(uint16_t), "16-bit host copy");
    be->mem.read(be, t, h);
    for (int64_t i = 0; i < n; i++)
        host[i] = t->dtype == MRCNN_DTYPE_F16 ? mrcnn_f16_to_f32(h[i]) : mrcnn_bf16_to_f32(h[i]);
    free(h);
}

void test_losses_to_array(const mrcnn_losses *l, double *out) {
    out[0] = l->rpn_objectness;
    out[1] = l->rpn_box_reg;
    out[2] = l->classifier;
    out[3] = l->box_reg;
    out[4] = l->mask;
}
